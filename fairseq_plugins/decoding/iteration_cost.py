"""What an engine iteration costs on this device: measured while decoding, never tuned per machine.

The draft width that pays depends on the hardware (issue "lossless drafting that pays"): on a CPU
every scored column costs its vocabulary projection, so a call of width 10 costs ~2x a plain step;
on a GPU it costs about what a plain step does.  So the width policy (``width_policy.AdaptiveBlock``)
carries no thresholds measured on one machine: the policy times the interval between the engine's
one host synchronisation per iteration and the next (``WidthPolicy.record``; the synchronisation
waits for the device, so on a GPU too the interval is the whole iteration; on a CPU it is the
process's CPU time, :func:`device_clock`) and reports it with what the interval held:

* ``width``: the draft slots its verification call scored;
* ``asked``: whether the drafter proposed a draft inside it (IAD and blockwise heads propose for
  the *next* call before the synchronisation, Jacobi and NAR drafters after it, for this call:
  the interval holds the proposal's cost either way, which is where it is counted).

Model (our choice; the papers leave it open), per batch-size bucket (the batch's rows at its start,
rounded up to a power of two): ``seconds = plain + asked * draft + [width > 0] * verify + width *
slot``.  ``plain`` is the average of the *idle* intervals (no draft scored, none proposed: what plain
greedy costs), and ``draft``, ``verify`` and ``slot`` are fitted to what the other intervals cost
beyond it, by ridge least squares over exponentially weighted sums (``COST_EMA``), so the drafter's
own cost, a verification call's fixed cost and each verified column's are measured, not assumed.
``verify`` is there because a CPU at batch 1 showed it: a call verifying one draft token cost 1.9
plain steps, one verifying ten 2.5 (the scoring, acceptance and bookkeeping of a drafting iteration
are about a plain step's worth of small operations); a line through width 0 and 1 alone put ten
slots at 10 plain steps, and the policy stopped drafting where ten slots paid.  The bucket also
keeps the widest call it has timed (``widest``): the policy prices wider calls no dearer than that
one until it has timed one (``block_size``).  Interval times further than ``OUTLIER`` x the model's
prediction (the OS took the core) are clipped to that.  The previous attempt (a per-width average
against a "plain step" timed with the drafter's proposal inside it) understated what drafting
costs against greedy without a drafter; here the yardstick is the idle interval.

Until a bucket has been measured its relative costs are borrowed from the nearest measured bucket,
or, with none, are the priors ``SLOT_PRIOR``, ``VERIFY_PRIOR`` and ``DRAFT_PRIOR``: starting guesses in units of a
plain step, replaced as soon as intervals are timed.
"""
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

COST_EMA = 0.01     # weight of the newest interval in the weighted sums (~100 intervals remembered; one varies ~10-25%:
                    # with ~20, the fitted verify cost of the same run went from 0.3 to 1.3 plain steps between passes
                    # and the width policy locked into plain steps in some runs and not others)
OUTLIER = 4.0       # an interval is counted as at most this many times its predicted cost
SLOT_PRIOR = 0.3    # one verified slot's cost in plain steps, until measured (a starting guess)
DRAFT_PRIOR = 0.0   # the drafter's proposal, in plain steps, until measured
VERIFY_PRIOR = 0.0  # a verification call's fixed cost beyond a plain step, until measured
REFIT = 8           # intervals between two fits: the policy prices at every iteration, and a fit is a 3x3 solve
                    # (with ~100 intervals remembered, 8 more move it little)
RIDGE = 0.1         # weight of the priors in the fit, in intervals: the first timings move it at once


def device_clock(device) -> Callable[[], float]:
    """The clock the width policy times the engine's iterations with.  On a CPU the process's CPU time: the work is
    this process's threads', and on a shared host the wall clock also counts the other jobs that
    took the core (measured on a loaded 2-core machine: with wall-clock intervals the width policy
    stopped drafting in some runs and not others).  On a GPU the wall clock: the host waits for
    the device at the synchronisation, and the device's time is not the process's CPU time."""
    return time.process_time if device.type == "cpu" else time.perf_counter


def host_reads_free(device) -> bool:
    """Can the host read a tensor's value without waiting for a device?  On a CPU the value is on the
    host already: reading it is one operation (a step skipped on what it says saves more), and the
    engine's one synchronisation per iteration is no rule there.  On a GPU a read waits for every
    queued kernel, so a generator reads nothing but its one synchronisation."""
    return device.type == "cpu"


def rows_bucket(rows: int) -> int:
    """Rows rounded up to a power of two."""
    return 1 << max(0, rows - 1).bit_length()


