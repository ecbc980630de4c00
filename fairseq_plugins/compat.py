"""Repairs for fairseq-fixed 0.12.3.1 on torch >= 2.6 and numpy 2, applied once at plugin import.

fairseq-fixed is upstream fairseq main (2024-01) plus Python 3.11 fixes.  What broke since is
repaired here, in one place, so that no user has to set an environment variable:

1. torch >= 2.6 loads with ``weights_only=True`` by default.  fairseq checkpoints pickle an
   ``argparse.Namespace`` (``args``), plain-Python config dicts and fairseq's meter objects, so
   ``fairseq-generate``/``fairseq-interactive``/``fairseq-train --restore-file`` fail on every
   ordinary checkpoint.  We allow-list exactly the classes fairseq itself writes into a checkpoint
   (torch's ``add_safe_globals``) instead of turning the safe loader off; with them numeric numpy
   arrays, which the meters of a run with ``--eval-bleu`` hold (its checkpoints failed to load).
   The plugin's own code reads checkpoints with :func:`load_checkpoint` (the safe loader, the same
   allow-list), never ``weights_only=False``: a crafted file that would run code when unpickled is
   refused, naming it.
2. numpy 2 removed ``np.compat.long``, ``np.float`` and ``np.int`` (still used by
   ``token_block_dataset``, ``language_pair_dataset``, ``dynamic_crf_layer`` and ``data_utils``).
   They are restored as the aliases numpy 1 had.
3. ``data_utils.batch_by_size`` drops the last batch when its size is not a multiple of
   ``--required-batch-size-multiple`` (default 8): ``fairseq-generate`` silently translated 48 of
   50 sentences.  Every BLEU and every identical-to-greedy comparison must cover all sentences,
   so the dropped tail is given back as a final (smaller) batch.
4. ``torchrun --nproc_per_node N -m fairseq_cli.train ... --cpu --distributed-backend gloo`` ran N
   independent single-process trainings writing the same checkpoint folder: fairseq's default
   ``--distributed-world-size`` is ``torch.cuda.device_count()`` (1 without GPUs), and
   ``infer_init_method`` returns before it reads torchrun's environment when the world size is 1
   (on GPUs it then divides the rank by the GPU count, and its own spawn launcher starts
   ``min(device_count, world_size)`` processes: none on CPU).  ``call_main`` is wrapped so that a
   torchrun launch (WORLD_SIZE > 1 with RANK, MASTER_ADDR, MASTER_PORT) always forms its process
   group from that environment (``env://``, rank RANK, the GPU LOCAL_RANK when on CUDA), and a
   launch that cannot form a group (NCCL without CUDA, more processes than GPUs, an inconsistent
   ``--distributed-world-size``, fairseq's spawn launcher with no device to spawn on) stops with an
   error that says what to pass instead.
5. fairseq wraps the model in ``DistributedDataParallel(device_ids=[device_id])``, which torch
   refuses for a CPU module; on CPU the wrapper is built with ``device_ids=None`` (torch's CPU
   data parallelism over gloo), everything else as fairseq does it.
6. ``fairseq-train`` could die with SIGABRT ("terminate called without an active exception") after
   saving its last checkpoint: training stops mid-epoch, leaving fairseq's prefetching thread
   (``BackgroundConsumer``, a daemon) alive, and on Python < 3.14 a daemon thread that is inside a
   torch operation when the interpreter finalizes is unwound through a ``noexcept`` frame.  At exit
   each live consumer is told to stop after the batch in hand, its queue is drained until it ends,
   and only then does the interpreter finalize.
7. ``fairseq-generate --user-dir fairseq_plugins --task fast_translation --help`` listed none of the
   task's options: fairseq's ``parse_args_and_arch`` parses the command line once *before* it adds
   the task's (and the model's, criterion's...) options, and that first parse meets ``--help``,
   prints what it has and exits.  With ``-h``/``--help`` the options are now added first (the same
   call without ``--help``, its errors about a missing data folder muted), then the help printed.
8. Before fairseq loads checkpoints with a task (``load_model_ensemble_and_task``: fairseq-generate,
   -interactive, the lab's in-process ``Generation``), a checkpoint of a ``models/`` folder is
   checked against its manifest's sha256 and the data folder's dictionaries against the ones it was
   trained with (``shipped.py``; ``--no-verify-shipped``), and torch's "size
   mismatch" of the embeddings is reported as a data folder of another corpus.
9. ``fairseq-interactive`` read its input as strict UTF-8 (or, in a C locale, with surrogates that
   sentencepiece cannot take): one undecodable line ended the run and lost the lines after it.  Its
   input is now read with ``surrogateescape``, and the task reports and skips such a line
   (``FastTranslationTask.get_interactive_tokens_and_lengths``).
"""
import argparse
import atexit
import functools
import inspect
import os
import queue
import re
import sys
import time
import types
import weakref

