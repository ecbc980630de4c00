"""Helpers shared by the order/model/beam tests: a random-init model built in-process through
fairseq's own parser, task and model registry (no training, no data files beyond dictionaries)."""
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary

from conftest import PLUGIN_DIR
from fairseq_plugins.decoding.multi_token_beam import MultiTokenBeamSearch
from fairseq_plugins.decoding.options import GenerationOptions
from fairseq_plugins.decoding.search import build_search

ORDER_CASES = [  # (name, h, c, extra flags): every order of docs/METHODS.md §1 and the Table 2 ablations
    ("l2r", 1, 2, []), ("r2l", 1, 1, []), ("r2l", 1, 2, []), ("head_tail", 2, 1, []),
    ("interleave", 2, 1, []), ("interleave", 2, 2, []), ("multi_segment", 4, 1, []),
    ("interleave", 2, 1, ["--vanilla-mask"]), ("interleave", 2, 1, ["--vanilla-positions"]),
    ("interleave", 2, 1, ["--middle-to-side"]), ("interleave", 2, 1, ["--independent-directions"]),
]


def multi_token(order, tgt_dict, double_topk=False, **options) -> MultiTokenBeamSearch:
    """The multi-token beam search of ``order`` with ``GenerationOptions(**options)`` and the search
    strategy ``--double-topk`` (or not) picks, as ``build_multi_token_generator`` builds it."""
    options = GenerationOptions(**options)
    return MultiTokenBeamSearch(order, tgt_dict, options, build_search(options, len(tgt_dict), order, double_topk))


def write_dict(folder, size=40):
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    for lang in ("src", "tgt"):
        d.save(str(folder / f"dict.{lang}.txt"))
    return d


def parse_train_args(data, extra):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, [str(data), "--user-dir", PLUGIN_DIR, "--task", "fast_translation",
                                                "-s", "src", "-t", "tgt"] + extra)


def build(folder, order="interleave", h=None, c=1, flags=(), arch="reordered_transformer_tiny", seed=0):
    """(task, model) of a random-init tiny reordered transformer in eval mode, fp32."""
    if not (folder / "dict.src.txt").exists():
        write_dict(folder)
    extra = ["--arch", arch, "--target-order", order, "--tokens-per-direction", str(c),
             "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
             "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
             "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.0"]
    if h:
        extra += ["--directions", str(h)]
    args = parse_train_args(folder, extra + list(flags))
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    model = task.build_model(args).eval()
    return task, model, args


# fairseq transformer layouts a lean pass (decoding/step.py, decoding/encoder.py) must reproduce
LAYOUTS = {
    "post-norm, sinusoidal": [],
    "pre-norm": ["--decoder-normalize-before", "--encoder-normalize-before"],
    "learned positions": ["--decoder-learned-pos", "--encoder-learned-pos"],
}


def plain_transformer(folder, flags, seed=0):
    """fairseq's own transformer (arch ``transformer``, L2R) with ``flags``, in eval mode."""
    _, model, _ = build(folder, "l2r", None, 1, flags=flags, arch="transformer", seed=seed)
    return model.eval()
