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
import gettext
import hashlib
import re
import sys
from pathlib import Path

from scripts.lab.corpora import subwords
from scripts.lab.corpora.binarize import binarize as corpus_binarize
from scripts.lab.corpora.files import write_lines

# pair name -> (source locale dirs, target locale dirs, fairseq language codes)
PAIRS = {
    "en-de": (None, ["de"], ("en", "de")),
    "ja-en": (["ja"], None, ("ja", "en")),
    "pt_PT-pt_BR": (["pt_PT", "pt"], ["pt_BR"], ("pt_PT", "pt_BR")),
}

# printf-style (%s, %1$d, %-10.3lf), python-style ({name}, %(name)s), shell-style ($VAR, ${VAR}).
_PLACEHOLDER = re.compile(r"%(\([^)]*\))?[-+ #0-9.$*]*[hlLqjzt]*[a-zA-Z%]|\{[^{}]*\}|\$\{?\w+\}?")
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_CATALOG_PACKAGE_HINT = (
    "Message catalogs ship with the programs themselves (e.g. Debian: apt-get install coreutils "
    "tar gettext-base; the 'locales' and 'language-pack-*' packages on Ubuntu). Check that "
    "/etc/dpkg/dpkg.cfg.d/ does not exclude /usr/share/locale (minimal Docker images do), or "
    "pass --locale-dir to a tree of <lang>/LC_MESSAGES/*.mo files."
)


def read_catalog(path):
    """msgid -> msgstr of one .mo file (singular forms only), via Python's gettext."""
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # the parsed .mo; gettext has no public accessor
    out = {}
    for key, value in catalog.items():
        if isinstance(key, tuple):  # plural entry: (msgid, n); keep the singular form
            key, n = key
            if n != 0:
                continue
        if key and value:  # "" is the header entry
            out[key] = value
    return out


def normalise(text):
    text = text.replace("\u00a0", " ")
    return re.sub(r"\s+", " ", text).strip()


def keep_message(text):
    """False for messages that are no sentence: multi-line, or nothing but placeholders/symbols."""
    if "\n" in text or "\r" in text or "\t" in text:
        return False
    return bool(_LETTER.search(_PLACEHOLDER.sub(" ", text)))


def collect(locale_dir, langs):
    """domain -> {msgid: msgstr} merged over the locale directories in ``langs`` (first wins)."""
    merged = {}
    for lang in langs:
        folder = Path(locale_dir) / lang / "LC_MESSAGES"
        for mo in sorted(folder.glob("*.mo")) if folder.is_dir() else []:
            try:
                entries = read_catalog(mo)
            except Exception as e:  # a corrupt .mo raises OSError/UnicodeDecodeError; skip it, keep the rest
                print(f"  skipping unreadable catalog {mo}: {e}", file=sys.stderr)
                continue
            domain = merged.setdefault(mo.stem, {})
            for k, v in entries.items():
                domain.setdefault(k, v)
    return merged


def extract_pairs(locale_dir, pair, max_words=80):
    src_langs, tgt_langs, _ = PAIRS[pair]
    src_cat = collect(locale_dir, src_langs) if src_langs else None
    tgt_cat = collect(locale_dir, tgt_langs) if tgt_langs else None
    side = src_cat if src_cat is not None else tgt_cat
    if not side or not any(side.values()):
        looked = ", ".join(str(Path(locale_dir) / lang / "LC_MESSAGES") for lang in (src_langs or tgt_langs))
        raise SystemExit(f"error: no translated message catalogs (*.mo) found in {looked}.\n{_CATALOG_PACKAGE_HINT}")

    stats = {"messages": 0, "filtered": 0}
    pairs = []
    domains = sorted(set(src_cat or {}) | set(tgt_cat or {}))
    for domain in domains:
        s_map = src_cat.get(domain, {}) if src_cat is not None else None
        t_map = tgt_cat.get(domain, {}) if tgt_cat is not None else None
        keys = sorted(set(s_map or t_map) if s_map is None or t_map is None else set(s_map) & set(t_map))
        for msgid in keys:
            src = s_map[msgid] if s_map is not None else msgid
            tgt = t_map[msgid] if t_map is not None else msgid
            stats["messages"] += 1
            src, tgt = normalise(src), normalise(tgt)
            english_side = src_langs is None or tgt_langs is None
            if (
                not (keep_message(msgid) and keep_message(src) and keep_message(tgt))
                or (english_side and src == tgt)  # untranslated message
                or len(src.split()) > max_words
                or len(tgt.split()) > max_words
                or max(len(src), len(tgt)) > 6 * max_words
            ):
                stats["filtered"] += 1
                continue
            pairs.append((src, tgt))
    # deduplicate: exact pairs first, then one translation per source (first in sorted order)
    seen, unique = set(), []
    for src, tgt in sorted(set(pairs)):
        if src not in seen:
            seen.add(src)
            unique.append((src, tgt))
    stats["unique"] = len(unique)
    return unique, stats


def split(pairs, test_size, valid_size):
    """Deterministic split: order by a hash of the source, take test, then valid, rest is train."""
    if len(pairs) < test_size + valid_size + 1:
        raise SystemExit(
            f"error: only {len(pairs)} pairs; need more than test ({test_size}) + valid ({valid_size}). "
            "Lower --test-size/--valid-size or point --locale-dir to more catalogs."
        )
    ordered = sorted(pairs, key=lambda p: hashlib.sha1(p[0].encode("utf-8")).hexdigest())
    test = ordered[:test_size]
    valid = ordered[test_size : test_size + valid_size]
    train = sorted(ordered[test_size + valid_size :])
    return {"train": train, "valid": valid, "test": test}


