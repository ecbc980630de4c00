#!/usr/bin/env python
"""Where the time of one decoding row goes, measured with torch's profiler (issue: speed profile).

For each row (a benchmark row: fairseq-generate arguments), the script loads the model as the
benchmark does, decodes the timed sentences once as a warm-up and once plainly (the unprofiled
time), then once under ``torch.profiler`` with the components of :data:`POINTS` wrapped in
``torch.profiler.record_function``.  The wrapping is a monkeypatch that exists only inside
:func:`instrumented` (nothing is added to normal runs) and is undone afterwards.

:data:`POINTS` is the table that says what to measure: one line per component, ``(label, target,
method)``.  ``target`` is either an attribute path from the row's objects -- ``model`` (the first
model), ``generator``, ``drafter`` and ``verifier`` (engine rows) -- where ``[*]`` means every
element (``model.decoder.layers[*].self_attn``), or ``"module:Class"`` for every instance of a
class and its subclasses (objects made per batch, such as the KV cache or an acceptance rule).
A target object absent from a row (no drafter in fairseq's greedy) is skipped; a class,
module or method that does not exist is an error (:class:`ProfilePointError`), so that a rename
cannot silently drop a row of the profile.  Several lines may share a label (fairseq's and the
engine's version of the same part).  New components -- the lean decoder step, a drafter's model --
are one line each.

Output, per row: a Markdown table (component, total ms, % of the row's profiled time, calls, the
top-level torch operations inside it: ``evaluation.operations``), with the nesting observed at run
time shown by indentation; ``--engine-steps`` adds the engine's named steps of an iteration
(:data:`ENGINE_STEPS`).  "search bookkeeping" is the row's time not spent in any top-level
component; host synchronisations are counted separately (scalar reads
``aten::_local_scalar_dense`` -- ``.item()``, ``int()``, ``bool()`` of a tensor --,
``Tensor.tolist``, ``aten::nonzero``), their time is inside the components above.  Also writes ``profile.json``.
The profiler adds a per-op cost: the plain and profiled times are both printed; the shares are
those of the profiled pass.

    python -m scripts.profile_decode --data work/demo/data/en-de --path CKPT --batch-sizes 1 32 \\
        --sentences 100 --out work/demo/profile
    python -m scripts.profile_decode --data D --checkpoints work/demo/checkpoints \\
        --rows configs/benchmark/demo.json --only "fairseq greedy (L2R)" "IAD"
"""
import argparse
import functools
import importlib
import json
import re
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

from tabulate import tabulate

from fairseq_plugins.evaluation.operations import is_operation
from scripts import benchmark  # the benchmark's runners, corpus and rows

