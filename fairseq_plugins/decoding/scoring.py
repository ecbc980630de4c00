"""Scoring the columns of one verification call: fairseq's rules on the log-probs (the run's
``logits_processors``), the verifier's own token
and the acceptance rule (docs/METHODS.md §2, steps 2-3 of the engine).

The verifier's token at every column is picked where fairseq's ``BeamSearch.step`` picks it: topk
over the log-probs plus the running score before the column, so exact ties and ties made by adding
the score break the same way.  On a CPU the columns are projected onto the vocabulary chunk by
chunk until every row has rejected a draft token (:meth:`ColumnScorer.until_rejected`).
"""
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from fairseq_plugins.decoding.acceptance import AcceptanceRule
from fairseq_plugins.decoding.logits_processors import LogitsProcessors, Steps
from fairseq_plugins.decoding.iteration_cost import host_reads_free


@dataclass
class Columns:
    """The steps of a call's fed columns: ``steps`` ``(m,)`` shared or ``(B, m)`` per row (on the
    device), ``max_len``, and host bounds: every row's step at column 0 is ``>= min_step`` and
    ``<= first_max``."""

    steps: Tensor
    max_len: int
    min_step: int
    first_max: int

    def sub(self, a: int, b: int) -> "Columns":
        return Columns(self.steps[..., a:b], self.max_len, self.min_step + a, self.first_max + a)


@dataclass
class Scored:
    """What the verifier said at the first ``m`` fed columns: ``lprobs`` ``(B, m, V)`` constrained,
    ``top``/``top_lprob`` ``(B, m)`` its own token and log-prob, ``accepted`` ``(B,)`` draft tokens,
    ``running`` ``(B, m)`` fairseq's running score before each column (:func:`running_scores`)."""

    lprobs: Tensor
    top: Tensor
    top_lprob: Tensor
    accepted: Tensor
    running: Tensor


