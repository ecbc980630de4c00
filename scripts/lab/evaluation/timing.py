"""Timing decoders side by side: each row's passes interleaved with its references' under the
same load (the benchmark's speed ratios).

A *runner* decodes its ``timed_batches`` with ``decode(batches)``, waits for the device with
``sync()`` and counts what it did (``reset_stats()``, ``model_calls()``, ``stats()``):
``scripts/benchmark.py``'s fairseq and CTranslate2 runners.
"""
import math
import statistics
import time


def time_interleaved(runners, runs, warmup=1, clock=time.perf_counter):
    """Time ``runners[0]`` (the row) interleaved with ``runners[1:]`` (its references).

    After ``warmup`` short passes of each runner, ``runs`` rounds in which every runner decodes its
    timed batches once, the order reversed every other round (0 1 | 1 0 | 0 1 ...): each reference
    time has a row time measured beside it under the same load, and a steady drift cancels.  The
    row's counters are reset before its first timed pass and read right after it.  Returns (the
    pass times of every runner, (model calls, stats) of the row's first timed pass); its stats
    carry ``output_tokens``: the target tokens (EOS included) that pass generated, the tokens the
    calls were spent on."""
    for runner in runners:
        for _ in range(warmup):
            runner.decode(runner.timed_batches[: max(1, min(len(runner.timed_batches), 4))])
    times = [[] for _ in runners]
    counts = None
    for k in range(runs):
        for j in (range(len(runners)) if k % 2 == 0 else reversed(range(len(runners)))):
            runner = runners[j]
            if j == 0 and k == 0:
                runner.reset_stats()
            runner.sync()
            t0 = clock()
            out = runner.decode(runner.timed_batches)
            runner.sync()
            times[j].append(clock() - t0)
            if j == 0 and k == 0:
                counts = (runner.model_calls(), dict(runner.stats(), output_tokens=sum(map(len, out.values()))))
    return times, counts


def pair_ratio(ref_times, row_times):
    """Geometric mean over the interleaved pairs of reference time / row time, and (min, max)."""
    ratios = [ref / row for ref, row in zip(ref_times, row_times)]
    return math.exp(statistics.fmean(math.log(r) for r in ratios)), (min(ratios), max(ratios))
