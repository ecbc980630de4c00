"""The one task of the plugin: ``--task fast_translation``.

A :class:`fairseq.tasks.translation.TranslationTask` with

* target-order options for training (docs/METHODS.md §1): the target side of every batch is reordered into
  the order's generation sequence (head-tail folding, interleaving, multi-segment, ...), with the
  positions, direction ids and the M(h,c) mask the model needs.  References stay in natural order,
  so ``fairseq-generate`` scores as usual.
* decoding options for ``fairseq-generate`` (docs/METHODS.md §2): a reordered model decodes with the
  step-wise multi-word beam search; ``--drafter`` switches to the draft-and-verify engine.
  ``build_generator`` picks the generator from them; with neither, the lean beam search
  (``decoding/lean_beam.py``; ``--beam-search fairseq``: fairseq's own generator).
  A draft-and-verify run of ``fairseq-generate`` ends with one log line of its counts (model calls,
  mean accepted, share of draft tokens accepted; ``decoding/report.py``).  fairseq-generate has no
  end-of-run hook, so the task uses the two it calls: it remembers the batch iterator it made
  (``get_batch_iterator``) and, in ``inference_step``, logs the line once that iterator's epoch is
  exhausted, i.e. right after the last batch (no atexit, no ``__del__``, nothing of fairseq patched).
"""
import contextlib
import dataclasses
import functools
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, open_dict

from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.data import data_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_plugins.decoding.acceptance import ACCEPTANCES, build_acceptance
from fairseq_plugins.decoding.dedup import dedup_hypothesis
from fairseq_plugins.decoding.drafters import DRAFTERS, check_block_size
from fairseq_plugins.decoding.engine import build_draft_verify_generator
from fairseq_plugins.decoding.report import summary_line
from fairseq_plugins.decoding.threads import choose_cpu_threads
from fairseq_plugins.tasks.cpu_autocast import TrainingAutocast
from fairseq_plugins.orders import (ABLATIONS, ORDER_NAMES, OrderError, order_from_config, order_signature_of_config,
                                    order_signature_of_model)
from fairseq_plugins.errors import PluginError

logger = logging.getLogger(__name__)


class FastTranslationOptionError(PluginError, ValueError):
    """Inconsistent options: the message says what is wrong and how to fix it."""


