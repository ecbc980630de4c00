"""The draft-and-verify engine (docs/METHODS.md §2): one loop for every drafter and acceptance rule.

Per iteration, for all unfinished rows at once:

1. the drafter proposes up to ``K`` tokens per row (PAD = none; a row may propose fewer); the
   block-size policy (``block_size``: fixed, or adapted to what the drafts achieve) caps the width;
2. the verifier scores ``[last token, d_1..d_k]`` after each row's KV cache in ONE call of the lean
   decoder step (causal inside the draft, each row's logical positions), ``k`` = the widest useful
   draft of the batch, not ``K``; on a CPU its columns are projected onto the vocabulary only up
   to the last one some row uses (``_score_until_rejected``);
3. fairseq's greedy constraints are applied to the log-probs (PAD, unk penalty, no EOS before
   ``min_len``, EOS forced at ``max_len``), the acceptance rule picks ``n`` draft tokens, and the
   row is extended by ``d_1..d_n`` plus the verifier's own token at the bifurcation (Stern et al.
   §3 "accept"; GAD Eq. 7), cut after an EOS; the drafter observes the result (with the
   verifier's hidden states) and proposes the next draft;
4. one host synchronisation tells which rows finished (they leave the batch), the rows' new
   lengths and the next draft's width; the self-attention cache is cut back to each row's
   accepted length (``cache.KVCache``: per-row lengths in preallocated buffers, no recomputation).

With ``--acceptance exact`` the result equals fairseq's ``SequenceGenerator`` with ``--beam 1``
token for token (same max_len formula, including its cap by the model's max positions, same
min_len/unk/pad handling, scores accumulated the same way, and the verifier's token picked as
fairseq picks it: ``topk`` over the log-probs plus the running score, so exact ties and ties made
by adding the score break the same way).  Hypotheses are fairseq's dicts, so ``fairseq-generate``
prints and scores them as usual.

``generator.stats`` accumulates over ``generate`` calls: ``model_calls`` (decoder calls),
``iterations`` (row-iterations: one per row per call it took part in), ``accepted_tokens`` (tokens
appended, drafts + the verifier's own, i.e. Stern's accepted block sizes summed; mean accepted =
``accepted_tokens / iterations``), ``draft_accepted`` (draft tokens only), ``draft_tokens``
(draft tokens proposed), ``produced_tokens`` (hypothesis tokens incl. EOS), ``sentences``;
``oracle_model_calls`` and ``length_oracle`` when PJ/PGJ took the length from a greedy pre-run.
"""
import math
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_plugins.decoding.acceptance import AcceptanceRule, Exact, build_acceptance
from fairseq_plugins.decoding.block_size import AdaptiveBlock, FixedBlock, draft_lengths
from fairseq_plugins.decoding.drafters import DraftContext, Drafter, NoDraft, StepResult, build_drafter
from fairseq_plugins.decoding.inference import inference_generate
from fairseq_plugins.decoding.verifier import Verifier


class DraftVerifyOptionError(ValueError):
    """Generation options the draft-and-verify engine cannot honour; the message says how to fix it."""


STAT_KEYS = ("model_calls", "iterations", "accepted_tokens", "draft_accepted", "draft_tokens",
             "produced_tokens", "sentences", "oracle_model_calls")


