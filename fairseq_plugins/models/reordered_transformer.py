"""``--arch reordered_transformer_*``: fairseq's transformer with a decoder for a generation order.

The decoder differs from fairseq's only where the papers say (SPEC §3):

* positions: the order's positions (``fairseq_plugins.orders``) embedded with a sinusoid that
  accepts negative values (IBDecoder Eq. 7) or with a learned table (Imamura & Sumita 3.1);
  IMDecoder adds a learned direction embedding (Eq. 10);
* self-attention mask: M(h,c) of Eq. 4 (with the order's ablations) in training;
* incremental decoding of z new slots per call: fairseq's MultiheadAttention appends the new
  keys to its cache, and the z x (past+z) rows of the mask are passed (None when all allowed).

The model records its order in its args (``target_order_signature``), so a checkpoint decoded
with another order is refused by ``FastTranslationTask`` (clear error).
"""
import math
from typing import Optional

import torch
import torch.nn as nn
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerModel, base_architecture
from fairseq.models.transformer.transformer_legacy import transformer_vaswani_wmt_en_de_big

from fairseq_plugins.orders import get_order, order_from_config


def signed_sinusoid(positions, dim):
    """fairseq's sinusoidal table (sin half, then cos half), computed directly for any integer
    position, negative ones included (IBDecoder Eq. 7 keeps the locality bias per direction)."""
    half = dim // 2
    scale = math.log(10000) / (half - 1)
    inv_freq = torch.exp(torch.arange(half, device=positions.device, dtype=torch.float) * -scale)
    angles = positions.float().unsqueeze(-1) * inv_freq
    emb = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    if dim % 2:
        emb = torch.nn.functional.pad(emb, (0, 1))
    return emb


class OrderEmbedding(nn.Module):
    """Position (+ direction) embedding of decoder slots for one generation order."""

    def __init__(self, order, dim, max_target_positions):
        super().__init__()
        self.order, self.dim = order, dim
        self.max_slots = max_target_positions + order.z  # end markers pad the target by < z slots
        self.learned = None
        if order.position_embedding == "learned":
            self.learned = nn.Embedding(self.max_slots, dim)
            nn.init.normal_(self.learned.weight, mean=0, std=dim ** -0.5)
        self.direction = None
        if order.direction_embedding:
            self.direction = nn.Embedding(order.h, dim)
            nn.init.normal_(self.direction.weight, mean=0, std=dim ** -0.5)

    def forward(self, positions, directions, like):
        if self.learned is not None:  # slots < max_slots: the generator caps its length by max_positions()
            emb = self.learned(positions)
        else:
            emb = signed_sinusoid(positions, self.dim)
        if self.direction is not None:
            emb = emb + self.direction(directions)
        return emb.to(like)


class ReorderedTransformerDecoder(TransformerDecoder):
    """TransformerDecoder for a generation order: positions, M(h,c) mask, z slots per step."""

    def __init__(self, args, dictionary, embed_tokens, order, no_encoder_attn=False):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.order = order
        self.embed_positions = None  # replaced by the order's embedding
        self.embed_order = OrderEmbedding(order, self.embed_dim, self.max_target_positions)
        self._mask_cache = {}

    def max_positions(self):
        return self.max_target_positions

    def _train_mask(self, length, like):
        key = (length, like.device, like.dtype)
        if key not in self._mask_cache:
            self._mask_cache = {key: self.order.mask(length).to(like)}
        return self._mask_cache[key]

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                full_context_alignment=False, alignment_layer=None, alignment_heads=None, src_lengths=None,
                return_all_hiddens=False, target_positions=None, target_directions=None):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state,
                                         target_positions=target_positions, target_directions=target_directions)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None, alignment_heads=None,
                         target_positions=None, target_directions=None):
        """Like fairseq's, but with the order's positions and mask, and z new slots per
        incremental call (``prev_output_tokens`` holds every slot so far, as in fairseq)."""
        total = prev_output_tokens.size(1)
        offset = 0
        if incremental_state is not None:
            offset = total - min(self.order.z, total)
            prev_output_tokens = prev_output_tokens[:, offset:]
            target_positions = target_directions = None
        bsz, slots = prev_output_tokens.size()
        device = prev_output_tokens.device
        if target_positions is None:
            target_positions = self.order.positions(slots, offset).to(device).expand(bsz, slots)
        if target_directions is None:
            target_directions = self.order.directions(slots, offset).to(device).expand(bsz, slots)

        x = self.embed_scale * self.embed_tokens(prev_output_tokens.contiguous())
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        x = x + self.embed_order(target_positions, target_directions, like=x)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x).transpose(0, 1)

        self_attn_padding_mask: Optional[torch.Tensor] = None
        if incremental_state is None and prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
        if incremental_state is None:
            self_attn_mask = self._train_mask(slots, x)
        else:
            self_attn_mask = self.order.incremental_mask(offset, slots)
            self_attn_mask = None if self_attn_mask is None else self_attn_mask.to(x)

        enc = encoder_out["encoder_out"][0] if encoder_out and len(encoder_out["encoder_out"]) else None
        enc_pad = (encoder_out["encoder_padding_mask"][0]
                   if encoder_out and len(encoder_out["encoder_padding_mask"]) else None)
        inner_states = [x]
        for layer in self.layers:
            x, _, _ = layer(x, enc, enc_pad, incremental_state, self_attn_mask=self_attn_mask,
                            self_attn_padding_mask=self_attn_padding_mask)
            inner_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [None], "inner_states": inner_states}


@register_model("reordered_transformer")
class ReorderedTransformerModel(TransformerModel):
    """Transformer trained and decoded in a generation order (``--target-order`` of the task)."""

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.generation_order = decoder.order

    @classmethod
    def build_model(cls, args, task):
        order = order_from_config(args) or get_order("l2r")
        args.target_order_signature = order.signature  # read back by orders.order_signature_of_model
        return super().build_model(args, task)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        order = order_from_config(args) or get_order("l2r")
        return ReorderedTransformerDecoder(args, tgt_dict, embed_tokens, order,
                                           no_encoder_attn=getattr(args, "no_cross_attention", False))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, target_positions=None,
                target_directions=None, return_all_hiddens: bool = True, features_only: bool = False,
                alignment_layer=None, alignment_heads=None):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                            target_positions=target_positions, target_directions=target_directions)


@register_model_architecture("reordered_transformer", "reordered_transformer_tiny")
def reordered_transformer_tiny(args):
    """CPU demo size, as transformer_fast_tiny: d=128, 3+3 layers, 4 heads, ffn 512, shared embeddings."""
    from fairseq_plugins.models.architectures import transformer_fast_tiny

    transformer_fast_tiny(args)


@register_model_architecture("reordered_transformer", "reordered_transformer_base")
def reordered_transformer_base(args):
    """Transformer base (both papers): d=512, 6+6 layers, 8 heads, ffn 2048."""
    base_architecture(args)


@register_model_architecture("reordered_transformer", "reordered_transformer_big")
def reordered_transformer_big(args):
    """Transformer big (both papers): d=1024, 6+6 layers, 16 heads, ffn 4096, dropout 0.3."""
    transformer_vaswani_wmt_en_de_big(args)
