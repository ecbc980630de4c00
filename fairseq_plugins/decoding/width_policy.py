"""Draft width: how many draft slots the verification call scores.

With batch > 1 the verification call is as wide as its widest draft and every row pays for that
width; a draft slot that is rarely accepted costs more than it brings, more so the larger the
batch.  ``AdaptiveBlock`` (our choice, the papers leave it open; the idea of dynamic draft lengths in
speculative decoding, decided here for the whole batch):

* every row keeps ``p``, an estimate of the probability that its next draft token is accepted
  given the previous one was (an exponential average of accepted / tried draft tokens), and
  ``q``, an estimate of the probability that its drafter has a draft at all when asked (IAD has
  none for a row whose output matches no source n-gram; without ``q`` such a row kept its old
  ``p`` and the width open forever: measured on the en-de demo model, the timed set's last batch
  asked IAD for a draft in 126 of 132 iterations and got 26 draft tokens in all);
* the width ``w`` is the one with the most expected tokens per unit of time (issue "lossless
  drafting that pays"): ``(1 + sum_{j<=w} mean_b(q_b p_b) prod_{2<=i<=j} h_i) / (o c(w) + (1 - o)
  c_ask)``, at most ``--block-size`` slots, where ``o = 1 - prod_b (1 - q_b)`` is the chance that some
  row has a draft (without one the call scores no slot and costs only the ask, ``c_ask = 1 +
  draft``), ``c(w) = 1 + draft + verify + w slot`` (in plain steps; ``c(0) = 1``: greedy without
  proposals) is what an iteration costs *on this device*, measured while decoding
  (``iteration_cost.IterationCosts``), so the same code drafts wider on a GPU, where a wide call
  costs about what a narrow one does, than on a CPU; a width wider than any call timed so far is
  priced as the widest one timed (optimism until measured: fitted only on narrow calls, the line
  overprices wide ones, and a width never tried is never measured); inside that width every row
  sends its draft (the width is paid for anyway); a policy that drafts at every step forces idle
  iterations (no draft scored, none proposed) as the yardstick: one every ``YARDSTICK_GAP``
  iterations until ``YARDSTICKS`` are timed in the batch-size bucket, then one every ``REFRESH``
  (never on a batch's first call, whose interval holds the encoder and is not timed); p pools the
  draft tokens of the row's calls (discounted by ``EMA`` per call) with a prior: at batch 1 the
  run's estimate over every call, counted as ``RUN_PSEUDO`` undiscounted tokens, else the carried
  prior counted as ``PSEUDO`` tokens and discounted with them (``AdaptiveBlock.p``); ``h_i`` is
  the run's acceptance of slot i given the slots before it (``SlotAcceptance``);
* when no slot pays (width 0: a plain greedy step; to pay, a width must promise ``MIN_GAIN`` more
  tokens per unit of time than a plain step, the same threshold for the width, a probe and a trial
  batch), a probe at the best-paying width is tried now and then (after ``PROBE`` iterations,
  the interval doubling after every try that did not pay, up to ``MAX_PROBE`` or as far as keeps
  the probes' measured extra cost under ``PROBE_BUDGET`` of the plain steps, and halving after one
  that did), so that drafts that become useful again (IAD after a re-anchoring) are noticed;
  only once at most ``PROBE_ROWS`` rows are left: a probe widens every row's call, and with many
  rows a drafted token rarely shortens the batch's longest rows (IAD on the en-de demo model at
  batch 32: its probes saved no call and cost ~10%, measured interleaved with the engine's greedy);
  not for drafters whose draft needs the previous call to have drafted too (Jacobi: a batch that
  stops drafting decodes greedily to its end);
* at batch > 1 a drafted token only saves a call when it shortens the batch's longest rows, so
  the prior is cautious (``P_START``) and slots are priced at the batch's starting size when rows
  leave: measured on the en-de demo model at batch 32, IAD accepted 53 of 138 draft
  tokens, most of them once few rows were left, without saving a single call (315 either way);
* one policy serves the generator's whole run: the final p and q of every row that leaves are
  folded into the prior of the rows to come (``CARRY``; at batch 1 the run's counts over every call
  are the prior instead, ``RUN_DECAY``), so a run learns whether its drafter pays on
  its data instead of every sentence starting from ``P_START`` (IAD on en-de at batch 1 drafted at
  a loss in 235 of 1,071 calls that way); a drafter that cannot probe (Jacobi) tries a whole batch
  from ``P_START`` now and then instead (every 2nd, 4th, ... batch while its prior does not pay).

The policy runs on the host, on the accepted and proposed counts that the engine's one host
transfer per iteration brings anyway and the interval's time: it adds no tensor operation.  Acceptance is untouched, so
``exact`` stays lossless.  ``WidthPolicy``, the interface, is itself the papers' setting: every
row drafts up to ``--block-size`` tokens.

The engine sees two calls per iteration, and two for a batch's life (:class:`WidthPolicy`):
``plan()`` (a :class:`Plan`: the next call's width, whether the drafter is asked for the draft
after it, whether the batch has stopped drafting) and ``record(...)`` (what the call scored and
achieved; the policy times the interval since the previous ``record`` itself, on the clock of the
batch's device, ``iteration_cost.device_clock``); ``begin`` and ``select_rows``.
"""
import time
from dataclasses import dataclass
from typing import List, Optional

