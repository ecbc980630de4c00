"""Appending a call's verdict to the rows (engine step 3): each row's accepted draft tokens and the
verifier's own token, cut after an EOS and at ``max_len``, their log-probs and fairseq's running
score; and the drafter-alone verdict (``--acceptance all``: the draft is the output)."""
import torch
from torch import Tensor

from fairseq_plugins.decoding.engine_state import Rows, Run, Verdict


def take_draft(rows: Rows) -> Verdict:
    """``--acceptance all``: the drafter's draft (under fairseq's constraints, with its scores) is
    the output, every token kept up to an EOS; no verifier call."""
    draft = rows.draft
    everything = rows.n_gen.new_full((rows.n_gen.size(0),), draft.size)
    return Verdict(draft, draft.tokens, draft.scores, everything, everything)


def append(run: Run, rows: Rows, verdict: Verdict):
    """Append each row's tokens up to its first EOS; returns how many ``(B,)`` and which rows ended."""
    new, new_lp, n_gen, m = verdict.new, verdict.new_lp, rows.n_gen, verdict.new.size(1)
    width = rows.out.size(1)
    if m == 1:  # a plain greedy step
        count, ended = bounded(torch.ones_like(n_gen), new[:, 0] == run.eos, n_gen, run.max_len, rows, 1)
        if run.cache is not None and run.cache.aligned:
            longest = max(rows.lengths)
            rows.out[:, longest + 1 : longest + 2] = new
            rows.lp_out[:, longest : longest + 1] = new_lp
        else:
            rows.out.scatter_(1, n_gen.unsqueeze(1) + 1, new)
            rows.lp_out.scatter_(1, n_gen.unsqueeze(1), new_lp)
        rows.score = rows.score + new_lp[:, 0]
    else:
        fed = run.arange[:m].unsqueeze(0)
        is_eos = (new == run.eos) & (fed < verdict.kept.unsqueeze(1))
        ended = is_eos.any(dim=1)
        count = torch.where(ended, is_eos.long().argmax(dim=1) + 1, verdict.kept)
        count, ended = bounded(count, ended, n_gen, run.max_len, rows, m)
        longest = max(rows.lengths)
        if run.cache is not None and run.cache.aligned and longest + m < width:  # every row at one step
            rows.out[:, longest + 1 : longest + 1 + m] = new
            rows.lp_out[:, longest : longest + m] = new_lp
        else:
            rows.out.scatter_(1, (n_gen.unsqueeze(1) + 1 + run.arange[:m]).clamp(max=width - 1), new)
            rows.lp_out.scatter_(1, (n_gen.unsqueeze(1) + run.arange[:m]).clamp(max=width - 1), new_lp)
        if verdict.scored is not None:  # the running score breaks the verifier's ties (the drafter alone has none)
            # fairseq adds one token's log-prob at a time: the running score before the last appended
            # token is that sum over the accepted draft tokens already (same float32 adds, same order)
            last = (count - 1).unsqueeze(1)
            rows.score = (verdict.scored.running.gather(1, last) + new_lp.gather(1, last)).squeeze(1)
    rows.n_gen = n_gen + count
    return count, ended


def bounded(count: Tensor, ended: Tensor, n_gen: Tensor, max_len: int, rows: Rows, m: int):
    """No row grows past ``max_len`` + EOS, whatever the logits: fairseq's loop is bounded by
    ``range(max_len + 1)``; here a row that reaches that length ends (with finite log-probs EOS is
    forced there anyway, so this changes nothing; with NaN/-inf everywhere it stops the loop).
    Nothing to do while the host knows no row can get there (``m`` tokens at most per row)."""
    if max(rows.lengths) + m <= max_len:
        return count, ended
    count = torch.minimum(count, (max_len + 1) - n_gen)
    return count, ended | (n_gen + count > max_len)
