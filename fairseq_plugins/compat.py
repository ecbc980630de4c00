"""Repairs for fairseq-fixed 0.12.3.1 on torch >= 2.6 and numpy 2, applied once at plugin import.

fairseq-fixed is upstream fairseq main (2024-01) plus Python 3.11 fixes.  Three things broke since
and are repaired here, in one place, so that no user has to set an environment variable:

1. torch >= 2.6 loads with ``weights_only=True`` by default.  fairseq checkpoints pickle an
   ``argparse.Namespace`` (``args``), plain-Python config dicts and fairseq's meter objects, so
   ``fairseq-generate``/``fairseq-interactive``/``fairseq-train --restore-file`` fail on every
   ordinary checkpoint.  We allow-list exactly the classes fairseq itself writes into a checkpoint
   (torch's ``add_safe_globals``) instead of turning the safe loader off.
2. numpy 2 removed ``np.compat.long``, ``np.float`` and ``np.int`` (still used by
   ``token_block_dataset``, ``language_pair_dataset``, ``dynamic_crf_layer`` and ``data_utils``).
   They are restored as the aliases numpy 1 had.
3. ``data_utils.batch_by_size`` drops the last batch when its size is not a multiple of
   ``--required-batch-size-multiple`` (default 8): ``fairseq-generate`` silently translated 48 of
   50 sentences.  Every BLEU and every identical-to-greedy comparison must cover all sentences,
   so the dropped tail is given back as a final (smaller) batch.
"""
import argparse
import types

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


def apply():
    """Idempotent; called from ``fairseq_plugins/__init__.py``."""
    global _APPLIED
    if _APPLIED:
        return
    _restore_numpy_aliases()
    _allow_fairseq_checkpoint_classes()
    _keep_last_batch()
    _APPLIED = True
