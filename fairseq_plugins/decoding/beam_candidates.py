"""Candidate selection of the multi-token beam search (docs/METHODS.md §2), one small class per
rule in the manner of fairseq's ``search.Search``: ``step(scores, lprobs)`` turns the running
scores of the beam and the log-probs of its z new slots into ranked candidate groups.

* :class:`OuterTopK`  IBDecoder Alg. 1, lines 6-8: per hypothesis the top-B tokens of every slot,
  the outer addition of the z log-prob vectors pruned to the top-B groups (pruning to B after each
  added slot is exact: a group outside the top-B partial sums is beaten by B groups sharing its
  suffix), then the B*B candidates of the beam ranked by total score.
* :class:`DoubleTopK`  Imamura & Sumita's Alg. 1 DOUBLETOPK (h=2, c=1): over the whole beam the
  top 2W left tokens, then the top 3W (left, right) pairs, right tokens taken from the full
  vocabulary (ranked among each beam's top-3W right tokens: the same pairs, without a (n, 2W, V)
  table).

:func:`candidate_selection` picks the rule once, when the generator is built.
"""
from typing import NamedTuple

import torch
from torch import Tensor

from fairseq_plugins.orders import OrderError


class Candidates(NamedTuple):
    """Candidate groups of one step, best first, per sentence: ``(n, K)`` / ``(n, K, z)``."""
    score: Tensor   # running score of the hypothesis + the group's log-probs
    beam: Tensor    # the hypothesis (0..B-1 within its sentence) the group continues
    tokens: Tensor  # the group's z tokens, in generation order
    lprobs: Tensor  # their log-probs


class CandidateSelection:
    """``step(scores (n, B), lprobs (n, B, z, V)) -> Candidates`` for a beam of ``beam_size``."""

    def __init__(self, order, beam_size: int):
        self.order, self.beam_size = order, int(beam_size)

    def step(self, scores: Tensor, lprobs: Tensor) -> Candidates:
        raise NotImplementedError


class OuterTopK(CandidateSelection):
    """IBDecoder Alg. 1 lines 6-8: per hypothesis top-B per slot, outer addition, top-B groups."""

    def step(self, scores, lprobs):
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
        return Candidates(score, torch.div(rank, B, rounding_mode="floor"),
                          tok.reshape(n, B * B, z).gather(1, pick), lp.reshape(n, B * B, z).gather(1, pick))


class DoubleTopK(CandidateSelection):
    """Imamura & Sumita Alg. 1 DOUBLETOPK: top 2W left tokens over the beam, then top 3W pairs.

    Without the (n, 2W, V) pair table: a right token can only be among the best 3W pairs if it
    is among the best 3W right tokens of its beam (the right log-probs depend on the beam only),
    so each beam's top-3W right tokens are taken first and the 2W x 3W sums ranked (exact)."""

    def __init__(self, order, beam_size: int):
        if order.h != 2 or order.c != 1:
            raise OrderError(f"--double-topk is Imamura & Sumita's search for two directions of one token each, "
                             f"but the order is {order.signature}: drop --double-topk, or decode a model trained "
                             "with --target-order head_tail or interleave and --tokens-per-direction 1")
        super().__init__(order, beam_size)

    def step(self, scores, lprobs):
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
        return Candidates(score, beam, torch.stack([ltok, right_tok], -1), torch.stack([llp, rlp], -1))


def candidate_selection(order, beam_size: int, double_topk: bool = False) -> CandidateSelection:
    """The rule of ``--double-topk`` (DOUBLETOPK) or IBDecoder's outer top-k (the default)."""
    return (DoubleTopK if double_topk else OuterTopK)(order, beam_size)
