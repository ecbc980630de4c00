#!/usr/bin/env python
"""Redraw the benchmark's speed-vs-BLEU figure (``scripts/lab/viz/speed_vs_bleu.py``) from a
results file written by scripts/benchmark.py::

    python -m scripts.benchmark_plot work/demo/results/results.jsonl --out speed_vs_bleu.png
"""
import argparse
from pathlib import Path

from scripts.lab.viz.speed_vs_bleu import plot, read_results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.jsonl written by scripts/benchmark.py")
    ap.add_argument("--out", default=None, help="PNG to write (default: speed_vs_bleu.png beside the results)")
    args = ap.parse_args(argv)
    path = Path(args.results)
    results = read_results(path)  # a bad line: an error naming the file and the line
    out = Path(args.out) if args.out else path.parent / "speed_vs_bleu.png"
    plot(results, out)
    print(out)


if __name__ == "__main__":
    main()
