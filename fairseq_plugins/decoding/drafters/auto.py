"""``--drafter auto``: try the lossless drafters this model and run support, keep the fastest.

``auto`` is no drafter the engine runs: :class:`AutoDrafter` holds the candidates, the generator
factory builds one engine per candidate (``decoding.auto_generator``: they share the verifier) and
:class:`DrafterChoice` picks the engine that decodes each batch.

Which drafter pays depends on the data (IAD needs outputs that copy the input), the checkpoint
(blockwise needs heads, GAD a drafter) and the device (a wide verification call is cheap on a GPU,
not on a CPU), so it is measured, not guessed.  The candidates (our choice; the papers each
assume one drafter): every registered drafter (``DRAFTERS``) this model and run support, ``none``
(plain greedy through the engine) being the fallback; a drafter that needs what the run lacks
(``blockwise``: a checkpoint with proposal heads; ``nar``: ``--drafter-path``) raises
``DrafterNotAvailableError`` when built and is left out, and so are PJ and PGJ, which take a
target length (``jacobi_hgj`` is Jacobi without one).

While choosing, the generator decodes its batches with the candidates in turn (fairseq-generate's
batches are sorted by length, so neighbouring batches are alike), timing each batch as a whole (the
decode ends in a host read, so on a GPU the time is the device's too; on a CPU with the process's
CPU time, ``iteration_cost.device_clock``).  A candidate's first batch warms it up and is not
counted (kernels meet their shapes, its width policy times its yardstick: measured at batch 1 on
typo correction, plain greedy's first batches cost 4x its later ones, which made whichever
candidate went first look slow); then each needs ``TRIAL_BATCHES`` counted batches and
``TRIAL_TOKENS`` produced tokens (at batch 1, three short sentences were too few to rank them).
Then it keeps the candidate with the least time per produced token, or ``none`` unless another is
at least ``MARGIN`` faster.  A candidate that is ``DROP`` slower per token than the fastest one still
in the trial, once both have half the trial's tokens, leaves the trial at once, ``none`` included
(racing, our choice): every batch a loser decodes is paid for; once one candidate is left it is
kept.  Measured at batch 32 (typo correction, 2,600-update verifier, 200 timed sentences, interleaved
with the engine's greedy; docs/RESULTS.md): without racing the trial outlasted the benchmark's first
pass and its timed pairs ran at 0.82x; with racing it ended within that pass, and auto ran at 0.98x.
Racing against ``none`` only, a drafter far faster than greedy still waited for the full trial: at
base size, batch 1 (gec-en, 1,500-update verifier) IAD took 3.4 ms a token against 11.4 for ``none``
and 10.7 for Jacobi, and 13 batches of each slow candidate ran before the choice, so auto read 1.83x
the engine's greedy where IAD alone read 2.78x.  The choice holds while the batches' sources stay within
``RETRY_LENGTH`` times the length at which it was made: fairseq-generate sorts batches by length,
so the first trial sees the shortest sentences, where drafting has least to gain (typo correction
at batch 1: the trial on the shortest sentences chose plain greedy, while IAD was 1.18x greedy over
a random sample), and a longer batch starts a new trial (no warm-up: every candidate is warm).  Every candidate is exact, so the output is fairseq's greedy output
token for token whichever decodes a batch.  ``--acceptance exact`` only: a lossy rule would make the
output depend on which candidate decoded a sentence.
"""
import copy
import logging
from typing import Dict, List, Optional, Tuple

from fairseq_plugins.decoding.drafters.base import DRAFTERS, Drafter, DrafterNotAvailableError

logger = logging.getLogger(__name__)

WARMUP_BATCHES = 1  # a candidate's first batches, not counted
TRIAL_BATCHES = 3  # counted batches each candidate decodes before the choice ...
TRIAL_TOKENS = 256  # ... and tokens it produces in them (about 25 short sentences at batch 1)
MARGIN = 0.03      # a drafter replaces plain greedy only when it is at least this much faster per token
RETRY_LENGTH = 2.0  # a batch whose sources are this many times longer than at the last choice starts a new trial
DROP = 0.25        # a candidate this much slower per token than the trial's fastest (both on half the trial's tokens)
                   # leaves the trial


