"""The lean beam search (docs/METHODS.md §2, "Lean beam search"): fairseq's ``SequenceGenerator`` with
``search.BeamSearch``, step for step, on the lean encoder pass and decoder step the engine uses.

Output: identical to fairseq's beam search (tokens; scores up to float rounding of the lean step) for
every plain left-to-right model the lean step runs (stock fairseq transformers, the plugin's own).
The rules, each as fairseq's ``_generate`` applies them, in its order:

* log-probs: the decoder's last position, logits divided by ``--temperature``, log-softmax in fp32;
  then the run's logits processors (``logits_processors``): NaN -> -inf, PAD never chosen,
  ``--unkpen``, only EOS at ``step >= max_len``, no EOS before ``--min-len``, ``--no-repeat-ngram-size``;
* candidates: the search strategy handed in (``search.BeamSearch``, fairseq's ``BeamSearch.step``):
  the top ``2*beam`` of ``beam*vocab`` running scores (step 0: the first beam only), ties in
  ``torch.topk``'s order;
* finalisation: an EOS candidate with a finite score is finalised only when it ranks within the top
  ``beam`` candidates, while its sentence has fewer than ``beam`` finalised hypotheses; its score is
  divided by ``(step + 1) ** --lenpen`` (not with ``--unnormalized``); positional scores are the
  differences of the running scores (``hypotheses``); a sentence is done with ``beam`` finalised
  hypotheses or at fairseq's ``max_len`` (``GenerationOptions.max_len``), and leaves the batch;
* survivors: the first ``beam`` candidates that are not finalising EOS continue;
* output: a sentence's finalised hypotheses sorted by score (``torch.sort``, descending, in the
  order they were finalised), as fairseq sorts them.

What is lean: the encoder runs once per sentence (not once per beam: the beams of a sentence share
its keys/values, ``KVCache(group=beam)``); the self-attention keys/values sit in preallocated
buffers reordered by beam with ``index_select`` (fairseq concatenates and reorders a dict per layer);
the masks are written in place; the finalised hypotheses live on the device (one slot per hypothesis
and a trash slot for masked writes); and a step reads the host once, for which sentences are done,
whether any hypothesis finalises (else the finalisation is skipped) and whether any candidate is EOS
(else the first ``beam`` candidates continue, without fairseq's top-k over the candidate ranks)
(``beam_rows``: shared with the multi-token beam search; the encoder pass, the lean step and the
cache: ``model_parts``).
"""
import logging
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_plugins.decoding.beam_rows import finalising_slots, live_sentences, read_step, reorder_prefix, slot_rows
from fairseq_plugins.decoding.hypotheses import differences_, final_score, hypothesis
from fairseq_plugins.decoding.inference import inference_generate
from fairseq_plugins.decoding.logits_processors import Steps, logits_processors
from fairseq_plugins.decoding.model_parts import ModelParts
from fairseq_plugins.decoding.options import GenerationOptions
from fairseq_plugins.decoding.search import Candidates, Search, build_search
from fairseq_plugins.decoding.step import DecoderStep, UnsupportedDecoderError
from fairseq_plugins.errors import OptionError

logger = logging.getLogger(__name__)


# ---- the loop's state ----

@dataclass
class BeamState:
    """The live hypotheses: ``beam`` consecutive rows per live sentence, fairseq's buffers."""

    tokens: Tensor   # (n*B, max_len + 2): column 0 the start symbol, column s + 1 the token chosen at step s
    scores: Tensor   # (n*B, max_len + 1): running score after each step
    sent: Tensor     # (n,) batch position of every live sentence
    offsets: Tensor  # (n, 1) first row of every live sentence
    n: int           # host: live sentences
    cand_offsets: Tensor  # (2B,) 0..2B-1: fairseq's candidate ranks


