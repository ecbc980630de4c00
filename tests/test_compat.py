"""compat.py: stock fairseq checkpoints load on torch 2.13 with no environment variable, numpy 2
aliases exist, and no batch is dropped (fairseq-generate must translate every sentence)."""
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
