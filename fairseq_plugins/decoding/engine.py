"""The draft-and-verify engine (docs/METHODS.md §2): one loop for every drafter and acceptance rule.

Per iteration, for all unfinished rows at once:

1. the drafter proposes up to ``K`` tokens per row (PAD = none; a row may propose fewer); the
   block-size policy (``width_policy``: fixed, or adapted to what the drafts achieve) caps the width;
2. the verifier scores ``[last token, d_1..d_k]`` after each row's KV cache in ONE call of the lean
   decoder step (causal inside the draft, each row's logical positions), ``k`` = the widest useful
   draft of the batch, not ``K``; on a CPU its columns are projected onto the vocabulary only up
   to the last one some row uses (``scoring.ColumnScorer.until_rejected``);
3. fairseq's greedy constraints are applied to the log-probs (PAD, unk penalty, no EOS before
   ``min_len``, EOS forced at ``max_len``), the acceptance rule picks ``n`` draft tokens, and the
   row is extended by ``d_1..d_n`` plus the verifier's own token at the bifurcation (Stern et al.
   §3 "accept"; GAD Eq. 7), cut after an EOS; the drafter observes the result (with the
   verifier's hidden states) and proposes the next draft;
4. one host synchronisation (:class:`Synced`) tells which rows finished (they leave the batch),
   the rows' new lengths and the next draft's width; the self-attention cache is cut back to each
   row's accepted length (``cache.KVCache``: per-row lengths in preallocated buffers, no
   recomputation).

In code, an iteration is ``_verify`` (or, with ``--acceptance all``, ``_take_draft``: the drafter
alone, no verifier call), ``_append``, ``_observe``, ``_propose``, ``_sync``, ``_learn``,
``_drop_finished`` and ``_next_call``, over the unfinished rows (:class:`Rows`) and what the batch
shares (:class:`Run`).

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
(draft tokens proposed), ``drafted_iterations`` (the row-iterations that verified a draft token: the
mean accepted of those is ``1 + draft_accepted / drafted_iterations``), ``produced_tokens``
(hypothesis tokens incl. EOS), ``sentences``;
``oracle_model_calls`` and ``length_oracle`` when PJ/PGJ took the length from a greedy pre-run.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_plugins.decoding.acceptance import AcceptanceRule, Exact, build_acceptance
from fairseq_plugins.decoding.width_policy import AdaptiveBlock, WidthPolicy, draft_lengths
from fairseq_plugins.decoding.cache import KVCache
from fairseq_plugins.decoding.drafters import Draft, DraftContext, Drafter, NoDraft, StepResult, build_drafter
from fairseq_plugins.decoding.generation_options import GenerationOptionError
from fairseq_plugins.decoding.hypotheses import from_log_probs
from fairseq_plugins.decoding.inference import inference_generate
from fairseq_plugins.decoding.iteration_cost import device_clock, host_reads_free
from fairseq_plugins.decoding.logits_processors import logits_processors
from fairseq_plugins.decoding.options import GenerationOptions
from fairseq_plugins.decoding.report import mean_accepted
from fairseq_plugins.decoding.scoring import Columns, ColumnScorer, Scored
from fairseq_plugins.decoding.verifier import Verifier

logger = logging.getLogger(__name__)


class DraftVerifyOptionError(GenerationOptionError):
    """Generation options the draft-and-verify engine cannot honour; the message says how to fix it."""


STAT_KEYS = ("model_calls", "iterations", "accepted_tokens", "draft_accepted", "draft_tokens", "drafted_iterations",
             "produced_tokens", "sentences", "oracle_model_calls")


@dataclass
class Rows:
    """The unfinished rows of a batch: per-row tensors and their host bookkeeping."""

    out: Tensor         # (B, W) BOS, then the tokens generated so far
    lp_out: Tensor      # (B, W) log-prob of out[:, 1 + s] at index s
    n_gen: Tensor       # (B,) tokens generated
    score: Tensor       # (B,) running score, as fairseq's scores[:, step - 1]
    draft: Draft        # what the next call verifies
    ids: List[int]      # original row of every row (host side: no sync to index it)
    lengths: List[int]  # host copy of n_gen, as of the last sync

    def select(self, keep: Tensor) -> None:
        self.out, self.lp_out, self.n_gen, self.score = (
            t.index_select(0, keep) for t in (self.out, self.lp_out, self.n_gen, self.score))
        self.draft = self.draft.select(keep)


@dataclass
class Run:
    """What the steps of one batch share besides the rows."""

    drafter: Drafter
    acceptance: AcceptanceRule
    policy: WidthPolicy
    cache: Optional[KVCache]  # None: the drafter alone, no verifier call
    max_len: int
    arange: Tensor
    finalized: List[Optional[List[Dict]]]
    count_stats: bool
    iteration: int = 0
    row_iterations: int = 0
    propose: bool = True      # ask the drafter for the next call's draft (the width policy's decision)
    drafting: bool = True     # False once the policy will never draft again in this batch
    host_reads: bool = False  # the host reads the batch's tensors for one operation (iteration_cost.host_reads_free)
    draft_accepted: int = 0   # draft tokens appended (stats, counted on the host from the synchronisation)
    draft_tokens: int = 0     # draft tokens proposed
    drafted_rows: int = 0     # row-iterations that verified at least one draft token
    proposes_after_sync: bool = field(init=False)  # the drafter is asked after the sync, given the host's ``longest``

    def __post_init__(self):
        self.proposes_after_sync = self.drafter.proposes_after_sync  # the one read of the drafter's trait


@dataclass
class Verdict:
    """One call's outcome for every row, before it is appended."""

    fed: Draft                # the draft the call scored (the stats and the width policy count it)
    new: Tensor               # (B, m) tokens to append: accepted draft tokens, then the verifier's own
    new_lp: Tensor            # (B, m) their log-probs
    kept: Optional[Tensor]    # (B,) how many of ``new`` go in before the cut at EOS (None: one, a plain step)
    accepted: Tensor          # (B,) draft tokens accepted
    scored: Optional[Scored] = None   # the verifier's columns (None: the drafter alone)
    hidden: Optional[Tensor] = None


