"""Jacobi decoding as a drafter (Santilli et al. 2023, "Accelerating Transformer Inference for
Translation via Parallel Decoding", §3, Alg. 1-3).

Jacobi iteration on the triangular system of Eq. (4): the block's tokens are initialised with
PAD (INITT, §3.3), every iteration re-predicts all of them in parallel from the previous
iteration's values, ``y^k = argmax p(y | y^{k-1}, x)``, until the block stops changing (STOPC,
Eq. 5).  In draft-and-verify terms the *previous iteration's output is the next draft*: the
drafter keeps the current iterate ``y^k`` per row and the verifier call is the Jacobi update.
With the ``exact`` rule the accepted prefix is exactly the part of the block that has reached its
fixed point, plus the verifier's token after it (Prop. 1: at least one new token per iteration;
the result equals greedy decoding).

Block layout (the draft of a call covers the unfinished part of the current block):

* ``jacobi_pj``  (Alg. 1): one block, the whole target of length ``m``.
* ``jacobi_pgj`` (Alg. 2): blocks of ``b`` = ``--block-size`` output positions ``[jb, (j+1)b)``;
  the verifier's token after a fixed block is the Gauss-Seidel step into the next one.
* ``jacobi_hgj`` (Alg. 3): PGJ blocks up to ``h`` positions, then autoregressive until EOS.
  ``h`` = fairseq's maximum length (``max_len_a * src + max_len_b``), the paper's own setting
  (§4: "we set [h] equal to the maximum"); no target length is needed, EOS inside a block stops.

PJ and PGJ need the target length ``m`` (``--jacobi-length``): ``max`` uses the same maximum
length as HGJ (so PGJ-max and HGJ coincide), ``greedy_oracle`` takes the length of a greedy
pre-run that the engine performs, counts and times (``stats['length_oracle']``).  Both reach the
drafter as ``ctx.target_length`` through a wrapper, ``drafters.length_oracle.LengthOracle``
(``from_config`` wraps PJ/PGJ in it).

Choice (paper leaves it open): the verifier's prediction one position past the block is kept as
the next block's first guess instead of PAD; it costs nothing and keeps the output identical.
"""
from dataclasses import dataclass, field, replace

import torch

from fairseq_plugins.decoding.drafters.base import (DRAFTERS, BlockDrafter, Draft, DrafterCapabilities, StepResult,
                                                    block_size_of)
from fairseq_plugins.decoding.drafters.length_oracle import SOURCES as TARGET_LENGTHS, LengthOracle
from fairseq_plugins.errors import OptionError


@dataclass
class JacobiOptions:
    jacobi_length: str = field(
        default="max", metadata={"help": "PJ/PGJ target length: 'max' (max_len_a*src+max_len_b, no oracle) "
                                 "or 'greedy_oracle' (taken from a greedy pre-run, reported and timed as such)"})


@DRAFTERS.register("jacobi_pj", "jacobi_pgj", "jacobi_hgj",
                   help="Jacobi decoding (Santilli et al. Alg. 1-3); PJ/PGJ take --jacobi-length", options=JacobiOptions)
