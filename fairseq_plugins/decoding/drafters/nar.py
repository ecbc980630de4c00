"""GAD's NAR drafter in the engine (Xia et al., "Lossless Acceleration ... Aggressive Decoding",
§3.2, Eq. 7; drafter §3.2.1): ``--drafter nar --drafter-path DRAFTER.pt --block-size K``.

Per batch the drafter's encoder runs once (``begin``); per iteration its decoder runs once over
every row's ``[BOS, accepted prefix, MASK x k]`` (rows of different prefix lengths left-padded,
bidirectional attention with a key-padding mask: ``data.nar_drafter_batch``) and the argmax of
the first ``K`` mask slots is the draft (GAD's draft substep, the Eq. above Eq. 7).  With
``--acceptance exact`` the output is the verifier's greedy output (GAD); ``gad_pp`` is GAD++.

Choices:

* the decoder always reads the ``k`` masks the drafter was trained with and proposes the first
  ``K <= k`` of them (``--block-size``), so its input looks as in training whatever ``K`` is;
* PAD and [MASK] are never proposed (their logits are dropped before the argmax); tokens after an
  EOS in the draft are left to the engine, which cuts at EOS;
* the decoder pass runs through the lean decoder step (``step.DecoderStep`` without a
  self-attention cache, bidirectional under a key-padding mask, on the drafter's own weights):
  the encoder-attention keys/values are projected once per batch (``begin``), and only the first
  ``K`` mask slots are projected onto the vocabulary; its logits equal the training forward's
  (tests/test_gad.py).  There is no prefix cache: the prefix attends to the masks
  (bidirectional), so its states change with every new block (what a cache could save at most is
  measured in docs/RESULTS.md, GAD section).

The drafter runs on the verifier's device and in its dtype (fp16 on GPU with ``--fp16``).
"""
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from fairseq_plugins.data.mask_dictionary import check_aligned
from fairseq_plugins.data.nar_drafter_batch import STATE_KEY, block_input
from fairseq_plugins.decoding.drafters.base import (DRAFTERS, BlockDrafter, Draft, DrafterCapabilities,
                                                    DrafterNotAvailableError)
from fairseq_plugins.decoding.step import DecoderStep
from fairseq_plugins.errors import PluginError


class NARDrafterError(PluginError, ValueError):
    """The drafter checkpoint cannot be used with this verifier/run; the message says why and how to fix it."""


def _dict_path(data, lang) -> str:
    return os.path.join(str(data or "").split(os.pathsep)[0], f"dict.{lang}.txt")


def load_drafter(path, task):
    """Load a ``--task nar_drafter`` checkpoint for the verifier ``task`` (checks kind and dictionaries).

    Returns ``(model, trained_block_size)``; the model is in eval mode on the CPU in fp32."""
    from fairseq import checkpoint_utils
    from fairseq.tasks import TASK_REGISTRY  # --task nar_drafter, registered by the plugin (no import cycle)

    if not path:
        raise DrafterNotAvailableError(
            "--drafter nar needs a NAR drafter checkpoint: pass --drafter-path DRAFTER.pt (train one with "
            "fairseq-train DATA --user-dir fairseq_plugins --task nar_drafter --arch nar_drafter_tiny "
            "--criterion nar_drafter_loss --block-size K)")
    if not os.path.isfile(path):
        raise NARDrafterError(f"--drafter-path {path}: no such file")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except Exception as err:  # not a torch/fairseq file at all
        raise NARDrafterError(f"--drafter-path {path} cannot be read as a fairseq checkpoint ({err})") from None
    cfg = state.get("cfg")
    record = (state.get("task_state") or {}).get(STATE_KEY)
    if record is None or cfg is None:
        task_cfg = cfg.get("task") if cfg is not None else None
        model_cfg = cfg.get("model") if cfg is not None else None
        task_name = getattr(task_cfg, "_name", None) or "?"
        arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None) or "?"
        raise NARDrafterError(
            f"--drafter-path {path} is not a NAR drafter checkpoint (it was trained with --task {task_name} "
            f"--arch {arch}: a verifier?). Pass the verifier with --path and a drafter trained with "
            "fairseq-train --task nar_drafter --arch nar_drafter_tiny/base/big --criterion nar_drafter_loss "
            "as --drafter-path")
    src_lang, tgt_lang = record.get("langs", [None, None])
    if (src_lang, tgt_lang) != (task.cfg.source_lang, task.cfg.target_lang):
        raise NARDrafterError(
            f"--drafter-path {path} drafts {src_lang}->{tgt_lang} but the verifier translates "
            f"{task.cfg.source_lang}->{task.cfg.target_lang}; train the drafter on the verifier's language pair")
    drafter_data = record.get("data", "?")
    for side, theirs, ours, lang, our_lang in (
            ("source", record["source_symbols"], task.source_dictionary, src_lang, task.cfg.source_lang),
            ("target", record["target_symbols"], task.target_dictionary, tgt_lang, task.cfg.target_lang)):
        check_aligned(theirs, list(ours.symbols), side, f"{path}, trained on {_dict_path(drafter_data, lang)}",
                      _dict_path(task.cfg.data, our_lang))
    model_cfg = cfg["model"]
    drafter_task = TASK_REGISTRY["nar_drafter"](cfg["task"], task.source_dictionary, task.target_dictionary)  # + [MASK]
    model = drafter_task.build_model(model_cfg, from_checkpoint=True)
    model.load_state_dict(state["model"], strict=True, model_cfg=model_cfg)
    model.eval()
    return model, int(record["block_size"])


@dataclass
class NAROptions:
    drafter_path: Optional[str] = field(
        default=None, metadata={"help": "checkpoint of a drafter model (GAD: fairseq-train --task nar_drafter)"})


