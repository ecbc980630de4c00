"""fairseq-train's log read back.  With ``--log-format json`` every progress line is one JSON
record after the logger's name: ``... | INFO | train_inner | {"epoch": 1, "num_updates": "100", ...}``,
``... | valid | {"valid_loss": "5.5", "valid_num_updates": "100", ...}`` (validation keys carry the
subset's prefix) and ``... | train | {"train_loss": ...}`` at the end of an epoch."""
import json
from pathlib import Path


def records(path, kind):
    """The ``kind`` records (train_inner, train, valid) of the log at ``path``, in order ([] without a log)."""
    found = []
    lines = Path(path).read_text(errors="replace").splitlines() if Path(path).exists() else []
    for line in lines:
        head, sep, body = line.partition(" | {")
        if sep and head.rsplit(" | ", 1)[-1] == kind:
            found.append(json.loads("{" + body))
    return found


def valid_losses(path, subset="valid"):
    """{updates: validation loss} of every validation in the log."""
    return {int(r[f"{subset}_num_updates"]): float(r[f"{subset}_loss"]) for r in records(path, subset)}


def updates(path):
    """The last update count the log reports (None before the first progress line)."""
    inner = records(path, "train_inner")
    return int(inner[-1]["num_updates"]) if inner else None


def wall_seconds(path):
    """fairseq's wall-clock meter (seconds since the training started) at the last epoch's end."""
    ends = records(path, "train")
    return float(ends[-1]["train_wall"]) if ends else None
