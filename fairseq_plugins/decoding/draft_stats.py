"""What the engine counts for ``generator.stats`` (the keys: ``engine``'s module docstring): per
batch on the host, from the draft the call fed and the iteration's one synchronisation, added to
the generator's stats when the batch ends."""
from typing import Dict, List, Optional, Tuple

from torch import Tensor

from fairseq_plugins.decoding.drafters import Draft
from fairseq_plugins.decoding.report import mean_accepted
from fairseq_plugins.decoding.width_policy import draft_lengths

STAT_KEYS = ("model_calls", "iterations", "accepted_tokens", "draft_accepted", "draft_tokens", "drafted_iterations",
             "produced_tokens", "sentences", "oracle_model_calls")


class CountingGenerator:
    """What fairseq-generate and the task call on a drafting generator besides ``generate``: ``cuda()``
    and ``eval()`` (nothing to do: the models are fairseq's, moved and set to eval by fairseq) and
    the mean accepted tokens of its ``stats``.  The engine and ``--drafter auto``'s generator."""

    stats: Dict

    def mean_accepted(self) -> float:
        return mean_accepted(self.stats)

    def cuda(self):
        return self

    def eval(self):
        return self


def fresh_stats(drafter: str, acceptance: str) -> Dict:
    stats: Dict = {k: 0 for k in STAT_KEYS}
    stats["length_oracle"] = False
    stats["drafter"] = drafter
    stats["acceptance"] = acceptance
    return stats


def draft_slots(fed: Draft, adaptive: bool, count: bool, pad: int) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """``(sent, proposed)`` ``(B,)`` for the synchronisation, or ``(None, None)`` when no draft was
    fed: ``sent``, the slots the width policy learns from, real draft tokens only where it learns
    (``adaptive``: Jacobi also scores its PAD-initialised slots, which are never accepted and say
    nothing about its drafts); ``proposed``, the slots each row sent, for the stats, where they
    differ from ``sent`` (else None).  The stats are summed on the host (:meth:`BatchCounts.learn`)."""
    if fed.size == 0:
        return None, None
    proposed = fed.lengths.clamp(max=fed.size)  # draft slots each row sent
    if not adaptive:
        return proposed, None
    return draft_lengths(fed.tokens, pad), (proposed if count else None)


class BatchCounts:
    """One batch's counts (``count``: False for a pre-run that counts its model calls only)."""

    def __init__(self, count: bool):
        self.count = count
        self.row_iterations = 0
        self.draft_accepted = 0  # draft tokens appended (counted on the host from the synchronisation)
        self.draft_tokens = 0    # draft tokens proposed
        self.drafted_rows = 0    # row-iterations that verified at least one draft token

    def learn(self, done: List[int], lengths: List[int], before: List[int], sent: Optional[List[int]],
              got: Optional[List[int]], proposed: Optional[List[int]]):
        """One call: its rows, the draft tokens proposed and appended (``before``: the rows' lengths
        before the call)."""
        if got is not None and self.count:
            drafts = proposed if proposed is not None else sent
            self.draft_tokens += sum(drafts)
            self.drafted_rows += sum(1 for n in drafts if n > 0)
            # an accepted draft token counts where it was appended (not cut at an EOS or the length limit)
            self.draft_accepted += sum(min(g, after - b) for g, after, b in zip(got, lengths, before))
        self.row_iterations += len(done)

    def add_to(self, stats: Dict, calls: int, finalized: List[List[Dict]]):
        stats["model_calls"] += calls
        if not self.count:
            return
        stats["iterations"] += self.row_iterations
        produced = sum(len(h[0]["tokens"]) for h in finalized)
        stats["accepted_tokens"] += produced
        stats["produced_tokens"] += produced
        stats["sentences"] += len(finalized)
        stats["draft_accepted"] += self.draft_accepted
        stats["draft_tokens"] += self.draft_tokens
        stats["drafted_iterations"] += self.drafted_rows