class ColumnScorer:
    def __init__(self, verifier, processors: LogitsProcessors, temperature: float, vocab_size: int):
        self.verifier, self.processors = verifier, processors
        self.temperature, self.vocab_size = temperature, vocab_size

    def projects_lazily(self, all_columns: bool, host_reads: bool, forced: Optional[bool] = None) -> bool:
        """Project the verifier's columns onto the vocabulary chunk by chunk, stopping once every row
        has rejected a draft token (``until_rejected``)?  Only where the host reads for free (a CPU) and a
        product with the (V, d) output matrix costs about as much per row as rows are added (MKL's
        GEMM: d=128, V=8K, 55 us for 1 row, 278 for 10): the columns after every row's first rejection
        are never used and each chunk's host read is free there.  Not where a packed kernel makes wide
        products cheap (``projection``: 104 us for 10 rows; projecting every column at once was 8%
        faster over 300 typo sentences), not on a GPU, and not for drafters whose next draft is the
        scored columns themselves (Jacobi: ``all_columns``).  ``forced``: True/False, whatever else."""
        if all_columns:
            return False
        if forced is not None:
            return forced
        return host_reads and not self.verifier.wide_projection_is_cheap

    def log_probs(self, logits: Tensor, cols: Columns) -> Tensor:
        """Log-probs with fairseq's temperature (on the logits) and its rules (the processors)."""
        lprobs = self.verifier.log_probs(logits, self.temperature)
        return self.processors(lprobs, Steps(cols.steps, cols.max_len, cols.min_step,
                                             cols.first_max + cols.steps.size(-1) - 1))

    def top(self, lprobs: Tensor, running: Tensor):
        """The verifier's token at every column (topk over lprobs + the running score before the
        column, as fairseq's BeamSearch.step) and its log-prob."""
        top = (lprobs + running.unsqueeze(2)).topk(2 if self.vocab_size > 2 else 1, dim=2).indices[..., 0]
        return top, lprobs.gather(2, top.unsqueeze(2)).squeeze(2)

    def all_columns(self, logits: Tensor, cols: Columns, score: Tensor, draft: Tensor,
                    acceptance: AcceptanceRule, on_host: Optional[bool] = None) -> Scored:
        lprobs = self.log_probs(logits, cols)
        running = running_scores(score, lprobs, draft, on_host)
        top, top_lprob = self.top(lprobs, running)
        return Scored(lprobs, top, top_lprob, self._accepted(acceptance, draft, lprobs, top), running)

    def until_rejected(self, hidden: Tensor, cols: Columns, score: Tensor, draft: Tensor,
                       acceptance: AcceptanceRule, on_host: Optional[bool] = None) -> Scored:
        """Score columns 0..1, then 2..3, 4..7, ... of the fed ``[last, d_1..d_{m-1}]`` until every row
        has a rejected draft token among them (acceptance rules are prefix rules: a row's accepted
        length is final once a column rejects).  Returns the first ``m'`` columns, ``m'`` = the
        longest accepted prefix + 1 (the columns any row uses), which equal the full call's (each
        column's log-probs depend on that column only; the running score only on earlier columns).
        Each chunk but the last costs a host read (this path is for CPUs, where it is free)."""
        m = hidden.size(1)
        parts = []
        b, before = 0, score  # ``before``: the running score before column ``b``
        while True:
            a, b = b, min(m, max(2, 2 * b))
            lp = self.log_probs(self.verifier.project(hidden[:, a:b]), cols.sub(a, b))
            running = running_scores(before, lp, draft[:, a:b], on_host)  # (B, b - a [+ 1: before column b])
            parts.append((lp, *self.top(lp, running[:, : b - a]), running[:, : b - a]))
            before = running[:, -1]
            lprobs, top, top_lp, run = (t[0] if len(parts) == 1 else torch.cat(t, dim=1) for t in zip(*parts))
            accepted = self._accepted(acceptance, draft[:, :b], lprobs, top)
            if b == m:
                return Scored(lprobs, top, top_lp, accepted, run)
            used = int(accepted.max()) + 1  # the host read of this chunk
            if used <= b:  # every row rejected within the scored columns
                return Scored(lprobs[:, :used], top[:, :used], top_lp[:, :used], accepted, run[:, :used])

    @staticmethod
    def _accepted(acceptance: AcceptanceRule, draft: Tensor, lprobs: Tensor, top: Tensor) -> Tensor:
        if draft.size(1) == 0:  # a plain greedy step
            return top.new_zeros(top.size(0))
        return acceptance(draft, lprobs, top)


def running_scores(score: Tensor, lprobs: Tensor, draft: Tensor, on_host: Optional[bool] = None) -> Tensor:
    """fairseq's running score before each fed position ``(B, m)``: the row's score, then the
    draft tokens' log-probs added one at a time (a draft token counts only while accepted,
    and where one is rejected the later positions are not used).  float32 adds one column at a time
    on purpose: fairseq adds one log-prob per step, and ``cumsum`` rounds differently (on a CPU it
    accumulates in double, on a GPU it scans in parallel), which can break a near-tie differently
    than fairseq does.  The engine reads a row's new score from it too.

    On a device whose tensors the host reads for free (a CPU: ``iteration_cost.host_reads_free``;
    ``on_host`` forces either way) the column adds are numpy's on the same memory (each an IEEE
    float32 add, as torch's): one torch operation per column costs more there than the adds."""
    if draft.size(1) == 0:
        return score.unsqueeze(1)
    lp = lprobs[:, : draft.size(1)].gather(2, draft.unsqueeze(2)).squeeze(2)
    # past an inadmissible draft token only ties matter, not sums: every non-finite log-prob adds 0
    lp = torch.nan_to_num(lp, nan=0.0, posinf=0.0, neginf=0.0)
    if host_reads_free(lp.device) if on_host is None else on_host:
        columns = lp.numpy()
        running = np.empty((lp.size(0), lp.size(1) + 1), dtype=np.float32)
        running[:, 0] = score.numpy()
        for j in range(lp.size(1)):
            np.add(running[:, j], columns[:, j], out=running[:, j + 1])
        return torch.from_numpy(running)
    running = [score]
    for column in lp.unbind(1):  # one operation for all the columns (a select per column cost one each)
        running.append(running[-1] + column)
    return torch.stack(running, dim=1)
