"""One row's decoding profile (``scripts/profile_decode.py``): a warm-up, a plain pass and a pass
under ``torch.profiler`` with the profile points wrapped (:mod:`.profile_points`), read back as a
tree of components with their times, calls and top-level torch operations (:mod:`.operations`),
the rest of the row and its host synchronisations.  A *runner* is :mod:`.timing`'s."""
import time

from tabulate import tabulate

from scripts.lab.evaluation.operations import is_operation
from scripts.lab.evaluation.profile_points import POINTS, instrumented, roots_of

ROW_LABEL = "row"
SYNC_OPS = {"aten::_local_scalar_dense": "host sync: scalar reads (aten::_local_scalar_dense)",
            "Tensor.tolist": "host sync: Tensor.tolist",
            "aten::nonzero": "host sync: aten::nonzero"}


def profile_row(runner, device, points=POINTS):
    """Warm-up, a plain pass and a profiled pass over the runner's timed batches; returns the summary."""
    from torch.profiler import ProfilerActivity, profile, record_function

    batches = runner.timed_batches
    runner.decode(batches[: max(1, min(len(batches), 4))])
    runner.sync()
    t0 = time.perf_counter()
    runner.decode(batches)
    runner.sync()
    plain = time.perf_counter() - t0
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device != "cpu" else [])
    labels = {label for label, _, _ in points}
    with instrumented(points, roots_of(runner)):
        with profile(activities=activities) as prof:
            with record_function(ROW_LABEL):
                runner.decode(batches)
                runner.sync()
    return summarize(prof.events(), labels, plain, device != "cpu", points)


def summarize(events, labels, plain_seconds, on_device=False, points=POINTS):
    """Per label: total ms (its outermost calls, so a recursive or repeated wrap counts once),
    calls, nesting depth (labelled ancestors), whether it is top level, and the top-level torch
    operations inside it; the row; host syncs."""
    stats, row_ms = {}, None
    syncs = {name: [0, 0.0] for name in SYNC_OPS}
    ops, row_ops = {}, 0  # label -> top-level operations inside it (each counted once per label)
    for e in events:
        name = e.name
        if is_operation(e):
            row_ops += 1
            parent, seen = e.cpu_parent, set()
            while parent is not None:
                if parent.name in labels and parent.name not in seen:
                    seen.add(parent.name)
                    ops[parent.name] = ops.get(parent.name, 0) + 1
                parent = parent.cpu_parent
            if not seen:
                ops[None] = ops.get(None, 0) + 1
        if name in syncs:
            syncs[name][0] += 1
            syncs[name][1] += e.cpu_time_total / 1000
        if name == ROW_LABEL:
            row_ms = e.cpu_time_total / 1000
            continue
        if name not in labels:
            continue
        ancestors, parent = [], e.cpu_parent
        while parent is not None:
            if parent.name in labels:
                ancestors.append(parent.name)
            parent = parent.cpu_parent
        s = stats.setdefault(name, dict(ms=0.0, device_ms=0.0, calls=0, depth=None, top_ms=0.0, parent=None))
        if name in ancestors:  # the same label further out (e.g. nested wraps): counted there
            continue
        s["ms"] += e.cpu_time_total / 1000
        s["device_ms"] += getattr(e, "device_time_total", 0) / 1000
        s["calls"] += 1
        if s["depth"] is None or len(ancestors) < s["depth"]:  # where it is met least nested: its place in the table
            s["depth"], s["parent"] = len(ancestors), (ancestors[0] if ancestors else None)
        if not ancestors:
            s["top_ms"] += e.cpu_time_total / 1000
    if row_ms is None:
        raise RuntimeError("the profile holds no 'row' range: the profiler recorded nothing")
    # a tree: each label under the labelled part it runs in, siblings in the order of ``points``
    known = [label for label in dict.fromkeys(label for label, _, _ in points) if label in stats]
    known += [label for label in stats if label not in known]
    order = []

    def place(parent):
        for label in known:
            if stats[label]["parent"] == parent and label not in order:
                order.append(label)
                place(label)

    place(None)
    order += [label for label in known if label not in order]  # a parent not in stats: should not happen
    components = [dict(label=label, depth=stats[label]["depth"], ms=round(stats[label]["ms"], 2),
                       pct=round(100 * stats[label]["ms"] / row_ms, 1), calls=stats[label]["calls"],
                       ops=ops.get(label, 0), **({"device_ms": round(stats[label]["device_ms"], 2)} if on_device else {}))
                  for label in order]
    rest = row_ms - sum(s["top_ms"] for s in stats.values())
    components.append(dict(label="search bookkeeping (rest of the row)", depth=0, ms=round(rest, 2),
                           pct=round(100 * rest / row_ms, 1), calls=None, ops=ops.get(None, 0)))
    sync_rows = [dict(label=SYNC_OPS[name], depth=0, ms=round(ms, 2), pct=round(100 * ms / row_ms, 1), calls=n)
                 for name, (n, ms) in syncs.items()]
    return dict(plain_seconds=round(plain_seconds, 4), profiled_seconds=round(row_ms / 1000, 4),
                operations=row_ops, components=components, host_syncs=sync_rows)


def markdown(summary):
    """The row's table: component, total ms (CPU; + device ms on a GPU), % of the row, calls."""
    device = any("device_ms" in c for c in summary["components"])
    head = ["component", "total ms"] + (["device ms"] if device else []) + ["% of row", "calls", "operations"]
    rows = [["row (profiled pass)", f"{summary['profiled_seconds'] * 1000:.1f}"] + (["–"] if device else [])
            + ["100.0", "1", str(summary["operations"])]]
    for c in summary["components"] + summary["host_syncs"]:
        dev = [f"{c['device_ms']:.1f}" if "device_ms" in c else "–"] if device else []
        rows.append(["&nbsp;&nbsp;" * (c["depth"] or 0) + c["label"], f"{c['ms']:.1f}"] + dev
                    + [f"{c['pct']:.1f}", "–" if c["calls"] is None else str(c["calls"]), str(c.get("ops", "–"))])
    return tabulate(rows, headers=head, tablefmt="pipe", disable_numparse=True,
                    colalign=["left"] + ["right"] * (len(head) - 1))
