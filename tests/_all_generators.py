"""Every generator and every training setup of the plugin, built as fairseq-generate / fairseq-train
build them (``task.build_generator(models, args)``, ``task.build_criterion``, ``task.train_step``),
for the tests that must cover all of them (model not mutated, NaN, device trap, syncs, half).

* the draft-and-verify engine with every drafter (``ENGINE_DRAFTERS``) and acceptance rule, on the
  cached tiny checkpoint (blockwise: random heads on that checkpoint; nar: the cached GAD drafter);
  ``full_projection=True`` forces the GPU path (every fed column projected at once, nothing read on the
  host but the engine's one synchronisation per iteration);
* the drafter alone (``--acceptance all``);
* the multi-token beam search with every order, DOUBLETOPK and the ablation flags (``BEAM_CASES``),
  on random tiny reordered models built in-process;
* the lean beam search of left-to-right models (``LEAN_CASES``, in ``BEAM_CASES`` too): a stock fairseq
  transformer and the plugin's reordered transformer trained plain left to right.
"""
from argparse import Namespace

import torch
from fairseq import options, tasks

from _reorder_utils import build as build_reordered
from conftest import PLUGIN_DIR
from engine_helpers import engine
from fairseq_plugins.decoding.acceptance import ACCEPTANCES as ACCEPTANCE_RULES
from fairseq_plugins.decoding.drafters import DRAFTERS
from fairseq_plugins.decoding.drafters.auto import AutoDrafter

# the registries' names, so that a new drafter or rule is in every generic test at once: every drafter
# but auto (it decodes with the others: tests/test_auto_drafter.py), every rule that calls the verifier
ENGINE_DRAFTERS = tuple(n for n in DRAFTERS.names if not issubclass(DRAFTERS[n], AutoDrafter))
ACCEPTANCES = tuple(n for n in ACCEPTANCE_RULES.names if ACCEPTANCE_RULES[n].needs_verifier)
# the drafters that decode with the plain checkpoint alone (engine_generator gives the other two their models)
PLAIN_DRAFTERS = tuple(n for n in ENGINE_DRAFTERS if n not in ("blockwise", "nar"))
# (id, order, h, c, ablation flags, --double-topk): every order of docs/METHODS.md §1, DOUBLETOPK, Table 2's ablations
BEAM_CASES = [
    ("l2r_sa", "l2r", 1, 2, [], False),
    ("head_tail", "head_tail", 2, 1, [], False),
    ("head_tail_doubletopk", "head_tail", 2, 1, [], True),
    ("interleave", "interleave", 2, 1, [], False),
    ("interleave_c2", "interleave", 2, 2, [], False),
    ("interleave_doubletopk", "interleave", 2, 1, [], True),
    ("multi_segment", "multi_segment", 4, 1, [], False),
    ("vanilla_mask", "interleave", 2, 1, ["--vanilla-mask"], False),
    ("vanilla_positions", "interleave", 2, 1, ["--vanilla-positions"], False),
    ("middle_to_side", "interleave", 2, 1, ["--middle-to-side"], False),
    ("independent_directions", "interleave", 2, 1, ["--independent-directions"], False),
    ("lean_stock", "l2r", 1, 1, [], False),
    ("lean_l2r", "l2r", 1, 1, [], False),
]
LEAN_CASES = {"lean_stock": "transformer", "lean_l2r": "reordered_transformer_tiny"}  # case -> --arch
BEAM_IDS = [case[0] for case in BEAM_CASES]
BEAM_SIZE = 3


def parse(data, argv, parser=None):
    parser = parser or options.get_training_parser()
    return options.parse_args_and_arch(parser, [str(data), "--user-dir", PLUGIN_DIR] + list(argv))


def blockwise_model(corpus, base, heads=4):
    """``--arch blockwise_transformer`` with random heads on ``base`` (the trained tiny checkpoint),
    built in-process as fairseq-train builds it; eval mode.  Returns ``(model, task, args)``."""
    args = parse(corpus / "bin", ["--task", "fast_translation", "--arch", "blockwise_transformer",
                                  "--base-checkpoint", str(base), "--block-heads", str(heads),
                                  "--criterion", "blockwise_cross_entropy", "--label-smoothing", "0.1"])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task.build_model(args).eval(), task, args


def engine_generator(models, task, drafter, acceptance="exact", *, blockwise=None, nar_path=None,
                     full_projection=False, block_size=3, **kw):
    """The engine as ``fairseq-generate --drafter D --acceptance A`` builds it; ``blockwise``: the
    blockwise model to verify with instead of ``models`` (returned with the generator)."""
    if drafter == "blockwise":
        models = [blockwise]
    task.cfg.drafter_path = str(nar_path) if drafter == "nar" else None
    if drafter == "nar":
        block_size = min(block_size, 4)
    gen = engine(models, task, drafter, acceptance=acceptance, block_size=block_size, **kw)
    if full_projection:  # as on a GPU: every fed column projected in one product, nothing read but the sync
        gen.lazy_verify, gen.host_reads = False, False
    return gen, models


