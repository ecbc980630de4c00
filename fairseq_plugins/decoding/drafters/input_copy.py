"""Input-guided Aggressive Decoding (IAD) as a drafter (Ge et al. / Xia et al., "Lossless
Acceleration ... Aggressive Decoding", §3.1, Alg. 1).

For tasks whose output resembles the input (GEC, pt_PT -> pt_BR), the draft is the source
continuation after the position the output is anchored at: with ``o_{j-q..j} = x_{i-q..i}``,
draft ``x_{i+1}, x_{i+2}, ...`` (Eq. 5-6).  After a bifurcation the output is decoded one token
per call (Eq. 4) until its last n-gram matches a *unique* source position again (Alg. 1 line 3).

Details, as Alg. 1 and the paper's implementation notes (§3.1.2):

* ``x = ([BOS], x_1..x_n, [EOS], [PAD])``: decoding starts anchored at ``o_0 = x_0 = [BOS]``; the
  source's EOS is copied like any token and the PAD sentinel guarantees a bifurcation.
* re-anchoring tries the output suffix of length ``q`` = ``--copy-ngram`` down to 1 and takes the
  longest that occurs in ``x`` at all (choice: "the last 1..q-gram"); Alg. 1 line 3 anchors only
  where it occurs exactly once (``--copy-anchor unique``: a longer n-gram occurring several times
  makes every shorter one ambiguous too, so the search stops there).  Where it occurs several times,
  ``--copy-anchor next`` (the default; our choice beyond Alg. 1, lossless either way: only the draft
  changes) anchors at its first occurrence ending after the last source position the output copied
  (``reached``): the output follows the source monotonically between local edits, as in GEC
  (the two side by side at base size: docs/RESULTS.md, "At base size");
* while the verifier keeps agreeing with the copy (its token at the bifurcation is the source
  token too), the anchor just moves on without re-matching;
* after plain steps (no draft verified: the draft-width policy found drafts not paying) the anchor
  is not tracked; the next proposal re-anchors on the output's last q-gram as above (lossless
  either way: only the draft changes);
* the draft is capped at ``k`` = ``--block-size`` tokens per call (the paper copies the whole rest;
  pass a large ``--block-size`` for that).

Two ways to keep the anchors, the same drafts (tests compare them): batched tensor operations on
the device, with no host synchronisation (a GPU, and a CPU batch of several rows); or, for one row
where reading a tensor costs one operation and waits for nothing (a CPU at batch 1,
``iteration_cost.host_reads_free``), on the host (:class:`HostAnchors`): the source's n-grams in a
dict, re-anchoring a lookup.  At batch 1 on a CPU an iteration's time is mostly a cost per
operation: the host path makes about 8 where the tensor path makes 31 (15 against 45 us).

Source and target must share the vocabulary; with different dictionaries the source ids are
mapped to target ids through their strings (``<unk>`` where the target lacks a piece;
``drafters.source``).
"""
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_plugins.decoding.drafters.base import (DRAFTERS, BlockDrafter, Draft, DrafterNotAvailableError,
                                                    StepResult, block_size_of)
from fairseq_plugins.decoding.drafters.source import in_target_ids, source_to_target_map
from fairseq_plugins.errors import OptionError

_NO_MATCH = -1   # source-side value that never equals an output token (BOS slot)
MAX_NGRAM = 3   # --copy-ngram's largest value
_SENTINEL = -2   # source-side value of the trailing PAD sentinel / padding for matching
# _rematch compares whole n-grams as one integer each: token t is the digit t + _DIGIT (the two
# source-side values above become 1 and 0, which no output token gives) in base _BASE, so
# MAX_NGRAM digits fit an int64 for any vocabulary below _BASE - _DIGIT
_DIGIT, _BASE = 2, 1 << 20


COPY_ANCHORS = ("next", "unique")


@dataclass
class InputCopyOptions:
    copy_ngram: int = field(default=2, metadata={"help": "IAD: q, n-gram used to re-anchor in the source"})
    copy_anchor: str = field(default="next", metadata={
        "help": "IAD: where the output's last n-gram occurs several times in the source, anchor at the first "
                "occurrence after the last copied position (next) or not at all (unique: Alg. 1 as published)"})


@DRAFTERS.register("input_copy", help="input-guided aggressive decoding, IAD (copies the source; --copy-ngram)",
                   options=InputCopyOptions)
