#!/usr/bin/env python
"""Reproduce one paper table end to end: prepare the data, train every model with the paper's
hyperparameters (configs/papers/<paper>/), average the checkpoints as the paper does, decode every
row with the benchmark harness (scripts/benchmark.py: BLEU over the whole test set, timed passes,
same-run speed ratios) and write the table in Markdown with the paper's numbers beside ours.

    python -m scripts.pipelines.table --table ibdecoder --dry-run        # print every command
    python -m scripts.pipelines.table --table ibdecoder                  # run (resumable)
    python -m scripts.pipelines.table --table imamura --aspec-dir /data/ASPEC/ASPEC-JE --sections base_wmt14

Tables: imamura (Imamura & Sumita Table 2), ibdecoder (Zhang et al. Table 1), stern (Stern et al.
Tables 1 and 4), gad (Ge et al. Tables 5 and 14), jacobi (Santilli et al. Table 1).

Every step is skipped when its result exists (a DONE marker or the output file), and fairseq-train
resumes from checkpoint_last.pt, so an interrupted run continues where it stopped.  A row or model
that needs a task, architecture or criterion the plugin does not register (checked in fairseq's
registries) is skipped with a note, as are the models only it needs.  Folders (``--root``, default work/papers):

    ROOT/raw/          downloaded corpora and test sets (or --raw-dir)
    ROOT/data/         prepared corpora, shared by the tables (or --data-root)
    ROOT/TABLE/checkpoints/NAME/checkpoint_final.pt   every model (averaged, or the last checkpoint)
    ROOT/TABLE/kd/     distilled training sets
    ROOT/TABLE/results/SECTION/   the benchmark's results.jsonl / results.md per section
    ROOT/TABLE/table.md           the table
"""
import argparse
import os

from scripts.lab.evaluation import paper_tables as T
from scripts.lab.evaluation.paper_plan import REPO, Planner
from scripts.lab.evaluation.paper_steps import execute


def default_device():
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", required=True, choices=sorted(T.TABLES))
    ap.add_argument("--dry-run", action="store_true", help="print every step's command; run nothing")
    ap.add_argument("--list", action="store_true", help="list the table's sections, models and rows")
    ap.add_argument("--sections", nargs="+", help="only these sections (and the models they need)")
    ap.add_argument("--only", nargs="+", help="only the rows whose method contains one of these strings (and "
                    "each section's speed reference row)")
    ap.add_argument("--root", default=str(REPO / "work" / "papers"))
    ap.add_argument("--data-root", help="prepared corpora (default ROOT/data; shared by the tables)")
    ap.add_argument("--raw-dir", help="raw corpora / test sets, found by name or downloaded (default ROOT/raw)")
    ap.add_argument("--work", help="checkpoints, distilled data, results (default ROOT/TABLE)")
    ap.add_argument("--aspec-dir", help="your ASPEC-JE copy (Imamura & Sumita's ASPEC sections)")
    ap.add_argument("--offline", action="store_true", help="never download: the data must be under --raw-dir")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=default_device())
    ap.add_argument("--gpus", type=int, help="GPUs fairseq-train uses (default: all visible; 1 on CPU)")
    ap.add_argument("--max-tokens", type=int, help="tokens per GPU batch (update-freq is rescaled to keep the "
                    "paper's tokens per update)")
    ap.add_argument("--no-fp16", action="store_true", help="fp32 on GPU (default: --fp16 on GPU, as the papers)")
    ap.add_argument("--train-extra", default="", help="fairseq-train arguments appended to every training")
    ap.add_argument("--average-count", type=int, help="average this many checkpoints instead of the paper's")
    ap.add_argument("--prune-checkpoints", action="store_true",
                    help="after averaging, delete the intermediate checkpoints (keeps last and final)")
    ap.add_argument("--runs", type=int, help="timed decoding runs (default: the paper's)")
    ap.add_argument("--timed-sentences", type=int, default=0, help="time only sentences with id < N (0: all)")
    ap.add_argument("--workers", type=int, default=max(1, min(16, os.cpu_count() or 1)), help="data preparation")
    ap.add_argument("--distill-batch-size", type=int)
    opts = ap.parse_args(argv)
    if opts.gpus is None:
        if opts.device == "cuda":
            import torch

            opts.gpus = max(1, torch.cuda.device_count())
        else:
            opts.gpus = 1
    table = T.TABLES[opts.table]()
    planner = Planner(table, opts)
    if opts.list:
        for s in table.sections:
            print(f"section {s.key}: {s.title} (corpus {s.corpus}, batch {s.batch_size})")
            for r in (r for r in table.rows if r.section == s.key):
                print(f"    {r.method} | beam {r.beam} | model {r.model}")
        for m in table.models:
            print(f"model {m.name}: {m.config} on {m.corpus} {m.args}".rstrip())
        return None
    steps = planner.build()
    print(f"[{table.key}] {table.title}\n[{table.key}] {len(steps)} steps; device {opts.device}, {opts.gpus} GPU(s); "
          f"work folder {planner.work}" + ("; dry run: nothing is run" if opts.dry_run else ""), flush=True)
    if opts.dry_run:
        print(f"[{table.key}] estimated cost: {table.gpu_hours}; disk: {table.disk}")
    execute(planner, steps, opts.dry_run)
    return planner


if __name__ == "__main__":
    main()
