#!/usr/bin/env python
"""Build ``gec-en``: an English -> English grammatical-error-correction-like corpus, offline.

Input-guided aggressive decoding (Ge et al., §3.1) was made for GEC, where sentences run to 20-40
tokens and 0-10% of the tokens are edited, so most of the output is a copy of the input.  The
typo-en corpus (``build_typo_corpus.py``) has 5-word messages with 15% of the words misspelt; this
one is closer to GEC:

* **Text**: English prose every Python 3.11 machine has offline, Python's standard library: its
  docstrings, its comments and the documentation topics of ``pydoc_data``; paragraphs split into
  sentences of ``--min-words``..``--max-words`` words (12-50: mean about 19), code-like lines left out.
* **Errors at GEC's rates**: a share of sentences (``--correct-share``, 0.25) is left correct, as in
  GEC data; in the others each word is edited with probability ``--edit-rate`` (0.12), which makes
  about 7% of all tokens edited.  The edits are GEC's common kinds: a misspelling (one character
  swapped, dropped, doubled or replaced by a keyboard neighbour), a dropped word, a doubled word, an
  agreement-like suffix change (``-s``, ``-ed``, ``-ing``), two neighbours swapped, and a confused
  article or preposition.
* **Deterministic**: every draw is seeded by ``--seed``, the copy number and the sentence itself;
  the split is by a hash of the correct sentence, so a sentence is in one split only.  The training
  split has ``--train-copies`` corruptions of each sentence (synthetic GEC data's usual
  augmentation); valid and test one each.  ``corpus.sha256`` is the hash of the raw splits, which
  ``models/MANIFEST.json`` records; a Python other than 3.11 has other docstrings and another hash.

Source = corrupted text (language code ``gec``), target = the correct sentence (``en``).  Layout as
``build_message_corpus.py``: raw splits, joint sentencepiece, ``fairseq-preprocess`` into ``bin/``.

    python -m scripts.build_gec_corpus --out data/gec-en
"""
import argparse

from scripts.lab.corpora.gec_corpus import build


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stdlib", help="a Python standard library folder (default: this Python's)")
    ap.add_argument("--min-words", type=int, default=12)
    ap.add_argument("--max-words", type=int, default=50)
    ap.add_argument("--correct-share", type=float, default=0.25, help="sentences left correct")
    ap.add_argument("--edit-rate", type=float, default=0.12, help="per word, in a sentence with errors")
    ap.add_argument("--train-copies", type=int, default=6, help="corruptions of each training sentence")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--test-size", type=int, default=1000)
    ap.add_argument("--valid-size", type=int, default=500)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-binarize", action="store_true")
    args = ap.parse_args(argv)
    for name in ("correct_share", "edit_rate"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            ap.error(f"--{name.replace('_', '-')} must be within [0, 1]")
    if not 1 <= args.min_words <= args.max_words:
        ap.error("--min-words must be at least 1 and at most --max-words")
    if args.train_copies < 1:
        ap.error("--train-copies must be at least 1")
    return build(args)


if __name__ == "__main__":
    main()
