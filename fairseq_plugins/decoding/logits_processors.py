"""fairseq's rules on the next-token log-probabilities: one list, built once from the run's
``GenerationOptions`` (:func:`logits_processors`), that every generator applies.

``SequenceGenerator._generate`` (fairseq/sequence_generator.py) does, per step and in this order::

    lprobs[lprobs != lprobs] = -inf            # NaN (fp16 overflow) is never picked
    lprobs[:, pad] = -inf                       # never select pad
    lprobs[:, unk] -= unk_penalty
    if step >= max_len: everything but EOS = -inf   # EOS forced at the length limit
    elif step < min_len: lprobs[:, eos] = -inf      # no EOS before the minimum length
    lprobs = repeat_ngram_blocker(tokens, lprobs, ...)  # --no-repeat-ngram-size

(``step`` = tokens already generated, so the token chosen at ``step`` is the ``step + 1``-th.)
:class:`MaskInvalid`, :class:`UnkPenalty`, :class:`ForceEnd`, :class:`MinLength` and
:class:`NGramBlock` are those rules, each in place on log-probs of any shape ``(..., V)``.  Where
a column stands is the generator's: :class:`Steps` for the columns of left-to-right hypotheses (the
lean beam's one column per row; the engine's verification call ``(B, m, V)`` with shared ``(m,)``
or per-row ``(B, m)`` steps; a drafter's block), the multi-token beam's ``GroupSteps`` for its
groups of slots (``multi_token_beam``).  Either answers two questions, ``no_end(min_len)`` and
``must_end()``: the columns where EOS is forbidden / forced, or None where no column is (a host
decision: no mask is made, nothing is read from the device).  Temperature is not here: fairseq
divides the logits before the softmax (``step.DecoderStep.log_probs``).

``--no-repeat-ngram-size``: fairseq's CPU fallback of its n-gram blocker
(``NGramRepeatBlock._no_repeat_ngram``) is handed the whole token buffer, whose last n-1 columns are
padding, so without fairseq's CUDA extension (not in the pip wheel) it bans nothing.
:class:`NGramBlock` bans what the CUDA kernel and the option's help say: a token that would repeat
an n-gram of the hypothesis (start symbol included).
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_plugins.decoding.generation_options import GenerationOptionError


@dataclass
class Steps:
    """The step of every column of ``lprobs`` ``(..., V)``: ``steps`` a tensor broadcastable to
    ``lprobs.shape[:-1]`` (e.g. ``(m,)`` shared by all rows or ``(B, m)`` per row) on ``lprobs``'
    device; ``max_len`` fairseq's maximum length; ``min_step``/``max_step`` host ints known to bound
    ``steps`` (default: no bound known), so that a mask no column can need is skipped; ``tokens``
    ``(rows, > step)`` the hypotheses so far where every row has one column at ``step`` (n-gram blocking)."""

    steps: Tensor
    max_len: int
    min_step: int = 0
    max_step: Optional[int] = None
    tokens: Optional[Tensor] = None

    def no_end(self, min_len: int) -> Optional[Tensor]:
        """The columns before ``min_len`` (no EOS there), or None."""
        return self.steps < min_len if self.min_step < min_len else None

    def must_end(self) -> Optional[Tensor]:
        """The columns at or past ``max_len`` (only EOS there), or None."""
        return self.steps >= self.max_len if self.max_step is None or self.max_step >= self.max_len else None


class MaskInvalid:
    """NaN and PAD never chosen."""

    def __init__(self, pad: int):
        self.pad = pad

    def __call__(self, lprobs: Tensor, at) -> Tensor:
        # fairseq: lprobs[lprobs != lprobs] = -inf; one in-place pass (masked_fill_ over an isnan mask took
        # 5-6x longer on CPU: 64 against 10-13 ms for a beam-10 x batch-32 x 2-slot x 32K-vocabulary step)
        torch.nan_to_num_(lprobs, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        lprobs[..., self.pad] = -math.inf
        return lprobs


class UnkPenalty:
    """``--unkpen``: subtracted from UNK's log-prob."""

    def __init__(self, unk: int, penalty: float):
        self.unk, self.penalty = unk, penalty

    def __call__(self, lprobs: Tensor, at) -> Tensor:
        lprobs[..., self.unk] -= self.penalty
        return lprobs


