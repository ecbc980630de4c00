"""Counting top-level torch operations: the profiler's ``aten::`` events not nested in another.

At batch 1 on a CPU a decoding step's time is mostly a cost per operation (dispatch, allocation,
a small kernel), so the count predicts it, and unlike a timing on shared cores it does not move
from run to run (``scripts/time_drafter_step.py --count-ops``, ``scripts/profile_decode.py``)."""


def is_operation(event) -> bool:
    """A profiler event that is a top-level torch operation (an aten event whose parent is none)."""
    parent = event.cpu_parent
    return event.name.startswith("aten::") and (parent is None or not parent.name.startswith("aten::"))


def operations(fn):
    """``(n, fn())``: n = the top-level torch operations ``fn`` dispatched."""
    from torch.profiler import profile

    with profile() as p:
        result = fn()
    return sum(1 for e in p.events() if is_operation(e)), result
