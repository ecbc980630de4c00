"""A distilled corpus folder (``python -m scripts.distill``): the distilled split as subword text, binarized
with the original dictionaries beside the rest of the original folder's files; and the teacher's targets
shipped (``--ship``: xz and distill.json) and restored from there (``--restore``) without a teacher run."""
import json
import lzma
import shutil
from pathlib import Path

from scripts.lab.corpora.binarize import binarize
from scripts.lab.evaluation.reference_models import SEGMENTATION_FILES


class DistillError(RuntimeError):
    """Bad input to the distillation; the message says how to fix it."""


# copied from the original corpus folder as they are (raw splits other than train, subword model)
AUX_FILES = SEGMENTATION_FILES + ("spm.vocab",)  # a distilled corpus is whole: the readable listing too


def log(msg):
    print(f"[distill] {msg}", flush=True)


TARGETS = "{subset}.sub.{target}.xz"  # the shipped targets, one line per source sentence


def ship(out, dest, record):
    """The teacher's targets of corpus ``out`` (xz) and its record into ``dest``, written whole or not at all."""
    name = TARGETS.format(**record)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with open(out / f"{record['subset']}.sub.{record['target']}", "rb") as f, lzma.open(tmp / name, "wb", preset=9) as z:
        shutil.copyfileobj(f, z)
    (tmp / "distill.json").write_text(json.dumps(record, indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    log(f"shipped {name} ({(dest / name).stat().st_size / 2**20:.2f} MiB) and distill.json to {dest}")


def restore(args):
    """The corpus of ``--restore``'s shipped targets: the sources of ``--data`` as the distillation wrote them."""
    from fairseq.data import Dictionary, data_utils

    shipped, data, out = Path(args.restore), Path(args.data), Path(args.out)
    if not (shipped / "distill.json").exists():
        raise DistillError(f"{shipped} holds no distill.json: give the folder --ship wrote")
    record = json.loads((shipped / "distill.json").read_text())
    src, tgt, subset = record["source"], record["target"], record["subset"]
    with lzma.open(shipped / TARGETS.format(**record), "rt", encoding="utf-8", newline="\n") as f:
        targets = f.read().split("\n")[:-1]
    src_dict = Dictionary.load(str(data / "bin" / f"dict.{src}.txt"))
    sources = data_utils.load_indexed_dataset(str(data / "bin" / f"{subset}.{src}-{tgt}.{src}"), src_dict)
    if sources is None or len(sources) != len(targets):
        raise DistillError(f"{data} has {0 if sources is None else len(sources)} {subset} sources, {shipped} "
                           f"{len(targets)} targets: restore on the corpus they were distilled from")
    out.mkdir(parents=True, exist_ok=True)
    write_corpus(out, data, src, tgt, subset, [src_dict.string(sources[i]) for i in range(len(sources))], targets,
                 args.workers)
    record = dict(record, data=str(data.resolve()), restored_from=str(shipped.resolve()))
    (out / "distill.json").write_text(json.dumps(record, indent=1) + "\n")
    log(f"restored {out} from {shipped} ({len(targets)} sentences, teacher {record['teacher']})")
    return record


def write_corpus(out, data, src, tgt, subset, sources, targets, workers):
    """The distilled split as text (one line per source, in order) and binarized with ``data``'s
    dictionaries, beside the rest of ``data``'s files: what a distillation and a restore both make."""
    for lang, lines in ((src, sources), (tgt, targets)):
        with open(out / f"{subset}.sub.{lang}", "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
    binarize_split(out, data, src, tgt, subset, workers)
    copy_corpus_files(data, out, subset)


def binarize_split(out, data, src, tgt, subset, workers):
    """fairseq-preprocess with the original dictionaries, into OUT/bin (the new split only)."""
    tmp = binarize(out / f"bin.{subset}", src, tgt, {"train": out / f"{subset}.sub"},
                   dicts=(data / "bin" / f"dict.{src}.txt", data / "bin" / f"dict.{tgt}.txt"), workers=workers)
    (out / "bin").mkdir(exist_ok=True)
    for f in tmp.glob(f"train.{src}-{tgt}.*"):
        f.replace(out / "bin" / (subset + f.name[len("train"):]))
    shutil.rmtree(tmp)


def copy_corpus_files(data, out, subset):
    """Everything of the original folder but the distilled split: dictionaries, other binarized
    splits, raw valid/test files (references), subword model and marker."""
    for f in (data / "bin").iterdir():
        if f.is_file() and not f.name.startswith(f"{subset}.") and f.name != "preprocess.log":
            shutil.copy2(f, out / "bin" / f.name)
    for f in data.iterdir():
        if f.is_file() and (f.name in AUX_FILES or not f.name.startswith(f"{subset}.")) and f.name != "DONE":
            shutil.copy2(f, out / f.name)
