"""How many threads a CPU decode runs torch's operations on.

torch's default (one per core) collapses when another process shares the cores: its threads wait
for each other at every operation.  Measured on the shipped en-de baseline (README's lean-beam
command, 100 test sentences, batch 32, beside one busy process on 2 cores): 12.4 s to translate
on one thread, 192.9 s on torch's default of two (README, "Threads").  So a CPU decode runs on one
thread unless the user says otherwise: ``--cpu-threads N``, or ``OMP_NUM_THREADS`` set in the
environment (torch reads it; the plugin then leaves it alone).
Several decodes side by side (``scripts/benchmark.py --jobs``) are the way to use more cores.
In-process, :class:`~scripts.lab.evaluation.generation.Generation` keeps the caller's threads
(the benchmark's, the profiler's and distillation's ``--threads``).
"""
import os
from typing import Optional

import torch

DEFAULT_THREADS = 1


def choose_cpu_threads(requested: Optional[int]) -> str:
    """Set torch's intra-op threads for a decode on the CPU; returns the one log line that says the choice."""
    if requested:
        torch.set_num_threads(requested)
        return f"CPU threads: {requested} (--cpu-threads, or the in-process caller's)"
    if os.environ.get("OMP_NUM_THREADS"):
        return f"CPU threads: {torch.get_num_threads()} (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']})"
    default = torch.get_num_threads()
    torch.set_num_threads(DEFAULT_THREADS)
    return (f"CPU threads: {DEFAULT_THREADS} (the plugin's default for decoding, torch's was {default}: torch's "
            "threads slow down many times when another process shares the cores; --cpu-threads N or "
            "OMP_NUM_THREADS=N sets another)")
