"""The verifier: a stock fairseq transformer scoring "prefix cache + k new tokens" in ONE call.

fairseq's ``TransformerDecoder.extract_features`` keeps only the last token in incremental mode
and derives positions from the sequence length, so it cannot score several new tokens per row,
nor rows of different lengths.  This module runs the decoder's own sub-modules (embeddings,
layers, norms, output projection) in the same order as ``extract_features_scriptable``, with

* each row's *logical* positions (0 = BOS), fed to the positional embedding as fairseq does
  (index ``padding_idx + 1 + position``: see ``SinusoidalPositionalEmbedding.forward``);
* a causal mask inside the new tokens (they see the cached prefix and the new tokens before
  them), 2-D ``(m, cached + m)`` as ``MultiheadAttention`` adds it to every row and head;
* the per-row left padding of the cache handled by ``cache.DecoderKVCache``.

Nothing of fairseq is patched; any checkpoint of fairseq's ``transformer`` family works as is.
"""
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_plugins.decoding.cache import DecoderKVCache


class UnsupportedVerifierError(ValueError):
    """The model cannot be used as a draft-and-verify verifier; the message says why."""


class Verifier:
    def __init__(self, model):
        decoder = getattr(model, "decoder", None)
        needed = ("layers", "embed_tokens", "embed_positions", "output_layer")
        if decoder is None or not all(hasattr(decoder, n) for n in needed) or not hasattr(model, "encoder"):
            raise UnsupportedVerifierError(
                f"--drafter needs an encoder-decoder model of fairseq's transformer family as verifier; got "
                f"{type(model).__name__}. Decode it without --drafter.")
        if getattr(decoder, "cross_self_attention", False):
            raise UnsupportedVerifierError("--drafter does not support --cross-self-attention checkpoints")
        if getattr(decoder, "adaptive_softmax", None) is not None:
            raise UnsupportedVerifierError("--drafter does not support adaptive-softmax checkpoints")
        self.model = model
        self.decoder = decoder
        pos = decoder.embed_positions
        self.pos_offset = (pos.padding_idx + 1) if pos is not None else 0
        self.max_positions = model.max_decoder_positions()
        self._mask_cache: Dict[tuple, Tensor] = {}

    # ---- encoder side ----
    def encode(self, net_input):
        return self.model.encoder.forward_torchscript(net_input)

    def select_encoder_rows(self, encoder_out, rows: Tensor):
        return self.model.encoder.reorder_encoder_out(encoder_out, rows)

    def max_source_positions(self) -> Optional[int]:
        enc = self.model.encoder
        return enc.max_positions() if hasattr(enc, "max_positions") else None

    def new_cache(self) -> DecoderKVCache:
        return DecoderKVCache(self.decoder, {})

    # ---- one verification call ----
    def _positions(self, positions: Tensor, like: Tensor) -> Tensor:
        pos = self.decoder.embed_positions
        index = positions + self.pos_offset
        if hasattr(pos, "weights"):  # sinusoidal: a buffer of precomputed rows
            return pos.weights.index_select(0, index.view(-1)).view(*index.shape, -1).detach()
        return F.embedding(index, pos.weight)  # learned (its padding row is never indexed here)

    def _causal_mask(self, cached: int, new: int, dtype, device) -> Optional[Tensor]:
        if new == 1:
            return None
        key = (cached, new, dtype, device)
        mask = self._mask_cache.get(key)
        if mask is None:
            mask = torch.zeros(new, cached + new, dtype=dtype, device=device)
            mask[:, cached:] = torch.triu(torch.full((new, new), float("-inf"), dtype=dtype, device=device), 1)
            if len(self._mask_cache) > 4096:
                self._mask_cache.clear()
            self._mask_cache[key] = mask
        return mask

    def logits(self, tokens: Tensor, positions: Tensor, encoder_out, cache: DecoderKVCache) -> Tensor:
        """Logits ``(B, m, V)`` for ``tokens`` ``(B, m)`` at ``positions`` after each row's cache.

        Appends the ``m`` new keys/values of every layer to ``cache`` (the caller cuts back)."""
        return self.forward(tokens, positions, encoder_out, cache)[0]

    def forward(self, tokens: Tensor, positions: Tensor, encoder_out, cache: DecoderKVCache):
        """``(logits (B, m, V), features (B, m, d))``: the features are the decoder's last hidden
        states before the output projection (what drafters such as blockwise heads read)."""
        dec = self.decoder
        x = dec.embed_scale * dec.embed_tokens(tokens)
        if dec.quant_noise is not None:
            x = dec.quant_noise(x)
        if dec.project_in_dim is not None:
            x = dec.project_in_dim(x)
        if dec.embed_positions is not None:
            x += self._positions(positions, x)
        if dec.layernorm_embedding is not None:
            x = dec.layernorm_embedding(x)
        x = dec.dropout_module(x).transpose(0, 1)
        enc: Optional[Tensor] = None
        enc_pad: Optional[Tensor] = None
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            enc = encoder_out["encoder_out"][0]
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            enc_pad = encoder_out["encoder_padding_mask"][0]
        mask = self._causal_mask(cache.physical, tokens.size(1), x.dtype, x.device)
        for layer in dec.layers:
            x, _, _ = layer(x, enc, enc_pad, cache.state, self_attn_mask=mask, self_attn_padding_mask=None)
        if dec.layer_norm is not None:
            x = dec.layer_norm(x)
        x = x.transpose(0, 1)
        if dec.project_out_dim is not None:
            x = dec.project_out_dim(x)
        return dec.output_layer(x), x

    @staticmethod
    def log_probs(logits: Tensor) -> Tensor:
        # as fairseq's get_normalized_probs (utils.log_softmax: float32 whatever the model dtype)
        return F.log_softmax(logits.float(), dim=-1)
