"""A learning curve and its convergence: validation BLEU (and loss) at a training's interval checkpoints.

A curve is what ``scripts/reference_run.py`` keeps in ``OUT/<name>/curve.json``: a header (subset,
beam, generation arguments, sacreBLEU signature), ``points``, one per scored checkpoint, as
``{"updates": int, "valid_loss": float | None, "bleu": float | None, "bp": float | None}``, and, once
the training has been stopped for it, ``converged``.

The convergence rule (issue "Reordered models at convergence"): validation BLEU within ``tolerance``
(0.3) over the last two of at least ``min_points`` evaluation points (5; 4 for the stage-1 verifiers),
the last at no fewer than ``min_updates`` updates: 0 for L2R itself, 3x the updates at which L2R
flattened for every other model (models without a reference, the stage-1 verifiers: 3x the updates
at which their own curve first flattened; our choice, as two flat points can be a pause).  Points without a BLEU (a decode that could not be scored) are no
evaluation points: they neither count towards ``min_points`` nor break the last pair.
"""
import json
from pathlib import Path

from scripts.lab.corpora.files import AtomicWriter

TOLERANCE = 0.3
MIN_POINTS = 5
REFERENCE_FACTOR = 3  # the others' last point at no fewer than 3x the updates at which L2R flattened


def evaluation_points(points):
    """The points with a BLEU, in order of updates."""
    return sorted((p for p in points if p.get("bleu") is not None), key=lambda p: p["updates"])


def flat(points, tolerance=TOLERANCE, min_points=MIN_POINTS):
    """Whether the rule holds at the last evaluation point: at least ``min_points`` of them, the last
    two within ``tolerance`` BLEU."""
    pts = evaluation_points(points)
    return len(pts) >= max(min_points, 2) and abs(pts[-1]["bleu"] - pts[-2]["bleu"]) <= tolerance


def flattened_at(points, tolerance=TOLERANCE, min_points=MIN_POINTS):
    """The updates of the point at which the rule first held (None: not yet)."""
    pts = evaluation_points(points)
    for k in range(max(min_points, 2), len(pts) + 1):
        if flat(pts[:k], tolerance, min_points):
            return pts[k - 1]["updates"]
    return None


def converged(points, min_points=MIN_POINTS, tolerance=TOLERANCE, min_updates=0):
    """The rule holds at the last evaluation point and that point is at ``min_updates`` or later."""
    pts = evaluation_points(points)
    return flat(pts, tolerance, min_points) and pts[-1]["updates"] >= min_updates


def min_updates(reference_points, min_points=MIN_POINTS, tolerance=TOLERANCE):
    """The updates every other model must reach: 3x those at which the reference (L2R) flattened;
    None while it has not (those models keep training)."""
    at = flattened_at(reference_points or [], tolerance, min_points)
    return None if at is None else REFERENCE_FACTOR * at


def read(path):
    """The curve at ``path`` (None if there is none yet)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def write(path, curve):
    """Write ``curve`` atomically (a temporary file in the same folder, then os.replace): a reader, or
    a run killed mid-write, sees the old curve or the new one, never half of one."""
    with AtomicWriter(path) as f:
        f.write(json.dumps(curve, indent=1) + "\n")
