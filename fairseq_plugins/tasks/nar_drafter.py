"""``--task nar_drafter``: train GAD's NAR drafter (Xia et al., §3.2.1) on any corpus binarized for
the verifier.

    fairseq-train DATA --user-dir fairseq_plugins --task nar_drafter --arch nar_drafter_tiny \\
        --criterion nar_drafter_loss --block-size K [--init-encoder-from VERIFIER.pt]

* the dictionaries are the corpus's own with [MASK] appended in memory (``data.mask_dictionary``):
  every id the verifier knows is unchanged, no extra preprocessing;
* every batch, each sentence gets a fresh prefix length ``p`` uniform in ``0..m-1`` (``m`` = target
  length incl. EOS) and becomes ``[BOS, y_1..y_p, MASK x k] -> y_{p+1..p+k}`` (``data.nar_drafter_batch``;
  training batches draw ``p`` from fairseq's per-update seed, validation batches from a seed of
  their sentence ids, so the validation loss is comparable across epochs);
* the checkpoint records the block size and both dictionaries (``task_state``), so decoding can
  check that the drafter belongs to the verifier (``decoding.drafters.nar``).
"""
import logging
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from fairseq_plugins.data.mask_dictionary import MASK_SYMBOL, with_mask
from fairseq_plugins.data.nar_drafter_batch import STATE_KEY, drafter_sample
from fairseq_plugins.decoding.drafters.base import check_block_size
from fairseq_plugins.errors import PluginError

logger = logging.getLogger(__name__)


class NARDrafterOptionError(PluginError, ValueError):
    """Options or inputs the drafter task cannot work with; the message says how to fix it."""


@dataclass
class NARDrafterConfig(TranslationConfig):
    block_size: int = field(default=10, metadata={"help": "k, tokens the drafter predicts in one pass (GAD §3.2.1)"})
    init_encoder_from: Optional[str] = field(
        default=None, metadata={"help": "checkpoint of the AR verifier: initialise the drafter's encoder and "
                                "embeddings from it (GAD §3.2.1; same sizes and dictionaries needed)"})
    init_decoder: bool = field(
        default=False, metadata={"help": "with --init-encoder-from: also start the drafter's decoder layers from the "
                                 "verifier's (only the causal mask goes; our choice, not in GAD: a warm start "
                                 "that a short CPU training needs)"})
    verifier_path: Optional[str] = field(
        default=None, metadata={"help": "--arch shallow_drafter_*: the verifier the drafter drafts for; its encoder is "
                                "kept frozen and read by the drafter, its embeddings start the drafter's"})
    seed: int = II("common.seed")


