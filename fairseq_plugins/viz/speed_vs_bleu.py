"""The benchmark's speed-vs-BLEU figure, legible with ~80 rows (``scripts/benchmark.py`` draws it,
``scripts/benchmark_plot.py`` redraws it from a results file).

x: speed vs fairseq greedy of the same run (``ratio_vs_greedy``, log scale; 1 = fairseq greedy); a
row of a benchmark group (``"group"``: the orders, against L2R-KD's greedy) is timed against its
group's fairseq greedy, not the corpus's, and the legend says so (:func:`group_notes`);
y: sacreBLEU.  One panel per corpus and batch size; one marker shape per family (anchors, orders,
draft-and-verify, non-autoregressive), one colour per method (legend; colours repeat across
families, never within one), hollow markers for beam > 1; text labels only on each panel's Pareto
front (the points no other point beats in both speed and BLEU), computed over all rows and over
the rows decoded through fairseq (the plugin's own front, which CTranslate2 would otherwise hide).
"""
import textwrap
from pathlib import Path

from fairseq_plugins.corpora.files import AtomicBinary
from fairseq_plugins.viz.pyplot import pyplot

FAMILIES = ("anchors", "orders", "draft-and-verify", "non-autoregressive")
MARKERS = {"anchors": "s", "orders": "^", "draft-and-verify": "o", "non-autoregressive": "D"}
PALETTES = ("tab20", "Dark2", "Set1")  # 37 colours per family


def pareto_front(points):
    """Indices of the points ``(x, y)`` that no other point matches or beats on both axes while
    beating them on one (higher is better on both)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return front


def labelled(panel):
    """The rows of a panel that get a text label: the Pareto front of all of them, and that of the
    rows decoded through fairseq (the plugin's own front, which CTranslate2 would otherwise hide)."""
    chosen = {}
    for group in (panel, [r for r in panel if r.get("backend", "fairseq") == "fairseq"]):
        for i in pareto_front([(r["ratio_vs_greedy"], r["bleu"]) for r in group]):
            chosen[id(group[i])] = group[i]
    return list(chosen.values())


def group_notes(points):
    """One legend line per named benchmark group: its rows' x is the speed against the group's own
    fairseq greedy row (its greedy baseline), e.g. the orders against L2R-KD's greedy."""
    groups = dict.fromkeys(r.get("group", "") for r in points if r.get("group", ""))
    reference = {r.get("group", ""): r["method"] for r in points if r.get("baseline") and r["beam"] == 1}
    return [f"x of the {g} rows: vs {reference.get(g, 'their group baseline')}" for g in groups]


def _colours():
    import matplotlib

    tab20 = matplotlib.colormaps["tab20"].colors  # dark shades, then their light pairs, then more hues
    return list(tab20[0::2]) + list(tab20[1::2]) + [c for name in PALETTES[1:] for c in matplotlib.colormaps[name].colors]


def _label(r, width=28):
    """The method (and beam), wrapped to lines of ``width`` characters so that labels stay narrow."""
    return textwrap.fill(r["method"] + (f" (beam\u00a0{r['beam']})" if r["beam"] > 1 else ""), width, max_lines=3,
                         placeholder="…")


# offsets (points) and alignments tried for a label: right, left, above, below the marker, then farther out
PLACES = [(5, 3, "left", "bottom"), (5, -3, "left", "top"), (-5, 3, "right", "bottom"), (-5, -3, "right", "top"),
          (0, 8, "center", "bottom"), (0, -8, "center", "top"), (5, 12, "left", "bottom"), (5, -12, "left", "top"),
          (-5, 12, "right", "bottom"), (-5, -12, "right", "top")]


def place_labels(ax, rows, points, renderer):
    """Annotate ``rows`` where the label stays inside the panel and covers the fewest labels placed
    before, then the fewest markers (``points``: every (x, y) of the panel), in :data:`PLACES` order."""
    from matplotlib.transforms import Bbox

    box = ax.get_window_extent(renderer)
    markers = [Bbox.from_extents(x - 4, y - 4, x + 4, y + 4) for x, y in ax.transData.transform(points)]
    placed = []
    for r in rows:
        xy = (r["ratio_vs_greedy"], r["bleu"])
        best = None
        for dx, dy, ha, va in PLACES:
            text = ax.annotate(_label(r), xy, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                               fontsize=7, zorder=4)
            bb = text.get_window_extent(renderer)
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

    points = [r for r in results if r.get("bleu") is not None and r.get("ratio_vs_greedy")]
    corpora = list(dict.fromkeys(r["corpus"] for r in points)) or ["(no rows)"]
    sizes = sorted({r["batch_size"] for r in points}) or [1]
    family = {r["method"]: r.get("family", "anchors") for r in points}
    palette, colour = _colours(), {}
    for fam in FAMILIES:  # one colour per method, distinct within its family
        for k, m in enumerate(m for m in dict.fromkeys(r["method"] for r in points) if family[m] == fam):
            colour[m] = palette[k % len(palette)]

    notes = group_notes(points)
    fronts = []
    fig, axes = plt.subplots(len(corpora), len(sizes), figsize=(5.6 * len(sizes), 4.3 * len(corpora)),
                             squeeze=False, sharey="row")
    for ax_row, corpus in zip(axes, corpora):
        for ax, bs in zip(ax_row, sizes):
            panel = [r for r in points if r["corpus"] == corpus and r["batch_size"] == bs]
            for r in panel:
                c = colour[r["method"]]
                ax.scatter(r["ratio_vs_greedy"], r["bleu"], s=36, marker=MARKERS[family[r["method"]]], alpha=0.85,
                           facecolors=c if r["beam"] == 1 else "none", edgecolors=c, linewidths=1.3, zorder=3)
            fronts.append((ax, sorted(labelled(panel), key=lambda r: -r["bleu"]),
                           [(r["ratio_vs_greedy"], r["bleu"]) for r in panel]))
            ax.axvline(1.0, color="grey", lw=0.8, ls=":", zorder=1)
            ax.set_xscale("log")
            xs = [r["ratio_vs_greedy"] for r in panel] or [1.0]
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
            # under a factor 4 between the slowest and the fastest row the minor ticks (0.8, 0.9, 3, 4...) get labels too
            ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}×") if max(xs) / min(xs) < 4 else NullFormatter())
            ax.set_title(f"{corpus}, batch size {bs}", fontsize=10)
            ax.set_xlabel("speed vs fairseq greedy, same run (log)" if not notes else
                          "speed vs fairseq greedy of the row's group, same run (log)")
            ax.grid(alpha=0.3, which="both")
        ax_row[0].set_ylabel("sacreBLEU")

    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()  # fixes the axes' limits before the labels look for room
    for ax, front, xy in fronts:
        place_labels(ax, front, xy, renderer)

    handles = []
    for fam in FAMILIES:
        methods = [m for m in colour if family[m] == fam]
        if methods:
            handles.append(Line2D([], [], ls="", marker="", label=f"{fam}:"))
            handles += [Line2D([], [], ls="", marker=MARKERS[fam], color=colour[m], label=m) for m in methods]
    handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", color="black",
                          label="hollow: beam > 1; labels: Pareto fronts"))
    handles += [Line2D([], [], ls="", marker="", label=note) for note in notes]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False,
               ncol=1 if len(handles) <= 45 else 2, handletextpad=0.3)
    with AtomicBinary(path) as f:  # whole or not at all: a full disk leaves the earlier figure
        fig.savefig(f, format=Path(path).suffix.lstrip(".") or "png", dpi=120, bbox_inches="tight")
    plt.close(fig)
