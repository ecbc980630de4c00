"""What an engine iteration costs on this device: measured while decoding, never tuned per machine.

The draft width that pays depends on the hardware (issue "lossless drafting that pays"): on a CPU
every scored column costs its vocabulary projection, so a call of width 10 costs ~2x a plain step;
on a GPU it costs about what a plain step does.  So the width policy (``block_size.AdaptiveBlock``)
carries no thresholds measured on one machine: the engine times the interval between its one host
synchronisation per iteration and the next (the synchronisation waits for the device, so on a GPU
too the interval is the whole iteration; on a CPU it is the process's CPU time, :func:`device_clock`)
and reports it with what the interval held:

* ``width``: the draft slots its verification call scored;
* ``asked``: whether the drafter proposed a draft inside it (IAD and blockwise heads propose for
  the *next* call before the synchronisation, Jacobi and NAR drafters after it, for this call:
  the interval holds the proposal's cost either way, which is where it is counted).

Model (our choice; the papers leave it open), per batch-size bucket (the batch's rows at its start,
rounded up to a power of two): ``seconds = plain + asked * draft + width * slot``.  ``plain`` is the
average of the *idle* intervals (no draft scored, none proposed: what plain greedy costs), and
``draft`` and ``slot`` are fitted to what the other intervals cost beyond it, by least squares over
exponentially weighted sums (``COST_EMA``), so both the drafter's own cost and each verified
column's are measured, not assumed.  Interval times further than ``OUTLIER`` x the model's
prediction (the OS took the core) are clipped to that.  The previous attempt (a per-width average
against a "plain step" timed with the drafter's proposal inside it) understated what drafting
costs against greedy without a drafter; here the yardstick is the idle interval.

Until a bucket has been measured its relative costs are borrowed from the nearest measured bucket,
or, with none, are the priors ``SLOT_PRIOR`` and ``DRAFT_PRIOR``: starting guesses in units of a
plain step, replaced as soon as intervals are timed.
"""
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

COST_EMA = 0.05     # weight of the newest interval in the weighted sums (~20 intervals remembered; one varies ~10-25%)
OUTLIER = 4.0       # an interval is counted as at most this many times its predicted cost
SLOT_PRIOR = 0.3    # one verified slot's cost in plain steps, until measured (a starting guess)
DRAFT_PRIOR = 0.0   # the drafter's proposal, in plain steps, until measured
RIDGE = 0.1         # weight of the priors in the fit, in intervals: the first timings move it at once


def device_clock(device) -> Callable[[], float]:
    """The clock the engine times its iterations with.  On a CPU the process's CPU time: the work is
    this process's threads', and on a shared host the wall clock also counts the other jobs that
    took the core (measured on a loaded 2-core machine: with wall-clock intervals the width policy
    stopped drafting in some runs and not others).  On a GPU the wall clock: the host waits for
    the device at the synchronisation, and the device's time is not the process's CPU time."""
    return time.process_time if device.type == "cpu" else time.perf_counter


def rows_bucket(rows: int) -> int:
    """Rows rounded up to a power of two."""
    return 1 << max(0, rows - 1).bit_length()


@dataclass
class _Bucket:
    plain: Optional[float] = None  # seconds of an idle interval (EMA)
    # exponentially weighted moments of (asked, width) -> extra seconds beyond ``plain``
    saa: float = 0.0
    saw: float = 0.0
    sww: float = 0.0
    sar: float = 0.0
    swr: float = 0.0
    fitted: Dict[str, float] = field(default_factory=dict)  # "draft", "slot": relative to plain

    def relative(self) -> Dict[str, float]:
        """``draft`` and ``slot`` in plain steps: ridge least squares toward the priors."""
        if self.fitted:
            return self.fitted
        p = self.plain
        a11, a12, a22 = self.saa + RIDGE, self.saw, self.sww + RIDGE
        b1, b2 = self.sar + RIDGE * DRAFT_PRIOR * p, self.swr + RIDGE * SLOT_PRIOR * p
        det = a11 * a22 - a12 * a12
        draft, slot = (a22 * b1 - a12 * b2) / det, (a11 * b2 - a12 * b1) / det
        self.fitted = {"draft": max(0.0, draft / p), "slot": max(0.0, slot / p)}
        return self.fitted


class IterationCosts:
    """Measured iteration costs of one generator's run, by batch-size bucket."""

    def __init__(self):
        self.buckets: Dict[int, _Bucket] = {}

    def observe(self, rows: int, width: int, asked: bool, seconds: float):
        """One interval of a batch that started with ``rows`` rows: ``width`` slots scored, a draft
        proposed or not (``asked``), ``seconds`` long."""
        if rows < 1 or width < 0 or not seconds > 0:
            return  # a clock that did not advance teaches nothing
        b = self.buckets.setdefault(rows_bucket(rows), _Bucket())
        if b.plain is not None:
            seconds = min(seconds, OUTLIER * b.plain * self.relative_cost(rows, width, asked))
        if width == 0 and not asked:
            b.plain = seconds if b.plain is None else (1 - COST_EMA) * b.plain + COST_EMA * seconds
        elif b.plain is not None:
            extra, a, w, keep = seconds - b.plain, float(asked), float(width), 1 - COST_EMA
            b.saa, b.saw, b.sww = keep * b.saa + a * a, keep * b.saw + a * w, keep * b.sww + w * w
            b.sar, b.swr = keep * b.sar + a * extra, keep * b.swr + w * extra
        b.fitted = {}

    def has_plain(self, rows: int) -> bool:
        """Has an idle interval (the yardstick) been timed in the bucket of ``rows``?"""
        b = self.buckets.get(rows_bucket(rows))
        return b is not None and b.plain is not None

    def relative(self, rows: int) -> Dict[str, float]:
        """``{"draft": d, "slot": s}``: a drafting iteration of width ``w`` costs ``1 + d + s w`` plain steps."""
        measured = {k: b for k, b in self.buckets.items() if b.plain is not None}
        if not measured:
            return {"draft": DRAFT_PRIOR, "slot": SLOT_PRIOR}
        bucket = rows_bucket(rows)
        nearest = min(measured, key=lambda k: (abs(k.bit_length() - bucket.bit_length()), k))
        return measured[nearest].relative()

    def relative_cost(self, rows: int, width: int, asked: bool) -> float:
        """An iteration's cost in plain steps (1 for an idle one)."""
        rel = self.relative(rows)
        return 1.0 + (rel["draft"] if asked else 0.0) + rel["slot"] * width
