"""The search strategies of the beam searches (docs/METHODS.md §2), one protocol in fairseq's shape
(``fairseq/search.py``): ``step(step, lprobs, scores) -> Candidates``, ``lprobs`` the constrained
log-probs of the live hypotheses ``(n, B, V)`` (one token each) or ``(n, B, z, V)`` (a group of z
slots each), ``scores`` ``(n, B)`` their running scores (None at step 0 for :class:`BeamSearch`, whose
hypotheses are then all the start symbol); ``Candidates`` ranked best first per sentence.  A generator
takes its strategy as a constructor argument (fairseq's ``search_strategy``), made by one factory,
:func:`build_search`, from the run's options and order.

* :class:`BeamSearch`  fairseq's ``search.BeamSearch.step`` (the lean beam search): the top ``2*beam``
  of ``beam*vocab`` running scores (step 0: the first beam only), ties in ``torch.topk``'s order.
* :class:`OuterTopK`  IBDecoder Alg. 1, lines 6-8: per hypothesis the top-B tokens of every slot,
  the outer addition of the z log-prob vectors pruned to the top-B groups (pruning to B after each
  added slot is exact: a group outside the top-B partial sums is beaten by B groups sharing its
  suffix), then the B*B candidates of the beam ranked by total score.
* :class:`DoubleTopK`  Imamura & Sumita's Alg. 1 DOUBLETOPK (h=2, c=1): over the whole beam the
  top 2W left tokens, then the top 3W (left, right) pairs, right tokens taken from the full
  vocabulary (ranked among each beam's top-3W right tokens: the same pairs, without a (n, 2W, V)
  table).
"""
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from fairseq_plugins.orders import OrderError


class Candidates(NamedTuple):
    """Candidates of one step, best first, per sentence: fairseq's ``(scores, indices, beams)``
    ``(n, K)``; for groups, ``tokens`` ``(n, K, z)`` and their log-probs ``lprobs``."""
    scores: Tensor  # running score of the hypothesis + the candidate's log-prob(s)
    tokens: Tensor  # the token (n, K) or group of z tokens (n, K, z), in generation order
    beams: Tensor   # the hypothesis (0..B-1 within its sentence) it continues
    lprobs: Optional[Tensor] = None  # groups: their tokens' log-probs (n, K, z)


class Search:
    """``step(step, lprobs, scores) -> Candidates`` for a beam of ``beam_size``."""

    def __init__(self, beam_size: int):
        self.beam_size = int(beam_size)

    def step(self, step: int, lprobs: Tensor, scores: Optional[Tensor]) -> Candidates:
        raise NotImplementedError


class BeamSearch(Search):
    """fairseq's ``search.BeamSearch.step`` on ``lprobs`` ``(n, B, V)``: K = min(2B, columns - 1)
    candidates."""

    def __init__(self, beam_size: int, candidate_multiple: int = 2):
        super().__init__(beam_size)
        self.candidate_multiple = candidate_multiple

    def step(self, step, lprobs, scores):
        n, B, V = lprobs.shape
        if step == 0:  # every hypothesis is the start symbol: only the first beam's candidates
            lprobs = lprobs[:, ::B, :].contiguous()
        else:
            lprobs = lprobs + scores.unsqueeze(-1)
        flat = lprobs.view(n, -1)
        cand_scores, indices = torch.topk(flat, k=min(self.candidate_multiple * B, flat.size(1) - 1))
        return Candidates(cand_scores, indices.fmod(V), torch.div(indices, V, rounding_mode="trunc"))


class GroupSearch(Search):
    """A strategy of the multi-token beam search: ``lprobs`` ``(n, B, z, V)``, candidates with groups
    of z tokens; ``scores`` the running scores, -inf for a hypothesis a sentence does not have yet."""

    def __init__(self, beam_size: int, order):
        super().__init__(beam_size)
        self.order = order


