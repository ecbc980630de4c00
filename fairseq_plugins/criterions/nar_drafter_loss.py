"""``--criterion nar_drafter_loss``: GAD's drafter objective (Xia et al. §3.2.1, L_NAR) with label
smoothing (fairseq's ``label_smoothed_nll_loss``) and glancing (GLAT, Qian et al. 2021).

Glancing, as GLAT §3 (training only):

1. a first decoder pass over ``[BOS, prefix, MASK x k]`` without gradient;
2. its Hamming distance to the targets ``d`` (real target slots only) decides how many target
   tokens are revealed: ``N = floor(ratio * d)``, chosen uniformly among the block's real slots,
   and written into the decoder input in place of their [MASK];
3. the second pass, with gradient, is scored on the slots that stayed masked.

The ratio is annealed linearly from ``--glancing-ratio`` to ``--glancing-ratio-end`` over
``--glancing-anneal-updates`` updates (GLAT: 0.5 -> 0.3); ``--glancing-ratio 0`` turns glancing off.
The encoder runs once per batch; both decoder passes read its output (and, for a shallow drafter
with ``--verifier-features``, the frozen verifier's hidden states over the prefix, also computed once).

Logged: ``loss``/``nll_loss`` (base 2, per scored token) and, from the all-[MASK] pass (what
decoding sees), the accuracy of each of the k slots (``acc1``..``accK``, %) and ``prefix``: the
mean number of leading slots that are all correct -- the number of draft tokens an exact-match
verifier holding the reference would accept.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.dataclass import FairseqDataclass

from fairseq_plugins.errors import OptionError


@dataclass
class NARDrafterLossConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.1, metadata={"help": "epsilon for label smoothing, 0 = none"})
    glancing_ratio: float = field(default=0.5, metadata={"help": "GLAT sampling ratio at update 0 (0 = no glancing)"})
    glancing_ratio_end: float = field(default=0.3, metadata={"help": "GLAT sampling ratio after the annealing"})
    glancing_anneal_updates: int = field(
        default=300000, metadata={"help": "updates over which the ratio goes linearly from start to end"})


def glancing_ratio(start: float, end: float, anneal_updates: int, num_updates: int) -> float:
    if anneal_updates <= 0:
        return end
    t = min(1.0, max(0, num_updates) / anneal_updates)
    return start + (end - start) * t


def glancing_reveal(pred, target, pad: int, ratio: float, generator=None):
    """Bool ``(B, k)``: the target slots to reveal, ``floor(ratio * hamming(pred, target))`` per row,
    uniformly among the row's real (non-PAD) slots (GLAT Eq. 4-5)."""
    real = target.ne(pad)
    wrong = (pred.ne(target) & real).long().sum(dim=1)
    n_reveal = torch.floor(wrong.double() * ratio).long()
    score = torch.rand(target.shape, generator=generator, device="cpu").to(target.device)
    score = score.masked_fill(~real, 2.0)  # PAD slots sort after every real one
    rank = score.argsort(dim=1).argsort(dim=1)
    return rank < n_reveal.unsqueeze(1)