class DraftVerifyGenerator:
    def __init__(self, models, tgt_dict, drafter: Drafter, acceptance: AcceptanceRule, *, max_len_a=0.0,
                 max_len_b=200, min_len=1, unk_penalty=0.0, len_penalty=1.0, normalize_scores=True,
                 temperature=1.0, max_len=0, jacobi_length="max", adaptive_block_size="auto"):
        if len(models) != 1:
            raise DraftVerifyOptionError(
                f"--drafter verifies with one model; got an ensemble of {len(models)} (--path a:b). Pass one checkpoint.")
        self.model = models[0]
        self.verifier = Verifier(self.model)
        self.drafter = drafter
        self.acceptance = acceptance
        self.tgt_dict = tgt_dict
        self.bos = self.eos = tgt_dict.eos()  # fairseq starts the decoder with EOS (SequenceGenerator)
        self.pad, self.unk = tgt_dict.pad(), tgt_dict.unk()
        self.vocab_size = len(tgt_dict)
        self.max_len_a, self.max_len_b = max_len_a, max_len_b
        self.min_len = min_len
        self.unk_penalty, self.len_penalty = unk_penalty, len_penalty
        self.normalize_scores = normalize_scores
        if temperature <= 0:
            raise DraftVerifyOptionError("--temperature must be > 0")
        self.temperature = temperature
        self.max_len = max_len or self.model.max_decoder_positions()
        if jacobi_length not in ("max", "greedy_oracle"):
            raise DraftVerifyOptionError("--jacobi-length must be 'max' or 'greedy_oracle'")
        self.length_oracle = jacobi_length == "greedy_oracle" and drafter.needs_target_length
        if adaptive_block_size not in ("auto", "on", "off"):
            raise DraftVerifyOptionError("--adaptive-block-size must be auto, on or off")
        adaptive = drafter.adaptive_block if adaptive_block_size == "auto" else adaptive_block_size == "on"
        probe = drafter.drafts_after_plain_steps
        # one policy for the generator's life: an adaptive one carries what it learned into the next batches
        self.policy = AdaptiveBlock(probe=probe) if adaptive else FixedBlock()
        self.lazy_verify: Optional[bool] = None  # None: on a CPU (see _lazy_columns); True/False force it
        self.reset_stats()

    # ---- stats ----
    def reset_stats(self):
        self.stats: Dict[str, float] = {k: 0 for k in STAT_KEYS}
        self.stats["length_oracle"] = False
        self.stats["drafter"] = self.drafter.name
        self.stats["acceptance"] = self.acceptance.name

    def mean_accepted(self) -> float:
        return self.stats["accepted_tokens"] / max(1, self.stats["iterations"])

    # ---- fairseq generator interface ----
    def cuda(self):
        return self

    def eval(self):
        return self

    @inference_generate
    def generate(self, models, sample, prefix_tokens: Optional[Tensor] = None, constraints=None, **kwargs):
        if prefix_tokens is not None:
            raise DraftVerifyOptionError("--drafter does not support --prefix-size; drop one of them")
        if constraints is not None:
            raise DraftVerifyOptionError("--drafter does not support --constraints; drop one of them")
        if kwargs.get("bos_token") is not None:
            raise DraftVerifyOptionError("--drafter does not support a custom bos_token")
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        src_len = src_tokens.size(1)
        max_src = self.verifier.max_source_positions()
        if max_src is not None and src_len > max_src:
            raise DraftVerifyOptionError(
                f"a source has {src_len} tokens but the model accepts at most {max_src} (--max-source-positions "
                "at training); drop such sentences with --skip-invalid-size-inputs-valid-test or shorten them")
        # as SequenceGenerator._generate: src_len is the padded batch width, capped by the model's positions
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise DraftVerifyOptionError(f"--min-len {self.min_len} exceeds the maximum length {max_len}; "
                                         "lower --min-len or raise --max-len-a/--max-len-b")
        if "src_lengths" in net_input:
            src_lengths = net_input["src_lengths"]
        else:
            src_lengths = (src_tokens.ne(self.eos) & src_tokens.ne(self.pad)).long().sum(dim=1)
        target_length = None
        if self.drafter.needs_target_length:
            if self.length_oracle:  # PJ/PGJ with a known length: a greedy pre-run, counted and timed
                calls = self.stats["model_calls"]
                greedy = self._decode(net_input, src_lengths, NoDraft(), max_len, None, count_stats=False)
                self.stats["oracle_model_calls"] += self.stats["model_calls"] - calls
                self.stats["length_oracle"] = True
                target_length = torch.tensor([len(h[0]["tokens"]) for h in greedy], device=src_tokens.device)
            else:
                target_length = src_tokens.new_full((src_tokens.size(0),), max_len + 1)
        return self._decode(net_input, src_lengths, self.drafter, max_len, target_length)

    # ---- the loop ----
    def _decode(self, net_input, src_lengths, drafter: Drafter, max_len: int, target_length, count_stats=True):
        verifier = self.verifier
        src_tokens = net_input["src_tokens"]
        device = src_tokens.device
        bsz = src_tokens.size(0)
        acceptance = self.acceptance if not isinstance(drafter, NoDraft) else Exact()
        kmax = drafter.max_draft(max_len)
        width = max_len + kmax + 2
        stats = self.stats

        cache = verifier.begin(net_input, capacity=max_len + 2 + min(kmax, 16))
        out = torch.full((bsz, width), self.pad, dtype=torch.long, device=device)
        out[:, 0] = self.bos
        lp_out = torch.zeros(bsz, width, device=device)  # log-prob of out[:, 1 + s] at index s
        score = torch.zeros(bsz, device=device)  # running score, as fairseq's scores[:, step - 1]
        n_gen = torch.zeros(bsz, dtype=torch.long, device=device)
        rows = list(range(bsz))  # original row of every current row (host side: no sync to index it)
        drafter.begin(DraftContext(src_tokens=src_tokens, src_lengths=src_lengths, max_len=max_len, width=width,
                                   target_length=target_length, bos=self.bos, eos=self.eos, pad=self.pad,
                                   encoder_out=verifier.encoder_out))
        # a decode without a drafter (a length-oracle pre-run) must not teach the width policy anything
        policy = self.policy if not isinstance(drafter, NoDraft) else FixedBlock()
        policy.begin(bsz, kmax)
        finalized: List[Optional[List[Dict]]] = [None] * bsz
        counters = torch.zeros(2, dtype=torch.long, device=device)  # draft_accepted, draft_tokens
        arange = torch.arange(width + 1, device=device)
        not_eos = torch.ones(self.vocab_size, dtype=torch.bool, device=device)
        not_eos[self.eos] = False
        lengths = [0] * bsz  # host copy of n_gen
        iteration, row_iterations = 0, 0
        if policy.expects_draft():
            draft, dlen = self._next_draft(drafter, out, n_gen)
        else:  # the prior says the first call is a plain step: do not ask the drafter
            draft, dlen = out.new_empty((bsz, 0)), None
        if draft.size(1):  # trim to the widest useful draft (one sync before the first call)
            draft = draft[:, : min(policy.width(), int(dlen.max()))]
        propose = policy.expects_draft()  # False: the next call is a plain step whatever is proposed
        while True:
            cur = n_gen.size(0)
            m = draft.size(1) + 1
            longest = max(lengths)
            if cache.aligned:  # every row at the same step: one slice, positions shared by all rows
                steps = arange[longest : longest + m]
                last = out[:, longest : longest + 1]
            else:
                steps = n_gen.unsqueeze(1) + arange[:m]  # step s predicts out[:, 1 + s]; input at position s
                last = out.gather(1, n_gen.unsqueeze(1))
            tokens = torch.cat([last, draft], dim=1) if m > 1 else last
            # positions past max_len are never accepted (EOS forced there); keep them inside the table
            positions = steps.clamp(max=max_len) if longest + m - 1 > max_len else steps
            lazy = m > 2 and self._lazy_columns(drafter, device)
            logits, hidden = verifier(cache, tokens, positions, project=None if lazy else slice(None))
            fed_draft, m_fed = draft, m  # what the call scored (the stats and the width policy count these)
            # the drafter was asked for this call's draft: the width policy learns whether it had one
            asked = policy.adaptive and dlen is not None
            offered = dlen.gt(0).long() if asked else None
            accepted = None
            if not lazy:
                lprobs = self._constrained(logits, steps, longest, max_len, iteration, not_eos)
                top, top_lprob = self._top(lprobs, self._running_scores(score, lprobs, draft))
            else:  # project onto the vocabulary only up to the columns some row still needs
                lprobs, top, top_lprob, accepted = self._score_until_rejected(
                    verifier, hidden, draft, steps, score, acceptance, longest, max_len, iteration, not_eos)
                m = lprobs.size(1)
                draft, hidden = draft[:, : m - 1], hidden[:, :m]
            if m > 1:
                if accepted is None:
                    accepted = acceptance(draft, lprobs, top)
                fed = arange[:m].unsqueeze(0)
                new = torch.where(fed < accepted.unsqueeze(1), torch.cat([draft, top[:, -1:]], dim=1), top)
                new_lp = lprobs.gather(2, new.unsqueeze(2)).squeeze(2)
                is_eos = (new == self.eos) & (fed <= accepted.unsqueeze(1))
                ended = is_eos.any(dim=1)
                count = torch.where(ended, is_eos.long().argmax(dim=1) + 1, accepted + 1)
                count, ended = self._bounded(count, ended, n_gen, max_len)
                out.scatter_(1, (n_gen.unsqueeze(1) + 1 + arange[:m]).clamp(max=width - 1), new)
                lp_out.scatter_(1, (n_gen.unsqueeze(1) + arange[:m]).clamp(max=width - 1), new_lp)
                for i in range(m):  # fairseq adds one token's log-prob at a time (float32 rounding as there)
                    score = torch.where(count > i, score + new_lp[:, i], score)
            else:  # a plain greedy step
                accepted = torch.zeros_like(n_gen)
                new, new_lp = top, top_lprob
                count, ended = self._bounded(torch.ones_like(n_gen), new[:, 0] == self.eos, n_gen, max_len)
                if cache.aligned:
                    out[:, longest + 1 : longest + 2] = new
                    lp_out[:, longest : longest + 1] = new_lp
                else:
                    out.scatter_(1, n_gen.unsqueeze(1) + 1, new)
                    lp_out.scatter_(1, n_gen.unsqueeze(1), new_lp)
                score = score + new_lp[:, 0]
            n_before = n_gen
            n_gen = n_gen + count
            drafter.observe(StepResult(draft=fed_draft, top=top, top_lprob=top_lprob, accepted=accepted, count=count,
                                       n_before=n_before, out=out, hidden=hidden))
            if m_fed > 1:
                proposed = dlen.clamp(max=fed_draft.size(1))  # draft slots each row sent
                # what the width policy learns from: real draft tokens only (Jacobi also scores its
                # PAD-initialised slots, which are never accepted and say nothing about its drafts)
                real = draft_lengths(fed_draft, self.pad) if policy.adaptive else None
                if count_stats:
                    counters += torch.stack([torch.minimum(accepted, count).sum(), proposed.sum()])
            if propose:
                draft, dlen = self._next_draft(drafter, out, n_gen)  # the next draft, before the sync
            else:  # the policy has already decided on a plain step: nothing to propose
                draft, dlen = out.new_empty((cur, 0)), None
            row_iterations += cur
            iteration += 1
            # the one host synchronisation of the iteration: finished rows, lengths, what the drafts
            # achieved (for the width policy) and the longest next draft
            parts = [ended.long(), n_gen]
            if m_fed > 1:
                parts += [real if policy.adaptive else proposed, accepted]
            if asked:
                parts.append(offered)
            if draft.size(1):
                parts.append(dlen.masked_fill(ended, 0).max().view(1))
            host = torch.cat(parts).tolist()
            done, lengths = host[:cur], host[cur : 2 * cur]
            if m_fed > 1 or asked:
                sent, got = (host[2 * cur : 3 * cur], host[3 * cur : 4 * cur]) if m_fed > 1 else ([0] * cur, [0] * cur)
                at = (4 if m_fed > 1 else 2) * cur
                policy.update(sent, got, host[at : at + cur] if asked else None)
            k_next = host[-1] if draft.size(1) else 0
            cache.commit(count, max(lengths), min(lengths) == max(lengths))  # cut back to the accepted tokens
            if any(done):
                keep = self._finalize(done, lengths, rows, out, lp_out, finalized)
                if not keep:
                    break
                keep_t = torch.tensor(keep, dtype=torch.long, device=device)
                rows = [rows[i] for i in keep]
                lengths = [lengths[i] for i in keep]
                cache.select_rows(keep_t, aligned=min(lengths) == max(lengths), max_length=max(lengths))
                drafter.select_rows(keep_t)
                policy.select_rows(keep)
                out, lp_out, n_gen, score, draft = (
                    t.index_select(0, keep_t) for t in (out, lp_out, n_gen, score, draft))
                dlen = dlen.index_select(0, keep_t) if dlen is not None else None
            k_next = min(k_next, policy.width())
            propose = policy.expects_draft()
            if not propose and policy.stopped() and not isinstance(drafter, NoDraft):
                drafter = NoDraft()  # no draft for the rest of this batch: plain steps, no drafter bookkeeping
            if draft.size(1) > k_next:
                draft = draft[:, :k_next]
        if count_stats:
            stats["model_calls"] += iteration
            stats["iterations"] += row_iterations
            produced = sum(len(h[0]["tokens"]) for h in finalized)
            stats["accepted_tokens"] += produced
            stats["produced_tokens"] += produced
            stats["sentences"] += bsz
            da, dt = counters.tolist()
            stats["draft_accepted"] += da
            stats["draft_tokens"] += dt
        else:
            stats["model_calls"] += iteration
        return finalized

    # ---- scoring the fed columns ----
    def _constrained(self, logits, steps, longest, max_len, iteration, not_eos):
        """Log-probs of fed columns whose steps are ``steps`` (``(m,)`` or ``(B, m)``), with fairseq's
        greedy constraints (sequence_generator.py: pad, unk, max_len, min_len)."""
        if self.temperature != 1.0:
            logits = logits.div_(self.temperature)
        lprobs = self.verifier.log_probs(logits)
        lprobs.masked_fill_(torch.isnan(lprobs), -math.inf)  # as fairseq (lprobs[lprobs != lprobs] = -inf): fp16 overflow
        lprobs[:, :, self.pad] = -math.inf
        if self.unk_penalty:
            lprobs[:, :, self.unk] -= self.unk_penalty
        if longest + steps.size(-1) - 1 >= max_len:  # ``longest``: the longest row's step at the first column
            lprobs.masked_fill_((steps >= max_len).unsqueeze(-1) & not_eos, -math.inf)
        if iteration < self.min_len:  # every row has >= iteration tokens
            lprobs[..., self.eos].masked_fill_(steps < self.min_len, -math.inf)
        return lprobs

    @staticmethod
    def _bounded(count: Tensor, ended: Tensor, n_gen: Tensor, max_len: int):
        """No row grows past ``max_len`` + EOS, whatever the logits: fairseq's loop is bounded by
        ``range(max_len + 1)``; here a row that reaches that length ends (with finite log-probs EOS is
        forced there anyway, so this changes nothing; with NaN/-inf everywhere it stops the loop)."""
        count = torch.minimum(count, (max_len + 1) - n_gen)
        return count, ended | (n_gen + count > max_len)

    def _top(self, lprobs, running):
        """The verifier's own token at every column, where fairseq's BeamSearch.step puts it: topk over
        lprobs + the running score before the column (``_running_scores``); and its log-prob."""
        top = (lprobs + running.unsqueeze(2)).topk(2 if self.vocab_size > 2 else 1, dim=2).indices[..., 0]
        return top, lprobs.gather(2, top.unsqueeze(2)).squeeze(2)

    def _lazy_columns(self, drafter: Drafter, device) -> bool:
        """Project the verifier's columns onto the vocabulary chunk by chunk, stopping once every row
        has rejected a draft token?  On a CPU the product with the (V, d) output matrix does not get
        cheaper per row as rows are added, as it does on a GPU (d=128, V=8K: 0.07 ms for 1 row, 0.41 ms
        for 10), and the columns after every row's first rejection are never used; each chunk costs
        a host read, free on a CPU.  Not for drafters whose next draft is the scored columns
        themselves (Jacobi)."""
        if self.lazy_verify is not None:
            return self.lazy_verify and not drafter.needs_all_columns
        return device.type == "cpu" and not drafter.needs_all_columns

    def _score_until_rejected(self, verifier, hidden, draft, steps, score, acceptance, longest, max_len, iteration,
                              not_eos):
        """Score columns 0..1, then 2..3, 4..7, ... of the fed ``[last, d_1..d_{m-1}]`` until every row
        has a rejected draft token among them (acceptance rules are prefix rules: a row's accepted
        length is final once a column rejects).  Returns lprobs/top/top_lprob of the first ``m'``
        columns, ``m'`` = the longest accepted prefix + 1 (the columns any row uses), which equal
        the full call's (each column's log-probs depend on that column only; the running score only
        on earlier columns), and the accepted lengths (None when every column was scored: the
        caller's acceptance call decides)."""
        m = hidden.size(1)
        lprobs_parts, top_parts, top_lp_parts = [], [], []
        b, before = 0, score  # ``before``: the running score before column ``b``
        while True:
            a, b = b, min(m, max(2, 2 * b))
            lp = self._constrained(verifier.project(hidden[:, a:b]), steps[..., a:b], longest + a, max_len,
                                   iteration, not_eos)
            running = self._running_scores(before, lp, draft[:, a:b])  # (B, b - a [+ 1: before column b])
            top, top_lp = self._top(lp, running[:, : b - a])
            lprobs_parts.append(lp), top_parts.append(top), top_lp_parts.append(top_lp)
            before = running[:, -1]
            lprobs, top, top_lp = (t[0] if len(t) == 1 else torch.cat(t, dim=1)
                                   for t in (lprobs_parts, top_parts, top_lp_parts))
            if b == m:
                return lprobs, top, top_lp, None
            accepted = acceptance(draft[:, :b], lprobs, top)
            longest_accepted = int(accepted.max())  # a host read per chunk
            if longest_accepted < b:  # every row rejected within the scored columns
                used = longest_accepted + 1
                return lprobs[:, :used], top[:, :used], top_lp[:, :used], accepted

    @staticmethod
    def _next_draft(drafter: Drafter, out: Tensor, n_gen: Tensor):
        """The drafter's proposal for every row and how many of its slots are worth scoring."""
        draft = drafter.propose(out, n_gen)
        if draft.size(1) == 0:
            return draft, n_gen.new_zeros(n_gen.size(0))
        return draft, drafter.lengths(draft)

    @staticmethod
    def _running_scores(score: Tensor, lprobs: Tensor, draft: Tensor) -> Tensor:
        """fairseq's running score before each fed position ``(B, m)``: the row's score, then the
        draft tokens' log-probs added one at a time (a draft token counts only while accepted,
        and where one is rejected the later positions are not used)."""
        if draft.size(1) == 0:
            return score.unsqueeze(1)
        lp = lprobs[:, : draft.size(1)].gather(2, draft.unsqueeze(2)).squeeze(2)
        lp = lp.masked_fill(~torch.isfinite(lp), 0.0)  # past an inadmissible draft token only ties matter, not sums
        running = [score]
        for i in range(draft.size(1)):
            running.append(running[-1] + lp[:, i])
        return torch.stack(running, dim=1)

    def _finalize(self, done: List[int], lengths: List[int], rows: List[int], out: Tensor, lp_out: Tensor,
                  finalized: List[Optional[List[Dict]]]) -> List[int]:
        """Write the hypotheses of the rows that ended (``done``, host list) into ``finalized`` at their
        original positions; returns the indices of the rows that go on."""
        for i, d in enumerate(done):
            if d:
                finalized[rows[i]] = [self._hypothesis(out[i], lp_out[i], lengths[i])]
        return [i for i, d in enumerate(done) if not d]

    def _hypothesis(self, out_row: Tensor, lp_row: Tensor, n: int) -> Dict:
        tokens = out_row[1 : n + 1].clone()
        # as SequenceGenerator: cumulative scores, positional = their differences, normalised by length
        cum = lp_row[:n].cumsum(dim=0)
        pos = cum.clone()
        pos[1:] = cum[1:] - cum[:-1]
        score = cum[-1].clone()
        if self.normalize_scores:
            score = score / (n ** self.len_penalty)
        return {"tokens": tokens, "score": score, "attention": None, "alignment": None, "positional_scores": pos}


