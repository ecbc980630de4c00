"""Step-wise multi-token beam search (docs/METHODS.md §2): IBDecoder Alg. 1 and Imamura & Sumita's DOUBLETOPK.

Each step the decoder scores z = h*c new slots of every hypothesis at once (one incremental call).

* Candidates (IBDecoder Alg. 1, lines 6-8): per hypothesis the top-B tokens of every slot, the
  outer addition of the z log-prob vectors pruned to the top-B groups (pruning to B after each
  added slot is exact: a group outside the top-B partial sums is beaten by B groups sharing its
  suffix), then the B*B candidates of the beam ranked by total score.
* DOUBLETOPK (Imamura Alg. 1, h=2, c=1, ``--double-topk``): over the whole beam the top 2W left
  tokens, then the top 3W (left, right) pairs, right tokens taken from the full vocabulary (ranked
  among each beam's top-3W right tokens: the same pairs, without a (n, 2W, V) table).
* Stopping rule: a hypothesis ends at the first step whose group holds an end marker (EOS, which
  doubles as EOD); the group's tokens after the end marker (per segment) are dropped.  ``--min-len``
  forbids end markers that would leave fewer natural tokens (``_forbid_early_end``), as fairseq's
  no-EOS-before-min_len.
* Finishing (Alg. 1 line 10 / Imamura lines 8-11): a candidate whose group holds an end marker
  (EOS, which doubles as EOD) is finished; finished candidates ranked within the top B are
  finalized (fairseq's rule: only competitive finished hypotheses are kept), and the beam goes
  on with the best B unfinished ones (Imamura lines 13-19).  A sentence is done with B
  finalized hypotheses, as fairseq's beam search; at the length limit EOS is forced (``_force_end``).
* Length penalty (fairseq ``--lenpen``): score / len**lenpen with len = natural tokens kept
  after restoring, + 1 for EOS -- the same count fairseq uses for left-to-right hypotheses.
* Output: natural order (``order.restore``) with a final EOS, as fairseq; positional_scores are
  the slots' log-probs in natural order, the final EOS entry holding the log-probs of the dropped
  slots of the last group, so that sum(positional_scores) is the unnormalised score.

The loop keeps everything on the model's device; one host sync per step decides which sentences
are done (finished sentences leave the batch, as in fairseq).  ``stats`` counts decoder calls.
"""
import math

import torch

from fairseq_plugins.decoding.inference import inference_generate
from fairseq_plugins.decoding.step import DecoderStep
from fairseq_plugins.orders import OrderError


class ModelStepper:
    """One reordered model driven through the lean decoder step (``step.DecoderStep``): z new slots
    per call into a preallocated KV cache; the slots of a step see one another (M(h,c), Eq. 4)."""

    def __init__(self, model, net_input, beam, capacity, order):
        src_tokens = net_input["src_tokens"]
        encoder_out = model.encoder.forward_torchscript(
            {"src_tokens": src_tokens, "src_lengths": net_input["src_lengths"]})
        self.step_fn = DecoderStep(model.decoder)
        # rows = sentence-major beams; the beams of a sentence share its encoder keys/values (one copy)
        self.cache = self.step_fn.begin(encoder_out, capacity, group=beam)
        self.order = order
        self.z = order.z
        self._allowed = None  # the ablation orders' M(h,c) on the device, built once per batch

    def _mask(self, past, device):
        """The order's rows past..past+z of M(h,c) with its ablations, or None when all allowed
        (the plain orders: the z slots of a step see one another and every earlier slot)."""
        if not (self.order.vanilla_mask or self.order.independent_directions):
            return None
        end = past + self.z
        if self._allowed is None or self._allowed.size(0) < end:  # one host-to-device copy per batch
            self._allowed = self.order.allowed(max(end, self.cache.capacity)).to(device)
        return self._allowed[past:end, :end]

    def step(self, decoder_input):
        """decoder_input: (rows, slots so far) -> log-probs (rows, z, V) of the last z slots, fp32."""
        past = self.cache.max_length
        tokens = decoder_input[:, -self.z:]
        slots = torch.arange(past, past + self.z, device=tokens.device)
        logits, _ = self.step_fn(self.cache, tokens, slots, causal=False, attn_mask=self._mask(past, tokens.device))
        self.cache.advance(self.z)
        return DecoderStep.log_probs(logits)

    def reorder(self, rows, shrink=False):
        if shrink:  # finished sentences left the batch
            self.cache.select_rows(rows)
        else:
            self.cache.reorder(rows)