import numpy as np

from fairseq_plugins.errors import PluginError

_APPLIED = False


def _restore_numpy_aliases():
    if "compat" not in np.__dict__:
        np.compat = types.SimpleNamespace(long=np.int64, unicode=str)
    elif not hasattr(np.compat, "long"):
        np.compat.long = np.int64
    for name, alias in (("float", float), ("int", int), ("long", int), ("bool", bool)):
        if name not in np.__dict__:
            setattr(np, name, alias)


def checkpoint_classes():
    """The classes fairseq writes into a checkpoint (``args``, its meters): the safe loader's allow-list."""
    from fairseq.logging import meters

    classes = [argparse.Namespace]
    classes += [getattr(meters, n) for n in dir(meters) if isinstance(getattr(meters, n), type)
                and issubclass(getattr(meters, n), meters.Meter)]
    classes += [meters.MetersDict]
    # a run with --eval-bleu keeps its BLEU counts as numpy arrays in the meters it saves (fairseq's
    # TranslationTask.reduce_metrics): numeric arrays only (an object array's items stay refused)
    import numpy as np

    core = np._core if hasattr(np, "_core") else np.core  # numpy 2 : 1
    classes += [np.ndarray, np.dtype, core.multiarray._reconstruct]
    return classes + [type(np.dtype(t)) for t in (np.int64, np.int32, np.float64, np.float32)]


def _allow_fairseq_checkpoint_classes():
    import torch

    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:  # torch < 2.4 loads everything anyway
        return
    add(checkpoint_classes())


class UnsafeCheckpointError(SystemExit):
    """A checkpoint whose unpickling would call something a fairseq checkpoint never holds (it could run code)."""

    def __init__(self, path, detail):
        super().__init__(f"error: {path} was refused: unpickling it would call {detail}, which no fairseq checkpoint "
                         "holds (a crafted file runs code this way); use only checkpoints from a source you trust")


def load_checkpoint(path, mmap=False):
    """``torch.load`` of the checkpoint file at ``path`` (onto the CPU) with torch's safe loader and
    :func:`checkpoint_classes` allowed: the one way the plugin's own code reads a checkpoint a user or a
    run folder supplies (fairseq's loader is as safe, with repair 1).  ``mmap``: the tensors are not read.
    A file that would call anything else when unpickled is refused with :class:`UnsafeCheckpointError`;
    any other failure (a truncated file) raises what torch raises."""
    import pickle

    import torch

    _allow_fairseq_checkpoint_classes()  # a set: adding again is harmless (torch's safe_globals() removes them after)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        if "weights only" not in str(err).lower():
            raise
        try:
            allowed = {f"{c.__module__}.{c.__qualname__}" for c in checkpoint_classes()}
            unsafe = [g for g in torch.serialization.get_unsafe_globals_in_checkpoint(path) if g not in allowed]
        except Exception:  # not a zip checkpoint: torch's own words say which global
            unsafe = []
        found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) (\S+)", str(err))
        detail = ", ".join(unsafe) or (found.group(1) if found else "a global outside the allow-list")
        raise UnsafeCheckpointError(path, detail) from None


def _keep_last_batch():
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "_keeps_last_batch", False):
        return

    def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                      max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
        batches = original(indices, num_tokens_fn, num_tokens_vec, max_tokens, max_sentences,
                           required_batch_size_multiple, fixed_shapes)
        if fixed_shapes is not None:
            return batches
        covered = sum(len(b) for b in batches)
        indices = np.asarray(indices if isinstance(indices, np.ndarray) else list(indices), dtype=np.int64)
        if covered < len(indices):  # upstream cut the trailing batch off: give it back
            batches = list(batches) + [indices[covered:]]
        return batches

    batch_by_size._keeps_last_batch = True
    data_utils.batch_by_size = batch_by_size