class InputCopyDrafter(BlockDrafter):
    # the host path for batches of this many rows at most (a CPU): its Python work grows with the rows, the
    # tensor path's ~30 operations do not (one CPU here: 15 against 45 us at 1 row, 34 against 46 at 8, 94 against
    # 49 at 32); at one row it wins on any CPU, past that the crossover is the CPU's, so the choice stops at one
    host_rows = 1

    def __init__(self, block_size: int, ngram: int, src_to_tgt=None, anchor: str = "next"):
        super().__init__(block_size)
        if not 1 <= ngram <= MAX_NGRAM:
            raise OptionError(f"--copy-ngram must be 1, 2 or 3 (got {ngram})")
        if anchor not in COPY_ANCHORS:
            raise OptionError(f"--copy-anchor must be one of {', '.join(COPY_ANCHORS)} (got {anchor!r})")
        self.q = ngram
        self.next_anchor = anchor == "next"
        self.src_to_tgt = src_to_tgt  # LongTensor id map, or None when the dictionaries are one
        self.host: Optional[HostAnchors] = None  # the anchors on the host, where reads are free (_prepare)

    @classmethod
    def from_config(cls, cfg, task, models=()):
        if len(task.target_dictionary) >= _BASE - _DIGIT:
            raise DrafterNotAvailableError(f"--drafter input_copy supports vocabularies of up to {_BASE - _DIGIT - 1:,} symbols "
                             f"(this one has {len(task.target_dictionary):,}); use --drafter jacobi_hgj instead")
        return cls(block_size_of(cfg), cfg.copy_ngram, source_to_target_map(task.source_dictionary, task.target_dictionary),
                   getattr(cfg, "copy_anchor", "next"))

    def begin(self, ctx):
        super().begin(ctx)
        src = in_target_ids(ctx.src_tokens, ctx.pad, self.src_to_tgt)
        slen = src.size(1)
        # a tail of PAD/sentinel columns past every source, one draft (plus the verifier's token) wide:
        # an anchor there drafts nothing, and no index computed below needs a bound or a clamp
        tail = self.block + 2
        self.lost = slen + 2  # the anchor of a row that has none (Alg. 1: decode one token per call)
        self.stale = False
        self.on_host = ctx.reads_free() and src.size(0) <= self.host_rows
        self.host = None
        # the anchors and tables are built when first drafted from (_prepare): a batch whose width policy never
        # asks for a draft pays nothing for them (the tensor path's were ~1% of IAD's time at batch 32 on a CPU,
        # where the n-gram table compares every source position with every other; the host path's n-gram dicts
        # ~30 us a sentence at batch 1 on en-de, where the policy learns that copying does not pay)
        self.src, self.lengths, self.prepared = src, ctx.src_lengths.to(src.device), False

    def _prepare(self):
        """The anchors for the rows left: on the host (``HostAnchors``), or the tensor path's draft
        source, match table, anchors and n-gram table."""
        self.prepared = True
        ctx, src, lengths = self.ctx, self.src, self.lengths
        bsz, slen = src.shape
        tail = self.block + 2
        if self.on_host:
            self.host = HostAnchors(src, lengths, ctx, self.block, self.q, self.lost, slen + 2 + tail, self.next_anchor)
            return
        # left-align every source (fairseq left-pads by default) behind a BOS slot:
        # x = [BOS, x_1 .. x_n, EOS, PAD, PAD ...], n + 1 = src_lengths (incl. EOS)
        pos = torch.arange(slen + 2, device=src.device).unsqueeze(0)
        real = (src != ctx.pad)
        order = torch.argsort((~real).long(), dim=1, stable=True)  # real tokens first, in order
        left = src.gather(1, order)
        x = torch.full((bsz, slen + 2), ctx.pad, dtype=src.dtype, device=src.device)
        x[:, 1 : slen + 1] = left
        x[:, 0] = ctx.bos
        x = torch.where(pos <= lengths.unsqueeze(1), x, torch.full_like(x, ctx.pad))
        self.x = torch.cat([x, x.new_full((bsz, tail), ctx.pad)], dim=1)  # draft source (PAD after EOS = sentinel)
        match = x.clone()                            # what output n-grams are matched against
        match[:, 0] = _NO_MATCH
        match = torch.where(pos <= lengths.unsqueeze(1), match, torch.full_like(match, _SENTINEL))
        self.match = torch.cat([match, match.new_full((bsz, tail), _SENTINEL)], dim=1)
        self.anchor = torch.zeros(bsz, dtype=torch.long, device=src.device)  # o_0 = x_0 = BOS
        self.reached = torch.zeros_like(self.anchor)  # the last source position the output copied (--copy-anchor next)
        self.positions = torch.arange(self.match.size(1), device=src.device)
        self.slots = torch.arange(1, self.block + 1, device=src.device)
        self.back = torch.arange(self.q, device=src.device)  # _rematch: 0..q-1 tokens back
        self.powers = _BASE ** self.back
        self.keys, self.rank = self._ngram_table(self.match.long())

    def _ngram_table(self, match):
        """Once per batch, for _rematch: ``keys[b, n-1, e]``, the n-gram of ``x`` ending at ``e`` as one
        integer (its last token the lowest digit; positions before ``x_0`` the digit 0), and
        ``rank[b, n-1, e]`` = 2n + (1 if that n-gram occurs once in the row)."""
        digits = match + _DIGIT
        keys = [digits]
        for j in range(1, self.q):
            keys.append(keys[-1] + F.pad(digits[:, :-j], (j, 0)) * _BASE ** j)
        keys = torch.stack(keys, dim=1)                                             # (B, q, W)
        once = torch.stack([(k.unsqueeze(2) == k.unsqueeze(1)).sum(2) == 1 for k in keys.unbind(1)], dim=1)
        rank = 2 * (self.back + 1).view(1, -1, 1) + once.long()
        return keys, rank

    def propose(self, out, n_gen, longest=None):
        if not self.prepared:  # (anchored at BOS: re-anchored below when steps were taken without drafts)
            self._prepare()
        if self.host is not None:
            stale, self.stale = self.stale, False
            return self.host.propose(out, n_gen, stale)
        if self.stale:  # plain steps since the last draft: anchor on the output's last q-gram
            self.anchor, self.stale = self._rematch(out, n_gen), False
            self._reach(self.anchor)
        return Draft.of(self.x.gather(1, self.anchor.unsqueeze(1) + self.slots), self.ctx.pad)

    def observe(self, step: StepResult):
        if step.draft.size(1) == 0:  # a plain step (nothing was drafted): re-anchor only when drafting again
            self.stale = True
            return
        if not self.prepared:
            self._prepare()
        if self.host is not None:
            self.host.observe(step)
            return
        n_after = step.generated()
        last = step.out.gather(1, n_after.unsqueeze(1))
        # still on the copy: the verifier's token after the accepted copy is the next source token
        # (in the tail, or from a lost anchor, the sentinel never matches)
        nxt = self.anchor + step.count
        same = self.match.gather(1, nxt.unsqueeze(1)) == last
        self._reach(torch.where(self.anchor < self.lost, nxt - 1, self.reached))  # the last draft token taken
        self.anchor = torch.where(same.squeeze(1), nxt, self._rematch(step.out, n_after))
        self._reach(self.anchor)

    def _reach(self, copied: Tensor):
        """``reached`` moves on to ``copied`` where that is a source position further on."""
        self.reached = torch.where(copied < self.lost, torch.maximum(self.reached, copied), self.reached)

    def _rematch(self, out, n_gen):
        """Source index ``i`` of the unique occurrence of the output's last n-gram (n = q..1), or
        (``--copy-anchor next``) of its first occurrence after ``reached``, else ``self.lost``.  The
        output's last n tokens, n = 1..q, as one integer each are compared with every source
        n-gram's (``_ngram_table``); a hit's rank is 2n, plus 1 if that n-gram occurs once in the
        source, so the highest rank is the longest n that occurs at all, and it is odd exactly when
        that n-gram is unique (a longer n-gram occurring twice makes every shorter one ambiguous
        too: the search stops there)."""
        if not self.prepared:
            self._prepare()
        suffix = out.gather(1, (n_gen.unsqueeze(1) - self.back).clamp(min=0))  # (B, q): last token, the one before...
        key = ((suffix + _DIGIT) * self.powers).cumsum(dim=1)                  # (B, q): the last n tokens, n = 1..q
        # an n-gram needs n_gen >= n (out[:, 0] is fairseq's start symbol, EOS, which the source holds too)
        key = key.masked_fill(n_gen.unsqueeze(1) <= self.back, -1)
        hits = self.keys == key.unsqueeze(2)                                   # (B, q, W)
        best, at = torch.where(hits, self.rank, 0).flatten(1).max(dim=1)
        unique = torch.where(best.remainder(2) == 1, at.remainder(self.keys.size(2)), self.lost)
        if not self.next_anchor:
            return unique
        # the longest n's hits after ``reached``: its first one (argmax: the first of the maxima)
        longest = (best // 2 - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, hits.size(2))
        after = hits.gather(1, longest).squeeze(1) & (self.positions > self.reached.unsqueeze(1)) & (best > 0).unsqueeze(1)
        return torch.where(best.remainder(2) == 1, unique, torch.where(after.any(1), after.int().argmax(1), self.lost))

    def select_rows(self, rows):
        if not self.prepared:
            self.src, self.lengths = self.src.index_select(0, rows), self.lengths.index_select(0, rows)
            return
        if self.host is not None:
            self.host.select_rows(rows)
            return
        self.x = self.x.index_select(0, rows)
        self.match = self.match.index_select(0, rows)
        self.anchor = self.anchor.index_select(0, rows)
        self.reached = self.reached.index_select(0, rows)
        self.keys, self.rank = self.keys.index_select(0, rows), self.rank.index_select(0, rows)


class HostAnchors:
    """IAD's anchors on the host, for a device whose tensors the host reads for one operation (a
    CPU): the same drafts as the tensor path, in about 8 operations per iteration instead of 31.

    Per row: ``x`` = ``[BOS, x_1..x_n, EOS, PAD...]`` as a list (the tensor path's layout, its
    PAD tail included, so an anchor's slice never runs off the end), and ``ngrams``: every n-gram of
    ``x_1..`` (n = 1..q) -> the indices of its last token, in order."""

    def __init__(self, src: Tensor, lengths: Tensor, ctx, block: int, q: int, lost: int, width: int,
                 next_anchor: bool = True):
        self.block, self.q, self.lost, self.pad = block, q, lost, ctx.pad
        self.next_anchor = next_anchor
        self.device = src.device
        self.x, self.ngrams = [], []
        self.real = lengths.tolist()  # x_1..x_n and EOS
        for row, length in zip(src.tolist(), self.real):
            x = [ctx.bos] + [t for t in row if t != ctx.pad][:length]  # left-aligned, as the tensor path's
            self.x.append(x + [ctx.pad] * (width - len(x)))
            table = {}
            for e in range(1, len(x)):
                for n in range(1, min(q, e) + 1):
                    table.setdefault(tuple(x[e - n + 1 : e + 1]), []).append(e)
            self.ngrams.append(table)
        self.anchor = [0] * len(self.x)  # o_0 = x_0 = BOS
        self.reached = [0] * len(self.x)  # the last source position the output copied (--copy-anchor next)

    def _tails(self, out: Tensor, n: List[int]) -> List[List[int]]:
        """Each row's last ``q`` output tokens (oldest first; clamped at ``out[:, 0]`` for short rows)."""
        index = [[max(k - j, 0) for j in range(self.q - 1, -1, -1)] for k in n]
        return out.gather(1, torch.tensor(index, device=out.device)).tolist()

    def _rematch(self, b: int, tail: List[int], n: int) -> int:
        """The source index of the unique occurrence of the output's last n-gram, for the longest
        n <= q that occurs at all (as the tensor path's ranks), or (``--copy-anchor next``) of its
        first occurrence after ``reached``, else the lost anchor."""
        for m in range(min(self.q, n), 0, -1):
            ends = self.ngrams[b].get(tuple(tail[self.q - m :]))
            if ends:
                if len(ends) == 1:
                    return ends[0]
                if self.next_anchor:
                    return next((e for e in ends if e > self.reached[b]), self.lost)
                return self.lost
        return self.lost

    def _reach(self, b: int, copied: int):
        if copied < self.lost:
            self.reached[b] = max(self.reached[b], copied)

    def propose(self, out: Tensor, n_gen: Tensor, stale: bool) -> Draft:
        if stale:  # plain steps since the last draft: anchor on the output's last q-gram
            n = n_gen.tolist()
            self.anchor = [self._rematch(b, tail, k) for b, (tail, k) in enumerate(zip(self._tails(out, n), n))]
            for b, a in enumerate(self.anchor):
                self._reach(b, a)
        tokens, lengths = [], []
        for x, a in zip(self.x, self.anchor):
            draft = x[a + 1 : a + 1 + self.block]
            tokens.append(draft)
            lengths.append(draft.index(self.pad) if self.pad in draft else len(draft))
        return Draft(torch.tensor(tokens, device=self.device), torch.tensor(lengths, device=self.device))

    def observe(self, step: StepResult):
        n_after, count = step.generated().tolist(), step.count.tolist()
        for b, tail in enumerate(self._tails(step.out, n_after)):
            # still on the copy: the verifier's token after the accepted copy is the next source token
            nxt = self.anchor[b] + count[b]
            same = 1 <= nxt <= self.real[b] and self.x[b][nxt] == tail[-1]
            if self.anchor[b] < self.lost:
                self._reach(b, nxt - 1)  # the last draft token taken
            self.anchor[b] = nxt if same else self._rematch(b, tail, n_after[b])
            self._reach(b, self.anchor[b])

    def select_rows(self, rows: Tensor):
        keep = rows.tolist()
        self.x, self.ngrams, self.real, self.anchor, self.reached = (
            [values[i] for i in keep] for values in (self.x, self.ngrams, self.real, self.anchor, self.reached))

