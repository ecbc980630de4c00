"""Sequence-level knowledge distillation (Kim & Rush 2016; ``python -m scripts.distill``): a corpus folder's
split translated by a teacher in resumable shards (``OUT/shards/``, each written when complete), assembled in
the original order with the gold target kept where the teacher gave none, into a corpus folder of the same
layout (:mod:`.distilled_folder`)."""
import json
import math
import sys
import time
from pathlib import Path

from tqdm import tqdm

from scripts.lab.corpora.distilled_folder import DistillError, log, write_corpus
from scripts.lab.evaluation.generation import Generation
from scripts.lab.evaluation.reference_models import file_sha256


SETTINGS = ("data", "teacher", "beam", "lenpen", "max_len_a", "max_len_b", "subset", "shard_size", "source", "target")


def shard_path(work, i):
    return work / f"shard-{i:05d}.txt"


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
