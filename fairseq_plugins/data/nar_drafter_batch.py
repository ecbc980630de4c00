"""Decoder input and targets of the NAR drafter (GAD, Xia et al. §3.2.1, Fig. 3 and L_NAR):
the target prefix ``y_1..y_p`` followed by ``k`` [MASK] tokens, predicting ``y_{p+1}..y_{p+k}``.

One layout for training and decoding, so the drafter sees at decode time exactly what it was
trained on:

    [PAD .. PAD, BOS, y_1 .. y_p, MASK x k]     (left-padded to the batch's longest prefix)

* BOS is fairseq's decoder start symbol (EOS), as the verifier's decoder input starts with it
  (the paper's Fig. 3 starts the drafter's input with [BOS] too).
* Left padding puts the ``k`` mask slots in the last ``k`` columns of every row, whatever its
  prefix length, so the block's predictions are ``features[:, -k:]`` for the whole batch;
  fairseq's positional embeddings count positions from the first non-pad token
  (``utils.make_positions``), so BOS is position 0 in every row, as in the verifier.
* Targets ``(B, k)``: ``y_{p+1} .. y_{p+k}``; slots past the target's EOS are PAD (not scored).
"""
from typing import Optional

import torch
from torch import Tensor

#: key of the drafter's record (block size, dictionaries, languages) in a checkpoint's task_state
STATE_KEY = "nar_drafter"


def block_input(tokens: Tensor, n_prefix: Tensor, k: int, pad: int, mask: int, longest: Optional[int] = None,
                with_slots: bool = False):
    """``tokens`` ``(B, W)``: column 0 is BOS, columns ``1..n_prefix[b]`` the prefix of row ``b``
    (the engine's output buffer has this layout).  Returns ``(B, max(n_prefix) + 1 + k)``, and with
    ``with_slots`` also every column's logical slot (BOS = 0; left padding gets 0 too: its keys are
    masked), i.e. the position fairseq's ``make_positions`` gives it counted from the first non-pad token.
    ``longest``: ``max(n_prefix)`` when the caller knows it on the host (the engine does); else it
    is read from the device (one synchronisation)."""
    bsz = tokens.size(0)
    if longest is None:
        longest = int(n_prefix.max()) if bsz else 0
    width = longest + 1
    cols = torch.arange(width + k, device=tokens.device).unsqueeze(0)
    src = cols - (width - 1 - n_prefix).unsqueeze(1)  # slot of each column (< 0: left padding)
    prefix = tokens.gather(1, src[:, :width].clamp(min=0)).masked_fill(src[:, :width] < 0, pad)
    inp = torch.cat([prefix, prefix.new_full((bsz, k), mask)], dim=1)
    return (inp, src.clamp(min=0)) if with_slots else inp


def block_targets(target: Tensor, n_prefix: Tensor, k: int, pad: int) -> Tensor:
    """``target`` ``(B, T)`` right-padded ``y_1..y_m`` (EOS included); returns ``(B, k)``
    ``y_{p+1}..y_{p+k}`` with PAD past each row's end."""
    length = target.ne(pad).long().sum(dim=1)
    idx = n_prefix.unsqueeze(1) + torch.arange(k, device=target.device).unsqueeze(0)
    inside = idx < length.unsqueeze(1)
    return target.gather(1, idx.clamp(max=target.size(1) - 1)).masked_fill(~inside, pad)


def sample_prefix_lengths(target: Tensor, pad: int, generator=None) -> Tensor:
    """``p`` uniform in ``0..m-1`` per row, ``m`` = target length incl. EOS (GAD §3.2.1: the block
    always holds at least one real target; ``p = m-1`` asks for the EOS alone)."""
    length = target.ne(pad).long().sum(dim=1).cpu()
    u = torch.rand(length.shape, generator=generator, device="cpu")  # a CPU generator: same draws on any device
    p = (u * length.double()).long()
    return torch.minimum(p, (length - 1).clamp(min=0)).to(target.device)


def drafter_sample(sample, k: int, bos: int, pad: int, mask: int, generator=None, prefix_lengths=None):
    """fairseq's translation batch -> the drafter's batch (decoder input, block targets, ntokens)."""
    target = sample["target"]
    p = sample_prefix_lengths(target, pad, generator) if prefix_lengths is None else prefix_lengths
    tokens = torch.cat([target.new_full((target.size(0), 1), bos), target], dim=1)
    net_input = dict(sample["net_input"])
    net_input["prev_output_tokens"] = block_input(tokens, p, k, pad, mask)
    out = dict(sample)
    out["net_input"] = net_input
    out["target"] = block_targets(target, p, k, pad)
    out["prefix_lengths"] = p
    out["ntokens"] = int(out["target"].ne(pad).sum())
    return out
