"""A benchmark run as ``python -m scripts.benchmark`` asks it: the rows read and filtered (``--only``,
``--skip-missing``), run in ``--jobs`` processes (:mod:`.bench_jobs`), and the table printed."""
from pathlib import Path

from scripts.lab.evaluation import bench_jobs
from scripts.lab.evaluation.bench_harness import BenchmarkError
from scripts.lab.evaluation.bench_results import markdown_table
from scripts.lab.evaluation.bench_rows import load_rows, missing_checkpoints, unreliable_timing
from scripts.lab.evaluation.jobs import exit_on_sigterm


def benchmark(args):
    """Run the rows the parsed arguments name; a bad input is a one-line error (SystemExit)."""
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
        exit_on_sigterm()  # SIGTERM unwinds like Ctrl-C: the jobs' processes are stopped on the way out
        results = bench_jobs.run_benchmark_jobs(
            rows, args.data, args.checkpoints, args.out, args.jobs, args.batch_sizes, args.runs, args.device,
            args.threads, timed_sentences=args.timed_sentences, fp16=args.fp16, max_len=(args.max_len_a, args.max_len_b),
            quality_batch_size=args.quality_batch_size, memory=not args.no_memory,
            hypotheses=Path(args.out) / "hypotheses" if args.save_hypotheses else None, skipped=skipped)
    except BenchmarkError as e:
        raise SystemExit(f"error: {e}")
    print(markdown_table(results))
    for note in unreliable_timing(results):
        print(f"\n{note}")
    print(f"\nresults: {Path(args.out) / 'results.jsonl'}, {Path(args.out) / 'results.md'}, "
          f"{Path(args.out) / 'speed_vs_bleu.png'}")
