#!/usr/bin/env python
"""The benchmark's speed-vs-BLEU figure, legible with ~80 rows (scripts/benchmark.py draws it).

x: speed vs fairseq greedy of the same run (``ratio_vs_greedy``, log scale; 1 = fairseq greedy);
y: sacreBLEU.  One panel per corpus and batch size; one marker shape per family (anchors, orders,
draft-and-verify, non-autoregressive), one colour per method (legend; colours repeat across
families, never within one), hollow markers for beam > 1; text labels only on each panel's Pareto
front (the points no other point beats in both speed and BLEU).

Re-draw from a results file::

    python scripts/benchmark_plot.py work/demo/results/results.jsonl --out speed_vs_bleu.png
"""
import argparse
import json
import logging
import math
from pathlib import Path

FAMILIES = ("anchors", "orders", "draft-and-verify", "non-autoregressive")
MARKERS = {"anchors": "s", "orders": "^", "draft-and-verify": "o", "non-autoregressive": "D"}
PALETTES = ("tab10", "Dark2", "Set1")  # 27 distinguishable colours per family


def pareto_front(points):
    """Indices of the points ``(x, y)`` that no other point matches or beats on both axes while
    beating them on one (higher is better on both)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return front


def _colours():
    import matplotlib

    return [c for name in PALETTES for c in matplotlib.colormaps[name].colors]


def _label(r):
    return r["method"] + (f" (beam {r['beam']})" if r["beam"] > 1 else "")


def plot(results, path):
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's logging setup leaves DEBUG on
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    points = [r for r in results if r.get("bleu") is not None and r.get("ratio_vs_greedy")]
    corpora = list(dict.fromkeys(r["corpus"] for r in points)) or ["(no rows)"]
    sizes = sorted({r["batch_size"] for r in points}) or [1]
    family = {r["method"]: r.get("family", "anchors") for r in points}
    palette, colour = _colours(), {}
    for fam in FAMILIES:  # one colour per method, distinct within its family
        for k, m in enumerate(m for m in dict.fromkeys(r["method"] for r in points) if family[m] == fam):
            colour[m] = palette[k % len(palette)]

    fig, axes = plt.subplots(len(corpora), len(sizes), figsize=(5.6 * len(sizes), 4.3 * len(corpora)),
                             squeeze=False, sharey="row")
    for ax_row, corpus in zip(axes, corpora):
        for ax, bs in zip(ax_row, sizes):
            panel = [r for r in points if r["corpus"] == corpus and r["batch_size"] == bs]
            for r in panel:
                c = colour[r["method"]]
                ax.scatter(r["ratio_vs_greedy"], r["bleu"], s=42, marker=MARKERS[family[r["method"]]],
                           facecolors=c if r["beam"] == 1 else "none", edgecolors=c, linewidths=1.3, zorder=3)
            front = sorted((panel[i] for i in pareto_front([(r["ratio_vs_greedy"], r["bleu"]) for r in panel])),
                           key=lambda r: r["ratio_vs_greedy"])
            xs = [math.log(r["ratio_vs_greedy"]) for r in panel]
            for k, r in enumerate(front):
                # alternate above/below so that neighbours on the front do not collide; text to the
                # left of the points in the right third of the panel so that it stays inside
                right = max(xs) > min(xs) and math.log(r["ratio_vs_greedy"]) > min(xs) + 0.66 * (max(xs) - min(xs))
                ax.annotate(_label(r), (r["ratio_vs_greedy"], r["bleu"]), fontsize=7, zorder=4,
                            ha="right" if right else "left", xytext=(-5 if right else 5, 5 if k % 2 == 0 else -11),
                            textcoords="offset points")
            ax.axvline(1.0, color="grey", lw=0.8, ls=":", zorder=1)
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_title(f"{corpus}, batch size {bs}", fontsize=10)
            ax.set_xlabel("speed vs fairseq greedy, same run (log)")
            ax.grid(alpha=0.3, which="both")
        ax_row[0].set_ylabel("sacreBLEU")

    handles = []
    for fam in FAMILIES:
        methods = [m for m in colour if family[m] == fam]
        if methods:
            handles.append(Line2D([], [], ls="", marker="", label=f"{fam}:"))
            handles += [Line2D([], [], ls="", marker=MARKERS[fam], color=colour[m], label=m) for m in methods]
    handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", color="black",
                          label="hollow: beam > 1; labels: Pareto front"))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False,
               ncol=1 if len(handles) <= 45 else 2, handletextpad=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


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
