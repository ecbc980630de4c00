"""A shipped checkpoint (one listed in a ``models/MANIFEST.json``) checked before fairseq loads it.

fairseq decodes a corrupt checkpoint, or a data folder whose dictionary has the model's size in
another order, to garbage with exit status 0.  The models/ folder knows better: its manifest holds
each checkpoint's sha256 and the folder its evaluation set was shipped in
(``<evaluation_data>/bin/dict.<lang>.txt``: the dictionaries the model was trained with).  So
before a checkpoint of such a folder is loaded with a task (``fairseq-generate``,
``fairseq-interactive``, the lab's in-process :class:`~scripts.lab.evaluation.generation.Generation`):

* its sha256 must be the manifest's (hashed once per file and modification time in a process);
* the task's dictionaries (the data folder's ``dict.<lang>.txt``) must be the shipped ones, symbol
  for symbol.

``--no-verify-shipped`` (a ``fast_translation`` option) skips both.  For any other checkpoint, a
dictionary of another size than the model's embeddings is reported as such (:func:`explain_load_error`)
instead of torch's "size mismatch" traceback.  ``compat.py`` calls both around fairseq's
``load_model_ensemble_and_task``.  :func:`file_sha256` is the one hash of a file: the blockwise model's
shipped base and the lab's reference models (``scripts/lab/evaluation/reference_models.py``) use it.
"""
import hashlib
import json
import os
from pathlib import Path

from fairseq_plugins.errors import PluginError

MANIFEST = "MANIFEST.json"  # as the lab's reference_models.py writes it
OPT_OUT = "--no-verify-shipped"
_SHA256 = {}  # (path, size, mtime_ns) -> hex digest: each file hashed once per process
_SYMBOLS = {}  # (path, size, mtime_ns) -> a dictionary file's symbols


class ShippedCheckpointError(PluginError, ValueError):
    """A shipped checkpoint that is corrupt, or a data folder whose dictionaries are not the model's."""


def _stamp(path):
    st = os.stat(path)
    return str(path), st.st_size, st.st_mtime_ns


def file_sha256(path):
    """The sha256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_sha256(path):
    key = _stamp(path)
    if key not in _SHA256:
        _SHA256[key] = file_sha256(path)
    return _SHA256[key]


def dictionary_symbols(path):
    """The symbols of a fairseq ``dict.<lang>.txt`` in the order fairseq's ``Dictionary.load`` gives them."""
    from fairseq.data import Dictionary

    key = _stamp(path)
    if key not in _SYMBOLS:
        _SYMBOLS[key] = list(Dictionary.load(str(path)).symbols)
    return _SYMBOLS[key]


def shipped_entry(checkpoint):
    """``(models folder, manifest entry)`` of a checkpoint listed in its folder's manifest, or None."""
    path = Path(checkpoint).resolve()
    folder = path.parent.parent
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return None
    try:
        models = json.loads(manifest.read_text()).get("models", {})
    except (OSError, ValueError):
        return None
    for entry in models.values():
        if isinstance(entry, dict) and entry.get("checkpoint") and (folder / entry["checkpoint"]).resolve() == path:
            return folder, entry
    return None


def verify_shipped(checkpoint, task=None):
    """Refuse a shipped ``checkpoint`` that does not match its manifest's sha256, or a ``task`` whose
    dictionaries are not the ones it was trained with; nothing for any other checkpoint."""
    if task is not None and getattr(getattr(task, "cfg", None), "no_verify_shipped", False):
        return
    found = shipped_entry(checkpoint)
    if found is None:
        return
    folder, entry = found
    if entry.get("sha256") and cached_sha256(checkpoint) != entry["sha256"]:
        raise ShippedCheckpointError(
            f"{checkpoint} does not match its sha256 in {folder / MANIFEST}: the file is corrupt or was changed; "
            f"restore it (git checkout -- {checkpoint}), or pass {OPT_OUT} to load it as it is")
    if task is not None:
        _verify_dictionaries(checkpoint, folder, entry, task)


def _verify_dictionaries(checkpoint, folder, entry, task):
    cfg = task.cfg
    if not entry.get("evaluation_data") or not getattr(cfg, "data", None) or not hasattr(task, "source_dictionary"):
        return
    shipped = folder / entry["evaluation_data"] / "bin"
    if not shipped.is_dir():
        return  # the folder's own check (ReferenceModels.problems) reports a missing evaluation set
    data = Path(str(cfg.data).split(os.pathsep)[0])
    fix = (f"decode it with the data folder it was trained on ({shipped}), or binarize your text with its dictionaries "
           f"(fairseq-preprocess --srcdict/--tgtdict {shipped}/dict.<lang>.txt); {OPT_OUT} skips this check")
    for lang, dictionary in ((cfg.source_lang, task.source_dictionary), (cfg.target_lang, task.target_dictionary)):
        if lang is None or dictionary is None:
            continue
        trained = shipped / f"dict.{lang}.txt"
        if not trained.is_file():
            langs = sorted(p.name for p in shipped.glob("dict.*.txt"))
            raise ShippedCheckpointError(
                f"{checkpoint} was trained with {', '.join(langs)} ({shipped}), not with a dict.{lang}.txt: the data "
                f"folder {data} is of another corpus; {fix}")
        want, have = dictionary_symbols(trained), list(dictionary.symbols)
        if have != want:
            how = (f"the same {len(want)} symbols in another order" if sorted(have) == sorted(want)
                   else f"{len(have)} symbols, not its {len(want)}" if len(have) != len(want)
                   else f"{len(want)} symbols, not all of them its own")
            raise ShippedCheckpointError(
                f"{data / f'dict.{lang}.txt'} is not the dictionary {checkpoint} was trained with ({trained}): {how}; "
                f"{fix}")


def explain_load_error(error, filenames, task=None):
    """A :class:`ShippedCheckpointError` for torch's "size mismatch" of the embeddings or output
    projection (the data folder's dictionaries are not the model's), or None for any other error."""
    text = str(error)
    if "size mismatch for" not in text:
        return None
    lines = [line.strip() for line in text.splitlines() if "size mismatch for" in line
             and ("embed_tokens" in line or "output_projection" in line)]
    if not lines:
        return None
    data = getattr(getattr(task, "cfg", None), "data", None)
    where = f"the data folder {str(data).split(os.pathsep)[0]}" if data else "the data folder"
    return ShippedCheckpointError(
        f"{', '.join(str(f) for f in filenames)} was trained with other dictionaries than {where}'s dict.<lang>.txt "
        f"({lines[0]}): give the data folder the model was trained on (the fairseq-preprocess output of its corpus)")
