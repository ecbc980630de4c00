#!/usr/bin/env python
"""Where the time of one decoding row goes, measured with torch's profiler (issue: speed profile).

For each row (a benchmark row: fairseq-generate arguments), the script loads the model as the
benchmark does, decodes the timed sentences once as a warm-up and once plainly (the unprofiled
time), then once under ``torch.profiler`` with the components of
``scripts.lab.evaluation.profile_points.POINTS`` wrapped in ``torch.profiler.record_function``
only while profiling (that module says how to add a component).

Output, per row: a Markdown table (component, total ms, % of the row's profiled time, calls, the
top-level torch operations inside it: ``evaluation.operations``), with the nesting observed at run
time shown by indentation; ``--engine-steps`` adds the engine's named steps of an iteration
(``ENGINE_STEPS``).  "search bookkeeping" is the row's time not spent in any top-level
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
import json
import statistics
from pathlib import Path

from scripts.lab.evaluation import bench_rows
from scripts.lab.evaluation.corpus import Corpus
from scripts.lab.evaluation.iteration_intervals import intervals_markdown, iteration_intervals
from scripts.lab.evaluation.profile_points import ENGINE_STEPS, POINTS
from scripts.lab.evaluation.row_profile import markdown, profile_row
from scripts.lab.evaluation.runners import FairseqRunner
from scripts.lab.evaluation import bench_harness  # the benchmark's default device, error and sentence count

DEFAULT_ROWS = [
    {"method": "fairseq greedy", "args": "--task fast_translation --beam-search fairseq"},
    {"method": "engine greedy (--drafter none)", "args": "--task fast_translation --drafter none"},
    {"method": "Jacobi HGJ b=3", "args": "--task fast_translation --drafter jacobi_hgj --block-size 3"},
]


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
    ap.add_argument("--device", default=bench_harness.default_device())
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
        rows = bench_rows.load_rows(args.rows) if args.rows else [dict(r) for r in DEFAULT_ROWS]
        if args.only:
            rows = [r for r in rows if any(s in r["method"] for s in args.only)]
        if not rows:
            raise bench_harness.BenchmarkError("no row to profile: check --only")
        corpus = Corpus(args.data)
        report, text = [], []
        plain_unit = {}  # batch size -> a plain engine step's seconds (the --drafter none row's intervals)
        for row in rows:
            if row.get("backend", "fairseq") != "fairseq":
                print(f"[profile] skipping '{row['method']}': torch's profiler does not see {row['backend']}")
                continue
            ckpt = Path(args.path) if args.path else bench_rows.checkpoint_of(row, args.checkpoints)
            for beam in row.get("beams", [1]):
                for bs in args.batch_sizes:
                    print(f"[profile] {row['method']} | beam {beam} | batch {bs}", flush=True)
                    row_args = bench_rows.row_args(row, args.checkpoints, args.data)  # {CKPT}/{DATA} resolved
                    runner = FairseqRunner(corpus, ckpt, row_args, beam, bs, args.device,
                                                     args.fp16, args.threads, (args.max_len_a, args.max_len_b),
                                                     args.sentences)
                    summary = profile_row(runner, args.device, POINTS + (ENGINE_STEPS if args.engine_steps else []))
                    n = bench_harness.n_sentences(runner.timed_batches)
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
    except bench_harness.BenchmarkError as e:
        raise SystemExit(f"error: {e}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "profile.md").write_text("\n".join(text))
        print(f"profile: {out / 'profile.json'}, {out / 'profile.md'}")


if __name__ == "__main__":
    main()
