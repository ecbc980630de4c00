"""Preallocated per-row key/value cache of the lean decoder step (``step.DecoderStep``).

Every row keeps its self-attention keys and values left-aligned in buffers of a fixed capacity,
one pair per layer, ``(B, heads, capacity, head_dim)``; ``lengths[b]`` entries of row ``b`` are
valid.  The pairs of all layers are views of one tensor ``(layers, 2, B, heads, capacity, head_dim)``,
so a beam step reorders every layer's entries with one ``index_select`` (our choice: 2 operations
per step instead of 4 per layer and tensor; each is a kernel launch on a GPU).  A decoder call over ``m`` new tokens writes their keys/values *in place* at columns
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


# our choice: a reorder's temporary copy stays within this many bytes (or one layer's entries), so the
# single index_select of a small cache does not cost a large one a second cache's memory at once
REORDER_CHUNK_BYTES = 16 * 2 ** 20


def _copy_rows(dst: Tensor, src: Tensor, rows: Tensor):
    """``dst[:, :, r] = src[:, :, rows[r]]`` for storage views ``(layers, 2, B, H, used, dh)``; ``dst`` may
    be ``src`` (a beam step's reorder in place): as few index_selects as REORDER_CHUNK_BYTES allows."""
    per_layer = src[0].numel() * src.element_size()
    layers = src.size(0)
    chunk = max(1, REORDER_CHUNK_BYTES // max(per_layer, 1))
    for first in range(0, layers, chunk):
        n = min(chunk, layers - first)
        dst.narrow(0, first, n).copy_(src.narrow(0, first, n).index_select(2, rows))


class KVCache:
    def __init__(self, self_kv: Optional[Tensor], enc_k: List[Tensor], enc_v: List[Tensor],
                 enc_mask: Optional[Tensor], group: int = 1):
        self._set(self_kv)                       # (layers, 2, B, H, capacity, dh); k[i], v[i]: its views
        self.enc_k, self.enc_v = enc_k, enc_v    # per layer (B / group, H, S, dh)
        self.enc_mask = enc_mask                 # (B / group, 1, 1, S) bool, True = a real source token; None: no padding
        self.group = group                       # consecutive rows sharing one source (the beams of a sentence)
        bsz = self_kv.size(2) if self_kv is not None else enc_k[0].size(0) * group
        device = (self_kv if self_kv is not None else enc_k[0]).device
        self.lengths = torch.zeros(bsz, dtype=torch.long, device=device)
        self.max_length = 0                      # host: max(lengths)
        self.aligned = True                      # host: every row has max_length entries

    @staticmethod
    def allocate(like: Tensor, layers: int, rows: int, heads: int, capacity: int, head_dim: int) -> Optional[Tensor]:
        """Zeroed self-attention storage for ``layers`` layers (None for none), on ``like``'s device and dtype."""
        return like.new_zeros(layers, 2, rows, heads, capacity, head_dim) if layers else None

    def _set(self, self_kv: Optional[Tensor]):
        self.self_kv = self_kv
        self.k = [] if self_kv is None else list(self_kv[:, 0].unbind(0))  # per layer (B, H, capacity, dh)
        self.v = [] if self_kv is None else list(self_kv[:, 1].unbind(0))

    @property
    def capacity(self) -> int:
        return self.self_kv.size(4) if self.self_kv is not None else 0

    @property
    def batch_size(self) -> int:
        return self.lengths.size(0)

    def ensure_capacity(self, needed: int):
        """Grow the self-attention buffers (doubling) when a call would write past them."""
        if needed <= self.capacity:
            return
        kv = self.self_kv
        grown = kv.new_zeros(*kv.shape[:4], max(needed, 2 * self.capacity), kv.size(5))
        grown[..., : self.max_length, :] = kv[..., : self.max_length, :]
        self._set(grown)

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
        used, kv = self.max_length, self.self_kv
        if kv is not None:
            kept = kv.new_zeros(kv.size(0), 2, rows.numel(), *kv.shape[3:])
            _copy_rows(kept.narrow(4, 0, used), kv.narrow(4, 0, used), rows)
            self._set(kept)
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
        used, kv = self.max_length, self.self_kv
        if kv is not None and used > 0:
            prefix = kv.narrow(4, 0, used)
            _copy_rows(prefix, prefix, rows)
        self.lengths = self.lengths.index_select(0, rows)
