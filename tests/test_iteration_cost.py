"""Measured iteration costs (fairseq_plugins/decoding/iteration_cost.py): the width decision follows the
device's own timings, so a device where width is cheap (a GPU) drafts wider than one where every slot
costs (a CPU)."""
import pytest

from fairseq_plugins.decoding.iteration_cost import SLOT_PRIOR, IterationCosts, rows_bucket


def test_rows_buckets_are_powers_of_two():
    assert [rows_bucket(r) for r in (1, 2, 3, 5, 32, 33)] == [1, 2, 4, 8, 32, 64]


def test_prior_until_measured_then_measured_ratios():
    costs = IterationCosts()
    assert costs.relative(1, 4) == pytest.approx(1 + 4 * SLOT_PRIOR)
    costs.observe(1, 0, 1.0e-3)
    costs.observe(1, 2, 1.6e-3)
    assert costs.relative(1, 2) == pytest.approx(1.6)
    assert costs.relative(1, 1) == pytest.approx(1.3)  # linear between measured widths
    assert costs.relative(1, 4) == pytest.approx(2.2)  # beyond: the slope of the last two


def test_one_measured_width_alone_uses_the_prior_slope():
    costs = IterationCosts(slot_prior=0.5)
    costs.observe(4, 2, 2.0e-3)  # a plain step is then 1e-3
    assert costs.relative(4, 0) == pytest.approx(1.0)
    assert costs.relative(4, 4) == pytest.approx(3.0)


def test_averages_follow_new_timings():
    costs = IterationCosts(ema=0.5)
    costs.observe(1, 0, 1.0)
    costs.observe(1, 0, 3.0)
    costs.observe(1, 1, 4.0)
    assert costs.relative(1, 1) == pytest.approx(2.0)
    costs.observe(1, 0, 0.0)  # a clock that did not advance teaches nothing
    assert costs.relative(1, 1) == pytest.approx(2.0)


def test_a_bucket_without_timings_borrows_the_nearest():
    costs = IterationCosts()
    costs.observe(32, 0, 1.0)
    costs.observe(32, 4, 3.0)
    costs.observe(1, 0, 1.0)
    costs.observe(1, 4, 1.2)
    assert costs.relative(16, 4) == pytest.approx(3.0)  # 16 is nearer 32 than 1
    assert costs.relative(2, 4) == pytest.approx(1.2)


@pytest.mark.parametrize("device, seconds, expected", [
    ("gpu", {0: 1.0, 1: 1.02, 2: 1.04, 4: 1.08, 8: 1.16}, 8),  # wide calls cost about what narrow ones do
    ("cpu", {0: 1.0, 1: 1.3, 2: 1.6, 4: 2.2, 8: 3.4}, 2),
])
def test_the_same_acceptance_drafts_wider_where_width_is_cheap(device, seconds, expected):
    costs = IterationCosts(ema=1.0)
    for w, s in seconds.items():
        costs.observe(1, w, s)
    p = 0.7
    gains = [1 + sum(p ** i for i in range(1, w + 1)) for w in range(9)]
    assert costs.best_width(1, gains) == expected, [g / costs.relative(1, w) for w, g in enumerate(gains)]


def test_nothing_pays_when_drafts_are_rejected():
    costs = IterationCosts()
    costs.observe(1, 0, 1.0)
    costs.observe(1, 1, 1.1)
    assert costs.best_width(1, [1.0, 1.0, 1.0]) == 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        IterationCosts(ema=0)
