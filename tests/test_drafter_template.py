"""docs/ARCHITECTURE.md's drafter template, added as a contributor adds a drafter: its module plus
one import in ``decoding/drafters/__init__.py`` (in a copy of the plugin), nothing else.  It must
then be a task option with its own option (as fairseq's parser prints them), a case of every
generic test (``_all_generators``), a candidate of ``--drafter auto``, and lossless: fairseq's
greedy output token for token, through the engine and through ``fairseq-generate`` itself."""
import os
import subprocess
import sys
from pathlib import Path

from _plugin_copy import architecture_template, plugin_with_module
from conftest import REPO, fairseq_cli

TESTS = Path(__file__).resolve().parent

CHECK = r'''
import sys
import torch
import fairseq_plugins
from fairseq import options
from fairseq.tasks import TASK_REGISTRY

assert fairseq_plugins.__file__.startswith(sys.argv[1]), fairseq_plugins.__file__  # the copy, not the repository's
parser = options.get_generation_parser()
TASK_REGISTRY["fast_translation"].add_args(parser)  # what fairseq-generate parses and --help lists
text = parser.format_help()
assert "--lookup-first" in text and "source_lookup: copy after the first match" in text and "source_lookup:" in text

import _all_generators
assert "source_lookup" in _all_generators.ENGINE_DRAFTERS, _all_generators.ENGINE_DRAFTERS
from engine_helpers import decode_all, engine, load, mismatches, mixed_batches, reference_greedy

models, task = load(*[__import__("pathlib").Path(a) for a in sys.argv[2:4]])
assert engine(models, task, "auto", block_size=4).drafter.candidates["source_lookup"].name == "source_lookup"
for bs in (1, 8):
    batches = mixed_batches(task, bs)[: 24 // bs]
    ref = reference_greedy(models, task, batches)
    for first in (False, True):
        task.cfg.lookup_first = first
        gen = engine(models, task, "source_lookup", block_size=4, adaptive_block_size="off")
        hyps = decode_all(gen, models, batches)
        assert mismatches(ref, hyps) == [], (bs, first)
        for k in ref:
            assert torch.allclose(hyps[k]["positional_scores"], ref[k]["positional_scores"], atol=1e-4)
        assert gen.stats["drafter"] == "source_lookup" and gen.stats["draft_accepted"] > 0, gen.stats
print("OK")
'''


def plugin_with_template(root):
    return plugin_with_module(root, "decoding/drafters", "source_lookup.py", architecture_template("## Adding a drafter"),
                              "from fairseq_plugins.decoding.drafters import", " shallow", " shallow, source_lookup")


def test_the_template_drafter_is_an_option_a_generic_case_an_auto_candidate_and_lossless(tmp_path, tiny_corpus,
                                                                                         tiny_model):
    plugin = plugin_with_template(tmp_path)
    # the copy first (it is the plugin imported), the repository last (the lab: engine_helpers loads with it)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(TESTS), str(REPO)]), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", CHECK, str(plugin), str(tiny_corpus), str(tiny_model)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-2000:] + proc.stderr[-4000:]
    # through fairseq-generate itself, with the new option on its command line
    outputs = {}
    for extra in ([], ["--drafter", "source_lookup", "--block-size", "4", "--lookup-first"]):
        run = subprocess.run([fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", str(plugin),
                              "--task", "fast_translation", "--path", str(tiny_model), "--beam", "1",
                              "--max-len-b", "40", "--batch-size", "8", "--cpu", "--gen-subset",
                              "test"] + extra, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-4000:]
        outputs[bool(extra)] = {x.split("\t")[0]: x.split("\t")[1:] for x in run.stdout.splitlines() if x.startswith("H-")}
    assert len(outputs[True]) == 120 and outputs[True].keys() == outputs[False].keys()
    for key, (score, text) in outputs[False].items():  # tokens identical, scores to fp32 rounding
        assert outputs[True][key][1] == text and abs(float(outputs[True][key][0]) - float(score)) < 1e-4, key