from fairseq_plugins.decoding.acceptance import prefix_length
from fairseq_plugins.decoding.iteration_cost import IterationCosts, device_clock
from fairseq_plugins.decoding.projection import Warmup

PROBE = 8          # iterations before a batch whose drafts did not pay tries one draft slot again
MAX_PROBE = 256    # the interval doubles after each try that did not pay, up to this (64: probes of a GAD drafter
                   # that never paid cost ~10% over greedy on en-de, each a wide verification and a catch-up) ...
PROBE_BUDGET = 0.005  # ... or further, so that probes cost at most this share of plain steps (en-de, batch 1: GAD's
                      # priced 3.7-4.3 steps, its drafter catching up on the prefix, cap ~650; IAD's width-10 probe
                      # ~2.8, priced as the widest call timed, width 1: cap ~360)
PROBE_ROWS = 8     # no probes while more rows than this are left (IAD at batch 32: 10% slower, no call saved)
P_START = 0.4      # a cautious start: at batch 1 one slot is tried, from about 11 rows on none (then probes)
EMA = 0.5          # discount of the older observations in p, per call
PSEUDO = 1         # the prior's weight in p, in draft tokens tried
MAX_BATCH_GAP = 16  # a drafter that cannot probe (Jacobi) retries a whole batch at most this many batches apart
RUN_PSEUDO = 4     # batch 1: the run's pooled estimate's weight in a row's p, in draft tokens (never discounted)
RUN_DECAY = 0.02   # discount of the run's pooled counts per call (~50 calls remembered)
CARRY = 0.2        # weight of one finished row's final p and q in the prior of the rows to come
SLOT_DECAY = 0.02  # discount of SlotAcceptance's counts per call (~50 calls remembered)
SLOT_PSEUDO = 4.0  # tries of a slot before its own count outweighs the geometric guess
YARDSTICKS = 8     # idle iterations timed per batch-size bucket before its yardstick is trusted (one varies 10-25%)
YARDSTICK_GAP = 8  # iterations between two forced idle ones until then
REFRESH = 256      # ... and after: one in this many iterations follows drift (other jobs, caches, clocks)
MIN_GAIN = 0.02    # a width must promise this much more than a plain step's rate: below it the promise is inside the
                   # cost fit's noise, and a drafter that never offers (q -> 0, never 0) was asked on wherever an ask
                   # was timed as free (958 asks in 2,833 calls on loaded cores)
Q_EMA = 0.25       # ... in q: slower, so that a row whose drafts are accepted (high p) keeps asking through
                   # a few draftless iterations (4 at p = 0.9, batch 1), a row whose drafts fail stops at once


def _beats_plain(rate: float) -> bool:
    """Do ``rate`` expected tokens per plain step's time pay for drafting?  A plain step makes one;
    drafting must promise ``MIN_GAIN`` more (the one threshold of every decision: the width, a probe,
    a trial batch)."""
    return rate > 1.0 + MIN_GAIN


def draft_lengths(draft, pad: int):
    """Leading non-PAD tokens of every row ``(B,)``: what the verifier can accept at most."""
    return prefix_length(draft.ne(pad))


