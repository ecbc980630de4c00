"""``--arch blockwise_transformer``: k-head output layer on a trained transformer (Stern, Shazeer &
Uszkoreit 2018, "Blockwise Parallel Decoding for Deep Autoregressive Models", §4 and §6).

The model wraps any checkpoint of fairseq's ``transformer`` family given by ``--base-checkpoint``:
its architecture arguments are read from the checkpoint and its weights (encoder, decoder,
embeddings) loaded when the model is built for training.  After the last decoder layer one
feed-forward layer produces the proposals of heads ``p_2..p_k`` (§6, Figure 3)::

    h        = act(W1 x + b1)                       hidden size k * d_ffn
    x_i      = x + (W2 h + b2)[block i]             i = 2..k, residual from the decoder output
    logits_i = output_projection(x_i)               the base's shared vocabulary projection

Head 1 is the base model's own prediction through the identity path (footnote 1), so
``model.decoder`` *is* the base decoder: fairseq's greedy/beam search and the draft-and-verify
engine's verifier read it unchanged, and a frozen base keeps its greedy output exactly.

The saved checkpoint holds the base's architecture arguments and weights, so it decodes on its own
(the ``--base-checkpoint`` file is only read when training starts).  The exception is a frozen-base
checkpoint packed into the repository's ``models/`` beside its base (``scripts/lab/evaluation/reference_models.py``):
it keeps the heads only, names the base (``base_checkpoint``, relative to ``models/``) with its
sha256, and loading takes the base's weights from there (:func:`shipped_base_state`).  ``--freeze-base`` sets
``requires_grad=False`` on every base parameter: fairseq's trainer builds its optimizer from the
parameters that require gradients, so only the heads are updated (Stern §6.1 "frozen"); without it
the whole model is fine-tuned (§6.1 "fine tuning").
"""
import argparse
import logging
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import checkpoint_utils, utils
from fairseq.models import ARCH_MODEL_REGISTRY, register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel, base_architecture
from fairseq.modules import FairseqDropout

from fairseq_plugins.errors import PluginError

logger = logging.getLogger(__name__)


class BlockwiseModelError(PluginError, ValueError):
    """A blockwise model cannot be built from these arguments; the message says how to fix it."""


HEADS = "block_heads."  # the heads' parameters; every other entry of a state dict is the base's
REPOSITORY_MODELS = Path(__file__).resolve().parents[2] / "models"  # where a packed heads-only checkpoint's base is

# CLI values of these may differ from the base's (regularisation for the new training run);
# every other architecture argument comes from the base checkpoint.
REGULARISATION_ARGS = ("dropout", "attention_dropout", "activation_dropout", "relu_dropout",
                       "encoder_layerdrop", "decoder_layerdrop")
# also task options (so always set on the CLI namespace): always the base's
POSITION_ARGS = ("max_source_positions", "max_target_positions")


class BlockHeads(nn.Module):
    """The proposal heads ``p_2..p_k`` of Stern §6: one FFN, residual to each output block."""

    def __init__(self, embed_dim: int, ffn_dim: int, k: int, activation_fn: str = "relu", dropout: float = 0.0,
                 activation_dropout: float = 0.0):
        super().__init__()
        if k < 2:
            raise BlockwiseModelError(f"--block-heads must be >= 2 (got {k}): head 1 is the base model itself")
        self.k, self.embed_dim = k, embed_dim
        self.fc1 = nn.Linear(embed_dim, k * ffn_dim)  # hidden k * d_ffn (Stern §6)
        self.fc2 = nn.Linear(k * ffn_dim, (k - 1) * embed_dim)  # k-1 output blocks: p_1 is the identity (footnote 1)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)

    def forward(self, x: torch.Tensor, first: int = 2, last: Optional[int] = None) -> torch.Tensor:
        """Hidden states ``x`` ``(..., d)`` -> inputs of the output projection for heads
        ``first..last`` (1-based, contiguous, >= 2): ``(..., last - first + 1, d)``.

        Only the output rows of the requested heads are computed (``--block-size`` < K, or one
        head drawn for the training loss)."""
        last = self.k if last is None else last
        if not 2 <= first <= last <= self.k:
            raise ValueError(f"heads {first}..{last} out of 2..{self.k}")
        d = self.embed_dim
        h = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        rows = slice((first - 2) * d, (last - 1) * d)
        out = self.dropout_module(F.linear(h, self.fc2.weight[rows], self.fc2.bias[rows]))
        return x.unsqueeze(-2) + out.view(*x.shape[:-1], last - first + 1, d)


