#!/usr/bin/env python
"""Reference run: train a list of models side by side until the L2R validation loss flattens,
record learning curves (validation loss and BLEU every ``--interval`` updates) and export the
trained models for the benchmark.  This is how docs/RESULTS.md's reference tables were made.

    python -m scripts.reference_run --models configs/reference/orders.txt --data work/demo/data \\
        --out work/reference --max-update 8000 --interval 500 --parallel 5

Model list lines are ``NAME CONFIG CORPUS [updates=F] [extra fairseq-train args]`` (the format of
configs/demo_models.txt: ``updates=F`` trains F x ``--max-update``); ``{CKPT}`` and ``{DATA}`` in a
config's arguments and in the extra ones are replaced by ``OUT/checkpoints`` and the data root.  Every model trains with fairseq-train (``--fp16`` on a GPU,
``--cpu`` otherwise), saving a checkpoint and validating every ``--interval`` updates; then each
interval checkpoint decodes the ``--curve-subset`` split with the generator fairseq-generate would
pick (the checkpoint's own order; ``--curve-beam``) and sacreBLEU scores it.  Trainings that stop
early (``--stop-minutes``: fairseq's ``--stop-time-hours``) still save their last checkpoint.

Outputs: ``OUT/<name>/train.log``, ``OUT/<name>/curve.json``, ``OUT/summary.json``,
``OUT/curves.png``; with ``--export DIR`` the best checkpoint of every model (by validation loss;
the last one for models trained on a distilled corpus) without optimizer state, as ``DIR/<name>/checkpoint_best.pt`` (a folder the benchmark reads).
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from fairseq_plugins.evaluation import train_log
from fairseq_plugins.evaluation.corpus import Corpus
from scripts.benchmark import FairseqRunner

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_plugins"


def read_models(path, names=None):
    models = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, config, corpus, *extra = line.split()
        scale = [float(w.split("=", 1)[1]) for w in extra if w.startswith("updates=")]  # as train_models.sh
        extra = [w for w in extra if not w.startswith("updates=")]
        models.append({"name": name, "config": config, "corpus": corpus, "extra": extra,
                       "update_scale": scale[-1] if scale else 1.0})
    if names:
        known = {m["name"] for m in models}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"error: {', '.join(unknown)} not in {path} (known: {', '.join(sorted(known))})")
        models = [m for m in models if m["name"] in names]
    return models


def config_args(config, ckpt_root, data_root):
    text = " ".join(line.split("#", 1)[0] for line in (REPO / config).read_text().splitlines())
    text = text.replace("{CKPT}", str(ckpt_root)).replace("{DATA}", str(data_root))
    return shlex.split(text)


def cuda_available():
    import torch

    return torch.cuda.is_available()


def train_command(model, args, gpu):
    save = Path(args.out) / "checkpoints" / model["name"]
    ckpt_root, data_root = Path(args.out) / "checkpoints", Path(args.data).resolve()
    extra = [w.replace("{CKPT}", str(ckpt_root)).replace("{DATA}", str(data_root)) for w in model["extra"]]
    max_update = max(1, round(args.max_update * model.get("update_scale", 1.0)))
    cmd = [sys.executable, "-m", "fairseq_cli.train", str(Path(args.data) / model["corpus"] / "bin"),
           "--user-dir", str(PLUGIN_DIR)] + config_args(model["config"], Path(args.out) / "checkpoints", args.data)
    cmd += ["--save-dir", str(save), "--max-update", str(max_update), "--save-interval-updates", str(args.interval),
            "--validate-interval-updates", str(args.interval), "--keep-interval-updates", "-1",
            "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "100", "--num-workers", "0",
            "--seed", str(args.seed)]
    if args.stop_minutes:
        cmd += ["--stop-time-hours", f"{args.stop_minutes / 60:.4f}"]
    cmd += ["--fp16"] if gpu else ["--cpu"]
    return cmd + extra + args.train_args


def run_parallel(jobs, parallel, label):
    """jobs: list of (name, cmd, log path). Runs up to ``parallel`` at once; returns {name: exit code}."""
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    pending, running, codes, start = list(jobs), {}, {}, time.time()
    while pending or running:
        while pending and len(running) < parallel:
            name, cmd, log = pending.pop(0)
            log.parent.mkdir(parents=True, exist_ok=True)
            running[name] = (subprocess.Popen(cmd, stdout=open(log, "a"), stderr=subprocess.STDOUT, env=env), log)
            print(f"[{label} {time.time() - start:6.0f}s] started {name}", flush=True)
        time.sleep(5)
        for name, (proc, log) in list(running.items()):
            if proc.poll() is not None:
                codes[name] = proc.returncode
                del running[name]
                status = "done" if proc.returncode == 0 else f"FAILED ({proc.returncode}); see {log}"
                print(f"[{label} {time.time() - start:6.0f}s] {name} {status} {progress(log)}", flush=True)
        if running and int(time.time() - start) % 60 < 5:
            print(f"[{label} {time.time() - start:6.0f}s] " + "  ".join(f"{n}: {progress(log)}" for n, (_, log) in
                                                                     running.items()), flush=True)
    return codes


def progress(log):
    updates = train_log.updates(log)
    return f"{updates} updates" if updates is not None else ""


def interval_checkpoints(folder):
    found = []
    for p in Path(folder).glob("checkpoint_*_*.pt"):
        m = re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def curve(args):
    """Subcommand: BLEU of every interval checkpoint of one model (run in its own process)."""
    import torch

    torch.set_num_threads(1)
    gpu = cuda_available()
    corpus = Corpus(Path(args.data) / args.corpus, subset=args.curve_subset)
    folder = Path(args.out) / "checkpoints" / args.name
    losses = train_log.valid_losses(Path(args.out) / args.name / "train.log")
    points = []
    for updates, ckpt in interval_checkpoints(folder):
        runner = FairseqRunner(corpus, ckpt, "--task fast_translation --lenpen 0.6", args.curve_beam, 128,
                               "cuda" if gpu else "cpu", gpu, 1, max_len=(1.2, 10))
        tokens = runner.decode(runner.batches)
        ids = sorted(tokens)
        quality = corpus.bleu([runner.text(tokens[i], corpus) for i in ids], ids)
        bleu, signature = quality["bleu"], quality["signature"]
        points.append({"updates": updates, "valid_loss": losses.get(updates), "bleu": bleu, "bp": quality["bp"]})
        print(f"{args.name} {updates} updates: valid loss {losses.get(updates)}  BLEU {bleu}", flush=True)
        del runner
    result = {"name": args.name, "subset": args.curve_subset, "beam": args.curve_beam, "sentences": len(ids) if points else 0,
              "sacrebleu_signature": signature if points else None, "points": points}
    (Path(args.out) / args.name / "curve.json").write_text(json.dumps(result, indent=1))


def export(models, out, dest, data):
    """checkpoint_best.pt of every model without optimizer state (what decoding needs); for a model
    trained on a distilled corpus (``distill.json`` in it) the last checkpoint, since the gold
    validation loss does not rank what it learns (as scripts/train_models.sh)."""
    import torch

    for m in models:
        distilled = (Path(data) / m["corpus"] / "distill.json").exists()
        src = Path(out) / "checkpoints" / m["name"] / ("checkpoint_last.pt" if distilled else "checkpoint_best.pt")
        if not src.exists():
            continue
        state = torch.load(src, map_location="cpu", weights_only=False)
        state["last_optimizer_state"] = None
        state.pop("extra_state", None)
        target = Path(dest) / m["name"] / "checkpoint_best.pt"
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, target)


def plot(summary, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, c in summary.items():
        pts = [p for p in c["points"] if p["bleu"] is not None]
        a.plot([p["updates"] for p in pts], [p["bleu"] for p in pts], marker="o", ms=3, label=name)
        pts = [p for p in c["points"] if p["valid_loss"] is not None]
        b.plot([p["updates"] for p in pts], [p["valid_loss"] for p in pts], marker="o", ms=3, label=name)
    a.set(xlabel="updates", ylabel="sacreBLEU (validation set)", title="BLEU during training")
    b.set(xlabel="updates", ylabel="validation loss (label-smoothed, base 2)", title="validation loss")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=str(REPO / "configs/reference/orders.txt"))
    ap.add_argument("--data", required=True, help="data root holding the corpora named in the list")
    ap.add_argument("--out", required=True)
    ap.add_argument("--names", nargs="*", help="only these models of the list")
    ap.add_argument("--max-update", type=int, default=8000)
    ap.add_argument("--stop-minutes", type=float, default=0, help="stop every training after this wall time")
    ap.add_argument("--interval", type=int, default=500, help="save, validate and score every N updates")
    ap.add_argument("--parallel", type=int, default=2, help="trainings at once (2 on a 2-core CPU machine)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--curve-subset", default="valid")
    ap.add_argument("--curve-beam", type=int, default=4)
    ap.add_argument("--skip-training", action="store_true", help="only the curves of trained models")
    ap.add_argument("--export", help="write checkpoint_best.pt of every model, without optimizer state, here")
    ap.add_argument("--curve", action="store_true", help=argparse.SUPPRESS)  # internal: one model's curve
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("train_args", nargs="*", help="extra fairseq-train arguments for every model (after --)")
    args = ap.parse_args(argv)
    if args.curve:
        return curve(args)
    models = read_models(args.models, args.names)
    out = Path(args.out)
    gpu = cuda_available()
    print(f"[reference] {len(models)} models on {'GPU (fp16)' if gpu else 'CPU (fp32)'}, up to {args.max_update} "
          f"updates, curves every {args.interval}", flush=True)
    if not args.skip_training:
        codes = run_parallel([(m["name"], train_command(m, args, gpu), out / m["name"] / "train.log") for m in models],
                             args.parallel, "train")
        failed = [n for n, c in codes.items() if c != 0]
        if failed:
            raise SystemExit(f"error: training failed for {', '.join(failed)}")
    curve_jobs = [(m["name"], [sys.executable, "-m", "scripts.reference_run", "--curve", "--name", m["name"], "--corpus", m["corpus"],
                               "--data", args.data, "--out", args.out, "--curve-subset", args.curve_subset,
                               "--curve-beam", str(args.curve_beam)], out / m["name"] / "curve.log") for m in models]
    run_parallel(curve_jobs, max(args.parallel, 1), "curve")
    summary = {}
    for m in models:
        path = out / m["name"] / "curve.json"
        if path.exists():
            summary[m["name"]] = json.loads(path.read_text())
            summary[m["name"]]["train_seconds"] = train_log.wall_seconds(out / m["name"] / "train.log")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(summary, out / "curves.png")
    if args.export:
        export(models, out, args.export, args.data)
    for name, c in summary.items():
        best = max((p for p in c["points"] if p["bleu"] is not None), key=lambda p: p["bleu"], default=None)
        last = c["points"][-1] if c["points"] else None
        print(f"{name:20s} last {last and last['updates']} updates BLEU {last and last['bleu']}  best BLEU "
              f"{best and best['bleu']} at {best and best['updates']}  ({c['train_seconds']} s training)")


if __name__ == "__main__":
    main()
