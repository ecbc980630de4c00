"""Acceptance rules: how many draft tokens a verification call accepts (docs/METHODS.md §2).

Every rule gets, for ``B`` rows and a draft of ``K`` tokens (PAD = "no draft token here"):

* ``draft``   ``(B, K)`` the proposed tokens ``d_1..d_K``;
* ``lprobs``  ``(B, K + 1, V)`` the verifier's log-probabilities, ``lprobs[:, i]`` for the token
  at draft slot ``i`` (slot ``K`` is the one after the draft), after fairseq's greedy
  constraints (PAD, min/max length) have set forbidden tokens to ``-inf``;
* ``top``     ``(B, K + 1)`` the verifier's own choice ``argmax lprobs``.

and returns ``n`` ``(B,)``: the length of the accepted draft prefix.  The engine then appends the
verifier's own token ``top[:, n]`` at the bifurcation.  A draft token with ``-inf`` log-prob (PAD,
EOS before the minimum length, anything but EOS at the maximum length) is never accepted, by any
rule, so the relaxed rules still respect fairseq's length constraints.

Each rule registers its ``--acceptance`` name, help and options (``ACCEPTANCES``, read by the task).
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from fairseq_plugins.registry import Registry
from fairseq_plugins.errors import OptionError

#: ``--acceptance`` names -> rule classes (``from_config(cfg)``), filled by ``@ACCEPTANCES.register``
ACCEPTANCES = Registry("--acceptance")


def prefix_length(ok: Tensor) -> Tensor:
    """Length of the all-True prefix of each row of a ``(B, K)`` bool tensor."""
    if ok.size(1) == 0:
        return ok.new_zeros(ok.size(0), dtype=torch.long)
    return ok.cumprod(dim=1).sum(dim=1)  # a bool cumprod is int64 already: two operations


def draft_log_probs(draft: Tensor, lprobs: Tensor) -> Tensor:
    return lprobs[:, : draft.size(1)].gather(2, draft.unsqueeze(2)).squeeze(2)


class AcceptanceRule:
    name = "base"  # set by ``@ACCEPTANCES.register`` to the rule's ``--acceptance`` name
    # False: the drafts are the output and nothing verifies them (the engine never calls the verifier)
    needs_verifier = True
    # True: every accepted draft token is the verifier's own token at its column (the row takes them as they are)
    takes_verifier_tokens = False

    @classmethod
    def from_config(cls, cfg) -> "AcceptanceRule":
        return cls()

    def __call__(self, draft: Tensor, lprobs: Tensor, top: Tensor) -> Tensor:
        raise NotImplementedError


@ACCEPTANCES.register("exact", help="top-1 match, lossless (output = fairseq's greedy)")
class Exact(AcceptanceRule):
    """Top-1 match (Stern et al. 2018 §3 "verify"; GAD Eq. 7): output identical to greedy."""
    takes_verifier_tokens = True

    def __call__(self, draft, lprobs, top):
        return prefix_length(draft == top[:, : draft.size(1)])


@dataclass
class TopKOptions:
    acceptance_topk: Optional[int] = field(default=None, metadata={
        "help": "topk acceptance: accept a draft token in the verifier's top-N (Stern 5.1); required with "
                "--acceptance topk (the papers' N: 2)"})


@ACCEPTANCES.register("topk", help="a draft token in the verifier's top-N, --acceptance-topk (Stern 5.1)",
                      options=TopKOptions)
class TopK(AcceptanceRule):
    """Stern et al. 2018 §5.1: accept ``d_i`` if it lies in the verifier's top-N (``--acceptance-topk``)."""

    def __init__(self, n: int):
        if n < 1:
            raise OptionError(f"--acceptance-topk must be >= 1 (got {n})")
        self.n = n

    @classmethod
    def from_config(cls, cfg):
        n = getattr(cfg, "acceptance_topk", None)
        if n is None:  # no silent default: the rule is lossy, and how lossy is N's choice
            raise ValueError("--acceptance topk needs its N: add --acceptance-topk N (a draft token is accepted when "
                             "it is among the verifier's N best; Stern et al. use 2)")
        return cls(n)

    def __call__(self, draft, lprobs, top):
        k = draft.size(1)
        n = min(self.n, lprobs.size(-1))
        best = lprobs[:, :k].topk(n, dim=-1).indices  # (B, K, N)
        ok = (best == draft.unsqueeze(2)).any(dim=2) & torch.isfinite(draft_log_probs(draft, lprobs))
        return prefix_length(ok)