class DistributedLaunchError(PluginError, RuntimeError):
    """A distributed launch that cannot form its process group; the message says what to change."""


_TORCHRUN_ENV = ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")


def adopt_torchrun_environment(cfg):
    """Point fairseq's distributed config at torchrun's process group (repair 4).  No-op outside
    torchrun, for a world of one process, or when the user gave an explicit init method."""
    import torch

    env = os.environ
    dt = cfg.distributed_training
    if not all(k in env for k in _TORCHRUN_ENV) or dt.distributed_init_method is not None or cfg.common.tpu:
        return False
    world, rank, local_rank = int(env["WORLD_SIZE"]), int(env["RANK"]), int(env.get("LOCAL_RANK", 0))
    if world <= 1:
        return False
    default_world = max(1, torch.cuda.device_count())
    if dt.distributed_world_size not in (world, default_world, 1):
        raise DistributedLaunchError(
            f"--distributed-world-size {dt.distributed_world_size} but torchrun started WORLD_SIZE={world} "
            "processes: drop --distributed-world-size (torchrun's world size is used)")
    use_cuda = torch.cuda.is_available() and not cfg.common.cpu
    if not use_cuda and dt.distributed_backend == "nccl":
        raise DistributedLaunchError(
            "training on CPU under torchrun needs --distributed-backend gloo (NCCL only moves CUDA tensors)")
    if use_cuda and local_rank >= torch.cuda.device_count():
        raise DistributedLaunchError(
            f"torchrun process LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPU(s) are visible: "
            "use --nproc_per_node <= the number of GPUs per node (or --cpu with --distributed-backend gloo)")
    dt.distributed_world_size = world
    dt.distributed_rank = rank
    dt.distributed_init_method = "env://"
    dt.distributed_no_spawn = True  # torchrun started the processes
    dt.device_id = local_rank if use_cuda else 0
    return True


def _refuse_empty_spawn(cfg):
    """fairseq's own launcher spawns ``min(cuda.device_count(), world_size)`` processes: with no GPU
    it would start none and silently train nothing."""
    import torch

    dt = cfg.distributed_training
    if (dt.distributed_init_method is not None and not dt.distributed_no_spawn and not cfg.common.tpu
            and dt.distributed_world_size > 1 and torch.cuda.device_count() == 0):
        raise DistributedLaunchError(
            f"--distributed-world-size {dt.distributed_world_size} without GPUs: fairseq's launcher starts one "
            "process per GPU (none here). On CPU launch the processes with torchrun: torchrun --nproc_per_node N "
            "-m fairseq_cli.train ... --cpu --distributed-backend gloo")


def _distributed_launch():
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils.call_main
    if getattr(original, "_forms_torchrun_group", False):
        return

    def call_main(cfg, main, **kwargs):
        adopt_torchrun_environment(cfg)
        _refuse_empty_spawn(cfg)
        return original(cfg, main, **kwargs)

    call_main._forms_torchrun_group = True
    distributed_utils.call_main = call_main


def _cpu_data_parallel():
    from fairseq import models
    from fairseq.models import distributed_fairseq_model as dfm

    original = models.DistributedFairseqModel
    if getattr(original, "_cpu_aware", False):
        return

    def DistributedFairseqModel(args, model, process_group, device):
        if getattr(device, "type", str(device)) != "cpu":
            return original(args, model, process_group, device)
        ddp = dfm.DistributedDataParallel

        def cpu_ddp(*a, device_ids=None, output_device=None, **kw):  # a CPU module takes no device ids
            return ddp(*a, device_ids=None, output_device=None, **kw)

        dfm.DistributedDataParallel = cpu_ddp
        try:
            return original(args, model, process_group, device)
        finally:
            dfm.DistributedDataParallel = ddp

    DistributedFairseqModel._cpu_aware = True
    functools.update_wrapper(DistributedFairseqModel, original)
    DistributedFairseqModel._cpu_aware = True
    models.DistributedFairseqModel = DistributedFairseqModel


CONSUMER_STOP_TIMEOUT_S = 30.0  # a consumer stuck in a dead loader worker must not hang the exit


