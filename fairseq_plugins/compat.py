"""Repairs for fairseq-fixed 0.12.3.1 on torch >= 2.6 and numpy 2, applied once at plugin import.

fairseq-fixed is upstream fairseq main (2024-01) plus Python 3.11 fixes.  What broke since is
repaired here, in one place, so that no user has to set an environment variable:

1. torch >= 2.6 loads with ``weights_only=True`` by default.  fairseq checkpoints pickle an
   ``argparse.Namespace`` (``args``), plain-Python config dicts and fairseq's meter objects, so
   ``fairseq-generate``/``fairseq-interactive``/``fairseq-train --restore-file`` fail on every
   ordinary checkpoint.  We allow-list exactly the classes fairseq itself writes into a checkpoint
   (torch's ``add_safe_globals``) instead of turning the safe loader off; with them numeric numpy
   arrays, which the meters of a run with ``--eval-bleu`` hold (its checkpoints failed to load).
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
"""
import argparse
import atexit
import functools
import os
import queue
import time
import types
import weakref

import numpy as np

_APPLIED = False


def _restore_numpy_aliases():
    if "compat" not in np.__dict__:
        np.compat = types.SimpleNamespace(long=np.int64, unicode=str)
    elif not hasattr(np.compat, "long"):
        np.compat.long = np.int64
    for name, alias in (("float", float), ("int", int), ("long", int), ("bool", bool)):
        if name not in np.__dict__:
            setattr(np, name, alias)


def _allow_fairseq_checkpoint_classes():
    import torch

    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:  # torch < 2.4 loads everything anyway
        return
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
    classes += [type(np.dtype(t)) for t in (np.int64, np.int32, np.float64, np.float32)]
    add(classes)


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


class DistributedLaunchError(RuntimeError):
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
    _APPLIED = True
