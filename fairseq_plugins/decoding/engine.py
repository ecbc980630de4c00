"""The draft-and-verify engine (docs/METHODS.md §2): one loop for every drafter and acceptance rule.

Per iteration, for all unfinished rows at once:

1. the drafter proposes up to ``K`` tokens per row (PAD = none; a row may propose fewer); the
   block-size policy (``width_policy``: fixed, or adapted to what the drafts achieve) caps the width;
2. the verifier scores ``[last token, d_1..d_k]`` after each row's KV cache in ONE call of the lean
   decoder step (causal inside the draft, each row's logical positions), ``k`` = the widest useful
   draft of the batch, not ``K``; on a CPU its columns may be projected onto the vocabulary chunk
   by chunk, only up to the last one some row uses, where that is priced cheaper than all at once
   (``scoring.ColumnScorer.score``, ``column_schedule``);
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
alone, no verifier call), ``_append``, ``_observe``, ``_count_drafts``, ``_propose``, ``_sync``,
``_learn``, ``_drop_finished`` and ``_next_call``, over the unfinished rows (:class:`Rows`), what the
batch shares (:class:`Run`), the call's outcome (:class:`Verdict`) and the sync (:class:`Synced`)
(``engine_state``).  The steps that need nothing of the generator live in modules of one idea each:
the arithmetic of appending (``appending``), when the drafter is asked and how wide its draft is
(``proposing``: the width policy's ``plan`` applied to the drafter), the stats (``draft_stats``).
The width policy (``width_policy``) sees ``plan()`` and ``record()`` per iteration and times itself.

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
``oracle_model_calls`` and ``length_oracle`` when PJ/PGJ took the length from a greedy pre-run
(``drafters.length_oracle``, through ``DraftContext.greedy_lengths``).  ``--drafter auto`` is
``auto_generator``: one engine per candidate drafter.
"""
import logging
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_plugins.decoding.acceptance import AcceptanceRule, Exact, build_acceptance
from fairseq_plugins.decoding.appending import append, take_draft
from fairseq_plugins.decoding.auto_generator import AutoGenerator
from fairseq_plugins.decoding.draft_stats import BatchCounts, CountingGenerator, draft_slots, fresh_stats
from fairseq_plugins.decoding.drafters import Draft, DraftContext, Drafter, NoDraft, StepResult, build_drafter
from fairseq_plugins.decoding.drafters.auto import AutoDrafter
from fairseq_plugins.decoding.engine_state import Rows, Run, Synced, Verdict
from fairseq_plugins.decoding.generation_options import GenerationOptionError
from fairseq_plugins.decoding.hypotheses import from_log_probs
from fairseq_plugins.decoding.inference import inference_generate
from fairseq_plugins.decoding.iteration_cost import host_reads_free
from fairseq_plugins.decoding.logits_processors import logits_processors
from fairseq_plugins.decoding.options import GenerationOptions
from fairseq_plugins.decoding.proposing import Proposals
from fairseq_plugins.decoding.scoring import Columns, ColumnScorer
from fairseq_plugins.decoding.verifier import Verifier
from fairseq_plugins.decoding.width_policy import WidthPolicy, policy_for

logger = logging.getLogger(__name__)


class DraftVerifyOptionError(GenerationOptionError):
    """Generation options the draft-and-verify engine cannot honour; the message says how to fix it."""


