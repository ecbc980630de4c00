"""What a drafter is to the engine (docs/METHODS.md §2): the interface, the draft it returns and
what it is told, and the registry of ``--drafter`` names.

The interface is small, so that adding a drafter never touches the engine:

* ``begin(ctx)``                  once per batch (:class:`DraftContext`: sources, lengths, special ids);
* ``propose(out, n_gen, longest)`` a :class:`Draft` for the rows' current prefixes (``out[b, 0]`` is
  BOS, ``out[b, 1 : n_gen[b] + 1]`` the tokens generated so far; ``longest``: ``max(n_gen)`` as a
  host int when the engine knows it, else None); PAD marks "no draft token" (never accepted: the
  verifier gives PAD ``-inf``), a draft of width 0 is a plain greedy step;
* ``observe(step)``               what the verifier said (:class:`StepResult`), including its last hidden
  states at every fed position (``step.hidden``), so a drafter that is part of the verifier
  (blockwise heads, Stern §4 "combined scoring and proposal") proposes the next block from the
  same model call that verified this one;
* ``select_rows(rows)``           rows were dropped from the batch (finished sentences);
* ``max_draft(max_len)``          an upper bound of the draft's width (buffer sizes).

What a drafter needs from the engine is one frozen record, :class:`DrafterCapabilities`, the class
attribute ``capabilities`` (a drafter of several variants may set its own per instance); the
engine reads it in one place (``DraftVerifyGenerator.__init__``).

``--block-size`` is optional (:func:`block_size_of`): unset, jacobi and input_copy use
``DEFAULT_BLOCK_SIZE`` and blockwise all the checkpoint's heads; the check ``1 <= k <=
MAX_BLOCK_SIZE`` is made once, by :func:`check_block_size`.
"""
from dataclasses import dataclass
from typing import Callable, Optional

from torch import Tensor

from fairseq_plugins.decoding.width_policy import draft_lengths
from fairseq_plugins.decoding.logits_processors import LogitsProcessors
from fairseq_plugins.decoding.iteration_cost import host_reads_free
from fairseq_plugins.registry import Registry
from fairseq_plugins.errors import OptionError, PluginError

DEFAULT_BLOCK_SIZE = 5
# wider than any target of the shipped sets (longest 44 subwords, 99% <= 30): a wider draft only adds
# columns no sentence fills, each one verified (--block-size 10000 ran 70 s where 5 took 0.7)
MAX_BLOCK_SIZE = 64

#: ``--drafter`` names -> drafter classes (``from_config(cfg, task, models)``), filled by ``@DRAFTERS.register``
DRAFTERS = Registry("--drafter")


def block_size_of(cfg, default=DEFAULT_BLOCK_SIZE) -> int:
    """``--block-size``, or ``default`` when it was not given."""
    return default if getattr(cfg, "block_size", None) is None else cfg.block_size


def check_block_size(block_size: int) -> int:
    """The one check of ``--block-size`` (drafters and ``--task nar_drafter``)."""
    if block_size < 1:
        raise OptionError(f"--block-size must be >= 1 (got {block_size})")
    if block_size > MAX_BLOCK_SIZE:
        raise OptionError(f"--block-size {block_size} is above {MAX_BLOCK_SIZE}, the widest draft the engine verifies "
                         f"(wider than a sentence's target: the extra columns cost time and are never filled); "
                         f"pass at most {MAX_BLOCK_SIZE}")
    return block_size


class DrafterNotAvailableError(PluginError, ValueError):
    """The drafter needs something this run does not have (a trained drafter model, heads)."""


@dataclass
class DraftContext:
    src_tokens: Tensor            # (B, S) fairseq layout (left-padded by default), ends with EOS
    src_lengths: Tensor           # (B,)
    max_len: int                  # fairseq's max_len: steps 0..max_len (EOS forced at max_len)
    width: int                    # width of the engine's ``out`` buffer
    target_length: Optional[Tensor]  # (B,) tokens incl. EOS, the length oracle's (``drafters.length_oracle``)
    bos: int
    eos: int
    pad: int
    # True: the drafts are the output, nothing verifies them (``--acceptance all``): the drafter
    # applies fairseq's ``constraints`` itself and gives its tokens' log-probs (``Draft.scores``)
    final: bool = False
    constraints: Optional[LogitsProcessors] = None
    encoder_out: Optional[dict] = None  # the verifier's encoder output (a drafter reading it: the shallow GAD drafter)
    # the verifier's output projection (``projection.VocabProjection``, refreshed for the batch): heads that share it (blockwise)
    vocab_projection: Optional[object] = None
    # the host reads the batch's tensors for one operation, waiting for nothing (a CPU): a drafter may keep
    # its state on the host (None: decide by the device, ``iteration_cost.host_reads_free``)
    host_reads: Optional[bool] = None
    # greedy's hypothesis lengths ``(B,)`` incl. EOS for this batch, from a pre-run the engine counts as
    # the length oracle's (``drafters.length_oracle``); None where nothing can run one
    greedy_lengths: Optional[Callable[[], Tensor]] = None

    def reads_free(self) -> bool:
        return host_reads_free(self.src_tokens.device) if self.host_reads is None else self.host_reads


