#!/usr/bin/env python
"""Side-by-side decoding benchmark (docs/METHODS.md §4): every method, one process, one test set.

Each *row* of a rows file (JSON list; ``--rows`` takes several files, concatenated in order) is a
decoding configuration written as fairseq-generate arguments, so the benchmark measures exactly
what a user runs::

    {"method": "fairseq greedy", "model": "baseline", "args": "--task fast_translation --beam-search fairseq",
     "beams": [1], "baseline": true}
    {"method": "Jacobi HGJ b=3", "model": "baseline",
     "args": "--task fast_translation --drafter jacobi_hgj --block-size 3", "lossless": true}
    {"method": "CTranslate2 greedy", "model": "baseline", "backend": "ctranslate2"}
    {"method": "CTranslate2 greedy int8", "model": "baseline", "backend": "ctranslate2", "compute_type": "int8"}

``model`` names ``<checkpoints>/<model>/checkpoint_best.pt`` (or give ``path``; ``"models": [A, B]`` makes
the row once per model, named ``"A: <method>"`` and timed in model A's own group: configs/benchmark/gec.json's
tiny and base verifiers; ``"compute_type"``: a CTranslate2 row's, e.g. ``"int8"``); ``corpus`` replaces
the corpus for a row with another corpus of the same data root (e.g. ``"corpus": "pt_PT-pt_BR"``).
In ``args``, ``{CKPT}`` stands for the checkpoints root and ``{DATA}`` for the data root (a GAD row's
``--drafter-path {CKPT}/gad_drafter/checkpoint_best.pt``; ``--skip-missing`` skips it while untrained).
Optional: ``family`` (the plot's marker: anchors, orders, draft-and-verify, non-autoregressive;
default from the row, see :func:`family_of`), ``"vs_beam5": true`` (the row must get
``ratio_vs_beam5``: an error when no fairseq beam-5 baseline row runs), ``group`` (rows are timed
against the baseline of their own group on the same corpus, beam and batch size: orders.json's rows
against L2R-KD beside reference.json's against fairseq's greedy on the baseline).
``"lossless": true`` rows are compared with the baseline row of their own checkpoint at the same
beam (greedy for the drafters; fairseq's beam k for the lean beam search), or of ``"greedy_model"``
(frozen blockwise heads must reproduce their base model's greedy output).
``"control": true`` marks a second engine greedy row (``--drafter none``, lossless) that is timed
beside the first as a drafting row is: its ``ratio_vs_engine_greedy`` is the harness's own spread
(an A/A pair: two loaded copies of the same decode), the yardstick for reading the drafting rows'.
A control further than 5% from x1.00 is flagged "timing unreliable on this run" in the log, under
results.md's table and after the printed table (``bench_rows.unreliable_timing``).

For every row x beam x batch size the harness loads the model once (loading is never timed),
decodes the whole test set once for BLEU (sacreBLEU on detokenised output, against the raw
reference file; ``bleu_bp`` / ``bleu_ratio`` are its brevity penalty and hypothesis/reference
length ratio, so early stopping shows) and the identical-to-greedy fraction, then times a warm-up
and ``--runs`` passes over the sentences with id < ``--timed-sentences`` (the split is in hash
order: a random sample of every length), batched in fairseq-generate's length-sorted order.

Speed, interleaved: baseline rows run first and stay loaded.  Every other row is timed in one loop
with its *reference* -- the baseline row of the same corpus, batch size and beam (else beam 1) --
alternating which of the two goes first (row, ref | ref, row | row, ref ...), after a warm-up of
both, so that a job on another core that comes or goes slows both alike and a steady drift
cancels.  ``speed_ratio`` = geometric mean over the ``runs`` pairs of (reference time / row time)
(``speed_ratio_range``: min and max over the pairs; geometric so that ratios invert and chain
exactly).  ``ratio_vs_greedy`` is the ratio vs fairseq greedy of the same corpus and batch size:
measured for rows whose reference is greedy; for a row timed against a beam-k baseline it is
``speed_ratio`` times that baseline's own ``ratio_vs_greedy`` (itself timed interleaved with
greedy).  Derived from those interleaved pairs: ``ratio_vs_ct2`` = ratio_vs_greedy / the
CTranslate2 greedy row's ratio_vs_greedy (same corpus and batch size), ``ratio_vs_beam5`` =
ratio_vs_greedy / the fairseq beam-5 baseline's (for every beam-1 row when such a baseline runs,
and for rows that ask with ``vs_beam5``).  ``seconds`` is the mean time of one timed pass of the
row (``seconds_min`` its minimum), ``tokens_per_s`` counts generated target tokens including EOS
(fairseq-generate's count, ``timed_tokens``: those of the first timed pass).

Counts: ``model_calls`` (decoder invocations: the generator's own count where it keeps one, else a
forward hook on the decoder's first layer) and ``mean_accepted`` (tokens appended per row per
draft-verify iteration) are counted at *each* batch size over the timed sentences (the first timed
pass; ``counts_sentences`` says how many); ``model_calls_all`` / ``mean_accepted_all`` cover every
sentence in the quality pass (at ``bleu_batch_size``).  ``calls_per_token`` = ``model_calls`` /
``timed_tokens``, both of that first timed pass: the hardware-independent cost beside every time
ratio (fairseq's greedy and the engine's greedy: exactly 1.0 at batch 1; a drafter that pays in
accepted tokens: below 1; a PJ/PGJ length oracle's calls counted in, a GAD drafter's own calls
not: the engine counts its verifier's).  At batch size B one call serves B rows, so compare it with
the greedy rows of the same batch size (their value there is about 1/B).  None for CTranslate2
rows (no call count).  A ``--drafter auto`` row carries ``drafter_choice``: the engine's summary of
which drafter it kept and why, as of its first timed pass (also listed under results.md's table).

Memory: ``peak_mem_mb`` = the row's weights (parameters and buffers of every model it holds, a
drafter's included) + the peak of tensor memory allocated above the level before the decode, over
the ``MEMORY_BATCHES`` timed batches with the longest sources, in an extra untimed pass: on CUDA
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; on CPU the running sum of
the CPU allocator's events recorded by ``torch.profiler`` (``profile_memory``), in time order.
``mem_vs_greedy`` = peak_mem_mb minus fairseq greedy's (MB, same corpus and batch size).  None for
CTranslate2 rows (their memory is not torch's).

``--jobs N`` runs the rows in N processes side by side, one per CPU core (``--threads`` each, by
default the cores shared out; refused on a GPU, where they would share the device): rows that are
timed against or compared with each other -- a corpus and group's baselines and every row of that
group, a checkpoint's rows -- stay in one process, so every ratio is still a pair timed interleaved
in one process, while a job on the other core slows both passes of a pair alike.  The results and
files are those of one process; each row records ``jobs``.

Writes ``results.jsonl``, ``results.md`` and ``speed_vs_bleu.png`` into ``--out``, each whole or not at all
(a temporary file renamed over the earlier one).  ``--out`` is checked writable before any decoding and
is one run's at a time (``--out/.lock`` holds the running benchmark's pid: a second run into it is
refused, naming that pid).  SIGINT or SIGTERM stops every ``--jobs`` process with the command.
"""
import argparse
import json
import statistics
import time
from pathlib import Path

