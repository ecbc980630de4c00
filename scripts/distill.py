#!/usr/bin/env python
"""Sequence-level knowledge distillation (Kim & Rush 2016): the training split translated by a teacher.

Used by blockwise heads (Stern et al. 2018 §6.2), the GAD drafter and verifier, and the reordered
models alike::

    python -m scripts.distill --data data/en-de --path checkpoints/baseline/checkpoint_best.pt \\
        --out data/en-de-distilled [--beam 5] [--batch-size 64]

``--data`` is a corpus folder as made by ``scripts/build_message_corpus.py`` (``bin/`` with the
binarized splits and dictionaries, the raw test references, the subword model).  The binarized
train split is translated in-process with the teacher's own task and fairseq's generator (beam
search, ``--beam 5``, batches sorted by source length) and ``--out`` gets a corpus folder of the
same layout:

* ``bin/``: ``train`` binarized from the teacher's output with the SAME dictionaries
  (``fairseq-preprocess --srcdict/--tgtdict``), ``valid``/``test`` copied from the original;
* ``train.sub.<src>`` / ``train.sub.<tgt>``: the subword-level sources and teacher translations,
  one line per source sentence, in the original order;
* the raw valid/test files, the subword model and marker, copied (``scripts/benchmark.py`` works
  on the new folder as on the original);
* ``distill.json``: teacher, settings and counts.

Empty teacher outputs (the teacher ends with EOS at once) would become empty training targets; such
sentences keep their gold target instead, and their number is printed and recorded
(``gold_fallbacks``).  Likewise for the pairs fairseq's size filter leaves out (a side longer
than the teacher's ``--max-source-positions`` / ``--max-target-positions``, as fairseq-generate's
``--skip-invalid-size-inputs-valid-test``).

Resumable: the split is translated in shards of ``--shard-size`` sentences, each written to
``OUT/shards/`` when complete; an interrupted run continues with the missing shards (the settings
must be the same).  The shards stay for later re-assembly; delete them once ``distill.json`` exists.
Progress (sentences, speed, ETA) is printed as it goes (tqdm).

A distilled corpus outlives its machine through the repository: ``--ship DEST`` (e.g.
``models/data/en-de-distilled``) writes the teacher's targets (xz) and ``distill.json`` there, and
``--restore DEST`` (instead of ``--path``) rebuilds the same corpus from them without a teacher run:
the same sources from ``--data``, the same targets, the same dictionaries, so the same binarized
files (``evaluation.reference_models.corpus_sha256``), and a model trained on it goes on from its
snapshot in ``models/`` on another machine::

    python -m scripts.distill --data data/en-de --restore models/data/en-de-distilled --out data/en-de-distilled
"""
import argparse
import json
import lzma
import math
import shutil
import sys
import time
from pathlib import Path

from tqdm import tqdm

from scripts.lab.corpora.binarize import binarize
from scripts.lab.evaluation import EvaluationError
from scripts.lab.evaluation.reference_models import SEGMENTATION_FILES, file_sha256
from scripts.lab.evaluation.generation import Generation


class DistillError(RuntimeError):
    """Bad input to the distillation; the message says how to fix it."""


