"""The orders against their L2R control, beside the papers (docs/RESULTS.md, "the orders at convergence").

From one benchmark run of ``configs/benchmark/orders.json`` (its ``results.jsonl``, with the quality
pass's translations saved: ``--save-hypotheses``), one row per order and beam:

* how far the model trained (``models/MANIFEST.json``: updates, where it stopped);
* test BLEU, the control's at the same beam, the gap (order - control) with its 95% paired-bootstrap
  interval over the test sentences where the translations were saved (:mod:`bleu_gap`), the paper's
  gap (``configs/papers/orders.json``), and ``beyond``: how much further behind the paper's gap ours
  is; a gap more than :data:`BEYOND_PAPER` BLEU beyond the paper's needs an explanation (issue 20);
* brevity penalty and length ratio (an order that stops early shows there);
* the speed ratio to the control's beam of the same width at each batch size, same run, beside the
  paper's ratio at the batch size it was measured at;
* repeated and dropped words per 100 reference words, the order's beside the control's, and a
  second table of where in the sentence they stand, by tenth (:mod:`order_errors`: the junction
  errors of bidirectional decoding show as a peak where the directions meet);
* n-gram precision by quarter of the translation, the order's beside the control's
  (:mod:`position_precision`): which part of the translation loses BLEU, its ends or where the
  directions meet;
* optionally, teacher-forced accuracy on the validation set by direction (:mod:`slot_accuracy`):
  which half of a bidirectional order lags the control.
"""
from typing import Dict, List, Optional, Sequence

from scripts.lab.analysis.bleu_gap import LEVEL, SAMPLES
from scripts.lab.analysis.order_errors import count_errors

BEYOND_PAPER = 1.5  # BLEU: a gap this much wider than the paper's is to be explained (issue 20's rule)


def paper_entry(papers: Dict, model: str, beam: int) -> Optional[Dict]:
    """The paper's gap and speed for ``model`` at ``beam`` (with its ``source`` and ``batch``), else None."""
    entry = papers.get(model)
    if not entry:
        return None
    at = entry.get("beams", {}).get(str(beam))
    return None if at is None else dict(at, source=entry["source"], batch=entry["batch"])


def error_summary(hypotheses: Sequence[str], references: Sequence[str]) -> Dict:
    """Repeats / drops / missing / extra words per 100 reference words and where the repeats and drops
    stand (whitespace words of detokenised text)."""
    return count_errors([h.split() for h in hypotheses], [r.split() for r in references]).summary()


def controls(results: List[Dict], group: str = "orders") -> Dict[int, Dict]:
    """Beam -> the control's row of ``group`` at that beam (its baseline rows: one model, several beams)."""
    control = {r["beam"]: r for r in results if r.get("group", "") == group and r["baseline"]}
    if not control:
        raise ValueError(f"no baseline row in group '{group}': run the benchmark with configs/benchmark/orders.json")
    return control


def report_rows(results: List[Dict], papers: Dict, manifest: Dict, group: str = "orders",
                errors: Optional[Dict] = None, accuracy: Optional[Dict] = None,
                intervals: Optional[Dict] = None, by_position: Optional[Dict] = None) -> List[Dict]:
    """One dict per order x beam of ``group`` (its baseline row is the control), in the results' order.
    ``errors``: ``(method, beam) -> error_summary`` for the orders and the control, where known;
    ``accuracy``: model name -> teacher-forced accuracy by direction (:mod:`slot_accuracy`), where known;
    ``intervals``: ``(method, beam) -> bleu_gap.paired_gap`` against the control, where known;
    ``by_position``: ``(method, beam) -> position_precision`` for the orders and the control, where known."""
    rows = [r for r in results if r.get("group", "") == group]
    control = controls(results, group)
    name = next(iter(control.values()))["method"]
    control_model = next(iter(control.values()))["model"]
    errors, accuracy, intervals, by_position = errors or {}, accuracy or {}, intervals or {}, by_position or {}
    out, seen = [], set()
    for r in rows:
        key = (r["method"], r["beam"])
        if r["baseline"] or key in seen:
            continue
        seen.add(key)
        ref = control.get(r["beam"])
        speed = {x["batch_size"]: x["speed_ratio"] for x in rows if (x["method"], x["beam"]) == key}
        gap = None if ref is None or r["bleu"] is None or ref["bleu"] is None else round(r["bleu"] - ref["bleu"], 2)
        paper = paper_entry(papers, r["model"], r["beam"])
        beyond = None if gap is None or paper is None else round(gap - paper["gap"], 2)
        model = manifest.get(r["model"], {})
        interval = intervals.get(key)
        out.append({
            "method": r["method"], "model": r["model"], "beam": r["beam"], "control": name,
            "updates": model.get("updates"), "stopped": model.get("stopped"),
            "bleu": r["bleu"], "control_bleu": None if ref is None else ref["bleu"], "gap": gap,
            "gap_interval": None if interval is None else [interval["low"], interval["high"]],
            "paper_gap": None if paper is None else paper["gap"], "beyond_paper": beyond,
            "to_explain": beyond is not None and beyond < -BEYOND_PAPER,
            "bp": r["bleu_bp"], "length_ratio": r["bleu_ratio"],
            "speed": speed, "paper_speed": None if paper is None else paper["speed"],
            "paper_batch": None if paper is None else paper["batch"],
            "paper_source": None if paper is None else paper["source"],
            "errors": errors.get(key), "control_errors": errors.get((name, r["beam"])),
            "accuracy": accuracy.get(r["model"]), "control_accuracy": accuracy.get(control_model),
            "precision": by_position.get(key), "control_precision": by_position.get((name, r["beam"])),
        })
    return out


