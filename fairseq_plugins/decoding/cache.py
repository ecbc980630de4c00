"""Preallocated per-row key/value cache of the lean decoder step (``step.DecoderStep``).

Every row keeps its self-attention keys and values left-aligned in buffers of a fixed capacity,
one pair per layer, ``(B, heads, capacity, head_dim)``; ``lengths[b]`` entries of row ``b`` are
valid.  A decoder call over ``m`` new tokens writes their keys/values *in place* at columns
``lengths[b] .. lengths[b]+m-1`` (a slice assignment when every row has the same length, one
scatter per tensor otherwise) and attends to the first ``max(lengths) + m`` columns under a mask
that hides each row's columns past its own length.  Cutting a row back to the tokens it accepted
(draft and verify, docs/METHODS.md §2) is ``commit``: the lengths move on by the accepted counts; the
rejected columns are simply overwritten by the next call.  Nothing is concatenated, nothing
gathered, the prefix is never recomputed.

The encoder's keys and values are projected once per batch (``enc_k``/``enc_v``), once per source:
with ``group`` = beam size, the beams of a sentence (consecutive rows) share them.  Rows leave the
batch (finished sentences) or are reordered (beam search) with ``select_rows``: an index_select of
the used columns only.

``lengths`` lives on the device (it indexes the writes); ``max_length`` and ``aligned`` are host
values that the caller keeps in step with it (the engine learns them from its one host
synchronisation per iteration), so no call here synchronises.
"""
from typing import List, Optional

import torch
from torch import Tensor


class KVCache:
    def __init__(self, k: List[Tensor], v: List[Tensor], enc_k: List[Tensor], enc_v: List[Tensor],
                 enc_mask: Optional[Tensor], group: int = 1):
        self.k, self.v = k, v                    # per layer (B, H, capacity, dh)
        self.enc_k, self.enc_v = enc_k, enc_v    # per layer (B / group, H, S, dh)
        self.enc_mask = enc_mask                 # (B / group, 1, 1, S) bool, True = a real source token; None: no padding
        self.group = group                       # consecutive rows sharing one source (the beams of a sentence)
        bsz = k[0].size(0) if k else enc_k[0].size(0) * group
        device = (k or enc_k)[0].device
        self.lengths = torch.zeros(bsz, dtype=torch.long, device=device)
        self.max_length = 0                      # host: max(lengths)
        self.aligned = True                      # host: every row has max_length entries

    @property
    def capacity(self) -> int:
        return self.k[0].size(2) if self.k else 0

    @property
    def batch_size(self) -> int:
        return self.lengths.size(0)

    def ensure_capacity(self, needed: int):
        """Grow the self-attention buffers (doubling) when a call would write past them."""
        if needed <= self.capacity:
            return
        new = max(needed, 2 * self.capacity)
        for buffers in (self.k, self.v):
            for i, buf in enumerate(buffers):
                grown = buf.new_zeros(buf.size(0), buf.size(1), new, buf.size(3))
                grown[:, :, : self.max_length] = buf[:, :, : self.max_length]
                buffers[i] = grown

    def commit(self, counts: Tensor, max_length: int, aligned: bool):
        """Keep, per row, the first ``counts[b]`` entries the last call wrote (cut back the rest).
        ``max_length`` / ``aligned``: the new ``max(lengths)`` and whether all rows are equal (host)."""
        self.lengths = self.lengths + counts
        self.max_length, self.aligned = int(max_length), bool(aligned)

    def advance(self, count: int):
        """Every row keeps all ``count`` entries of the last call (greedy, beam search): host-only bookkeeping."""
        self.lengths = self.lengths + count
        self.max_length += count

    def select_rows(self, rows: Tensor, aligned: Optional[bool] = None, max_length: Optional[int] = None):
        """Keep only ``rows`` (finished sentences leave; beam search reorders), in that order.  With
        ``group`` > 1 the rows come in whole groups, each from one group (its source's)."""
        used = self.max_length
        for buffers in (self.k, self.v):
            for i, buf in enumerate(buffers):
                kept = buf.new_zeros(rows.numel(), buf.size(1), buf.size(2), buf.size(3))
                kept[:, :, :used] = buf[:, :, :used].index_select(0, rows)
                buffers[i] = kept
        sources = rows if self.group == 1 else torch.div(rows.view(-1, self.group)[:, 0], self.group,
                                                         rounding_mode="floor")
        self.enc_k = [t.index_select(0, sources) for t in self.enc_k]
        self.enc_v = [t.index_select(0, sources) for t in self.enc_v]
        if self.enc_mask is not None:
            self.enc_mask = self.enc_mask.index_select(0, sources)
        self.lengths = self.lengths.index_select(0, rows)
        if max_length is not None:
            self.max_length = int(max_length)
        if aligned is not None:
            self.aligned = bool(aligned)

    def reorder(self, rows: Tensor):
        """Beam search within the same sentences: row i continues row ``rows[i]`` (the rows of one
        sentence share its encoder states, so only the self-attention entries move)."""
        used = self.max_length
        for buffers in (self.k, self.v):
            for buf in buffers:
                buf[:, :, :used] = buf[:, :, :used].index_select(0, rows)
        self.lengths = self.lengths.index_select(0, rows)
