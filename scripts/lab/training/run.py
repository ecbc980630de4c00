"""A reference run from its parsed arguments (``python -m scripts.reference_run``): the models of the list
trained side by side until each has converged, then the summary, the curves' figure, the export and the
snapshots into ``--models-dir``, and a line a model."""
import os
from pathlib import Path

from scripts.lab.evaluation.jobs import exit_on_sigterm
from scripts.lab.training.checkpoints import export
from scripts.lab.training.curve_scoring import score_curve
from scripts.lab.training.frozen_roles import freeze_role
from scripts.lab.training.model_list import read_models
from scripts.lab.training.orchestration import SELF, ReferenceRun
from scripts.lab.training.packing import offer
from scripts.lab.training.summary import summarize
from scripts.lab.training.train_command import cuda_available
from scripts.lab.viz.learning_curves import plot


def reference_run(args, error):
    """Do what the arguments ask; ``error(message)`` refuses an argument (the parser's error)."""
    if args.freeze:
        return freeze_role(args, *args.freeze)
    if not args.data:
        error("--data is required: the data root holding the corpora named in --models")
    if args.curve:
        return score_curve(args)
    if (args.snapshot or args.snapshot_every) and not args.models_dir:
        error("--snapshot and --snapshot-every pack into --models-dir: give it")
    if args.threads < 1:
        error(f"--threads must be at least 1, not {args.threads}")
    if args.parallel * args.threads > (os.cpu_count() or 1):
        print(f"warning: --parallel {args.parallel} x --threads {args.threads} is more threads than the {os.cpu_count()} "
              "cores: trainings side by side slow each other down (give --threads 1)", flush=True)
    if args.pack:
        return offer(read_models(args.models, [args.name])[0], args)
    models = read_models(args.models, args.names)
    out = Path(args.out)
    gpu = cuda_available()
    print(f"[reference] {len(models)} models on {'GPU (fp16)' if gpu else 'CPU (fp32)'}, up to {args.max_update} "
          f"updates, curves every {args.interval}; converged: BLEU within {args.tolerance} over the last two of "
          f">= {args.min_points} points" + ("" if args.flatten_reference.lower() == "none" else
                                            f", the last at >= 3x where {args.flatten_reference} flattened"), flush=True)
    if args.flatten_reference.lower() not in ("none", SELF) and not (out / args.flatten_reference / "curve.json").exists() and \
            args.flatten_reference not in {m["name"] for m in models}:
        print(f"warning: no curve of the reference {args.flatten_reference} in {out} and it is not trained here: "
              "the other models train to --max-update unless it flattens (--flatten-reference none: no floor)",
              flush=True)
    exit_on_sigterm()
    reference = ReferenceRun(models, args, gpu)
    failed = reference.run()
    summary = summarize(models, out)
    plot(summary, out / "curves.png")
    if args.export:
        export(models, out, args.export, args.data)
    if args.snapshot:
        for m in models:
            offer(m, args)
    report(summary, reference.waiting)
    if failed:
        raise SystemExit(f"error: training failed for {', '.join(failed)} (see OUT/<name>/train.log)")


def report(summary, waiting):
    """A line a model: its last and best points, where it converged, its training time; and the models not
    trained for want of a checkpoint of this run."""
    for name, c in summary.items():
        best = max((p for p in c["points"] if p["bleu"] is not None), key=lambda p: p["bleu"], default=None)
        last = c["points"][-1] if c["points"] else None
        conv = c.get("converged")
        print(f"{name:20s} last {last and last['updates']} updates BLEU {last and last['bleu']}  best BLEU "
              f"{best and best['bleu']} at {best and best['updates']}  "
              f"{'converged at ' + str(conv['updates']) if conv else 'not converged'}  ({c.get('train_seconds')} s training)")
    for name, needs in waiting.items():
        print(f"{name:20s} not trained: it needs {', '.join(needs)} (run the command again once it exists)")
