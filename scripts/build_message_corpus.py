#!/usr/bin/env python
"""Build the offline parallel corpora from the system's translated message catalogs (docs/METHODS.md §5).

Every Linux system ships human-translated gettext catalogs under
``/usr/share/locale/<lang>/LC_MESSAGES/<domain>.mo``.  The same English ``msgid`` translated
into two languages gives a real (if short-sentence) parallel corpus that needs no internet:

* ``en-de``          English -> German (the main MT pair of the demo)
* ``ja-en``          Japanese -> English
* ``pt_PT-pt_BR``    European -> Brazilian Portuguese translations of the same English message:
                     a real "output is similar to the input" task for input-guided decoding.

Pipeline: extract -> normalise -> filter (multi-line, placeholder-only, untranslated, length)
-> deduplicate -> deterministic split by a hash of the source -> sentencepiece (joint; subword-nmt
BPE as an option) -> ``fairseq-preprocess`` with a joined dictionary.

Usage::

    python -m scripts.build_message_corpus --pair en-de --out data/en-de
"""
import argparse

from scripts.lab.corpora.message_catalogs import PAIRS, build


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="en-de")
    ap.add_argument("--out", required=True, help="output folder (raw splits, subword model, bin/)")
    ap.add_argument("--locale-dir", default="/usr/share/locale")
    ap.add_argument("--test-size", type=int, default=1000)
    ap.add_argument("--valid-size", type=int, default=500)
    ap.add_argument("--max-words", type=int, default=80)
    ap.add_argument("--subword", choices=["sentencepiece", "subword-nmt"], default="sentencepiece")
    ap.add_argument("--vocab-size", type=int, default=8000, help="sentencepiece vocabulary (joint)")
    ap.add_argument("--bpe-merges", type=int, default=8000, help="subword-nmt merge operations")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-binarize", action="store_true")
    args = ap.parse_args(argv)
    return build(args)


if __name__ == "__main__":
    main()