class MultiTokenBeamSearch:
    """fairseq-generate compatible generator for models trained in a generation order."""

    def __init__(self, order, tgt_dict, beam_size=4, max_len_a=0.0, max_len_b=200, lenpen=1.0,
                 double_topk=False, max_positions=None, min_len=1):
        if double_topk and (order.h != 2 or order.c != 1):
            raise OrderError("--double-topk needs h=2, c=1 (Imamura & Sumita's pairs)")
        self.order, self.tgt_dict = order, tgt_dict
        self.eos, self.pad = tgt_dict.eos(), tgt_dict.pad()
        self.beam_size, self.lenpen, self.double_topk = int(beam_size), float(lenpen), bool(double_topk)
        self.max_len_a, self.max_len_b, self.max_positions = max_len_a, max_len_b, max_positions
        self.min_len = int(min_len)
        self.reset_stats()

    def reset_stats(self):
        self.stats = {"model_calls": 0, "steps": 0}

    # ---- fairseq-generate entry point ----
    @inference_generate
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **kwargs):
        if len(models) != 1:
            raise ValueError("the multi-token beam search decodes with one model; pass a single --path "
                             "(average checkpoints with scripts/average_checkpoints.py for an ensemble)")
        if prefix_tokens is not None or constraints is not None:
            raise ValueError("--prefix-size and --constraints are not supported with --target-order "
                             "(a prefix is not a prefix in a reordered target)")
        model = models[0]
        net_input = sample["net_input"]
        src_lengths = net_input["src_lengths"]
        max_len = int(self.max_len_a * int(src_lengths.max()) + self.max_len_b)
        limit = self.max_positions if self.max_positions is not None else model.max_decoder_positions()
        max_len = max(0, min(max_len, limit - 1))
        if self.min_len > max_len:
            raise ValueError(f"--min-len {self.min_len} exceeds the maximum length {max_len}; lower --min-len or "
                             "raise --max-len-a/--max-len-b")
        stepper = ModelStepper(model, net_input, self.beam_size, (max_len // self.order.z + 1) * self.order.z,
                               self.order)
        return self.search(stepper, src_lengths.size(0), max_len, src_lengths.device)

    # ---- the search ----
    def search(self, stepper, bsz, max_len, device):
        """Batched beam search over any ``stepper`` with ``step(decoder_input)`` and ``reorder(rows)``;
        hypotheses keep at most ``max_len`` natural tokens (+ EOS), as fairseq's."""
        B, z, eos = self.beam_size, self.order.z, self.eos
        max_steps = max_len // z + 1  # enough slots for any natural length <= max_len
        width = max_steps * z
        # finalized hypotheses: B slots per sentence plus one trash slot for masked writes
        fin_tokens = torch.full((bsz * (B + 1), width), self.pad, dtype=torch.long, device=device)
        fin_lp = torch.zeros(bsz * (B + 1), width, device=device)
        fin_score = torch.full((bsz * (B + 1),), -math.inf, device=device)
        fin_slots = torch.zeros(bsz * (B + 1), dtype=torch.long, device=device)
        fin_count = torch.zeros(bsz, dtype=torch.long, device=device)

        sent = torch.arange(bsz, device=device)  # original sentence of every active sentence
        scores = torch.full((bsz, B), -math.inf, device=device)
        scores[:, 0] = 0.0  # one live hypothesis per sentence at the start (Alg. 1 line 1)
        decoder_input = torch.full((bsz * B, z), eos, dtype=torch.long, device=device)  # z start symbols
        hist_lp = torch.zeros(bsz * B, 0, device=device)
        for step in range(max_steps):
            lprobs = stepper.step(decoder_input)
            self.stats["model_calls"] += 1
            self.stats["steps"] += 1
            n = sent.size(0)
            lprobs = lprobs.view(n, B, z, -1)
            lprobs[..., self.pad] = -math.inf
            if step * z < self.min_len:
                lprobs = self._forbid_early_end(lprobs, step)
            if step == max_steps - 1:
                lprobs = self._force_end(lprobs, max_len - step * z)
            cand_score, cand_beam, cand_tok, cand_lp = (
                self._double_topk(scores, lprobs) if self.double_topk else self._outer_topk(scores, lprobs))
            K = cand_score.size(1)
            finished = cand_tok.eq(eos).any(-1)
            # ---- finalize finished candidates ranked in the top B ----
            top = slice(0, B)
            fin_now = finished[:, top] & torch.isfinite(cand_score[:, top])
            slot = fin_count[:, None] + fin_now.long().cumsum(1) - 1
            write = fin_now & (slot < B)
            target = sent[:, None] * (B + 1) + torch.where(write, slot, torch.full_like(slot, B))
            rows = torch.arange(n, device=device)[:, None] * B + cand_beam[:, top]
            prev_tok = decoder_input[:, z:].index_select(0, rows.view(-1))
            fin_tokens.index_copy_(0, target.view(-1), torch.nn.functional.pad(
                torch.cat([prev_tok, cand_tok[:, top].reshape(n * B, z)], 1), (0, width - (step + 1) * z),
                value=self.pad))
            fin_lp.index_copy_(0, target.view(-1), torch.nn.functional.pad(
                torch.cat([hist_lp.index_select(0, rows.view(-1)), cand_lp[:, top].reshape(n * B, z)], 1),
                (0, width - (step + 1) * z)))
            kept = step * z + self._kept_in_group(cand_tok[:, top])
            fin_score.index_copy_(0, target.view(-1),
                                  (cand_score[:, top] / (kept + 1).float() ** self.lenpen).reshape(-1))
            fin_slots.index_copy_(0, target.view(-1), torch.full_like(target.view(-1), (step + 1) * z))
            fin_count = fin_count + write.long().sum(1)
            # ---- continue with the best B unfinished candidates (Imamura lines 13-19) ----
            open_score = cand_score.masked_fill(finished, -math.inf)
            if K < B:
                open_score = torch.nn.functional.pad(open_score, (0, B - K), value=-math.inf)
            scores, pick = open_score.topk(B, dim=1)
            pick = pick.clamp(max=K - 1)
            beam_rows = (torch.arange(n, device=device)[:, None] * B + cand_beam.gather(1, pick)).view(-1)
            new_tok = cand_tok.gather(1, pick[..., None].expand(-1, -1, z)).view(n * B, z)
            new_lp = cand_lp.gather(1, pick[..., None].expand(-1, -1, z)).view(n * B, z)
            done = fin_count.ge(B) | ~torch.isfinite(scores).any(1)
            live = (~done).nonzero().view(-1)  # the one host sync of the step
            if live.numel() == 0:
                break
            if live.numel() < n:  # finished sentences leave the batch
                keep = (live[:, None] * B + torch.arange(B, device=device)).view(-1)
                beam_rows, new_tok, new_lp = beam_rows[keep], new_tok[keep], new_lp[keep]
                scores, sent, fin_count = scores[live], sent[live], fin_count[live]
            stepper.reorder(beam_rows, shrink=live.numel() < n)
            decoder_input = torch.cat([decoder_input.index_select(0, beam_rows), new_tok], 1)
            hist_lp = torch.cat([hist_lp.index_select(0, beam_rows), new_lp], 1)
        return self._hypotheses(bsz, fin_tokens, fin_lp, fin_score, fin_slots)

    def _outer_topk(self, scores, lprobs):
        """IBDecoder Alg. 1 lines 6-8: per hypothesis top-B per slot, outer addition, top-B groups."""
        n, B, z, _ = lprobs.shape
        top_lp, top_idx = lprobs.topk(B, dim=-1)  # (n, B, z, B)
        group = top_lp[:, :, 0, :]  # (n, B, B) partial sums
        choice = torch.arange(B, device=lprobs.device).view(1, 1, B, 1).expand(n, B, B, 1)
        for i in range(1, z):
            total = (group[..., :, None] + top_lp[:, :, i, None, :]).view(n, B, B * B)
            group, idx = total.topk(B, dim=-1)
            prev = torch.div(idx, B, rounding_mode="floor")
            choice = torch.cat([choice.gather(2, prev[..., None].expand(-1, -1, -1, i)), (idx % B)[..., None]], -1)
        gather = choice.permute(0, 1, 3, 2)  # (n, B, z, B)
        tok = top_idx.gather(-1, gather).permute(0, 1, 3, 2)  # (n, B, B, z)
        lp = top_lp.gather(-1, gather).permute(0, 1, 3, 2)
        total = (scores[:, :, None] + group).view(n, B * B)
        cand_score, order = total.sort(dim=1, descending=True)
        cand_beam = torch.div(order, B, rounding_mode="floor")
        pick = order[..., None].expand(-1, -1, z)
        return cand_score, cand_beam, tok.reshape(n, B * B, z).gather(1, pick), lp.reshape(n, B * B, z).gather(1, pick)

    def _double_topk(self, scores, lprobs):
        """Imamura & Sumita Alg. 1 DOUBLETOPK: top 2W left tokens over the beam, then top 3W pairs.

        Without the (n, 2W, V) pair table: a right token can only be among the best 3W pairs if it
        is among the best 3W right tokens of its beam (the right log-probs depend on the beam only),
        so each beam's top-3W right tokens are taken first and the 2W x 3W sums ranked (exact)."""
        n, W, _, V = lprobs.shape
        left_lp, right_lp = lprobs[:, :, 0, :], lprobs[:, :, 1, :]
        left_score, left_idx = (scores[:, :, None] + left_lp).view(n, W * V).topk(min(2 * W, W * V), dim=1)
        left_beam = torch.div(left_idx, V, rounding_mode="floor")
        left_tok = left_idx % V
        R = min(3 * W, V)
        r_lp, r_tok = right_lp.topk(R, dim=-1)  # (n, W, R)
        pairs = left_score[..., None] + r_lp.gather(1, left_beam[..., None].expand(-1, -1, R))  # (n, 2W, R)
        cand_score, idx = pairs.view(n, -1).topk(min(3 * W, pairs[0].numel()), dim=1)
        j = torch.div(idx, R, rounding_mode="floor")
        beam = left_beam.gather(1, j)
        ltok = left_tok.gather(1, j)
        at = beam * R + idx % R
        right_tok = r_tok.reshape(n, W * R).gather(1, at)
        rlp = r_lp.reshape(n, W * R).gather(1, at)
        # left log-probs read from the contiguous (n, W, 2, V) table: no copy of the strided left half
        llp = lprobs.reshape(n, W * 2 * V).gather(1, beam * (2 * V) + ltok)
        return cand_score, beam, torch.stack([ltok, right_tok], -1), torch.stack([llp, rlp], -1)

    def _forbid_early_end(self, lprobs, step):
        """``--min-len`` (fairseq: no EOS before min_len tokens): an end marker at offset i of a
        segment's part of the group keeps at least ``step*z + i`` natural tokens, so it is forbidden
        where that is below min_len (exact for one segment, conservative for multi_segment).  In
        place: ``lprobs`` is the step's own fresh tensor (a copy cost ~2% of a beam-10 row)."""
        w = self.order.width
        for j in range(self.order.z):
            if step * self.order.z + j % w < self.min_len:
                lprobs[:, :, j, self.eos] = -math.inf
        return lprobs

    def _force_end(self, lprobs, room):
        """Length limit (fairseq forces EOS at max_len): in the last group at most ``room`` < z
        tokens may be kept, spread over the segments; the next slot of each segment becomes EOS,
        so every candidate of the last step is finished.  In place, as ``_forbid_early_end``."""
        S, w = self.order.segments, self.order.width
        for seg in range(S):
            keep = room // S + (1 if seg < room % S else 0)
            if keep < w:
                eos_lp = lprobs[:, :, seg * w + keep, self.eos].clone()  # kept, as fairseq keeps it
                lprobs[:, :, seg * w + keep, :] = -math.inf
                lprobs[:, :, seg * w + keep, self.eos] = eos_lp
        return lprobs

    def _kept_in_group(self, group_tokens):
        """Tokens of a final group kept by ``order.restore``: each segment's tokens before its
        first end marker (the rest of the group is dropped)."""
        n, k, z = group_tokens.shape
        not_end = group_tokens.ne(self.eos).view(n, k, self.order.segments, self.order.width)
        return not_end.long().cumprod(-1).sum(-1).sum(-1)

    def _hypotheses(self, bsz, fin_tokens, fin_lp, fin_score, fin_slots):
        """Host side, once per batch: restore natural order and build fairseq's hypothesis dicts."""
        B = self.beam_size
        tokens, lps = fin_tokens.view(bsz, B + 1, -1)[:, :B].cpu(), fin_lp.view(bsz, B + 1, -1)[:, :B].cpu()
        score, slots = fin_score.view(bsz, B + 1)[:, :B].cpu(), fin_slots.view(bsz, B + 1)[:, :B].cpu()
        device = fin_tokens.device
        out = []
        for s in range(bsz):
            hypos = []
            for j in sorted(range(B), key=lambda j: -float(score[s, j])):
                if not math.isfinite(float(score[s, j])):
                    continue
                gen, lp = tokens[s, j, :slots[s, j]], lps[s, j, :slots[s, j]]
                index = torch.tensor(self.order.restore_index(gen, self.eos), dtype=torch.long, device="cpu")
                nat_lp = lp[index]
                hypos.append({
                    "tokens": torch.cat([gen[index], torch.tensor([self.eos], device="cpu")]).to(device),
                    "score": score[s, j].to(device),
                    "positional_scores": torch.cat([nat_lp, (lp.sum() - nat_lp.sum()).view(1)]).to(device),
                    "attention": None,
                    "alignment": None,
                    "generation_tokens": gen.to(device),  # raw generation order, for checks/analysis
                })
            out.append(hypos)
        return out


def build_multi_token_generator(task, models, args):
    """The generator ``FastTranslationTask.build_generator`` returns for a reordered model."""
    if getattr(args, "sampling", False):
        raise ValueError("--sampling is not supported by the multi-token beam search; drop it")
    order = getattr(models[0], "generation_order", None) or task.order
    return MultiTokenBeamSearch(
        order, task.target_dictionary, beam_size=getattr(args, "beam", 4),
        max_len_a=getattr(args, "max_len_a", 0), max_len_b=getattr(args, "max_len_b", 200),
        lenpen=getattr(args, "lenpen", 1.0), double_topk=getattr(task.cfg, "double_topk", False),
        min_len=getattr(args, "min_len", 1) or 1)