@register_criterion("nar_drafter_loss", dataclass=NARDrafterLossConfig)
class NARDrafterLoss(FairseqCriterion):
    def __init__(self, task, label_smoothing=0.1, glancing_ratio=0.5, glancing_ratio_end=0.3,
                 glancing_anneal_updates=300000):
        super().__init__(task)
        if not 0 <= label_smoothing < 1:
            raise OptionError(f"--label-smoothing must be in [0, 1) (got {label_smoothing})")
        for name, r in (("--glancing-ratio", glancing_ratio), ("--glancing-ratio-end", glancing_ratio_end)):
            if not 0 <= r <= 1:
                raise OptionError(f"{name} must be in [0, 1] (got {r})")
        if not hasattr(task, "mask_idx"):
            raise OptionError("--criterion nar_drafter_loss goes with --task nar_drafter")
        self.eps = label_smoothing
        self.ratio_start, self.ratio_end, self.anneal = glancing_ratio, glancing_ratio_end, glancing_anneal_updates
        self.mask = task.mask_idx
        self.num_updates = 0

    def set_num_updates(self, num_updates):
        self.num_updates = num_updates

    def current_ratio(self):
        if self.ratio_start == 0:
            return 0.0
        return glancing_ratio(self.ratio_start, self.ratio_end, self.anneal, self.num_updates)

    def forward(self, model, sample, reduce=True):
        net = sample["net_input"]
        target = sample["target"]  # (B, k)
        k = target.size(1)
        prev = net["prev_output_tokens"]
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        extra = {}
        if getattr(model, "reads_verifier_features", False):  # the shallow drafter's --verifier-features
            # the frozen verifier's states over the prefix, once: both passes read them (glancing fills only mask slots)
            extra["verifier_features"] = model.verifier_states(prev, encoder_out, k)
        ratio = self.current_ratio() if model.training else 0.0
        if ratio > 0:
            with torch.no_grad():
                first = model.decoder(prev, encoder_out=encoder_out, block=k, **extra)[0]
            pred = first.argmax(dim=-1)
            reveal = glancing_reveal(pred, target, self.padding_idx, ratio)
            glanced = prev.clone()
            glanced[:, -k:] = torch.where(reveal, target, prev[:, -k:])
            logits = model.decoder(glanced, encoder_out=encoder_out, block=k, **extra)[0]
            scored = target.masked_fill(reveal, self.padding_idx)  # revealed slots are inputs, not targets
        else:
            logits = model.decoder(prev, encoder_out=encoder_out, block=k, **extra)[0]
            pred = logits.detach().argmax(dim=-1)
            scored = target
        lprobs = F.log_softmax(logits.float(), dim=-1)
        # a drafter with a smaller output vocabulary (shallow drafter, --draft-vocab) is not scored on the rest
        scored = scored.masked_fill(scored >= lprobs.size(-1), self.padding_idx)
        loss, nll_loss = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), scored.reshape(-1), self.eps,
                                                 ignore_index=self.padding_idx, reduce=reduce)
        sample_size = int(scored.ne(self.padding_idx).sum())
        real = target.ne(self.padding_idx)
        correct = pred.eq(target) & real
        prefix = correct.long().cumprod(dim=1).sum(dim=1)
        logging_output = {
            "loss": loss.data, "nll_loss": nll_loss.data, "ntokens": sample["ntokens"],
            "nsentences": target.size(0), "sample_size": sample_size, "glancing_ratio": ratio * target.size(0),
            "prefix_sum": int(prefix.sum()), "block_size": k,
        }
        counts = torch.stack([correct.long().sum(dim=0), real.long().sum(dim=0)]).tolist()
        for i in range(k):
            logging_output[f"correct{i + 1}"] = counts[0][i]
            logging_output[f"total{i + 1}"] = counts[1][i]
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        nsentences = total("nsentences")
        loss, nll = total("loss"), total("nll_loss")
        if sample_size > 0:
            metrics.log_scalar("loss", loss / sample_size / math.log(2), sample_size, round=3)
            metrics.log_scalar("nll_loss", nll / sample_size / math.log(2), sample_size, round=3)
            metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        if nsentences > 0:
            metrics.log_scalar("prefix", total("prefix_sum") / nsentences, nsentences, round=2)
            metrics.log_scalar("glat", total("glancing_ratio") / nsentences, nsentences, round=3)
        k = max((log.get("block_size", 0) for log in logging_outputs), default=0)
        for i in range(1, k + 1):
            t = total(f"total{i}")
            if t > 0:
                metrics.log_scalar(f"acc{i}", 100.0 * total(f"correct{i}") / t, t, round=1)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return False  # block_size is a max, not a sum
