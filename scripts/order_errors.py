#!/usr/bin/env python
"""Repeats, drops and where they stand, from fairseq-generate outputs (docs/RESULTS.md,
"reordered models at convergence"; counts: scripts/lab/analysis/order_errors.py).

Each FILE is what ``fairseq-generate ... > FILE`` printed (its ``H-`` hypotheses and ``T-``
references, subword tokens, natural order): one row per file, so an order sits beside the L2R
model decoded on the same sentences::

    fairseq-generate DATA/bin --user-dir fairseq_plugins --task fast_translation --path l2r.pt --beam 4 > l2r.txt
    fairseq-generate DATA/bin --user-dir fairseq_plugins --task fast_translation --path ib.pt --beam 4 > ib.txt
    python -m scripts.order_errors l2r.txt ib.txt [--bins 10]
"""
import argparse
from pathlib import Path

from tabulate import tabulate

from scripts.lab.analysis.order_errors import count_errors


def read_generate_output(path):
    """(hypotheses, references) as token lists, by sentence id: the best hypothesis of each."""
    hyps, refs = {}, {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        tag, _, rest = line.partition("\t")
        if tag.startswith("H-"):
            sid = int(tag[2:])
            if sid not in hyps:  # fairseq prints the nbest in rank order
                hyps[sid] = rest.split("\t", 1)[1].split() if "\t" in rest else []
        elif tag.startswith("T-"):
            refs[int(tag[2:])] = rest.split()
    if not hyps or set(hyps) != set(refs):
        raise SystemExit(f"{path}: expected fairseq-generate output with an H- and a T- line per sentence "
                         f"(found {len(hyps)} hypotheses, {len(refs)} references); do not pass --quiet")
    ids = sorted(hyps)
    return [hyps[i] for i in ids], [refs[i] for i in ids]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="fairseq-generate outputs, one per model")
    ap.add_argument("--bins", type=int, default=10, help="bins of the position histograms")
    args = ap.parse_args(argv)
    rows = []
    for path in args.files:
        s = count_errors(*read_generate_output(path), bins=args.bins).summary()
        rows.append([Path(path).stem, s["sentences"], f"{s['length_ratio']:.3f}", f"{s['repeats_per_100']:.2f}",
                     f"{s['drops_per_100']:.2f}", f"{s['missing_per_100']:.2f}", f"{s['extra_per_100']:.2f}",
                     " ".join(str(n) for n in s["repeat_position"]), " ".join(str(n) for n in s["drop_position"])])
    print(tabulate(rows, headers=["model", "sentences", "length ratio", "repeats /100 ref", "drops /100",
                                  "missing /100", "extra /100", f"repeats by position ({args.bins} bins)",
                                  f"drops by position ({args.bins} bins)"],
                   tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