class JacobiDrafter(BlockDrafter):
    # after a plain step the next positions hold no prediction yet; the verifier's predictions at every fed
    # position are the next iterate (Eq. 4); rows whose drafts keep failing stop widening the batch's call
    capabilities = DrafterCapabilities(drafts_after_plain_steps=False, needs_all_columns=True)

    def __init__(self, variant: str, block_size: int, record: bool = False, length: str = "max"):
        if variant not in ("pj", "pgj", "hgj"):
            raise ValueError(f"unknown Jacobi variant {variant!r}")
        if length not in TARGET_LENGTHS:
            raise OptionError(f"--jacobi-length must be one of {', '.join(TARGET_LENGTHS)} (got {length!r})")
        super().__init__(block_size)
        self.variant = variant
        self.name = "jacobi_" + variant
        self.target_length = length if variant in ("pj", "pgj") else None  # HGJ needs none
        # PJ drafts the whole target by definition (Alg. 1): no adaptive width by default
        self.capabilities = replace(self.capabilities, target_length=self.target_length is not None,
                                    adaptive_block=variant != "pj")
        self.record = record  # keep every iterate (DDGviz)
        self.history = []

    @classmethod
    def from_config(cls, cfg, task=None, models=()):
        drafter = cls(cfg.drafter.split("_", 1)[1], block_size_of(cfg), length=cfg.jacobi_length)
        return drafter if drafter.target_length is None else LengthOracle(drafter, drafter.target_length)

    def max_draft(self, max_len):
        return max_len if self.variant == "pj" else self.block

    def begin(self, ctx):
        super().begin(ctx)
        bsz = ctx.src_tokens.size(0)
        # iterate y^k, aligned with the engine's output buffer (index 1 + step); PAD = INITT (§3.3)
        self.guess = ctx.src_tokens.new_full((bsz, ctx.width), ctx.pad)
        self.guess_prob = torch.zeros(bsz, ctx.width, device=ctx.src_tokens.device)
        self.sent = None  # (B,) draft slots each row sent in its last proposal (observe keeps its own columns)
        if self.target_length is not None:
            if ctx.target_length is None:
                raise OptionError(f"{self.name} needs the target length (--jacobi-length: wrap it in "
                                  "drafters.length_oracle.LengthOracle)")
            self.length = ctx.target_length.clone()
        else:  # HGJ: parallel up to h = max_len + 1 output positions (then autoregressive)
            self.length = ctx.src_tokens.new_full((bsz,), ctx.max_len + 1)
        self.history = []

    def _remaining(self, n_gen):
        """Unknown positions of the current block that are drafted (the last one is predicted)."""
        left = (self.length - 1 - n_gen).clamp(min=0)  # draft slots before the target's last position
        if self.variant == "pj":
            return left
        return torch.minimum(self.block - n_gen % self.block, left)

    def propose(self, out, n_gen, longest=None):
        remaining = self._remaining(n_gen)
        k = self.ctx.max_len if self.variant == "pj" else self.block  # PJ: the whole target (the engine trims
        # the call to the widest row's remaining draft, so no host sync here)
        slots = torch.arange(k, device=out.device)
        idx = (n_gen.unsqueeze(1) + 1 + slots).clamp(max=self.guess.size(1) - 1)
        draft = self.guess.gather(1, idx)
        # PAD-initialised positions are scored too (their output is y^{k+1})
        draft = draft.masked_fill(slots.unsqueeze(0) >= remaining.unsqueeze(1), self.ctx.pad)
        self.sent = remaining.clamp(max=k)
        return Draft(draft, self.sent)

    def observe(self, step: StepResult):
        m = step.top.size(1)
        cols = torch.arange(m, device=step.top.device)
        idx = step.n_before.unsqueeze(1) + 1 + cols
        # Jacobi update: y^{k+1} = argmax p(. | y^k), at the row's own draft slots and the one past them; the
        # columns a wider row of the batch added are the row's own no more (they read PAD): keeping them made a
        # lossy rule's output depend on the batch size (shipped baseline, first 200 test sentences, batch 64
        # against 1: HGJ 20 differed with top-2, 95 with min_block, 22 with gad_pp; now none)
        own = cols.unsqueeze(0) <= (self.sent.clamp(max=m - 1) if self.sent is not None else cols.new_zeros(1)).view(-1, 1)
        self.guess.scatter_(1, idx, torch.where(own, step.top, self.guess.gather(1, idx)))
        if self.record:
            self.guess_prob.scatter_(1, idx, step.top_lprob.exp())
            n_after = step.generated()
            self.history.append({
                "guess": self.guess.clone(), "prob": self.guess_prob.clone(), "n_gen": n_after.clone(),
                "fed_upto": (step.n_before + m).clone(),
            })

    def select_rows(self, rows):
        if self.sent is not None:
            self.sent = self.sent.index_select(0, rows)
        self.guess = self.guess.index_select(0, rows)
        self.guess_prob = self.guess_prob.index_select(0, rows)
        self.length = self.length.index_select(0, rows)
