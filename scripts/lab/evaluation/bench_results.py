"""A benchmark's results: the ratios derived from the rows' own (× CT2, × beam 5, MB vs greedy) and the files
a run writes into ``--out`` (results.jsonl, results.md with its table, the speed-vs-BLEU figure), each whole
or not at all."""
import json
from pathlib import Path

from tabulate import tabulate

from scripts.lab.corpora.files import AtomicWriter
from scripts.lab.evaluation.bench_rows import unreliable_timing
from scripts.lab.evaluation.memory import MEMORY_BATCHES
from scripts.lab.viz.speed_vs_bleu import plot

OUTPUTS = ("results.jsonl", "results.md", "speed_vs_bleu.png")  # what a run writes into --out


def add_derived_ratios(results, vs_beam5=()):
    """ratio_vs_ct2, ratio_vs_beam5 and mem_vs_greedy from each row's ratio_vs_greedy / peak memory
    and those of the CTranslate2 greedy row / fairseq beam-5 baseline / fairseq greedy baseline of
    the same corpus and batch size."""
    greedy, ct2, beam5 = {}, {}, {}
    for r in results:
        key = (r["corpus"], r["batch_size"], r.get("group", ""))
        if r["baseline"] and r["backend"] == "fairseq":
            if r["beam"] == 1:
                greedy[key] = r
            elif r["beam"] == 5:
                beam5[key] = r
    for r in results:
        key = (r["corpus"], r["batch_size"], r.get("group", ""))
        if r["backend"] == "ctranslate2" and r["beam"] == 1 and r.get("compute_type", "default") == "default":
            # the CTranslate2 conversion of the greedy baseline's model when there are several; its own
            # compute type (fp32 on the CPU), not an int8 row's: × CT2 is against CTranslate2's exact-weights greedy
            if key not in ct2 or (key in greedy and r["model"] == greedy[key]["model"] and ct2[key]["model"] != r["model"]):
                ct2[key] = r

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    for r in results:
        key = (r["corpus"], r["batch_size"], r.get("group", ""))
        x = r["ratio_vs_greedy"]
        if key in ct2:
            r["ratio_vs_ct2"] = ratio(x, ct2[key]["ratio_vs_greedy"])
        if key in beam5 and (r["beam"] == 1 or r["method"] in vs_beam5):
            r["ratio_vs_beam5"] = ratio(x, beam5[key]["ratio_vs_greedy"])
        g = greedy.get(key)
        if g is not None and r["peak_mem_mb"] is not None and g["peak_mem_mb"] is not None:
            r["mem_vs_greedy"] = round(r["peak_mem_mb"] - g["peak_mem_mb"], 2)


# (key, header, format); the optional ones only appear when some row has a value
TABLE = [("method", "method", None), ("corpus", "corpus", None), ("beam", "beam", None),
         ("batch_size", "batch", None), ("bleu", "BLEU", None), ("bleu_bp", "BP", "{:.3f}"),
         ("tokens_per_s", "tok/s", None), ("speed_ratio", "speed ×", None),
         ("ratio_vs_ct2", "× CT2", None), ("ratio_vs_beam5", "× beam 5", None),
         ("ratio_vs_engine_greedy", "× engine greedy", None),
         ("calls_per_token", "calls/token", "{:.3g}"),
         ("model_calls", "model calls", None), ("mean_accepted", "mean accepted", None),
         ("draft_width", "draft width", None), ("drafted_share", "drafted", "{:.0%}"),
         ("peak_mem_mb", "peak MB", None), ("mem_vs_greedy", "MB vs greedy", "{:+.1f}"),
         ("identical_to_greedy", "identical", "{:.3f}")]


OPTIONAL = {"bleu_bp", "ratio_vs_ct2", "ratio_vs_beam5", "ratio_vs_engine_greedy", "calls_per_token", "peak_mem_mb",
            "mem_vs_greedy", "mean_accepted", "draft_width", "drafted_share", "identical_to_greedy"}


def markdown_table(results):
    cols = [c for c in TABLE if c[0] not in OPTIONAL or any(r.get(c[0]) is not None for r in results)]
    cells = [["–" if r.get(key) is None else (fmt.format(r[key]) if fmt else r[key]) for key, _, fmt in cols]
             for r in results]
    align = ["left" if key in ("method", "corpus") else "right" for key, _, _ in cols]
    return tabulate(cells, headers=[h for _, h, _ in cols], tablefmt="pipe", disable_numparse=True, colalign=align)


def write_outputs(results, out, skipped=()):
    out = Path(out)
    with AtomicWriter(out / "results.jsonl") as f:  # each file whole or not at all: a full disk keeps the earlier one
        for r in results:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    meta = results[0] if results else {}
    jobs = meta.get("jobs") or 1
    header = (f"Device {meta.get('device')}, {meta.get('dtype')}, {meta.get('threads')} threads"
              + (f" per process, {jobs} processes side by side (rows timed against each other share one)" if jobs > 1 else "")
              + "; "
              f"{meta.get('sentences')} test sentences for BLEU, {meta.get('timed_sentences')} timed x "
              f"{meta.get('runs')} runs (batches sorted by source length). speed × = reference seconds / row "
              "seconds, geometric mean over pairs timed interleaved with the row's reference (fairseq's own "
              "greedy, or its beam of the same width) in the same run; × CT2 and × beam 5 are derived from the "
              "ratios vs fairseq greedy; × engine greedy: a lossless drafting row timed interleaved with the engine's "
              "greedy (--drafter none) on the same model too. Model calls, calls/token (model calls per generated token, "
              "EOS included: hardware-independent), mean accepted, draft width (draft slots a row sent in the calls "
              "that verified a draft: what the width policy chose) and drafted (the share of row-calls that verified "
              f"one): over the timed sentences at that batch size. Peak MB: weights + peak tensor memory of a decode ({MEMORY_BATCHES} longest-source timed "
              "batches).\n\n")
    sigs = sorted({r["sacrebleu_signature"] for r in results if r.get("sacrebleu_signature")})
    choices = [f"{r['method']}, batch {r['batch_size']}: {r['drafter_choice']}" for r in results if r.get("drafter_choice")]
    notes = unreliable_timing(results) + choices + [f"not run: {s}" for s in skipped]
    with AtomicWriter(out / "results.md") as f:
        f.write(header + markdown_table(results) + "\n\n" + "".join(f"- {n}\n" for n in notes)
                + ("\n" if notes else "") + "\n".join(f"sacreBLEU: `{s}`" for s in sigs) + "\n")
    plot(results, out / "speed_vs_bleu.png")