def _generation_option(args, name, default):
    value = getattr(args, name, default)
    return default if value is None else value


def build_draft_verify_generator(task, models, args):
    """``FastTranslationTask.build_generator`` with ``--drafter``: the engine with the task's drafter/rule."""
    cfg = task.cfg
    beam = _generation_option(args, "beam", 1)
    if beam != 1:
        raise DraftVerifyOptionError(
            f"--drafter decodes greedily and needs --beam 1 (got --beam {beam}); drop --drafter for beam search")
    for name, bad, hint in (("sampling", True, "--sampling"), ("match_source_len", True, "--match-source-len")):
        if _generation_option(args, name, False) == bad:
            raise DraftVerifyOptionError(f"--drafter does not support {hint}; drop one of them")
    if _generation_option(args, "no_repeat_ngram_size", 0) > 0:
        raise DraftVerifyOptionError("--drafter does not support --no-repeat-ngram-size; drop one of them")
    if _generation_option(args, "diverse_beam_groups", -1) > 1 or _generation_option(args, "diversity_rate", -1) > 0:
        raise DraftVerifyOptionError("--drafter does not support diverse beam search; drop one of them")
    if _generation_option(args, "prefix_size", 0) > 0:
        raise DraftVerifyOptionError("--drafter does not support --prefix-size; drop one of them")
    if _generation_option(args, "print_alignment", None):
        raise DraftVerifyOptionError("--drafter produces no alignments; drop --print-alignment")
    drafter = build_drafter(cfg, task, models)
    acceptance = build_acceptance(cfg)
    generator_cls = DraftVerifyGenerator
    if acceptance.name == "all":  # the drafter alone (GAD's "NAR drafter" row): no verification
        from fairseq_plugins.decoding.drafter_only import DrafterOnlyGenerator as generator_cls
    return generator_cls(
        models, task.target_dictionary, drafter, acceptance,
        max_len_a=_generation_option(args, "max_len_a", 0.0), max_len_b=_generation_option(args, "max_len_b", 200),
        min_len=_generation_option(args, "min_len", 1), unk_penalty=_generation_option(args, "unkpen", 0.0),
        len_penalty=_generation_option(args, "lenpen", 1.0),
        normalize_scores=not _generation_option(args, "unnormalized", False),
        temperature=_generation_option(args, "temperature", 1.0), jacobi_length=cfg.jacobi_length,
        adaptive_block_size=getattr(cfg, "adaptive_block_size", "auto"),
    )
