#!/usr/bin/env python
"""Build an English -> English typo-correction corpus for input-guided aggressive decoding (IAD).

IAD (Ge et al., "Lossless Acceleration ... Aggressive Decoding" §3.1) pays off when the output
is mostly a copy of the input, as in grammatical error correction.  Offline, we make such a task
from real English text: the English side of the system's message catalogs (the ``msgid``s, via
``build_message_corpus.py``) or any text file (``--from-text``, e.g. a built corpus' train.en),
corrupted deterministically:

* per word, with probability ``--typo-rate``: one character edit (swap two neighbours, delete,
  duplicate, or replace by a keyboard neighbour);
* per word, with probability ``--drop-rate``: the word is dropped (never all words);

seeded by ``--seed`` and the sentence itself, so the corpus is identical on every machine.  Source
= corrupted text (language code ``typo``), target = the original (``en``).  Layout as
``build_message_corpus.py``: raw splits, sentencepiece (joint), ``fairseq-preprocess`` into bin/.

    python -m scripts.build_typo_corpus --out data/typo-en
    python -m scripts.build_typo_corpus --out data/typo-en --from-text data/en-de/train.en
"""
import argparse
import hashlib
import random
from pathlib import Path

from scripts.lab.corpora.message_catalogs import extract_pairs, keep_message, normalise
from scripts.lab.corpora.offline_corpus import segment_and_binarize, split, write_raw_splits
from scripts.lab.corpora.typos import typo

LANGS = ("typo", "en")


def corrupt(sentence, typo_rate, drop_rate, seed):
    rng = random.Random(hashlib.sha1(f"{seed}\t{sentence}".encode("utf-8")).hexdigest())
    words = sentence.split(" ")
    out = []
    for w in words:
        if len(words) > 1 and rng.random() < drop_rate:
            continue
        out.append(typo(w, rng) if rng.random() < typo_rate else w)
    return " ".join(out) if out else sentence


def english_sentences(args):
    if args.from_text:
        with open(args.from_text, encoding="utf-8") as f:
            lines = [normalise(line) for line in f]
        return sorted({line for line in lines if line and keep_message(line)})
    pairs, _ = extract_pairs(args.locale_dir, "en-de", args.max_words)
    return sorted({src for src, _ in pairs})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--from-text", help="English text, one sentence a line (default: message catalogs)")
    ap.add_argument("--locale-dir", default="/usr/share/locale")
    ap.add_argument("--typo-rate", type=float, default=0.15)
    ap.add_argument("--drop-rate", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--test-size", type=int, default=1000)
    ap.add_argument("--valid-size", type=int, default=500)
    ap.add_argument("--max-words", type=int, default=80)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-binarize", action="store_true")
    args = ap.parse_args(argv)
    for name in ("typo_rate", "drop_rate"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            ap.error(f"--{name.replace('_', '-')} must be within [0, 1]")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sentences = english_sentences(args)
    pairs = [(corrupt(s, args.typo_rate, args.drop_rate, args.seed), s) for s in sentences]
    pairs = sorted({p for p in pairs})
    splits = split(pairs, args.test_size, args.valid_size)
    write_raw_splits(out, splits, LANGS)
    changed = sum(1 for s, t in pairs if s != t)
    print(f"[typo] {len(pairs)} pairs ({changed} corrupted) -> train {len(splits['train'])}, valid "
          f"{len(splits['valid'])}, test {len(splits['test'])}", flush=True)
    return segment_and_binarize(out, splits, LANGS, args.vocab_size, args.workers, not args.no_binarize, "typo")

if __name__ == "__main__":
    main()