@register_model("blockwise_transformer")
class BlockwiseTransformerModel(TransformerModel):
    """A fairseq transformer whose decoder output also feeds ``k - 1`` proposal heads."""

    block_heads: BlockHeads

    @staticmethod
    def add_args(parser):
        # the transformer's own options (all without defaults): the base checkpoint fills them; only
        # the dropout rates may be changed for the new run (see REGULARISATION_ARGS)
        TransformerModel.add_args(parser)
        parser.add_argument("--base-checkpoint", metavar="PATH",
                            help="trained fairseq transformer checkpoint the heads are added to (read at "
                                 "training start only; the new checkpoint holds its weights)")
        parser.add_argument("--block-heads", type=int, metavar="K",
                            help="k, number of heads p_1..p_k (p_1 = the base model; Stern §6)")
        parser.add_argument("--freeze-base", action="store_true",
                            help="train the heads only (Stern §6.1 frozen); default: fine-tune everything")

    @classmethod
    def build_model(cls, args, task):
        if getattr(args, "base_arch", None) is None:
            # training start: architecture and weights from --base-checkpoint
            state = _load_base_state(args)
            _absorb_base_args(args, state["cfg"]["model"])
            model = super().build_model(args, task)
            model._attach_heads(args)
            _load_base_weights(model, state, args.base_checkpoint)
        else:
            # a blockwise checkpoint: the base's arguments were saved in args, the weights follow
            model = super().build_model(args, task)
            model._attach_heads(args)
        if getattr(args, "freeze_base", False):
            model.freeze_base()
        return model

    def _attach_heads(self, args):
        d = self.decoder.output_embed_dim
        self.block_heads = BlockHeads(
            d, args.decoder_ffn_embed_dim, args.block_heads, activation_fn=args.activation_fn,
            dropout=args.dropout, activation_dropout=getattr(args, "activation_dropout", 0.0) or 0.0)
        self.num_block_heads = args.block_heads

    def base_parameters(self):
        """Every parameter but the heads' (encoder, decoder, embeddings, output projection)."""
        return [p for n, p in self.named_parameters() if not n.startswith("block_heads.")]

    def freeze_base(self):
        for p in self.base_parameters():
            p.requires_grad_(False)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """A checkpoint packed as its heads only (``models/``: the frozen base ships beside it) first
        gets the base's weights from the checkpoint its config names."""
        if state_dict and all(k.startswith(HEADS) for k in state_dict):
            state_dict = {**shipped_base_state(model_cfg if model_cfg is not None else args), **state_dict}
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    def head_logits(self, features: torch.Tensor, head: int) -> torch.Tensor:
        """Logits of head ``head`` (1-based) at every position of ``features`` ``(..., d)``."""
        if head == 1:
            return self.decoder.output_layer(features)
        return self.decoder.output_layer(self.block_heads(features, head, head).squeeze(-2))


def shipped_base_state(cfg):
    """The base weights of a heads-only checkpoint: from its ``base_checkpoint`` (as given, else relative to
    the repository's ``models/``), the first of those files that has its ``base_sha256``."""
    from fairseq_plugins.shipped import file_sha256

    ref = getattr(cfg, "base_checkpoint", None)
    override = "pass it with --model-overrides \"{'base_checkpoint': 'PATH'}\""
    if not ref:
        raise BlockwiseModelError(f"this blockwise checkpoint holds the heads only and names no base checkpoint: {override}")
    tried = [p for p in [Path(ref)] + ([] if Path(ref).is_absolute() else [REPOSITORY_MODELS / ref]) if p.is_file()]
    expected = getattr(cfg, "base_sha256", None)
    found = [p for p in tried if expected is None or file_sha256(p) == expected]
    if not found:
        raise BlockwiseModelError(
            f"this blockwise checkpoint holds the heads only; its frozen base {ref} " +
            (f"is not found: {override}" if not tried else
             f"(sha256 {expected[:12]}...) is none of {', '.join(map(str, tried))}: decode with the base these heads were "
             f"trained on (models/MANIFEST.json names it; {override}) or train the heads again on this one"))
    return checkpoint_utils.load_checkpoint_to_cpu(str(found[0]))["model"]


