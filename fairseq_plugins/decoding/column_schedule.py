"""How a verification call's columns are projected onto the vocabulary on a CPU: all at once, or
chunk by chunk (columns 0-1, 2-3, 4-7, 8-15, ...) until every row has rejected a draft token
(``scoring.ColumnScorer.until_rejected``).  Decided per call from what each path has cost on this
machine and how far drafts have been accepted so far: measured while decoding, never tuned per machine.

Which is cheaper depends on the kernel and the size.  MKL's GEMM on a few rows costs about a row's
product per row (d=128 onto 8K ids: 55 us for 1 row, 278 for 10), so the chunks save what a rejection
leaves unused.  oneDNN's packed product reads the (V, d) matrix once per product: at d=512 onto 8K
ids (16 MB, this CPU's cold timings) 2 rows cost 0.69 ms, 4 rows 1.26 and 11 rows 1.60, so chunks
of 2 + 2 + 4 columns (3-4 tokens accepted) cost 2.6 ms where one product of 11 costs 1.6.

Model (our choice; the IAD paper, Ge et al. 2022 §2, verifies every column at once and leaves this
open), per batch-size bucket and call width ``m``::

    all at once:  C_all(m)
    chunks:       sum over chunks [a, b):  P(longest accepted >= a) * C_chunk(b - a)     (P = 1 at a = 0)

``C`` are the scoring's own times (the projection, the log-probs, fairseq's rules, the verifier's
tokens and the acceptance; :func:`iteration_cost.device_clock`), and ``P`` is an exponential average
over calls: a chunk from column ``a`` is scored iff some row accepted at least ``a`` draft tokens,
which depends on the first ``a`` draft tokens only, so each threshold counts the calls whose draft
reached it, whatever their width.  A cost timed fewer than ``TRUST`` times is learnt first: the path
that times it is taken.  Timings during which a kernel was warmed up (``projection.Warmup``) are dropped.
"""
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional, Tuple

from fairseq_plugins.decoding.iteration_cost import rows_bucket

TRUST = 3           # timings of a cost before it is priced (their mean; one scoring call varies ~10-30% under load)
COST_EMA = 0.05     # then the weight of the newest timing
REACH_EMA = 0.05    # weight of the newest call in P(longest accepted >= a) (~20 calls: a few sentences)
OUTLIER = 3.0       # a timing counts as at most this many times its cost so far (the OS took the core)


def chunks(m: int) -> Iterator[Tuple[int, int]]:
    """The column ranges ``[a, b)`` the chunked path scores, in order: 0-1, 2-3, 4-7, 8-15, ... up to ``m``."""
    a, b = 0, min(m, 2)
    while a < m:
        yield a, b
        a, b = b, min(m, 2 * b)


@dataclass
class _Cost:
    seconds: float = 0.0
    timed: int = 0

    def add(self, seconds: float):
        if self.timed >= TRUST:
            seconds = min(seconds, OUTLIER * self.seconds)
        self.timed += 1
        self.seconds += max(1.0 / self.timed, COST_EMA) * (seconds - self.seconds)

    @property
    def known(self) -> bool:
        return self.timed >= TRUST


@dataclass
class _Bucket:
    whole: Dict[int, _Cost] = field(default_factory=dict)   # m -> C_all(m)
    chunk: Dict[int, _Cost] = field(default_factory=dict)   # columns -> C_chunk
    reach: Dict[int, float] = field(default_factory=dict)   # a -> P(longest accepted >= a)


class ColumnSchedule:
    """The measured costs of both paths and how far drafts are accepted, for one generator."""

    def __init__(self):
        self.buckets: Dict[int, _Bucket] = {}

    def _bucket(self, rows: int) -> _Bucket:
        key = rows_bucket(rows)
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = _Bucket()
        return b

    def chunked(self, rows: int, m: int) -> bool:
        """Score a call of ``m`` columns over ``rows`` rows chunk by chunk?"""
        if m <= 2:  # one chunk: the same as all at once
            return False
        chunked, whole = self.price(rows, m)
        if whole is None:
            return False  # time it
        if chunked is None:
            return True  # time it
        return chunked < whole

    def price(self, rows: int, m: int) -> Tuple[Optional[float], Optional[float]]:
        """The expected seconds of scoring ``m`` columns over ``rows`` rows ``(chunk by chunk, all at
        once)``; None where a cost is not known yet."""
        b = self._bucket(rows)
        whole = b.whole.get(m)
        expected = 0.0
        for a, end in chunks(m):
            cost = b.chunk.get(end - a)
            if cost is None or not cost.known:
                expected = None
                break
            expected += (1.0 if a == 0 else b.reach.get(a, 1.0)) * cost.seconds
        return expected, (whole.seconds if whole is not None and whole.known else None)

    def timed_whole(self, rows: int, m: int, seconds: float):
        self._bucket(rows).whole.setdefault(m, _Cost()).add(seconds)

    def timed_chunk(self, rows: int, columns: int, seconds: float):
        self._bucket(rows).chunk.setdefault(columns, _Cost()).add(seconds)

    def accepted(self, rows: int, drafted: int, longest: int):
        """A call verified ``drafted`` draft tokens per row; the row that accepted most accepted ``longest``."""
        reach = self._bucket(rows).reach
        for a, _ in chunks(drafted + 1):
            if a:
                p = reach.get(a)
                hit = 1.0 if longest >= a else 0.0
                reach[a] = hit if p is None else p + REACH_EMA * (hit - p)