class FinalizedHypotheses:
    """fairseq's ``finalized`` lists, on the device: ``beam`` slots per sentence in the order fairseq
    appends, and one trash slot that masked writes go to."""

    def __init__(self, bsz: int, beam_size: int, max_len: int, eos: int, pad: int, device):
        B = beam_size
        self.B, self.bsz, self.eos = B, bsz, eos
        self.tokens = torch.full((bsz * (B + 1), max_len + 1), pad, dtype=torch.long, device=device)
        self.pos = torch.zeros(bsz * (B + 1), max_len + 1, device=device)
        self.score = torch.full((bsz * (B + 1),), -math.inf, device=device)
        self.length = torch.zeros(bsz * (B + 1), dtype=torch.long, device=device)
        self.count = torch.zeros(bsz, dtype=torch.long, device=device)  # by batch position

    def mark(self, state: BeamState, cand: Candidates, eos_mask: Tensor, last: bool):
        """Which top-``beam`` candidates finalise (``ending``: the finite EOS ones, fairseq's
        ``eos_mask[:, :beam]``) and which sentences are then done (``beam`` finalised, fairseq's cap).
        At the ``last`` step a sentence with no finalised hypothesis (-inf everywhere: NaN log-probs)
        takes its -inf ones, where fairseq's loop fails its ``step < max_len`` assertion.
        -> ``(ending, count, done)``; :meth:`write` works out the slots, only on a step that finalises."""
        B = self.B
        count = self.count.index_select(0, state.sent)
        ending = eos_mask[:, :B]
        if last:
            ending = cand.tokens[:, :B].eq(self.eos) & (cand.scores[:, :B].ne(-math.inf) | count.eq(0).unsqueeze(1))
        return ending, count, (count + ending.sum(1)).ge(B)  # a live sentence has fewer than B: one slot at least

    def write(self, state: BeamState, cand: Candidates, ending: Tensor, count: Tensor, step: int, options):
        """fairseq's ``finalize_hypos`` for the marked candidates: tokens with EOS last, positional
        scores, the (length-normalised) score (``hypotheses``)."""
        cand_scores, cand_beams = cand.scores, cand.beams
        B = self.B
        write, slot, new_count = finalising_slots(count, ending, B)
        rows = (cand_beams[:, :B] + state.offsets).view(-1)
        target = slot_rows(state.sent, write, slot, B)
        eos_scores = cand_scores[:, :B].reshape(-1)
        tokens = state.tokens.index_select(0, rows)[:, 1 : step + 2]
        tokens[:, step] = self.eos
        pos = state.scores.index_select(0, rows)[:, : step + 1]
        pos[:, step] = eos_scores
        self.tokens[:, : step + 1].index_copy_(0, target, tokens)
        self.pos[:, : step + 1].index_copy_(0, target, differences_(pos))
        self.score.index_copy_(0, target, final_score(eos_scores, step + 1, options))
        self.length.index_fill_(0, target, step + 1)
        self.count.index_copy_(0, state.sent, new_count)

    def hypotheses(self) -> List[List[Dict]]:
        """Per sentence, its hypotheses best first (fairseq's ``torch.sort`` of the finalised scores)."""
        B = self.B
        count = self.count.tolist()  # once per batch
        score, length = self.score.cpu(), self.length.tolist()
        out = []
        for s in range(self.bsz):
            first = s * (B + 1)
            order = torch.sort(score[first : first + count[s]], descending=True)[1].tolist()
            out.append([hypothesis(self.tokens[first + j, : length[first + j]], self.score[first + j],
                                   self.pos[first + j, : length[first + j]]) for j in order])
        return out


# ---- the generator ----

