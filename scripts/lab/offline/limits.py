"""The limits of a visit to a lent GPU machine (issue 32, docs/GPU.md), each stated once.

What travels: the repository's tracked files plus the bundle, at most ``TRAVEL_MIB`` MiB.  What comes
back: at most ``OUT_FILES`` files under one folder, each at most ``OUT_FILE_MIB`` MiB, ``OUT_TOTAL_MIB``
MiB in all, no deeper than ``OUT_DEPTH`` folders, names of letters, digits, '.', '_' and '-'.
"""
import re
import subprocess
from pathlib import Path

MIB = 1 << 20
TRAVEL_MIB = 60
OUT_FILES = 8
OUT_FILE_MIB = 16
OUT_TOTAL_MIB = 64
OUT_DEPTH = 2  # folders between OUT and a file
MODEL_ARCHIVES = 6
NAME = re.compile(r"[A-Za-z0-9._-]+")


class LimitError(RuntimeError):
    """Something would not travel or would not come back; the message says what and how to fix it."""


def tracked_bytes(repo):
    """Bytes of the repository's tracked files as they are in the working tree."""
    names = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    total = 0
    for name in names.decode().split("\0"):
        p = Path(repo) / name
        if name and p.is_file():
            total += p.stat().st_size
    return total


def folder_bytes(folder):
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def output_problems(out):
    """Every way ``out`` breaks the return limits (an empty list: it comes back whole)."""
    out = Path(out)
    problems, files = [], []
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if any(not NAME.fullmatch(part) for part in rel.parts):
            problems.append(f"{rel}: a name outside [A-Za-z0-9._-]")
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            problems.append(f"{rel}: not a plain file or folder")
        elif p.is_file():
            files.append(p)
            if len(rel.parts) - 1 > OUT_DEPTH:
                problems.append(f"{rel}: deeper than {OUT_DEPTH} folders")
            if p.stat().st_size > OUT_FILE_MIB * MIB:
                problems.append(f"{rel}: {p.stat().st_size / MIB:.1f} MiB > {OUT_FILE_MIB} MiB")
    if len(files) > OUT_FILES:
        problems.append(f"{len(files)} files > {OUT_FILES}")
    total = sum(p.stat().st_size for p in files)
    if total > OUT_TOTAL_MIB * MIB:
        problems.append(f"{total / MIB:.1f} MiB in all > {OUT_TOTAL_MIB} MiB")
    return problems
