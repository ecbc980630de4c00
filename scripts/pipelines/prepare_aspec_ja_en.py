#!/usr/bin/env python
"""ASPEC Japanese-English (ASPEC-JE) for Imamura & Sumita's tables (docs/METHODS.md §5).

ASPEC is licensed (https://jipsti.jst.go.jp/aspec/): pass ``--aspec-dir`` to your copy, the folder
holding ``train/train-{1,2,3}.txt``, ``dev/dev.txt``, ``devtest/devtest.txt`` and ``test/test.txt``
(``ASPEC/ASPEC-JE`` or a parent of it).  Their lines are ``|||``-separated::

    train:          SCORE ||| DOC-ID ||| SENT-ID ||| Japanese ||| English
    dev/devtest/test:     DOC-ID ||| SENT-ID ||| Japanese ||| English

Imamura & Sumita 4.1: all 3M training pairs, validation dev, test devtest + test (3,596 sentences),
16K subword vocabularies per side (separate dictionaries).  Two segmentations (``--subword``):

  subword-nmt    (default) Japanese word segmentation with MeCab through fugashi and its bundled
                 UniDic-lite dictionary (after NFKC normalisation), English Moses tokenisation
                 (sacremoses), then one subword-nmt BPE model of ``--bpe-merges`` (16K) per side
  sentencepiece  one sentencepiece BPE model of ``--vocab-size`` (16K) pieces per side on raw text

For en->ja, make a reversed view of the prepared folder (``python -m scripts.pipelines.corpus_prep view OUT
OUT_en_ja --reverse``); BLEU with a Japanese target uses sacreBLEU's ja-mecab tokenizer (scripts/benchmark.py
picks it for a ``ja`` target).

Usage::

    python -m scripts.pipelines.prepare_aspec_ja_en --aspec-dir /data/ASPEC/ASPEC-JE --out data/aspec_ja_en
"""
import argparse
import os
from pathlib import Path

from scripts.lab.corpora.binarize import binarize
from scripts.lab.corpora.files import (AtomicWriter, PrepError, check_settings, exists, iter_lines, log, set_tag,
                                           write_lines, write_marker)
from scripts.lab.corpora.sources import find_file
from scripts.lab.corpora.subwords import learn_bpe, train_sentencepiece
from scripts.lab.corpora.text import length_filter, process_file

LAYOUT = {"train": ("train-{}.txt", 5), "dev": ("dev.txt", 4), "devtest": ("devtest.txt", 4), "test": ("test.txt", 4)}


def aspec_file(aspec_dir, name):
    path = find_file(aspec_dir, name)
    if path is None:
        raise PrepError(
            f"{name} not found under --aspec-dir {aspec_dir}. ASPEC-JE has train/train-1.txt .. train-3.txt, "
            "dev/dev.txt, devtest/devtest.txt and test/test.txt; point --aspec-dir to that folder (ASPEC is "
            "licensed: https://jipsti.jst.go.jp/aspec/)")
    return path


