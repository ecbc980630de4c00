#!/usr/bin/env python
"""How much a copy-like corpus's targets differ from its sources (issue "lossless drafting that
pays": the typo-correction verifier's corpus beside GEC's): sacreBLEU's BLEU and TER of copying
the source, the share of sentences left unchanged, and the IAD paper's per-sentence *edit ratio*
(Ge et al. §4, Fig. 5: edit distance normalised by the input length), here sacreBLEU's TER edits
(a shift counts as one edit) over the input's words.

    python -m scripts.corpus_edits --src data/typo-en/test.typo --ref data/typo-en/test.en
"""
import argparse
import statistics
import sys

from sacrebleu.metrics import BLEU, TER


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
    ap.add_argument("--src", required=True, help="raw source side (one sentence per line)")
    ap.add_argument("--ref", required=True, help="raw target side, line-aligned with --src")
    args = ap.parse_args(argv)
    for key, value in summary(read_lines(args.src), read_lines(args.ref)).items():
        print(f"{key}\t{value}")


if __name__ == "__main__":
    sys.exit(main())
