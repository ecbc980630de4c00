"""A benchmark's rows in several processes, one per CPU core (``python -m scripts.benchmark --jobs``).

Rows that depend on each other stay in one process: :func:`split` joins every two rows that share a
key (the benchmark's keys: a corpus and group, whose baselines the other rows are timed against, and
a checkpoint, whose greedy output lossless rows are compared with), so each process runs a whole
benchmark of its own and every ratio is still a pair of passes timed interleaved in one process.
The joined units go to the process with the least work so far, largest first (LPT scheduling).
"""
import functools
import multiprocessing
import os
import shutil
import time
from pathlib import Path

from scripts.lab.evaluation import bench_rows
from scripts.lab.evaluation.bench_harness import RUNS, BenchmarkError, run_benchmark
from scripts.lab.evaluation.bench_results import OUTPUTS, add_derived_ratios, write_outputs
from scripts.lab.evaluation.jobs import die_with_parent
from scripts.lab.evaluation.out_folder import claimed


def split(rows, keys_of, weight_of, jobs):
    """``rows`` in at most ``jobs`` parts, each a list of row indices in the rows' order; rows that share
    a key (``keys_of(row)``: an iterable) are in the same part.  Parts are balanced by ``weight_of(row)``."""
    parent = list(range(len(rows)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for i, row in enumerate(rows):
        for key in keys_of(row):
            j = owner.setdefault(key, i)
            parent[root(i)] = root(j)
    units = {}
    for i in range(len(rows)):
        units.setdefault(root(i), []).append(i)
    parts = [[] for _ in range(max(1, min(jobs, len(units))))]
    load = [0.0] * len(parts)
    for unit in sorted(units.values(), key=lambda u: -sum(weight_of(rows[i]) for i in u)):
        k = load.index(min(load))
        parts[k] += unit
        load[k] += sum(weight_of(rows[i]) for i in unit)
    return [sorted(p) for p in parts if p]


def run_in_processes(target, calls, poll=0.2):
    """``target(*args)`` for each ``args`` in ``calls``, each in its own fresh (spawned) process, all at
    once; their results in ``calls``' order.  The first one to fail stops the others and its exception
    is raised here (a benchmark's errors pickle: they are plain messages).  Leaving this function any other
    way (Ctrl-C, SIGTERM turned into SystemExit by the command: ``jobs.exit_on_sigterm``) stops them too
    (``Pool.__exit__`` terminates the workers), and a worker whose parent is killed outright gets SIGTERM."""
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no torch thread pool forked half-set
    with ctx.Pool(len(calls), initializer=die_with_parent) as pool:
        pending = [pool.apply_async(target, args) for args in calls]
        while not all(p.ready() for p in pending):
            for p in pending:
                if p.ready() and not p.successful():
                    pool.terminate()
                    p.get()  # raises the job's exception
            time.sleep(poll)
        return [p.get() for p in pending]


def run_benchmark_jobs(rows, data, checkpoints, out, jobs=1, batch_sizes=(1, 32), runs=RUNS, device="cpu",
                       threads=None, log=print, **kwargs):
    """``bench_harness.run_benchmark`` with the rows split over ``jobs`` processes side by side (CPU cores), each
    a whole benchmark of the rows that depend on each other (:func:`_row_keys`); the results, their
    order and the files in ``out`` are those of one process, each row recording ``jobs``."""
    if jobs < 1:
        raise BenchmarkError(f"--jobs must be at least 1 (got {jobs})")
    if jobs > 1 and str(device).startswith("cuda"):
        raise BenchmarkError("--jobs runs rows side by side on the CPU's cores; on a GPU they would share "
                             "one device and each other's timings: use --jobs 1")
    bench_rows.checked_plan(rows, data, batch_sizes, runs, kwargs.get("quality_batch_size"),  # before any job starts
                            kwargs.get("hypotheses"))
    with claimed(out, OUTPUTS):  # one run per --out (its .jobs folder, its files), writable before any decoding
        return _run_jobs(rows, data, checkpoints, out, jobs, batch_sizes, runs, device, threads, log, **kwargs)


def _run_jobs(rows, data, checkpoints, out, jobs, batch_sizes, runs, device, threads, log, **kwargs):
    parts = split(rows, lambda r: _row_keys(r, checkpoints, data), lambda r: _row_weight(r, batch_sizes), jobs)
    if len(parts) <= 1:  # one unit, or no rows at all
        return run_benchmark(rows, data, checkpoints, out, batch_sizes, runs, device=device, threads=threads,
                             log=log, **kwargs)
    threads = threads or max(1, (os.cpu_count() or 1) // len(parts))  # the cores shared out, not oversubscribed
    for k, part in enumerate(parts, 1):
        log(f"[bench] job {k} of {len(parts)} ({threads} threads): "
            + "; ".join(rows[i]["method"] for i in part), flush=True)
    out, scratch = Path(out), Path(out) / ".jobs"
    calls = [(k, [rows[i] for i in part], data, checkpoints, scratch / f"job{k}", batch_sizes, device, threads,
              dict(kwargs, runs=runs, jobs=len(parts))) for k, part in enumerate(parts, 1)]
    try:
        done = run_in_processes(_job, calls)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # each job's own files; the merged ones are written below
    position = {row["method"]: i for i, row in enumerate(rows)}
    results = sorted((r for part in done for r in part), key=lambda r: position[r["method"]])  # stable
    add_derived_ratios(results, {row["method"] for row in rows if row.get("vs_beam5")})
    write_outputs(results, out, kwargs.get("skipped", ()))
    return results


def _job(k, rows, data, checkpoints, out, batch_sizes, device, threads, kwargs):
    """One process of :func:`run_benchmark_jobs`: its rows' benchmark, each log line naming the job."""
    return run_benchmark(rows, data, checkpoints, out, batch_sizes, device=device, threads=threads,
                         log=functools.partial(print, f"[job {k}]"), **kwargs)


def _row_keys(row, checkpoints, data):
    """What ties a row to others (one process runs them): its corpus and group, whose baselines time it,
    and the checkpoints whose baseline output it is compared with or whose engine greedy it is timed beside."""
    keys = [("reference", str(bench_rows.corpus_folder(row, data)), bench_rows.group_of(row)),
            ("checkpoint", str(bench_rows.checkpoint_path(row, checkpoints)))]
    if "greedy_model" in row:
        keys.append(("checkpoint", str(bench_rows.checkpoint_path({"model": row["greedy_model"]}, checkpoints))))
    return keys


def _row_weight(row, batch_sizes):
    """A row's work, roughly: per beam and batch size, a pass that costs more with the beam, twice for a
    row timed beside its reference."""
    per_pass = sum(1 + beam / 5 for beam in row.get("beams", [1])) * len(row.get("batch_sizes", batch_sizes))
    return per_pass * (1 if row.get("baseline") else 2)