class DrafterChoice:
    """The choosing: which candidate decodes the next batch, what each batch cost, the choice."""

    def __init__(self, names: List[str], trial_batches: int = TRIAL_BATCHES, margin: float = MARGIN,
                 trial_tokens: int = TRIAL_TOKENS, warmup_batches: int = WARMUP_BATCHES):
        if "none" not in names:
            raise ValueError("the candidates must include 'none', the fallback")
        self.names, self.trial_batches, self.margin = list(names), trial_batches, margin
        self.trial_tokens, self.warmup_batches = trial_tokens, warmup_batches
        self.warm: Dict[str, int] = {n: 0 for n in names}  # warm-up batches decoded
        self.seconds: Dict[str, float] = {n: 0.0 for n in names}
        self.tokens: Dict[str, int] = {n: 0 for n in names}
        self.batches: Dict[str, int] = {n: 0 for n in names}
        self.chosen: Optional[str] = None
        self.racing = list(names)  # the candidates still in the trial
        self.dropped: Dict[str, Tuple[float, str]] = {}  # candidate -> (its time per token over the fastest's, the
                                                         # fastest) when it left the trial
        self.chosen_at = 0  # source length of the batches the choice was made on
        self.last: Optional[str] = None  # the latest choice made (kept while a new trial runs)
        self.trials = 0  # choices made so far
        self.made: Optional[str] = None  # the latest choice with the timings it was made on (summary())
        self._length = 0
        self._turn = 0

    def next(self, length: int = 0) -> str:
        """The candidate for the next batch (``length``: its padded source length)."""
        self._length = max(self._length, length)
        if self.chosen is not None and length >= RETRY_LENGTH * max(self.chosen_at, 1):
            self._restart()
        if self.chosen is not None:
            return self.chosen
        at = self._turn % len(self.racing)
        self._turn = at + 1
        return self.racing[at]

    def record(self, name: str, seconds: float, tokens: int):
        if self.chosen is not None:
            return
        if self.warm[name] < self.warmup_batches:
            self.warm[name] += 1
            return
        self.seconds[name] += seconds
        self.tokens[name] += tokens
        self.batches[name] += 1
        self._drop_the_slow()
        racing = self.racing
        if len(racing) == 1 or (min(self.batches[n] for n in racing) >= self.trial_batches
                                and min(self.tokens[n] for n in racing) >= self.trial_tokens):
            self._choose()

    def _drop_the_slow(self):
        """Racing: every candidate over ``DROP`` slower per token than the fastest one still in the trial
        leaves it, once both have half the trial's tokens (a new leader can send several out at once)."""
        half = max(1, self.trial_tokens // 2)
        timed = [n for n in self.racing if self.tokens[n] >= half]
        if len(timed) < 2:
            return
        leader = min(timed, key=self.per_token)
        for name in timed:
            slower = self.per_token(name) / max(self.per_token(leader), 1e-12)
            if slower > 1 + DROP:
                at = self.racing.index(name)
                del self.racing[at]
                self._turn -= at < self._turn  # the turns go on in the same order
                self.dropped[name] = (slower, leader)

    def _restart(self):
        """A new trial on longer sentences; the candidates are warm already."""
        self.chosen = None
        self.racing, self.dropped, self._turn = list(self.names), {}, 0  # longer sentences: any candidate may pay now
        self.warmup_batches = 0
        self.seconds = {n: 0.0 for n in self.names}
        self.tokens = {n: 0 for n in self.names}
        self.batches = {n: 0 for n in self.names}

    def per_token(self, name: str) -> float:
        return self.seconds[name] / max(1, self.tokens[name])

    def _choose(self):
        best = min(self.racing, key=self.per_token)
        plain = self.per_token("none")
        self.chosen = self.last = best if self.per_token(best) <= (1 - self.margin) * plain else "none"
        self.chosen_at, self._length = self._length, 0
        self.trials += 1
        why = ("the fastest" if self.chosen != "none" else
               f"no drafter was {100 * self.margin:.0f}% faster than plain greedy")
        self.made = (f"chose {self.chosen} (trial {self.trials}, sources up to {self.chosen_at} tokens), {why} "
                     f"({self._timings()})")
        logger.info(self.summary())

    def _timings(self) -> str:
        """This trial's ms per token of each candidate ('not tried': no batch counted yet), batches counted,
        and who left it."""
        times = ", ".join(f"{n} {1e3 * self.per_token(n):.3f}" if self.batches[n] else f"{n} not tried"
                          for n in self.names)
        counted = ", ".join(f"{n} {self.batches[n]}" for n in self.names)
        left = "".join(f"; {n} left the trial at {r:.2f}x {by}'s time per token" for n, (r, by) in self.dropped.items())
        return f"ms per token: {times}; batches counted: {counted}{left}"

    def summary(self) -> str:
        """The choice with the timings it was made on; before the first one, the trial so far.  A trial
        on longer sources that had not ended is named, not mixed into the choice's timings."""
        if self.made is None:
            return f"drafter auto: still choosing ({self._timings()})"
        if self.chosen is None:
            return f"drafter auto: {self.made}; then a new trial on longer sources began and had not ended"
        return f"drafter auto: {self.made}"


@DRAFTERS.register("auto", help="try the lossless drafters this model supports on the first batches, keep the "
                                "fastest (or plain greedy)")
class AutoDrafter:
    """The candidates of ``--drafter auto``, each a drafter of its own (not a drafter itself: the
    factory builds an engine per candidate, ``decoding.auto_generator``)."""

    name = "auto"

    def __init__(self, candidates: Dict[str, Drafter]):
        self.candidates = candidates

    @classmethod
    def from_config(cls, cfg, task, models):
        if getattr(cfg, "acceptance", "exact") != "exact":
            raise DrafterNotAvailableError(
                f"--drafter auto chooses among lossless drafters: use --acceptance exact (got {cfg.acceptance}), "
                "or name one drafter")
        candidates = {}
        for name in DRAFTERS.names:
            if issubclass(DRAFTERS[name], AutoDrafter):
                continue
            sub = copy.copy(cfg)
            sub.drafter = name
            try:
                drafter = DRAFTERS[name].from_config(sub, task, models)
            except DrafterNotAvailableError:  # it needs what this run lacks (heads, a drafter model)
                continue
            if not drafter.capabilities.target_length:  # PJ/PGJ take a target length: HGJ is Jacobi without one
                candidates[name] = drafter
        return cls(candidates)