def train_sentencepiece(out, splits, langs, vocab_size):
    """One joint sentencepiece unigram model (``out/spm.model``) on the training pairs; every split
    encoded into ``<split>.sub.<lang>``.  Returns the vocabulary size used."""
    import sentencepiece as spm

    joint = out / "spm_train.txt"
    write_lines(joint, [s for pair in splits["train"] for s in pair])
    n_chars = sum(len(s) for pair in splits["train"] for s in pair)
    vocab_size = min(vocab_size, max(200, n_chars // 40))  # tiny test corpora cannot fill a big vocab
    (out / "spm.model").unlink(missing_ok=True)  # rebuilt on every run
    subwords.train_sentencepiece([joint], out / "spm", vocab_size, model_type="unigram", input_sentence_size=2_000_000,
                                 seed_sentencepiece_size=200_000, num_threads=2)
    joint.unlink()
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    for name, rows in splits.items():
        for i, lang in enumerate(langs):
            pieces = sp.encode([r[i] for r in rows], out_type=str)
            write_lines(out / f"{name}.sub.{lang}", [" ".join(p) for p in pieces])
    return vocab_size


def train_subword_nmt(out, splits, langs, merges):
    from subword_nmt.learn_bpe import learn_bpe
    from subword_nmt.apply_bpe import BPE
    import io

    tokenised = {name: [[_moses_split(s) for s in pair] for pair in rows] for name, rows in splits.items()}
    corpus = io.StringIO("\n".join(s for pair in tokenised["train"] for s in pair) + "\n")
    with open(out / "bpe.codes", "w", encoding="utf-8") as codes:
        learn_bpe(corpus, codes, merges, min_frequency=2)
    with open(out / "bpe.codes", encoding="utf-8") as codes:
        bpe = BPE(codes)
    for name, rows in tokenised.items():
        for i, lang in enumerate(langs):
            write_lines(out / f"{name}.sub.{lang}", [bpe.process_line(r[i]) for r in rows])
    return merges


def _moses_split(text):
    # subword-nmt expects whitespace-tokenised input; sacremoses is not a dependency of this corpus,
    # so split punctuation off words (Corpus.detokenize joins them again with sacremoses' detokeniser)
    return " ".join(re.findall(r"\w+|[^\w\s]", text, re.UNICODE))


def write_raw_splits(out, splits, langs):
    """``out/<split>.<lang>``: each split's pairs as line-aligned text, one file per side."""
    for name, rows in splits.items():
        for i, lang in enumerate(langs):
            write_lines(out / f"{name}.{lang}", [r[i] for r in rows])


def segment_and_binarize(out, splits, langs, vocab_size, workers, binarized=True, tag="prep"):
    """A joint sentencepiece model on the training pairs, every split in pieces, and (``binarized``)
    ``fairseq-preprocess`` into ``out/bin``: what a copy-like corpus builder does after its raw splits.
    Returns each split's size."""
    size = train_sentencepiece(out, splits, langs, vocab_size)
    print(f"[{tag}] sentencepiece joint vocabulary {size}: {out / 'spm.model'}", flush=True)
    with open(out / "subword", "w") as f:
        f.write("sentencepiece\n")
    if binarized:
        binarize(out, langs, workers)
        print(f"[{tag}] binarized: {out / 'bin'}", flush=True)
    return {k: len(v) for k, v in splits.items()}


def binarize(out, langs, workers):
    """fairseq-preprocess of the three splits' subwords into ``out/bin`` with one joined dictionary."""
    prefixes = {split: out / f"{split}.sub" for split in ("train", "valid", "test")}
    return corpus_binarize(out / "bin", *langs, prefixes, joined=True, workers=workers)


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

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    langs = PAIRS[args.pair][2]
    print(f"[corpus] reading catalogs under {args.locale_dir} for {args.pair}", flush=True)
    pairs, stats = extract_pairs(args.locale_dir, args.pair, args.max_words)
    splits = split(pairs, args.test_size, args.valid_size)
    for name, rows in splits.items():
        for i, lang in enumerate(langs):
            write_lines(out / f"{name}.{lang}", [r[i] for r in rows])
    print(
        f"[corpus] {args.pair}: {stats['messages']} messages, {stats['filtered']} filtered, "
        f"{stats['unique']} unique pairs -> train {len(splits['train'])}, valid {len(splits['valid'])}, "
        f"test {len(splits['test'])}", flush=True,
    )
    if args.subword == "sentencepiece":
        size = train_sentencepiece(out, splits, langs, args.vocab_size)
        print(f"[corpus] sentencepiece joint vocabulary {size}: {out / 'spm.model'}", flush=True)
    else:
        train_subword_nmt(out, splits, langs, args.bpe_merges)
        print(f"[corpus] subword-nmt BPE {args.bpe_merges} merges: {out / 'bpe.codes'}", flush=True)
    with open(out / "subword", "w") as f:
        f.write(args.subword + "\n")
    if not args.no_binarize:
        binarize(out, langs, args.workers)
        print(f"[corpus] binarized: {out / 'bin'}", flush=True)
    return stats, {k: len(v) for k, v in splits.items()}


if __name__ == "__main__":
    main()