# label, target, method: what to wrap in record_function(label) while profiling (see the docstring).
# The lean step's per-layer parts (_layer, _self_attention...) have no public name in decoding/step.py
# yet: check_points makes a rename there an error instead of a missing row.
POINTS = [
    ("encoder", "model.encoder", "forward"),            # fairseq's generators, and the lean pass's fallback
    ("encoder", "fairseq_plugins.decoding.encoder:EncoderPass", "__call__"),  # the lean pass: engine, beam
    ("decoder call", "model.decoder", "forward"),       # fairseq's generators
    ("decoder call", "fairseq_plugins.decoding.step:DecoderStep", "__call__"),  # the lean step: engine, beam
    ("encoder K/V projection", "fairseq_plugins.decoding.step:DecoderStep", "begin"),
    ("decoder layers", "model.decoder.layers[*]", "forward"),
    ("decoder layers", "fairseq_plugins.decoding.step:DecoderStep", "_layer"),
    ("self-attention", "model.decoder.layers[*].self_attn", "forward"),
    ("self-attention", "fairseq_plugins.decoding.step:DecoderStep", "_self_attention"),
    ("encoder attention", "model.decoder.layers[*].encoder_attn", "forward"),
    ("encoder attention", "fairseq_plugins.decoding.step:DecoderStep", "_encoder_attention"),
    ("feed-forward (fc1, fc2)", "fairseq_plugins.decoding.step:DecoderStep", "_feed_forward"),
    ("feed-forward (fc1, fc2)", "model.decoder.layers[*].fc1", "forward"),
    ("feed-forward (fc1, fc2)", "model.decoder.layers[*].fc2", "forward"),
    ("output projection", "model.decoder.output_projection", "forward"),
    ("log-softmax", "model", "get_normalized_probs"),   # fairseq's EnsembleModel.forward_decoder
    ("log-softmax", "verifier", "log_probs"),
    ("drafter.propose", "drafter", "propose"),
    ("drafter.observe", "drafter", "observe"),
    ("acceptance", "fairseq_plugins.decoding.acceptance:AcceptanceRule", "__call__"),
    ("cache.commit", "fairseq_plugins.decoding.cache:KVCache", "commit"),
    ("reorder / drop rows", "fairseq_plugins.decoding.cache:KVCache", "select_rows"),
    ("reorder / drop rows", "fairseq_plugins.decoding.cache:KVCache", "reorder"),
    ("reorder / drop rows", "model.encoder", "reorder_encoder_out"),
    ("reorder / drop rows", "model.decoder", "reorder_incremental_state_scripting"),
    ("reorder / drop rows", "drafter", "select_rows"),
]
# --engine-steps: the engine's named steps of an iteration (engine.py), around the components above
ENGINE_STEPS = [(f"engine: {name.strip('_').replace('_', ' ')}", "fairseq_plugins.decoding.engine:DraftVerifyGenerator", name)
                for name in ("_verify", "_append", "_observe", "_count_drafts", "_propose", "_sync", "_learn",
                             "_drop_finished", "_next_call")] + [
    ("scoring", "fairseq_plugins.decoding.scoring:ColumnScorer", "all_columns"),
    ("scoring", "fairseq_plugins.decoding.scoring:ColumnScorer", "until_rejected"),
]
ROW_LABEL = "row"
SYNC_OPS = {"aten::_local_scalar_dense": "host sync: scalar reads (aten::_local_scalar_dense)",
            "Tensor.tolist": "host sync: Tensor.tolist",
            "aten::nonzero": "host sync: aten::nonzero"}
DEFAULT_ROWS = [
    {"method": "fairseq greedy", "args": "--task fast_translation --beam-search fairseq"},
    {"method": "engine greedy (--drafter none)", "args": "--task fast_translation --drafter none"},
    {"method": "Jacobi HGJ b=3", "args": "--task fast_translation --drafter jacobi_hgj --block-size 3"},
]


# ----------------------------------------------------------------------------------------------
# instrumentation: record_function around the POINTS, only while profiling
# ----------------------------------------------------------------------------------------------


def _wrap(label, fn):
    import torch

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)

    return wrapped


