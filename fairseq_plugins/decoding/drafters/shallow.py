"""The cheap GAD drafter in the engine (``models.shallow_drafter``; docs/METHODS.md §2-3):
``--drafter nar --drafter-path SHALLOW.pt`` picks it from the checkpoint.

Per batch: the drafter's encoder-attention keys/values are projected from the *verifier's* encoder
output (the engine's, ``DraftContext.encoder_out``: the encoder runs once per batch for both),
and a self-attention cache is opened.  Per iteration, one call of the lean decoder step over, per
row, ``[tokens accepted since the last call, MASK x k]``:

* the accepted tokens attend causally to the row's cache and are appended to it (accepted tokens
  are final, so the cache only grows: nothing is cut back, nothing recomputed);
* the k mask slots attend to the cache, the new tokens and each other; their keys/values are
  written past the row's length and overwritten by the next call (never cached);
* only the first ``K`` mask slots (the draft's width) are projected onto the vocabulary
  (``decoding.projection``: on a CPU in fp32 the faster of two kernels, measured).

No call reads the device: the engine passes the longest prefix (a host int), and the widest
call of the batch is bounded on the host by the verifier's columns observed since the last call
(a row gains at most one token per column the verifier used; ``StepResult.top``).

At batch 1 (``MaskSlotStep``) the row's slots are plain slices and, since only the mask slots'
outputs are read, the last layer computes the new tokens' keys/values and nothing else of theirs.
Rows are laid out ``[new tokens, MASK x k, PAD ...]`` (each row's slots contiguous after its cached
length, so the cache's per-row writes keep them in order); the PAD columns are never attended to.
This equals the training forward over ``[BOS, prefix, MASK x k]`` (tests/test_shallow_drafter.py).

A drafter trained with ``--verifier-features`` (``models.shallow_drafter``; EAGLE, Li et al. 2024)
adds ``W_f`` times the verifier's last hidden state at position ``j - 1`` to its input at prefix
position ``j``.  They come from the verification calls the engine makes anyway (``observe``:
``StepResult.hidden``, every fed column's), written into a per-row buffer on the device at each
row's own offset (one indexed write per observed call, no host read, made when the next proposal
needs them: nothing while the width policy decodes plain steps); a call reads the states of its new tokens only, as
the tokens themselves.  A row reads positions up to its length; the states of rejected draft
tokens land past it and the next call overwrites them before any is read.  Rows that leave are
dropped from a map of the batch's rows onto the buffer's rows (``state_rows``), not copied out of it.
"""
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_plugins.decoding.cache import KVCache
from fairseq_plugins.decoding.drafters.base import Draft
from fairseq_plugins.decoding.drafters.nar import NARDrafter, NARDrafterError
from fairseq_plugins.decoding.projection import VocabProjection
from fairseq_plugins.decoding.step import DecoderLayerWeights, DecoderStep, apply_layer_norm
from fairseq_plugins.models.shallow_drafter import fingerprint_matches