@dataclass
class Draft:
    """A proposal for every row: ``tokens`` ``(B, K)`` (PAD = no token), ``lengths`` ``(B,)`` the
    leading slots worth scoring (by default the leading non-PAD tokens; Jacobi also scores its
    PAD-initialised slots, whose predictions are its next iterate), ``scores`` ``(B, K)`` the
    drafter's log-probs of its tokens (only when they are final), ``width`` a host bound of
    ``lengths`` when the drafter knows one (else the engine reads it in its sync); ``asked``: False
    when the engine did not ask the drafter (the width policy chose a plain step)."""

    tokens: Tensor
    lengths: Tensor
    scores: Optional[Tensor] = None
    width: Optional[int] = None
    asked: bool = True

    @classmethod
    def of(cls, tokens: Tensor, pad: int) -> "Draft":
        """A draft whose slots are worth scoring up to each row's first PAD."""
        return cls(tokens, draft_lengths(tokens, pad))

    @classmethod
    def none(cls, n_gen: Tensor, asked: bool = True) -> "Draft":
        """No draft: the next call is a plain greedy step."""
        return cls(n_gen.new_empty((n_gen.size(0), 0)), n_gen.new_zeros(n_gen.size(0)), width=0, asked=asked)

    @property
    def size(self) -> int:
        return self.tokens.size(1)

    def trim(self, k: int) -> "Draft":
        if self.size <= k:
            return self
        scores = None if self.scores is None else self.scores[:, :k]
        return Draft(self.tokens[:, :k], self.lengths, scores, None if self.width is None else min(self.width, k),
                     self.asked)

    def select(self, rows: Tensor) -> "Draft":
        scores = None if self.scores is None else self.scores.index_select(0, rows)
        return Draft(self.tokens.index_select(0, rows), self.lengths.index_select(0, rows), scores, self.width,
                     self.asked)


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
    n_after: Optional[Tensor] = None  # (B,) n_before + count, as the engine holds it (None: the drafter adds them)

    def generated(self) -> Tensor:
        """``(B,)`` tokens generated after this step."""
        return self.n_after if self.n_after is not None else self.n_before + self.count


@dataclass(frozen=True)
class DrafterCapabilities:
    """What a drafter needs from the engine and the width policy, read once per generator."""

    # a draft proposed after plain steps is as good as any other (so the width policy may try one slot now
    # and then); False for Jacobi, whose draft is the previous call's predictions at positions a plain step
    # did not compute
    drafts_after_plain_steps: bool = True
    # the default of --adaptive-block-size auto: the cost-aware width (width_policy.AdaptiveBlock)
    adaptive_block: bool = True
    # proposes without the verifier's feedback, so it can decode alone (--acceptance all)
    standalone: bool = False
    # observe() needs the verifier's prediction at every fed column, also past the first rejection
    # (Jacobi: they are its next iterate); False lets the engine skip projecting columns no row uses
    needs_all_columns: bool = False
    # propose() wants ``longest`` (its input is as wide as the longest prefix), so the engine asks after
    # its sync, for the rows that go on; its Draft then carries a host ``width`` (GAD)
    proposes_after_sync: bool = False
    # drafts to a target length (PJ/PGJ, ``ctx.target_length``, ``--jacobi-length``): ``auto`` leaves it out
    target_length: bool = False


class Drafter:
    name = "base"  # set by ``@DRAFTERS.register`` to the drafter's ``--drafter`` name (a class of several: per instance)
    capabilities = DrafterCapabilities()

    @classmethod
    def from_config(cls, cfg, task, models) -> "Drafter":
        """The drafter of ``--drafter`` (``models``: the verifier's; a drafter may read their weights)."""
        raise NotImplementedError

    def begin(self, ctx: DraftContext) -> None:
        self.ctx = ctx

    def propose(self, out: Tensor, n_gen: Tensor, longest: Optional[int] = None) -> Draft:
        raise NotImplementedError

    def observe(self, step: StepResult) -> None:
        pass

    def select_rows(self, rows: Tensor) -> None:
        pass

    def max_draft(self, max_len: int) -> int:
        raise NotImplementedError


class BlockDrafter(Drafter):
    """A drafter of up to ``block_size`` tokens per call (every drafter but ``none``)."""

    def __init__(self, block_size: int):
        self.block = check_block_size(block_size)

    def max_draft(self, max_len):
        return self.block


@DRAFTERS.register("none", help="no draft, greedy through the engine")
class NoDraft(Drafter):
    """``--drafter none``: no draft, one verifier token per call (greedy through the engine)."""

    name = "none"
    capabilities = DrafterCapabilities(adaptive_block=False)  # nothing to widen

    @classmethod
    def from_config(cls, cfg, task, models):
        return cls()

    def propose(self, out, n_gen, longest=None):
        return Draft.none(n_gen)

    def max_draft(self, max_len):
        return 0
