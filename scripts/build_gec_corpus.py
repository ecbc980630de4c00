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
import ast
import hashlib
import io
import random
import re
import sys
import sysconfig
import tokenize
from pathlib import Path

from scripts.lab.corpora.files import write_lines
from scripts import build_message_corpus as bmc
from scripts.build_typo_corpus import typo

LANGS = ("gec", "en")
# stdlib folders that hold no prose of their own (vendored or generated code)
_SKIP_PARTS = {"site-packages", "__pycache__", "lib2to3", "turtledemo", "idlelib", "ensurepip"}
# a sentence that reads as code, markup or a doctest is not prose
_NOT_PROSE = re.compile(r"[{}\\<>|=]|::|`|\(\)\.|\w\.\w+\(|\s[-+*/%]\s|_\w|\w_|\*\*|'''|\"\"\"")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
ARTICLES = ("a", "an", "the")
PREPOSITIONS = ("in", "on", "at", "of", "for", "to", "with", "from", "by", "about")
EDIT_KINDS = ("spelling", "drop", "double", "suffix", "swap", "function_word")


def stdlib_texts(root=None):
    """Docstrings, comment blocks and pydoc topics of the standard library, in a fixed order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if not _SKIP_PARTS & set(p.relative_to(root).parts))
    texts = []
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few test files are deliberately broken
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    texts.append(doc)
        texts.extend(_comment_blocks(source))
    try:
        from pydoc_data.topics import topics
        texts.extend(topics[k] for k in sorted(topics))
    except ImportError:  # a Python built without its docs data still has docstrings and comments
        pass
    return texts


def _comment_blocks(source):
    block = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                block.append(tok.string.lstrip("#").strip())
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) and block:
                yield "\n".join(block)
                block = []
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return
    if block:
        yield "\n".join(block)


def prose_sentences(texts, min_words, max_words):
    """Sorted unique sentences of prose paragraphs (indented, bulleted or doctest lines are not)."""
    out = set()
    for text in texts:
        for paragraph in re.split(r"\n\s*\n", text):
            lines = paragraph.split("\n")
            if any(line.startswith(("   ", ">>>", "-", "*", "|", "+", "=")) for line in lines):
                continue
            joined = " ".join(line.strip() for line in lines)
            for sentence in _SENTENCE_END.split(joined):
                words = sentence.split()
                if (min_words <= len(words) <= max_words and sentence[0].isupper() and sentence.endswith(".")
                        and sentence.isascii() and not _NOT_PROSE.search(sentence)):
                    out.add(" ".join(words))
    return sorted(out)


def _suffix_change(word):
    """An agreement-like error: -s added or removed, -ed <-> -ing (None when the word has no such end)."""
    if not word.isalpha() or len(word) < 4:
        return None
    if word.endswith("ing"):
        return word[:-3] + "ed"
    if word.endswith("ed"):
        return word[:-2] + "ing"
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word + "s"


def _function_word(word, rng):
    lower = word.lower()
    for group in (ARTICLES, PREPOSITIONS):
        if lower in group:
            new = rng.choice([w for w in group if w != lower])
            return new.capitalize() if word[0].isupper() else new
    return None


def corrupt(sentence, seed, copy, correct_share, edit_rate):
    """One corrupted version of a correct sentence; returns (source, number of edits)."""
    rng = random.Random(hashlib.sha1(f"{seed}\t{copy}\t{sentence}".encode("utf-8")).hexdigest())
    words = sentence.split(" ")
    if rng.random() < correct_share:
        return sentence, 0
    out, edits, i = [], 0, 0
    while i < len(words):
        word = words[i]
        if rng.random() >= edit_rate:
            out.append(word)
            i += 1
            continue
        kind = rng.choice(EDIT_KINDS)
        changed = None
        if kind == "spelling":
            changed = [typo(word, rng)]
        elif kind == "drop" and len(words) > 1:
            changed = []
        elif kind == "double":
            changed = [word, word]
        elif kind == "suffix":
            new = _suffix_change(word)
            changed = [new] if new else None
        elif kind == "swap" and i + 1 < len(words):
            changed = [words[i + 1], word]
            i += 1
        elif kind == "function_word":
            new = _function_word(word, rng)
            changed = [new] if new else None
        if changed is None or changed == [word]:
            out.append(word)  # this word has no edit of that kind: left correct
        else:
            out.extend(changed)
            edits += 1
        i += 1
    return " ".join(out) if out else sentence, edits


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

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sentences = prose_sentences(stdlib_texts(args.stdlib), args.min_words, args.max_words)
    splits = build_pairs(sentences, args)
    bmc.write_raw_splits(out, splits, LANGS)
    digest = corpus_sha256(out)
    write_lines(out / "corpus.sha256", [f"{digest}  python {sys.version_info.major}.{sys.version_info.minor}"])
    changed = sum(1 for s, t in splits["test"] if s != t)
    print(f"[gec] {len(sentences)} sentences -> train {len(splits['train'])} pairs, valid {len(splits['valid'])}, "
          f"test {len(splits['test'])} ({changed} with errors); sha256 {digest}", flush=True)
    return bmc.segment_and_binarize(out, splits, LANGS, args.vocab_size, args.workers, not args.no_binarize, "gec")

if __name__ == "__main__":
    main()
