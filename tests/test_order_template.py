"""docs/ARCHITECTURE.md's order template, added as a contributor adds an order: its module plus one
import in ``orders/__init__.py`` (in a copy of the plugin), nothing else.  It must then be a
``--target-order`` choice, round-trip through reorder / restore, and train through fairseq-train
and decode through fairseq-generate with the multi-token beam search."""
import os
import subprocess
import sys

from _plugin_copy import architecture_template, plugin_with_module
from conftest import fairseq_cli

CHECK = r'''
import sys
import torch
import fairseq_plugins
from fairseq import options
from fairseq.tasks import TASK_REGISTRY
from fairseq_plugins.orders import ORDER_NAMES, get_order

assert fairseq_plugins.__file__.startswith(sys.argv[1]), fairseq_plugins.__file__  # the copy, not the repository's
assert ORDER_NAMES[-1] == "even_odd", ORDER_NAMES
parser = options.get_training_parser()
TASK_REGISTRY["fast_translation"].add_args(parser)
assert "even_odd" in parser.format_help()
order = get_order("even_odd", tokens_per_direction=2)
for n in range(12):
    y = torch.arange(10, 10 + n)
    tokens, positions, directions = order.reorder(y, eos=2)
    assert len(tokens) % order.z == 0 and order.restore(tokens, eos=2).tolist() == y.tolist(), n
assert order.reorder(torch.tensor([11, 12, 13, 14]), eos=2)[0].tolist()[:4] == [12, 14, 11, 13]
print("OK")
'''


def plugin_with_template(root):
    return plugin_with_module(root, "orders", "even_odd.py", architecture_template("## Adding a generation order"),
                              "from fairseq_plugins.orders import l2r", "multi_segment", "multi_segment, even_odd")


def test_the_template_order_is_a_choice_round_trips_trains_and_decodes(tmp_path, tiny_corpus):
    plugin = plugin_with_template(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", CHECK, str(plugin)], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-2000:] + proc.stderr[-4000:]
    save = tmp_path / "ckpt"
    train = subprocess.run(
        [fairseq_cli("fairseq-train"), str(tiny_corpus / "bin"), "--user-dir", str(plugin), "--task",
         "fast_translation", "--target-order", "even_odd", "--tokens-per-direction", "2", "--arch",
         "reordered_transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
         "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
         "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3", "--criterion", "label_smoothed_cross_entropy",
         "--max-tokens", "2048", "--max-update", "3", "--cpu", "--save-dir", str(save), "--no-epoch-checkpoints",
         "--num-workers", "0", "--disable-validation"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-4000:]
    gen = subprocess.run(
        [fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", str(plugin), "--task",
         "fast_translation", "--path", str(save / "checkpoint_last.pt"), "--beam", "2", "--max-len-b", "20",
         "--batch-size", "16", "--cpu", "--gen-subset", "test"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert gen.returncode == 0, gen.stderr[-4000:]
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 120
    assert "'target_order': 'even_odd'" in train.stdout + train.stderr  # the model was trained in the new order
