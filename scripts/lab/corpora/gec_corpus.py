"""The GEC-like corpus ``gec-en`` (``python -m scripts.build_gec_corpus``): the standard library's prose
sentences (:mod:`.stdlib_prose`), split by a hash of the correct sentence, each corrupted (:mod:`.gec_errors`;
the training split ``--train-copies`` times), the raw splits' sha256 that models/MANIFEST.json records, then
joint sentencepiece and ``fairseq-preprocess`` (:mod:`.offline_corpus`)."""
import hashlib
import sys
from pathlib import Path

from scripts.lab.corpora.files import write_lines
from scripts.lab.corpora.gec_errors import corrupt
from scripts.lab.corpora.offline_corpus import segment_and_binarize, write_raw_splits
from scripts.lab.corpora.stdlib_prose import prose_sentences, stdlib_texts

LANGS = ("gec", "en")


def corpus_sha256(out, splits=("train", "valid", "test")):
    """sha256 over the raw splits' files, in a fixed order (what the manifest records)."""
    h = hashlib.sha256()
    for split in splits:
        for lang in LANGS:
            h.update((Path(out) / f"{split}.{lang}").read_bytes())
    return h.hexdigest()



def build_pairs(sentences, args):
    """{split: [(source, target), ...]} with the split made on the correct sentences."""
    ordered = sorted(sentences, key=lambda s: hashlib.sha1(s.encode("utf-8")).hexdigest())
    need = args.test_size + args.valid_size + 1
    if len(ordered) < need:
        raise SystemExit(f"error: only {len(ordered)} sentences of {args.min_words}-{args.max_words} words; "
                         f"need more than {need - 1}: lower --test-size / --valid-size or --min-words")
    parts = {"test": ordered[:args.test_size],
             "valid": ordered[args.test_size:args.test_size + args.valid_size],
             "train": ordered[args.test_size + args.valid_size:]}
    splits = {}
    for name, rows in parts.items():
        copies = args.train_copies if name == "train" else 1
        pairs = {(corrupt(s, args.seed, c, args.correct_share, args.edit_rate)[0], s) for s in rows for c in range(copies)}
        splits[name] = sorted(pairs)
    return splits


def build(args):
    """The corpus of ``python -m scripts.build_gec_corpus``'s arguments in ``args.out``; returns each split's size."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sentences = prose_sentences(stdlib_texts(args.stdlib), args.min_words, args.max_words)
    splits = build_pairs(sentences, args)
    write_raw_splits(out, splits, LANGS)
    digest = corpus_sha256(out)
    write_lines(out / "corpus.sha256", [f"{digest}  python {sys.version_info.major}.{sys.version_info.minor}"])
    changed = sum(1 for s, t in splits["test"] if s != t)
    print(f"[gec] {len(sentences)} sentences -> train {len(splits['train'])} pairs, valid {len(splits['valid'])}, "
          f"test {len(splits['test'])} ({changed} with errors); sha256 {digest}", flush=True)
    return segment_and_binarize(out, splits, LANGS, args.vocab_size, args.workers, not args.no_binarize, "gec")
