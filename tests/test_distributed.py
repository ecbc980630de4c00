"""Distributed training under torchrun (fairseq_plugins/compat.py repairs 4 and 5).

Two CPU processes (gloo) must form ONE process group: each takes every other batch and the
gradients are summed across them, which is exactly what one process does with ``--update-freq 2``
over the same batches.  So the 2-process run must log, update by update, the same words per batch
(two independent world-size-1 runs would each log one batch) and the same loss as the 1-process
``--update-freq 2`` run, and end with the same parameters; its checkpoint must load and decode.

Tolerance: with dropout 0, one seed and the same batches both runs compute the same gradient sums,
possibly in another order (DDP's bucketed all-reduce vs sequential accumulation: a few fp32 ulps
that Adam carries through the updates; with two processes the sum of two terms is even
order-independent, and the parameters measured here were identical).  The logged losses are rounded
to 3 decimals, so they may differ by one rounding unit: |loss difference| <= 0.002 per update;
parameters: max |difference| <= 1e-5 after the updates.

A model family is one parameter of MODEL_FAMILIES (training and decoding arguments); the blockwise
and NAR-drafter families are added there when they exist.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import BIN, PLUGIN_DIR, REPO, fairseq_cli, run

TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--share-all-embeddings"]

# name -> (fairseq-train arguments of the family, fairseq-generate arguments to decode it)
MODEL_FAMILIES = {
    "reordered_interleave": (
        ["--task", "fast_translation", "--arch", "reordered_transformer_tiny", "--target-order", "interleave"] + TINY,
        ["--task", "fast_translation", "--target-order", "interleave", "--beam", "1"]),
    # "blockwise": (["--task", "fast_translation", "--arch", "blockwise_transformer", "--base-checkpoint", ...,
    #                "--block-heads", "3", "--criterion", "blockwise_cross_entropy"], [..., "--drafter", "blockwise"]),
}

UPDATES = 6
COMMON = ["--user-dir", PLUGIN_DIR, "--dropout", "0", "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler",
          "inverse_sqrt", "--warmup-updates", "10", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing",
          "0.1", "--max-tokens", "512", "--max-update", str(UPDATES), "--cpu", "--no-epoch-checkpoints",
          "--disable-validation", "--log-format", "json", "--log-interval", "1", "--num-workers", "0", "--seed", "1"]


def train_log(text):
    """(update, loss, words per batch) of every logged update of a fairseq json log."""
    out = []
    for line in text.splitlines():
        if "| train_inner |" in line:
            rec = json.loads(line.split("| train_inner |", 1)[1])
            out.append((int(rec["num_updates"]), float(rec["loss"]), float(rec["wpb"])))
    return out


def params(path):
    return torch.load(path, map_location="cpu")["model"]


@pytest.mark.parametrize("family", sorted(MODEL_FAMILIES))
def test_torchrun_two_cpu_processes_train_as_one_group(tiny_corpus, tmp_path, family):
    train_args, generate_args = MODEL_FAMILIES[family]
    data = str(tiny_corpus / "bin")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    # docs/USAGE.md's command: torchrun --nproc_per_node 2 -m fairseq_cli.train DATA ... --cpu --distributed-backend gloo
    two = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", "-m", "fairseq_cli.train",
                          data, *train_args, *COMMON, "--distributed-backend", "gloo", "--save-dir", str(tmp_path / "two")],
                         capture_output=True, text=True, env=env, cwd=REPO)
    assert two.returncode == 0, two.stderr[-4000:]
    one = run([sys.executable, "-m", "fairseq_cli.train", data, *train_args, *COMMON, "--update-freq", "2",
               "--save-dir", str(tmp_path / "one")])
    log2, log1 = train_log(two.stderr + two.stdout), train_log(one.stderr + one.stdout)
    assert "training on 2 devices" in two.stderr + two.stdout
    assert [u for u, _, _ in log2] == list(range(1, UPDATES + 1)) == [u for u, _, _ in log1]
    # the same two batches per update: one group that shards the data, not two copies of the run
    assert [w for _, _, w in log2] == [w for _, _, w in log1]
    for (u, l2, _), (_, l1, _) in zip(log2, log1):
        assert abs(l2 - l1) <= 0.002, f"update {u}: loss {l2} (2 processes) vs {l1} (1 process, --update-freq 2)"
    p2, p1 = params(tmp_path / "two" / "checkpoint_last.pt"), params(tmp_path / "one" / "checkpoint_last.pt")
    diff = max((p2[k].float() - p1[k].float()).abs().max().item() for k in p1)
    assert diff <= 1e-5, f"parameters differ by {diff} after {UPDATES} updates"
    # one checkpoint folder written once (rank 0), loadable and decodable by fairseq-generate
    gen = run([fairseq_cli("fairseq-generate"), data, "--user-dir", PLUGIN_DIR, *generate_args,
               "--path", str(tmp_path / "two" / "checkpoint_last.pt"), "--batch-size", "32", "--cpu",
               "--gen-subset", "test", "--max-len-b", "20"])
    hyps = [line for line in gen.stdout.splitlines() if line.startswith("H-")]
    n_test = len((tiny_corpus / "test.de").read_text().splitlines())
    assert len(hyps) == n_test


# ---- launches that cannot form a group fail loudly (no processes needed) ----


def _cfg(extra):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=["unused-data", "--user-dir", PLUGIN_DIR, "--task",
                                                            "fast_translation", "--arch", "transformer_fast_tiny",
                                                            "--max-tokens", "512", *extra])
    return convert_namespace_to_omegaconf(args)


@pytest.fixture
def torchrun_env(monkeypatch):
    for k, v in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(k, v)


def test_torchrun_environment_is_adopted(torchrun_env):
    from fairseq_plugins.compat import adopt_torchrun_environment

    cfg = _cfg(["--cpu", "--distributed-backend", "gloo"])
    assert cfg.distributed_training.distributed_world_size == 1  # fairseq's default without GPUs: the bug
    assert adopt_torchrun_environment(cfg)
    dt = cfg.distributed_training
    assert (dt.distributed_world_size, dt.distributed_rank, dt.distributed_init_method, dt.distributed_no_spawn) == \
        (2, 1, "env://", True)


def test_torchrun_on_cpu_with_nccl_is_refused(torchrun_env):
    from fairseq_plugins.compat import DistributedLaunchError, adopt_torchrun_environment

    if torch.cuda.is_available():
        pytest.skip("a GPU machine runs NCCL")
    with pytest.raises(DistributedLaunchError, match="--distributed-backend gloo"):
        adopt_torchrun_environment(_cfg(["--cpu"]))


def test_torchrun_with_inconsistent_world_size_is_refused(torchrun_env):
    from fairseq_plugins.compat import DistributedLaunchError, adopt_torchrun_environment

    with pytest.raises(DistributedLaunchError, match="WORLD_SIZE=2"):
        adopt_torchrun_environment(_cfg(["--cpu", "--distributed-backend", "gloo", "--distributed-world-size", "3"]))


def test_fairseq_spawn_without_gpus_is_refused(monkeypatch):
    """fairseq's own launcher would spawn min(0 GPUs, 2) = 0 processes and return: nothing trained."""
    from fairseq.distributed import utils as distributed_utils
    from fairseq_plugins.compat import DistributedLaunchError

    if torch.cuda.device_count():
        pytest.skip("GPUs present: fairseq's launcher spawns one process per GPU")
    for k in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    cfg = _cfg(["--cpu", "--distributed-backend", "gloo", "--distributed-world-size", "2",
                "--distributed-init-method", "tcp://127.0.0.1:29998"])
    called = []
    with pytest.raises(DistributedLaunchError, match="torchrun --nproc_per_node"):
        distributed_utils.call_main(cfg, lambda cfg, **kw: called.append(cfg))
    assert not called


def test_single_process_training_is_unchanged(monkeypatch):
    """Outside torchrun (or WORLD_SIZE=1) the config is left as fairseq made it."""
    from fairseq_plugins.compat import adopt_torchrun_environment

    monkeypatch.setenv("WORLD_SIZE", "1")
    for k, v in {"RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(k, v)
    cfg = _cfg(["--cpu"])
    assert not adopt_torchrun_environment(cfg)
    assert cfg.distributed_training.distributed_init_method is None
