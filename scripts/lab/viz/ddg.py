"""DDGviz: the Jacobi decoding dependency graph (Santilli et al. 2023, §3.5 and Fig. 4).

Runs Parallel Jacobi decoding (Alg. 1, PAD initialisation, target length from a greedy pre-run as
in the paper's DDGviz) on one sentence through the draft-and-verify engine, records every
iterate ``y^k``, and renders

* the iteration matrix: row ``k`` = Jacobi iteration, column ``j`` = target position; a cell shows
  the token ``y^k_j`` and its probability, green where it already equals the greedy result;
* the dependency graph: token ``j`` is fixed at the first iteration ``f_j`` from which it stays
  equal to greedy; it depends on the latest-fixed earlier token(s) (fixed at the largest
  ``f_i < f_j``), the source when ``f_j = 1``.  Tokens fixed in the same iteration as an earlier
  token were decoded in parallel (highlighted).  Choice (the paper draws the graph but gives no
  rule): one edge per token, from the nearest such predecessor ("omitting redundant edges").
"""
import html
from dataclasses import dataclass
from typing import List

import torch

from scripts.lab.viz.pyplot import pyplot


@dataclass
class DDGTrace:
    tokens: List[str]          # greedy result, pieces (incl. </s>)
    greedy: List[int]          # its ids
    iterates: List[List[int]]  # y^k for k = 1..K, each over the n target positions
    probs: List[List[float]]   # p(y^k_j | y^{k-1}_{<j}, x)
    fixed_at: List[int]        # f_j (1-based iteration)
    parents: List[int]         # -1 = the source, else the position j depends on
    source: str

    @property
    def iterations(self) -> int:
        return len(self.iterates)

    @property
    def parallel(self) -> List[bool]:
        """Position decoded in the same iteration as an earlier one (its dependency was relaxed)."""
        return [any(self.fixed_at[i] == f for i in range(j)) for j, f in enumerate(self.fixed_at)]


def jacobi_trace(model, task, sample, max_len_b=200) -> DDGTrace:
    """PJ decoding of the one sentence in ``sample`` with every iterate recorded."""
    from fairseq_plugins.decoding.acceptance import Exact
    from fairseq_plugins.decoding.drafters.jacobi import JacobiDrafter
    from fairseq_plugins.decoding.drafters.length_oracle import LengthOracle
    from fairseq_plugins.decoding.engine import DraftVerifyGenerator
    from fairseq_plugins.decoding.options import GenerationOptions

    if sample["net_input"]["src_tokens"].size(0) != 1:
        raise ValueError("DDGviz draws one sentence: pass a sample with a single source")
    drafter = JacobiDrafter("pj", block_size=1, record=True, length="greedy_oracle")
    oracle = LengthOracle(drafter, "greedy_oracle")  # the drafter itself keeps every iterate (history)
    gen = DraftVerifyGenerator([model], task.target_dictionary, oracle, Exact(), options=GenerationOptions(max_len_b=max_len_b))
    with torch.no_grad():
        hypo = gen.generate([model], sample)[0][0]
    greedy = hypo["tokens"].tolist()
    n = len(greedy)
    iterates = [h["guess"][0, 1 : n + 1].tolist() for h in drafter.history]
    probs = [h["prob"][0, 1 : n + 1].tolist() for h in drafter.history]
    fixed_at = []
    for j in range(n):
        k = len(iterates)
        while k > 0 and iterates[k - 1][j] == greedy[j]:
            k -= 1
        fixed_at.append(k + 1)
    parents = []
    for j, f in enumerate(fixed_at):
        earlier = [i for i in range(j) if fixed_at[i] < f]
        if not earlier:
            parents.append(-1)
        else:
            latest = max(fixed_at[i] for i in earlier)
            parents.append(max(i for i in earlier if fixed_at[i] == latest))
    d = task.target_dictionary
    src = task.source_dictionary.string(sample["net_input"]["src_tokens"][0])
    return DDGTrace(tokens=[d[t] for t in greedy], greedy=greedy, iterates=iterates, probs=probs,
                    fixed_at=fixed_at, parents=parents, source=src)


