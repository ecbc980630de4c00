"""Scoring the columns of one verification call: fairseq's rules on the log-probs (the run's
``logits_processors``), the verifier's own token
and the acceptance rule (docs/METHODS.md §2, steps 2-3 of the engine).

The verifier's token at every column is picked where fairseq's ``BeamSearch.step`` picks it: topk
over the log-probs plus the running score before the column, so exact ties and ties made by adding
the score break the same way.  On a CPU the columns may be projected onto the vocabulary chunk by
chunk until every row has rejected a draft token (:meth:`ColumnScorer.until_rejected`), where the
costs measured so far say that is cheaper than all at once (``column_schedule``).
"""
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from fairseq_plugins.decoding.acceptance import AcceptanceRule
from fairseq_plugins.decoding.column_schedule import ColumnSchedule, chunks
from fairseq_plugins.decoding.iteration_cost import device_clock, host_reads_free
from fairseq_plugins.decoding.logits_processors import LogitsProcessors, Steps
from fairseq_plugins.decoding.projection import Warmup


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
        self.schedule = ColumnSchedule()

    def score(self, hidden: Tensor, cols: Columns, score: Tensor, draft: Tensor, acceptance: AcceptanceRule,
              host_reads: bool, all_columns: bool = False, forced: Optional[bool] = None) -> Scored:
        """The first columns any row uses of a call's hidden states ``(B, m, d)``, projected onto the
        vocabulary all at once or chunk by chunk (:meth:`until_rejected`).  Chunks only where the host
        reads for free (a CPU: each chunk's acceptance is read), not for drafters whose next draft is
        the scored columns themselves (Jacobi: ``all_columns``), and where ``column_schedule`` prices
        them cheaper; ``forced``: True/False, whatever the prices (its timings are not learnt)."""
        rows, m = hidden.shape[:2]
        learns = host_reads and forced is None and not all_columns and m > 2
        if all_columns or m <= 2:
            chunked = False
        elif forced is not None:
            chunked = forced
        else:
            chunked = learns and self.schedule.chunked(rows, m)
        if chunked:
            return self.until_rejected(hidden, cols, score, draft, acceptance, host_reads, learns)
        clock, warmups = device_clock(hidden.device), Warmup.events
        start = clock()
        scored = self.all_columns(self.verifier.project(hidden), cols, score, draft, acceptance, host_reads)
        if learns:
            if Warmup.events == warmups:
                self.schedule.timed_whole(rows, m, clock() - start)
            self.schedule.accepted(rows, m - 1, int(scored.accepted.max()))
        return scored

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
                       acceptance: AcceptanceRule, on_host: Optional[bool] = None, learns: bool = False) -> Scored:
        """Score the chunks of columns (``column_schedule.chunks``: 0..1, 2..3, 4..7, ...) of the fed
        ``[last, d_1..d_{m-1}]`` until every row has a rejected draft token among them (acceptance
        rules are prefix rules: a row's accepted length is final once a column rejects).  Returns the
        first ``m'`` columns, ``m'`` = the longest accepted prefix + 1 (the columns any row uses),
        which equal the full call's (each column's log-probs depend on that column only; the running
        score only on earlier columns).  Each chunk but the last costs a host read (this path is for
        CPUs, where it is free).  ``learns``: time each chunk for the schedule."""
        rows, m = hidden.shape[:2]
        clock = device_clock(hidden.device)
        parts = []
        before = score  # the running score before the chunk
        for a, b in chunks(m):
            start, warmups = clock(), Warmup.events
            lp = self.log_probs(self.verifier.project(hidden[:, a:b]), cols.sub(a, b))
            running = running_scores(before, lp, draft[:, a:b], on_host)  # (B, b - a [+ 1: before column b])
            parts.append((lp, *self.top(lp, running[:, : b - a]), running[:, : b - a]))
            before = running[:, -1]
            lprobs, top, top_lp, run = (t[0] if len(parts) == 1 else torch.cat(t, dim=1) for t in zip(*parts))
            accepted = self._accepted(acceptance, draft[:, :b], lprobs, top)
            used = m if b == m else int(accepted.max()) + 1  # the host read of this chunk
            if learns:
                if Warmup.events == warmups:
                    self.schedule.timed_chunk(rows, b - a, clock() - start)
                if used <= b:
                    self.schedule.accepted(rows, m - 1, int(accepted.max()) if b == m else used - 1)
            if b == m:
                return Scored(lprobs, top, top_lp, accepted, run)
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
