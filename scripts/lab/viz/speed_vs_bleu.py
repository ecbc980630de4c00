"""The benchmark's speed-vs-BLEU figure, legible with ~80 rows (``scripts/benchmark.py`` draws it,
``scripts/benchmark_plot.py`` redraws it from a results file, :func:`read_results`).

y: sacreBLEU; x: speed against a greedy baseline of the same run (``ratio_vs_greedy``, log scale; 1 =
that baseline).  One baseline per axis: a panel holds the rows of one corpus and batch size timed
against fairseq's greedy on their own model; a benchmark group whose rows are timed against another
model's greedy (the orders, against L2R-KD's: :func:`own_axis_groups`) gets panels of its own, its
axis named after that baseline.  One colour and one marker shape per family (anchors, orders,
draft-and-verify, non-autoregressive), hollow markers for beam > 1.  Every point carries its method's
number (and its beam), listed in the legend under its family; numbers in bold are on the panel's
Pareto front (no other point both faster and better).  A/A controls (the engine's greedy timed
beside itself: the harness's own spread, in results.md) are left out.
"""
import json
import textwrap
from pathlib import Path

from scripts.lab.corpora.files import AtomicBinary
from scripts.lab.evaluation.bench_rows import FAMILIES, is_control
from scripts.lab.viz.pyplot import pyplot

MARKERS = {"anchors": "s", "orders": "^", "draft-and-verify": "o", "non-autoregressive": "D"}
COLOURS = {"anchors": "#555555", "orders": "#1f77b4", "draft-and-verify": "#d95f02", "non-autoregressive": "#2ca02c"}
REQUIRED = ("method", "corpus", "batch_size", "beam", "bleu", "ratio_vs_greedy")  # what the figure reads of a row


def pareto_front(points):
    """Indices of the points ``(x, y)`` that no other point matches or beats on both axes while
    beating them on one (higher is better on both)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return front


class ResultsFileError(SystemExit):
    """A results file the figure cannot read; the message names the file and the line."""

    def __init__(self, message):
        super().__init__(f"error: {message}")


def read_results(path):
    """The rows of a results.jsonl; a line that is not a JSON object with the fields the figure reads (a file
    cut short by a full disk, an edit) is an error naming the file and the line."""
    path = Path(path)
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ResultsFileError(f"{path}:{n}: not a whole JSON line ({err.msg} at column {err.colno}): the file was "
                                   "cut short or edited; run the benchmark again, or remove that line") from None
        missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
        if missing:
            raise ResultsFileError(f"{path}:{n}: a results line without {', '.join(missing)} (written by an older "
                                   "scripts/benchmark.py, or not a benchmark's results.jsonl): run the benchmark again")
        rows.append(row)
    return rows


def plotted(results):
    """The rows the figure shows: a BLEU and a speed ratio, not an A/A control."""
    return [r for r in results if r.get("bleu") is not None and r.get("ratio_vs_greedy") and not is_control(r)]


def _baselines(points):
    """(corpus, group) -> the group's greedy baseline row (its x = 1)."""
    return {(r["corpus"], r.get("group", "")): r for r in points if r.get("baseline") and r["beam"] == 1}


def own_axis_groups(points):
    """The groups whose rows are timed against another model's greedy than their own (the orders against
    L2R-KD's): {group: baseline method}.  A group timed against fairseq's greedy on its rows' own model (frozen
    blockwise heads against their checkpoint's) shares the corpus's axis."""
    base = _baselines(points)
    own = {}
    for r in points:
        g = r.get("group", "")
        b = base.get((r["corpus"], g))
        if g and b is not None and r.get("model") != b.get("model"):
            own[g] = b["method"]
    return own


def panel_grid(points):
    """[(title, x label, [[rows of batch size 1st], [2nd], ...]) ...]: a line of panels per corpus, and per
    corpus and group on an axis of its own (:func:`own_axis_groups`), one panel per batch size."""
    own = own_axis_groups(points)
    sizes = sorted({r["batch_size"] for r in points}) or [1]
    lines = []
    for corpus in dict.fromkeys(r["corpus"] for r in points):
        keys = [("", None)] + [(g, m) for g, m in own.items() if any(r["corpus"] == corpus and r.get("group", "") == g
                                                                     for r in points)]
        for group, against in keys:
            rows = [r for r in points if r["corpus"] == corpus and
                    ((r.get("group", "") == group) if against else r.get("group", "") not in own)]
            title = corpus + (f", {group}" if against else "")
            xlabel = (f"speed vs {against} at beam 1, same run (log)" if against
                      else "speed vs fairseq greedy on the row's model, same run (log)")
            lines.append((title, xlabel, [[r for r in rows if r["batch_size"] == bs] for bs in sizes]))
    return lines, sizes


def method_numbers(points):
    """method -> its number in the legend: family by family, in the rows' order."""
    family = {r["method"]: r.get("family", "anchors") for r in points}
    methods = [m for fam in FAMILIES for m in dict.fromkeys(r["method"] for r in points) if family[m] == fam]
    return {m: k for k, m in enumerate(methods, 1)}


def _label(r, numbers):
    return str(numbers[r["method"]]) + (f" b{r['beam']}" if r["beam"] > 1 else "")


