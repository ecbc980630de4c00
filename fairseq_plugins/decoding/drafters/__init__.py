"""Drafters: propose up to k tokens per row for the verifier (docs/METHODS.md §2).

The interface is small, so that adding a drafter never touches the engine:

* ``begin(ctx)``           once per batch (:class:`DraftContext`: sources, lengths, special ids);
* ``propose(out, n_gen)``  ``(B, K)`` draft tokens for the rows' current prefixes (``out[b, 0]``
  is BOS, ``out[b, 1 : n_gen[b] + 1]`` the tokens generated so far); PAD marks "no draft token"
  (never accepted: the verifier gives PAD ``-inf``), ``K = 0`` is a plain greedy step;
* ``observe(step)``        what the verifier said (:class:`StepResult`), including its last hidden
  states at every fed position (``step.hidden``), so a drafter that is part of the verifier
  (blockwise heads, Stern §4 "combined scoring and proposal") proposes the next block from the
  same model call that verified this one;
* ``select_rows(rows)``    rows were dropped from the batch (finished sentences);
* ``max_draft(max_len)``   an upper bound of ``K`` (buffer sizes).

A drafter may propose fewer than ``K`` tokens for a row (``lengths(draft)``, by default the leading
non-PAD tokens): the verification call is as wide as the widest row's draft.  ``adaptive_block`` is
the drafter's default for ``--adaptive-block-size auto`` (``block_size.AdaptiveBlock``: each row's
draft capped from its recent acceptance).

``--block-size`` is optional (:func:`block_size_of`): unset, jacobi and input_copy use
``DEFAULT_BLOCK_SIZE`` and blockwise all the checkpoint's heads.

``needs_target_length``: PJ/PGJ need the target length (``--jacobi-length``); the engine then
passes ``ctx.target_length`` (``max`` or a greedy pre-run, reported as such).
"""
from dataclasses import dataclass
from typing import Optional

from torch import Tensor


DEFAULT_BLOCK_SIZE = 5


def block_size_of(cfg, default=DEFAULT_BLOCK_SIZE) -> int:
    """``--block-size``, or ``default`` when it was not given."""
    return default if getattr(cfg, "block_size", None) is None else cfg.block_size


class DrafterNotAvailableError(ValueError):
    """The drafter needs something this run does not have (a trained drafter model, heads)."""


@dataclass
class DraftContext:
    src_tokens: Tensor            # (B, S) fairseq layout (left-padded by default), ends with EOS
    src_lengths: Tensor           # (B,)
    max_len: int                  # fairseq's max_len: steps 0..max_len (EOS forced at max_len)
    width: int                    # width of the engine's ``out`` buffer
    target_length: Optional[Tensor]  # (B,) tokens incl. EOS, for drafters with needs_target_length
    bos: int
    eos: int
    pad: int
    encoder_out: Optional[dict] = None  # the verifier's encoder output (a drafter reading it: the shallow GAD drafter)


@dataclass
class StepResult:
    draft: Tensor        # (B, K) what was proposed
    top: Tensor          # (B, m) the verifier's argmax at the first m fed positions: all K+1, or (when no
                         # drafter needs_all_columns) up to the longest accepted prefix + 1
    top_lprob: Tensor    # (B, m) its log-probability
    accepted: Tensor     # (B,) accepted draft tokens
    count: Tensor        # (B,) tokens appended to the output (accepted + the verifier's, cut at EOS)
    n_before: Tensor     # (B,) tokens generated before this step
    out: Tensor          # (B, W) the output buffer after this step
    hidden: Optional[Tensor] = None  # (B, m, d) verifier's last hidden states (before the output projection)


class Drafter:
    name = "base"
    needs_target_length = False
    adaptive_block = False  # default of --adaptive-block-size auto (block_size.AdaptiveBlock)
    # a draft proposed after plain steps is as good as any other (so the width policy may try one
    # slot now and then); False for Jacobi, whose draft is the previous call's predictions at
    # positions that a plain step did not compute
    drafts_after_plain_steps = True
    standalone = False  # True: proposes without the verifier's feedback, so it can decode alone (--acceptance all)
    # True: observe() needs the verifier's prediction at every fed column, also past the first rejection
    # (Jacobi: they are its next iterate); False lets the engine skip projecting columns no row uses
    needs_all_columns = False

    def begin(self, ctx: DraftContext) -> None:
        self.ctx = ctx

    def propose(self, out: Tensor, n_gen: Tensor) -> Tensor:
        raise NotImplementedError

    def observe(self, step: StepResult) -> None:
        pass

    def lengths(self, draft: Tensor) -> Tensor:
        """How many slots of each row's draft the verifier should score ``(B,)``: by default the
        leading non-PAD tokens (PAD can never be accepted); Jacobi also scores its PAD-initialised
        positions, whose predictions are its next iterate."""
        from fairseq_plugins.decoding.block_size import draft_lengths

        return draft_lengths(draft, self.ctx.pad)

    def select_rows(self, rows: Tensor) -> None:
        pass

    def max_draft(self, max_len: int) -> int:
        raise NotImplementedError


class NoDraft(Drafter):
    """``--drafter none``: no draft, one verifier token per call (greedy through the engine)."""

    name = "none"

    def propose(self, out, n_gen):
        return out.new_empty((out.size(0), 0))

    def max_draft(self, max_len):
        return 0


def _jacobi(cfg, task, models):
    from fairseq_plugins.decoding.drafters.jacobi import JacobiDrafter

    return JacobiDrafter.from_config(cfg)


def _blockwise(cfg, task, models):
    from fairseq_plugins.decoding.drafters.blockwise import from_config

    return from_config(cfg, task, models)


def _nar(cfg, task, models):
    from fairseq_plugins.decoding.drafters.nar import NARDrafter

    return NARDrafter.from_config(cfg, task, models)


def _input_copy(cfg, task, models):
    from fairseq_plugins.decoding.drafters.input_copy import InputCopyDrafter

    return InputCopyDrafter.from_config(cfg, task)


#: name -> factory(cfg, task, models); a new drafter registers here and nowhere else.
DRAFTERS = {
    "none": lambda cfg, task, models: NoDraft(),
    "jacobi_pj": _jacobi,
    "jacobi_pgj": _jacobi,
    "jacobi_hgj": _jacobi,
    "input_copy": _input_copy,
    "blockwise": _blockwise,
    "nar": _nar,
}


def build_drafter(cfg, task, models=()) -> Drafter:
    """The drafter of ``--drafter``; ``models`` are the verifier's (a drafter may read their weights)."""
    if cfg.drafter not in DRAFTERS:
        raise ValueError(f"--drafter {cfg.drafter!r} is unknown; choose one of {', '.join(DRAFTERS)}")
    return DRAFTERS[cfg.drafter](cfg, task, models)
