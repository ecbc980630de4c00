"""No pickle from a path a user or a run folder supplies: every entry point that reads a checkpoint
(``reference_run --freeze``, a run folder's and ``--models-dir``'s checkpoints, ``offer``, the
checkpoint averager, the CTranslate2 conversion) reads it with ``compat.load_checkpoint`` (torch's
safe loader and fairseq's classes), so a crafted file that would run code when unpickled is refused
with a one-line error naming it, and the code never runs."""
import argparse
import os
import shlex
from pathlib import Path

import pytest
import torch

from fairseq_plugins import compat
from scripts.lab.evaluation import reference_models as rm
from scripts.lab.evaluation import runners
from scripts import average_checkpoints, reference_run
from scripts.lab.training import checkpoints

REPO = Path(__file__).resolve().parents[1]


class _Payload:
    """Unpickled, it runs a shell command that creates ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, ("touch " + shlex.quote(self.marker),)


def crafted_checkpoint(path, marker, legacy=False):
    """A checkpoint with fairseq's keys whose ``args`` would create ``marker`` when unpickled."""
    state = {"args": _Payload(marker), "cfg": None, "model": {"w": torch.zeros(2)},
             "optimizer_history": [{"num_updates": 7}], "extra_state": {}, "last_optimizer_state": None}
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return Path(path)


@pytest.fixture
def crafted(tmp_path):
    marker = tmp_path / "code-ran"
    return crafted_checkpoint(tmp_path / "crafted.pt", marker), marker


def refused(call, path, marker):
    with pytest.raises(SystemExit) as err:
        call()
    message = str(err.value.code)
    assert message.startswith("error: ") and "\n" not in message
    assert str(path) in message and "refused" in message and "system" in message, message
    assert not marker.exists(), "unpickling the checkpoint ran its code"


def test_the_loader_refuses_a_crafted_checkpoint_in_either_format(tmp_path):
    marker = tmp_path / "code-ran"
    for legacy in (False, True):
        path = crafted_checkpoint(tmp_path / f"crafted{legacy}.pt", marker, legacy)
        refused(lambda: compat.load_checkpoint(path), path, marker)
    path = tmp_path / "craftedFalse.pt"
    refused(lambda: compat.load_checkpoint(path, mmap=True), path, marker)


@pytest.mark.parametrize("name", sorted(p.parent.name for p in (REPO / "models").glob("*/checkpoint_best.pt")))
def test_every_shipped_checkpoint_loads_with_the_safe_loader(name):
    state = compat.load_checkpoint(REPO / "models" / name / "checkpoint_best.pt", mmap=True)
    assert state["model"]


def test_a_trained_checkpoint_with_its_optimizer_and_meters_loads(tiny_model):
    state = compat.load_checkpoint(tiny_model)
    assert state["optimizer_history"][-1]["num_updates"] > 0 and state["last_optimizer_state"]["state"]


def test_reference_run_freeze_refuses_it_and_freezes_nothing(tmp_path, crafted):
    path, marker = crafted
    out = tmp_path / "run"
    refused(lambda: reference_run.main(["--out", str(out), "--freeze", "teacher", str(path)]), path, marker)
    assert not (out / "checkpoints" / "teacher" / rm.CHECKPOINT).exists()


def test_a_run_folders_checkpoints_are_refused(tmp_path, crafted):
    path, marker = crafted
    save_dir = tmp_path / "model"
    save_dir.mkdir()
    last = save_dir / "checkpoint_last.pt"
    path.rename(last)
    refused(lambda: checkpoints.trained_updates(save_dir), last, marker)
    refused(lambda: checkpoints.readable(last), last, marker)
    refused(lambda: checkpoints.checkpoint_updates(last), last, marker)
    refused(lambda: checkpoints.restore_file(save_dir), last, marker)


def test_models_dir_offer_and_strip_refuse_it(tmp_path, crafted):
    path, marker = crafted
    refused(lambda: rm.strip_checkpoint(path, tmp_path / "stripped.pt"), path, marker)
    store = rm.ReferenceModels(tmp_path / "models")
    entry = {"name": "m", "updates": 100, "converged": False}
    refused(lambda: store.offer(entry, path, tmp_path / "corpus"), path, marker)
    assert not store.models and not (tmp_path / "models" / "m").exists()


def test_a_shipped_checkpoint_read_beside_frozen_heads_is_refused(tmp_path, crafted):
    path, marker = crafted
    store = rm.ReferenceModels(tmp_path / "models")
    store.models["other"] = {"sha256": "0"}
    store.checkpoint("other").parent.mkdir(parents=True)
    path.rename(store.checkpoint("other"))
    staged = tmp_path / "heads.pt"
    cfg = {"model": argparse.Namespace(arch="blockwise_transformer", freeze_base=True)}
    torch.save({"cfg": cfg, "model": {"w": torch.zeros(2)}}, staged)
    refused(lambda: store._share_frozen_base(staged, "heads"), store.checkpoint("other"), marker)


def test_average_checkpoints_refuses_it(tmp_path, crafted):
    path, marker = crafted
    out = tmp_path / "avg.pt"
    refused(lambda: average_checkpoints.main(["--inputs", str(path), "--output", str(out)]), path, marker)
    assert not out.exists()


def test_the_ctranslate2_conversion_refuses_it_before_its_unsafe_converter(tmp_path, crafted):
    path, marker = crafted
    refused(lambda: runners.convert_to_ctranslate2(path, None, tmp_path / "ct2"), path, marker)
