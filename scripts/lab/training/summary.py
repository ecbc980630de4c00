"""A reference run's summary: ``OUT/summary.json`` (every model's curve and training time, merged with the
entries of models an earlier run named)."""
import json
from pathlib import Path

from scripts.lab.corpora.files import AtomicWriter
from scripts.lab.evaluation import learning_curve, train_log


def summarize(models, out):
    """OUT/summary.json: every model's curve and training time; entries of models not in ``models``
    (an earlier run's --names) are kept."""
    path = Path(out) / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    for m in models:
        curve = learning_curve.read(Path(out) / m["name"] / "curve.json")
        if curve is not None:
            summary[m["name"]] = dict(curve, converged=curve.get("converged"),
                                      train_seconds=train_log.wall_seconds(Path(out) / m["name"] / "train.log"))
    with AtomicWriter(path) as f:
        f.write(json.dumps(summary, indent=1) + "\n")
    return summary