class OuterTopK(GroupSearch):
    """IBDecoder Alg. 1 lines 6-8: per hypothesis top-B per slot, outer addition, top-B groups."""

    def step(self, step, lprobs, scores):
        n, B, z, _ = lprobs.shape
        top_lp, top_idx = lprobs.topk(B, dim=-1)  # (n, B, z, B)
        group = top_lp[:, :, 0, :]  # (n, B, B) partial sums
        choice = torch.arange(B, device=lprobs.device).view(1, 1, B, 1).expand(n, B, B, 1)
        for i in range(1, z):
            total = (group[..., :, None] + top_lp[:, :, i, None, :]).view(n, B, B * B)
            group, idx = total.topk(B, dim=-1)
            prev = torch.div(idx, B, rounding_mode="floor")
            choice = torch.cat([choice.gather(2, prev[..., None].expand(-1, -1, -1, i)), (idx % B)[..., None]], -1)
        gather = choice.permute(0, 1, 3, 2)  # (n, B, z, B)
        tok = top_idx.gather(-1, gather).permute(0, 1, 3, 2)  # (n, B, B, z)
        lp = top_lp.gather(-1, gather).permute(0, 1, 3, 2)
        total = (scores[:, :, None] + group).view(n, B * B)
        score, rank = total.sort(dim=1, descending=True)
        pick = rank[..., None].expand(-1, -1, z)
        return Candidates(score, tok.reshape(n, B * B, z).gather(1, pick), torch.div(rank, B, rounding_mode="floor"),
                          lp.reshape(n, B * B, z).gather(1, pick))


class DoubleTopK(GroupSearch):
    """Imamura & Sumita Alg. 1 DOUBLETOPK: top 2W left tokens over the beam, then top 3W pairs.

    Without the (n, 2W, V) pair table: a right token can only be among the best 3W pairs if it
    is among the best 3W right tokens of its beam (the right log-probs depend on the beam only),
    so each beam's top-3W right tokens are taken first and the 2W x 3W sums ranked (exact)."""

    def __init__(self, beam_size: int, order):
        if order.h != 2 or order.c != 1:
            raise OrderError(f"--double-topk is Imamura & Sumita's search for two directions of one token each, "
                             f"but the order is {order.signature}: drop --double-topk, or decode a model trained "
                             "with --target-order head_tail or interleave and --tokens-per-direction 1")
        super().__init__(beam_size, order)

    def step(self, step, lprobs, scores):
        n, W, _, V = lprobs.shape
        left_lp, right_lp = lprobs[:, :, 0, :], lprobs[:, :, 1, :]
        left_score, left_idx = (scores[:, :, None] + left_lp).view(n, W * V).topk(min(2 * W, W * V), dim=1)
        left_beam = torch.div(left_idx, V, rounding_mode="floor")
        left_tok = left_idx % V
        R = min(3 * W, V)
        r_lp, r_tok = right_lp.topk(R, dim=-1)  # (n, W, R)
        pairs = left_score[..., None] + r_lp.gather(1, left_beam[..., None].expand(-1, -1, R))  # (n, 2W, R)
        score, idx = pairs.view(n, -1).topk(min(3 * W, pairs[0].numel()), dim=1)
        j = torch.div(idx, R, rounding_mode="floor")
        beam = left_beam.gather(1, j)
        ltok = left_tok.gather(1, j)
        at = beam * R + idx % R
        right_tok = r_tok.reshape(n, W * R).gather(1, at)
        rlp = r_lp.reshape(n, W * R).gather(1, at)
        # left log-probs read from the contiguous (n, W, 2, V) table: no copy of the strided left half
        llp = lprobs.reshape(n, W * 2 * V).gather(1, beam * (2 * V) + ltok)
        return Candidates(score, torch.stack([ltok, right_tok], -1), beam, torch.stack([llp, rlp], -1))


def build_search(options, vocab_size: int, order=None, double_topk: bool = False) -> Search:
    """The one factory: fairseq's beam search for the lean beam search (``order`` None), else the
    multi-token beam search's rule for ``order``, DOUBLETOPK with ``--double-topk`` or IBDecoder's outer top-k;
    the beam ``options.beam`` capped at ``vocab_size - 1``, as fairseq's ``SequenceGenerator``."""
    beam_size = min(int(options.beam), vocab_size - 1)
    if order is None:  # (--double-topk without an order is refused by the task: check_double_topk)
        return BeamSearch(beam_size)
    return (DoubleTopK if double_topk else OuterTopK)(beam_size, order)
