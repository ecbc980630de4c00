"""Draft width: how many draft slots the verification call scores.

With batch > 1 the verification call is as wide as its widest draft and every row pays for that
width; a draft slot that is rarely accepted costs more than it brings, more so the larger the
batch.  ``AdaptiveBlock`` (our choice, the papers leave it open; the idea of dynamic draft lengths in
speculative decoding, decided here for the whole batch):

* every row keeps ``p``, an estimate of the probability that its next draft token is accepted
  given the previous one was (an exponential average of accepted / tried draft tokens);
* slot ``w`` is verified when the tokens it is expected to add, ``p^w`` averaged over the rows
  (0 for a row whose draft is shorter), pay for its cost: ``mean_b p_b^w >= theta(B)``, where
  ``theta`` grows with the batch size (a drafting iteration costs ~30% more than a plain step at
  batch 1 on a CPU and ~60% more at batch 32), at most ``--block-size`` slots; inside that width
  every row sends its draft (the width is paid for anyway);
* when no slot pays (width 0: a plain greedy step), one draft slot is tried now and then (after
  ``PROBE`` iterations, the interval doubling after every try that did not pay, up to
  ``MAX_PROBE``), so that drafts that become useful again (IAD after a re-anchoring) are noticed;
  only once at most ``PROBE_ROWS`` rows are left: a probe widens every row's call, and with many
  rows a drafted token rarely shortens the batch's longest rows (IAD on the en-de demo model at
  batch 32: its probes saved no call and cost ~10%, measured interleaved with the engine's greedy);
  not for drafters whose draft needs the previous call to have drafted too (Jacobi: a batch that
  stops drafting decodes greedily to its end);
* at batch > 1 a drafted token only saves a call when it shortens the batch's longest rows, so
  the prior is cautious (``P_START``) and the threshold stays that of the batch's starting size
  when rows leave: measured on the en-de demo model at batch 32, IAD accepted 53 of 138 draft
  tokens, most of them once few rows were left, without saving a single call (315 either way).

The policy runs on the host, on the accepted and proposed counts that the engine's one host
transfer per iteration brings anyway: it adds no tensor operation.  Acceptance is untouched, so
``exact`` stays lossless.  ``FixedBlock`` is the papers' setting: every row drafts up to
``--block-size`` tokens.
"""
import math
from typing import List

PROBE = 8          # iterations before a batch whose drafts did not pay tries one draft slot again
MAX_PROBE = 64     # the interval doubles after each try that did not pay, up to this
PROBE_ROWS = 8     # no probes while more rows than this are left (IAD at batch 32: 10% slower, no call saved)
P_START = 0.4      # a cautious start: at batch 1 one slot is tried, from about 11 rows on none (then probes)
EMA = 0.5          # weight of the newest observation in p


def draft_lengths(draft, pad: int):
    """Leading non-PAD tokens of every row ``(B,)``: what the verifier can accept at most."""
    if draft.size(1) == 0:
        return draft.new_zeros(draft.size(0))
    return draft.ne(pad).long().cumprod(dim=1).sum(dim=1)


def slot_threshold(batch_size: int) -> float:
    """theta(B): the acceptance chance a draft slot needs to pay for itself: 0.3 at batch 1, 0.6 from
    batch 32 on (measured on CPU with the demo's d=128 models: a drafting iteration -- one more slot
    per row, the acceptance rule and the drafter's bookkeeping -- costs ~25-30% more than a plain
    step at batch 1 and ~50-60% more at batch 32)."""
    return min(0.6, 0.3 + 0.3 * (batch_size - 1) / 31)


class FixedBlock:
    """Every row drafts up to ``--block-size`` tokens (the papers' setting)."""

    adaptive = False

    def begin(self, bsz: int, k: int):
        self.k = k

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

    def update(self, proposed: List[int], accepted: List[int]):
        pass

    def select_rows(self, keep: List[int]):
        pass


class AdaptiveBlock(FixedBlock):
    adaptive = True

    def __init__(self, probe: bool = True):
        self.probe = probe  # False: a batch that stopped drafting takes plain steps to its end (Jacobi)

    def begin(self, bsz, k):
        self.k = k
        self.theta = slot_threshold(bsz)  # the batch's size at the start: see the module docstring
        self.p = [P_START] * bsz
        self.wait = self.gap = PROBE
        self.probing = self.idle = False

    def width(self):
        theta = self.theta
        width = 0
        for w in range(1, self.k + 1):  # mean p^w decreases with w
            if sum(p ** w for p in self.p) < theta * len(self.p):
                break
            width = w
        self.probing = False
        probe = self.probe and len(self.p) <= PROBE_ROWS
        if width == 0 and probe:
            self.wait -= 1
            if self.wait <= 0:
                self.probing, width = True, 1
        self.idle = width == 0 and (self.wait > 1 or not probe)  # p only changes with drafts: the next width is 0 too
        return width

    def expects_draft(self):
        return not self.idle

    def stopped(self):
        return self.idle and not self.probe  # p only changes with drafts, and without probes there are none

    def update(self, proposed, accepted):
        """Per row: draft slots sent and accepted.  Observed per-token acceptance: accepted successes
        out of accepted + (1 if one was rejected)."""
        for i, (sent, got) in enumerate(zip(proposed, accepted)):
            tried = got + (got < sent)
            if tried:
                self.p[i] = (1 - EMA) * self.p[i] + EMA * got / tried
        if self.probing:
            paid = sum(accepted) >= self.theta * len(accepted)
            self.gap = PROBE if paid else min(2 * self.gap, MAX_PROBE)
            self.wait = self.gap

    def select_rows(self, keep):
        self.p = [self.p[i] for i in keep]
