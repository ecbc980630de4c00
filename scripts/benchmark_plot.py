#!/usr/bin/env python
"""Redraw the benchmark's speed-vs-BLEU figure (``fairseq_plugins/viz/speed_vs_bleu.py``) from a
results file written by scripts/benchmark.py::

    python -m scripts.benchmark_plot work/demo/results/results.jsonl --out speed_vs_bleu.png
"""
import argparse
import json
from pathlib import Path

from fairseq_plugins.viz.speed_vs_bleu import plot


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.jsonl written by scripts/benchmark.py")
    ap.add_argument("--out", default=None, help="PNG to write (default: speed_vs_bleu.png beside the results)")
    args = ap.parse_args(argv)
    path = Path(args.results)
    results = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    missing = [r["method"] for r in results if "ratio_vs_greedy" not in r]
    if missing:
        raise SystemExit(f"error: {path} has no ratio_vs_greedy (written by an older scripts/benchmark.py); "
                         "run the benchmark again")
    out = Path(args.out) if args.out else path.parent / "speed_vs_bleu.png"
    plot(results, out)
    print(out)


if __name__ == "__main__":
    main()
