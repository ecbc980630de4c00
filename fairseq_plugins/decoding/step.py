"""The lean decoder step: ONE incremental call of a fairseq transformer decoder over ``m`` new
tokens per row, on the weights of a stock checkpoint (no conversion step, no copy of the model).

Every generator of the plugin decodes through it: the draft-and-verify engine's verifier (``m`` =
last token + draft), the multi-token beam search of the reordered models (``m`` = z slots of a
step), and drafters that run a decoder of their own.  Compared with fairseq's incremental path it

* keeps the self-attention keys/values in preallocated per-row buffers written in place
  (``cache.KVCache``): no concatenation per call, cut back = move the row lengths;
* projects the encoder's keys/values once per batch (``begin``), not once per layer call;
* calls ``torch.nn.functional.scaled_dot_product_attention`` with the masks it needs and nothing
  else (one causal/length mask per call, shared by every layer and head);
* performs no host synchronisation: the caller keeps the cache's host-side lengths.

It runs the decoder's own sub-modules' weights in the order of fairseq's
``TransformerDecoderBase.extract_features_scriptable`` and ``TransformerDecoderLayerBase.forward``
(pre- and post-norm, learned and sinusoidal positions, shared and separate embeddings), in
inference mode (no dropout).  Tests compare its logits with fairseq's
decoder over whole sentences (atol 1e-5, fp32).

Positions: token ``t`` of a row sits at logical slot ``t`` (slot 0 holds the start symbol), which a
stock decoder embeds as fairseq does (``padding_idx + 1 + slot``).  A decoder whose
``embed_positions`` has an ``embed_slots(slots, like)`` method (the reordered transformer: signed
or learned order positions, direction and start-slot embeddings) embeds the slots itself.
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_plugins.decoding.cache import KVCache
from fairseq_plugins.decoding.projection import Product, StackedQKV, VocabProjection, WeightCheck, trainable
from fairseq_plugins.errors import PluginError


class UnsupportedDecoderError(PluginError, ValueError):
    """The decoder uses a feature the lean step does not implement; the message says which."""


class DecoderLayerWeights:
    """One decoder layer's parameters as plain references (no nn.Module attribute lookups per call):
    its linear maps as ``projection.Product``s (on a CPU the kernel timed faster per row count), the
    self-attention's q/k/v projections stacked into one matrix, so that a call makes one GEMM
    instead of three.  Once per batch (``DecoderStep.begin``) the step's ``projection.WeightCheck``
    lays the products out again where their weights changed (.half()/.cuda()/load_state_dict, an
    optimizer's update through ``p.data``) and ``refresh_norms`` re-reads the layer norms."""

    def __init__(self, layer):
        sa = layer.self_attn
        if getattr(sa, "bias_k", None) is not None or getattr(sa, "add_zero_attn", False):
            raise UnsupportedDecoderError("the lean decoder step does not support --add-bias-kv / --add-zero-attn")
        normformer = [n for n in ("attn_ln", "c_attn", "ffn_layernorm", "w_resid") if getattr(layer, n, None) is not None]
        if normformer:  # fairseq's translation transformer exposes no flag for them; its LM does
            raise UnsupportedDecoderError(f"the lean decoder step does not support NormFormer layers ({normformer[0]})")
        self.layer = layer
        self.act = layer.activation_fn
        self.pre = bool(layer.normalize_before)
        self.has_ea = layer.encoder_attn is not None
        # the layer's products (decoding.projection), re-reading their weights at each refresh
        self.qkv = StackedQKV(layer.self_attn)
        self.sa_o, self.fc1, self.fc2 = _product(layer.self_attn.out_proj), _product(layer.fc1), _product(layer.fc2)
        self.products = [self.qkv, self.sa_o, self.fc1, self.fc2]
        if self.has_ea:
            ea = layer.encoder_attn
            self.ea_q, self.ea_o = _product(ea.q_proj), _product(ea.out_proj)
            self.ea_k, self.ea_v = _product(ea.k_proj), _product(ea.v_proj)
            self.products += [self.ea_q, self.ea_o, self.ea_k, self.ea_v]
        self.refresh_norms()

    def refresh_norms(self):
        layer = self.layer
        self.sa_ln = layer_norm_params(layer.self_attn_layer_norm)
        if self.has_ea:
            self.ea_ln = layer_norm_params(layer.encoder_attn_layer_norm)
        self.ffn_ln = layer_norm_params(layer.final_layer_norm)


def _product(linear) -> Product:
    return Product(lambda: linear.weight, lambda: linear.bias)


def layer_norm_params(ln):
    return ln.normalized_shape, ln.weight, ln.bias, ln.eps


def apply_layer_norm(x: Tensor, norm) -> Tensor:
    return F.layer_norm(x, norm[0], norm[1], norm[2], norm[3])


class DecoderStep:
    """``step(cache, tokens, slots)`` -> ``(logits (B, m, V), features (B, m, d))``."""

    def __init__(self, decoder, owner=None):
        """``owner``: the model ``decoder`` belongs to (whether it can still be trained: ``projection.trainable``)."""
        if getattr(decoder, "cross_self_attention", False):
            raise UnsupportedDecoderError("the lean decoder step does not support --cross-self-attention models")
        if getattr(decoder, "adaptive_softmax", None) is not None:
            raise UnsupportedDecoderError("the lean decoder step does not support adaptive-softmax models")
        if not hasattr(decoder, "layers") or not hasattr(decoder, "embed_tokens"):
            raise UnsupportedDecoderError(
                f"the lean decoder step runs fairseq transformer decoders; got {type(decoder).__name__}")
        self.decoder = decoder
        self.layers = [DecoderLayerWeights(layer) for layer in decoder.layers]
        attn = decoder.layers[0].self_attn
        self.heads, self.head_dim = attn.num_heads, attn.head_dim
        self.embed_dim = attn.embed_dim
        pos = decoder.embed_positions
        self.embed_slots = getattr(pos, "embed_slots", None)
        self.pos_offset = (pos.padding_idx + 1) if pos is not None and self.embed_slots is None else 0
        self._table: Optional[Tensor] = None  # sinusoidal rows on the model's device/dtype
        self._embed_w = decoder.embed_tokens.weight
        self._masks: Dict[Tuple, Tensor] = {}
        self.vocab_projection = VocabProjection(decoder, checks_content=trainable(owner))
        # every weight the step copies, checked in one host read per batch (``projection.WeightCheck``)
        self.weights = WeightCheck([p for lw in self.layers for p in lw.products] + [self.vocab_projection.product],
                                   trainable(owner))

    # ---- per batch ----
    def begin(self, encoder_out, capacity: int, batch_size: Optional[int] = None, group: int = 1) -> KVCache:
        """A fresh cache: the encoder's keys/values projected once per layer; self-attention
        buffers of ``capacity`` columns per row (they grow if a call needs more).  ``group``: rows per
        source (beam search: the encoder output is per sentence, its ``group`` beams share it)."""
        enc = encoder_out["encoder_out"][0] if encoder_out and len(encoder_out["encoder_out"]) else None
        pad = (encoder_out["encoder_padding_mask"][0]
               if encoder_out and len(encoder_out.get("encoder_padding_mask", [])) else None)
        self._refresh()
        weight = self.decoder.embed_tokens.weight
        H, dh = self.heads, self.head_dim
        enc_k: List[Tensor] = []
        enc_v: List[Tensor] = []
        if enc is not None:
            S, B = enc.size(0), enc.size(1)
            x = enc.transpose(0, 1)  # (B, S, C)
            for lw in self.layers:
                if not lw.has_ea:
                    continue
                enc_k.append(lw.ea_k(x).view(B, S, H, dh).transpose(1, 2))
                enc_v.append(lw.ea_v(x).view(B, S, H, dh).transpose(1, 2))
        else:
            B = batch_size
        enc_mask = None
        if pad is not None and bool(pad.any()):  # once per batch
            enc_mask = (~pad).view(B, 1, 1, -1)
        k = [weight.new_zeros(B * group, H, capacity, dh) for _ in self.layers]
        v = [weight.new_zeros(B * group, H, capacity, dh) for _ in self.layers]
        return KVCache(k, v, enc_k, enc_v, enc_mask, group=group)

    # ---- embeddings ----
    def _positions(self, slots: Tensor, like: Tensor) -> Optional[Tensor]:
        if self.embed_slots is not None:
            return self.embed_slots(slots, like)
        pos = self.decoder.embed_positions
        if pos is None:
            return None
        index = slots + self.pos_offset
        if self._table is not None:  # sinusoidal: fairseq's precomputed table (prepared by begin)
            return F.embedding(index, self._table)
        return F.embedding(index, pos.weight)  # learned (the padding row is never indexed)

    def _refresh(self):
        """Once per batch: re-read the weights (replaced, moved, cast or changed in content, however:
        ``projection.WeightCheck``) and prepare the
        sinusoidal table for every position the decoder accepts (no per-call size check)."""
        self.weights.refresh()
        for lw in self.layers:
            lw.refresh_norms()
        pos = self.decoder.embed_positions
        if self.embed_slots is None and pos is not None and hasattr(pos, "weights"):
            weight = self.decoder.embed_tokens.weight
            rows = self.decoder.max_positions() + self.pos_offset + 1
            table = self._table
            if table is None or table.device != weight.device or table.dtype != weight.dtype or table.size(0) < rows:
                # our own copy: decoding never mutates the model (fairseq's table may hold a row fewer, and
                # writing a bigger CPU fp32 table into it left a .cuda().half() model mixing devices later)
                source = pos.weights if pos.weights.size(0) >= rows else pos.get_embedding(
                    rows, pos.embedding_dim, pos.padding_idx)
                self._table = source.to(device=weight.device, dtype=weight.dtype)

    def embed(self, tokens: Tensor, slots: Tensor, added: Optional[Tensor] = None) -> Tensor:
        dec = self.decoder
        x = dec.embed_scale * F.embedding(tokens, self._embed_w)
        if dec.project_in_dim is not None:
            x = dec.project_in_dim(x)
        if added is not None:  # an input added to the token embeddings (as ``models.nar_drafter.drafter_input``)
            x = x + added
        positions = self._positions(slots, x)
        if positions is not None:
            x = x + positions
        if dec.layernorm_embedding is not None:
            x = dec.layernorm_embedding(x)
        return x

    # ---- masks ----
    def _causal(self, past: int, m: int, device) -> Tensor:
        key = (past, m, device)
        mask = self._masks.get(key)
        if mask is None:
            if len(self._masks) > 2048:
                self._masks.clear()
            cols = torch.arange(past + m, device=device)
            mask = self._masks[key] = cols.unsqueeze(0) <= (past + torch.arange(m, device=device)).unsqueeze(1)
        return mask

    def self_attn_mask(self, cache: KVCache, m: int, causal: bool, device, dtype=torch.float32) -> Optional[Tensor]:
        """Mask over the ``max_length + m`` used columns (boolean, True = attend, or additive in
        ``dtype`` for rows of different lengths), or None."""
        if cache.aligned:
            if m == 1 or not causal:
                return None
            return self._causal(cache.max_length, m, device)
        cols = torch.arange(cache.max_length + m, device=device).view(1, 1, 1, -1)
        reach = torch.arange(1, m + 1, device=device) if causal else torch.full((m,), m, device=device)
        allowed = cols < (cache.lengths.view(-1, 1, 1, 1) + reach.view(1, 1, m, 1))
        # additive, built once per call: SDPA would convert a boolean mask in every layer
        return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, -math.inf)

    # ---- one call ----
    def __call__(self, cache: Optional[KVCache], tokens: Tensor, slots: Tensor, causal: bool = True,
                 attn_mask: Optional[Tensor] = None, encoder: Optional[KVCache] = None,
                 project: Optional[slice] = slice(None), added: Optional[Tensor] = None):
        """Logits and last hidden states of ``tokens`` ``(B, m)`` at logical ``slots`` (``(B, m)``,
        or ``(m,)`` when every row is at the same slots).

        With a ``cache``: the new tokens attend to each row's cached entries and to each other
        (causally unless ``causal=False``: the z slots of a multi-token step see one another), and
        their keys/values are written at the rows' lengths; the caller then ``commit``s/``advance``s.
        ``attn_mask`` (bool, True = attend, broadcastable to ``(B, 1, m, max_length + m)``) replaces
        the derived mask (e.g. a generation order's ablation masks).
        Without a cache (``cache=None``): the tokens attend only to each other under ``attn_mask``
        (a non-autoregressive drafter's bidirectional pass); ``encoder`` then holds the encoder
        keys/values (a cache from ``begin``).  ``project``: the positions whose logits are wanted
        (all by default; None: no logits; the hidden states returned are always all of them).
        ``added`` ``(B, m, d)``: added to the token embeddings (the shallow GAD drafter's verifier features)."""
        B, m = tokens.shape
        x = self.embed(tokens, slots, added)
        enc_side = cache if cache is not None else encoder
        if cache is not None:
            past = cache.max_length
            T = past + m
            cache.ensure_capacity(T)
            mask = attn_mask if attn_mask is not None else self.self_attn_mask(cache, m, causal, x.device, x.dtype)
            scatter = None
            if not cache.aligned:
                scatter = (cache.lengths.view(B, 1, 1, 1) + torch.arange(m, device=x.device).view(1, 1, m, 1)
                           ).expand(B, self.heads, m, self.head_dim)
        else:
            mask = attn_mask
        ctx = (cache, mask, scatter if cache is not None else None, enc_side, B, m)
        x = x.reshape(B * m, -1)  # the layers run on (B*m, d): their products are plain 2-D GEMMs
        e = 0
        for i, lw in enumerate(self.layers):
            x = self._layer(i, e, lw, x, ctx)
            e += lw.has_ea
        dec = self.decoder
        if dec.layer_norm is not None:
            x = dec.layer_norm(x)
        if dec.project_out_dim is not None:
            x = dec.project_out_dim(x)
        x = x.view(B, m, -1)
        return (None if project is None else self.output_layer(x[:, project])), x

    def output_layer(self, x: Tensor) -> Tensor:
        return self.vocab_projection(x)

    def _layer(self, i: int, e: int, lw: DecoderLayerWeights, x: Tensor, ctx) -> Tensor:
        """fairseq's TransformerDecoderLayerBase.forward in inference mode (``e``: encoder-attention index)
        on ``x`` ``(B*m, d)``."""
        x = self._self_attention(i, lw, x, ctx)
        enc_side = ctx[3]
        if lw.has_ea and enc_side is not None and enc_side.enc_k:
            x = self._encoder_attention(e, lw, x, ctx)
        return self._feed_forward(lw, x)

    def _self_attention(self, i: int, lw: DecoderLayerWeights, x: Tensor, ctx) -> Tensor:
        cache, mask, scatter, _, B, m = ctx
        residual = x
        h = apply_layer_norm(x, lw.sa_ln) if lw.pre else x
        q, k, v = lw.qkv(h).view(B, m, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:  # write the new keys/values at each row's length, attend to the used columns
            kb, vb = cache.k[i], cache.v[i]
            past = cache.max_length
            if scatter is None:
                kb[:, :, past : past + m] = k
                vb[:, :, past : past + m] = v
            else:
                kb.scatter_(2, scatter, k)
                vb.scatter_(2, scatter, v)
            k, v = kb[:, :, : past + m], vb[:, :, : past + m]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(B * m, -1)
        x = residual + lw.sa_o(a)
        return x if lw.pre else apply_layer_norm(x, lw.sa_ln)

    def _encoder_attention(self, e: int, lw: DecoderLayerWeights, x: Tensor, ctx) -> Tensor:
        _, _, _, enc_side, B, m = ctx
        residual = x
        h = apply_layer_norm(x, lw.ea_ln) if lw.pre else x
        H, dh, g = self.heads, self.head_dim, enc_side.group
        # (B, m, H, dh) -> per source: (B / g, H, g * m, dh); the g rows of a source attend to its keys at once
        q = lw.ea_q(h).view(B // g, g * m, H, dh).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, enc_side.enc_k[e], enc_side.enc_v[e], attn_mask=enc_side.enc_mask)
        x = residual + lw.ea_o(a.transpose(1, 2).reshape(B * m, -1))
        return x if lw.pre else apply_layer_norm(x, lw.ea_ln)

    def _feed_forward(self, lw: DecoderLayerWeights, x: Tensor) -> Tensor:
        residual = x
        h = apply_layer_norm(x, lw.ffn_ln) if lw.pre else x
        x = residual + lw.fc2(lw.act(lw.fc1(h)))
        return x if lw.pre else apply_layer_norm(x, lw.ffn_ln)

    @staticmethod
    def log_probs(logits: Tensor, temperature: float = 1.0) -> Tensor:
        """fairseq's next-token log-probs: the logits divided by ``--temperature`` (in place, as
        fairseq's ``lprobs.div_``), then get_normalized_probs: log-softmax in float32 whatever the
        model's dtype.  Every generator computes them here."""
        if temperature != 1.0:
            logits = logits.div_(temperature)
        return F.log_softmax(logits.float(), dim=-1)