def _num(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def _directions(acc: Optional[Dict], control: Optional[Dict]) -> str:
    if not acc:
        return "–"
    text = " / ".join(f"{acc[d]:.3f}" for d in sorted(acc, key=int))
    return text + ("" if not control else " (" + " / ".join(f"{control[d]:.3f}" for d in sorted(control, key=int)) + ")")


def markdown(rows: List[Dict], batch_sizes=(1, 32)) -> str:
    """The table of :func:`report_rows` (tabulate's pipe format) and the papers it cites."""
    from tabulate import tabulate

    head = ["order", "trained", "beam", "test BLEU (control)", f"gap [{LEVEL:.0%} interval] (paper's)",
            "BP / length ratio"]
    head += [f"x control, batch {b}" for b in batch_sizes] + ["paper's x (batch)",
                                                              "repeats / drops per 100 ref words (control)"]
    with_accuracy = any(r["accuracy"] for r in rows)
    if with_accuracy:
        head.append("teacher-forced accuracy by direction, L2R first (control)")
    cells = []
    for r in rows:
        e, c = r["errors"], r["control_errors"]
        errs = "–" if e is None else (f"{e['repeats_per_100']:.2f} / {e['drops_per_100']:.2f}"
                                     + ("" if c is None else f" ({c['repeats_per_100']:.2f} / {c['drops_per_100']:.2f})"))
        trained = "–" if r["updates"] is None else f"{r['updates']:,}" + (
            " (converged)" if (r["stopped"] or "").startswith("converged") else " (not converged)")
        gap = _num(r["gap"], "{:+.2f}")
        gap += "" if not r["gap_interval"] else " [{:+.2f}, {:+.2f}]".format(*r["gap_interval"])
        gap += "" if r["paper_gap"] is None else f" ({r['paper_gap']:+.2f})"
        if r["to_explain"]:
            gap += f" **{r['beyond_paper']:+.2f} beyond**"
        cells.append([r["method"], trained, r["beam"], f"{_num(r['bleu'])} ({_num(r['control_bleu'])})", gap,
                      f"{_num(r['bp'], '{:.3f}')} / {_num(r['length_ratio'], '{:.3f}')}"]
                     + [_num(r["speed"].get(b), "{:.2f}x") for b in batch_sizes]
                     + ["–" if r["paper_speed"] is None else f"{r['paper_speed']:.2f}x ({r['paper_batch']})", errs]
                     + ([_directions(r["accuracy"], r["control_accuracy"])] if with_accuracy else []))
    table = tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True)
    sources = sorted({r["paper_source"] for r in rows if r["paper_source"]})
    note = ""
    if any(r["gap_interval"] for r in rows):
        note = (f"\nThe interval: {LEVEL:.0%} of the gaps over {SAMPLES:,} paired bootstrap resamples of the test "
                "sentences (Koehn 2004; sacreBLEU's statistics and seed).\n")
    return table + "\n\n" + "".join(f"- {s}\n" for s in sources) + note + positions(rows) + precision_by_position(rows)


def positions(rows: List[Dict]) -> str:
    """Where the repeats and drops stand: per 100 reference words in each tenth (bin) of the sentence,
    each order's row beside its control's at the same beam (empty without saved translations)."""
    cells, seen = [], set()
    for r in rows:
        for method, errors in ((r["method"], r["errors"]), (r["control"], r["control_errors"])):
            if errors is None or (method, r["beam"]) in seen:
                continue
            seen.add((method, r["beam"]))
            per = 100.0 / max(1, errors["ref_tokens"])
            for kind in ("repeat", "drop"):
                cells.append([method, r["beam"], kind + "s"] + [f"{n * per:.2f}" for n in errors[f"{kind}_position"]])
    return _by_fraction(cells, ["row", "beam", "per 100 ref words"], 1,
                        "Where they stand, by fraction of the sentence (repeats: of the translation; drops: of the "
                        "reference); a junction shows as a peak where the directions meet (0.5 for head-tail and "
                        "IBDecoder, 0.25 and 0.75 for IMDecoder h=4)")


def precision_by_position(rows: List[Dict]) -> str:
    """Each order's n-gram precision in each part of its translations beside its control's at the same
    beam, and the difference (empty without saved translations)."""
    cells = []
    for r in rows:
        ours, theirs = r.get("precision"), r.get("control_precision")
        if not ours or not theirs:
            continue
        for n in sorted(ours, key=int):
            cells.append([r["method"], r["beam"], f"{n}-grams"] + [
                "–" if a is None or b is None else f"{100 * a:.1f} ({100 * b:.1f}) {100 * (a - b):+.1f}"
                for a, b in zip(ours[n]["precision"], theirs[n]["precision"])])
    return _by_fraction(cells, ["row", "beam", "precision of"], 2,
                        "Where the translation loses: n-gram precision (%) by part of the translation (an n-gram's "
                        "part: where its centre falls), the order's (the control's at the same beam) and the "
                        "difference; a bidirectional order writes both ends first and meets in the middle")


def _by_fraction(cells: List[List], heads: List[str], digits: int, intro: str) -> str:
    """``intro`` and a table of ``cells``: the ``heads`` columns, then one column per equal part of the
    sentence (its fractions to ``digits`` places); empty without cells."""
    from tabulate import tabulate

    if not cells:
        return ""
    bins = len(cells[0]) - len(heads)
    head = heads + [f"{b / bins:.{digits}f}-{(b + 1) / bins:.{digits}f}" for b in range(bins)]
    return f"\n{intro}:\n\n" + tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True) + "\n"