@dataclass
class MinBlockOptions:
    min_block_size: int = field(default=2, metadata={"help": "min_block acceptance: l (Stern 5.3)"})


@ACCEPTANCES.register("min_block", help="at least --min-block-size tokens per call (Stern 5.3)", options=MinBlockOptions)
class MinBlock(AcceptanceRule):
    """Stern et al. 2018 §5.3: at least ``l`` (``--min-block-size``) tokens are added per step.

    Choice (the paper leaves it open for a separate drafter): the verifier's own token at the
    bifurcation counts as one of the ``l``, so at least ``l - 1`` draft tokens are accepted, as far
    as the draft has admissible (finite log-prob) tokens; beyond that the exact rule applies.
    """

    def __init__(self, l: int):
        if l < 1:
            raise OptionError(f"--min-block-size must be >= 1 (got {l})")
        self.l = l

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.min_block_size)

    def __call__(self, draft, lprobs, top):
        exact = prefix_length(draft == top[:, : draft.size(1)])
        admissible = prefix_length(torch.isfinite(draft_log_probs(draft, lprobs)))
        forced = admissible.clamp(max=self.l - 1)
        return torch.maximum(exact, forced)


@dataclass
class GADPlusPlusOptions:
    gad_beta: int = field(default=5, metadata={"help": "GAD++ top-beta (Eq. 8)"})
    gad_tau: float = field(default=3.0, metadata={"help": "GAD++ log-prob gap tau (Eq. 9)"})


@ACCEPTANCES.register("gad_pp", help="GAD++ (Xia et al. Eq. 8-9: --gad-beta, --gad-tau)", options=GADPlusPlusOptions)
class GADPlusPlus(AcceptanceRule):
    """GAD++ (Xia et al., Eq. 8-9): ``log P(d_i) >= log P(top-beta-th)`` and ``log P(top-1) - log P(d_i) <= tau``."""

    def __init__(self, beta: int, tau: float):
        if beta < 1:
            raise OptionError(f"--gad-beta must be >= 1 (got {beta})")
        if tau < 0:
            raise OptionError(f"--gad-tau must be >= 0 (got {tau})")
        self.beta, self.tau = beta, float(tau)

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.gad_beta, cfg.gad_tau)

    def __call__(self, draft, lprobs, top):
        k = draft.size(1)
        beta = min(self.beta, lprobs.size(-1))
        best = lprobs[:, :k].topk(beta, dim=-1).values  # (B, K, beta), sorted
        lp = draft_log_probs(draft, lprobs)
        ok = (lp >= best[..., -1]) & (best[..., 0] - lp <= self.tau) & torch.isfinite(lp)  # Eq. 8 & Eq. 9
        return prefix_length(ok)


@ACCEPTANCES.register("all", help="the drafter alone, no verification, not lossless")
class AcceptAll(AcceptanceRule):
    """Every admissible draft token is kept: the drafter alone (GAD Table 5/14 "NAR drafter" row).

    Not lossless.  With ``--acceptance all`` the engine never calls the verifier: the drafter's
    draft, under fairseq's constraints, is the output (``engine``, "the drafter alone"); this rule
    is its definition."""
    needs_verifier = False

    def __call__(self, draft, lprobs, top):
        return prefix_length(torch.isfinite(draft_log_probs(draft, lprobs)))


def build_acceptance(cfg) -> AcceptanceRule:
    return ACCEPTANCES[cfg.acceptance].from_config(cfg)
