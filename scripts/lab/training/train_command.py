"""The fairseq-train command of one model of a reference run (its config, its list line's extra words,
the run's interval and seed; ``--fp16`` on a GPU, ``--cpu`` otherwise), the checkpoints it reads that do not
exist yet, and its portable form for the manifest of ``models/``."""
import argparse
import shlex
import sys
from pathlib import Path

from scripts.lab.training.checkpoints import trained_seconds
from scripts.lab.training.model_list import REPO, config_args, max_update_of

PLUGIN_DIR = REPO / "fairseq_plugins"


def cuda_available():
    import torch

    return torch.cuda.is_available()


def train_command(model, args, gpu):
    save = Path(args.out) / "checkpoints" / model["name"]
    ckpt_root, data_root = Path(args.out) / "checkpoints", Path(args.data).resolve()
    extra = [w.replace("{CKPT}", str(ckpt_root)).replace("{DATA}", str(data_root)) for w in model["extra"]]
    max_update = max_update_of(model, args)
    cmd = [sys.executable, "-m", "fairseq_cli.train", str(Path(args.data) / model["corpus"] / "bin"),
           "--user-dir", str(PLUGIN_DIR)] + config_args(model["config"], Path(args.out) / "checkpoints", args.data,
                                                                  model["baseline"])
    cmd += ["--save-dir", str(save), "--max-update", str(max_update), "--save-interval-updates", str(args.interval),
            "--validate-interval-updates", str(args.interval), "--keep-interval-updates", "-1",
            "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "100", "--num-workers", "0",
            "--seed", str(args.seed)]
    if args.stop_minutes:
        cmd += ["--stop-time-hours", f"{args.stop_minutes / 60:.4f}"]
    cmd += ["--fp16"] if gpu else ["--cpu"]
    return cmd + extra + args.train_args


def counted_from(args, checkpoint):
    """``args`` with ``--stop-minutes`` counted from ``checkpoint`` (where the training resumes; None: a fresh
    start): fairseq's ``--stop-time-hours`` is compared with the training time the checkpoint saved, so a
    training resumed past it would stop at once instead of training ``--stop-minutes`` more."""
    if not getattr(args, "stop_minutes", 0) or checkpoint is None:
        return args
    return argparse.Namespace(**dict(vars(args), stop_minutes=args.stop_minutes + trained_seconds(checkpoint) / 60))


def missing_inputs(cmd, ckpt_root):
    """The checkpoints under ``ckpt_root`` (``{CKPT}``) that training command ``cmd`` reads and that do not
    exist yet (a role not frozen yet: the verifier of the drafters, while stage 1 trains on)."""
    root = str(ckpt_root)
    return [w for w in map(str, cmd) if w.startswith(root) and w.endswith(".pt") and not Path(w).exists()]


def portable_command(train, args):
    """The fairseq-train command of ``train`` with this machine's folders as DATA, RUNS and fairseq_plugins."""
    folders = {str(Path(args.data).resolve()): "DATA", str(Path(args.data)): "DATA", str(Path(args.out)): "RUNS",
               str(PLUGIN_DIR): "fairseq_plugins"}
    words = []
    for word in ["fairseq-train"] + train[train.index("fairseq_cli.train") + 1:]:
        for folder, name in sorted(folders.items(), key=lambda f: -len(f[0])):
            word = word.replace(folder, name)
        words.append(word)
    return shlex.join(words)
