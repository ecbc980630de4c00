"""The benchmark's harness (``python -m scripts.benchmark``; docs/METHODS.md §4): every row x beam x batch
size loaded once, decoded once for BLEU, then timed interleaved with its reference and counted; one
process (``--jobs``: :mod:`.bench_jobs`).  The command's help says what each result field means."""
import statistics
import time
from pathlib import Path

from scripts.lab.evaluation import EvaluationError as BenchmarkError  # bad input; the message says how to fix it
from scripts.lab.evaluation.bench_results import OUTPUTS, add_derived_ratios, write_outputs
from scripts.lab.evaluation.bench_rows import (
    family_of, checkpoint_of, CheckpointStamps, row_args, extra_checkpoints, corpus_folder,
    group_of, checked_plan, hypotheses_name, is_engine_greedy, is_drafting, unreliable_timing)
from scripts.lab.evaluation.corpus import Corpus
from scripts.lab.evaluation.memory import peak_memory_mb
from scripts.lab.evaluation.out_folder import check_writable
from scripts.lab.evaluation.runners import CTranslate2Runner, FairseqRunner
from scripts.lab.evaluation.timing import pair_ratio, time_interleaved

RUNS = 5  # timed passes per row, by default


def n_sentences(batches):
    return sum(len(b["id"]) if isinstance(b, dict) else len(b) for b in batches)


def _calls_per_token(calls, tokens):
    """Decoder calls per generated target token (EOS included), both counted over one pass."""
    return round(calls / tokens, 4) if calls is not None and tokens else None


def _mean_accepted(stats):
    return round(stats["accepted_tokens"] / stats["iterations"], 3) if stats.get("iterations") else None


def _widths(stats):
    """What the width policy chose (issue 48: "with the widths the width policy chose"): ``draft_width``,
    the draft slots a row sent in the calls that verified a draft (None: none did, or no drafter), and
    ``drafted_share``, the share of row-calls that verified one (None: no drafter)."""
    if "draft_tokens" not in stats or not stats.get("iterations"):
        return {"draft_width": None, "drafted_share": None}
    drafted = stats.get("drafted_iterations", 0)
    return {"draft_width": round(stats["draft_tokens"] / drafted, 2) if drafted else None,
            "drafted_share": round(drafted / stats["iterations"], 3)}


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
            "mean_accepted": _mean_accepted(stats), **_widths(stats),
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


def default_device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