@register_task("nar_drafter", dataclass=NARDrafterConfig)
class NARDrafterTask(TranslationTask):
    cfg: NARDrafterConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        check_block_size(cfg.block_size)
        if getattr(cfg, "eval_bleu", False):
            raise NARDrafterOptionError(
                "--eval-bleu decodes with fairseq's generator, which the drafter does not support; drop it "
                "(the drafter logs its per-slot accuracy; decode with --task fast_translation --drafter nar)")
        super().__init__(cfg, with_mask(src_dict), with_mask(tgt_dict))
        self.mask_idx = self.tgt_dict.index(MASK_SYMBOL)
        assert self.src_dict.index(MASK_SYMBOL) == self.mask_idx == len(self.tgt_dict) - 1

    # ---- what a checkpoint records ----
    def state_dict(self):
        state = dict(super().state_dict())
        state[STATE_KEY] = {
            "block_size": self.cfg.block_size,
            "source_symbols": list(self.src_dict.symbols),
            "target_symbols": list(self.tgt_dict.symbols),
            "data": str(self.cfg.data),
            "langs": [self.cfg.source_lang, self.cfg.target_lang],
        }
        return state

    # ---- batches: prefix + k masks ----
    def max_positions(self):
        src, tgt = super().max_positions()
        return src, tgt - self.cfg.block_size - 1  # the decoder reads BOS + up to m-1 prefix tokens + k masks

    def _drafter_sample(self, sample, generator=None):
        if not sample or sample.get("target") is None:
            return sample
        eos, pad = self.tgt_dict.eos(), self.tgt_dict.pad()
        return drafter_sample(sample, self.cfg.block_size, eos, pad, self.mask_idx, generator=generator)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if hasattr(criterion, "set_num_updates"):
            criterion.set_num_updates(update_num)  # glancing ratio annealing
        # torch's global generator: fairseq seeds it with seed + update number before every step
        return super().train_step(self._drafter_sample(sample), model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        generator = None
        if sample and "id" in sample:
            generator = torch.Generator().manual_seed(self.cfg.seed + int(sample["id"].sum()))
        return super().valid_step(self._drafter_sample(sample, generator), model, criterion)

    # ---- model ----
    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint=from_checkpoint)
        from fairseq_plugins.models.nar_drafter import NARDrafterModel
        from fairseq_plugins.models.shallow_drafter import ShallowDrafterModel

        if isinstance(model, ShallowDrafterModel):
            return self._attach_verifier(model, from_checkpoint)
        if not isinstance(model, NARDrafterModel):
            raise NARDrafterOptionError(
                f"--task nar_drafter trains --arch nar_drafter_tiny/base/big or shallow_drafter_tiny/base; got "
                f"{type(model).__name__}")
        if getattr(self.cfg, "verifier_path", None):
            raise NARDrafterOptionError("--verifier-path goes with --arch shallow_drafter_*; the full-size drafter "
                                        "starts from the verifier with --init-encoder-from VERIFIER.pt")
        init_decoder = getattr(self.cfg, "init_decoder", False)  # absent from drafters saved before the option
        if self.cfg.init_encoder_from and not from_checkpoint:
            init_encoder_from(model, self.cfg.init_encoder_from, decoder=init_decoder)
        elif init_decoder and not from_checkpoint:
            raise NARDrafterOptionError("--init-decoder copies the verifier's decoder: give the verifier with "
                                        "--init-encoder-from VERIFIER.pt")
        return model

    def _attach_verifier(self, model, from_checkpoint):
        """The shallow drafter reads the frozen verifier's encoder (a drafter loaded for decoding reads the
        engine's: nothing to attach)."""
        if from_checkpoint:
            return model
        if self.cfg.init_encoder_from or getattr(self.cfg, "init_decoder", False):
            raise NARDrafterOptionError("--arch shallow_drafter_* has no encoder or decoder to initialise: give the "
                                        "verifier with --verifier-path VERIFIER.pt instead of --init-encoder-from")
        if not getattr(self.cfg, "verifier_path", None):
            raise NARDrafterOptionError("--arch shallow_drafter_* reads its verifier's encoder: give the verifier "
                                        "checkpoint with --verifier-path VERIFIER.pt")
        from fairseq import checkpoint_utils

        try:
            verifiers, _ = checkpoint_utils.load_model_ensemble(
                [self.cfg.verifier_path], arg_overrides={"data": str(self.cfg.data)})
        except FileNotFoundError:
            raise NARDrafterOptionError(f"--verifier-path {self.cfg.verifier_path}: no such checkpoint") from None
        model.attach_verifier(verifiers[0], initialise=True)
        logger.info(f"shallow drafter: reads the frozen encoder of {self.cfg.verifier_path}")
        return model

    def build_generator(self, models, args, *unused, **kwargs):
        raise NARDrafterOptionError(
            "the NAR drafter is decoded through the draft-and-verify engine: fairseq-generate DATA --task "
            "fast_translation --path VERIFIER.pt --drafter nar --drafter-path DRAFTER.pt --block-size K "
            "(--acceptance all for the drafter alone)")


def init_encoder_from(model, path, decoder=False):
    """Copy the verifier's encoder (and token embeddings) into the drafter (GAD §3.2.1); with
    ``decoder``, its decoder layers too (every decoder tensor the two models share by name and shape).

    The drafter's embedding matrices have one row more (the [MASK]); the verifier's rows are
    copied into the first ones, the mask row keeps its fresh initialisation."""
    from fairseq import checkpoint_utils

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except FileNotFoundError:
        raise NARDrafterOptionError(f"--init-encoder-from {path}: no such checkpoint") from None
    theirs = state["model"]
    ours = model.state_dict()  # tensors sharing the parameters' storage: copy_ writes the model
    copied, problems = [], []
    wanted = [n for n in ours if n.startswith("encoder.")]
    wanted += [n for n in ("decoder.embed_tokens.weight", "decoder.output_projection.weight") if n in ours]
    if decoder:
        wanted += [n for n in ours if n.startswith("decoder.") and n not in wanted and n in theirs
                   and not n.endswith("_float_tensor")]
    for name in wanted:
        if name not in theirs:
            if name.startswith("encoder.") and not name.endswith("_float_tensor"):
                problems.append(f"{name} missing")
            continue
        src, dst = theirs[name], ours[name]
        if src.shape == dst.shape:
            dst.copy_(src)
        elif name.endswith("embed_tokens.weight") or name.endswith("output_projection.weight"):
            if src.dim() != 2 or src.size(1) != dst.size(1) or src.size(0) != dst.size(0) - 1:
                problems.append(f"{name} {tuple(src.shape)} vs {tuple(dst.shape)} (drafter incl. {MASK_SYMBOL})")
                continue
            dst[: src.size(0)].copy_(src)
        else:
            problems.append(f"{name} {tuple(src.shape)} vs {tuple(dst.shape)}")
            continue
        copied.append(name)
    if problems or not copied:
        raise NARDrafterOptionError(
            f"--init-encoder-from {path}: the verifier's encoder does not fit the drafter's "
            f"({'; '.join(problems[:5]) or 'no encoder weights found'}); give the drafter the verifier's encoder "
            "sizes (--encoder-embed-dim/-layers/-ffn-embed-dim/-attention-heads) and train it on the verifier's corpus")
    logger.info(f"initialised {len(copied)} encoder/{'decoder/' if decoder else ''}embedding tensors of the drafter "
                f"from {path}")
