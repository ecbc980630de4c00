"""``--criterion blockwise_cross_entropy``: the training loss of blockwise heads (Stern et al. 2018 §6).

Head ``i`` at target position ``t`` (fed ``y_0..y_t``, ``y_0`` = BOS) predicts ``y_{t+i}``: its target
is fairseq's target shifted left by ``i - 1``; the last ``i - 1`` positions of every sentence have
no token to predict and are padding (ignored), so EOS is a target of every head exactly once.
Each head's loss is fairseq's label-smoothed cross entropy (``label_smoothed_nll_loss``,
``--label-smoothing`` as ``label_smoothed_cross_entropy``).

``--head-loss mean`` optimises the mean of the heads' losses; ``--head-loss random`` one head drawn
uniformly per batch, an unbiased estimate of the mean that needs the logits of one head only (the
paper's memory saver, §6; validation always uses the mean).  The draw uses torch's global
generator, which fairseq's trainer reseeds with ``--seed`` + the update number before every step
(``Trainer._set_seed``), so a run and a resumed run draw the same heads.  Trained heads are ``1..k``, or ``2..k`` when the base is frozen
(``--freeze-base``: head 1 is the frozen base itself and has nothing to train).

``--base-loss-weight w`` (fine-tuning only; our choice beyond Stern, whose mean is ``w = 1/k``)
optimises ``w L_1 + (1 - w) mean_{i>=2} L_i``: the base's own next-token loss keeps the weight ``w``.
At d = 128 the mean cost the fine-tuned en-de model 10 BLEU (41.2 -> 30.7 at 2,000 updates; Stern's
models lose < 1), the heads' losses pulling the shared decoder away from the next token; w = 0.75 kept
39.4 at 1,000 updates (the mean: 28.6) for 1.34 accepted tokens per call (the mean: 1.45).

Every head's loss is logged as ``loss_h<i>`` / ``nll_loss_h<i>`` (base 2, per target token of that
head), so ``fairseq-train`` prints them; ``loss`` / ``nll_loss`` are the optimised objective.
"""
import math
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion, LabelSmoothedCrossEntropyCriterionConfig, label_smoothed_nll_loss)
from fairseq.logging import metrics

from fairseq_plugins.errors import PluginError

HEAD_LOSSES = ("mean", "random")


@dataclass
class BlockwiseCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    head_loss: str = field(
        default="mean", metadata={"help": "mean: the mean of the heads' losses; random: one head drawn uniformly "
                                  "per batch (Stern §6's memory saver)"})
    base_loss_weight: Optional[float] = field(
        default=None, metadata={"help": "fine-tuning: weight w of the base's own loss (head 1), the heads 2..k "
                                "sharing 1 - w (default: the mean, w = 1/k, Stern §6)"})


class BlockwiseCriterionError(PluginError, ValueError):
    """The criterion cannot train this model/task; the message says how to fix it."""


def head_target(target: torch.Tensor, head: int, pad: int) -> torch.Tensor:
    """Target of head ``head`` (1-based) for fairseq's right-padded ``target`` ``(B, T)``:
    position ``t`` gets ``y_{t+head}`` = ``target[:, t + head - 1]``, PAD past the end."""
    if head == 1:
        return target
    shifted = target.new_full(target.shape, pad)
    shifted[:, : max(0, target.size(1) - head + 1)] = target[:, head - 1 :]
    return shifted


