"""A benchmark's rows in several processes, one per CPU core (``benchmark.py --jobs``).

Rows that depend on each other stay in one process: :func:`split` joins every two rows that share a
key (the benchmark's keys: a corpus and group, whose baselines the other rows are timed against, and
a checkpoint, whose greedy output lossless rows are compared with), so each process runs a whole
benchmark of its own and every ratio is still a pair of passes timed interleaved in one process.
The joined units go to the process with the least work so far, largest first (LPT scheduling).
"""
import multiprocessing
import time


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
    is raised here (a benchmark's errors pickle: they are plain messages)."""
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no torch thread pool forked half-set
    with ctx.Pool(len(calls)) as pool:
        pending = [pool.apply_async(target, args) for args in calls]
        while not all(p.ready() for p in pending):
            for p in pending:
                if p.ready() and not p.successful():
                    pool.terminate()
                    p.get()  # raises the job's exception
            time.sleep(poll)
        return [p.get() for p in pending]