def resolve(target, roots):
    """Objects named by ``target``: an attribute path from ``roots`` (``[*]``: every element), or
    ``"module:Class"`` -> that class and its subclasses (as classes).  Missing parts give []
    (:func:`check_points` tells a class that does not exist from a part a row does not have)."""
    if ":" in target:
        module, name = target.split(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return []
        found, todo = [], [cls]
        while todo:
            c = todo.pop()
            found.append(c)
            todo.extend(c.__subclasses__())
        return found
    objs = [roots]
    for part in re.findall(r"[^.\[\]]+|\[\*\]", target):
        nxt = []
        for obj in objs:
            if part == "[*]":
                nxt.extend(list(obj))
            elif isinstance(obj, dict):
                if obj.get(part) is not None:
                    nxt.append(obj[part])
            elif getattr(obj, part, None) is not None:
                nxt.append(getattr(obj, part))
        objs = nxt
    return objs


class ProfilePointError(RuntimeError):
    """A profile point names a class or method that does not exist (renamed?): fix :data:`POINTS`."""


def check_points(points):
    """Every class target exists and defines its method (itself or a subclass)."""
    for label, target, method in points:
        if ":" in target and not any(method in vars(cls) for cls in resolve(target, {})):
            raise ProfilePointError(f"profile point '{label}': {target} has no method {method}; update POINTS")


@contextmanager
def instrumented(points, roots):
    """Wrap every (label, target, method) of ``points`` found from ``roots``; undo on exit.
    Also wraps ``torch.Tensor.tolist`` (a host sync that is no aten op)."""
    import torch

    check_points(points)
    undo = []
    try:
        for label, target, method in points:
            for obj in resolve(target, roots):
                if isinstance(obj, type):
                    raw = obj.__dict__.get(method)  # only where the class itself defines it
                    if raw is None:
                        continue
                    if isinstance(raw, (staticmethod, classmethod)):
                        new = type(raw)(_wrap(label, raw.__func__))
                    else:
                        new = _wrap(label, raw)
                    setattr(obj, method, new)
                    undo.append(lambda o=obj, m=method, r=raw: setattr(o, m, r))
                else:
                    fn = getattr(obj, method, None)
                    if fn is None:
                        raise ProfilePointError(f"profile point '{label}': {target} ({type(obj).__name__}) has no "
                                                f"method {method}; update POINTS")
                    own = method in vars(obj)
                    setattr(obj, method, _wrap(label, fn))
                    undo.append((lambda o=obj, m=method, f=fn: setattr(o, m, f)) if own
                                else (lambda o=obj, m=method: delattr(o, m)))
        tolist = torch.Tensor.tolist
        torch.Tensor.tolist = _wrap("Tensor.tolist", tolist)
        undo.append(lambda: setattr(torch.Tensor, "tolist", tolist))
        yield
    finally:
        for fn in reversed(undo):
            fn()


# ----------------------------------------------------------------------------------------------
# profiling one row and reading the profile
# ----------------------------------------------------------------------------------------------


def roots_of(runner):
    gen = runner.generator
    return {"model": runner.models[0], "generator": gen, "drafter": getattr(gen, "drafter", None),
            "verifier": getattr(gen, "verifier", None)}


def profile_row(runner, device, points=POINTS):
    """Warm-up, a plain pass and a profiled pass over the runner's timed batches; returns the summary."""
    import torch
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


def iteration_intervals(runner, passes=2):
    """What each engine iteration cost, by its kind: ``{(width, asked): [seconds, ...]}`` over
    ``passes`` passes of the runner's timed batches, as the engine itself times them for its width
    policy (``iteration_cost``: from one host synchronisation to the next, process CPU time on a
    CPU; ``width``: draft slots scored, ``asked``: a draft proposed inside the interval).  The
    policy's ``timed`` is wrapped for the passes only.  None for a generator that is not the engine."""
    policies = [getattr(runner.generator, "policy", None)] + list(getattr(runner.generator, "policies", {}).values())
    policies = [p for p in policies if p is not None]
    if not policies:
        return None
    seen = {}

    def recorder(timed):
        def record(width, asked, seconds):
            seen.setdefault((width, bool(asked)), []).append(seconds)
            return timed(width, asked, seconds)
        return record

    for policy in policies:
        policy.timed = recorder(policy.timed)
    try:
        for _ in range(passes):
            runner.decode(runner.timed_batches)
        runner.sync()
    finally:
        for policy in policies:
            del policy.timed
    return seen


def intervals_markdown(seen, unit=None):
    """Per kind of iteration: how many, median ms and, given ``unit`` (a plain engine step's
    seconds), the median in plain steps."""
    head = ["draft slots scored", "draft proposed", "iterations", "median ms"] + (["plain steps"] if unit else [])
    rows = []
    for (width, asked), times in sorted(seen.items()):
        med = statistics.median(times)
        rows.append([str(width), "yes" if asked else "no", str(len(times)), f"{med * 1e3:.3f}"]
                    + ([f"{med / unit:.2f}"] if unit else []))
    return tabulate(rows, headers=head, tablefmt="pipe", disable_numparse=True)


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


# ----------------------------------------------------------------------------------------------
# the CLI
# ----------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="corpus folder (with bin/ and raw test files)")
    ap.add_argument("--path", default=None, help="checkpoint for every row (else each row's model under --checkpoints)")
    ap.add_argument("--checkpoints", default="checkpoints", help="folder of <model>/checkpoint_best.pt")
    ap.add_argument("--rows", nargs="*", default=None, help="benchmark rows files (default: fairseq greedy, "
                    "the engine's greedy and Jacobi HGJ b=3)")
    ap.add_argument("--only", nargs="*", help="rows whose method contains one of these strings")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1])
    ap.add_argument("--sentences", type=int, default=100, help="profile the sentences with id < N (the timed sample)")
    ap.add_argument("--device", default=benchmark.default_device())
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-len-a", type=float, default=1.2)
    ap.add_argument("--max-len-b", type=int, default=10)
    ap.add_argument("--engine-steps", action="store_true",
                    help="also the engine's named steps of an iteration (_verify, _append, ...) and its scoring")
    ap.add_argument("--intervals", action="store_true",
                    help="also what each engine iteration costs by draft width (two more passes per row; in plain "
                         "steps when a row without a drafter, --drafter none, is profiled first)")
    ap.add_argument("--out", default=None, help="folder for profile.json and profile.md")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    try:
        rows = benchmark.load_rows(args.rows) if args.rows else [dict(r) for r in DEFAULT_ROWS]
        if args.only:
            rows = [r for r in rows if any(s in r["method"] for s in args.only)]
        if not rows:
            raise benchmark.BenchmarkError("no row to profile: check --only")
        corpus = benchmark.Corpus(args.data)
        report, text = [], []
        plain_unit = {}  # batch size -> a plain engine step's seconds (the --drafter none row's intervals)
        for row in rows:
            if row.get("backend", "fairseq") != "fairseq":
                print(f"[profile] skipping '{row['method']}': torch's profiler does not see {row['backend']}")
                continue
            ckpt = Path(args.path) if args.path else benchmark.checkpoint_of(row, args.checkpoints)
            for beam in row.get("beams", [1]):
                for bs in args.batch_sizes:
                    print(f"[profile] {row['method']} | beam {beam} | batch {bs}", flush=True)
                    row_args = benchmark.row_args(row, args.checkpoints, args.data)  # {CKPT}/{DATA} resolved
                    runner = benchmark.FairseqRunner(corpus, ckpt, row_args, beam, bs, args.device,
                                                     args.fp16, args.threads, (args.max_len_a, args.max_len_b),
                                                     args.sentences)
                    summary = profile_row(runner, args.device, POINTS + (ENGINE_STEPS if args.engine_steps else []))
                    n = benchmark.n_sentences(runner.timed_batches)
                    summary.update(method=row["method"], args=row_args, beam=beam, batch_size=bs,
                                   sentences=n, device=args.device, dtype="fp16" if args.fp16 else "fp32",
                                   threads=args.threads)
                    if args.intervals:
                        seen = iteration_intervals(runner)
                        if seen:
                            if "--drafter none" in row_args and (bs not in plain_unit):
                                plain_unit[bs] = statistics.median(t for times in seen.values() for t in times)
                            summary["intervals"] = {f"{w},{int(a)}": times for (w, a), times in seen.items()}
                    report.append(summary)
                    calls = next((c["calls"] for c in summary["components"] if c["label"] == "decoder call"), 0)
                    per_call = f", {summary['operations'] / calls:.1f} per decoder call" if calls else ""
                    head = (f"### {row['method']} (beam {beam}, batch {bs}, {n} sentences, {args.device}): "
                            f"{summary['plain_seconds']:.3f} s plain, {summary['profiled_seconds']:.3f} s profiled, "
                            f"{summary['operations']} torch operations{per_call}")
                    text.append(head + "\n\n" + markdown(summary) + "\n")
                    if summary.get("intervals"):
                        text[-1] += "\n" + intervals_markdown(seen, plain_unit.get(bs)) + "\n"
                    print("\n" + text[-1], flush=True)
                    del runner
    except benchmark.BenchmarkError as e:
        raise SystemExit(f"error: {e}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "profile.md").write_text("\n".join(text))
        print(f"profile: {out / 'profile.json'}, {out / 'profile.md'}")


if __name__ == "__main__":
    main()