from tabulate import tabulate

from scripts.lab.corpora.files import AtomicWriter
from scripts.lab.evaluation import EvaluationError as BenchmarkError  # bad input; the message says how to fix it
from scripts.lab.evaluation.bench_rows import (
    load_rows, family_of, checkpoint_of, CheckpointStamps, row_args, extra_checkpoints, corpus_folder,
    group_of, checked_plan, hypotheses_name, is_engine_greedy, is_drafting, missing_checkpoints, unreliable_timing)
from scripts.lab.evaluation.corpus import Corpus
from scripts.lab.evaluation.jobs import exit_on_sigterm
from scripts.lab.evaluation.memory import MEMORY_BATCHES, peak_memory_mb
from scripts.lab.evaluation.out_folder import check_writable
from scripts.lab.evaluation.runners import CTranslate2Runner, FairseqRunner
from scripts.lab.evaluation.timing import pair_ratio, time_interleaved
from scripts.benchmark_plot import plot

RUNS = 5  # timed passes per row, by default
OUTPUTS = ("results.jsonl", "results.md", "speed_vs_bleu.png")  # what a run writes into --out


def n_sentences(batches):
    return sum(len(b["id"]) if isinstance(b, dict) else len(b) for b in batches)


# ----------------------------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------------------------


def _calls_per_token(calls, tokens):
    """Decoder calls per generated target token (EOS included), both counted over one pass."""
    return round(calls / tokens, 4) if calls is not None and tokens else None


