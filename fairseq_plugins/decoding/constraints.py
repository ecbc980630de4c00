"""fairseq's constraints on the next-token log-probabilities, in one place.

``SequenceGenerator._generate`` (fairseq/sequence_generator.py) does, per step and in this order::

    lprobs[lprobs != lprobs] = -inf            # NaN (fp16 overflow) is never picked
    lprobs[:, pad] = -inf                       # never select pad
    lprobs[:, unk] -= unk_penalty
    if step >= max_len: everything but EOS = -inf   # EOS forced at the length limit
    elif step < min_len: lprobs[:, eos] = -inf      # no EOS before the minimum length

(``step`` = tokens already generated, so the token chosen at ``step`` is the ``step + 1``-th.)
The plugin's generators score several steps per model call, so :class:`GreedyConstraints` applies
the same rules to log-probs of any shape ``(..., V)`` whose columns are at different steps: the
engine's verification call ``(B, m, V)`` with shared ``(m,)`` or per-row ``(B, m)`` steps, a
drafter's block, the multi-token beam's ``(n, beam, z, V)`` groups.  No host synchronisation: the
steps stay on the device; host bounds of them (``min_step``/``max_step``) only let it skip masks
that cannot apply.  Temperature is not here: fairseq divides the logits before the softmax.
"""
import math
from typing import Dict, Optional

import torch
from torch import Tensor


class GreedyConstraints:
    """fairseq's greedy/beam constraints for one target dictionary and one run's options.

    ``GreedyConstraints(eos, pad, unk, vocab_size, min_len=1, unk_penalty=0.0)``; then, per call,
    ``apply(lprobs, steps, max_len, min_step=0, max_step=None)`` (in place, returns ``lprobs``)."""

    def __init__(self, eos: int, pad: int, unk: int, vocab_size: int, min_len: int = 1, unk_penalty: float = 0.0):
        self.eos, self.pad, self.unk = eos, pad, unk
        self.vocab_size = vocab_size
        self.min_len = min_len
        self.unk_penalty = unk_penalty
        self._not_eos: Dict[torch.device, Tensor] = {}  # (V,) True except at EOS, one per device

    @classmethod
    def for_dictionary(cls, tgt_dict, min_len: int = 1, unk_penalty: float = 0.0) -> "GreedyConstraints":
        return cls(tgt_dict.eos(), tgt_dict.pad(), tgt_dict.unk(), len(tgt_dict), min_len, unk_penalty)

    def apply(self, lprobs: Tensor, steps: Tensor, max_len: int, min_step: int = 0,
              max_step: Optional[int] = None) -> Tensor:
        """fairseq's constraints on ``lprobs`` ``(..., V)``, in place; returns ``lprobs``.

        ``steps``: the step of every column (tokens generated before it), a tensor broadcastable to
        ``lprobs.shape[:-1]`` (e.g. ``(m,)`` shared by all rows or ``(B, m)`` per row), on
        ``lprobs``' device.  ``max_len``: fairseq's maximum length (only EOS at steps >= max_len).
        ``min_step``/``max_step``: host ints known to bound ``steps`` from below/above (default:
        no bound known); a mask that no column can need is skipped, nothing is read from the device."""
        lprobs.masked_fill_(torch.isnan(lprobs), -math.inf)  # fairseq: lprobs[lprobs != lprobs] = -inf
        lprobs[..., self.pad] = -math.inf
        if self.unk_penalty:
            lprobs[..., self.unk] -= self.unk_penalty
        if max_step is None or max_step >= max_len:
            lprobs.masked_fill_((steps >= max_len).unsqueeze(-1) & self._not_eos_on(lprobs.device), -math.inf)
        if min_step < self.min_len:
            # fairseq's elif: at steps >= max_len (>= min_len, checked by the generators) EOS stays
            lprobs[..., self.eos].masked_fill_(steps < self.min_len, -math.inf)
        return lprobs

    def _not_eos_on(self, device) -> Tensor:
        mask = self._not_eos.get(device)
        if mask is None:
            mask = torch.ones(self.vocab_size, dtype=torch.bool, device=device)
            mask[self.eos] = False
            self._not_eos[device] = mask
        return mask