# every drafter's and acceptance rule's own options (``options=`` of their registration) join the task's
@ACCEPTANCES.with_options
@DRAFTERS.with_options
@dataclass
class FastTranslationConfig(TranslationConfig):
    # ---- generation order (training and decoding), docs/METHODS.md §1 ----
    target_order: Optional[str] = field(
        default=None, metadata={"help": "generation order: " + ", ".join(ORDER_NAMES) + " (training: default l2r; "
                                "decoding: default the checkpoint's own order and ablation flags)"})
    directions: int = field(
        default=0, metadata={"help": "h, generation directions (0: the order's own: 1 l2r/r2l, 2 head_tail/"
                             "interleave, 4 multi_segment)"})
    tokens_per_direction: int = field(default=1, metadata={"help": "c, tokens per direction per step (SA)"})
    vanilla_mask: bool = field(default=False, metadata={"help": "ablation: M(1,1) instead of M(h,c)"})
    vanilla_positions: bool = field(default=False, metadata={"help": "ablation: positions 0..n-1 (Eq. 5)"})
    middle_to_side: bool = field(default=False, metadata={"help": "ablation: generate from the middle out"})
    independent_directions: bool = field(
        default=False, metadata={"help": "ablation: no attention across directions"})
    double_topk: bool = field(
        default=False, metadata={"help": "Imamura & Sumita's DOUBLETOPK (2W left, 3W pairs) for h=2, c=1"})
    dedup_ngram: int = field(
        default=0, metadata={"help": "collapse adjacent repeats of n-grams up to this n in the output (IBDecoder "
                             "§5's deduplication; 0: off); not with --drafter, whose output is fairseq's greedy"})
    # ---- draft and verify, docs/METHODS.md §2 ----
    drafter: Optional[str] = field(
        default=None, metadata={"help": "draft-and-verify drafter (unset = fairseq's own generator): " + DRAFTERS.help()})
    acceptance: str = field(default="exact", metadata={"help": "acceptance rule: " + ACCEPTANCES.help()})
    block_size: Optional[int] = field(
        default=None, metadata={"help": "k, draft tokens verified per model call (blockwise: the block of k tokens, "
                                "k-1 of them drafted by heads 2..k); unset: 5, blockwise: the checkpoint's K"})
    adaptive_block_size: str = field(
        default="auto", metadata={"help": "draft width with the most expected tokens per unit of time, from the rows' "
                                  "acceptance and costs timed on this device: on, off (the papers' fixed "
                                  "--block-size), or auto (on for every drafter but jacobi_pj); exact stays lossless"})
    # ---- beam search of plain left-to-right models (issue 34), docs/METHODS.md §2 ----
    beam_search: ChoiceEnum(["lean", "fairseq"]) = field(
        default="lean", metadata={"help": "beam search of a left-to-right model without --drafter: 'lean' (the "
                                  "plugin's, identical output, faster; options it lacks fall back to fairseq's with "
                                  "a log line) or 'fairseq' (fairseq's own SequenceGenerator)"})
    # ---- the run (issue 49) ----
    cpu_threads: Optional[int] = field(
        default=None, metadata={"help": "threads of a decode on the CPU (unset: OMP_NUM_THREADS if set, else 1: "
                                "torch's default of one per core slows down many times when another process "
                                "shares the cores)"})
    cpu_bf16_autocast: bool = field(
        default=False, metadata={"help": "train with bf16 autocast when the model is on the CPU (fairseq's --amp is "
                                "CUDA's only): about 1.7x faster updates at Transformer-base size on a CPU with "
                                "AVX512-BF16 or AMX (docs/RESULTS.md); falls back to fp32, with a log line, elsewhere"})
    no_verify_shipped: bool = field(
        default=False, metadata={"help": "load a checkpoint of a models/ folder without checking it against its "
                                 "MANIFEST.json's sha256 and the data folder's dictionaries against its own"})
    # ---- warm start (issue: order quality) ----
    init_from_l2r: Optional[str] = field(
        default=None, metadata={"help": "initialise a reordered_transformer from a trained left-to-right "
                                "checkpoint of the same size (encoder, decoder layers, token embeddings); the "
                                "order's own position/direction/start-slot embeddings start fresh"})