def _mean_accepted(stats):
    return round(stats["accepted_tokens"] / stats["iterations"], 3) if stats.get("iterations") else None


def _load_runner(row, corpus, ckpt, args, beam, bs, device, fp16, threads, out, max_len, timed_sentences):
    if row.get("backend", "fairseq") == "ctranslate2":
        return CTranslate2Runner(corpus, ckpt, beam, bs, device, threads, out, max_len, timed_sentences,
                                 row.get("compute_type", "default"))
    return FairseqRunner(corpus, ckpt, args, beam, bs, device, fp16, threads, max_len, timed_sentences)


def run_benchmark(rows, data, checkpoints, out, batch_sizes=(1, 32), runs=RUNS, timed_sentences=0,
                  device="cpu", fp16=False, threads=None, log=print, max_len=(0.0, 200),
                  quality_batch_size=None, memory=True, clock=time.perf_counter, jobs=1, hypotheses=None,
                  skipped=()):
    """Run every row; returns the list of result dicts in the rows' order (also written to ``out``).
    ``jobs``: how many such processes decode side by side (:func:`run_benchmark_jobs`), recorded.
    ``skipped``: the rows left out for want of a model, one line each, named under the table.
    ``hypotheses``: a folder for each row x beam's translations of the quality pass (:func:`save_hypotheses`).

    Quality (BLEU over every sentence) comes from one full pass per row x beam x batch size, or,
    with ``quality_batch_size``, from one full pass at that batch size reported for every batch
    size (``bleu_batch_size`` says which); the other batch sizes then decode the timed sentences
    only, and lossless rows are compared with greedy on those sentences.  Baseline rows run first
    (greedy before beams) and stay loaded: every other row is timed interleaved with its reference."""
    import torch

    plan = checked_plan(rows, data, batch_sizes, runs, quality_batch_size, hypotheses)
    threads = threads or torch.get_num_threads()
    out = Path(out)
    check_writable(out, OUTPUTS)  # before any decoding, not after every row was timed
    families = {row["method"]: family_of(row) for row in rows}
    vs_beam5 = {row["method"] for row in rows if row.get("vs_beam5")}
    schedule = sorted(range(len(plan)), key=lambda i: _schedule_key(*plan[i]))
    corpora, baseline_tokens, quality = {}, {}, {}
    references = {}  # (corpus folder, batch size, beam) -> (runner, result) of a baseline row, kept loaded
    engines = {}  # (corpus folder, batch size, checkpoint) -> runner of the engine's greedy, kept loaded
    stamps = CheckpointStamps()
    results = [None] * len(plan)
    for n, slot in enumerate(schedule, 1):
        row, beam, bs = plan[slot]
        folder = corpus_folder(row, data)
        corpus = corpora.get(folder) or corpora.setdefault(folder, Corpus(folder))
        ckpt = checkpoint_of(row, checkpoints)
        for path in [ckpt] + [p for p in extra_checkpoints(row_args(row, checkpoints, data)) if p.exists()]:
            stamps.check(path)
        backend = row.get("backend", "fairseq")
        baseline = bool(row.get("baseline"))
        log(f"[bench {n}/{len(plan)}] {row['method']} | beam {beam} | batch {bs}", flush=True)
        runner = _load_runner(row, corpus, ckpt, row_args(row, checkpoints, data), beam, bs, device, fp16, threads, out,
                              max_len, timed_sentences)
        timed = runner.timed_batches
        full = quality_batch_size is None or bs == quality_batch_size
        # the quality pass: all sentences (none dropped), or the timed ones when reused from qbs
        runner.reset_stats()
        tokens = runner.decode(runner.batches if full else timed)
        ids = sorted(tokens)
        qkey = (row["method"], beam)
        if full:
            if corpus.references is not None and len(ids) != len(corpus.references):
                raise BenchmarkError(f"row '{row['method']}' translated {len(ids)} of {len(corpus.references)} sentences")
            texts = [runner.text(tokens[i], corpus) for i in ids]
            score = corpus.bleu(texts, ids)
            quality[qkey] = dict(score, calls=runner.model_calls(), stats=runner.stats(), sentences=len(ids),
                                 bleu_batch_size=bs,
                                 hypotheses=None if hypotheses is None else save_hypotheses(hypotheses, row, beam, texts))
        q = quality[qkey]
        key = (str(ckpt), bs, beam)  # lossless = identical to fairseq's baseline at the same batch size and beam
        if baseline:
            baseline_tokens[key] = tokens
        identical = None
        # "greedy_model": lossless w.r.t. another checkpoint's greedy (frozen blockwise heads keep the base's)
        greedy_ckpt = (checkpoint_of({"method": row["method"], "model": row["greedy_model"]}, checkpoints)
                       if "greedy_model" in row else ckpt)
        if row.get("lossless"):
            if "greedy_model" in row:
                key = (str(greedy_ckpt), bs, beam)
            ref = baseline_tokens.get(key)
            if ref is None:
                width = "greedy" if beam == 1 else f"beam {beam}"
                raise BenchmarkError(f"row '{row['method']}' is lossless but no {width} baseline row (\"baseline\": "
                                     "true, the same beam) ran before it on the same model and batch size")
            identical = sum(tokens[i] == ref[i] for i in ids) / len(ids)
        # timing, interleaved with the reference (a greedy baseline is the reference of itself)
        group = group_of(row)
        reference = None if baseline and beam == 1 else (references.get((folder, bs, beam, group))
                                                          or references.get((folder, bs, 1, group)))
        runners = [runner] + ([reference[0]] if reference else [])
        # a drafting row is also timed beside the engine's greedy on the same model (its own no-drafter
        # path): the ratio the "drafting never loses to greedy" goal is about, measured pair by pair
        # (for frozen blockwise heads: the engine's greedy on their base model, the same decode)
        engine = engines.get((folder, bs, str(greedy_ckpt))) if beam == 1 and is_drafting(row) else None
        if engine is not None:
            runners.append(engine)
        times, (calls, stats) = time_interleaved(runners, runs, clock=clock)
        speed_ratio = ratio_vs_greedy = spread = None
        ratio_vs_engine = pair_ratio(times[-1], times[0])[0] if engine is not None else None
        if reference:
            ratio, spread = pair_ratio(times[1], times[0])
            ref_result = reference[1]
            speed_ratio = 1.0 if baseline else ratio
            chained = ref_result["ratio_vs_greedy"]
            ratio_vs_greedy = ratio * chained if chained is not None else None
        elif baseline:  # the reference itself; a beam baseline without a greedy one has no ratio vs greedy
            speed_ratio, ratio_vs_greedy = 1.0, (1.0 if beam == 1 else None)
        produced = stats["output_tokens"]  # of the pass the calls were counted on
        mean = statistics.mean(times[0])
        peak = peak_memory_mb(runner, device) if memory else None
        qstats = q["stats"]
        result = {
            "method": row["method"], "family": families[row["method"]],
            "config": row.get("args", backend).strip() or backend,
            "model": row.get("model", str(ckpt)), "corpus": corpus.folder.name, "group": group, "batch_size": bs, "beam": beam,
            "bleu": q["bleu"], "bleu_bp": q["bp"], "bleu_ratio": q["ratio"], "sacrebleu_signature": q["signature"],
            "sentences": q["sentences"], "bleu_batch_size": q["bleu_batch_size"], "hypotheses": q["hypotheses"],
            "timed_sentences": n_sentences(timed), "runs": runs, "timed_tokens": produced,
            "seconds": round(mean, 4), "seconds_min": round(min(times[0]), 4),
            "tokens_per_s": round(produced / mean, 1), "sentences_per_s": round(n_sentences(timed) / mean, 2),
            "speed_ratio": None if speed_ratio is None else round(speed_ratio, 3),
            "speed_ratio_range": None if spread is None else [round(x, 3) for x in spread],
            "ratio_vs": (f"{reference[1]['method']} (beam {reference[1]['beam']}, batch {bs}), interleaved"
                         if reference else ("itself" if baseline else None)),
            "ratio_vs_greedy": None if ratio_vs_greedy is None else round(ratio_vs_greedy, 3),
            "ratio_vs_ct2": None, "ratio_vs_beam5": None,
            "ratio_vs_engine_greedy": None if ratio_vs_engine is None else round(ratio_vs_engine, 3),
            "model_calls": calls, "calls_per_token": _calls_per_token(calls, produced),
            "mean_accepted": _mean_accepted(stats),
            "counts_over": "timed sentences", "counts_sentences": n_sentences(timed),
            "model_calls_all": q["calls"], "mean_accepted_all": _mean_accepted(qstats),
            "identical_to_greedy": identical, "identical_sentences": len(ids) if identical is not None else None,
            "peak_mem_mb": peak, "mem_vs_greedy": None,
            "device": device, "dtype": "fp16" if fp16 else "fp32",
            "compute_type": row.get("compute_type", "default") if backend == "ctranslate2" else None,
            "threads": threads, "jobs": jobs, "backend": backend, "baseline": baseline, "control": bool(row.get("control")),
            "max_len": f"{max_len[0]}*src+{max_len[1]}",
        }
        for k in ("length_oracle", "oracle_model_calls", "drafter_choice"):  # drafter_choice: what auto kept, and why
            if k in stats:
                result[k] = stats[k]
        results[slot] = result
        log(f"    BLEU {q['bleu']}  {result['tokens_per_s']} tok/s  {mean:.3f}s/pass  speed x{result['speed_ratio']}"
            f"  calls {calls}" + (f"  identical {identical:.3f} of {len(ids)}" if identical is not None else ""),
            flush=True)
        for note in unreliable_timing([result]):
            log(f"    {note}", flush=True)
        if baseline:
            references[(folder, bs, beam, group)] = (runner, result)
        elif is_engine_greedy(row) and beam == 1:
            engines[(folder, bs, str(ckpt))] = runner
        del runner
    add_derived_ratios(results, vs_beam5)
    write_outputs(results, out, skipped)
    return results


