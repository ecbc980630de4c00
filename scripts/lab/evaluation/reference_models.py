"""The reference models kept in the repository's ``models/`` folder: the only checkpoints in git.

Layout (``python -m scripts.benchmark --checkpoints models/ --data models/data/en-de`` reads it as it is)::

    models/MANIFEST.json               one entry per model: what it is, how far it trained, its BLEU, sha256
    models/<name>/checkpoint_best.pt   fp16 weights and the saved config; no optimizer moments
    models/data/<corpus>/              what a model is measured on: the subword model, the dictionaries, the
                                       valid/test sets binarized and the test set's text (a corpus folder without train)

The corpora are built from the message catalogs of a machine, which differ between machines, so the
published numbers are measured on the shipped sets, and a training goes on from a shipped model only
on a corpus with the same hash.  A packed checkpoint keeps what ``fairseq-train --restore-file``
needs to go on (the update count, the learning-rate schedule, the optimizer's parameter groups and
the data position; Adam's moments start again), so a machine that lost its run folder resumes from
the repository.  A model is replaced only by a better-converged one (:func:`better`), and the folder
stays within :data:`BUDGET_BYTES`.
"""
import fcntl
import hashlib
import json
import os
import shlex
import shutil
from contextlib import contextmanager
from pathlib import Path

from fairseq_plugins.shipped import MANIFEST, file_sha256  # noqa: F401  (file_sha256: the plugin's one hash)
from scripts.lab.corpora.files import AtomicBinary, AtomicWriter

BUDGET_BYTES = 40 * 2 ** 20  # the whole models/ folder
CHECKPOINT = "checkpoint_best.pt"
DATA = "data"
# {CKPT}/<role>/checkpoint_best.pt in the convergence run's lists, each frozen once (:func:`freeze`):
ROLES = {
    "teacher": "the distilled corpus's teacher and the orders' warm start",
    "verifier": "the baseline the drafters and blockwise heads are trained for: the one models/ ships",
}
EXTRA_STATE_KEPT = ("train_iterator", "previous_training_time", "best", "val_loss")  # what resuming reads
EVALUATION_SPLITS = ("valid", "test")  # binarized in bin/ (scripts/orders_report.py reads valid's slot accuracy)
TEXT_SPLITS = ("test",)  # as raw text: the references test BLEU is scored against (valid's text would pass the budget)
# besides the raw test text and bin/'s dictionaries and splits: what turns new text into pieces and back
# (not spm.vocab, sentencepiece's readable listing, nor the <split>.sub.<lang> files bin/ was made from: the
# set fits the 40 MiB budget with them left out, 0.6 MiB)
SEGMENTATION_FILES = ("spm.model", "bpe.codes", "subword")
STAGED = ".staged.pt"  # models/.<name>.staged.pt: an offer's checkpoint until it is taken


class ReferenceModelError(SystemExit):
    def __init__(self, message):
        super().__init__(f"error: {message}")


def corpus_sha256(corpus):
    """One hash of a corpus folder's binarized splits and dictionaries (``bin/``): what a model trained on."""
    digest = hashlib.sha256()
    files = sorted(p for p in (Path(corpus) / "bin").iterdir() if p.suffix in (".bin", ".idx", ".txt")
                   and p.name != "preprocess.log")
    if not files:
        raise ReferenceModelError(f"{corpus}/bin holds no binarized corpus")
    for p in files:
        digest.update(p.name.encode() + b"\0" + file_sha256(p).encode())
    return digest.hexdigest()


def evaluation_corpus(corpus):
    """The corpus whose valid/test sets a model trained on ``corpus`` is measured on: a distilled corpus's
    original (its ``distill.json`` names it; the splits are copies of the gold ones), else itself."""
    record = Path(corpus) / "distill.json"
    if record.exists():
        return Path(json.loads(record.read_text())["data"])
    return Path(corpus)


def _half(state_dict):
    """Floating-point tensors as fp16; tensors that share storage (tied embeddings) stay one tensor."""
    halves = {}
    for key, tensor in state_dict.items():
        if tensor.is_floating_point():
            alias = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
            state_dict[key] = halves.setdefault(alias, tensor.half())
    return state_dict


def strip_checkpoint(src, dest, half: bool = False, resumable: bool = False):
    """Write fairseq checkpoint ``src`` to ``dest`` without optimizer moments, keeping the
    ``extra_state`` fairseq's loader reads (``train_iterator``: a KeyError without it); ``half``: fp16
    weights (tied tensors stored once); ``resumable``: keep the optimizer's parameter groups, so
    ``fairseq-train --restore-file`` rebuilds the optimizer (its moments start at zero).  Returns the size."""
    import torch

    from fairseq_plugins.compat import load_checkpoint

    state = load_checkpoint(src)
    if half:
        state["model"] = _half(state["model"])
    optimizer = state.get("last_optimizer_state") if resumable else None
    state["last_optimizer_state"] = None if optimizer is None else {"state": {}, "param_groups": optimizer["param_groups"]}
    extra = state.get("extra_state") or {}
    state["extra_state"] = {k: extra[k] for k in EXTRA_STATE_KEPT if k in extra}
    with AtomicBinary(dest) as f:
        torch.save(state, f)
    return Path(dest).stat().st_size


