"""The steps the offline corpus builders share after their pairs (``scripts/build_message_corpus.py``,
``build_typo_corpus.py``, ``build_gec_corpus.py``): a deterministic split by a hash of the source, the raw
splits, a joint sentencepiece model (or subword-nmt BPE) applied to every split, and ``fairseq-preprocess``
with one joined dictionary into ``bin/``."""
import hashlib
import re

from scripts.lab.corpora import subwords
from scripts.lab.corpora.binarize import binarize as corpus_binarize
from scripts.lab.corpora.files import write_lines


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
