"""A run's output folder (``--out``): checked writable before any work, and one run at a time.

:func:`check_writable` makes the folder and writes a file into it, and refuses an output name that
is taken by something that is not a file (a folder named ``results.jsonl``), so that a run learns
it cannot write its results before it decodes, not after.  :func:`claimed` holds the folder's lock
(``.lock``, holding the pid of the run that has it) for the whole run: a second run into the same
folder is refused with that pid.  (Its files are written whole or not at all: ``corpora.files.AtomicWriter``.)
"""
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from scripts.lab.evaluation import EvaluationError

LOCK = ".lock"


def check_writable(folder, names=()):
    """Make ``folder`` and write (and remove) a file in it; ``names``: the files the run will write there."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-check.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise EvaluationError(f"cannot write into {folder} ({err.strerror}): give --out a folder you can write")
    for name in names:
        path = folder / name
        if path.exists() and not path.is_file():
            raise EvaluationError(f"{path} is not a file, and the results are written there: remove it or give "
                                  "another --out")


@contextmanager
def claimed(folder, names=()):
    """``with claimed(out):`` the run holds ``out`` (:func:`check_writable` first); another run holding
    it is an error naming its pid.  The kernel drops the lock with its holder, a killed run included."""
    folder = Path(folder)
    check_writable(folder, names)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            raise EvaluationError(f"another run (pid {other}) is writing into {folder}: wait for it to end, stop it "
                                  f"(kill {other}), or give another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield folder
    finally:
        os.close(fd)  # closing the file releases its lock