def render_png(trace: DDGTrace, path, dictionary, title=None):
    plt = pyplot()
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.path import Path as MplPath

    n, k = len(trace.greedy), trace.iterations
    width = max(8.0, 0.9 * n + 1.5)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 2.6 + 0.45 * k + 2.2),
                                      gridspec_kw={"height_ratios": [2.2, 0.45 * k + 0.6]})
    # --- dependency graph ---
    parallel = trace.parallel
    top.set_xlim(-1.6, n)
    top.set_ylim(-0.6, 2.4)
    top.axis("off")
    top.text(-1.0, 0, "x", ha="center", va="center", fontsize=11, fontweight="bold",
             bbox=dict(boxstyle="round", fc="#dddddd"))
    for j, tok in enumerate(trace.tokens):
        fc = "#ffd27f" if parallel[j] else "#cfe3ff"
        top.text(j, 0, tok, ha="center", va="center", fontsize=9, rotation=0,
                 bbox=dict(boxstyle="round", fc=fc, ec="#555555"))
        top.text(j, -0.45, f"it {trace.fixed_at[j]}", ha="center", va="center", fontsize=7, color="#555555")
        p = trace.parents[j]
        start = -1.0 if p < 0 else p
        if p >= 0 and p == j - 1 and not parallel[j]:
            continue  # plain autoregressive chain link: omitted (redundant)
        # a quadratic arc whose height grows with the span, bounded inside the panel
        span = j - start
        height = 0.45 + 1.7 * min(1.0, span / max(4.0, n / 2))
        arc = MplPath([(start, 0.25), ((start + j) / 2, 0.25 + 2 * height), (j, 0.25)],
                      [MplPath.MOVETO, MplPath.CURVE3, MplPath.CURVE3])
        top.add_patch(FancyArrowPatch(path=arc, arrowstyle="-|>", mutation_scale=9, lw=1.0,
                                      color="#c0392b" if parallel[j] else "#777777"))
    top.set_title(title or f"DDGviz: PJ decoding, {k} iterations for {n} tokens "
                  "(orange: decoded in parallel with an earlier token)", fontsize=10)
    # --- iteration matrix ---
    bottom.set_xlim(-0.5, n - 0.5)
    bottom.set_ylim(k + 0.5, 0.5)
    for it in range(k):
        for j in range(n):
            tok = trace.iterates[it][j]
            ok = tok == trace.greedy[j]
            fixed = it + 1 >= trace.fixed_at[j]
            colour = "#7bc96f" if (ok and fixed) else ("#d5f0cf" if ok else "#f4c7c3")
            bottom.add_patch(plt.Rectangle((j - 0.5, it + 0.5), 1, 1, fc=colour, ec="white"))
            bottom.text(j, it + 0.85, dictionary[tok], ha="center", va="center", fontsize=6.5)
            bottom.text(j, it + 1.2, f"{trace.probs[it][j]:.2f}", ha="center", va="center", fontsize=6, color="#333333")
    bottom.set_yticks(range(1, k + 1))
    bottom.set_ylabel("Jacobi iteration")
    bottom.set_xticks(range(n))
    bottom.set_xticklabels([str(j + 1) for j in range(n)], fontsize=7)
    bottom.set_xlabel("target position (green: equals greedy; dark: fixed from here on; red: not yet)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_html(trace: DDGTrace, path, dictionary):
    rows = []
    for it in range(trace.iterations):
        cells = []
        for j in range(len(trace.greedy)):
            tok = trace.iterates[it][j]
            ok = tok == trace.greedy[j]
            colour = "#7bc96f" if ok and it + 1 >= trace.fixed_at[j] else ("#d5f0cf" if ok else "#f4c7c3")
            cells.append(f'<td style="background:{colour}">{html.escape(dictionary[tok])}'
                         f'<br><small>{trace.probs[it][j]:.2f}</small></td>')
        rows.append(f"<tr><th>{it + 1}</th>{''.join(cells)}</tr>")
    head = "".join(f"<th>{html.escape(t)}<br><small>it {f}, dep {p if p >= 0 else 'x'}</small></th>"
                   for t, f, p in zip(trace.tokens, trace.fixed_at, trace.parents))
    doc = (f"<html><meta charset='utf-8'><body><h3>DDGviz (PJ)</h3><p>source: {html.escape(trace.source)}</p>"
           f"<table border=1 cellspacing=0><tr><th>greedy</th>{head}</tr>{''.join(rows)}</table></body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)
