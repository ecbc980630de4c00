"""The state the engine's steps share (``engine.DraftVerifyGenerator``): the unfinished rows
(:class:`Rows`), what the batch shares (:class:`Run`), one call's outcome (:class:`Verdict`) and
the iteration's one host synchronisation (:class:`Synced`)."""
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_plugins.decoding.acceptance import AcceptanceRule
from fairseq_plugins.decoding.cache import KVCache
from fairseq_plugins.decoding.draft_stats import BatchCounts
from fairseq_plugins.decoding.drafters import Draft, Drafter
from fairseq_plugins.decoding.proposing import Proposals
from fairseq_plugins.decoding.scoring import Scored
from fairseq_plugins.decoding.width_policy import WidthPolicy


@dataclass
class Rows:
    """The unfinished rows of a batch: per-row tensors and their host bookkeeping."""

    out: Tensor         # (B, W) BOS, then the tokens generated so far
    lp_out: Tensor      # (B, W) log-prob of out[:, 1 + s] at index s
    n_gen: Tensor       # (B,) tokens generated
    score: Tensor       # (B,) running score, as fairseq's scores[:, step - 1]
    draft: Draft        # what the next call verifies
    ids: List[int]      # original row of every row (host side: no sync to index it)
    lengths: List[int]  # host copy of n_gen, as of the last sync

    def select(self, keep: Tensor) -> None:
        self.out, self.lp_out, self.n_gen, self.score = (
            t.index_select(0, keep) for t in (self.out, self.lp_out, self.n_gen, self.score))
        self.draft = self.draft.select(keep)


@dataclass
class Run:
    """What the steps of one batch share besides the rows."""

    drafter: Drafter
    acceptance: AcceptanceRule
    policy: WidthPolicy
    proposals: Proposals      # when the drafter is asked, for how wide a draft (the width policy's plan)
    cache: Optional[KVCache]  # None: the drafter alone, no verifier call
    max_len: int
    eos: int
    arange: Tensor
    finalized: List[Optional[List[Dict]]]
    counts: BatchCounts       # for ``generator.stats``
    all_columns: bool         # the drafter observes the verifier's prediction at every fed column (Jacobi)
    host_reads: bool = False  # the host reads the batch's tensors for one operation (iteration_cost.host_reads_free)
    iteration: int = 0


@dataclass
class Verdict:
    """One call's outcome for every row, before it is appended."""

    fed: Draft                # the draft the call scored (the stats and the width policy count it)
    new: Tensor               # (B, m) tokens to append: accepted draft tokens, then the verifier's own
    new_lp: Tensor            # (B, m) their log-probs
    kept: Optional[Tensor]    # (B,) how many of ``new`` go in before the cut at EOS (None: one, a plain step)
    accepted: Tensor          # (B,) draft tokens accepted
    scored: Optional[Scored] = None   # the verifier's columns (None: the drafter alone)
    hidden: Optional[Tensor] = None


@dataclass
class Synced:
    """The one host synchronisation of an iteration, named."""

    done: List[int]                      # 1 where the row ended
    lengths: List[int]                   # n_gen
    sent: Optional[List[int]] = None     # draft slots the width policy counts as sent (when a draft was fed)
    got: Optional[List[int]] = None      # draft tokens accepted (when a draft was fed)
    proposed: Optional[List[int]] = None  # draft slots each row sent, where the stats count others than ``sent``
    offered: Optional[List[int]] = None  # whether the drafter had a draft when asked (adaptive policy)
    next_width: Optional[int] = None     # the longest next draft of the rows that go on

    @classmethod
    def read(cls, run: Run, rows: Rows, verdict: Verdict, ended: Tensor, sent: Optional[Tensor],
             proposed: Optional[Tensor] = None) -> "Synced":
        """The one host synchronisation of the iteration: finished rows, lengths, what the drafts
        achieved (for the width policy) and the longest next draft."""
        parts = {"done": ended.long(), "lengths": rows.n_gen}
        if sent is not None:
            parts["sent"], parts["got"] = sent, verdict.accepted
        if proposed is not None:
            parts["proposed"] = proposed
        if run.policy.adaptive and verdict.fed.asked:  # the drafter was asked: did it have a draft?
            parts["offered"] = verdict.fed.lengths.gt(0).long()
        if rows.draft.size and rows.draft.width is None:
            parts["next_width"] = rows.draft.lengths.masked_fill(ended, 0).max().view(1)
        host = torch.cat(list(parts.values())).tolist()
        read, at = {}, 0
        for name, part in parts.items():
            read[name], at = host[at : at + part.numel()], at + part.numel()
        if "next_width" in read:
            read["next_width"] = read["next_width"][0]
        return cls(**read)
