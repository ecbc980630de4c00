#!/usr/bin/env python
"""Teacher-forced accuracy of checkpoints by direction and by slot of a step (docs/RESULTS.md, the
orders at convergence; the measure: scripts/lab/analysis/slot_accuracy.py): which half of a
bidirectional order lags, and whether the lag closes as training goes on::

    python -m scripts.slot_accuracy RUNS/ref/checkpoints/ibdecoder/checkpoint_*_*.pt \\
        models/l2r_kd/checkpoint_best.pt --data models/data/en-de-distilled [--subset valid]
    python -m scripts.slot_accuracy CKPT... --data RUNS/data/en-de-distilled --subset train --sentences 1000
    python -m scripts.slot_accuracy SA_CKPT... --data models/data/en-de --hide-later-slots

One row per checkpoint, in update order: each reads its own order flags from its saved config.
"""
import argparse
from pathlib import Path

from tabulate import tabulate

from scripts.lab.analysis.slot_accuracy import checkpoint_slot_accuracy


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--data", required=True, help="a corpus folder (with bin/) or its bin/")
    ap.add_argument("--subset", default="valid")
    ap.add_argument("--sentences", type=int, help="only the first N sentences of the subset (by id): a sample "
                    "of a large split, such as how well a model fits its own training sentences")
    ap.add_argument("--hide-later-slots", action="store_true", help="orders with 2+ words per direction a step: "
                    "the first word of each direction does not see the step's later slots, whose inputs hold the "
                    "word just before it; the drop in its accuracy is how much it uses that word")
    ap.add_argument("--gpu", action="store_true", help="evaluate on the GPU when there is one")
    args = ap.parse_args(argv)
    data = Path(args.data)
    data_bin = data / "bin" if (data / "bin").is_dir() else data
    for path in args.checkpoints:
        if not Path(path).is_file():
            raise SystemExit(f"error: {path} is not a checkpoint file")
    rows = []
    for path in args.checkpoints:
        try:
            updates, r = checkpoint_slot_accuracy(path, data_bin, args.subset, cpu=not args.gpu,
                                                     sentences=args.sentences, hide_later_slots=args.hide_later_slots)
        except ValueError as e:
            raise SystemExit(f"error: {e}")
        rows.append((updates if updates is not None else -1, [
            str(path), "–" if updates is None else f"{updates:,}",
            r["order"] + (", later slots hidden" if args.hide_later_slots else ""), f"{r['accuracy']:.4f}",
            " / ".join(f"{v:.4f}" for v in r["by_direction"].values()),
            " / ".join(f"{v:.4f}" for v in r["by_slot"].values()),
            f"{r['first_step']:.4f}", "–" if r["later_steps"] is None else f"{r['later_steps']:.4f}"]))
    rows.sort(key=lambda x: x[0])
    print(tabulate([r for _, r in rows], headers=["checkpoint", "updates", "order", "accuracy", "by direction (0 = L2R)",
                                                   "by slot of a step", "first step", "later steps"],
                   tablefmt="pipe", disable_numparse=True))


if __name__ == "__main__":
    main()
