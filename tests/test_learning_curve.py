"""scripts/lab/evaluation/learning_curve.py: the convergence rule of issue "Reordered models at
convergence" on hand-made curves, and curve.json written atomically."""
import json

import pytest

from scripts.lab.evaluation import learning_curve as lc


def curve(*bleus, step=500):
    return [{"updates": step * (i + 1), "valid_loss": None, "bleu": b, "bp": 1.0} for i, b in enumerate(bleus)]


def test_flat_needs_min_points_and_the_last_two_within_tolerance():
    assert lc.flat(curve(10, 20, 30, 40, 40.3))
    assert not lc.flat(curve(10, 20, 30, 40, 40.31))
    assert lc.flat(curve(10, 20, 30, 40, 39.7))  # a drop counts as much as a rise
    assert not lc.flat(curve(10, 20, 30, 40.0, 40.0), min_points=6)  # fewer points than min_points
    assert lc.flat(curve(10, 20, 30, 40.0, 40.0), min_points=5)
    assert lc.flat(curve(30, 30.2, 35, 35.1), min_points=4)  # the stage-1 verifiers' four points
    assert not lc.flat(curve(10, 20, 30, 40, 41), tolerance=0.3) and lc.flat(curve(10, 20, 30, 40, 41), tolerance=1.0)
    assert not lc.flat([]) and not lc.flat(curve(5.0), min_points=1)


def test_flattened_at_is_the_first_point_where_the_rule_held():
    # within 0.3 at the 3rd point already, but that is before the fifth point; first held at the 6th
    points = curve(10, 30, 30.1, 35, 37, 37.2, 38, 38.1)
    assert lc.flattened_at(points) == 3000
    assert lc.flattened_at(points, min_points=3) == 1500
    assert lc.flattened_at(points, tolerance=0.05) is None
    assert lc.flattened_at(curve(10, 20, 30, 30.1)) is None  # four points only


def test_converged_needs_the_min_updates_at_the_last_point():
    points = curve(10, 20, 30, 40, 40.2)  # flat at 2,500 updates
    assert lc.converged(points, min_points=5)
    assert not lc.converged(points, min_points=5, min_updates=3000)  # last two within 0.3, but too early
    assert lc.converged(points, min_points=5, min_updates=2500)
    later = points + curve(10, 20, 30, 40, 40.2, 41, 42, 43, 44, 44.1)[5:]
    assert not lc.converged(later[:7], min_points=5, min_updates=3000)  # past the floor, not flat at its last point
    assert lc.converged(later, min_points=5, min_updates=3000)


def test_points_without_bleu_are_no_evaluation_points():
    points = curve(10, 20, 30, 40, 40.1)
    points.insert(4, {"updates": 2100, "valid_loss": 4.0, "bleu": None, "bp": None})
    assert lc.converged(points, min_points=5)  # the None neither breaks the pair...
    assert not lc.converged(points, min_points=6)  # ...nor counts as a point
    points.append({"updates": 3000, "valid_loss": 4.0, "bleu": None, "bp": None})
    assert lc.converged(points, min_points=5) and lc.flattened_at(points) == 2500
    assert not lc.converged(curve(None, None, None, None, None), min_points=5)


def test_points_are_judged_in_order_of_updates():
    points = curve(10, 20, 30, 40, 40.1)
    assert lc.converged(points[::-1], min_points=5) and lc.flattened_at(points[::-1]) == 2500


def test_min_updates_is_three_times_where_the_reference_flattened():
    assert lc.min_updates(curve(10, 20, 30, 40, 40.2)) == 3 * 2500
    assert lc.min_updates(curve(10, 20, 30, 40, 41)) is None  # not flat yet: the others keep training
    assert lc.min_updates(None) is None
    assert lc.min_updates(curve(10, 20, 20.1), min_points=3) == 3 * 1500


def test_curve_json_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "m" / "curve.json"
    assert lc.read(path) is None
    lc.write(path, {"points": curve(1.0)})
    assert lc.read(path) == {"points": curve(1.0)}

    class Unserializable:
        pass

    with pytest.raises(TypeError):
        lc.write(path, {"points": [Unserializable()]})
    assert json.loads(path.read_text()) == {"points": curve(1.0)}  # the old curve, whole
    assert [p.name for p in path.parent.iterdir()] == ["curve.json"]  # no temporary file left