@register_criterion("blockwise_cross_entropy", dataclass=BlockwiseCrossEntropyConfig)
class BlockwiseCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 head_loss="mean", base_loss_weight=None):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if head_loss not in HEAD_LOSSES:
            raise BlockwiseCriterionError(f"--head-loss {head_loss!r} is unknown; choose mean or random")
        if base_loss_weight is not None:
            if not 0.0 < base_loss_weight < 1.0:
                raise BlockwiseCriterionError(f"--base-loss-weight must lie strictly between 0 and 1 (got "
                                              f"{base_loss_weight}): the base and the heads both need a share")
            if head_loss != "mean":
                raise BlockwiseCriterionError("--base-loss-weight weighs every head's loss in each batch: use it "
                                              "with --head-loss mean")
        if ignore_prefix_size:
            raise BlockwiseCriterionError("blockwise_cross_entropy does not support --ignore-prefix-size")
        if getattr(getattr(task, "cfg", None), "left_pad_target", False):
            raise BlockwiseCriterionError("blockwise_cross_entropy shifts right-padded targets: drop --left-pad-target")
        self.head_loss, self.base_loss_weight = head_loss, base_loss_weight

    def trained_heads(self, model):
        if getattr(model, "block_heads", None) is None:
            raise BlockwiseCriterionError(
                f"--criterion blockwise_cross_entropy trains blockwise heads: use --arch blockwise_transformer "
                f"(got {type(model).__name__})")
        k = model.num_block_heads
        frozen = not any(p.requires_grad for p in model.decoder.parameters())
        if frozen and self.base_loss_weight is not None:
            raise BlockwiseCriterionError("--base-loss-weight weighs the base's own loss, which a frozen base "
                                          "(--freeze-base) does not train: drop one of the two")
        return list(range(2 if frozen else 1, k + 1))

    def forward(self, model, sample, reduce=True):
        heads = self.trained_heads(model)
        k = model.num_block_heads
        drawing = self.head_loss == "random" and model.training  # validation: the mean (a stable best checkpoint)
        chosen = [heads[int(torch.randint(len(heads), (1,)))]] if drawing else heads
        logged = set(chosen) if drawing else set(chosen) | {1}  # head 1 = the base's own loss, for reference
        features, extra = model(**sample["net_input"], features_only=True)
        target = model.get_targets(sample, (features, extra))
        losses, nll_losses, logging_output = [], [], {}
        for head in range(1, k + 1):
            if head not in logged:
                loss_i = nll_i = torch.zeros((), device=features.device)
                n_i = 0
            else:
                with torch.set_grad_enabled(torch.is_grad_enabled() and head in chosen):
                    loss_i, nll_i, n_i = self.head_loss_of(model, features, extra, target, head, reduce)
                if head in chosen:
                    losses.append(loss_i)
                    nll_losses.append(nll_i)
            logging_output[f"loss_h{head}"] = loss_i.data
            logging_output[f"nll_loss_h{head}"] = nll_i.data
            logging_output[f"ntokens_h{head}"] = n_i
        loss, nll_loss = self.objective(losses, chosen), self.objective(nll_losses, chosen)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output.update({
            "loss": loss.data, "nll_loss": nll_loss.data, "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0), "sample_size": sample_size,
        })
        return loss, sample_size, logging_output

    def objective(self, losses, heads):
        """The mean of the ``heads``' ``losses``; with ``--base-loss-weight w``, ``w`` x head 1's plus
        ``1 - w`` x the mean of the others'."""
        if self.base_loss_weight is None or heads[0] != 1 or len(heads) < 2:
            return sum(losses) / len(losses)
        w = self.base_loss_weight
        return w * losses[0] + (1.0 - w) * sum(losses[1:]) / (len(losses) - 1)

    def head_loss_of(self, model, features, extra, target, head, reduce=True):
        """Label-smoothed loss, NLL and number of target tokens of one head."""
        logits = model.head_logits(features, head)
        lprobs = model.get_normalized_probs((logits, extra), log_probs=True)
        tgt = head_target(target, head, self.padding_idx)
        loss, nll = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), tgt.reshape(-1), self.eps,
                                            ignore_index=self.padding_idx, reduce=reduce)
        return loss, nll, int(tgt.ne(self.padding_idx).sum())

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        keys = {key for log in logging_outputs for key in log if key.startswith("ntokens_h")}
        for head in sorted(int(key[len("ntokens_h"):]) for key in keys):
            n = utils.item(sum(log.get(f"ntokens_h{head}", 0) for log in logging_outputs))
            if n > 0:  # --head-loss random: heads not drawn in these batches are not logged
                loss = utils.item(sum(log.get(f"loss_h{head}", 0) for log in logging_outputs))
                nll = utils.item(sum(log.get(f"nll_loss_h{head}", 0) for log in logging_outputs))
                metrics.log_scalar(f"loss_h{head}", loss / n / math.log(2), n, round=3)
                metrics.log_scalar(f"nll_loss_h{head}", nll / n / math.log(2), n, round=3)