@dataclass
class Synced:
    """The one host synchronisation of an iteration, named."""

    done: List[int]                      # 1 where the row ended
    lengths: List[int]                   # n_gen
    sent: Optional[List[int]] = None     # draft slots the width policy counts as sent (when a draft was fed)
    got: Optional[List[int]] = None      # draft tokens accepted (when a draft was fed)
    proposed: Optional[List[int]] = None  # draft slots each row sent, where the stats count others than ``sent``
    offered: Optional[List[int]] = None  # whether the drafter had a draft when asked (adaptive policy)
    next_width: Optional[int] = None     # the longest next draft of the rows that go on


class DraftVerifyGenerator:
    def __init__(self, models, tgt_dict, drafter: Drafter, acceptance: AcceptanceRule, *,
                 options: Optional[GenerationOptions] = None, adaptive_block_size="auto"):
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
        self.options = options = options if options is not None else GenerationOptions()  # (--beam: not read)
        self.processors = logits_processors(options, tgt_dict)
        self.scorer = ColumnScorer(self.verifier, self.processors, options.temperature, self.vocab_size)
        if adaptive_block_size not in ("auto", "on", "off"):
            raise DraftVerifyOptionError("--adaptive-block-size must be auto, on or off")
        if not acceptance.needs_verifier:
            self._check_drafter_alone(drafter)
        self.adaptive_block_size = adaptive_block_size
        self.policy = self._policy_for(drafter)
        # --drafter auto: its candidates take turns on the first batches, each with its own width policy
        per_batch = drafter.per_batch_choice()
        self.choice = per_batch.choice if per_batch is not None else None
        self.candidates = per_batch.candidates if per_batch is not None else {}
        self.policies = {name: self._policy_for(d) for name, d in self.candidates.items()}
        self.lazy_verify: Optional[bool] = None  # None: on a CPU (see _lazy_columns); True/False force it
        # None: by the device (iteration_cost.host_reads_free); False: read nothing but the one synchronisation
        # per iteration, as on a GPU (tests check that path on a CPU)
        self.host_reads: Optional[bool] = None
        self.reset_stats()

    def _policy_for(self, drafter: Drafter) -> WidthPolicy:
        """One width policy for the generator's life: an adaptive one carries what it learned (and the
        costs it timed) into the next batches."""
        option = self.adaptive_block_size
        # auto: only where acceptance is exact: a timed width would make a lossy rule's output depend on the clock
        adaptive = (drafter.adaptive_block and isinstance(self.acceptance, Exact)) if option == "auto" else option == "on"
        adaptive = adaptive and self.acceptance.needs_verifier  # the drafter alone drafts every call
        return AdaptiveBlock(probe=drafter.drafts_after_plain_steps) if adaptive else WidthPolicy()

    def _check_drafter_alone(self, drafter: Drafter):
        """``--acceptance all``: the drafter's drafts are the output (GAD's "NAR drafter" row)."""
        if not drafter.standalone:
            raise DraftVerifyOptionError(
                f"--acceptance all decodes with the drafter alone, but --drafter {drafter.name} drafts from the "
                "verifier's own predictions; use it with a drafter that has its own model (--drafter nar)")
        if self.options.unk_penalty:
            raise DraftVerifyOptionError("--acceptance all (the drafter alone) does not support --unkpen; drop it")
        if self.options.temperature != 1.0:
            raise DraftVerifyOptionError("--acceptance all (the drafter alone) does not support --temperature")

    # ---- stats ----
    def reset_stats(self):
        self.stats: Dict[str, float] = {k: 0 for k in STAT_KEYS}
        self.stats["length_oracle"] = False
        self.stats["drafter"] = self.drafter.name
        self.stats["acceptance"] = self.acceptance.name

    def mean_accepted(self) -> float:
        return mean_accepted(self.stats)

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
        max_len = self.options.max_len(src_len, self.model.max_decoder_positions())
        if "src_lengths" in net_input:
            src_lengths = net_input["src_lengths"]
        else:
            src_lengths = (src_tokens.ne(self.eos) & src_tokens.ne(self.pad)).long().sum(dim=1)
        if self.choice is None:
            return self._generate(net_input, src_lengths, max_len, self.drafter, self.policy)
        name = self.choice.next(src_len)  # --drafter auto: this batch's candidate, timed as a whole
        clock = device_clock(src_tokens.device)
        start = clock()
        finalized = self._generate(net_input, src_lengths, max_len, self.candidates[name], self.policies[name])
        self.choice.record(name, clock() - start, sum(len(h[0]["tokens"]) for h in finalized))
        choosing = "choosing" if self.choice.last is None else f"{self.choice.last}, trying again on longer sources"
        self.stats["drafter"] = f"auto ({self.choice.chosen or choosing})"
        self.stats["drafter_choice"] = self.choice.summary()
        return finalized

    def _generate(self, net_input, src_lengths, max_len: int, drafter: Drafter, policy: WidthPolicy):
        src_tokens = net_input["src_tokens"]
        target_length = None
        if drafter.target_length is not None:
            if drafter.target_length == "greedy_oracle":  # PJ/PGJ with a known length: a greedy pre-run, counted and timed
                calls = self.stats["model_calls"]
                # no drafter, and a pre-run must not teach the width policy anything
                greedy = self._decode(net_input, src_lengths, max_len, None, NoDraft(), Exact(), WidthPolicy(),
                                      count_stats=False)
                self.stats["oracle_model_calls"] += self.stats["model_calls"] - calls
                self.stats["length_oracle"] = True
                target_length = torch.tensor([len(h[0]["tokens"]) for h in greedy], device=src_tokens.device)
            else:
                target_length = src_tokens.new_full((src_tokens.size(0),), max_len + 1)
        return self._decode(net_input, src_lengths, max_len, target_length, drafter, self.acceptance, policy)

    # ---- the loop ----
    def _decode(self, net_input, src_lengths, max_len: int, target_length, drafter: Drafter,
                acceptance: AcceptanceRule, policy: WidthPolicy, count_stats=True):
        run, rows = self._begin(net_input, src_lengths, max_len, target_length, drafter, acceptance, policy,
                                count_stats)
        while True:
            verdict = self._verify(run, rows) if run.cache is not None else self._take_draft(rows)
            n_before = rows.n_gen
            count, ended = self._append(run, rows, verdict)
            self._observe(run, rows, verdict, count, n_before)
            sent, proposed = self._count_drafts(run, verdict)
            if not run.proposes_after_sync:
                rows.draft = self._propose(run, rows)  # the next draft, before the sync: its width rides along
            synced = self._sync(run, rows, verdict, ended, sent, proposed)
            self._learn(run, rows, synced)
            if run.cache is not None:  # cut back to the accepted tokens
                run.cache.commit(count, max(synced.lengths), min(synced.lengths) == max(synced.lengths))
            rows.lengths = synced.lengths
            if any(synced.done) and not self._drop_finished(run, rows, synced.done, ended):
                break
            self._next_call(run, rows, synced)
        self._count_batch(run, src_lengths.size(0))
        return run.finalized

    def _begin(self, net_input, src_lengths, max_len, target_length, drafter, acceptance, policy, count_stats):
        src_tokens = net_input["src_tokens"]
        device = src_tokens.device
        bsz = src_tokens.size(0)
        kmax = drafter.max_draft(max_len)
        width = max_len + kmax + 2
        alone = not acceptance.needs_verifier
        reads = host_reads_free(device) if self.host_reads is None else self.host_reads
        cache = None if alone else self.verifier.begin(net_input, capacity=max_len + 2 + min(kmax, 16))
        out = torch.full((bsz, width), self.pad, dtype=torch.long, device=device)
        out[:, 0] = self.bos
        n_gen = torch.zeros(bsz, dtype=torch.long, device=device)
        rows = Rows(out, torch.zeros(bsz, width, device=device), n_gen, torch.zeros(bsz, device=device),
                    Draft.none(n_gen, asked=False), list(range(bsz)), [0] * bsz)
        drafter.begin(DraftContext(src_tokens=src_tokens, src_lengths=src_lengths, max_len=max_len, width=width,
                                   target_length=target_length, bos=self.bos, eos=self.eos, pad=self.pad,
                                   final=alone, constraints=self.processors,
                                   encoder_out=None if alone else self.verifier.encoder_out,
                                   vocab_projection=None if alone else self.verifier.step.vocab_projection,
                                   host_reads=reads))
        policy.begin(bsz, kmax, device_clock(device))
        run = Run(drafter, acceptance, policy, cache, max_len, torch.arange(width + 1, device=device), [None] * bsz,
                  count_stats, propose=policy.expects_draft(), host_reads=reads)
        if run.proposes_after_sync:
            rows.draft = self._sized_draft(run, rows)
        else:
            # a prior that does not pay: the first call is a plain step, its draft not even asked for
            rows.draft = self._propose(run, rows)
            if rows.draft.size:  # trim to the widest useful draft (one sync before the first call, unless known)
                known = rows.draft.width if rows.draft.width is not None else int(rows.draft.lengths.max())
                rows.draft = rows.draft.trim(min(policy.width(), known))
        run.propose = policy.expects_draft()  # False: the next call is a plain step whatever is proposed
        return run, rows

    def _verify(self, run: Run, rows: Rows) -> Verdict:
        """One verifier call over ``[last token, draft]``; the verifier's tokens and the accepted lengths."""
        draft, max_len = rows.draft, run.max_len
        m = draft.size + 1
        longest = max(rows.lengths)
        if run.cache.aligned:  # every row at the same step: one slice, positions shared by all rows
            steps = run.arange[longest : longest + m]
            last = rows.out[:, longest : longest + 1]
        else:
            steps = rows.n_gen.unsqueeze(1) + run.arange[:m]  # step s predicts out[:, 1 + s]; input at position s
            last = rows.out.gather(1, rows.n_gen.unsqueeze(1))
        tokens = torch.cat([last, draft.tokens], dim=1) if m > 1 else last
        # positions past max_len are never accepted (EOS forced there); keep them inside the table
        positions = steps.clamp(max=max_len) if longest + m - 1 > max_len else steps
        lazy = m > 2 and self._lazy_columns(run.drafter, run.host_reads)
        logits, hidden = self.verifier(run.cache, tokens, positions, project=None if lazy else slice(None))
        cols = Columns(steps, max_len, min_step=run.iteration, first_max=longest)  # every row has >= iteration tokens
        if lazy:  # project onto the vocabulary only up to the columns some row still needs
            scored = self.scorer.until_rejected(hidden, cols, rows.score, draft.tokens, run.acceptance, run.host_reads)
            hidden = hidden[:, : scored.top.size(1)]
        else:
            scored = self.scorer.all_columns(logits, cols, rows.score, draft.tokens, run.acceptance, run.host_reads)
        used = scored.top.size(1)  # the columns any row uses
        accepted, top = scored.accepted, scored.top
        if used == 1:  # a plain greedy step: one token per row, nothing to cut
            return Verdict(draft, top, scored.top_lprob, None, accepted, scored, hidden)
        if run.acceptance.takes_verifier_tokens:  # the accepted draft tokens are the verifier's: take its columns
            return Verdict(draft, top, scored.top_lprob, accepted + 1, accepted, scored, hidden)
        fed = run.arange[:used].unsqueeze(0)
        new = torch.where(fed < accepted.unsqueeze(1), torch.cat([draft.tokens[:, : used - 1], top[:, -1:]], 1), top)
        new_lp = scored.lprobs.gather(2, new.unsqueeze(2)).squeeze(2)
        return Verdict(draft, new, new_lp, accepted + 1, accepted, scored, hidden)

    @staticmethod
    def _take_draft(rows: Rows) -> Verdict:
        """``--acceptance all``: the drafter's draft (under fairseq's constraints, with its scores) is
        the output, every token kept up to an EOS; no verifier call."""
        draft = rows.draft
        everything = rows.n_gen.new_full((rows.n_gen.size(0),), draft.size)
        return Verdict(draft, draft.tokens, draft.scores, everything, everything)

    def _append(self, run: Run, rows: Rows, verdict: Verdict):
        """Append each row's tokens up to its first EOS; returns how many ``(B,)`` and which rows ended."""
        new, new_lp, n_gen, m = verdict.new, verdict.new_lp, rows.n_gen, verdict.new.size(1)
        width = rows.out.size(1)
        if m == 1:  # a plain greedy step
            count, ended = self._bounded(torch.ones_like(n_gen), new[:, 0] == self.eos, n_gen, run.max_len, rows, 1)
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
            is_eos = (new == self.eos) & (fed < verdict.kept.unsqueeze(1))
            ended = is_eos.any(dim=1)
            count = torch.where(ended, is_eos.long().argmax(dim=1) + 1, verdict.kept)
            count, ended = self._bounded(count, ended, n_gen, run.max_len, rows, m)
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

    @staticmethod
    def _bounded(count: Tensor, ended: Tensor, n_gen: Tensor, max_len: int, rows: Rows, m: int):
        """No row grows past ``max_len`` + EOS, whatever the logits: fairseq's loop is bounded by
        ``range(max_len + 1)``; here a row that reaches that length ends (with finite log-probs EOS is
        forced there anyway, so this changes nothing; with NaN/-inf everywhere it stops the loop).
        Nothing to do while the host knows no row can get there (``m`` tokens at most per row)."""
        if max(rows.lengths) + m <= max_len:
            return count, ended
        count = torch.minimum(count, (max_len + 1) - n_gen)
        return count, ended | (n_gen + count > max_len)

    @staticmethod
    def _observe(run: Run, rows: Rows, verdict: Verdict, count: Tensor, n_before: Tensor):
        """The drafter sees what the verifier said (the drafter alone has no verifier to hear)."""
        if verdict.scored is None or not run.drafting:
            return
        run.drafter.observe(StepResult(draft=verdict.fed.tokens, top=verdict.scored.top,
                                       top_lprob=verdict.scored.top_lprob, accepted=verdict.accepted, count=count,
                                       n_before=n_before, out=rows.out, hidden=verdict.hidden, n_after=rows.n_gen))

    def _count_drafts(self, run: Run, verdict: Verdict):
        """``(sent, proposed)`` ``(B,)`` for the synchronisation, or ``(None, None)`` when no draft
        was fed: ``sent``, the slots the width policy learns from, real draft tokens only (Jacobi
        also scores its PAD-initialised slots, which are never accepted and say nothing about its
        drafts); ``proposed``, the slots each row sent, for the stats, where they differ from
        ``sent`` (else None).  The stats are summed on the host (``_learn``)."""
        fed = verdict.fed
        if fed.size == 0:
            return None, None
        proposed = fed.lengths.clamp(max=fed.size)  # draft slots each row sent
        if not run.policy.adaptive:
            return proposed, None
        return draft_lengths(fed.tokens, self.pad), (proposed if run.count_stats else None)

    @staticmethod
    def _propose(run: Run, rows: Rows, wanted: Optional[bool] = None) -> Draft:
        """The drafter's draft for the next call, when the policy wants one (``wanted``, else
        ``run.propose``: decided an iteration ahead, for a drafter that proposes before the sync)."""
        if not (run.propose if wanted is None else wanted):  # the policy has decided on a plain step: nothing to propose
            return Draft.none(rows.n_gen, asked=False)
        if not run.drafting:  # asked, but a drafter that stopped has nothing to offer (the policy learns so)
            return Draft.none(rows.n_gen)
        longest = max(rows.lengths) if run.proposes_after_sync else None  # host lengths are fresh then
        run.policy.asked()
        return run.drafter.propose(rows.out, rows.n_gen, longest=longest)

    @staticmethod
    def _sync(run: Run, rows: Rows, verdict: Verdict, ended: Tensor, sent: Optional[Tensor],
              proposed: Optional[Tensor] = None) -> Synced:
        """The one host synchronisation of the iteration: finished rows, lengths, what the drafts
        achieved (for the width policy) and the longest next draft."""
        parts = {"done": ended.long(), "lengths": rows.n_gen}
        if sent is not None:
            parts["sent"], parts["got"] = sent, verdict.accepted
        if proposed is not None:
            parts["proposed"] = proposed
        if run.policy.adaptive and verdict.fed.asked:  # the drafter was asked: did it have a draft?
            parts["offered"] = verdict.fed.lengths.gt(0).long()
        if rows.draft.size and rows.draft.width is None:
            parts["next_width"] = rows.draft.lengths.masked_fill(ended, 0).max().view(1)
        host = torch.cat(list(parts.values())).tolist()
        read, at = {}, 0
        for name, part in parts.items():
            read[name], at = host[at : at + part.numel()], at + part.numel()
        if "next_width" in read:
            read["next_width"] = read["next_width"][0]
        # timed before update() (in _learn), so that a probe's verdict prices its width with its own timing in the fit
        run.policy.synced(verdict.fed.size)
        return Synced(**read)

    @staticmethod
    def _learn(run: Run, rows: Rows, synced: Synced):
        """The width policy learns what this call's draft achieved; the batch counts the call and,
        for the stats, the draft tokens proposed and appended (``rows.lengths``: before this call)."""
        if synced.got is not None and run.count_stats:
            drafts = synced.proposed if synced.proposed is not None else synced.sent
            run.draft_tokens += sum(drafts)
            run.drafted_rows += sum(1 for n in drafts if n > 0)
            # an accepted draft token counts where it was appended (not cut at an EOS or the length limit)
            run.draft_accepted += sum(min(got, after - before)
                                      for got, after, before in zip(synced.got, synced.lengths, rows.lengths))
        if synced.sent is not None or synced.offered is not None:
            zeros = [0] * len(synced.done)
            run.policy.update(synced.sent or zeros, synced.got or zeros, synced.offered)
        run.row_iterations += len(synced.done)
        run.iteration += 1

    def _drop_finished(self, run: Run, rows: Rows, done: List[int], ended: Tensor) -> bool:
        """Finalize the rows that ended and drop them from the batch; False when none is left."""
        for i, d in enumerate(done):
            if d:
                run.finalized[rows.ids[i]] = [self._hypothesis(rows.out[i], rows.lp_out[i], rows.lengths[i],
                                                               run.max_len)]
        keep = [i for i, d in enumerate(done) if not d]
        if not keep:
            return False
        # the rows that go on, in order, found on the device (a stable sort puts them first): no host copy
        keep_t = torch.argsort(ended.long(), stable=True)[: len(keep)]
        rows.ids = [rows.ids[i] for i in keep]
        rows.lengths = [rows.lengths[i] for i in keep]
        if run.cache is not None:
            run.cache.select_rows(keep_t, aligned=min(rows.lengths) == max(rows.lengths), max_length=max(rows.lengths))
        if run.drafting:
            run.drafter.select_rows(keep_t)
        run.policy.select_rows(keep)
        rows.select(keep_t)
        return True

    def _next_call(self, run: Run, rows: Rows, synced: Synced):
        """The next call's draft, trimmed to the policy's width (a drafter that proposes after the
        sync is asked now, once the width is known); the policy decides whether the call after it
        is asked for a draft."""
        if run.proposes_after_sync:
            rows.draft = self._sized_draft(run, rows)
        else:
            known = rows.draft.width if rows.draft.width is not None else synced.next_width
            rows.draft = rows.draft.trim(min(known or 0, run.policy.width()))
        run.propose = run.policy.expects_draft()
        if not run.propose and run.policy.stopped():
            run.drafting = False  # no draft for the rest of this batch: plain steps, no drafter bookkeeping

    def _sized_draft(self, run: Run, rows: Rows) -> Draft:
        """A drafter that proposes after the sync (GAD) is asked for the next call's draft only when
        the policy's width for it is known and not 0: asked an iteration ahead, as the others are,
        it drafted for nothing after every probe (the width fell back to 0 once the probe's result
        was learnt: ~2.5 plain steps wasted per probe, GAD's drafter catching up on the prefix)."""
        width = run.policy.width()
        return self._propose(run, rows, wanted=width > 0).trim(width)

    def _count_batch(self, run: Run, bsz: int):
        stats = self.stats
        stats["model_calls"] += run.iteration
        if not run.count_stats:
            return
        stats["iterations"] += run.row_iterations
        produced = sum(len(h[0]["tokens"]) for h in run.finalized)
        stats["accepted_tokens"] += produced
        stats["produced_tokens"] += produced
        stats["sentences"] += bsz
        stats["draft_accepted"] += run.draft_accepted
        stats["draft_tokens"] += run.draft_tokens
        stats["drafted_iterations"] += run.drafted_rows

    def _lazy_columns(self, drafter: Drafter, host_reads: bool) -> bool:
        """Project the verifier's columns onto the vocabulary chunk by chunk, stopping once every row
        has rejected a draft token?  Only where the host reads for free (a CPU) and a product with the
        (V, d) output matrix costs about as much per row as rows are added (MKL's GEMM: d=128, V=8K,
        55 us for 1 row, 278 for 10): the columns after every row's first rejection are never used
        and each chunk's host read is free there.  Not where a packed kernel makes wide products
        cheap (``projection``: 104 us for 10 rows; projecting every column at once was 8% faster over
        300 typo sentences), not on a GPU, and not for drafters whose next draft is the scored
        columns themselves (Jacobi)."""
        if drafter.needs_all_columns:
            return False
        if self.lazy_verify is not None:
            return self.lazy_verify
        return host_reads and not self.verifier.wide_projection_is_cheap

    def _hypothesis(self, out_row: Tensor, lp_row: Tensor, n: int, max_len: int) -> Dict:
        tokens = out_row[1 : n + 1].clone()
        if n > max_len:  # stopped at the length limit: EOS last, as fairseq's finalize writes it (with finite
            tokens[-1] = self.eos  # log-probs it was chosen there; with -inf everywhere, even EOS's, it was not)
        return from_log_probs(tokens, lp_row[:n], self.options)  # as SequenceGenerator


def build_draft_verify_generator(task, models, args, fairseq_generator=None):
    """``FastTranslationTask.build_generator`` with ``--drafter``: the engine with the task's
    drafter/rule; the generation options as ``generation_options`` says (refused with a message, or
    ``fairseq_generator()`` with a log line where the engine falls back)."""
    cfg = task.cfg
    options = GenerationOptions.from_args(args, "engine", DraftVerifyOptionError)
    reason = options.fallback
    if reason is not None:
        if fairseq_generator is None:
            raise DraftVerifyOptionError(f"--drafter does not support {reason}; drop one of them")
        logger.info(f"draft and verify: fairseq's generator decodes, the engine does not support {reason}; "
                    "--drafter and --acceptance are not used")
        return fairseq_generator()
    drafter = build_drafter(cfg, task, models)
    acceptance = build_acceptance(cfg)
    return DraftVerifyGenerator(models, task.target_dictionary, drafter, acceptance, options=options,
                                adaptive_block_size=getattr(cfg, "adaptive_block_size", "auto"))
