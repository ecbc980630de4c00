"""What one engine iteration costs on this device, by draft width: measured while decoding.

The draft width that pays depends on the hardware: on a CPU the verification call's cost grows
with every scored column (the vocabulary projection of each column is paid in full), on a GPU a
call of width 10 costs about what a call of width 1 costs.  A width policy that carries no
thresholds tuned on one machine would read the costs from the decode itself: the engine would time
the interval between its one host synchronisation per iteration and the next (on a GPU the
synchronisation waits for the device, so the interval is the whole iteration) and report it here
with the width that iteration verified and the number of rows it carried.  Not wired into the
engine yet: the first wiring made IAD slower on this CPU (docs/RESULTS.md, "Convergence run").

Costs are kept per batch-size bucket (rows rounded up to a power of two: a call's cost depends on
its rows) as exponential averages per width.  Widths never measured in a bucket are estimated
from the measured ones: linear between two measured widths, beyond the widest with the slope of
the last two (or, with only one measured width, with ``SLOT_PRIOR``: our starting guess of one
slot's cost relative to a plain step, replaced as soon as a second width has been measured --
a prior, not a tuned constant).  A bucket with nothing measured borrows the relative costs of
the nearest bucket that has some.
"""
from typing import Dict, Optional, Sequence

COST_EMA = 0.2     # weight of the newest timing in a width's average (timings of one width vary ~10-25%)
SLOT_PRIOR = 0.25  # one slot's cost relative to a plain step until a second width has been measured


def rows_bucket(rows: int) -> int:
    """Rows rounded up to a power of two."""
    bucket = 1
    while bucket < rows:
        bucket *= 2
    return bucket


class IterationCosts:
    def __init__(self, slot_prior: float = SLOT_PRIOR, ema: float = COST_EMA):
        if slot_prior < 0 or not 0 < ema <= 1:
            raise ValueError(f"slot_prior must be >= 0 and ema in (0, 1] (got {slot_prior}, {ema})")
        self.slot_prior, self.ema = slot_prior, ema
        self.seconds: Dict[int, Dict[int, float]] = {}  # bucket -> width -> averaged seconds

    def observe(self, rows: int, width: int, seconds: float):
        """One iteration of ``rows`` rows that verified ``width`` draft slots took ``seconds``."""
        if rows < 1 or width < 0 or not seconds > 0:
            return  # nothing to learn (a clock that did not advance)
        table = self.seconds.setdefault(rows_bucket(rows), {})
        old = table.get(width)
        table[width] = seconds if old is None else (1 - self.ema) * old + self.ema * seconds

    def relative(self, rows: int, width: int) -> float:
        """Estimated cost of an iteration of ``width`` slots relative to a plain step (width 0)."""
        table = self._table(rows)
        if not table:
            return 1.0 + self.slot_prior * width
        base = self._estimate(table, 0)
        return self._estimate(table, width) / base

    def best_width(self, rows: int, gains: Sequence[float]) -> int:
        """The width ``w`` that maximises expected tokens per second, ``gains[w] / relative(rows, w)``
        (``gains[0]``: the plain step's one token); the narrower width on ties."""
        rates = [g / self.relative(rows, w) for w, g in enumerate(gains)]
        return max(range(len(rates)), key=lambda w: (rates[w], -w))

    def _table(self, rows: int) -> Optional[Dict[int, float]]:
        """This bucket's averages, or the nearest measured bucket's."""
        bucket = rows_bucket(rows)
        if bucket in self.seconds:
            return self.seconds[bucket]
        if not self.seconds:
            return None
        nearest = min(self.seconds, key=lambda b: (abs(b.bit_length() - bucket.bit_length()), b))
        return self.seconds[nearest]

    def _estimate(self, table: Dict[int, float], width: int) -> float:
        if width in table:
            return table[width]
        known = sorted(table)
        below = [w for w in known if w < width]
        above = [w for w in known if w > width]
        if below and above:  # linear between the neighbours
            lo, hi = below[-1], above[0]
            return table[lo] + (table[hi] - table[lo]) * (width - lo) / (hi - lo)
        if len(known) >= 2:  # beyond the measured range: the slope of the nearest two
            a, b = (known[-2], known[-1]) if below else (known[0], known[1])
            slope = (table[b] - table[a]) / (b - a)
            return max(table[b if below else a] + slope * (width - (b if below else a)), 1e-12)
        (only,) = known  # one measured width: the prior slope per slot, relative to the plain step
        plain = table[only] / (1.0 + self.slot_prior * only)
        return plain * (1.0 + self.slot_prior * width)