@register_task("fast_translation", dataclass=FastTranslationConfig)
class FastTranslationTask(TranslationTask):
    cfg: FastTranslationConfig

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        check_data_folder(cfg)
        return super().setup_task(cfg, **kwargs)

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        add_missing_defaults(cfg)
        validate_options(cfg)
        self._batch_iterator = None  # the last one made: its end is the end of a fairseq-generate run
        self._summarised = set()
        self._building_model = False  # TranslationTask.build_model builds the --eval-bleu generator of a training
        self._interactive_lines = 0  # the fairseq-interactive input lines read so far
        self._constraints = None
        self._autocast = TrainingAutocast(cfg.cpu_bf16_autocast)

    # ---- training: reorder the target side ----
    @property
    def order(self):
        """The generation order the flags ask for (fairseq_plugins.orders), or None for plain l2r."""
        return order_from_config(self.cfg)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        order = self.order
        if order is not None:
            from fairseq_plugins.data.reordered_dataset import ReorderedLanguagePairDataset

            self.datasets[split] = ReorderedLanguagePairDataset(self.datasets[split], order)

    def build_model(self, cfg, from_checkpoint=False):
        self._building_model = True
        try:
            model = super().build_model(cfg, from_checkpoint=from_checkpoint)
        finally:
            self._building_model = False
        if getattr(model, "is_nar_drafter", False):
            raise FastTranslationOptionError(
                "this checkpoint is a NAR drafter (--task nar_drafter), not a translation model: pass it as "
                "--drafter-path with --drafter nar and the verifier as --path (--acceptance all: the drafter alone)")
        if order_flags_given(self.cfg) or not from_checkpoint:  # decoding without flags: the checkpoint's order
            check_model_matches_task(model, self.cfg)
        if self.cfg.init_from_l2r and not from_checkpoint:
            from fairseq_plugins.models.reordered_transformer import init_from_l2r

            init_from_l2r(model, self.cfg.init_from_l2r)
        return model

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        with self._autocast.context(model):  # --cpu-bf16-autocast (cpu_autocast.py)
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad=ignore_grad)

    # ---- decoding: pick the generator ----
    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None):
        """The generator for ``models``; every generation option in ``args`` is honoured, refused or
        a fallback to fairseq's generator with a log line, per generator (``decoding/generation_options.py``)."""
        order = decoding_order(models, self.cfg)
        check_double_topk(self.cfg, order, given=True)
        self._choose_threads(models)
        self._constraints = getattr(args, "constraints", None)
        if self.cfg.drafter is not None:
            if order is not None:
                raise FastTranslationOptionError(
                    f"--drafter verifies drafts with a left-to-right model, but the checkpoint was trained with order "
                    f"{order.signature}: decode it without --drafter (multi-token beam search) or pass an L2R model")
            _refuse_code_hooks("--drafter", seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
            fairseq_generator = functools.partial(super().build_generator, models, args)
            return build_draft_verify_generator(self, models, args, fairseq_generator)
        if order is not None:
            from fairseq_plugins.decoding.multi_token_beam import build_multi_token_generator

            _refuse_code_hooks("the multi-token beam search", seq_gen_cls, extra_gen_cls_kwargs,
                               prefix_allowed_tokens_fn)
            return build_multi_token_generator(self, models, args)
        return self._plain_beam_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)

    def _plain_beam_generator(self, models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn):
        """A left-to-right model without --drafter: the lean beam search, or fairseq's (``--beam-search``)."""
        from fairseq_plugins.decoding.lean_beam import build_beam_generator

        fairseq_generator = functools.partial(super().build_generator, models, args, seq_gen_cls,
                                              extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        return build_beam_generator(self, models, args, fairseq_generator, seq_gen_cls=seq_gen_cls,
                                    extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                    prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)

    def _choose_threads(self, models):
        """A decode on the CPU (not a training's --eval-bleu generator): threads.choose_cpu_threads, logged once."""
        on_cpu = all(next(m.parameters()).device.type == "cpu" for m in models)
        if on_cpu and not self._building_model:
            line = choose_cpu_threads(self.cfg.cpu_threads)
            if line not in _LOGGED:
                _LOGGED.add(line)
                logger.info(line)

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq-interactive's lines (one buffer of them): a line that is not UTF-8 (read with surrogates,
        compat.py) is reported on stderr with its line number and left out; the run goes on."""
        first, self._interactive_lines = self._interactive_lines + 1, self._interactive_lines + len(lines)
        bad = [i for i, line in enumerate(lines) if not is_utf8(line)]
        if bad and self._constraints:
            raise FastTranslationOptionError(
                f"input line {first + bad[0]} is not valid UTF-8: with --constraints no line can be left out (its "
                "constraints would go to another line); fix the input (e.g. iconv -c -f utf-8 -t utf-8)")
        for i in bad:
            print(f"input line {first + i}: not valid UTF-8, skipped (the output's ids count the lines translated)",
                  file=sys.stderr, flush=True)
        skipped = set(bad)
        lines[:] = [line for i, line in enumerate(lines) if i not in skipped]  # fairseq prints lines[id]: in place
        return super().get_interactive_tokens_and_lengths(lines, encode_fn)

    def get_batch_iterator(self, *args, **kwargs):
        self._batch_iterator = super().get_batch_iterator(*args, **kwargs)
        return self._batch_iterator

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        hypos = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                       constraints=constraints)
        if "natural_target" in sample:  # reordered batches: fairseq-generate prints/scores sample["target"]
            sample["target"] = sample["natural_target"]
        if self.cfg.dedup_ngram:
            eos = self.target_dictionary.eos()
            hypos = [[dedup_hypothesis(h, self.cfg.dedup_ngram, eos) for h in row] for row in hypos]
        self._summarise_at_end(generator)
        return hypos

    def _summarise_at_end(self, generator):
        """Log the draft-and-verify counts once, after the last batch of the current iterator."""
        stats = getattr(generator, "stats", None)
        itr = self._batch_iterator
        if not isinstance(stats, dict) or "draft_tokens" not in stats or itr is None or not hasattr(itr, "end_of_epoch"):
            return
        key = (id(generator), id(itr), getattr(itr, "epoch", None))
        if key in self._summarised:
            return
        try:
            ended = itr.end_of_epoch()
        except AttributeError:  # no epoch iterator made from it yet (batches fed by other means)
            return
        if not ended:
            return
        self._summarised.add(key)
        logger.info(summary_line(stats))


_LOGGED = set()  # the thread choice is logged once per process


def is_utf8(line: str) -> bool:
    try:
        line.encode("utf-8")
        return True
    except UnicodeEncodeError:  # lone surrogates: undecodable bytes read with errors="surrogateescape"
        return False


def _refuse_code_hooks(generator, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn):
    """What code (not an option) may hand ``build_generator``: the lean beam search falls back to
    fairseq's generator for it; the other generators refuse it."""
    extra = {k: v for k, v in (extra_gen_cls_kwargs or {}).items() if v is not None and k != "lm_weight"}
    given = ([f"a generator class ({seq_gen_cls.__name__})"] if seq_gen_cls is not None else []) + (
        ["prefix_allowed_tokens_fn"] if prefix_allowed_tokens_fn is not None else []) + [
        f"{k} (extra_gen_cls_kwargs)" for k in extra]
    if given:
        raise FastTranslationOptionError(f"{generator} does not take {given[0]}; drop it, or decode without {generator}")


