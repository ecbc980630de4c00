"""Per-row self-attention KV cache on top of fairseq's incremental state.

fairseq's :class:`~fairseq.modules.MultiheadAttention` keeps, per layer, ``prev_key`` /
``prev_value`` of shape ``(bsz, heads, T, head_dim)`` and an optional ``prev_key_padding_mask``
``(bsz, T)``, and *concatenates* the keys of the new tokens on every call.  A draft-and-verify
call appends ``m`` entries to every row; afterwards each row keeps only its accepted ``c_b``
of them (SPEC §2: "the self-attention cache is then cut back to the accepted length").

Layout chosen here (batch > 1, different ``c_b`` per row): **right-aligned rows with a left
key-padding mask**.  Row ``b`` holds its ``v_b`` valid entries in the last ``v_b`` columns; the
columns before are masked.  Because fairseq appends new keys at the right end, a row's kept
entries (old valid ones + the first ``c_b`` new ones) are one contiguous window, so the cut-back
is a single gather of that window per tensor, and the physical length stays ``max_b v_b``
(no holes, no growth, the prefix is never recomputed).  Attention does not depend on where a
key sits in the buffer (positions are added at the embedding), only on the mask, so the padding
on the left is invisible to the model.  With one unpadded row the cut-back is a plain slice.

The encoder-attention cache (``static_kv``) is left untouched except when rows are dropped.
"""
from typing import Dict, Optional

import torch
from torch import Tensor

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


class DecoderKVCache:
    """Cut-back and row selection for the incremental state of one fairseq transformer decoder."""

    def __init__(self, decoder, state: IncrementalState):
        self.state = state
        self.self_attns = [layer.self_attn for layer in decoder.layers]
        self.enc_attns = [layer.encoder_attn for layer in decoder.layers if layer.encoder_attn is not None]
        self.physical = 0  # columns currently held by every row (host int)
        self.padded = False  # whether some row has left padding (a single row can, after others left)

    def commit(self, valid_after: Tensor, keep: Tensor, new_physical: int, ragged: bool):
        """Keep, per row, the first ``keep[b]`` of the entries the last call appended.

        ``valid_after[b]``: entries row ``b`` holds after the cut (old valid + ``keep[b]``);
        ``new_physical``: ``max_b valid_after[b]`` and ``ragged``: whether some row holds fewer
        (host values: the engine synchronises once per iteration and passes them in).
        """
        bsz = keep.size(0)
        old = self.physical
        index = pad = None
        if bsz > 1 or self.padded:
            # the window of row b ends right after its kept entries: columns [old + keep_b - P', old + keep_b)
            cols = torch.arange(new_physical, device=keep.device)
            index = ((old + keep - new_physical).unsqueeze(1) + cols).clamp_(min=0)  # < 0: padding anyway
            if ragged:
                pad = cols.unsqueeze(0) < (new_physical - valid_after).unsqueeze(1)
        for attn in self.self_attns:
            buf = attn._get_input_buffer(self.state)
            k, v = buf["prev_key"], buf["prev_value"]
            if index is None:  # one unpadded row: its entries are the first new_physical columns
                k, v = k[:, :, :new_physical], v[:, :, :new_physical]
            else:
                gidx = index.view(bsz, 1, new_physical, 1).expand(bsz, k.size(1), new_physical, k.size(3))
                k, v = k.gather(2, gidx), v.gather(2, gidx)
            buf["prev_key"], buf["prev_value"], buf["prev_key_padding_mask"] = k, v, pad
            attn._set_input_buffer(self.state, buf)
        self.physical = new_physical
        self.padded = ragged

    def select_rows(self, rows: Tensor):
        """Keep only ``rows`` (e.g. drop finished sentences) in every self- and encoder-attention buffer."""
        for attn in self.self_attns + self.enc_attns:
            buf = attn._get_input_buffer(self.state)
            if not buf:
                continue
            for key, value in list(buf.items()):
                if value is not None:
                    buf[key] = value.index_select(0, rows)
            attn._set_input_buffer(self.state, buf)
