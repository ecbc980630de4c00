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
  longest that occurs exactly once in ``x`` (choice: "the last 1..q-gram"; a longer n-gram
  occurring several times makes every shorter one ambiguous too, so the search stops there);
* while the verifier keeps agreeing with the copy (its token at the bifurcation is the source
  token too), the anchor just moves on without re-matching;
* after plain steps (no draft verified: the draft-width policy found drafts not paying) the anchor
  is not tracked; the next proposal re-anchors on the output's last q-gram as above (lossless
  either way: only the draft changes);
* the draft is capped at ``k`` = ``--block-size`` tokens per call (the paper copies the whole rest;
  pass a large ``--block-size`` for that).

Source and target must share the vocabulary; with different dictionaries the source ids are
mapped to target ids through their strings (``<unk>`` where the target lacks a piece).
"""
import torch

from fairseq_plugins.decoding.drafters.base import DRAFTERS, BlockDrafter, Draft, StepResult, block_size_of

_NO_MATCH = -1   # source-side value that never equals an output token (BOS slot)
_SENTINEL = -2   # source-side value of the trailing PAD sentinel / padding for matching


@DRAFTERS.register("input_copy", help="input-guided aggressive decoding, IAD (copies the source; --copy-ngram)")
class InputCopyDrafter(BlockDrafter):
    adaptive_block = True  # rows whose drafts keep failing stop widening the batch's verify call
    name = "input_copy"

    def __init__(self, block_size: int, ngram: int, src_to_tgt=None):
        super().__init__(block_size)
        if not 1 <= ngram <= 3:
            raise ValueError(f"--copy-ngram must be 1, 2 or 3 (got {ngram})")
        self.q = ngram
        self.src_to_tgt = src_to_tgt  # LongTensor id map, or None when the dictionaries are one

    @classmethod
    def from_config(cls, cfg, task, models=()):
        return cls(block_size_of(cfg), cfg.copy_ngram, source_to_target_map(task.source_dictionary, task.target_dictionary))

    def begin(self, ctx):
        super().begin(ctx)
        src = ctx.src_tokens
        if self.src_to_tgt is not None:
            self.src_to_tgt = self.src_to_tgt.to(src.device)
            src = torch.where(src == ctx.pad, src, self.src_to_tgt[src])
        bsz, slen = src.shape
        # left-align every source (fairseq left-pads by default) behind a BOS slot:
        # x = [BOS, x_1 .. x_n, EOS, PAD, PAD ...], n + 1 = src_lengths (incl. EOS)
        lengths = ctx.src_lengths.to(src.device)
        pos = torch.arange(slen + 2, device=src.device).unsqueeze(0)
        real = (src != ctx.pad)
        order = torch.argsort((~real).long(), dim=1, stable=True)  # real tokens first, in order
        left = src.gather(1, order)
        x = torch.full((bsz, slen + 2), ctx.pad, dtype=src.dtype, device=src.device)
        x[:, 1 : slen + 1] = left
        x[:, 0] = ctx.bos
        x = torch.where(pos <= lengths.unsqueeze(1), x, torch.full_like(x, ctx.pad))
        self.x = x                                   # draft source (PAD after EOS = sentinel)
        match = x.clone()                            # what output n-grams are matched against
        match[:, 0] = _NO_MATCH
        match = torch.where(pos <= lengths.unsqueeze(1), match, torch.full_like(match, _SENTINEL))
        self.match = match
        self.anchor = torch.zeros(bsz, dtype=torch.long, device=src.device)  # o_0 = x_0 = BOS
        self.stale = False

    def propose(self, out, n_gen, longest=None):
        if self.stale:  # plain steps since the last draft: anchor on the output's last q-gram
            self.anchor, self.stale = self._rematch(out, n_gen), False
        slots = torch.arange(1, self.block + 1, device=out.device)
        idx = (self.anchor.unsqueeze(1) + slots).clamp(max=self.x.size(1) - 1)
        draft = self.x.gather(1, idx)
        beyond = (self.anchor.unsqueeze(1) + slots) >= self.x.size(1)
        return Draft.of(draft.masked_fill(beyond | (self.anchor < 0).unsqueeze(1), self.ctx.pad), self.ctx.pad)

    def observe(self, step: StepResult):
        if step.draft.size(1) == 0:  # a plain step (nothing was drafted): re-anchor only when drafting again
            self.stale = True
            return
        n_after = step.n_before + step.count
        last = step.out.gather(1, n_after.unsqueeze(1)).squeeze(1)
        # still on the copy: the verifier's token after the accepted copy is the next source token
        nxt = self.anchor + step.count
        on_copy = (self.anchor >= 0) & (nxt < self.x.size(1))
        same = self.match.gather(1, nxt.clamp(max=self.x.size(1) - 1).unsqueeze(1)).squeeze(1) == last
        self.anchor = torch.where(on_copy & same, nxt, self._rematch(step.out, n_after))

    def _rematch(self, out, n_gen):
        """Source index ``i`` of the unique occurrence of the output's last n-gram (n = q..1), else -1."""
        bsz, width = self.match.shape
        anchor = torch.full((bsz,), -1, dtype=torch.long, device=out.device)
        decided = torch.zeros(bsz, dtype=torch.bool, device=out.device)
        for n in range(self.q, 0, -1):
            if n > width:
                continue
            # the output's last n tokens (indices n_gen-n+1 .. n_gen of out; needs n_gen >= n)
            back = torch.arange(n - 1, -1, -1, device=out.device)
            idx = (n_gen.unsqueeze(1) - back).clamp(min=0)
            suffix = out.gather(1, idx)                           # (B, n)
            windows = self.match.unfold(1, n, 1)                  # (B, width-n+1, n)
            hit = (windows == suffix.unsqueeze(1)).all(dim=2) & (n_gen >= n).unsqueeze(1)
            count = hit.sum(dim=1)
            end = hit.long().argmax(dim=1) + n - 1                # index of the n-gram's last token
            take = ~decided & (count == 1)
            anchor = torch.where(take, end, anchor)
            decided = decided | (count >= 1)
        return anchor

    def select_rows(self, rows):
        self.x = self.x.index_select(0, rows)
        self.match = self.match.index_select(0, rows)
        self.anchor = self.anchor.index_select(0, rows)


def source_to_target_map(src_dict, tgt_dict):
    """None when both dictionaries are the same list of symbols, else an id map through strings."""
    if src_dict is tgt_dict or list(src_dict.symbols) == list(tgt_dict.symbols):
        return None
    # built on the host once; begin() moves it to the sources' device
    return torch.tensor([tgt_dict.index(sym) for sym in src_dict.symbols], dtype=torch.long, device="cpu")