def add_missing_defaults(cfg):
    """A config saved before an option existed (a checkpoint's task config, which decoding in-process
    reuses) gets the option's default, so a drafter added since decodes with older checkpoints."""
    missing = [f for f in dataclasses.fields(FastTranslationConfig) if not hasattr(cfg, f.name)]
    if not missing:
        return
    with open_dict(cfg) if isinstance(cfg, DictConfig) else contextlib.nullcontext():
        for f in missing:
            setattr(cfg, f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory())


def order_flags_given(cfg):
    """Whether the run names an order (--target-order, --directions, --tokens-per-direction, ablations);
    without any, fairseq-generate decodes a checkpoint in the order it was trained with."""
    return (getattr(cfg, "target_order", None) is not None or bool(getattr(cfg, "directions", 0))
            or (getattr(cfg, "tokens_per_direction", 1) or 1) != 1 or any(getattr(cfg, a, False) for a in ABLATIONS))


def decoding_order(models, cfg):
    """The order to decode with: the checkpoint's when no order flag is given, else the flags'
    (refused when they differ from the checkpoint's).  None = plain left-to-right."""
    if order_flags_given(cfg):
        for model in models:
            check_model_matches_task(model, cfg)
        return order_from_config(cfg)
    orders = {getattr(m, "generation_order", None) for m in models}
    orders = {o for o in orders if o is not None and not o.is_plain_l2r}
    if len(orders) > 1:
        raise FastTranslationOptionError("the checkpoints of this ensemble were trained with different orders: "
                                         + ", ".join(sorted(o.signature for o in orders)))
    return orders.pop() if orders else None


def check_data_folder(cfg):
    """The data folder holds fairseq-preprocess's dictionaries (``dict.<lang>.txt``) and tells its languages:
    what fairseq would report as "Could not infer language pair" or a missing file, said with its fix."""
    paths = utils.split_paths(cfg.data) if cfg.data else []
    if not paths:
        return
    folder = Path(paths[0])
    made_by = "give the folder fairseq-preprocess wrote (its dict.<lang>.txt and <split>.<src>-<tgt>.* files)"
    if not folder.is_dir():
        raise FastTranslationOptionError(f"the data folder {folder} does not exist: {made_by}")
    langs = (cfg.source_lang, cfg.target_lang)
    wanted = [f"dict.{lang}.txt" for lang in langs] if all(langs) else ["dict.*.txt"]
    missing = [name for name in wanted if next(folder.glob(name), None) is None]
    if missing:
        inner = next((p.parent for p in sorted(folder.glob("*/dict.*.txt"))), None)
        hint = f" ({inner} is probably meant)" if inner is not None else ""
        raise FastTranslationOptionError(f"the data folder {folder} has no {', '.join(missing)}: {made_by}{hint}")
    if not all(langs) and all(lang is None for lang in data_utils.infer_language_pair(str(folder))):
        raise FastTranslationOptionError(
            f"the data folder {folder} has no <split>.<src>-<tgt>.<lang>.idx file to read the languages from: pass "
            "--source-lang and --target-lang (the <lang> of its dict.<lang>.txt files)")


