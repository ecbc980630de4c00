"""Logging, atomic files and line-wise reading for the corpus preparation steps."""
import os
from pathlib import Path


class PrepError(SystemExit):
    """A missing or malformed input: the message says which file and how to fix it."""

    def __init__(self, message):
        super().__init__(f"error: {message}")


_TAG = ["prep"]


def set_tag(tag):
    _TAG[0] = tag


def log(message):
    print(f"[{_TAG[0]}] {message}", flush=True)


def tmp_name(path):
    path = Path(path)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


class AtomicWriter:
    """``with AtomicWriter(path) as f:`` writes lines to a temporary file renamed to ``path`` only
    when the block completes; on an error the temporary file is removed."""

    def __init__(self, path):
        self.path = Path(path)
        self.tmp = tmp_name(self.path)

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "w", encoding="utf-8", newline="\n")
        return self.f

    def __exit__(self, exc_type, exc, tb):
        self.f.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
        return False


class AtomicBinary(AtomicWriter):
    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "wb")
        return self.f


def write_lines(path, lines):
    with AtomicWriter(path) as f:
        for line in lines:
            f.write(line + "\n")


def read_lines(path):
    """Lines of a UTF-8 text file split on '\\n' only (corpora contain '\\r' and U+2028 inside lines)."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


def iter_lines(path):
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n").rstrip("\r")


def count_lines(path):
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def exists(*paths):
    return all(Path(p).exists() for p in paths)


def zip_strict(a, b, name_a, name_b):
    sentinel = object()
    ia, ib = iter(a), iter(b)
    n = 0
    while True:
        x, y = next(ia, sentinel), next(ib, sentinel)
        if x is sentinel and y is sentinel:
            return
        if x is sentinel or y is sentinel:
            raise PrepError(f"{name_a} and {name_b} differ in length (after line {n:,}): a parallel corpus needs "
                            "one line per sentence on both sides")
        n += 1
        yield x, y


def write_marker(out, name, text):
    write_lines(Path(out) / name, [text])


def check_settings(out, settings):
    """Refuse to resume in a folder prepared with other settings (its files would be mixed)."""
    path = Path(out) / "SETTINGS"
    text = "\n".join(f"{k}={v}" for k, v in sorted(settings.items())) + "\n"
    if path.exists() and path.read_text() != text:
        raise PrepError(f"{out} was prepared with other settings:\n{path.read_text()}now:\n{text}"
                        "Use another --out folder, or delete this one to start over")
    Path(out).mkdir(parents=True, exist_ok=True)
    if not path.exists():
        write_lines(path, text.rstrip("\n").split("\n"))
