#!/usr/bin/env python
"""How many beam steps one verification call could replay, per model, beam, draft kind and draft cap
k (issue 51, item 2; the count is defined in ``scripts/lab/evaluation/beam_replay.py``).

Each shipped model (``models/MANIFEST.json``: its checkpoint, its evaluation corpus, its
``generate`` arguments) is decoded sentence by sentence (batch 1) with the lean beam search at each
``--beams`` (beam 1: greedy decoding's tokens per call with the same drafts); prints a Markdown
table and writes its rows to ``--out`` (JSONL, atomically).

    python -m scripts.beam_replay_bound --models gec_tiny baseline --beams 1 4 5 10 --sentences 200 \\
        --out work/beam_replay.jsonl
"""
import argparse
import shlex
import sys
import time
from pathlib import Path

import torch

from scripts.lab.evaluation import EvaluationError
from scripts.lab.evaluation.beam_replay import DRAFT_KINDS, K_MAX, markdown, measure, rows_of, write_jsonl
from scripts.lab.evaluation.generation import Generation
from scripts.lab.evaluation.reference_models import ReferenceModels

REPO = Path(__file__).resolve().parents[1]


def lean_generation(data, checkpoint, generate_args, beam):
    """The model with fairseq-generate's arguments and ``--beam``; its generator must be the lean beam search."""
    from fairseq_plugins.decoding.lean_beam import LeanBeamSearch

    gen = Generation.from_generate_args(data, checkpoint, [*generate_args, "--beam", str(beam)])
    if not isinstance(gen.generator, LeanBeamSearch):
        raise EvaluationError(f"{checkpoint} with {' '.join(generate_args)} --beam {beam} does not decode with the "
                              f"lean beam search ({type(gen.generator).__name__}): the replay instruments it; "
                              "drop --drafter / --beam-search fairseq from the arguments")
    return gen


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default=str(REPO / "models"), help="folder with MANIFEST.json (default: models/)")
    ap.add_argument("--models", nargs="+", default=["gec_tiny", "baseline"], help="names in the manifest")
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 4, 5, 10])
    ap.add_argument("--k", type=int, nargs="+", default=[4, 10, K_MAX],
                    help=f"draft caps (at most {K_MAX}: {K_MAX} stands for uncapped)")
    ap.add_argument("--drafts", nargs="+", default=list(DRAFT_KINDS), choices=DRAFT_KINDS)
    ap.add_argument("--copy-ngram", type=int, default=2, help="input_copy: IAD's --copy-ngram")
    ap.add_argument("--split", default="test")
    ap.add_argument("--sentences", type=int, default=0, help="the sentences with id < N (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True, help="JSONL of the table's rows")
    args = ap.parse_args(argv)
    if any(not 1 <= k <= K_MAX for k in args.k):
        ap.error(f"--k: caps from 1 to {K_MAX}")
    torch.set_num_threads(args.threads)
    shipped = ReferenceModels(args.models_dir)
    rows = []
    for name in args.models:
        entry = shipped.entry(name)
        if entry is None:
            ap.error(f"--models: {name} is not in {Path(args.models_dir) / 'MANIFEST.json'} "
                     f"(it has {', '.join(shipped.models)})")
        data = Path(args.models_dir) / entry["evaluation_data"] / "bin"
        generate_args = shlex.split(entry.get("generate", ""))
        for beam in args.beams:
            gen = lean_generation(data, shipped.checkpoint(name), generate_args, beam)
            ids = range(args.sentences) if args.sentences else None
            started = time.perf_counter()
            tallies = measure(gen.generator, gen.batches(args.split, batch_size=1, ids=ids), gen.task,
                              kinds=args.drafts, ks=args.k, copy_ngram=args.copy_ngram)
            new = rows_of(name, beam, tallies)
            print(f"[beam_replay] {name} beam {beam} ({' '.join(generate_args)}): {new[0]['sentences']} sentences, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            rows += new
    print(markdown(rows))
    write_jsonl(args.out, rows)


if __name__ == "__main__":
    main()
