#!/usr/bin/env python
"""How much a copy-like corpus's targets differ from its sources (issue "lossless drafting that
pays": the typo-correction verifier's corpus beside GEC's): sacreBLEU's BLEU and TER of copying
the source, the share of sentences left unchanged, and the IAD paper's per-sentence *edit ratio*
(Ge et al. §4, Fig. 5: edit distance normalised by the input length), here sacreBLEU's TER edits
(a shift counts as one edit) over the input's words.

    python -m scripts.corpus_edits --src data/typo-en/test.typo --ref data/typo-en/test.en
    python -m scripts.corpus_edits --pair typo-en data/typo-en/test.typo data/typo-en/test.en \
        --pair gec-en data/gec-en/test.gec data/gec-en/test.en      # side by side, one column a corpus
"""
import argparse
import statistics
import sys

from sacrebleu.metrics import BLEU, TER
from tabulate import tabulate


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def edit_ratios(sources, references):
    """Per sentence: TER edits turning the source into the reference, over the source's words."""
    ter = TER()
    ratios = []
    for src, ref in zip(sources, references):
        edits = ter.sentence_score(src, [ref]).score / 100 * max(len(ref.split()), 1)
        ratios.append(edits / max(len(src.split()), 1))
    return ratios


def summary(sources, references):
    if len(sources) != len(references):
        raise SystemExit(f"corpus_edits: {len(sources)} source lines but {len(references)} references; "
                         "give the two sides of one split")
    ratios = edit_ratios(sources, references)
    return {
        "sentences": len(sources),
        "copy_bleu": round(BLEU().corpus_score(sources, [references]).score, 2),
        "copy_ter": round(TER().corpus_score(sources, [references]).score, 2),
        "unchanged": round(sum(s == r for s, r in zip(sources, references)) / len(sources), 4),
        "edit_ratio_mean": round(statistics.fmean(ratios), 4),
        "edit_ratio_median": round(statistics.median(ratios), 4),
        "words_per_source": round(statistics.fmean(len(s.split()) for s in sources), 2),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", help="raw source side (one sentence per line)")
    ap.add_argument("--ref", help="raw target side, line-aligned with --src")
    ap.add_argument("--pair", nargs=3, action="append", default=[], metavar=("NAME", "SRC", "REF"),
                    help="a named corpus split (repeatable): the corpora side by side, one column each")
    args = ap.parse_args(argv)
    if bool(args.src) != bool(args.ref):
        ap.error("give --src and --ref together (or --pair NAME SRC REF)")
    pairs = args.pair + ([["", args.src, args.ref]] if args.src else [])
    if not pairs:
        ap.error("give --src SRC --ref REF, or one --pair NAME SRC REF per corpus")
    if len(pairs) == 1:
        for key, value in summary(read_lines(pairs[0][1]), read_lines(pairs[0][2])).items():
            print(f"{key}\t{value}")
        return
    columns = {name: summary(read_lines(src), read_lines(ref)) for name, src, ref in pairs}
    keys = list(next(iter(columns.values())))
    rows = [[key] + [str(col[key]) for col in columns.values()] for key in keys]
    print(tabulate(rows, headers=[""] + list(columns), tablefmt="pipe", disable_numparse=True))


if __name__ == "__main__":
    sys.exit(main())
