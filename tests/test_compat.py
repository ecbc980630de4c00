"""compat.py: stock fairseq checkpoints load on torch 2.13 with no environment variable, numpy 2
aliases exist, no batch is dropped (fairseq-generate must translate every sentence), and a
training that stops mid-epoch exits cleanly."""
import numpy as np
import torch

from conftest import PLUGIN_DIR, fairseq_cli, run


def test_numpy_aliases_restored():
    assert np.compat.long is np.int64
    assert np.float is float and np.int is int


def test_batch_by_size_keeps_the_last_batch():
    from fairseq.data import data_utils

    indices = np.arange(50, dtype=np.int64)
    batches = data_utils.batch_by_size(indices, lambda i: 5, max_sentences=16, required_batch_size_multiple=8)
    flat = np.concatenate([np.asarray(b) for b in batches])
    assert sorted(flat.tolist()) == list(range(50))
    assert all(len(b) % 8 == 0 for b in batches[:-1])


def test_checkpoint_loads_with_safe_torch_load(tiny_model):
    from fairseq import checkpoint_utils

    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in __import__("os").environ
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tiny_model))
    assert state["model"] and isinstance(next(iter(state["model"].values())), torch.Tensor)


def test_fairseq_generate_translates_every_sentence(tiny_corpus, tiny_model):
    # 120 test sentences at --batch-size 50: upstream drops the 20-sentence tail batch.
    out = run([fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
               "--task", "fast_translation", "--path", str(tiny_model), "--beam", "1", "--batch-size", "50",
               "--cpu", "--gen-subset", "test"])
    hyps = [line for line in out.stdout.splitlines() if line.startswith("H-")]
    assert len(hyps) == 120


ABANDONED_PREFETCH = """
import time, torch
{setup}
from fairseq.data.iterators import BufferedIterator

def slow_batches():  # each batch is ~50 ms inside torch, with the GIL released
    x = torch.randn(400, 400)
    while True:
        for _ in range(20):
            x = (x @ x) / 400.0
        yield x

batches = BufferedIterator(1, list(range(10 ** 6)))
batches._iterable = slow_batches()  # the length stays: training stops long before the epoch ends
next(batches)
time.sleep(0.01)  # the prefetching thread is now computing a batch, as after fairseq-train's last update
"""


def _exit_code(setup):
    import subprocess, sys

    env = dict(__import__("os").environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", ABANDONED_PREFETCH.format(setup=setup)],
                          capture_output=True, text=True, env=env, timeout=120)
    return proc.returncode, proc.stderr


def test_exit_with_an_abandoned_prefetching_thread_does_not_abort():
    # without repair 6 the interpreter unwinds the thread out of torch and aborts (rc -6, "terminate called")
    for _ in range(2):
        code, err = _exit_code("import fairseq_plugins")
        assert code == 0, err[-2000:]
    code, err = _exit_code("import fairseq")
    assert code != 0 and "terminate called" in err, "the reproduction no longer reproduces the abort"
