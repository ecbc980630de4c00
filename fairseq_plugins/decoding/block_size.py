"""Per-row draft length: how many of the drafter's tokens a row sends to the verifier.

With batch > 1 the verification call is as wide as the widest row's draft, and every row pays for
that width.  A row whose drafter keeps being wrong should not make the whole batch verify ``k``
tokens, so each row has its own cap, adapted from its recent acceptance (choice, SPEC §2 leaves
it open; the same idea as dynamic draft lengths in speculative decoding): after an iteration in
which the row accepted its whole (capped) draft, the cap doubles (up to ``--block-size``); after a
bifurcation it becomes ``accepted + 1``, never below 1; an iteration in which the drafter had
nothing to propose for the row (all PAD: it takes a plain greedy step) leaves the cap as it is.  Acceptance is untouched, so ``exact`` stays lossless.
"""
import torch
from torch import Tensor


def draft_lengths(draft: Tensor, pad: int) -> Tensor:
    """Leading non-PAD tokens of every row: what the verifier can accept at most."""
    if draft.size(1) == 0:
        return draft.new_zeros(draft.size(0))
    return draft.ne(pad).long().cumprod(dim=1).sum(dim=1)


class FixedBlock:
    """Every row drafts up to ``--block-size`` tokens (the papers' setting)."""

    adaptive = False

    def begin(self, bsz: int, k: int, device):
        pass

    def cap(self, draft: Tensor, lengths: Tensor, pad: int):
        """``(draft, lengths)`` after the row caps (the draft's slots past a cap become PAD)."""
        return draft, lengths

    def update(self, proposed: Tensor, accepted: Tensor):
        pass

    def select_rows(self, rows: Tensor):
        pass


class AdaptiveBlock(FixedBlock):
    adaptive = True

    def begin(self, bsz, k, device):
        self.k = k
        self.caps = torch.full((bsz,), k, dtype=torch.long, device=device)

    def cap(self, draft, lengths, pad):
        if draft.size(1) == 0:
            return draft, lengths
        beyond = torch.arange(draft.size(1), device=draft.device).unsqueeze(0) >= self.caps.unsqueeze(1)
        return draft.masked_fill(beyond, pad), torch.minimum(lengths, self.caps)

    def update(self, proposed, accepted):
        """``proposed``: draft slots the row sent; ``accepted``: how many of them were accepted."""
        grown = (2 * self.caps).clamp(max=self.k)
        caps = torch.where(accepted >= proposed, grown, (accepted + 1).clamp(max=self.k))
        self.caps = torch.where(proposed > 0, caps, self.caps)  # nothing proposed: nothing learnt

    def select_rows(self, rows):
        self.caps = self.caps.index_select(0, rows)
