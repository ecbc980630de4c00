"""Step-wise multi-token beam search (docs/METHODS.md §2): IBDecoder Alg. 1 and Imamura & Sumita's DOUBLETOPK.

Each step the decoder scores z = h*c new slots of every hypothesis at once (one incremental call).
A step reads as named parts:

* Logits processors (fairseq's, the run's ``logits_processors`` on the slots' :class:`GroupSteps`): NaN
  log-probs are -inf (as fairseq's ``lprobs[lprobs != lprobs] = -inf``), PAD is never chosen,
  ``--unkpen`` lowers UNK; ``--min-len`` forbids end markers that would leave fewer natural tokens,
  as fairseq's no-EOS-before-min_len; at the length limit EOS is forced.
* Candidates (the search strategy handed in, ``search.build_search``): IBDecoder's outer top-k
  (Alg. 1, lines 6-8) or, with ``--double-topk``, Imamura's DOUBLETOPK.
* Stopping rule: a hypothesis ends at the first step whose group holds an end marker (EOS, which
  doubles as EOD); the group's tokens after the end marker (per segment) are dropped.
* Finishing (Alg. 1 line 10 / Imamura lines 8-11, ``FinishedHypotheses.add``): finished
  candidates ranked within the top B are finalized (fairseq's rule: only competitive finished
  hypotheses are kept), and the beam goes on with the best B unfinished ones (Imamura lines
  13-19, ``_survivors``).  A sentence is done with B finalized hypotheses, as fairseq's beam search.
* Length penalty (fairseq ``--lenpen``): score / len**lenpen with len = natural tokens kept
  after restoring, + 1 for EOS -- the same count fairseq uses for left-to-right hypotheses;
  ``--unnormalized``: the score itself (``hypotheses.final_score``).  ``--temperature``: the logits
  divided by it, as fairseq.  ``--beam`` is capped at the vocabulary size - 1, as fairseq's; every
  other generation option is refused with a message (``generation_options``).
* Output: natural order (``order.restore``) with a final EOS, as fairseq; positional_scores are
  the slots' log-probs in natural order, the final EOS entry holding the log-probs of the dropped
  slots of the last group, so that sum(positional_scores) is the unnormalised score.

The loop is the lean beam search's (``lean_beam``), with its row bookkeeping (``beam_rows``): it keeps
everything on the model's device in preallocated buffers (tokens, log-probs, the KV cache, which starts
small and doubles) reordered in place by ``index_select``, and makes one host read per step, for every
order and ablation: which sentences are done (finished sentences leave the batch, as in fairseq) and
whether any hypothesis finalises (the finalised store is written only then).  The loop is
``range(max_steps)``: it ends at the length limit whatever the log-probs (NaN, -inf everywhere).
``stats`` counts decoder calls.
"""
import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from fairseq_plugins.decoding.beam_rows import finalising_slots, live_sentences, read_step, reorder_prefix, slot_rows
from fairseq_plugins.decoding.hypotheses import final_score, hypothesis
from fairseq_plugins.decoding.inference import inference_generate
from fairseq_plugins.decoding.logits_processors import logits_processors
from fairseq_plugins.decoding.model_parts import ModelParts
from fairseq_plugins.decoding.options import GenerationOptions
from fairseq_plugins.decoding.search import Candidates, GroupSearch, build_search
from fairseq_plugins.decoding.step import DecoderStep
from fairseq_plugins.errors import OptionError