# offsets (points) and alignments tried for a label: right, left, above, below the marker, then farther out
PLACES = [(5, 3, "left", "bottom"), (5, -3, "left", "top"), (-5, 3, "right", "bottom"), (-5, -3, "right", "top"),
          (0, 6, "center", "bottom"), (0, -6, "center", "top"), (5, 10, "left", "bottom"), (5, -10, "left", "top"),
          (-5, 10, "right", "bottom"), (-5, -10, "right", "top"), (0, 14, "center", "bottom"), (0, -14, "center", "top"),
          (10, 16, "left", "bottom"), (-10, -16, "right", "top"), (10, -16, "left", "top"), (-10, 16, "right", "bottom")]
PLACES += [(dx, dy, "center", "bottom" if dy > 0 else "top") for dy in (22, -22, 30, -30, 38, -38) for dx in (0, -12, 12)]


def place_labels(ax, rows, numbers, front, renderer):
    """Label every row's point where the label stays inside the panel and covers the fewest labels placed
    before, then the fewest markers, in :data:`PLACES` order (a thin line joins a label set apart to its point)."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    box = ax.get_window_extent(renderer)
    points = [(r["ratio_vs_greedy"], r["bleu"]) for r in rows]
    markers = [Bbox.from_extents(x - 4, y - 4, x + 4, y + 4) for x, y in ax.transData.transform(points)] if points else []
    placed = []
    for r in rows:
        xy = (r["ratio_vs_greedy"], r["bleu"])
        best = None
        for dx, dy, ha, va in PLACES:
            far = abs(dx) >= 10 or abs(dy) >= 10
            text = ax.annotate(_label(r, numbers), xy, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                               fontsize=7, zorder=4, color=COLOURS.get(r.get("family"), "black"),
                               fontweight="bold" if id(r) in front else "normal",
                               arrowprops=dict(arrowstyle="-", lw=0.4, color="grey", shrinkA=0, shrinkB=3) if far else None)
            text.update_positions(renderer)
            bb = Text.get_window_extent(text, renderer)  # the text alone: an annotation's extent includes its line
            outside = not (box.x0 <= bb.x0 and bb.x1 <= box.x1 and box.y0 <= bb.y0 and bb.y1 <= box.y1)
            cost = (outside, sum(bb.overlaps(p) for p in placed), sum(bb.overlaps(m) for m in markers))
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, text, bb)
            else:
                text.remove()
            if cost == (False, 0, 0):
                break
        placed.append(best[2])


def plot(results, path):
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    points = plotted(results)
    numbers = method_numbers(points)
    lines, sizes = panel_grid(points)
    lines = lines or [("(no rows)", "", [[] for _ in sizes])]
    fig, axes = plt.subplots(len(lines), len(sizes), figsize=(5.6 * len(sizes), 4.0 * len(lines)), squeeze=False,
                             sharey="row")
    drawn = []
    for ax_row, (title, xlabel, panels) in zip(axes, lines):
        for ax, bs, panel in zip(ax_row, sizes, panels):
            for r in panel:
                c = COLOURS.get(r.get("family"), "black")
                ax.scatter(r["ratio_vs_greedy"], r["bleu"], s=30, marker=MARKERS.get(r.get("family"), "o"), alpha=0.85,
                           facecolors=c if r["beam"] == 1 else "none", edgecolors=c, linewidths=1.2, zorder=3)
            front = {id(panel[i]) for i in pareto_front([(r["ratio_vs_greedy"], r["bleu"]) for r in panel])}
            drawn.append((ax, sorted(panel, key=lambda r: -r["bleu"]), front))
            ax.axvline(1.0, color="grey", lw=0.8, ls=":", zorder=1)
            ax.set_xscale("log")
            xs = [r["ratio_vs_greedy"] for r in panel] or [1.0]
            ax.set_xlim(min(xs + [1.0]) / 1.15, max(xs + [1.0]) * 1.15)
            ax.margins(y=0.15)  # room for the labels above and below the lowest and highest points
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
            # under a factor 4 between the slowest and the fastest row the minor ticks (0.8, 0.9, 3, 4...) get labels too
            ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}×") if max(xs) / min(xs) < 4 else NullFormatter())
            ax.set_title(f"{title}, batch size {bs}", fontsize=10)
            ax.set_xlabel(xlabel, fontsize=9)
            ax.grid(alpha=0.3, which="both")
        ax_row[0].set_ylabel("sacreBLEU")

    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()  # fixes the axes' limits before the labels look for room
    for ax, panel, front in drawn:
        place_labels(ax, panel, numbers, front, renderer)

    family = {r["method"]: r.get("family", "anchors") for r in points}
    handles = []
    for fam in FAMILIES:
        methods = [m for m in numbers if family[m] == fam]
        if methods:
            handles.append(Line2D([], [], ls="", marker=MARKERS[fam], color=COLOURS[fam], label=f"{fam}:"))
            handles += [Line2D([], [], ls="", marker="", label=textwrap.shorten(f"{numbers[m]:>2}  {m}", 60))
                        for m in methods]
    handles += [Line2D([], [], ls="", marker="o", markerfacecolor="none", color="black",
                       label="hollow: beam > 1 (bK: beam K); bold number: on the panel's Pareto front"),
                Line2D([], [], ls="", marker="", label="not shown: A/A controls (the timing's own spread: results.md)")]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False,
               ncol=1 if len(handles) <= 50 else 2, handletextpad=0.3)
    with AtomicBinary(path) as f:  # whole or not at all: a full disk leaves the earlier figure
        fig.savefig(f, format=Path(path).suffix.lstrip(".") or "png", dpi=120, bbox_inches="tight")
    plt.close(fig)