def save_hypotheses(folder, row, beam, texts):
    """The quality pass's translations, one line per sentence in id order (the references' order), as
    ``<folder>/<method>.beam<k>.txt`` (the method's name with every run of other characters than
    letters and digits made one '_'); written whole or not at all.  Returns the file's name."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = hypotheses_name(row["method"], beam)
    part = folder / (name + ".part")
    part.write_text("".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf-8")
    part.replace(folder / name)
    return name


def _schedule_key(row, beam, bs):
    """fairseq greedy baselines, then their beams, then the engine's greedy, then every other row."""
    if row.get("baseline"):
        return int(beam != 1)
    return 2 if is_engine_greedy(row) else 3


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
         ("peak_mem_mb", "peak MB", None), ("mem_vs_greedy", "MB vs greedy", "{:+.1f}"),
         ("identical_to_greedy", "identical", "{:.3f}")]
OPTIONAL = {"bleu_bp", "ratio_vs_ct2", "ratio_vs_beam5", "ratio_vs_engine_greedy", "calls_per_token", "peak_mem_mb",
            "mem_vs_greedy", "mean_accepted", "identical_to_greedy"}


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
              "EOS included: hardware-independent) and mean accepted: over the timed sentences at that batch "
              f"size. Peak MB: weights + peak tensor memory of a decode ({MEMORY_BATCHES} longest-source timed "
              "batches).\n\n")
    sigs = sorted({r["sacrebleu_signature"] for r in results if r.get("sacrebleu_signature")})
    choices = [f"{r['method']}, batch {r['batch_size']}: {r['drafter_choice']}" for r in results if r.get("drafter_choice")]
    notes = unreliable_timing(results) + choices + [f"not run: {s}" for s in skipped]
    with AtomicWriter(out / "results.md") as f:
        f.write(header + markdown_table(results) + "\n\n" + "".join(f"- {n}\n" for n in notes)
                + ("\n" if notes else "") + "\n".join(f"sacreBLEU: `{s}`" for s in sigs) + "\n")
    plot(results, out / "speed_vs_bleu.png")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", required=True, nargs="+",
                    help="JSON lists of rows (see configs/benchmark/), concatenated in order")
    ap.add_argument("--data", required=True, help="corpus folder (with bin/ and raw test files)")
    ap.add_argument("--checkpoints", default="checkpoints", help="folder of <model>/checkpoint_best.pt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--runs", type=int, default=RUNS, help="timed passes per row (each paired with one of its reference)")
    ap.add_argument("--timed-sentences", type=int, default=0, help="time only the sentences with id < N, a random sample (0: all)")
    ap.add_argument("--only", nargs="*", help="run only rows whose method contains one of these strings")
    ap.add_argument("--quality-batch-size", type=int, default=None,
                    help="compute BLEU once per row at this batch size, one of --batch-sizes (default: at every one)")
    ap.add_argument("--skip-missing", action="store_true",
                    help="skip rows whose checkpoint (or drafter's) is not there, naming them under the table")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass (peak_mem_mb = null)")
    ap.add_argument("--save-hypotheses", action="store_true",
                    help="write each row x beam's translations of the quality pass to OUT/hypotheses/ (orders_report)")
    ap.add_argument("--device", default=default_device())
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch and CTranslate2 threads per process (default: torch's; with --jobs, the cores shared out)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes side by side, one per CPU core (rows timed against each other stay in one)")
    ap.add_argument("--max-len-a", type=float, default=1.2, help="every row: output length <= a*src_len + b")
    ap.add_argument("--max-len-b", type=int, default=10)
    args = ap.parse_args(argv)
    try:
        rows, skipped = load_rows(args.rows), []
        if args.only:
            rows = [r for r in rows if r.get("baseline") or any(s in r["method"] for s in args.only)]
        if args.skip_missing:
            missing = {r["method"]: missing_checkpoints(r, args.checkpoints, args.data) for r in rows}
            skipped = [f"'{method}' (no {', '.join(map(str, paths))})"
                       for method, paths in missing.items() if paths]
            for line in skipped:
                print(f"[bench] skipping {line}")
            rows = [r for r in rows if not missing[r["method"]]]
        from scripts.benchmark_jobs import run_benchmark_jobs  # it runs this module's run_benchmark in each job

        exit_on_sigterm()  # SIGTERM unwinds like Ctrl-C: the jobs' processes are stopped on the way out
        results = run_benchmark_jobs(rows, args.data, args.checkpoints, args.out, args.jobs, args.batch_sizes,
                                     args.runs, args.device, args.threads, timed_sentences=args.timed_sentences,
                                     fp16=args.fp16, max_len=(args.max_len_a, args.max_len_b),
                                     quality_batch_size=args.quality_batch_size, memory=not args.no_memory,
                                     hypotheses=Path(args.out) / "hypotheses" if args.save_hypotheses else None,
                                     skipped=skipped)
    except BenchmarkError as e:
        raise SystemExit(f"error: {e}")
    print(markdown_table(results))
    for note in unreliable_timing(results):
        print(f"\n{note}")
    print(f"\nresults: {Path(args.out) / 'results.jsonl'}, {Path(args.out) / 'results.md'}, "
          f"{Path(args.out) / 'speed_vs_bleu.png'}")


def default_device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    main()
