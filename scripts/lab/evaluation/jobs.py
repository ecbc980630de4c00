"""Background jobs of a run (a fairseq-train, a curve scorer), each in its own process group.

A job starts in a new session (``start_new_session=True``), so one signal to its group stops it and
everything it started; :meth:`Job.stop` sends SIGTERM and, after a grace period, SIGKILL.  A job
must not outlive the command that started it: the command stops its jobs in a ``finally:`` (and
turns SIGTERM into an exception, :func:`exit_on_sigterm`, so that block runs), and on Linux each
job also asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), which covers a
command killed with SIGKILL.

Runs side by side share the machine's cores through :class:`TrainingSlots`.
"""
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def job_env(repo, threads=1):
    """The environment of a job: the repository importable, ``threads`` threads per process (default one: 2 shared
    cores, two jobs; a training alone on them runs about twice as fast with 2)."""
    return dict(os.environ, PYTHONPATH=f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))


def die_with_parent():
    """In the child before exec: SIGTERM to this job when the process that started it dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the finally: of the command still stops it
        pass


class Job:
    """``cmd`` running in its own process group, stdout and stderr appended to ``log``."""

    def __init__(self, name, cmd, log, env):
        self.name, self.log = name, Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                         preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)

    @property
    def group(self):
        return self.proc.pid  # a new session's leader: its pid is the group's id

    def poll(self):
        """The exit code, None while it runs."""
        return self.proc.poll()

    def stop(self, grace=30.0):
        """SIGTERM to the whole group, SIGKILL if it is still there after ``grace`` seconds; returns the exit code."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def _signal(self, sig):
        try:
            os.killpg(self.group, sig)
        except ProcessLookupError:
            pass


def exit_on_sigterm():
    """Make SIGTERM raise SystemExit in this process, so that its ``finally:`` blocks stop its jobs."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


class TrainingSlots:
    """``count`` training slots shared by every run that uses one folder: a slot is the lock of a file
    ``slot-I.lock``, held while a training runs, so two runs side by side (stages 1 and 2 of the
    convergence run) train at most ``count`` models between them, and one run takes the slot another
    frees at once (runs sharing a folder must be given the same ``count``: a run tries its first
    ``count`` slots only).  The kernel drops a lock with its holder, a run killed included; its
    trainings die with it (:class:`Job`)."""

    def __init__(self, folder, count):
        self.folder, self.count = Path(folder), int(count)
        self.held = {}  # name -> the open file whose lock is the slot (not inherited by the jobs: PEP 446)

    def take(self, name):
        """A free slot for ``name``'s training: True, held until :meth:`free`; False when all are taken."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for i in range(self.count):
            fd = os.open(self.folder / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.held[name] = fd
            return True
        return False

    def free(self, name):
        fd = self.held.pop(name, None)
        if fd is not None:
            os.close(fd)  # closing the file releases its lock