class MaskSlotStep(DecoderStep):
    """The lean decoder step (``step.DecoderStep``) for one row of the shallow drafter, where only
    the mask slots' outputs are read: in the *last* layer the newly accepted tokens need nothing
    but their keys/values (the cache's entries), so that layer carries on past its self-attention
    with the k mask slots alone, and they attend to every column with no mask at all (a mask slot
    sees the whole prefix and every slot).  Earlier layers (``--decoder-layers 2``) compute every
    column, the new tokens causally."""

    def mask_slots(self, cache: KVCache, tokens: Tensor, slots: Tensor, fresh: int, causal: Tensor,
                   added: Optional[Tensor] = None) -> Tensor:
        """Hidden states ``(1, k, d)`` of the k mask slots at the end of ``tokens`` ``(1, fresh + k)``
        (at ``slots``); the new tokens' keys/values are written at the cache's length (``causal``:
        the earlier layers' mask over the cache and the call's columns; ``added``: the verifier features' input)."""
        B, m = tokens.shape
        x = self.embed(tokens, slots, added).reshape(B * m, -1)  # the layers run on (B*m, d), as DecoderStep's
        cache.ensure_capacity(cache.max_length + m)
        e = 0
        for i, lw in enumerate(self.layers[:-1]):
            x = self._layer(i, e, lw, x, (cache, causal, None, cache, B, m))
            e += lw.has_ea
        last = self.layers[-1]
        x = self._mask_slot_attention(len(self.layers) - 1, last, x.view(B, m, -1), cache, fresh)
        ctx = (cache, None, None, cache, B, m - fresh)
        x = x.reshape(B * (m - fresh), -1)
        if last.has_ea and cache.enc_k:
            x = self._encoder_attention(e, last, x, ctx)
        x = self._feed_forward(last, x)
        dec = self.decoder
        if dec.layer_norm is not None:
            x = dec.layer_norm(x)
        if dec.project_out_dim is not None:
            x = dec.project_out_dim(x)
        return x.view(B, m - fresh, -1)

    def _mask_slot_attention(self, i: int, lw: DecoderLayerWeights, x: Tensor, cache: KVCache, fresh: int) -> Tensor:
        B, m, _ = x.shape
        h = apply_layer_norm(x, lw.sa_ln) if lw.pre else x
        q, k, v = lw.qkv(h).view(B, m, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        past = cache.max_length
        kb, vb = cache.k[i], cache.v[i]
        kb[:, :, past : past + m] = k
        vb[:, :, past : past + m] = v
        a = F.scaled_dot_product_attention(q[:, :, fresh:], kb[:, :, : past + m], vb[:, :, : past + m])
        x = x[:, fresh:] + lw.sa_o(a.transpose(1, 2).reshape(B, m - fresh, -1))
        return x if lw.pre else apply_layer_norm(x, lw.sa_ln)


class ShallowDrafter(NARDrafter):
    @staticmethod
    def decodes(model) -> bool:
        return getattr(model, "reads_verifier_encoder", False)  # a shallow drafter: the cheap one, same flags

    def __init__(self, model, block_size: int, trained_block: int, vocab_size: int, pad: int, verifier=None):
        if verifier is None or not all(fingerprint_matches(getattr(model, name), getattr(verifier, part))
                                       for name, part in model.fingerprints()):
            raise NARDrafterError(
                "--drafter-path is a shallow drafter trained against another verifier (the fingerprint of the "
                "verifier's encoder weights it read at training, and with --verifier-features its decoder's, differs "
                "from --path's): decode with the verifier it was trained with (its --verifier-path), or train one "
                "against this verifier with fairseq-train --task nar_drafter --arch shallow_drafter_tiny "
                "--verifier-path VERIFIER.pt")
        super().__init__(model, block_size, trained_block, vocab_size, pad, verifier=verifier)
        self.step = MaskSlotStep(model.decoder)
        self.cache = None
        self._arange, self._mask_row, self._masks, self._dtype = None, None, {}, None
        decoder = model.decoder
        self.projection = VocabProjection(decoder, rows_of=lambda: getattr(decoder, "draft_vocab", 0))
        self.feature_proj = decoder.verifier_feature_proj  # W_f (--verifier-features), else None
        self.states = None  # (B, width + 1, d) with W_f: row b's verifier state at position j - 1, read at j
        # the rows of ``states`` the batch's rows are (None: the same rows): rows that leave are dropped from
        # this map, not from the buffer (a copy of B x width x d at every leave, also while nothing is drafted)
        self.state_rows = None

    def begin(self, ctx):
        super(NARDrafter, self).begin(ctx)
        self._follow_verifier(ctx.src_tokens)
        if self.feature_proj is not None:
            if ctx.final:
                raise NARDrafterError(
                    "--drafter-path was trained with --verifier-features: it reads the verifier's hidden states, which "
                    "the drafter alone (--acceptance all) does not compute; decode with a rule that calls the verifier "
                    "(--acceptance exact), or use a drafter trained without --verifier-features")
            self._state_shape = (ctx.src_tokens.size(0), ctx.width + 1, self.feature_proj.weight.size(1))
        self.states = self.state_rows = None  # made when first written: a batch decoded plain never pays for it
        self.unstored = []  # (hidden, n_before, state rows) of the verifier's calls observed since the last proposal
        encoder_out = ctx.encoder_out
        if encoder_out is None:  # the drafter alone (--acceptance all): no verifier call computed it
            net_input = {"src_tokens": ctx.src_tokens, "src_lengths": ctx.src_lengths}
            encoder_out = self.verifier.encoder.forward_torchscript(net_input)
        # the cache (the encoder's keys/values in the drafter's layers) is made at the batch's first
        # proposal: a batch the width policy decodes plain never pays for it (GAD on en-de, idle: 1 ms a sentence)
        self.cache, self._encoder_out, self._kept = None, encoder_out, None
        self.uncached = 1  # host bound of any row's tokens not yet in the cache: BOS
        device = ctx.src_tokens.device
        w = self.model.decoder.output_projection.weight
        if (self._arange is None or self._arange.device != device or self._arange.numel() < ctx.width + self.k + 1
                or self._dtype != w.dtype):
            self._arange, self._masks, self._dtype = torch.arange(ctx.width + self.k + 1, device=device), {}, w.dtype
            self._mask_row = torch.full((1, self.k), self.mask, dtype=torch.long, device=device)

    def _ensure_cache(self):
        if self.cache is None:
            self.cache = self.step.begin(self._encoder_out, capacity=self.ctx.max_len + 2 + self.k)
            if self._kept is not None:  # rows dropped before the first proposal
                self.cache.select_rows(self._kept, aligned=False)
            self.projection.refresh()

    def propose(self, out: Tensor, n_gen: Tensor, longest=None) -> Draft:
        # the engine (``longest`` given) tells observe() every verifier call: the call's width is known
        fresh = self.uncached if longest is not None else None
        if longest is None:
            longest = int(n_gen.max())
        if longest + 1 + self.k > self.max_positions:  # past the drafter's positions: no draft
            if self.ctx.final:
                raise NARDrafterError(f"the drafter reads at most {self.max_positions} positions, too few for "
                                      f"{self.ctx.max_len} tokens + {self.k} masks; lower --max-len-a/--max-len-b")
            return Draft(n_gen.new_full((n_gen.size(0), self.block), self.pad), n_gen.new_zeros(n_gen.size(0)), width=0)
        draft = self.draft(self.block_logits(out, n_gen, longest, fresh=fresh), n_gen)
        # the drafter alone: the next call appends at most this draft (nothing is observed)
        self.uncached = self.block if self.ctx.final else 0
        return draft

    def observe(self, step):
        """Each row gains at most one token per column of the verifier's it used (``count <= accepted
        + 1 <= top.size(1)``): a host bound of the next call's new tokens, without reading them."""
        self.uncached += step.top.size(1)
        if self.feature_proj is not None:
            if step.hidden is None:
                raise NARDrafterError("a drafter with --verifier-features needs the verifier's hidden states "
                                      "(StepResult.hidden): decode it through the draft-and-verify engine")
            # written when a proposal reads them: while the width policy decodes plain steps nothing is
            # (one indexed write per iteration: ~1% of the engine's greedy time at batch 1 on en-de, one process)
            self.unstored.append((step.hidden, step.n_before, self.state_rows))

    def _store_unstored(self):
        if self.feature_proj is None:
            return
        if self.states is None:  # column 0 (BOS) reads no state: it stays zero
            self.states = self.feature_proj.weight.new_zeros(self._state_shape)
        for hidden, n_before, rows in self.unstored:
            self.store_states(hidden, n_before, rows)
        self.unstored = []

    def store_states(self, hidden: Tensor, n_before: Tensor, rows: Optional[Tensor] = None):
        """The verifier's last hidden states ``(B, m, d)`` at the ``m`` columns it was fed, column ``c``
        of row ``b`` at position ``n_before[b] + c``, written where position ``n_before[b] + c + 1``
        reads it (no host read), in the buffer's rows ``rows`` (None: its rows in order).  The
        accepted tokens' come first; the rest (rejected draft tokens) lie past the row's new length,
        where the next call writes before anything is read."""
        B, m, d = hidden.shape  # same dtype: the drafter follows the verifier
        shift = self._arange[1 : m + 1]  # positions < width: n_before <= max_len, m <= K + 1
        if rows is not None:  # rows have left: each row's own buffer row
            self.states[rows.unsqueeze(1), n_before.unsqueeze(1) + shift] = hidden
        elif self.states.size(0) == 1:  # one row: its offset broadcasts, one 1-D index (fewer ops than the scatter's)
            self.states.index_copy_(1, n_before + shift, hidden)
        else:
            self.states.scatter_(1, (n_before.unsqueeze(1) + shift).unsqueeze(2).expand(-1, -1, d), hidden)

    def draft(self, logits: Tensor, n_gen: Tensor) -> Draft:
        if self.ctx.final and logits.size(-1) < self.vocab:  # the drafter alone: fairseq's constraints read (.., V)
            logits = torch.nn.functional.pad(logits, (0, self.vocab - logits.size(-1)), value=-math.inf)
        return super().draft(logits, n_gen)

    def block_logits(self, out: Tensor, n_gen: Tensor, longest: int, fresh: Optional[int] = None) -> Tensor:
        """Logits ``(B, K, N)`` (N: the drafter's output vocabulary) of the first ``K`` mask slots after
        each row's prefix ``out[b, :n_gen[b] + 1]`` (``longest = max(n_gen)``); the tokens not yet
        cached are appended to the cache.  ``fresh``: a host bound of any row's tokens not yet cached
        (a caller that knows none, not the engine, pays a host read)."""
        self._ensure_cache()
        self._store_unstored()
        cache = self.cache
        if out.size(0) == 1 and cache.aligned:  # one row, its length known: slices, the mask slots alone
            c = cache.max_length
            f = longest + 1 - c
            tokens = torch.cat([out[:, c : c + f], self._mask_row], dim=1)
            causal = self._mask(c, f) if len(self.step.layers) > 1 else None
            added = None
            if self.feature_proj is not None:  # the new tokens' states (the row's own buffer row once rows have left)
                rows = slice(None) if self.state_rows is None else self.state_rows
                added = self.feature_input(self.states[rows, c : c + f])
            hidden = self.step.mask_slots(cache, tokens, self._arange[c : c + f + self.k], f, causal, added)
            hidden = hidden[:, : self.block]
            cache.advance(f)  # the new tokens stay in the cache (the masks' entries are overwritten next time)
        else:
            bound = int((n_gen + 1 - cache.lengths).max()) if fresh is None else min(fresh, longest + 1)
            tokens, slots, attn_mask, first = self.block_input(out, n_gen, bound)
            added = None
            if self.feature_proj is not None:  # the new tokens' states (a new token's slot is its position), none at the masks
                new = self._arange[: tokens.size(1)].unsqueeze(0) < first.unsqueeze(1)
                if self.state_rows is None:
                    states = self.states.gather(1, slots.unsqueeze(2).expand(-1, -1, self.states.size(2)))
                else:  # rows have left: each row's own buffer row, the call's slots
                    states = self.states[self.state_rows.unsqueeze(1), slots]
                added = F.linear(states.masked_fill(~new.unsqueeze(2), 0), self.feature_proj.weight)
            _, hidden = self.step(cache, tokens, slots, attn_mask=attn_mask, project=None, added=added)
            at = first.unsqueeze(1) + self._arange[: self.block]  # the draft's mask slots, per row
            hidden = hidden.gather(1, at.unsqueeze(2).expand(-1, -1, hidden.size(2)))
            # every row now caches its whole prefix: one row left is aligned, its length known
            cache.commit(first, longest + 1, out.size(0) == 1)
        return self.projection(hidden)

    def feature_input(self, states: Tensor) -> Tensor:
        """One row's call: ``W_f`` times its new tokens' states ``(1, f, d)``, zeros at the k mask slots
        (GAD's [MASK] inputs unchanged: they read the states through attention to the prefix)."""
        return F.pad(F.linear(states, self.feature_proj.weight), (0, 0, 0, self.k))

    def block_input(self, out: Tensor, n_gen: Tensor, fresh: int):
        """Rows of different cache lengths: ``(tokens, slots, attn_mask, first)``: per row its tokens
        not yet cached (BOS at column 0 of ``out``), then k masks, then PAD; each column's logical
        slot; the mask over the cache and the call's columns (the new tokens causal, the masks
        seeing every new token and mask); the number of new tokens (the column of the first mask).
        ``fresh``: a host bound of the new tokens of any row (the call is ``fresh + k`` wide)."""
        k, cache = self.k, self.cache
        if self._arange.numel() < cache.max_length + fresh + k:  # a loose bound after many calls without a proposal
            self._arange = torch.arange(cache.max_length + fresh + k, device=self._arange.device)
        first = n_gen + 1 - cache.lengths
        cols = self._arange[: fresh + k].unsqueeze(0)
        src = (cache.lengths.unsqueeze(1) + cols).clamp(max=out.size(1) - 1)
        new = cols < first.unsqueeze(1)
        tokens = torch.where(new, out.gather(1, src), torch.where(cols < first.unsqueeze(1) + k, self.mask, self.pad))
        slots = src.clamp(max=self.max_positions - 1)  # PAD columns: any slot, never attended to
        reach = torch.where(new, cols + 1, first.unsqueeze(1) + k)  # how many of the call's columns each sees
        keys = self._arange[: cache.max_length + cols.size(1)].view(1, 1, 1, -1)
        allowed = keys < (cache.lengths.view(-1, 1, 1, 1) + reach.unsqueeze(1).unsqueeze(3))
        mask = torch.zeros(allowed.shape, dtype=self._dtype, device=out.device).masked_fill_(~allowed, -math.inf)
        return tokens, slots, mask, first

    def _mask(self, cached: int, fresh: int) -> Tensor:
        """``(fresh + k, cached + fresh + k)`` additive: new tokens causal, masks see all (one row):
        a view of one mask per ``fresh`` over the longest cache (every cached column visible)."""
        full = self._masks.get(fresh)
        if full is None:
            m, width = fresh + self.k, self._arange.numel() - 1
            reach = self._arange[1 : m + 1].clone()  # column i of the call sees i + 1 of its columns ...
            reach[fresh:] = m  # ... a mask slot all of them
            allowed = torch.arange(width + m, device=reach.device).unsqueeze(0) < (width + reach).unsqueeze(1)
            # additive, as the lean step's own masks: SDPA would convert a boolean one in every layer
            full = torch.zeros(allowed.shape, dtype=self._dtype, device=allowed.device).masked_fill_(~allowed, -math.inf)
            self._masks[fresh] = full
        return full[:, full.size(1) - cached - fresh - self.k :]

    def select_rows(self, rows):
        # max_length stays an upper bound, every row's own length masked per row (one row left is
        # aligned again by its next call, which caches its whole prefix: no read of its length)
        if self.cache is None:  # no proposal yet: the rows to keep when the cache is made
            self._kept = rows if self._kept is None else self._kept.index_select(0, rows)
        else:
            self.cache.select_rows(rows, aligned=False)
        if self.feature_proj is not None:
            self.state_rows = rows if self.state_rows is None else self.state_rows.index_select(0, rows)