def _load_base_state(args):
    path = getattr(args, "base_checkpoint", None)
    if not path:
        raise BlockwiseModelError(
            "--arch blockwise_transformer adds heads to a trained transformer: pass its checkpoint with "
            "--base-checkpoint PATH (e.g. checkpoints/baseline/checkpoint_best.pt)")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except FileNotFoundError:
        raise BlockwiseModelError(f"--base-checkpoint {path} does not exist: train the base model first") from None
    base = state["cfg"]["model"]
    base = base if isinstance(base, dict) else vars(base)
    arch = base.get("arch") or base.get("_name")
    if ARCH_MODEL_REGISTRY.get(arch) is not TransformerModel:
        raise BlockwiseModelError(
            f"--base-checkpoint {path} is a '{arch}' model; blockwise heads go on a checkpoint of fairseq's "
            "'transformer' family (--arch transformer, transformer_fast_tiny, transformer_wmt_en_de_big, ...)")
    return state


def _architecture_keys():
    parser = argparse.ArgumentParser(add_help=False)
    TransformerModel.add_args(parser)
    keys = {a.dest for a in parser._actions}
    filled = argparse.Namespace()
    base_architecture(filled)  # also the keys only the architecture functions set (decoder_input_dim)
    return keys | set(vars(filled))


def _absorb_base_args(args, base):
    """Copy the base's architecture arguments into ``args`` (so they are saved with the model)."""
    base = vars(base) if isinstance(base, argparse.Namespace) else dict(base)
    for key in sorted(_architecture_keys()):
        if key not in base:
            continue
        mine = getattr(args, key, None)
        if key in REGULARISATION_ARGS and mine is not None:
            continue  # the new run's dropout
        if (mine is not None and not isinstance(mine, bool) and key not in POSITION_ARGS
                and mine != base[key]):
            raise BlockwiseModelError(
                f"--{key.replace('_', '-')} {mine} differs from the base checkpoint's ({base[key]}): the "
                f"architecture comes from --base-checkpoint; drop --{key.replace('_', '-')}")
        setattr(args, key, base[key])
    args.base_arch = base.get("arch") or base.get("_name")


def _load_base_weights(model, state, path):
    heads = {n for n in model.state_dict() if n.startswith("block_heads.")}
    try:
        result = model.load_state_dict(state["model"], strict=False)
    except RuntimeError as err:  # size mismatch: other dictionaries than the data of this run
        raise BlockwiseModelError(
            f"the weights of --base-checkpoint {path} do not fit this run's model: {str(err).splitlines()[-1].strip()}. "
            "Train the heads on the corpus (dictionaries) the base model was trained on.") from None
    missing = set(result.missing_keys) - heads
    if missing or result.unexpected_keys:
        raise BlockwiseModelError(
            f"--base-checkpoint {path} does not match the transformer built from its own arguments (missing "
            f"{sorted(missing)[:5]}, unexpected {sorted(result.unexpected_keys)[:5]})")
    n_heads = sum(p.numel() for p in model.block_heads.parameters())
    n_base = sum(p.numel() for p in model.base_parameters())
    logger.info(f"blockwise heads on {path}: k={model.num_block_heads}, {n_heads:,} head parameters on "
                f"{n_base:,} base parameters")


@register_model_architecture("blockwise_transformer", "blockwise_transformer")
def blockwise_transformer(args):
    # architecture arguments come from --base-checkpoint (or the saved args); only our own defaults here
    args.block_heads = getattr(args, "block_heads", None) or 4
    args.freeze_base = getattr(args, "freeze_base", False)