def freeze(ckpt_root, role, source):
    """The checkpoint of ``role`` (:data:`ROLES`) in a run's checkpoints folder ``ckpt_root``: copied from
    ``source`` the first time and never replaced after, so every model trained from it (distilled
    from it, warm-started from it, drafting for it) sees the same weights, also when ``source`` is a
    baseline that trains on.  Returns its path."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    from fairseq_plugins.compat import load_checkpoint

    dest = Path(ckpt_root) / role / CHECKPOINT
    if not dest.exists():
        if not Path(source).is_file():
            raise FileNotFoundError(f"no {role} checkpoint at {source}: give a trained baseline's checkpoint")
        load_checkpoint(source, mmap=True)  # a file that would run code when unpickled is refused, not frozen
        with AtomicBinary(dest) as f, open(source, "rb") as src:
            shutil.copyfileobj(src, f)
    return dest


def pack_checkpoint(src, dest):
    """Write ``src`` (a fairseq checkpoint) to ``dest`` as the models/ folder keeps it; returns its size."""
    return strip_checkpoint(src, dest, half=True, resumable=True)


def ship_corpus(corpus, dest):
    """Copy what measuring a model on ``corpus`` needs into ``dest`` (no train split)."""
    corpus, dest = Path(corpus), Path(dest)
    wanted = [p for p in corpus.iterdir() if p.is_file() and (p.name in SEGMENTATION_FILES or (
        p.name.split(".")[0] in TEXT_SPLITS and len(p.name.split(".")) == 2))]  # <split>.<lang>
    wanted += [p for p in (corpus / "bin").iterdir() if p.name.startswith(("dict.",) + EVALUATION_SPLITS)]
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for p in wanted:
        target = tmp / p.relative_to(corpus)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, target)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def better(new, old):
    """Whether entry ``new`` may replace ``old``: a converged model beats one that is not; between
    converged ones, the higher validation BLEU; between unconverged ones, the one trained further."""
    if old is None:
        return True
    if bool(new.get("converged")) != bool(old.get("converged")):
        return bool(new.get("converged"))
    if new.get("converged"):
        return (new.get("valid_bleu") or 0.0) > (old.get("valid_bleu") or 0.0)
    return new["updates"] > old["updates"]


def folder_bytes(folder, leave_out=()):
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and p not in leave_out)


class ReferenceModels:
    """The models/ folder: read its manifest, offer it a model, verify it."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.manifest = self._read()

    def _read(self):
        path = self.folder / MANIFEST
        return json.loads(path.read_text()) if path.exists() else {"budget_bytes": BUDGET_BYTES, "models": {}}

    @contextmanager
    def _locked(self):
        """The folder locked against another run's offer (stages 1 and 2 side by side), its manifest read again."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.manifest = self._read()
            yield
        finally:
            os.close(fd)

    @property
    def models(self):
        return self.manifest["models"]

    def checkpoint(self, name):
        return self.folder / name / CHECKPOINT

    def entry(self, name):
        return self.models.get(name)

    def resumable(self, name, corpus):
        """The shipped checkpoint a training of ``name`` on ``corpus`` may go on from (None: none, or converged);
        an error when its corpus differs: its dictionaries would not match."""
        entry = self.entry(name)
        if entry is None or entry.get("converged") or not self.checkpoint(name).exists():
            return None
        if entry["corpus_sha256"] != corpus_sha256(corpus):
            raise ReferenceModelError(
                f"{self.checkpoint(name)} was trained on another {entry['corpus']} corpus (this machine's message catalogs "
                f"differ from those it was built from); train {name} from scratch in another --out without "
                "--models-dir, or build the corpus on a machine like the one named in the manifest")
        return self.checkpoint(name)

    def offer(self, entry, checkpoint, corpus):
        """Pack ``checkpoint`` as ``entry['name']`` if it is better than the model there (:func:`better`) and the
        folder stays within budget; returns whether it was taken.  ``entry``: the manifest fields known
        to the caller (name, config, corpus, updates, converged, stopped, valid_bleu, test_bleu, command)."""
        with self._locked():
            return self._offer(entry, checkpoint, corpus)

    def _offer(self, entry, checkpoint, corpus):
        name = entry["name"]
        if not better(entry, self.entry(name)):
            return False
        staged = self.folder / f".{name}{STAGED}"
        try:  # whatever fails, nothing staged stays behind (git ignores it: only rm would remove it)
            pack_checkpoint(checkpoint, staged)
            base = self._share_frozen_base(staged, name)
            size = staged.stat().st_size
            budget = self.manifest.get("budget_bytes", BUDGET_BYTES)
            total = folder_bytes(self.folder, leave_out={staged, self.checkpoint(name)}) + size
            if total > budget:
                raise ReferenceModelError(f"{name} ({size / 2**20:.1f} MiB) would bring {self.folder} to "
                                          f"{total / 2**20:.1f} MiB, over its budget of {budget / 2**20:.0f} MiB: remove a "
                                          "model from the manifest and its folder first")
            evaluation = evaluation_corpus(corpus)
            shipped = self.folder / DATA / evaluation.name
            if not shipped.exists():
                ship_corpus(evaluation, shipped)
            self.checkpoint(name).parent.mkdir(exist_ok=True)
            os.replace(staged, self.checkpoint(name))
        finally:
            staged.unlink(missing_ok=True)
        self.models[name] = dict(entry, corpus_sha256=corpus_sha256(corpus), evaluation_data=f"{DATA}/{evaluation.name}",
                                 checkpoint=f"{name}/{CHECKPOINT}", bytes=size,
                                 sha256=file_sha256(self.checkpoint(name)))
        if base:  # the heads only: their frozen base is this model of the folder
            self.models[name].update(base=base, base_sha256=self.models[base]["sha256"])
        self.save()
        return True

    def _share_frozen_base(self, staged, name):
        """Frozen blockwise heads (``--freeze-base``) whose base is, weight for weight, a model of this folder
        keep their heads only: ``staged`` is rewritten without the base, its config naming that model's
        checkpoint (relative to the folder) and sha256 (``blockwise_transformer.shipped_base_state`` loads
        it).  Returns the base's name, or None (the checkpoint stays whole)."""
        import torch

        from fairseq_plugins.compat import load_checkpoint
        from fairseq_plugins.models.blockwise_transformer import HEADS

        state = load_checkpoint(staged)
        cfg = state["cfg"]["model"]
        if getattr(cfg, "arch", None) != "blockwise_transformer" or not getattr(cfg, "freeze_base", False):
            return None
        weights = state["model"]
        base_keys = {k for k in weights if not k.startswith(HEADS)}
        for other in sorted(n for n in self.models if n != name and not self.models[n].get("base")):
            shipped = load_checkpoint(self.checkpoint(other))["model"]
            if set(shipped) == base_keys and all(shipped[k].dtype == weights[k].dtype and shipped[k].shape == weights[k].shape
                                                 and torch.equal(shipped[k], weights[k]) for k in base_keys):
                state["model"] = {k: v for k, v in weights.items() if k.startswith(HEADS)}
                cfg.base_checkpoint = f"{other}/{CHECKPOINT}"
                cfg.base_sha256 = self.models[other]["sha256"]
                with AtomicBinary(staged) as f:
                    torch.save(state, f)
                return other
        return None

    def save(self):
        self.manifest["models"] = dict(sorted(self.models.items()))
        with AtomicWriter(self.folder / MANIFEST) as f:
            f.write(json.dumps(self.manifest, indent=1) + "\n")

    def problems(self):
        """What is wrong with the folder: a checkpoint missing or not matching its sha256, a missing
        evaluation set, heads-only blockwise heads whose base is gone or was replaced, a staged checkpoint
        left by an offer that was killed, the budget passed."""
        found = [f"{p} was left by an offer that did not finish (git ignores it): rm {shlex.quote(str(p))}"
                 for p in sorted(self.folder.glob(f".*{STAGED}"))]
        for name, entry in self.models.items():
            base = entry.get("base")
            if base and (self.entry(base) or {}).get("sha256") != entry["base_sha256"]:
                found.append(f"{name}: its frozen base {base} is not the one its heads were trained on (replaced or "
                             f"removed): train them again on it (scripts/convergence_run.sh), or remove {name}")
            path = self.folder / entry["checkpoint"]
            if not path.exists():
                found.append(f"{name}: {path} is missing")
            elif file_sha256(path) != entry["sha256"]:
                found.append(f"{name}: {path} does not match its sha256 in {MANIFEST}")
            if not (self.folder / entry["evaluation_data"] / "bin").exists():
                found.append(f"{name}: its evaluation set {entry['evaluation_data']} is missing")
        total = folder_bytes(self.folder) if self.folder.exists() else 0
        if total > self.manifest.get("budget_bytes", BUDGET_BYTES):
            found.append(f"{self.folder} holds {total / 2**20:.1f} MiB, over its budget")
        return found

    def check_whole(self):
        """An error listing :meth:`problems`, if any, and how to restore the folder as git has it."""
        found = self.problems()
        if found:  # checkout restores the files git tracks; a file git ignores (a staged checkpoint) has its own rm
            raise ReferenceModelError(f"{self.folder} is not whole:\n  " + "\n  ".join(found) + f"\n(git checkout -- "
                                      f"{self.folder} restores the files git tracks)")

    def describe(self, name):
        """One line on model ``name``: how far it trained and why it stopped, and its test BLEU if it has one."""
        e = self.models[name]
        bleu = "" if e.get("test_bleu") is None else f"; test BLEU {e['test_bleu']}"
        return f"{self.folder.name}/{name}: {e['updates']} updates, {e['stopped']}{bleu}"
