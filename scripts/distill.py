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
import sys
from pathlib import Path

from scripts.lab.corpora.distillation import distill
from scripts.lab.corpora.distilled_folder import DistillError, restore, ship
from scripts.lab.evaluation import EvaluationError


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


def main(argv=None):
    args = parse_args(argv)
    record = restore(args) if args.restore else distill(args)
    if args.ship:
        ship(Path(args.out), Path(args.ship), record)
    return record


if __name__ == "__main__":
    try:
        main()
    except (DistillError, EvaluationError) as err:
        sys.exit(f"error: {err}")
