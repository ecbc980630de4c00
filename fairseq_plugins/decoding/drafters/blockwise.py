"""Blockwise parallel decoding as a drafter (Stern, Shazeer & Uszkoreit 2018, §3-4).

The proposal heads ``p_2..p_k`` sit on the verifier's own last hidden states
(``--arch blockwise_transformer``), so proposing costs no model call of its own: "combined scoring
and proposal" (§4).  One verifier call per iteration scores ``[last token, proposals 2..k]``; the
engine accepts a prefix of the proposals and appends the verifier's own token at the bifurcation
(which is head 1's proposal ``p_1`` for the next block: head 1 *is* the verifier, footnote 1); the
heads at that same position (the row's last accepted fed position, read from ``step.hidden`` in
:meth:`observe`) propose the next block's ``y_{j+2}..y_{j+k}``.  The first call of a sentence has
nothing to verify and only proposes, so a sentence decoded in ``I`` verifying iterations costs
``I + 1`` model calls (§4: m/k + 1 instead of 2m/k).

``--block-size`` ``b`` (``<= K``, the checkpoint's ``--block-heads``) uses heads ``2..b``: ``b - 1``
draft tokens per call; unset, all K heads.  Head logits are computed only at the gathered position
of each row (one ``(B, d)`` slice through the FFN and the output projection), not at every fed
position.  PAD is never proposed (the verifier would reject it).
"""
from typing import Optional

import torch

from fairseq_plugins.decoding.drafters.base import DRAFTERS, BlockDrafter, Draft, DrafterNotAvailableError, StepResult
from fairseq_plugins.decoding.projection import VocabProjection

TRAIN_HEADS_HINT = (
    "train heads on top of it, e.g.\n"
    "  fairseq-train DATA/bin --user-dir fairseq_plugins --task fast_translation --arch blockwise_transformer "
    "--base-checkpoint THAT.pt --block-heads 4 --freeze-base --criterion blockwise_cross_entropy "
    "--label-smoothing 0.1 --optimizer adam --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 300 "
    "--max-tokens 4096 --max-update 1000 --save-dir checkpoints/blockwise_k4\n"
    "(configs/models/blockwise_*.args), then decode the new checkpoint with --drafter blockwise")


@DRAFTERS.register("blockwise", help="blockwise parallel decoding (Stern et al.): the checkpoint's proposal heads")
class BlockwiseDrafter(BlockDrafter):
    name = "blockwise"

    def __init__(self, model, block_size: Optional[int] = None):
        heads = getattr(model, "block_heads", None)
        if heads is None:
            raise DrafterNotAvailableError(
                f"--drafter blockwise needs a checkpoint with blockwise heads (Stern §6), but the model is a "
                f"{type(model).__name__} without them; {TRAIN_HEADS_HINT}")
        k = heads.k
        block = k if block_size is None else block_size
        super().__init__(block)
        if block > k:
            raise DrafterNotAvailableError(
                f"--block-size {block} is larger than the checkpoint's K={k} heads (--block-heads {k} at training); "
                f"pass --block-size {k} or less (or omit it), or train a model with more heads")
        self.model = model
        self.heads = heads
        self.h: Optional[torch.Tensor] = None  # (B, d): the verifier's hidden state the heads read next
        self.project: Optional[VocabProjection] = None  # the verifier's output projection (the heads share it)
        self._own: Optional[VocabProjection] = None  # one of its own, for a caller that gives none

    @classmethod
    def from_config(cls, cfg, task, models):
        if not models:
            raise DrafterNotAvailableError("--drafter blockwise reads its heads from the verifier model: pass --path")
        return cls(models[0], cfg.block_size)

    def max_draft(self, max_len):
        return self.block - 1

    def begin(self, ctx):
        super().begin(ctx)
        self.project = ctx.vocab_projection  # the engine's verifier: same model, same packed weights (Stern footnote 1)
        if self.project is None:
            self._own = self._own or VocabProjection(self.model.decoder)
            self.project = self._own
            self.project.refresh()
        self.h = None  # the first call only proposes

    def propose(self, out, n_gen, longest=None):
        """Heads 2..b on the hidden state ``observe`` kept: computed only when the engine asks for
        a draft, so iterations the width policy runs as plain steps cost no head and no projection
        (at batch 32 the b-1 heads' vocabulary projection costs more than the verifier's own)."""
        if self.h is None:
            return Draft.none(n_gen)
        x = self.heads(self.h, 2, self.block)                           # (B, b-1, d)
        logits = self.project(x)                                        # (B, b-1, V)
        logits[:, :, self.ctx.pad] = -float("inf")
        return Draft.of(logits.argmax(dim=-1), self.ctx.pad)

    def observe(self, step: StepResult):
        if self.block < 2:  # no head to run: every call is a plain step
            return
        if step.hidden is None:
            raise RuntimeError("--drafter blockwise needs the verifier's hidden states (StepResult.hidden)")
        # the fed position whose prediction was the appended bifurcation token: index ``accepted``
        idx = step.accepted.view(-1, 1, 1).expand(-1, 1, step.hidden.size(2))
        self.h = step.hidden.gather(1, idx).squeeze(1)                  # (B, d)

    def select_rows(self, rows):
        if self.h is not None:
            self.h = self.h.index_select(0, rows)

