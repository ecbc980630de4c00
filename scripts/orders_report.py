#!/usr/bin/env python
"""The orders against their L2R control beside the papers, from one benchmark run (docs/RESULTS.md;
the table: scripts/lab/analysis/orders_report.py)::

    python -m scripts.benchmark --rows configs/benchmark/orders.json --data models/data/en-de \\
        --checkpoints models --out OUT --batch-sizes 1 32 --quality-batch-size 32 --threads 1 \\
        --skip-missing --save-hypotheses
    python -m scripts.orders_report OUT --data models/data/en-de [--checkpoints models]

Writes ``OUT/orders_report.md`` and ``OUT/orders_report.json`` and prints the table.
"""
import argparse
import json
from pathlib import Path

from scripts.lab.analysis.bleu_gap import paired_gap
from scripts.lab.analysis.orders_report import controls, error_summary, markdown, report_rows
from scripts.lab.analysis.position_precision import position_precision
from scripts.lab.evaluation import EvaluationError
from scripts.lab.evaluation.corpus import Corpus

REPO = Path(__file__).resolve().parent.parent


def read_results(folder):
    path = Path(folder) / "results.jsonl"
    if not path.exists():
        raise EvaluationError(f"{path} not found: run scripts/benchmark.py with --out {folder} first")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def saved_translations(results, folder, data, group):
    """``(method, beam) -> (translations, corpus)`` for every row of ``group`` whose translations were saved."""
    saved, corpora = {}, {}
    for r in results:
        if r.get("group", "") != group or not r.get("hypotheses") or (r["method"], r["beam"]) in saved:
            continue
        path = Path(folder) / "hypotheses" / r["hypotheses"]
        if not path.exists():
            raise EvaluationError(f"{path} is named by results.jsonl but missing: run the benchmark again "
                                  "with --save-hypotheses")
        corpus_dir = Path(data).parent / r["corpus"]
        corpus = corpora.get(corpus_dir) or corpora.setdefault(corpus_dir, Corpus(corpus_dir))
        if corpus.references is None:
            raise EvaluationError(f"{corpus_dir} has no test references: pass the benchmark's --data")
        saved[(r["method"], r["beam"])] = (path.read_text(encoding="utf-8").splitlines(), corpus)
    return saved


def junction_errors(saved):
    """``(method, beam) -> error_summary`` of every saved translation."""
    return {key: error_summary(lines, corpus.references) for key, (lines, corpus) in saved.items()}


def position_precisions(saved):
    """``(method, beam) -> position_precision`` of every saved translation, in the BLEU metric's tokens."""
    return {key: position_precision(lines, corpus.references, corpus.bleu_metric().tokenizer)
            for key, (lines, corpus) in saved.items()}


def gap_intervals(results, saved, group):
    """``(method, beam) -> paired_gap`` of every order whose translations and its control's at the same
    beam were saved."""
    out = {}
    for beam, control in controls(results, group).items():
        if (control["method"], beam) not in saved:
            continue
        against = saved[(control["method"], beam)][0]
        for (method, at), (lines, corpus) in saved.items():
            if at == beam and method != control["method"]:
                out[(method, beam)] = paired_gap(corpus.bleu_metric(), lines, against, corpus.references)
    return out


def direction_accuracy(results, checkpoints, data, group):
    """Model name -> teacher-forced accuracy by direction on ``data``'s validation set, for every model of
    ``group`` whose ``<checkpoints>/<model>/checkpoint_best.pt`` is there."""
    from scripts.lab.analysis.slot_accuracy import checkpoint_slot_accuracy

    out = {}
    for model in dict.fromkeys(r["model"] for r in results if r.get("group", "") == group):
        path = Path(checkpoints) / model / "checkpoint_best.pt"
        if path.exists():
            out[model] = checkpoint_slot_accuracy(path, Path(data) / "bin", "valid", cpu=False)[1]["by_direction"]  # a GPU if there is one
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="the benchmark's --out folder (results.jsonl, hypotheses/)")
    ap.add_argument("--data", required=True, help="the benchmark's --data (a corpus folder; rows name siblings)")
    ap.add_argument("--manifest", default=str(REPO / "models" / "MANIFEST.json"))
    ap.add_argument("--papers", default=str(REPO / "configs" / "papers" / "orders.json"))
    ap.add_argument("--group", default="orders", help="the rows' group; its baseline row is the control")
    ap.add_argument("--checkpoints", help="the benchmark's --checkpoints: add each model's teacher-forced accuracy by "
                                          "direction on --data's validation set (scripts/slot_accuracy.py)")
    args = ap.parse_args(argv)
    try:
        results = read_results(args.results)
        if not any(r.get("group", "") == args.group for r in results):
            print(f"[orders_report] {args.results} has no row of group '{args.group}' (no order was decoded): "
                  "nothing to report")
            return
        papers = json.loads(Path(args.papers).read_text())
        manifest = json.loads(Path(args.manifest).read_text())["models"] if Path(args.manifest).exists() else {}
        saved = saved_translations(results, args.results, args.data, args.group)
        accuracy = direction_accuracy(results, args.checkpoints, args.data, args.group) if args.checkpoints else None
        rows = report_rows(results, papers, manifest, args.group, junction_errors(saved), accuracy,
                           gap_intervals(results, saved, args.group), position_precisions(saved))
    except (EvaluationError, ValueError) as e:
        raise SystemExit(f"error: {e}")
    batch_sizes = sorted({r["batch_size"] for r in results if r.get("group", "") == args.group})
    table = markdown(rows, batch_sizes)
    out = Path(args.results)
    (out / "orders_report.md").write_text(table)
    (out / "orders_report.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    print(table)


if __name__ == "__main__":
    main()