def read_aspec(path, n_fields):
    """(Japanese, English) pairs of one ASPEC file; refuses malformed lines with their number."""
    pairs = []
    for i, line in enumerate(iter_lines(path), 1):
        fields = line.split(" ||| ")
        if len(fields) != n_fields:
            raise PrepError(f"{path}:{i}: expected {n_fields} ' ||| '-separated fields, found {len(fields)}: "
                               f"{line[:120]!r}. Is this an unmodified ASPEC-JE file?")
        ja, en = fields[-2].strip(), fields[-1].strip()
        pairs.append((ja, en))
    if not pairs:
        raise PrepError(f"{path} is empty")
    return pairs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aspec-dir", required=True, help="your ASPEC-JE copy (licensed)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-files", nargs="+", type=int, default=[1, 2, 3], choices=[1, 2, 3],
                    help="which train-N.txt to use (default all three: 3M pairs, as Imamura & Sumita)")
    ap.add_argument("--test-files", nargs="+", default=["devtest", "test"], choices=["dev", "devtest", "test"],
                    help="concatenated as the test set (default devtest + test)")
    ap.add_argument("--subword", choices=["subword-nmt", "sentencepiece"], default="subword-nmt")
    ap.add_argument("--bpe-merges", type=int, default=16000, help="subword-nmt merges per side")
    ap.add_argument("--vocab-size", type=int, default=16000, help="sentencepiece pieces per side")
    ap.add_argument("--max-len", type=int, default=250)
    ap.add_argument("--max-ratio", type=float, default=1.5)
    ap.add_argument("--workers", type=int, default=max(1, min(16, os.cpu_count() or 1)))
    args = ap.parse_args(argv)
    set_tag("aspec")
    if not Path(args.aspec_dir).is_dir():
        raise PrepError(f"--aspec-dir {args.aspec_dir} is not a folder")
    src, tgt = "ja", "en"
    out, work = Path(args.out), Path(args.out) / "work"
    size = args.bpe_merges if args.subword == "subword-nmt" else args.vocab_size
    check_settings(out, {"train": args.train_files, "test": args.test_files, "subword": args.subword,
                            "size": size, "max_len": args.max_len, "max_ratio": args.max_ratio})
    if (out / "DONE").exists():
        log(f"{out} is already prepared")
        return out
    log(f"ASPEC-JE ja->en from {args.aspec_dir}: {args.subword}, {size:,} per side")

    # 1. raw text from the |||-separated files
    if not exists(work / "train.raw.ja", work / "train.raw.en"):
        with AtomicWriter(work / "train.raw.ja") as fj, AtomicWriter(work / "train.raw.en") as fe:
            for n in args.train_files:
                path = aspec_file(args.aspec_dir, LAYOUT["train"][0].format(n))
                pairs = read_aspec(path, LAYOUT["train"][1])
                for ja, en in pairs:
                    fj.write(ja + "\n")
                    fe.write(en + "\n")
                log(f"{path.name}: {len(pairs):,} pairs")
    for split, parts in (("valid", ["dev"]), ("test", args.test_files)):
        if not exists(out / f"{split}.ja", out / f"{split}.en"):
            pairs = []
            for part in parts:
                got = read_aspec(aspec_file(args.aspec_dir, LAYOUT[part][0]), LAYOUT[part][1])
                log(f"{split}: {part} {len(got):,} sentences")
                pairs += got
            write_lines(out / f"{split}.ja", [p[0] for p in pairs])
            write_lines(out / f"{split}.en", [p[1] for p in pairs])

    def raw(split, lang):
        return work / f"train.raw.{lang}" if split == "train" else out / f"{split}.{lang}"

    # 2. segmentation and subwords, one model per side
    for lang in (src, tgt):
        if args.subword == "subword-nmt":
            for split in ("train", "valid", "test"):
                kind = "mecab" if lang == "ja" else "moses"
                process_file(kind, lang, None, raw(split, lang), work / f"{split}.tok.{lang}", args.workers,
                                "segment" if lang == "ja" else "tokenise")
            codes = out / f"bpe.codes.{lang}"
            learn_bpe([work / f"train.tok.{lang}"], codes, args.bpe_merges, args.workers)
            for split in ("train", "valid", "test"):
                process_file("bpe", lang, str(codes), work / f"{split}.tok.{lang}", work / f"{split}.sub.{lang}",
                                args.workers, "apply BPE to")
        else:
            model = train_sentencepiece([raw("train", lang)], out / f"spm.{lang}", args.vocab_size)
            for split in ("train", "valid", "test"):
                process_file("spm", lang, str(model), raw(split, lang), work / f"{split}.sub.{lang}",
                                args.workers, "sentencepiece")

    # 3. length filter (train only), binarisation with a dictionary per side
    length_filter(work / "train.sub.ja", work / "train.sub.en", work / "train.clean.ja", work / "train.clean.en",
                     args.max_len, args.max_ratio)
    if not (out / "bin").is_dir():
        binarize(out / "bin", src, tgt, {"train": work / "train.clean", "valid": work / "valid.sub",
                                         "test": work / "test.sub"}, workers=args.workers)
    write_marker(out, "subword", args.subword)
    write_marker(out, "DONE", "ok")
    log(f"done: {out}")
    return out


if __name__ == "__main__":
    main()