@dataclass
class _Bucket:
    plain: Optional[float] = None  # seconds of an idle interval (a running mean, then an EMA)
    idle: int = 0  # idle intervals timed
    widest: int = 0  # the widest verification call timed
    # exponentially weighted moments of x = (asked, verified, width) -> extra seconds beyond ``plain``, in
    # Python floats: 3 x 3 is too small for numpy (its calls were 3.4 us per interval and 5.8 per fit here, 0.7
    # and 1.3 in Python; both run at every iteration and every batch start of a drafting run)
    xx: List[List[float]] = field(default_factory=lambda: [[0.0] * 3 for _ in range(3)])
    xy: List[float] = field(default_factory=lambda: [0.0] * 3)
    fitted: Dict[str, float] = field(default_factory=dict)  # "draft", "verify", "slot": relative to plain
    stale: int = 0  # intervals observed since the fit

    def observe(self, asked: bool, width: int, extra: float):
        x = (float(asked), float(width > 0), float(width))
        keep = 1 - COST_EMA
        for row, xi, i in zip(self.xx, x, range(3)):
            row[0], row[1], row[2] = keep * row[0] + xi * x[0], keep * row[1] + xi * x[1], keep * row[2] + xi * x[2]
            self.xy[i] = keep * self.xy[i] + xi * extra
        self.widest = max(self.widest, width)

    def relative(self) -> Dict[str, float]:
        """``draft``, ``verify`` and ``slot`` in plain steps: ridge least squares toward the priors."""
        if self.fitted and self.stale < REFIT:
            return self.fitted
        self.stale = 0
        a = [[v + (RIDGE if i == j else 0.0) for j, v in enumerate(row)] for i, row in enumerate(self.xx)]
        y = [v + RIDGE * prior * self.plain for v, prior in zip(self.xy, (DRAFT_PRIOR, VERIFY_PRIOR, SLOT_PRIOR))]
        coef = _solve3(a, y)
        self.fitted = {name: max(0.0, c / self.plain) for name, c in zip(("draft", "verify", "slot"), coef)}
        return self.fitted


def _solve3(a: List[List[float]], y: List[float]) -> List[float]:
    """``x`` with ``a x = y`` for a 3 x 3 ``a`` that is symmetric positive definite (the moments plus the
    ridge), by its Cholesky factor ``L L^T`` (stable where the moments are nearly collinear: ``verified``
    is 1 whenever ``width`` > 0, and ``asked`` often too)."""
    (a00, _, _), (a10, a11, _), (a20, a21, a22) = a
    l00 = math.sqrt(a00)
    l10, l20 = a10 / l00, a20 / l00
    l11 = math.sqrt(a11 - l10 * l10)
    l21 = (a21 - l20 * l10) / l11
    l22 = math.sqrt(a22 - l20 * l20 - l21 * l21)
    z0 = y[0] / l00  # L z = y
    z1 = (y[1] - l10 * z0) / l11
    z2 = (y[2] - l20 * z0 - l21 * z1) / l22
    x2 = z2 / l22  # L^T x = z
    x1 = (z1 - l21 * x2) / l11
    return [(z0 - l10 * x1 - l20 * x2) / l00, x1, x2]


class IterationCosts:
    """Measured iteration costs of one generator's run, by batch-size bucket."""

    def __init__(self):
        self.buckets: Dict[int, _Bucket] = {}

    def observe(self, rows: int, width: int, asked: bool, seconds: float):
        """One interval of a batch that started with ``rows`` rows: ``width`` slots scored, a draft
        proposed or not (``asked``), ``seconds`` long."""
        if rows < 1 or width < 0 or not seconds > 0:
            return  # a clock that did not advance teaches nothing
        key = rows_bucket(rows)
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = _Bucket()
        if b.plain is not None:  # (an idle interval's bound needs no fit)
            seconds = min(seconds, OUTLIER * b.plain * (self.relative_cost(rows, width, asked) if width or asked else 1.0))
        if width == 0 and not asked:
            b.idle += 1
            # the mean of the first ones, then an EMA: every cost is relative to it, and one interval varies
            # 10-25% (one yardstick alone, read under load, made drafting look 2x dearer or cheaper than it was)
            b.plain = seconds if b.plain is None else b.plain + max(1.0 / b.idle, COST_EMA) * (seconds - b.plain)
        elif b.plain is not None:
            b.observe(asked, width, seconds - b.plain)
        b.stale += 1

    def idle_timed(self, rows: int) -> int:
        """How many idle intervals have been timed in the bucket of ``rows``."""
        b = self.buckets.get(rows_bucket(rows))
        return 0 if b is None else b.idle

    def widest(self, rows: int) -> int:
        """The widest verification call timed in the bucket of ``rows`` (0: none yet)."""
        b = self.buckets.get(rows_bucket(rows))
        return 0 if b is None else b.widest

    def relative(self, rows: int) -> Dict[str, float]:
        """``{"draft": d, "verify": v, "slot": s}``: an iteration that asked for a draft and verified
        ``w > 0`` slots costs ``1 + d + v + s w`` plain steps."""
        bucket = rows_bucket(rows)
        own = self.buckets.get(bucket)
        if own is not None and own.plain is not None:  # the usual case: no search
            return own.relative()
        measured = {k: b for k, b in self.buckets.items() if b.plain is not None}
        if not measured:
            return {"draft": DRAFT_PRIOR, "verify": VERIFY_PRIOR, "slot": SLOT_PRIOR}
        nearest = min(measured, key=lambda k: (abs(k.bit_length() - bucket.bit_length()), k))
        return measured[nearest].relative()

    def relative_cost(self, rows: int, width: int, asked: bool) -> float:
        """An iteration's cost in plain steps (1 for an idle one)."""
        return self.pricing(rows, asked)(width)

    def pricing(self, rows: int, asked: bool) -> Callable[[int], float]:
        """``cost(width)`` in plain steps for the bucket of ``rows``, the fit looked up once for every
        width priced (the width policy prices up to ``--block-size`` widths per iteration: at batch 1
        the lookups alone were 4% of IAD's decoding time)."""
        rel = self.relative(rows)
        base = 1.0 + (rel["draft"] if asked else 0.0)
        verify, slot = rel["verify"], rel["slot"]
        return lambda width: base + (verify + slot * width if width else 0.0)