# copied from the original corpus folder as they are (raw splits other than train, subword model)
AUX_FILES = SEGMENTATION_FILES + ("spm.vocab",)  # a distilled corpus is whole: the readable listing too
SETTINGS = ("data", "teacher", "beam", "lenpen", "max_len_a", "max_len_b", "subset", "shard_size", "source", "target")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="corpus folder (with bin/) whose train split is distilled")
    ap.add_argument("--path", help="teacher checkpoint")
    ap.add_argument("--out", required=True, help="new corpus folder")
    ap.add_argument("--ship", metavar="DEST", help="also write the targets (xz) and distill.json to DEST")
    ap.add_argument("--restore", metavar="SHIPPED", help="rebuild the corpus from targets --ship wrote (no --path)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    ap.add_argument("--max-tokens", type=int, default=8000, help="tokens per batch (the longer side of each pair, as fairseq counts)")
    ap.add_argument("--lenpen", type=float, default=1.0)
    # choice: a length cap relative to the source keeps a looping teacher from writing 200-token targets
    ap.add_argument("--max-len-a", type=float, default=1.2)
    ap.add_argument("--max-len-b", type=int, default=10)
    ap.add_argument("--shard-size", type=int, default=5000, help="sentences per resumable shard")
    ap.add_argument("--subset", default="train", help="split to distil (default train)")
    ap.add_argument("--cpu", action="store_true", help="decode on CPU even when a GPU is available")
    ap.add_argument("--fp16", action="store_true", help="half precision on GPU")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads on CPU")
    ap.add_argument("--workers", type=int, default=1, help="fairseq-preprocess workers")
    args = ap.parse_args(argv)
    if bool(args.path) == bool(args.restore):
        ap.error("give the teacher (--path CKPT) or shipped targets (--restore SHIPPED), one of them")
    return args


def log(msg):
    print(f"[distill] {msg}", flush=True)


def shard_path(work, i):
    return work / f"shard-{i:05d}.txt"


def main(argv=None):
    args = parse_args(argv)
    record = restore(args) if args.restore else distill(args)
    if args.ship:
        ship(Path(args.out), Path(args.ship), record)
    return record


def distill(args):
    import torch

    torch.set_num_threads(args.threads)
    data, out = Path(args.data), Path(args.out)
    bin_dir = data / "bin"
    if not bin_dir.is_dir():
        raise DistillError(f"{bin_dir} does not exist: --data must be a corpus folder made by "
                           "scripts/build_message_corpus.py (or a paper pipeline)")
    if out.resolve() == data.resolve():
        raise DistillError("--out must be a new folder, not the --data corpus itself")
    use_cuda = torch.cuda.is_available() and not args.cpu
    teacher = Generation.from_checkpoint(args.path, bin_dir, "cuda" if use_cuda else "cpu", args.fp16 and use_cuda,
                                         beam=args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a,
                                         max_len_b=args.max_len_b)
    task = teacher.task
    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    settings = dict(data=str(data.resolve()), teacher=str(Path(args.path).resolve()), beam=args.beam,
                    lenpen=args.lenpen, max_len_a=args.max_len_a, max_len_b=args.max_len_b, subset=args.subset,
                    shard_size=args.shard_size, source=src, target=tgt)
    done_file = out / "distill.json"
    if done_file.exists() and all(json.loads(done_file.read_text()).get(k) == settings[k] for k in SETTINGS):
        log(f"{out} is already distilled with these settings: nothing to do")
        return json.loads(done_file.read_text())
    work = out / "shards"
    work.mkdir(parents=True, exist_ok=True)
    settings_file = work / "settings.json"
    if settings_file.exists():
        previous = json.loads(settings_file.read_text())
        if previous != settings:
            changed = [k for k in SETTINGS if previous.get(k) != settings[k]]
            raise DistillError(f"{work} holds a distillation with other settings ({', '.join(changed)}); "
                               "pass the same ones to resume it, or remove the folder to start over")
    settings_file.write_text(json.dumps(settings, indent=1) + "\n")

    ds = teacher.dataset(args.subset)
    n = len(ds)
    if ds.tgt is None:
        raise DistillError(f"the {args.subset} split of {bin_dir} has no target side")
    n_shards = math.ceil(n / args.shard_size)
    todo = [i for i in range(n_shards) if not shard_path(work, i).exists()]
    log(f"teacher {args.path}: {n} {args.subset} sentences ({src}->{tgt}), beam {args.beam}, "
        f"{n_shards} shards of {args.shard_size}, {n_shards - len(todo)} done before, "
        f"{'GPU' if use_cuda else 'CPU'}")
    remaining = sum(min(n, (i + 1) * args.shard_size) - i * args.shard_size for i in todo)
    start = time.time()
    progress = tqdm(total=remaining, file=sys.stdout, mininterval=10, ascii=True,
                    bar_format="[distill] {n}/{total} sentences, {rate_fmt}, ETA {remaining}", unit="sent")
    for i in todo:
        ids = range(i * args.shard_size, min(n, (i + 1) * args.shard_size))
        # pairs longer than the teacher's positions are left out: they keep their gold target
        out_tokens = teacher.decode(teacher.batches(args.subset, args.batch_size, args.max_tokens, ids=ids,
                                                    skip_too_long=True), progress)
        progress.update(len(ids) - len(out_tokens))
        lines = [teacher.string(out_tokens[j]) if j in out_tokens else "" for j in ids]
        tmp = shard_path(work, i).with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        tmp.rename(shard_path(work, i))  # a shard exists only when complete
    progress.close()

    # assemble: one line per source, original order; empty teacher outputs keep the gold target
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    hyps = []
    for i in range(n_shards):
        lines = shard_path(work, i).read_text(encoding="utf-8").split("\n")[:-1]
        expected = min(n, (i + 1) * args.shard_size) - i * args.shard_size
        if len(lines) != expected:
            raise DistillError(f"{shard_path(work, i)} has {len(lines)} lines, expected {expected}: remove it and rerun")
        hyps.extend(lines)
    gold = [i for i, hyp in enumerate(hyps) if not hyp.strip()]
    for i in gold:
        hyps[i] = tgt_dict.string(ds.tgt[i])
    fallbacks = len(gold)
    if fallbacks:
        log(f"{fallbacks} sentences without a teacher output (empty, or too long for the teacher) keep their gold target")
    write_corpus(out, data, src, tgt, args.subset, [src_dict.string(ds.src[i]) for i in range(n)], hyps, args.workers)
    record = dict(settings, teacher_sha256=file_sha256(args.path), sentences=n, gold_fallbacks=fallbacks,
                  seconds=round(time.time() - start, 1))
    done_file.write_text(json.dumps(record, indent=1) + "\n")
    log(f"done: {out} ({n} sentences, {fallbacks} gold fallbacks)")
    return record


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


if __name__ == "__main__":
    try:
        main()
    except (DistillError, EvaluationError) as err:
        sys.exit(f"error: {err}")
