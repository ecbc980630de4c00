"""``--freeze ROLE SOURCE``: a role of the convergence run (the teacher, the frozen verifier) copied into
``OUT/checkpoints/ROLE/`` from a checkpoint file or from a pin file naming a checkpoint of this
repository's history (``COMMIT PATH SHA256``; configs/reference/teacher.txt)."""
import shlex
from pathlib import Path

from fairseq_plugins.compat import load_checkpoint
from scripts.lab.evaluation.reference_models import freeze
from scripts.lab.training.model_list import REPO


def pinned_checkpoint(pin, dest, repo=REPO):
    """A checkpoint of this repository's history named by a pin file (``COMMIT PATH SHA256``, ``#`` comments;
    configs/reference/teacher.txt), written to ``dest`` once its sha256 is checked."""
    import hashlib
    import subprocess

    words = shlex.split(pin.read_text(), comments=True)
    if len(words) != 3:
        raise SystemExit(f"error: {pin}: one line COMMIT PATH SHA256 expected")
    commit, path, sha = words
    proc = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: {pin}: git cannot read {path} at {commit} ({proc.stderr.decode().strip()}); "
                         "a shallow clone lacks it: git fetch --unshallow")
    if hashlib.sha256(proc.stdout).hexdigest() != sha:
        raise SystemExit(f"error: {pin}: {path} at {commit} does not have the sha256 the pin names")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(proc.stdout)
    return dest


def freeze_role(args, role, source):
    """``--freeze ROLE SOURCE``: SOURCE is a checkpoint file, or a pin file (``.txt``: a checkpoint of this
    repository's history, :func:`pinned_checkpoint`)."""
    checkpoint = Path(source)
    pinned = checkpoint.suffix == ".txt" and checkpoint.is_file()
    if pinned:
        checkpoint = pinned_checkpoint(checkpoint, Path(args.out) / "checkpoints" / f".{role}.pinned.pt")
    frozen = freeze(Path(args.out) / "checkpoints", role, checkpoint)
    if pinned:
        checkpoint.unlink()
    state = load_checkpoint(frozen, mmap=True)
    print(f"{role}: {frozen} ({state['optimizer_history'][-1]['num_updates']} updates)", flush=True)