def _stop_background_consumers_at_exit():
    from fairseq.data import iterators

    consumer = iterators.BackgroundConsumer
    if getattr(consumer, "_stopped_at_exit", False):
        return
    live = weakref.WeakSet()
    original_start = consumer.start

    def start(self):
        live.add(self)
        original_start(self)

    def stop_live_consumers():
        deadline = time.monotonic() + CONSUMER_STOP_TIMEOUT_S
        for thread in list(live):
            thread._max_len = 0  # its loop breaks after the next put (``count >= max_len``)
            while thread.is_alive() and time.monotonic() < deadline:
                try:
                    thread._queue.get(timeout=0.01)  # room for the batch in hand and the sentinel
                except queue.Empty:
                    pass

    consumer.start = start
    consumer._stopped_at_exit = True
    atexit.register(stop_live_consumers)


HELP_FLAGS = ("-h", "--help")


class _HelpParsed(Exception):
    """Raised instead of argparse's error while the options are gathered for ``--help``."""


def _help_lists_task_options():
    from fairseq import options

    original = options.parse_args_and_arch
    if getattr(original, "_help_after_options", False):
        return

    def parse_args_and_arch(parser, input_args=None, parse_known=False, suppress_defaults=False, modify_parser=None):
        args = sys.argv[1:] if input_args is None else list(input_args)
        if not parser.add_help or not any(a in HELP_FLAGS for a in args):
            return original(parser, input_args, parse_known, suppress_defaults, modify_parser)

        def error(message):
            raise _HelpParsed(message)

        parser.error = error  # a missing data folder must not stop the help (argparse calls parser.error)
        try:
            original(parser, [a for a in args if a not in HELP_FLAGS], True, False, modify_parser)
        except _HelpParsed:
            pass
        finally:
            del parser.error
        parser.print_help()
        parser.exit()

    parse_args_and_arch._help_after_options = True
    options.parse_args_and_arch = parse_args_and_arch


def _check_checkpoints_before_loading():
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_model_ensemble_and_task
    if getattr(original, "_checks_shipped", False):
        return
    signature = inspect.signature(original)

    def load_model_ensemble_and_task(*args, **kwargs):
        from fairseq_plugins.shipped import explain_load_error, verify_shipped

        bound = signature.bind(*args, **kwargs)
        filenames, task = bound.arguments.get("filenames", ()), bound.arguments.get("task")
        for filename in filenames:
            verify_shipped(filename, task)
        try:
            return original(*args, **kwargs)
        except RuntimeError as err:
            explained = explain_load_error(err, filenames, task)
            if explained is None:
                raise
            raise explained from None

    load_model_ensemble_and_task._checks_shipped = True
    functools.update_wrapper(load_model_ensemble_and_task, original)
    load_model_ensemble_and_task._checks_shipped = True
    checkpoint_utils.load_model_ensemble_and_task = load_model_ensemble_and_task


def _interactive_reads_undecodable_lines():
    module = sys.modules.get("fairseq_cli.interactive")  # imported by fairseq-interactive before the plugin
    if module is None or getattr(module.buffered_read, "_surrogateescape", False):
        return

    def buffered_read(input, buffer_size):
        """fairseq's, reading bytes: a line that is not UTF-8 keeps its bytes as surrogates (the task skips it)."""
        stream = sys.stdin.buffer if input == "-" else open(input, "rb")
        buffer = []
        try:
            for raw in stream:
                buffer.append(raw.decode("utf-8", errors="surrogateescape").strip())
                if len(buffer) >= buffer_size:
                    yield buffer
                    buffer = []
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        if buffer:
            yield buffer

    buffered_read._surrogateescape = True
    module.buffered_read = buffered_read


def apply():
    """Idempotent; called from ``fairseq_plugins/__init__.py``."""
    global _APPLIED
    if _APPLIED:
        return
    _restore_numpy_aliases()
    _allow_fairseq_checkpoint_classes()
    _keep_last_batch()
    _distributed_launch()
    _cpu_data_parallel()
    _stop_background_consumers_at_exit()
    _help_lists_task_options()
    _check_checkpoints_before_loading()
    _interactive_reads_undecodable_lines()
    _APPLIED = True