class ModelStepper:
    """One reordered model driven through the lean decoder step (``step.DecoderStep``): z new slots
    per call into a preallocated KV cache; the slots of a step see one another (M(h,c), Eq. 4)."""

    def __init__(self, parts: ModelParts, net_input, beam, capacity, order, temperature: float = 1.0):
        src_tokens = net_input["src_tokens"]
        self.step_fn = parts.step
        self.order = order
        self.z = order.z
        self.temperature = temperature  # logits divided by it before the log-softmax, as fairseq's --temperature
        # rows = sentence-major beams; the beams of a sentence share its encoder keys/values (one copy);
        # the self-attention buffers start small and double (``KVCache.ensure_capacity``)
        self.cache = parts.begin({"src_tokens": src_tokens, "src_lengths": net_input["src_lengths"]}, capacity,
                                 group=beam, granule=self.z)
        self.device = src_tokens.device
        self._slots = torch.arange(capacity + self.z, device=self.device)  # the positions of every step, once
        self._allowed, self._masked_steps = None, ()
        if order.vanilla_mask or order.independent_directions:
            self._build_masks(capacity)

    def _build_masks(self, capacity):
        """The order's mask with its ablations (Table 2), built once per batch before the loop: on the
        device, the matrix the steps slice; on the host, which steps need a mask at all (None elsewhere)."""
        size = -(-capacity // self.z) * self.z
        with torch.device("cpu"):  # deliberately host-side: one copy to the device per batch, no sync per step
            allowed = self.order.allowed(size)
            slots = torch.arange(size)
            step_end = (torch.div(slots, self.z, rounding_mode="floor") + 1) * self.z
            blocked = ~allowed & (slots[None, :] < step_end[:, None])  # over the columns a step attends
            self._masked_steps = blocked.view(size // self.z, -1).any(1).tolist()
        self._allowed = allowed.to(self.device)

    def _mask(self, past):
        """Rows past..past+z of the order's mask over past+z columns, or None when all allowed."""
        if self._allowed is None:
            return None
        if past + self.z > self._allowed.size(0):  # only when the caller's capacity was too small
            self._build_masks(2 * (past + self.z))
        if not self._masked_steps[past // self.z]:
            return None
        return self._allowed[past:past + self.z, :past + self.z]

    def step(self, decoder_input):
        """decoder_input: (rows, slots so far) -> log-probs (rows, z, V) of the last z slots, fp32."""
        past = self.cache.max_length
        tokens = decoder_input[:, -self.z:]
        if past + self.z > self._slots.numel():  # only when the caller's capacity was too small
            self._slots = torch.arange(2 * (past + self.z), device=self.device)
        slots = self._slots[past:past + self.z]
        logits, _ = self.step_fn(self.cache, tokens, slots, causal=False, attn_mask=self._mask(past))
        self.cache.advance(self.z)
        return DecoderStep.log_probs(logits, self.temperature)

    def reorder(self, rows, shrink=False):
        if shrink:  # finished sentences left the batch
            self.cache.select_rows(rows)
        else:
            self.cache.reorder(rows)


class Survivors(NamedTuple):
    """The best B unfinished candidates of every active sentence (the next step's beam)."""
    scores: Tensor  # (n, B) running scores, -inf where a sentence has fewer
    rows: Tensor    # (n*B,) the row of the hypothesis each continues
    tokens: Tensor  # (n*B, z) the group each appends
    lprobs: Tensor  # (n*B, z) its log-probs


class LiveBeam:
    """The live hypotheses of the active sentences: B consecutive rows per sentence, in buffers
    preallocated for ``max_steps`` groups (``beam_rows``)."""

    def __init__(self, bsz, beam_size, z, max_steps, eos, device):
        B = beam_size
        self.B, self.z = B, z
        self.sent = torch.arange(bsz, device=device)  # original sentence of every active sentence
        self.scores = torch.full((bsz, B), -math.inf, device=device)
        self.scores[:, 0] = 0.0  # one live hypothesis per sentence at the start (Alg. 1 line 1)
        # z start symbols, then one group of z tokens per step; their log-probs
        self.tokens = torch.full((bsz * B, (max_steps + 1) * z), eos, dtype=torch.long, device=device)
        self.lp = torch.zeros(bsz * B, max_steps * z, device=device)
        self.generated = 0  # host: slots generated so far (columns z.. of tokens, 0.. of lp)
        self.first_row = torch.arange(bsz, device=device)[:, None] * B  # (n, 1): row of each sentence's beam 0

    @property
    def sentences(self):
        return self.sent.size(0)

    @property
    def decoder_input(self):
        """(rows, z start symbols + the slots so far): a view of the buffer."""
        return self.tokens[:, :self.z + self.generated]

    @property
    def generation(self):
        """(rows, slots so far): the generated tokens and their log-probs, views of the buffers."""
        return self.tokens[:, self.z:self.z + self.generated], self.lp[:, :self.generated]

    def rows(self, beam):
        """Rows of the hypotheses ``beam`` (n, k), numbered within their sentences."""
        return (self.first_row + beam).view(-1)

    def advance(self, stepper, survivors: Survivors, live: Optional[Tensor]):
        """Continue with the survivors; with ``live`` (finished sentences leave the batch), only those
        of the sentences ``live``."""
        rows, tokens, lprobs, scores = survivors.rows, survivors.tokens, survivors.lprobs, survivors.scores
        z, used = self.z, self.generated
        shrink = live is not None
        if shrink:
            keep = (live[:, None] * self.B + torch.arange(self.B, device=live.device)).view(-1)
            rows, tokens, lprobs, scores = rows[keep], tokens[keep], lprobs[keep], scores[live]
            self.sent = self.sent[live]
            self.first_row = self.first_row[:live.numel()]
            self.tokens, self.lp = self.tokens.index_select(0, rows), self.lp.index_select(0, rows)
        else:
            reorder_prefix(self.tokens[:, z:], rows, used)
            reorder_prefix(self.lp, rows, used)
        stepper.reorder(rows, shrink=shrink)
        self.scores = scores
        self.tokens[:, z + used:2 * z + used] = tokens
        self.lp[:, used:used + z] = lprobs
        self.generated = used + z


class FinishedHypotheses:
    """Finalized hypotheses on the device: B slots per sentence plus one trash slot for masked writes."""

    def __init__(self, bsz, beam_size, width, pad, device):
        B, self.B, self.bsz, self.width, self.pad = beam_size, beam_size, bsz, width, pad
        self.tokens = torch.full((bsz * (B + 1), width), pad, dtype=torch.long, device=device)
        self.lp = torch.zeros(bsz * (B + 1), width, device=device)
        self.score = torch.full((bsz * (B + 1),), -math.inf, device=device)
        self.slots = torch.zeros(bsz * (B + 1), dtype=torch.long, device=device)
        self.count = torch.zeros(bsz, dtype=torch.long, device=device)  # per active sentence

    def mark(self, cand: Candidates, finished: Tensor):
        """The finished candidates ranked in the top B that are finalized (a finite score, a free
        slot).  -> (write, slot, new_count), for ``add`` and for which sentences are done."""
        top = slice(0, self.B)
        return finalising_slots(self.count, finished[:, top] & torch.isfinite(cand.scores[:, top]), self.B)

    def add(self, beam: LiveBeam, cand: Candidates, write: Tensor, slot: Tensor, scores: Tensor, step: int):
        """Finalize the ``mark``ed candidates (``scores``: their final, length-penalised scores); only
        the slots generated so far are written (the rest of a slot is never read)."""
        B, z, n = self.B, beam.z, beam.sentences
        target = slot_rows(beam.sent, write, slot, B)
        rows = beam.rows(cand.beams[:, :B])
        width = (step + 1) * z
        prev_tok, prev_lp = beam.generation
        self.tokens[:, :width].index_copy_(0, target, torch.cat(
            [prev_tok.index_select(0, rows), cand.tokens[:, :B].reshape(n * B, z)], 1))
        self.lp[:, :width].index_copy_(0, target, torch.cat(
            [prev_lp.index_select(0, rows), cand.lprobs[:, :B].reshape(n * B, z)], 1))
        self.score.index_copy_(0, target, scores.reshape(-1))
        self.slots.index_fill_(0, target, width)

    def hypotheses(self, order, eos):
        """Host side, once per batch: restore natural order and build fairseq's hypothesis dicts.
        They reach the model's device in two copies for the whole batch (one of every hypothesis's
        tokens, one of its scores), split there into views; not a few copies per hypothesis."""
        B, bsz = self.B, self.bsz
        tokens, lps = self.tokens.view(bsz, B + 1, -1)[:, :B].cpu(), self.lp.view(bsz, B + 1, -1)[:, :B].cpu()
        score, slots = self.score.view(bsz, B + 1)[:, :B].cpu(), self.slots.view(bsz, B + 1)[:, :B].tolist()
        ranked = [[j for j in sorted(range(B), key=lambda j: -row[j]) if math.isfinite(row[j])]
                  for row in score.tolist()]
        ints, floats, sizes = [], [], []  # per hypothesis: tokens + EOS, generation tokens; positional scores, score
        with torch.device("cpu"):  # deliberately host-side: the order restores host tensors
            natural = [[order.restore_index(tokens[s, j, :slots[s][j]], eos) for j in ranked[s]] for s in range(bsz)]
            end = torch.tensor([eos], device="cpu")
            for s in range(bsz):
                for j, index in zip(ranked[s], natural[s]):
                    gen, lp = tokens[s, j, :slots[s][j]], lps[s, j, :slots[s][j]]
                    index = torch.tensor(index, dtype=torch.long, device="cpu")
                    nat_lp = lp[index]
                    ints += [gen[index], end, gen]
                    floats += [nat_lp, (lp.sum() - nat_lp.sum()).view(1), score[s, j].view(1)]
                    sizes.append((index.numel() + 1, gen.numel()))
        device, out = self.tokens.device, []
        if sizes:
            ints = torch.cat(ints).to(device).split([n for pair in sizes for n in pair])
            floats = torch.cat(floats).to(device).split([m for n, _ in sizes for m in (n, 1)])
        k = 0
        for s in range(bsz):
            hypos = []
            for _ in ranked[s]:
                hypos.append(hypothesis(ints[2 * k], floats[2 * k + 1][0], floats[2 * k],
                                        generation_tokens=ints[2 * k + 1]))  # raw generation order, for checks
                k += 1
            out.append(hypos)
        return out


class GroupSteps:
    """Where the slots of a step's groups stand, for the logits processors (``logits_processors``):
    ``(n, B, z, V)`` log-probs, slot ``t`` of the group at ``step`` (``slot``: 0..z-1 on the device).

    Which slots may not end, and which must, follow the group's layout.  fairseq forbids EOS while
    the tokens kept are fewer than ``--min-len``; an end marker in slot t of the group keeps at
    least ``step*z + t`` natural tokens when it is the group's first (the segments before it keep
    all their w tokens), and a segment before it that ends too is bound by its own slot, so it is
    forbidden where ``step*z + t`` is below ``--min-len``: the tightest rule a slot can follow alone
    (exact for one segment; for multi_segment an early end made up by later segments is still
    forbidden).  At the length limit (last step) at most ``room`` < z tokens may be kept, spread over
    the segments; the next slot of each segment becomes EOS, so every candidate of the last step is
    finished, and the slots after it stay free (they are dropped)."""

    def __init__(self, order, step: int, max_steps: int, max_len: int, slot: Tensor):
        self.order, self.step, self.max_steps, self.max_len, self.slot = order, step, max_steps, max_len, slot

    def no_end(self, min_len: int) -> Optional[Tensor]:
        first = self.step * self.order.z
        return first + self.slot < min_len if first < min_len else None

    def must_end(self) -> Optional[Tensor]:
        if self.step != self.max_steps - 1:
            return None
        w, S = self.order.width, self.order.segments
        room = self.max_len - self.step * self.order.z
        offset, segment = self.slot % w, torch.div(self.slot, w, rounding_mode="floor")  # within / of its segment
        return offset == room // S + (segment < room % S).long()


class MultiTokenBeamSearch:
    """fairseq-generate compatible generator for models trained in a generation order; built from the
    run's ``options`` and a ``search_strategy`` (``search.build_search``'s rule for the order by
    default: IBDecoder's outer top-k; ``--double-topk``: DOUBLETOPK)."""

    def __init__(self, order, tgt_dict, options: Optional[GenerationOptions] = None,
                 search_strategy: Optional[GroupSearch] = None, max_positions=None):
        self.options = options = options if options is not None else GenerationOptions()
        self.strategy = search_strategy if search_strategy is not None else build_search(options, len(tgt_dict), order)
        self.processors = logits_processors(options, tgt_dict)
        self.order, self.tgt_dict = order, tgt_dict
        self.eos, self.pad = tgt_dict.eos(), tgt_dict.pad()
        self.beam_size = self.strategy.beam_size
        self.max_positions = max_positions
        self._parts: Optional[ModelParts] = None
        self.reset_stats()

    def reset_stats(self):
        self.stats = {"model_calls": 0, "steps": 0}

    # ---- fairseq-generate entry point ----
    @inference_generate
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **kwargs):
        if len(models) != 1:
            raise OptionError("the multi-token beam search decodes with one model; pass a single --path "
                             "(average checkpoints with scripts/average_checkpoints.py for an ensemble)")
        if prefix_tokens is not None or constraints is not None:
            raise OptionError("--prefix-size and --constraints are not supported with --target-order "
                             "(a prefix is not a prefix in a reordered target)")
        model = models[0]
        net_input = sample["net_input"]
        src_lengths = net_input["src_lengths"]
        limit = self.max_positions if self.max_positions is not None else model.max_decoder_positions()
        max_len = self.options.max_len(int(src_lengths.max()), limit)  # once per batch
        if self._parts is None or self._parts.model is not model:
            self._parts = ModelParts(model)
        stepper = ModelStepper(self._parts, net_input, self.beam_size, (max_len // self.order.z + 1) * self.order.z,
                               self.order, self.options.temperature)
        return self.search(stepper, src_lengths.size(0), max_len, src_lengths.device)

    # ---- the search ----
    def search(self, stepper, bsz, max_len, device):
        """Batched beam search over any ``stepper`` with ``step(decoder_input)`` and ``reorder(rows)``;
        hypotheses keep at most ``max_len`` natural tokens (+ EOS), as fairseq's."""
        B, z = self.beam_size, self.order.z
        max_steps = max_len // z + 1  # enough slots for any natural length <= max_len
        beam = LiveBeam(bsz, B, z, max_steps, self.eos, device)
        finals = FinishedHypotheses(bsz, B, max_steps * z, self.pad, device)
        slot_in_group = torch.arange(z, device=device)
        for step in range(max_steps):
            lprobs = stepper.step(beam.decoder_input)
            self.stats["model_calls"] += 1
            self.stats["steps"] += 1
            # in place: the step's own fresh tensor (a copy cost ~2% of a beam-10 row)
            lprobs = self.processors(lprobs.view(beam.sentences, B, z, -1),
                                     GroupSteps(self.order, step, max_steps, max_len, slot_in_group))
            cand = self.strategy.step(step, lprobs, beam.scores)
            finished = cand.tokens.eq(self.eos).any(-1)
            write, slot, count = finals.mark(cand, finished)
            survivors = self._survivors(beam, cand, finished)
            done = count.ge(B) | ~torch.isfinite(survivors.scores).any(1)
            done_flags, wrote = read_step(done, write)  # the one host read of the step
            if wrote:
                finals.add(beam, cand, write, slot, self._final_score(cand, step), step)
            live = beam.sentences - sum(done_flags)
            if live == 0:
                break
            keep = live_sentences(done, live) if live < beam.sentences else None
            finals.count = count if keep is None else count.index_select(0, keep)
            beam.advance(stepper, survivors, keep)
        return finals.hypotheses(self.order, self.eos)

    def _survivors(self, beam, cand, finished):
        """Imamura lines 13-19: the beam goes on with the best B unfinished candidates."""
        B, z, n = self.beam_size, self.order.z, beam.sentences
        scores, pick = cand.scores.masked_fill(finished, -math.inf).topk(B, dim=1)
        group = pick[..., None].expand(-1, -1, z)
        return Survivors(scores, beam.rows(cand.beams.gather(1, pick)),
                         cand.tokens.gather(1, group).view(n * B, z), cand.lprobs.gather(1, group).view(n * B, z))

    def _final_score(self, cand, step):
        """fairseq's length-normalised score of the top-B candidates if they end now: kept natural
        tokens + 1 for EOS (``hypotheses.final_score``)."""
        B = self.beam_size
        if not self.options.normalize_scores:  # --unnormalized: no length to count
            return final_score(cand.scores[:, :B], None, self.options)
        kept = step * self.order.z + self._kept_in_group(cand.tokens[:, :B])
        return final_score(cand.scores[:, :B], (kept + 1).float(), self.options)

    def _kept_in_group(self, group_tokens):
        """Tokens of a final group kept by ``order.restore``: each segment's tokens before its
        first end marker (the rest of the group is dropped)."""
        n, k, z = group_tokens.shape
        not_end = group_tokens.ne(self.eos).view(n, k, self.order.segments, self.order.width)
        return not_end.long().cumprod(-1).sum(-1).sum(-1)


def build_multi_token_generator(task, models, args):
    """The generator ``FastTranslationTask.build_generator`` returns for a reordered model; its
    generation options as ``generation_options`` says (what it does not honour, it refuses)."""
    options = GenerationOptions.from_args(args, "multi_token_beam")
    order = getattr(models[0], "generation_order", None) or task.order
    double_topk = getattr(task.cfg, "double_topk", False)
    search = build_search(options, len(task.target_dictionary), order, double_topk=double_topk)
    return MultiTokenBeamSearch(order, task.target_dictionary, options, search)