def validate_options(cfg):
    """Clear errors for flag combinations that cannot work (say what is wrong and how to fix it)."""
    if cfg.target_order is not None and cfg.target_order not in ORDER_NAMES:
        raise FastTranslationOptionError(
            f"--target-order {cfg.target_order!r} is unknown; choose one of {', '.join(ORDER_NAMES)}")
    try:
        if cfg.drafter is not None:
            DRAFTERS.check(cfg.drafter)
        ACCEPTANCES.check(cfg.acceptance)
        build_acceptance(cfg)  # the rule's own options (--acceptance topk needs --acceptance-topk)
        if cfg.block_size is not None:
            check_block_size(cfg.block_size)
    except ValueError as err:
        raise FastTranslationOptionError(str(err)) from None
    if cfg.tokens_per_direction < 1:
        raise FastTranslationOptionError(f"--tokens-per-direction must be >= 1 (got {cfg.tokens_per_direction})")
    if cfg.drafter is not None and ((cfg.target_order or "l2r") != "l2r" or cfg.tokens_per_direction != 1):
        raise FastTranslationOptionError(
            "--drafter verifies drafts with an ordinary left-to-right model; drop --target-order/"
            "--tokens-per-direction (they select the multi-token beam search instead)")
    if cfg.dedup_ngram < 0 or (cfg.dedup_ngram and cfg.drafter is not None):
        raise FastTranslationOptionError(
            f"--dedup-ngram {cfg.dedup_ngram}: give n >= 1 to collapse repeated n-grams of fairseq's or a reordered "
            "model's output, 0 for none; --drafter's output is fairseq's greedy output by contract, so drop one")
    try:
        order = order_from_config(cfg)
    except OrderError as err:
        raise FastTranslationOptionError(str(err)) from None
    check_double_topk(cfg, order, given=order_flags_given(cfg))


def check_double_topk(cfg, order, given: bool):
    """The one DOUBLETOPK rule (Imamura & Sumita): two directions of one token each.  ``order``: the
    run's (None: plain left-to-right); ``given``: whether it is known yet (flags or the checkpoint)."""
    if cfg.double_topk and given and (order is None or order.h != 2 or order.c != 1):
        raise FastTranslationOptionError(
            f"--double-topk is Imamura & Sumita's search for two directions, one token each, but the order is "
            f"{order.signature if order is not None else 'plain left-to-right'}: use it with a model trained with "
            "--target-order head_tail or interleave and --tokens-per-direction 1, or drop --double-topk")


def check_model_matches_task(model, cfg):
    """A model trained with one order cannot be decoded with another (its positions/mask differ)."""
    trained = order_signature_of_model(model)  # None: plain l2r, e.g. any stock fairseq model
    wanted = order_signature_of_config(cfg)
    if trained != wanted:
        plain = "plain left-to-right (h=1, c=1)"
        if trained is None and getattr(model, "generation_order", None) is None:
            raise FastTranslationOptionError(
                f"--target-order options ask for {wanted}, but the model ({type(model).__name__}) is a {plain} "
                "transformer without order positions/mask; train with --arch reordered_transformer_tiny/base/big, "
                "or drop --target-order/--directions/--tokens-per-direction and the ablation flags")
        raise FastTranslationOptionError(
            f"the checkpoint was trained with order {trained or plain} but this run asks for {wanted or plain}; "
            "pass the training run's --target-order/--directions/--tokens-per-direction (and ablation flags)")