class DraftVerifyGenerator(CountingGenerator):
    def __init__(self, models, tgt_dict, drafter: Drafter, acceptance: AcceptanceRule, *,
                 options: Optional[GenerationOptions] = None, adaptive_block_size="auto",
                 verifier: Optional[Verifier] = None):
        if len(models) != 1:
            raise DraftVerifyOptionError(
                f"--drafter verifies with one model; got an ensemble of {len(models)} (--path a:b). Pass one checkpoint.")
        self.model = models[0]
        self.verifier = verifier or Verifier(self.model)  # one for all engines of --drafter auto
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
        caps = drafter.capabilities  # the one read of what the drafter needs (each batch is decoded with it)
        if not acceptance.needs_verifier:
            self._check_drafter_alone(drafter, caps)
        self.policy = policy_for(caps, adaptive_block_size, isinstance(acceptance, Exact), acceptance.needs_verifier)
        self.caps = caps
        self.lazy_verify: Optional[bool] = None  # None: on a CPU as priced (ColumnScorer.score); True/False force it
        # None: by the device (iteration_cost.host_reads_free); False: read nothing but the one synchronisation
        # per iteration, as on a GPU (tests check that path on a CPU)
        self.host_reads: Optional[bool] = None
        self.reset_stats()

    def _check_drafter_alone(self, drafter: Drafter, caps):
        """``--acceptance all``: the drafter's drafts are the output (GAD's "NAR drafter" row)."""
        if not caps.standalone:
            raise DraftVerifyOptionError(
                f"--acceptance all decodes with the drafter alone, but --drafter {drafter.name} drafts from the "
                "verifier's own predictions; use it with a drafter that has its own model (--drafter nar)")
        if self.options.unk_penalty:
            raise DraftVerifyOptionError("--acceptance all (the drafter alone) does not support --unkpen; drop it")
        if self.options.temperature != 1.0:
            raise DraftVerifyOptionError("--acceptance all (the drafter alone) does not support --temperature")

    # ---- stats ----
    def reset_stats(self):
        self.stats: Dict[str, float] = fresh_stats(self.drafter.name, self.acceptance.name)

    @inference_generate
    def generate(self, models, sample, prefix_tokens: Optional[Tensor] = None, constraints=None, **kwargs):
        return self.generate_batch(sample, prefix_tokens, constraints, **kwargs)

    def generate_batch(self, sample, prefix_tokens: Optional[Tensor] = None, constraints=None, **kwargs):
        """``generate`` without its inference-mode wrapper (``auto_generator`` times it)."""
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
        return self._decode(net_input, src_lengths, max_len, self.drafter, self.caps, self.acceptance, self.policy)

    def _greedy_lengths(self, net_input, src_lengths, max_len: int) -> Tensor:
        """The length oracle's one call (``DraftContext.greedy_lengths``): greedy's hypothesis lengths
        for the batch, from a pre-run counted as the oracle's; no drafter, and a pre-run must not
        teach the width policy anything."""
        calls = self.stats["model_calls"]
        greedy = self._decode(net_input, src_lengths, max_len, NoDraft(), NoDraft.capabilities, Exact(), WidthPolicy(),
                              count_stats=False)
        self.stats["oracle_model_calls"] += self.stats["model_calls"] - calls
        self.stats["length_oracle"] = True
        return torch.tensor([len(h[0]["tokens"]) for h in greedy], device=src_lengths.device)

    # ---- the loop ----
    def _decode(self, net_input, src_lengths, max_len: int, drafter: Drafter, caps, acceptance: AcceptanceRule,
                policy: WidthPolicy, count_stats=True):
        run, rows = self._begin(net_input, src_lengths, max_len, drafter, caps, acceptance, policy, count_stats)
        while True:
            verdict = self._verify(run, rows) if run.cache is not None else self._take_draft(rows)
            n_before = rows.n_gen
            count, ended = self._append(run, rows, verdict)
            self._observe(run, rows, verdict, count, n_before)
            sent, proposed = self._count_drafts(verdict.fed, policy.adaptive, count_stats, self.pad)
            self._propose(run.proposals, rows)  # a drafter asked before the sync: its draft's width rides along
            synced = self._sync(run, rows, verdict, ended, sent, proposed)
            self._learn(run, rows, synced, verdict)
            if run.cache is not None:  # cut back to the accepted tokens
                run.cache.commit(count, max(synced.lengths), min(synced.lengths) == max(synced.lengths))
            rows.lengths = synced.lengths
            if any(synced.done) and not self._drop_finished(run, rows, synced.done, ended):
                break
            self._next_call(run.proposals, rows, synced.next_width)
        run.counts.add_to(self.stats, run.iteration, run.finalized)
        return run.finalized

    def _begin(self, net_input, src_lengths, max_len, drafter, caps, acceptance, policy, count_stats):
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
                                   target_length=None, bos=self.bos, eos=self.eos, pad=self.pad,
                                   final=alone, constraints=self.processors,
                                   encoder_out=None if alone else self.verifier.encoder_out,
                                   vocab_projection=None if alone else self.verifier.step.vocab_projection,
                                   host_reads=reads,
                                   greedy_lengths=lambda: self._greedy_lengths(net_input, src_lengths, max_len)))
        opening = policy.begin(bsz, kmax, device)
        proposals = Proposals(drafter, policy, caps.proposes_after_sync)
        arange = torch.arange(width + 1, device=device)
        run = Run(drafter, acceptance, policy, proposals, cache, max_len, self.eos, arange, [None] * bsz,
                  BatchCounts(count_stats), caps.needs_all_columns, host_reads=reads)
        self._propose(proposals, rows, opening)  # the first call's draft
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
        _, hidden = self.verifier(run.cache, tokens, positions, project=None)  # the scorer projects (all, or chunks)
        cols = Columns(steps, max_len, min_step=run.iteration, first_max=longest)  # every row has >= iteration tokens
        scored = self.scorer.score(hidden, cols, rows.score, draft.tokens, run.acceptance, run.host_reads,
                                   run.all_columns, self.lazy_verify)
        used = scored.top.size(1)  # the columns any row uses
        hidden = hidden[:, :used]
        accepted, top = scored.accepted, scored.top
        if used == 1:  # a plain greedy step: one token per row, nothing to cut
            return Verdict(draft, top, scored.top_lprob, None, accepted, scored, hidden)
        if run.acceptance.takes_verifier_tokens:  # the accepted draft tokens are the verifier's: take its columns
            return Verdict(draft, top, scored.top_lprob, accepted + 1, accepted, scored, hidden)
        fed = run.arange[:used].unsqueeze(0)
        new = torch.where(fed < accepted.unsqueeze(1), torch.cat([draft.tokens[:, : used - 1], top[:, -1:]], 1), top)
        new_lp = scored.lprobs.gather(2, new.unsqueeze(2)).squeeze(2)
        return Verdict(draft, new, new_lp, accepted + 1, accepted, scored, hidden)

    _take_draft = staticmethod(take_draft)
    _append = staticmethod(append)
    _count_drafts = staticmethod(draft_slots)
    _propose = staticmethod(Proposals.propose)
    _sync = staticmethod(Synced.read)
    _next_call = staticmethod(Proposals.next_call)

    @staticmethod
    def _observe(run: Run, rows: Rows, verdict: Verdict, count: Tensor, n_before: Tensor):
        """The drafter sees what the verifier said (the drafter alone has no verifier to hear)."""
        if verdict.scored is None or not run.proposals.drafting:
            return
        run.drafter.observe(StepResult(draft=verdict.fed.tokens, top=verdict.scored.top,
                                       top_lprob=verdict.scored.top_lprob, accepted=verdict.accepted, count=count,
                                       n_before=n_before, out=rows.out, hidden=verdict.hidden, n_after=rows.n_gen))

    @staticmethod
    def _learn(run: Run, rows: Rows, synced: Synced, verdict: Verdict):
        """The width policy records what this call cost and achieved; the batch counts the call
        (``rows.lengths``: before this call)."""
        run.policy.record(verdict.fed.size, run.proposals.take_asked(), synced.sent, synced.got, synced.offered)
        run.counts.learn(synced.done, synced.lengths, rows.lengths, synced.sent, synced.got, synced.proposed)
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
        if run.proposals.drafting:
            run.drafter.select_rows(keep_t)
        run.policy.select_rows(keep)
        rows.select(keep_t)
        return True

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

    def engine(d, verifier=None):
        return DraftVerifyGenerator(models, task.target_dictionary, d, acceptance, options=options, verifier=verifier,
                                    adaptive_block_size=getattr(cfg, "adaptive_block_size", "auto"))
    if isinstance(drafter, AutoDrafter):  # one engine per candidate, sharing the verifier
        return AutoGenerator(drafter, engine)
    return engine(drafter)
