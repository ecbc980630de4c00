#!/usr/bin/env python
"""Average the parameters of several fairseq checkpoints into one (Vaswani et al. 2017; every paper
table here evaluates an averaged model: IBDecoder the last 5, GAD the last 10, Imamura & Sumita
the 10 best).

fairseq ships this as ``scripts/average_checkpoints.py`` in its git repository, but the installed
package (fairseq-fixed on PyPI) does not contain its ``scripts/`` folder, so this is the same
command line on fairseq's own checkpoint functions (``checkpoint_utils.checkpoint_paths`` picks the
files by fairseq's naming, ``torch_persistent_save`` writes the result; files are read with
the plugin's safe loader, ``compat.load_checkpoint``: a file that would run code when unpickled is
refused, and the output stays loadable by it).  The output is an ordinary checkpoint: the newest input's ``cfg``, ``extra_state``
and optimizer history, with the element-wise mean of every model tensor (accumulated in float64
for floating tensors, then cast back to the input dtype; integer buffers are taken from the newest).

    python -m scripts.average_checkpoints --inputs CKPT_DIR --num-update-checkpoints 5 --output avg.pt
    python -m scripts.average_checkpoints --inputs CKPT_DIR --num-epoch-checkpoints 10 --output avg.pt
    python -m scripts.average_checkpoints --inputs CKPT_DIR --best 10 --output avg.pt   # checkpoint.best_*
    python -m scripts.average_checkpoints --inputs a.pt b.pt c.pt --output avg.pt
"""
import argparse
import collections
import os
from pathlib import Path


class AverageError(SystemExit):
    def __init__(self, message):
        super().__init__(f"error: {message}")


def select(folder, num_update=0, num_epoch=0, best=0, upper_bound=None, metric="loss", maximize=False):
    """The checkpoint files of ``folder`` to average, newest (or best) first."""
    from fairseq.checkpoint_utils import checkpoint_paths

    if sum(bool(x) for x in (num_update, num_epoch, best)) != 1:
        raise AverageError("with a folder, give exactly one of --num-update-checkpoints, --num-epoch-checkpoints, --best")
    if num_update:
        found = checkpoint_paths(folder, pattern=r"checkpoint_\d+_(\d+)\.pt", keep_match=True)
        wanted, what = num_update, "update checkpoints (checkpoint_EPOCH_UPDATE.pt: --save-interval-updates)"
    elif num_epoch:
        found = checkpoint_paths(folder, pattern=r"checkpoint(\d+)\.pt", keep_match=True)
        wanted, what = num_epoch, "epoch checkpoints (checkpointN.pt: drop --no-epoch-checkpoints)"
    else:
        found = checkpoint_paths(folder, pattern=rf"checkpoint\.best_{metric}_(\d+\.?\d*)\.pt", keep_match=True)
        found = found if maximize else found[::-1]  # checkpoint_paths sorts descending; best loss = lowest
        wanted, what = best, f"best checkpoints (checkpoint.best_{metric}_*.pt: --keep-best-checkpoints)"
    if upper_bound is not None and not best:
        found = [(p, n) for p, n in found if n <= upper_bound]
    if len(found) < wanted:
        raise AverageError(f"{folder} has {len(found)} {what}, {wanted} wanted: train longer or average fewer")
    return [p for p, _ in found[:wanted]]


def average(paths):
    """(state of the first path with its model replaced by the mean of all paths' models)."""
    import torch

    from fairseq_plugins.compat import load_checkpoint

    newest, sums, keys = None, collections.OrderedDict(), None
    for path in paths:
        state = load_checkpoint(path)
        model = state["model"]
        if keys is None:
            newest, keys = state, list(model.keys())
        elif list(model.keys()) != keys:
            raise AverageError(f"{path} holds other parameters than {paths[0]}: checkpoints of different models")
        for k, v in model.items():
            if not torch.is_floating_point(v):
                continue  # integer buffers (e.g. version counters): the newest checkpoint's value
            acc = v.double()
            if k in sums:
                if sums[k].shape != acc.shape:
                    raise AverageError(f"{path}: {k} has shape {tuple(acc.shape)}, {paths[0]} {tuple(sums[k].shape)}")
                sums[k] += acc
            else:
                sums[k] = acc.clone()
    for k, total in sums.items():
        newest["model"][k] = (total / len(paths)).to(newest["model"][k].dtype)
    return newest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", nargs="+", required=True, help="checkpoint files, or one folder of checkpoints")
    ap.add_argument("--output", required=True)
    ap.add_argument("--num-update-checkpoints", type=int, default=0, help="the last N checkpoint_E_U.pt of the folder")
    ap.add_argument("--num-epoch-checkpoints", type=int, default=0, help="the last N checkpointE.pt of the folder")
    ap.add_argument("--best", type=int, default=0, help="the N best checkpoint.best_METRIC_*.pt of the folder")
    ap.add_argument("--checkpoint-upper-bound", type=int, help="ignore checkpoints after this epoch/update")
    ap.add_argument("--best-checkpoint-metric", default="loss")
    ap.add_argument("--maximize-best-checkpoint-metric", action="store_true")
    args = ap.parse_args(argv)

    import fairseq_plugins  # noqa: F401  (torch >= 2.6 loads fairseq checkpoints only with compat)

    if len(args.inputs) == 1 and Path(args.inputs[0]).is_dir():
        paths = select(args.inputs[0], args.num_update_checkpoints, args.num_epoch_checkpoints, args.best,
                       args.checkpoint_upper_bound, args.best_checkpoint_metric, args.maximize_best_checkpoint_metric)
    else:
        paths = args.inputs
        missing = [p for p in paths if not Path(p).is_file()]
        if missing:
            raise AverageError(f"not a checkpoint file: {', '.join(missing)}")
    print(f"[average] {len(paths)} checkpoints: {', '.join(Path(p).name for p in paths)}", flush=True)
    state = average(paths)
    from fairseq.checkpoint_utils import torch_persistent_save

    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        torch_persistent_save(state, str(tmp))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"[average] wrote {out}", flush=True)


if __name__ == "__main__":
    main()