class LeanBeamSearch:
    """fairseq-generate compatible: ``generate(models, sample)`` as ``SequenceGenerator.generate``;
    built from the run's ``options`` and a ``search_strategy`` (as fairseq's; by default
    ``search.build_search``'s beam search of ``options.beam``, capped at the vocabulary - 1)."""

    def __init__(self, model, tgt_dict, options: Optional[GenerationOptions] = None,
                 search_strategy: Optional[Search] = None):
        if not (hasattr(model, "encoder") and hasattr(model, "decoder")):
            raise UnsupportedDecoderError(f"a model without an encoder and a decoder ({type(model).__name__})")
        self.parts = ModelParts(model)  # raises UnsupportedDecoderError for a decoder the lean step cannot run
        self.model, self.tgt_dict = model, tgt_dict
        self.eos, self.pad, self.vocab_size = tgt_dict.eos(), tgt_dict.pad(), len(tgt_dict)
        self.options = options = options if options is not None else GenerationOptions()
        self.strategy = search_strategy if search_strategy is not None else build_search(options, self.vocab_size)
        self.beam_size = self.strategy.beam_size
        self.processors = logits_processors(options, tgt_dict)
        self.reset_stats()

    def reset_stats(self):
        self.stats = {"model_calls": 0, "steps": 0}

    @inference_generate
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **kwargs):
        if prefix_tokens is not None or constraints is not None:
            raise OptionError("the lean beam search decodes without --prefix-size/--constraints; "
                             "pass --beam-search fairseq for them")
        if len(models) != 1 or models[0] is not self.model:
            raise ValueError("the lean beam search was built for one model; build a new generator for these")
        src_tokens = sample["net_input"]["src_tokens"]
        bsz, src_len = src_tokens.shape[:2]
        max_len = self.options.max_len(src_len, self.model.max_decoder_positions())
        B, device = self.beam_size, src_tokens.device
        cache = self.parts.begin(sample["net_input"], max_len + 1, group=B)
        state = self._start(bsz, max_len, device, self.eos if bos_token is None else bos_token)
        finals = FinalizedHypotheses(bsz, B, max_len, self.eos, self.pad, device)
        slots = torch.arange(max_len + 2, device=device)  # the steps: the decoder's slots, the processors' steps
        for step in range(max_len + 1):  # one extra step for EOS
            lprobs = self._log_probs(cache, state, slots, step, max_len)
            cand = self.strategy.step(step, lprobs.view(state.n, B, -1),
                                      state.scores.view(state.n, B, -1)[:, :, step - 1] if step else None)
            eos = cand.tokens.eq(self.eos) & cand.scores.ne(-math.inf)  # fairseq's eos_mask, over all 2*beam candidates
            ending, count, done = finals.mark(state, cand, eos, last=step == max_len)
            done_flags, wrote, any_eos = read_step(done, ending, eos)  # the one host read of the step
            if wrote:
                finals.write(state, cand, ending, count, step, self.options)
            live = state.n - sum(done_flags)
            if live == 0 or step == max_len:
                break
            self._advance(cache, state, cand, eos if any_eos else None, done, live, step)
        return finals.hypotheses()

    # ---- the steps ----
    def _start(self, bsz: int, max_len: int, device, bos: int) -> BeamState:
        B = self.beam_size
        tokens = torch.full((bsz * B, max_len + 2), self.pad, dtype=torch.long, device=device)
        tokens[:, 0] = bos
        scores = torch.zeros(bsz * B, max_len + 1, device=device)
        sent = torch.arange(bsz, device=device)
        return BeamState(tokens, scores, sent, sent.unsqueeze(1) * B, bsz, torch.arange(2 * B, device=device))

    def _log_probs(self, cache, state: BeamState, slots: Tensor, step: int, max_len: int) -> Tensor:
        """fairseq's next-token log-probs of every live hypothesis ``(n*B, V)``, processed."""
        logits, _ = self.parts.step(cache, state.tokens[:, step : step + 1], slots[step : step + 1])
        cache.advance(1)
        self.stats["model_calls"] += 1
        self.stats["steps"] += 1
        lprobs = DecoderStep.log_probs(logits, self.options.temperature)[:, 0]
        return self.processors(lprobs, Steps(slots[step], max_len, step, step, tokens=state.tokens))

    def _advance(self, cache, state: BeamState, cand: Candidates, eos_mask: Optional[Tensor], done: Tensor, live: int,
                 step: int):
        """The first ``beam`` candidates that do not finalise continue (fairseq's ``active_hypos``:
        the first ``beam`` when no candidate is EOS, ``eos_mask`` None); ``done`` sentences leave the
        batch (``live``: how many stay, host); tokens, scores and the cache follow the chosen rows."""
        cand_scores, cand_indices, cand_beams, _ = cand
        cand_rows = cand_beams + state.offsets  # rows in the current numbering
        if live < state.n:
            keep = live_sentences(done, live)
            cand_scores, cand_indices, cand_rows = cand_scores[keep], cand_indices[keep], cand_rows[keep]
            eos_mask = None if eos_mask is None else eos_mask[keep]
            state.sent = state.sent.index_select(0, keep)
            state.offsets = state.offsets[:live]
        rows, chosen, active_scores = self._survivors(state, cand_rows, cand_indices, cand_scores, eos_mask, step)
        if live < state.n:
            state.tokens = state.tokens.index_select(0, rows)
            state.scores = state.scores.index_select(0, rows)
            cache.select_rows(rows)
            state.n = live
        else:
            reorder_prefix(state.tokens, rows, step + 1)
            reorder_prefix(state.scores, rows, step)
            cache.reorder(rows)
        state.tokens[:, step + 1] = chosen
        state.scores[:, step] = active_scores

    def _survivors(self, state: BeamState, cand_rows: Tensor, cand_indices: Tensor, cand_scores: Tensor,
                   eos_mask: Optional[Tensor], step: int):
        """fairseq's ``active_hypos`` of the live sentences' candidates ``(n, K)``: the first ``beam``
        that do not finalise.  -> ``(rows, tokens, scores)`` ``(n*B,)``: the row each survivor continues
        (current numbering), its token, its running score.  (``evaluation.beam_replay`` records them.)"""
        B = self.beam_size
        if eos_mask is None:  # fairseq's topk of the candidate ranks picks the first beam: the same, without it
            return tuple(t[:, :B].reshape(-1) for t in (cand_rows, cand_indices, cand_scores))
        K = eos_mask.size(1)
        active_mask = eos_mask.long() * K + state.cand_offsets[:K]
        active_hypos = torch.topk(active_mask, k=B, dim=1, largest=False)[1]
        return tuple(torch.gather(t, 1, active_hypos).view(-1) for t in (cand_rows, cand_indices, cand_scores))


