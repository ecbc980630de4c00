"""A checkpoint loaded and decoded the way ``fairseq-generate`` does it, in-process.

:meth:`Generation.from_generate_args` parses fairseq-generate's own command line (the task and its
options -- ``--drafter``, ``--target-order`` --, ``--beam``, ``--lenpen``, ``--max-len-a/b``...),
loads the ensemble, prepares it for inference and builds the task's generator, as
``fairseq_cli/generate.py`` does.  :meth:`Generation.from_checkpoint` keeps the task the checkpoint
was trained with instead (a teacher to distil, a reordered model to score).  :meth:`Generation.batches`
cuts a split into fairseq's length-sorted batches -- all sentences, or only some ids -- and
:meth:`Generation.decode` runs the generator over them.
"""
from pathlib import Path

import torch
from fairseq.data import BaseWrapperDataset  # after scripts/lab/__init__ imported the plugin, which repaired fairseq

import fairseq_plugins
from scripts.lab.evaluation import EvaluationError

PLUGIN_DIR = str(Path(fairseq_plugins.__file__).resolve().parent)  # what --user-dir loads


class Sentences(BaseWrapperDataset):
    """A view of a dataset holding only the sentence ids in ``ids`` (a ``range``), still batched in
    fairseq's length-sorted order: the benchmark's timed sample, a distillation shard."""

    def __init__(self, dataset, ids):
        super().__init__(dataset)
        self.ids = ids

    def ordered_indices(self):
        order = self.dataset.ordered_indices()
        return order[(order >= self.ids.start) & (order < self.ids.stop)]


class Generation:
    """A task, its models (in eval mode, on ``device``, fp16 when asked) and its generator."""

    def __init__(self, task, models, generator=None, device="cpu", fp16=False, data=None):
        self.task, self.models, self.generator, self.device, self.data = task, models, generator, device, data
        self.tgt_dict = task.target_dictionary

    @classmethod
    def from_generate_args(cls, data, checkpoint, args=(), device="cpu", fp16=False):
        """``fairseq-generate DATA --path CHECKPOINT ARGS`` (plus ``--cpu`` / ``--fp16``), loaded."""
        from fairseq import checkpoint_utils, options, tasks, utils
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        _check_exists(checkpoint)
        argv = [str(data), "--path", str(checkpoint), "--user-dir", PLUGIN_DIR, *args]
        argv += (["--cpu"] if device == "cpu" else []) + (["--fp16"] if fp16 else [])
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), input_args=argv))
        utils.import_user_module(cfg.common)
        task = tasks.setup_task(cfg.task)
        models, _ = _load(lambda: checkpoint_utils.load_model_ensemble([str(checkpoint)], arg_overrides={"data": str(data)},
                                                                       task=task), checkpoint, data)
        for m in models:  # fairseq-generate's order: half, move, then prepare
            _place(m, device, fp16)
            m.prepare_for_inference_(cfg)
        keep_callers_threads(task)
        return cls(task, models, task.build_generator(models, cfg.generation), device, fp16, data)

    @classmethod
    def from_checkpoint(cls, checkpoint, data, device="cpu", fp16=False, **generation):
        """The checkpoint with the task it was trained with (``data`` replacing its data folder);
        with ``generation`` (fields of fairseq's ``GenerationConfig``: beam, lenpen, max_len_a...)
        also a generator."""
        from fairseq import checkpoint_utils
        from fairseq.dataclass.configs import GenerationConfig

        _check_exists(checkpoint)
        models, _, task = _load(lambda: checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides={"data": str(data)}), checkpoint, data)
        for m in models:
            m.eval()
            _place(m, device, fp16)
        keep_callers_threads(task)
        generator = task.build_generator(models, GenerationConfig(**generation)) if generation else None
        return cls(task, models, generator, device, fp16, data)

    def dataset(self, split):
        if split not in self.task.datasets:
            self.task.load_dataset(split)
        dataset = self.task.dataset(split)
        if len(dataset) == 0:
            raise EvaluationError(f"the {split} split of {self.data} is empty")
        return dataset

    def batches(self, split="test", batch_size=None, max_tokens=None, ids=None, skip_too_long=False):
        """fairseq's batches of ``split`` (length-sorted, on the device): every sentence, or those
        whose id is in the range ``ids``.  A source longer than the models take is an error, or,
        with ``skip_too_long``, left out (as fairseq-generate's ``--skip-invalid-size-inputs-valid-test``)."""
        from fairseq import utils

        dataset = self.dataset(split)
        if ids is not None:
            dataset = Sentences(dataset, ids)
        max_positions = utils.resolve_max_positions(self.task.max_positions(), *[m.max_positions() for m in self.models])
        itr = self.task.get_batch_iterator(
            dataset=dataset, max_tokens=max_tokens, max_sentences=batch_size, max_positions=max_positions,
            ignore_invalid_inputs=skip_too_long, required_batch_size_multiple=1, seed=1, num_workers=0,
        ).next_epoch_itr(shuffle=False)
        return [utils.move_to_cuda(b) if self.device != "cpu" else b for b in itr]

    def decode(self, batches, progress=None):
        """Run the generator over ``batches``; returns {sentence id: best hypothesis' token ids (with
        EOS)}.  ``progress`` (a tqdm) advances by each batch's sentences."""
        out = {}
        for sample in batches:
            hypos = self.task.inference_step(self.generator, self.models, sample)
            for i, sid in enumerate(sample["id"].tolist()):
                out[sid] = hypos[i][0]["tokens"].tolist()
            if progress is not None:
                progress.update(len(hypos))
        return out

    def string(self, tokens):
        """Target token ids -> the subword string (EOS dropped), as fairseq-generate's H- lines."""
        return self.tgt_dict.string(torch.tensor(tokens))


def _check_exists(checkpoint):
    if not Path(checkpoint).is_file():
        raise EvaluationError(f"checkpoint {checkpoint} does not exist: train it first (scripts/train.sh)")


def keep_callers_threads(task):
    """In-process, a decode runs on the threads its caller set (the benchmark's, distillation's ``--threads``),
    not on the task's command-line default of one (``decoding/threads.py``)."""
    if getattr(task.cfg, "cpu_threads", 0) is None:
        task.cfg.cpu_threads = torch.get_num_threads()


def _load(load, checkpoint, data):
    try:
        return load()
    except RuntimeError as err:
        if "size mismatch" in str(err):
            raise EvaluationError(f"{checkpoint} was trained with other dictionaries than {data} (embedding sizes "
                                  "differ): use the corpus it was trained on") from None
        raise


def _place(model, device, fp16):
    if fp16:
        model.half()
    if device != "cpu":
        model.cuda()
