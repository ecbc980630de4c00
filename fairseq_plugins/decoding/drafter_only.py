"""The drafter alone (``--acceptance all``): GAD's "NAR drafter" row (Xia et al., Table 5/14).

The drafter decodes block by block from its own output: ``[BOS, prefix, MASK x k]`` -> ``k``
tokens, all kept, until an EOS (cut there) or fairseq's maximum length (EOS forced there).  With
``k`` above the output length this is one-shot NAR decoding; shorter blocks iterate (the paper
reports 1.6 iterations at ``k = 25`` on WMT14).  The verifier is never called: this row measures
what the drafter proposes, not an accelerated verifier, and is not lossless.

It is the engine's generator (same options, length formula, hypotheses and stats) with its loop
replaced by the drafter-only one; ``model_calls`` counts drafter decoder calls and ``mean
accepted`` the tokens kept per row and call.  Scores are the drafter's log-probabilities.
"""
from typing import Dict, List, Optional

import torch

from fairseq_plugins.decoding.drafters import DraftContext
from fairseq_plugins.decoding.engine import DraftVerifyGenerator, DraftVerifyOptionError


class DrafterOnlyGenerator(DraftVerifyGenerator):
    def __init__(self, models, tgt_dict, drafter, acceptance, **kw):
        super().__init__(models, tgt_dict, drafter, acceptance, **kw)
        if not getattr(drafter, "standalone", False):
            raise DraftVerifyOptionError(
                f"--acceptance all decodes with the drafter alone, but --drafter {drafter.name} drafts from the "
                "verifier's own predictions; use it with a drafter that has its own model (--drafter nar)")
        if self.unk_penalty:
            raise DraftVerifyOptionError("--acceptance all (the drafter alone) does not support --unkpen; drop it")
        if self.temperature != 1.0:
            raise DraftVerifyOptionError("--acceptance all (the drafter alone) does not support --temperature")

    def _decode(self, net_input, src_lengths, drafter, max_len, target_length, count_stats=True):
        src_tokens = net_input["src_tokens"]
        device = src_tokens.device
        bsz = src_tokens.size(0)
        k = drafter.max_draft(max_len)
        width = max_len + k + 2
        out = torch.full((bsz, width), self.pad, dtype=torch.long, device=device)
        out[:, 0] = self.bos
        lp_out = torch.zeros(bsz, width, device=device)
        n_gen = torch.zeros(bsz, dtype=torch.long, device=device)
        rows = list(range(bsz))
        drafter.keep_scores, drafter.min_len = True, self.min_len
        drafter.begin(DraftContext(src_tokens=src_tokens, src_lengths=src_lengths, max_len=max_len, width=width,
                                   target_length=target_length, bos=self.bos, eos=self.eos, pad=self.pad))
        finalized: List[Optional[List[Dict]]] = [None] * bsz
        slots = torch.arange(k, device=device)
        calls = row_calls = 0
        while True:
            cur = n_gen.size(0)
            draft = drafter.propose(out, n_gen)
            lprob = drafter.draft_lprobs
            steps = n_gen.unsqueeze(1) + slots          # slot i is step n_gen + i (out index 1 + step)
            at_max = steps >= max_len                   # fairseq: only EOS at step max_len
            draft = draft.masked_fill(at_max, self.eos)
            is_eos = draft == self.eos
            ended = is_eos.any(dim=1)
            count = torch.where(ended, is_eos.long().argmax(dim=1) + 1, torch.full_like(n_gen, k))
            out.scatter_(1, steps + 1, draft)           # tokens after the EOS land past the row's end
            lp_out.scatter_(1, steps, lprob.masked_fill(at_max, 0.0))  # a forced EOS is scored 0
            n_gen = n_gen + count
            calls += 1
            row_calls += cur
            host = torch.cat([ended.long(), n_gen]).tolist()
            done, lengths = host[:cur], host[cur:]
            if any(done):
                keep = self._finalize(done, lengths, rows, out, lp_out, finalized)
                if not keep:
                    break
                # the rows going on, in order, from the device's own flags: no host-to-device copy
                keep_t = torch.sort(ended.long(), stable=True).indices[: len(keep)]
                drafter.select_rows(keep_t)
                out, lp_out, n_gen = (t.index_select(0, keep_t) for t in (out, lp_out, n_gen))
                rows = [rows[i] for i in keep]
        stats = self.stats
        stats["model_calls"] += calls
        if count_stats:
            produced = sum(len(h[0]["tokens"]) for h in finalized)
            stats["iterations"] += row_calls
            stats["accepted_tokens"] += produced
            stats["produced_tokens"] += produced
            stats["draft_accepted"] += produced
            stats["draft_tokens"] += row_calls * k
            stats["sentences"] += bsz
        return finalized