# ---- the choice: lean, or fairseq's generator with the reason logged ----

def fallback_reason(models, options: GenerationOptions, extra_gen_cls_kwargs=None, seq_gen_cls=None,
                    prefix_allowed_tokens_fn=None, args=None) -> Optional[str]:
    """Why this run cannot use the lean beam search (None: it can).  Its generation options' fallback
    (``GenerationOptions.from_args``), then what is not an option: an ensemble, a language model or a
    generator class handed in by code."""
    if options.fallback is not None:
        return options.fallback
    if extra_gen_cls_kwargs and extra_gen_cls_kwargs.get("lm_model") is not None:
        return "--lm-path (language-model fusion)"
    if seq_gen_cls is not None:
        return f"a generator class was asked for ({seq_gen_cls.__name__})"
    if prefix_allowed_tokens_fn is not None or getattr(args, "prefix_allowed_tokens_fn", None) is not None:
        return "prefix_allowed_tokens_fn (prefix-constrained search)"
    if len(models) != 1:
        return f"an ensemble of {len(models)} models"
    return None


def build_beam_generator(task, models, args, fairseq_generator, **fairseq_kwargs):
    """``FastTranslationTask.build_generator`` for a plain left-to-right model: the lean beam search,
    or ``fairseq_generator()`` (fairseq's own) with ``--beam-search fairseq`` or where the run needs what
    the lean loop lacks (one log line naming the option)."""
    if getattr(task.cfg, "beam_search", "lean") == "fairseq":
        logger.info("beam search: fairseq's SequenceGenerator (--beam-search fairseq)")
        return fairseq_generator()
    options = GenerationOptions.from_args(args, "lean_beam")
    reason = fallback_reason(models, options, args=args, **fairseq_kwargs)
    if reason is None:
        try:
            generator = LeanBeamSearch(models[0], task.target_dictionary, options,
                                       build_search(options, len(task.target_dictionary)))
        except UnsupportedDecoderError as err:
            reason = str(err)
        else:
            logger.info("beam search: the lean beam search (--beam-search fairseq for fairseq's SequenceGenerator)")
            return generator
    logger.info(f"beam search: fairseq's SequenceGenerator, the lean beam search does not support {reason}")
    return fairseq_generator()
