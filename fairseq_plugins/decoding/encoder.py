"""The lean encoder pass: fairseq's transformer encoder, once per batch, on the weights of a stock
checkpoint, with the decoder step's products (``decoding.projection``) and one
``scaled_dot_product_attention`` per layer.

At batch 1 on a CPU the encoder is a quarter of greedy decoding's time on short sentences
(typo correction, 5 words: ~0.85 ms a sentence through fairseq's modules, most of it module and
``multi_head_attention_forward`` overhead around products of a few rows), and it is the same for
every drafter, so it bounds what any of them can gain per sentence.  This pass runs the layers of
``TransformerEncoderBase.forward_scriptable`` and ``TransformerEncoderLayerBase.forward`` in their
order (pre- and post-norm, learned and sinusoidal positions, ``--layernorm-embedding``), in
inference mode, and returns fairseq's encoder-output dict.  Differences from fairseq's own pass,
none of which changes a value beyond float rounding (tests: atol 1e-5 in fp32):

* batch-first throughout (``encoder_out`` is the transposed view fairseq's layout asks for);
* the key-padding mask is passed whenever the batch has more than one row (fairseq reads
  ``mask.any()`` on the host first: one host synchronisation a batch, here none), and a single row
  has no padding;
* padded positions are zeroed with ``masked_fill`` where fairseq multiplies by ``1 - mask``.

An encoder that is not fairseq's (its ``forward`` overridden), or that uses what this pass does not
implement (quant-noise, ``return_fc``, bias_k / zero attention), runs through fairseq's own
``forward_torchscript``: :func:`lean_encoder` returns None for it.
"""
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from fairseq.models.transformer.transformer_encoder import TransformerEncoderBase
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor

from fairseq_plugins.decoding.projection import Product, StackedQKV, WeightCheck, trainable
from fairseq_plugins.decoding.step import apply_layer_norm, layer_norm_params

_FAIRSEQ_PASS = ("forward", "forward_scriptable", "forward_embedding", "forward_torchscript")


class Encoder:
    """An encoder run once per batch: the lean pass where :func:`lean_encoder` takes it, fairseq's
    own ``forward_torchscript`` otherwise.  Build it once per model: the lean pass lays out its
    products (and, on a CPU, packs their weights) when it is made."""

    def __init__(self, encoder, owner=None):
        self.module, self.lean = encoder, lean_encoder(encoder, owner)

    def __call__(self, net_input) -> Dict[str, List[Tensor]]:
        if self.lean is not None:
            return self.lean(net_input["src_tokens"])
        return self.module.forward_torchscript(net_input)


def lean_encoder(encoder, owner=None) -> Optional["EncoderPass"]:
    """The lean pass of ``encoder``, or None where fairseq's own pass must run (see the module doc)."""
    cls = type(encoder)
    if not isinstance(encoder, TransformerEncoderBase) or any(
            getattr(cls, name) is not getattr(TransformerEncoderBase, name) for name in _FAIRSEQ_PASS):
        return None
    if getattr(encoder, "quant_noise", None) is not None or getattr(encoder, "return_fc", False):
        return None
    for layer in encoder.layers:
        sa = layer.self_attn
        if (type(layer).forward is not TransformerEncoderLayerBase.forward or getattr(layer, "return_fc", False)
                or getattr(sa, "bias_k", None) is not None or getattr(sa, "add_zero_attn", False)
                or sa.q_proj.bias is None):
            return None
    return EncoderPass(encoder, owner)


class _EncoderLayer:
    """One encoder layer's weights as plain references (``refresh`` once per batch)."""

    def __init__(self, layer):
        self.layer = layer
        self.act = layer.activation_fn
        self.pre = bool(layer.normalize_before)
        self.qkv = StackedQKV(layer.self_attn)
        self.out, self.fc1, self.fc2 = (Product(lambda m=m: m.weight, lambda m=m: m.bias)
                                        for m in (layer.self_attn.out_proj, layer.fc1, layer.fc2))

    def refresh(self):
        for p in (self.qkv, self.out, self.fc1, self.fc2):
            p.refresh()
        self.sa_ln, self.ffn_ln = layer_norm_params(self.layer.self_attn_layer_norm), layer_norm_params(self.layer.final_layer_norm)


class EncoderPass:
    """``pass_(src_tokens)`` -> fairseq's encoder-output dict for ``src_tokens`` ``(B, S)``."""

    def __init__(self, encoder, owner=None):
        self.encoder = encoder
        self.layers = [_EncoderLayer(layer) for layer in encoder.layers]
        self.weights = WeightCheck([p for lw in self.layers for p in (lw.qkv, lw.out, lw.fc1, lw.fc2)], trainable(owner))
        attn = encoder.layers[0].self_attn if len(encoder.layers) else None
        self.heads, self.head_dim = (attn.num_heads, attn.head_dim) if attn is not None else (1, 1)

    def __call__(self, src_tokens: Tensor) -> Dict[str, List[Tensor]]:
        enc = self.encoder
        self.weights.refresh()  # once per batch: the model may have moved or changed since the last
        for lw in self.layers:
            lw.refresh()
        B, S = src_tokens.shape
        pad_mask = src_tokens.eq(enc.padding_idx)
        embed = enc.embed_scale * F.embedding(src_tokens, enc.embed_tokens.weight)
        x = embed + enc.embed_positions(src_tokens) if enc.embed_positions is not None else embed
        if enc.layernorm_embedding is not None:
            x = enc.layernorm_embedding(x)
        keep = None
        if B > 1:  # a single row has no padding (fairseq pads a batch to its longest source)
            x = x.masked_fill(pad_mask.unsqueeze(-1), 0.0)
            keep = (~pad_mask).view(B, 1, 1, S)  # key padding: True = attend
        H, dh = self.heads, self.head_dim
        for lw in self.layers:
            residual = x
            if lw.pre:
                x = apply_layer_norm(x, lw.sa_ln)
            q, k, v = lw.qkv(x).view(B, S, 3, H, dh).permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, S, dh) each
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            x = residual + lw.out(a.transpose(1, 2).reshape(B, S, H * dh))
            if not lw.pre:
                x = apply_layer_norm(x, lw.sa_ln)
            residual = x
            if lw.pre:
                x = apply_layer_norm(x, lw.ffn_ln)
            x = residual + lw.fc2(lw.act(lw.fc1(x)))
            if not lw.pre:
                x = apply_layer_norm(x, lw.ffn_ln)
        if enc.layer_norm is not None:
            x = enc.layer_norm(x)
        src_lengths = src_tokens.ne(enc.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {"encoder_out": [x.transpose(0, 1)], "encoder_padding_mask": [pad_mask],
                "encoder_embedding": [embed], "encoder_states": [], "fc_results": [], "src_tokens": [],
                "src_lengths": [src_lengths]}