class ForceEnd:
    """fairseq's EOS at max_len: only EOS (its log-prob kept) in the columns ``at.must_end()``."""

    def __init__(self, eos: int, vocab_size: int):
        self.eos, self.vocab_size = eos, vocab_size
        self._not_eos: Dict[torch.device, Tensor] = {}  # (V,) True except at EOS, one per device

    def __call__(self, lprobs: Tensor, at) -> Tensor:
        where = at.must_end()
        if where is None:
            return lprobs
        return lprobs.masked_fill_(where.unsqueeze(-1) & self._not_eos_on(lprobs.device), -math.inf)

    def _not_eos_on(self, device) -> Tensor:
        mask = self._not_eos.get(device)
        if mask is None:
            mask = torch.ones(self.vocab_size, dtype=torch.bool, device=device)
            mask[self.eos] = False
            self._not_eos[device] = mask
        return mask


class MinLength:
    """fairseq's no EOS before ``--min-len``: EOS is -inf in the columns ``at.no_end(min_len)``
    (fairseq's ``elif``: at steps >= max_len, >= min_len by ``GenerationOptions.max_len``, EOS stays)."""

    def __init__(self, eos: int, min_len: int):
        self.eos, self.min_len = eos, min_len

    def __call__(self, lprobs: Tensor, at) -> Tensor:
        where = at.no_end(self.min_len)
        if where is not None:
            lprobs[..., self.eos].masked_fill_(where, -math.inf)
        return lprobs


class NGramBlock:
    """``--no-repeat-ngram-size n``: -inf for every token that would complete an n-gram already in the
    hypothesis (its tokens[0..step], start symbol included: fairseq's CUDA kernel), in place, on the
    device.  ``lprobs`` ``(rows, V)``: one column per row, all at ``step`` (``at.max_step``)."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, lprobs: Tensor, at) -> Tensor:
        if getattr(at, "tokens", None) is None or at.min_step != at.max_step:
            raise GenerationOptionError("--no-repeat-ngram-size blocks the n-grams of hypotheses decoded one token "
                                        "a step, left to right; this generator's are not: drop it")
        return self.block(lprobs, at.tokens, at.max_step)

    def block(self, lprobs: Tensor, tokens: Tensor, step: int) -> Tensor:
        n = self.n
        if step + 2 - n <= 0:
            return lprobs
        seq = tokens[:, : step + 1]
        windows = seq.unfold(1, n, 1)[:, : step + 2 - n]  # (R, W, n): n-grams whose last token is before step + 1
        hit = windows[..., : n - 1].eq(seq[:, step + 2 - n :].unsqueeze(1)).all(-1)  # (R, W)
        # amin with +inf leaves a column alone; duplicates of a token reduce deterministically
        fill = torch.full_like(hit, math.inf, dtype=lprobs.dtype).masked_fill_(hit, -math.inf)
        return lprobs.scatter_reduce_(1, windows[..., n - 1], fill, reduce="amin")


class LogitsProcessors:
    """The run's processors in fairseq's order; ``processors(lprobs, at)`` applies them in place
    and returns ``lprobs``."""

    def __init__(self, processors: List):
        self.processors = list(processors)

    def __call__(self, lprobs: Tensor, at) -> Tensor:
        for processor in self.processors:
            processor(lprobs, at)
        return lprobs

    def apply(self, lprobs: Tensor, steps: Tensor, max_len: int, min_step: int = 0,
              max_step: Optional[int] = None) -> Tensor:
        """The processors on columns of left-to-right hypotheses at ``steps`` (:class:`Steps`)."""
        return self(lprobs, Steps(steps, max_len, min_step, max_step))


def logits_processors(options, tgt_dict) -> LogitsProcessors:
    """The one factory: fairseq's rules for ``options`` (``options.GenerationOptions``) and the
    target dictionary; a rule whose option is at its neutral value is left out."""
    eos = tgt_dict.eos()
    processors = [MaskInvalid(tgt_dict.pad())]
    if options.unk_penalty:
        processors.append(UnkPenalty(tgt_dict.unk(), float(options.unk_penalty)))
    processors.append(ForceEnd(eos, len(tgt_dict)))
    if options.min_len > 0:
        processors.append(MinLength(eos, int(options.min_len)))
    if options.no_repeat_ngram_size > 0:
        processors.append(NGramBlock(int(options.no_repeat_ngram_size)))
    return LogitsProcessors(processors)
