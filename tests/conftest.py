"""Shared fixtures: a small real corpus from the system's message catalogs and a briefly trained
tiny transformer, built once per test session (about a minute and a half on 2 cores).

Tests that need a *trained* model (lossless-vs-greedy checks want varied, non-degenerate outputs)
use ``tiny_model``; tests of shapes and formulas build random models in-process instead.
"""
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fairseq_plugins  # noqa: F401  (compat repairs + registration; the root is on pytest's pythonpath)

REPO = Path(__file__).resolve().parents[1]

PLUGIN_DIR = str(REPO / "fairseq_plugins")
BIN = Path(sys.executable).parent


def fairseq_cli(name):
    """Path of a fairseq console script of the running interpreter's environment."""
    return str(BIN / name)


def run(cmd, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))  # fairseq-* of this venv for scripts
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    if proc.returncode != 0:
        raise AssertionError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


TINY_TRAIN_ARGS = [
    "--arch", "transformer_fast_tiny", "--encoder-layers", "2", "--decoder-layers", "2",
    "--encoder-embed-dim", "64", "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128",
    "--decoder-ffn-embed-dim", "128", "--share-all-embeddings", "--dropout", "0.0",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "50", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", "2048", "--num-workers", "0", "--seed", "1", "--cpu", "--no-epoch-checkpoints",
    "--no-last-checkpoints", "--log-format", "simple", "--log-interval", "50",
]


CORPUS_ARGS = ["--pair", "en-de", "--test-size", "120", "--valid-size", "60", "--vocab-size", "1000"]


def cached(name, key_parts, build):
    """Build into a cache folder keyed by everything the result depends on (the builder's source,
    its arguments, the fairseq version), so repeated test sessions on one machine reuse it.
    ``FAST_DECODING_TEST_CACHE`` moves the cache; a fresh machine simply builds it once."""
    import fairseq

    h = hashlib.sha1(repr((key_parts, fairseq.__version__)).encode())
    for builder in ("scripts/build_message_corpus.py", "scripts/lab/corpora/message_catalogs.py",
                    "scripts/lab/corpora/offline_corpus.py", "scripts/lab/corpora/files.py",
                    "scripts/lab/corpora/subwords.py", "scripts/lab/corpora/binarize.py"):
        h.update((REPO / builder).read_bytes())
    root = Path(os.environ.get("FAST_DECODING_TEST_CACHE", Path.home() / ".cache" / "fast-decoding-tests"))
    folder = root / f"{name}-{h.hexdigest()[:12]}"
    if (folder / "DONE").exists():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{folder.name}.lock", "w") as lock:  # pytest-xdist workers: one builds, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "DONE").exists():
            tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            build(tmp)
            (tmp / "DONE").write_text("ok\n")
            shutil.rmtree(folder, ignore_errors=True)
            tmp.rename(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_corpus():
    """en-de message corpus: small test/valid splits, 1000-piece joint sentencepiece, binarized."""
    def build(out):
        run([sys.executable, str(REPO / "scripts" / "build_message_corpus.py"), "--out", str(out)] + CORPUS_ARGS)

    return cached("corpus", CORPUS_ARGS, build)


@pytest.fixture(scope="session")
def tiny_model(tiny_corpus):
    """A 2+2-layer d=64 transformer trained for 300 updates on the tiny corpus (stock fairseq model)."""
    def build(save):
        run([fairseq_cli("fairseq-train"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
             "--task", "fast_translation", "--save-dir", str(save), "--max-update", "300"] + TINY_TRAIN_ARGS)

    return cached("model", [str(tiny_corpus)] + TINY_TRAIN_ARGS, build) / "checkpoint_best.pt"