class SlotAcceptance:
    """The run's acceptance of draft slot ``i`` given that slots ``1..i-1`` were accepted (``i >= 2``),
    from discounted counts over every row and call (``SLOT_DECAY`` per call).  A geometric model
    (``p^i``) assumes it constant; it is not: IAD's copy, once it holds for a token, mostly holds for
    the next ones (typo correction: one call of ten slots accepted 3.6 tokens on average where
    a constant p = 0.65 predicts 2.8), while later blockwise heads guess worse than earlier ones.
    Until a slot has been tried about ``SLOT_PSEUDO`` times its estimate leans on the caller's p."""

    def __init__(self):
        self.accepted: List[float] = []
        self.tried: List[float] = []

    def update(self, proposed: List[int], accepted: List[int]):
        width = max(proposed, default=0)
        if width < 2:
            return
        if len(self.tried) < width + 1:
            grow = width + 1 - len(self.tried)
            self.accepted += [0.0] * grow
            self.tried += [0.0] * grow
        self.accepted = [(1 - SLOT_DECAY) * a for a in self.accepted]
        self.tried = [(1 - SLOT_DECAY) * t for t in self.tried]
        for sent, got in zip(proposed, accepted):
            for i in range(2, min(got + 1, sent) + 1):  # slot i was scored with slots 1..i-1 accepted
                self.tried[i] += 1.0
                self.accepted[i] += i <= got

    def conditional(self, i: int, fallback: float) -> float:
        """P(slot ``i`` accepted | slots before it accepted), ``fallback`` until measured."""
        if i >= len(self.tried):
            return fallback
        return (self.accepted[i] + SLOT_PSEUDO * fallback) / (self.tried[i] + SLOT_PSEUDO)


@dataclass(frozen=True)
class Plan:
    """The policy's decision for the next iteration."""

    width: int     # draft slots the next call may verify
    ask: bool      # whether the drafter is asked for the draft after it (False: that call is a plain step)
    stopped: bool  # the batch will never draft again: plain steps to its end, no drafter bookkeeping


class WidthPolicy:
    """The draft-width policy's interface, and its fixed case: every row drafts up to ``--block-size``
    tokens (the papers' setting, ``--adaptive-block-size off``).  A policy implements ``width``,
    ``expects_draft``, ``stopped``, ``update`` and ``timed``; the engine calls ``begin``, ``plan``,
    ``record`` and ``select_rows``."""

    adaptive = False  # True: it learns from each row's real draft tokens and offers (the engine counts them)

    def begin(self, bsz: int, k: int, device=None) -> Plan:
        """A batch of ``bsz`` rows, drafts of up to ``k`` slots, on ``device`` (its clock times the
        iterations; None: the wall clock).  Returns the opening plan: no call is planned yet
        (width 0), ``ask``: whether the first call's draft is asked for."""
        self.k = k
        self.clock = time.perf_counter if device is None else device_clock(device)
        self._since: Optional[float] = None  # when the last record() came (None: none yet in this batch)
        self._warmups = -1  # projection.Warmup.events then: an interval that warmed a kernel is not timed
        return Plan(0, self.expects_draft(), False)

    def plan(self) -> Plan:
        """The next call's width, then whether the call after it is asked for a draft."""
        width = self.width()
        ask = self.expects_draft()
        return Plan(width, ask, not ask and self.stopped())

    def record(self, width: int, asked: bool, sent: Optional[List[int]] = None, got: Optional[List[int]] = None,
               offered: Optional[List[int]] = None):
        """The engine's one host synchronisation of an iteration returned (it waits for the device):
        the call scored ``width`` draft slots, the drafter proposed inside the interval or not
        (``asked``); per row, the real draft slots ``sent`` and ``got`` (accepted), and ``offered``
        (whether the drafter had a draft, when it was asked for this call's).  The interval since
        the previous record is what such an iteration costs here (``timed``), unless it is the
        batch's first (it holds the encoder) or a kernel met a new shape in it."""
        now = self.clock()
        if self._since is not None and Warmup.events == self._warmups:
            self.timed(width, asked, now - self._since)
        self._since, self._warmups = now, Warmup.events
        if sent is not None or offered is not None:
            zeros = [0] * len(sent if sent is not None else offered)
            self.update(sent or zeros, got or zeros, offered)

    def width(self) -> int:
        """Draft slots the next call may verify (host int)."""
        return self.k

    def expects_draft(self) -> bool:
        """Whether the call after the next one may verify a draft (asked right after ``width()``):
        False lets the engine skip the drafter's proposal, which the width would drop anyway."""
        return True

    def stopped(self) -> bool:
        """True once the batch will never draft again (asked after ``expects_draft()`` said False)."""
        return False

    def update(self, proposed: List[int], accepted: List[int], offered: Optional[List[int]] = None):
        pass

    def select_rows(self, keep: List[int]):
        pass

    def timed(self, width: int, asked: bool, seconds: float):
        """One iteration took ``seconds``: ``width`` draft slots scored, a draft proposed or not."""