def beam_model(folder, case, seed=0):
    """(task, model) of a random tiny reordered model for a ``BEAM_CASES`` entry."""
    name, order, h, c, flags, _ = case
    folder.mkdir(parents=True, exist_ok=True)
    task, model, _ = build_reordered(folder, order, h, c, flags, arch=LEAN_CASES.get(name, "reordered_transformer_tiny"),
                                     seed=seed)
    return task, model


def beam_generator(task, model, case, **kw):
    task.cfg.double_topk = case[5]
    args = dict(beam=BEAM_SIZE, max_len_a=0.0, max_len_b=12, lenpen=1.0, min_len=1)
    args.update(kw)
    return task.build_generator([model], Namespace(**args))


def random_sources(pad, eos, lengths=(7, 3, 5, 6), vocab=(4, 40), seed=3):
    """A fairseq batch of left-padded random sources of mixed lengths."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths) + 1
    src = torch.full((len(lengths), width), pad)
    for i, n in enumerate(lengths):
        src[i, width - n - 1 : -1] = torch.randint(vocab[0], vocab[1], (n,), generator=g)
        src[i, -1] = eos
    return {"id": torch.arange(len(lengths)),
            "net_input": {"src_tokens": src, "src_lengths": torch.tensor([n + 1 for n in lengths])}}


def model_state(model):
    """Everything decoding must leave alone: every parameter and buffer (values, device, dtype) and
    fairseq's sinusoidal ``embed_positions.weights`` attribute (not a registered buffer)."""
    state = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        state[name] = (t.detach().clone(), t.device, t.dtype)
    for name, module in model.named_modules():
        w = getattr(module, "weights", None)
        if isinstance(w, torch.Tensor):
            state[f"{name}.weights (attribute)"] = (w.detach().clone(), w.device, w.dtype)
    return state


def state_changes(before, after):
    """Names whose value, shape, device or dtype changed (or that appeared/disappeared)."""
    changed = sorted(set(before) ^ set(after))
    for name in set(before) & set(after):
        (a, da, ta), (b, db, tb) = before[name], after[name]
        if (da, ta, a.shape) != (db, tb, b.shape) or not torch.equal(a.nan_to_num(), b.nan_to_num()):
            changed.append(f"{name}: {tuple(a.shape)} {ta} {da} -> {tuple(b.shape)} {tb} {db}")
    return changed


class BackwardOnly:
    """The one thing fairseq's ``task.train_step`` asks of its optimizer: ``backward(loss)``."""

    def backward(self, loss):
        loss.backward()


def nar_drafter_setup(corpus, verifier):
    """``--task nar_drafter --arch nar_drafter_tiny --criterion nar_drafter_loss`` built in-process
    (encoder from the verifier, as GAD trains it): ``(task, model, criterion)``."""
    args = parse(corpus / "bin", ["--task", "nar_drafter", "--arch", "nar_drafter_tiny", "--criterion",
                                  "nar_drafter_loss", "--block-size", "4", "--init-encoder-from", str(verifier),
                                  "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64",
                                  "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128",
                                  "--decoder-ffn-embed-dim", "128", "--share-all-embeddings", "--dropout", "0.0",
                                  "--label-smoothing", "0.1"])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args)
    return task, model, task.build_criterion(args)


def reordered_training_setup(folder, order="head_tail"):
    """``--arch reordered_transformer_tiny --criterion label_smoothed_cross_entropy`` on a random
    in-memory corpus, batches from the plugin's reordered dataset: ``(task, model, criterion, sample)``."""
    from fairseq.data import LanguagePairDataset

    from fairseq_plugins.data.reordered_dataset import ReorderedLanguagePairDataset

    task, model = beam_model(folder, ("train", order, None, 1, [], False))
    d = task.source_dictionary
    g = torch.Generator().manual_seed(5)
    src = [torch.cat([torch.randint(4, 40, (n,), generator=g), torch.tensor([d.eos()])]) for n in (5, 8, 3)]
    tgt = [torch.cat([torch.randint(4, 40, (n,), generator=g), torch.tensor([d.eos()])]) for n in (6, 4, 7)]
    ds = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d)
    ds = ReorderedLanguagePairDataset(ds, model.generation_order)
    sample = ds.collater([ds[i] for i in range(len(src))])
    args = Namespace(criterion="label_smoothed_cross_entropy", label_smoothing=0.1, sentence_avg=False,
                     ignore_prefix_size=0, report_accuracy=False)
    from fairseq.criterions import build_criterion

    return task, model, build_criterion(args, task), sample
