"""A reference run's checkpoints: fairseq's interval checkpoints of a model's folder, whether torch can load
one (a training killed while saving leaves a file it cannot), where a training resumes, the checkpoint a
model is exported or snapshotted at, and the export itself (without optimizer state)."""
import re
from pathlib import Path

from fairseq_plugins.compat import load_checkpoint
from scripts.lab.evaluation import learning_curve
from scripts.lab.evaluation.reference_models import strip_checkpoint


def trained_updates(save_dir):
    """The updates of ``save_dir``'s checkpoint_last.pt (None without a readable one).  fairseq-train
    resumed at its --max-update still runs one more update and may overwrite checkpoint_best.pt, which
    other models were trained against (a drafter's verifier): such a training is not started again."""
    last = Path(save_dir) / "checkpoint_last.pt"
    if not last.exists() or not readable(last):
        return None
    state = load_checkpoint(last, mmap=True)
    return state["optimizer_history"][-1]["num_updates"]


def interval_checkpoints(folder):
    """[(updates, path)] of fairseq's interval checkpoints (checkpoint_EPOCH_UPDATES.pt) in ``folder``."""
    found = []
    for p in Path(folder).glob("checkpoint_*_*.pt"):
        m = re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def readable(checkpoint):
    """Whether torch can load ``checkpoint`` (one written by a training killed while saving cannot; a
    warning says so); memory-mapped, so the tensors are not read."""
    try:
        load_checkpoint(checkpoint, mmap=True)
        return True
    except Exception as err:  # truncated zip...: whatever torch.load raises (a refused pickle is an error: SystemExit)
        reason = (str(err).splitlines() or [""])[0][:160]
        print(f"warning: torch cannot load {checkpoint} ({type(err).__name__}: {reason}); a training killed while "
              "saving leaves such a file", flush=True)
        return False


def restore_file(save_dir):
    """Where a training resumes: None for fairseq's own checkpoint_last.pt (or a fresh start); the newest
    readable interval checkpoint if checkpoint_last.pt cannot be loaded (a training killed while copying it)."""
    last = Path(save_dir) / "checkpoint_last.pt"
    if not last.exists() or readable(last):
        return None
    for _, ckpt in reversed(interval_checkpoints(save_dir)):
        if readable(ckpt):
            print(f"warning: resuming from {ckpt}, not {last}", flush=True)
            return ckpt
    return None


def trained_seconds(checkpoint):
    """The training time fairseq saved in ``checkpoint`` (``extra_state['previous_training_time']``, seconds;
    0 without one): what its ``--stop-time-hours`` counts from when a training resumes from it."""
    return float((load_checkpoint(checkpoint, mmap=True).get("extra_state") or {}).get("previous_training_time") or 0.0)


def checkpoint_updates(checkpoint):
    """The updates a fairseq checkpoint was saved at (memory-mapped: the tensors are not read)."""
    return load_checkpoint(checkpoint, mmap=True)["optimizer_history"][-1]["num_updates"]


def checkpoint_max_update(checkpoint):
    """The --max-update the training that saved ``checkpoint`` ran under (its saved config), or None."""
    cfg = load_checkpoint(checkpoint, mmap=True).get("cfg") or {}
    return (cfg.get("optimization") or {}).get("max_update")


def exported_checkpoint(m, out, data):
    """The interval checkpoint at which the model converged; else checkpoint_best.pt, or for a model
    trained on a distilled corpus (``distill.json`` in it) checkpoint_last.pt, since the gold
    validation loss does not rank what it learns (as scripts/train_models.sh)."""
    folder = Path(out) / "checkpoints" / m["name"]
    converged = (learning_curve.read(Path(out) / m["name"] / "curve.json") or {}).get("converged")
    if converged:
        found = [c for u, c in interval_checkpoints(folder) if u == converged["updates"]]
        if found:
            return found[-1]
        print(f"warning: {m['name']} converged at {converged['updates']} updates but its checkpoint is gone; "
              "exporting by the usual rule", flush=True)
    distilled = (Path(data) / m["corpus"] / "distill.json").exists()
    return folder / ("checkpoint_last.pt" if distilled else "checkpoint_best.pt")


def export(models, out, dest, data):
    """Every model's exported checkpoint (:func:`exported_checkpoint`) without optimizer state (what
    decoding needs), as ``dest/<name>/checkpoint_best.pt``."""
    for m in models:
        src = exported_checkpoint(m, out, data)
        if not src.exists():
            continue
        strip_checkpoint(src, Path(dest) / m["name"] / "checkpoint_best.pt")
        print(f"exported {src}", flush=True)


def snapshot_checkpoint(m, out, curve):
    """What a snapshot of unconverged model ``m`` packs: with a curve, its newest scored interval checkpoint
    (whole while the training saves the next one, its validation BLEU known); without one (a drafter, blockwise
    heads), checkpoint_last.pt where it is readable and no older than the newest interval checkpoint, which
    fairseq writes whole (a temporary file renamed) before it copies it to checkpoint_last.pt."""
    folder = Path(out) / "checkpoints" / m["name"]
    last, intervals = folder / "checkpoint_last.pt", interval_checkpoints(folder)
    if m["curve"]:
        scored = {p["updates"] for p in curve["points"]}
        newest = [ckpt for updates, ckpt in intervals if updates in scored]
        return newest[-1] if newest else last
    if not intervals or (last.exists() and readable(last) and checkpoint_updates(last) >= intervals[-1][0]):
        return last
    return intervals[-1][1]