class AdaptiveBlock(WidthPolicy):
    adaptive = True

    def __init__(self, probe: bool = True, costs: Optional[IterationCosts] = None):
        self.costs = costs if costs is not None else IterationCosts()  # measured on this device, for the run
        self.probe = probe  # False: a batch that stopped drafting takes plain steps to its end (Jacobi)
        # what the run has learned so far: a new row starts from it (Jacobi: see _batch_trial)
        self.prior_p, self.prior_q = P_START, 1.0
        # the run's draft tokens accepted / tried and drafts offered / asked, pooled over every call (batch 1: see p)
        self.run_g, self.run_t, self.run_offered, self.run_asked = P_START, 1.0, 1.0, 1.0
        self.one_row = False
        self.g: List[float] = []
        self.t: List[float] = []
        self.q: List[float] = []
        self.slots = SlotAcceptance()  # the run's, for slots 2.. (p covers the first)
        self.wait = self.gap = PROBE
        self.batch_wait = self.batch_gap = 1  # trial batches of a drafter that cannot probe
        self.since_idle = YARDSTICK_GAP  # iterations since the last idle one (the first yardstick is due at once)

    def begin(self, bsz, k, device=None):
        self.k = k
        self.start_rows = bsz  # slots are priced at the batch's size at the start: see the module docstring
        self.first_call = True  # a batch's first interval holds the encoder and is never timed: no yardstick there
        self._learn(range(len(self.g)))  # the previous batch's last rows
        start = self.prior_p
        if not self.probe:
            start = self._batch_trial(start)
            self.wait = self.gap = PROBE
        self.one_row = bsz == 1 and self.probe  # a row's gain is the batch's: the run's pooled estimate is its prior (p)
        if self.one_row:
            self.g, self.t, self.q = [0.0], [0.0], [self.run_offered / self.run_asked]
        else:
            self.g = [start * PSEUDO] * bsz  # discounted accepted draft tokens, the prior counting as PSEUDO tries
            self.t = [float(PSEUDO)] * bsz   # discounted tried draft tokens
            self.q = [self.prior_q] * bsz  # the drafter offers a draft: what the papers' drafters do but IAD often does not
        self.probing = False
        self.settled = False
        # a prior that does not pay: the first call is a plain step, so its draft is not even asked for
        self.idle = self._paying_width() == 0 and (self.wait > 1 or not self._may_probe())
        return super().begin(bsz, k, device)

    @property
    def p(self) -> List[float]:
        """Per row, the chance that its next draft token is accepted: accepted over tried, pooled.

        At batch 1 (a probing drafter) the row's own record is pooled with the run's estimate over
        every call so far, counted as ``RUN_PSEUDO`` tokens that are never discounted.  A sentence's
        record is a few tokens (typo correction: ~8-token sentences), and with the carried prior
        discounted along with it one rejection halved p: the row took plain steps to its end (602
        calls where fixed width made 511, 200 sentences), though IAD's first draft token was still
        accepted in 55% of the calls right after a rejection.  The carried prior (the final p of
        rows that leave) is biased low besides: a row whose p fell stops drafting and keeps it.
        At batch > 1 the carried prior stays: there the mean row's gain overstates what a draft
        saves (only the batch's longest rows bound its calls), and with the run's estimate every
        row of a batch of 32 started drafting at a loss (0.89x the engine's greedy)."""
        if self.one_row:
            prior = RUN_PSEUDO * self.run_g / self.run_t
            return [(g + prior) / (t + RUN_PSEUDO) for g, t in zip(self.g, self.t)]
        return [g / t for g, t in zip(self.g, self.t)]

    def _paying_width(self) -> int:
        """The width with the most expected tokens per unit of time (0: a plain step; the narrower on ties)."""
        width, rate = self._best_width()
        return width if _beats_plain(rate) else 0

    def _best_width(self):
        """``(w, rate)``: the drafting width (>= 1) with the most expected tokens per plain step's
        time, and that rate (the narrower on ties)."""
        p = self.p
        n = len(p)
        mean_p = sum(p) / n
        reach = sum(q * pb for q, pb in zip(self.q, p)) / n  # mean_b q_b p_b: slot 1 accepted
        gain = 1.0
        cost = self._pricing()
        none_offered = 1.0
        for q in self.q:
            none_offered *= 1.0 - q
        asked_only = none_offered * cost(0)  # no row has a draft: the call scores no slot, the ask is paid
        best, best_rate = 0, 0.0
        for w in range(1, self.k + 1):
            if w > 1:
                reach *= self.slots.conditional(w, mean_p)  # slot w accepted, given slots 1..w-1 were
            gain += reach  # + the w-th slot's expected tokens
            rate = gain / ((1.0 - none_offered) * cost(w) + asked_only)
            if rate > best_rate:
                best, best_rate = w, rate
        return best, best_rate

    def _pricing(self):
        """``cost(w)``: a drafting iteration of ``w`` slots in plain steps, as measured, except that a
        width wider than any call timed is priced as the widest one timed (optimism until measured:
        fitted on narrow calls only, the line's slot price is the ridge's split of their excess, and
        extrapolated it priced IAD's width-10 probe on en-de at 11.4 plain steps from two width-1 calls)."""
        widest = self.costs.widest(self.start_rows)
        cost = self.costs.pricing(self.start_rows, True)
        return (lambda w: cost(min(w, widest))) if widest else cost

    def _pays(self, width: int, expected: float) -> bool:
        """Does a call of ``width`` slots that adds ``expected`` tokens per row pay for its measured cost?"""
        return _beats_plain((1.0 + expected) / self._pricing()(width))

    def timed(self, width, asked, seconds):
        self.costs.observe(self.start_rows, width, asked, seconds)
        if width == 0 and not asked:
            self.since_idle = 0

    def _yardstick_due(self) -> bool:
        """Force an idle iteration now?  Every ``YARDSTICK_GAP`` iterations until ``YARDSTICKS`` have
        been timed in this bucket, then every ``REFRESH``: a policy that drafts at every step times
        no idle iteration of its own, and every cost is priced against the idle one."""
        gap = YARDSTICK_GAP if self.costs.idle_timed(self.start_rows) < YARDSTICKS else REFRESH
        return self.since_idle >= gap

    def _may_probe(self) -> bool:
        return self.probe and len(self.g) <= PROBE_ROWS

    def _batch_trial(self, start: float) -> float:
        """A drafter that cannot probe inside a batch (Jacobi) tries whole batches instead: while the
        learned prior does not pay for one slot, a batch starts from it (plain steps, the drafter
        dropped) except every ``batch_gap``-th, which starts from the cautious ``P_START``; the gap
        doubles after each such trial, up to ``MAX_BATCH_GAP``, and resets once the prior pays."""
        if self._pays(1, self.prior_q * self.prior_p):
            self.batch_gap = self.batch_wait = 1
            return start
        self.batch_wait -= 1
        if self.batch_wait > 0:
            return start
        self.batch_gap = min(2 * self.batch_gap, MAX_BATCH_GAP)
        self.batch_wait = self.batch_gap
        return max(start, P_START)

    def _pool(self, accepted: int, tried: int, offered: Optional[List[int]]):
        """The run's draft tokens accepted and tried (this call's, summed over its rows) and its drafts
        offered and asked, over every call (discounted by ``RUN_DECAY`` per call): a batch-1 row's
        prior (``p``)."""
        keep = 1 - RUN_DECAY
        if tried:
            self.run_g = keep * self.run_g + accepted
            self.run_t = keep * self.run_t + tried
        if offered is not None:
            self.run_offered = keep * self.run_offered + sum(1 for o in offered if o)
            self.run_asked = keep * self.run_asked + len(offered)

    def _learn(self, rows):
        """Fold the final estimates of rows that leave into the prior of the rows to come (probes,
        or trial batches for a drafter that cannot probe, correct a prior that turned pessimistic)."""
        p = self.p
        for i in rows:
            self.prior_p = (1 - CARRY) * self.prior_p + CARRY * p[i]
            self.prior_q = (1 - CARRY) * self.prior_q + CARRY * self.q[i]

    def width(self):
        first, self.first_call = self.first_call, False
        self.since_idle += 1
        probe = self._may_probe()
        if self.settled and (self.wait > 1 or not probe):
            # p only changes with drafts: no width pays still; counting down to the next probe costs
            # no fit (evaluated every iteration, the model made IAD's plain steps on en-de 10% dearer)
            if probe:
                self.wait -= 1
                self.idle = self.wait > 1
            return 0
        width = self._paying_width()
        self.settled = width == 0  # until a draft is scored or rows leave
        self.probing = False
        if width == 0 and probe:
            self.wait -= 1
            if self.wait <= 0:  # at the width that would pay best (with a fixed cost per drafting call, not 1)
                self.probing, width = True, self._best_width()[0]
                self.probed = width
        self.idle = width == 0 and (self.wait > 1 or not probe)  # p only changes with drafts: the next width is 0 too
        # one idle iteration, timed: what greedy costs here (not on the batch's first call, which is never timed:
        # a yardstick there was a plain step for nothing, and asked for again by the next batch)
        if width and self.probe and not first and self._yardstick_due():
            self.since_idle, self.probing, self.idle, width = 0, False, True, 0  # (Jacobi cannot resume: never)
        return width

    def expects_draft(self):
        return not self.idle

    def stopped(self):
        return self.idle and not self.probe  # p only changes with drafts, and without probes there are none

    def update(self, proposed, accepted, offered=None):
        """Per row: draft slots sent and accepted, and (``offered``, when the drafter was asked for
        this call's draft) whether it had one.  Observed per-token acceptance: accepted successes
        out of accepted + (1 if one was rejected)."""
        all_tried = 0
        for i, (sent, got) in enumerate(zip(proposed, accepted)):
            tried = got + (got < sent)
            if tried:  # pooled over tokens, not averaged over calls: a call's 10 accepted count 10 times
                self.g[i] = (1 - EMA) * self.g[i] + got
                self.t[i] = (1 - EMA) * self.t[i] + tried
                all_tried += tried
        self.slots.update(proposed, accepted)
        self._pool(sum(accepted), all_tried, offered)
        if any(proposed):
            self.settled = False
        if offered is not None:
            self.q = [(1 - Q_EMA) * q + Q_EMA * bool(o) for q, o in zip(self.q, offered)]
        if self.probing:
            paid = self._pays(self.probed, sum(accepted) / len(accepted))
            # one paying probe halves the gap, it does not reset it: drafting that pays again resumes through p
            # anyway, and a reset to PROBE after a lucky probe bought a run of probes (GAD on en-de: 4% of the decode)
            self.gap = max(PROBE, self.gap // 2) if paid else min(2 * self.gap, self._probe_cap())
            self.wait = self.gap

    def _probe_cap(self) -> int:
        """The longest probe interval: ``MAX_PROBE``, or more where a probe costs more than
        ``PROBE_BUDGET`` x ``MAX_PROBE`` extra plain steps, priced as the width is (``_pricing``: a probe
        of a drafter that must catch up on the prefix, GAD's, is dearer than a drafting call)."""
        extra = self._pricing()(self.probed) - 1.0
        return max(MAX_PROBE, int(extra / PROBE_BUDGET))

    def select_rows(self, keep):
        self.settled = False
        kept = set(keep)
        self._learn(i for i in range(len(self.g)) if i not in kept)
        self.g = [self.g[i] for i in keep]
        self.t = [self.t[i] for i in keep]
        self.q = [self.q[i] for i in keep]


def policy_for(capabilities, option: str, exact: bool, verified: bool) -> WidthPolicy:
    """One width policy for a generator's life (an adaptive one carries what it learned, and the
    costs it timed, into the next batches): ``--adaptive-block-size`` ``option`` (auto: the
    drafter's ``capabilities.adaptive_block``, and only where acceptance is ``exact``: a timed width
    would make a lossy rule's output depend on the clock); never for the drafter alone (not
    ``verified``: it drafts every call)."""
    adaptive = (capabilities.adaptive_block and exact) if option == "auto" else option == "on"
    return AdaptiveBlock(probe=capabilities.drafts_after_plain_steps) if adaptive and verified else WidthPolicy()