@DRAFTERS.register("nar", help="GAD's NAR drafter model (--drafter-path; --acceptance all: the drafter alone)",
                   options=NAROptions)
class NARDrafter(BlockDrafter):
    """GAD's drafter; a subclass that ``decodes(model)`` a kind of drafter checkpoint takes it over
    (the shallow drafter, ``drafters.shallow``): the checkpoint picks the class, ``--drafter nar`` either way."""

    # has its own model: can also decode alone (--acceptance all); its input is as wide as the longest prefix
    # (a host number: no sync of its own)
    capabilities = DrafterCapabilities(standalone=True, proposes_after_sync=True)

    def __init__(self, model, block_size: int, trained_block: int, vocab_size: int, pad: int, verifier=None):
        super().__init__(block_size)
        if block_size > trained_block:
            raise NARDrafterError(
                f"--block-size {block_size} exceeds the drafter's block size k={trained_block} (it predicts "
                f"{trained_block} tokens per pass); decode with --block-size <= {trained_block} or train a drafter "
                f"with --block-size {block_size}")
        self.model = model
        self.k = trained_block
        self.vocab = vocab_size          # the verifier's: ids >= vocab ([MASK]) are never proposed
        self.pad = pad
        self.mask = vocab_size           # appended after every verifier symbol
        self.verifier = verifier
        self.max_positions = model.decoder.max_positions()
        self.step = DecoderStep(model.decoder, model)  # reads the drafter's weights (re-read every batch)

    @classmethod
    def from_config(cls, cfg, task, models):
        model, trained = load_drafter(cfg.drafter_path, task)
        cls = next((sub for sub in cls.__subclasses__() if sub.decodes(model)), cls)
        tgt = task.target_dictionary
        block = trained if cfg.block_size is None else cfg.block_size  # unset --block-size: the drafter's own k
        return cls(model, block, trained, len(tgt), tgt.pad(), verifier=models[0] if models else None)

    @staticmethod
    def decodes(model) -> bool:
        """Whether this class decodes the drafter checkpoint ``model`` (a subclass: instead of its parent)."""
        return True

    def _follow_verifier(self, like: Tensor):
        """Same device and dtype as the verifier (fairseq-generate moves it after loading)."""
        ref = next(self.verifier.parameters()) if self.verifier is not None else None
        device = ref.device if ref is not None else like.device
        dtype = ref.dtype if ref is not None and ref.is_floating_point() else torch.float32
        p = next(self.model.parameters())
        if p.device != device or p.dtype != dtype:
            self.model.to(device=device, dtype=dtype)

    def begin(self, ctx):
        super().begin(ctx)
        self._follow_verifier(ctx.src_tokens)
        encoder_out = self.model.encoder.forward_torchscript({"src_tokens": ctx.src_tokens, "src_lengths": ctx.src_lengths})
        self.encoder = self.step.begin(encoder_out, capacity=0)  # encoder-attention K/V, once per batch

    def block_logits(self, inp: Tensor, slots: Tensor) -> Tensor:
        """The drafter's logits ``(B, K, V + 1)`` for the first ``K`` mask slots of ``block_input``'s
        ``(inp, slots)``: prefix + k masks per row, left-padded."""
        keys = inp.ne(self.pad)
        # bidirectional; PAD keys (left padding of shorter prefixes) masked; none at batch 1
        attn_mask = None if inp.size(0) == 1 else keys.view(keys.size(0), 1, 1, keys.size(1))
        first = inp.size(1) - self.k
        return self.step(None, inp, slots, causal=False, attn_mask=attn_mask, encoder=self.encoder,
                         project=slice(first, first + self.block))[0]

    def propose(self, out: Tensor, n_gen: Tensor, longest=None) -> Draft:
        """The argmax of the first ``K`` mask slots; with ``ctx.final`` (the drafter alone) under
        fairseq's constraints (PAD, unk, no EOS before min_len, EOS forced at max_len), with scores."""
        inp, slots = block_input(out, n_gen, self.k, self.pad, self.mask, longest=longest, with_slots=True)
        if inp.size(1) > self.max_positions:  # past the drafter's positions: no draft (plain greedy steps)
            if self.ctx.final:
                raise NARDrafterError(
                    f"the drafter reads at most {self.max_positions} positions, too few for prefixes of up to "
                    f"{self.ctx.max_len} tokens + {self.k} masks; lower --max-len-a/--max-len-b for --acceptance all")
            return Draft(n_gen.new_full((n_gen.size(0), self.block), self.pad), n_gen.new_zeros(n_gen.size(0)), width=0)
        return self.draft(self.block_logits(inp, slots), n_gen)

    def draft(self, logits: Tensor, n_gen: Tensor) -> Draft:
        """The :class:`Draft` of the drafter's logits ``(B, K, >= V)`` of its first ``K`` mask slots."""
        logits = logits[:, :, : self.vocab]
        full = n_gen.new_full((n_gen.size(0),), self.block)
        if not self.ctx.final:
            logits.select(-1, self.pad).fill_(-torch.inf)
            return Draft(logits.argmax(dim=-1), full, width=self.block)
        lprobs = torch.log_softmax(logits.float(), dim=-1)
        steps = n_gen.unsqueeze(1) + torch.arange(self.block, device=n_gen.device)  # slot i is step n_gen + i
        self.ctx.constraints.apply(lprobs, steps, self.ctx.max_len)
        scores, tokens = lprobs.max(dim=-1)
        return Draft(tokens, full, scores=scores, width=self.block)

    def select_rows(self, rows):
        self.encoder.select_rows(rows)
