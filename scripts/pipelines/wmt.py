"""The WMT pipeline shared by prepare_wmt14_en_de.py and prepare_wmt16_en_ro.py (docs/METHODS.md §5).

raw corpora (downloaded, or found under --raw-dir) -> concatenated training text, sacreBLEU test
sets -> [Romanian normalisation] -> Moses punctuation normalisation + tokenisation (sacremoses) ->
joint BPE (subword-nmt) -> length filter (train only; valid/test are never filtered, so BLEU covers
every sentence) -> fairseq-preprocess --joined-dictionary.
"""
import argparse
import os
from pathlib import Path

from scripts.lab.corpora.binarize import binarize
from scripts.lab.corpora.files import (AtomicWriter, PrepError, check_settings, exists, iter_lines, log, set_tag,
                                           write_lines, write_marker, zip_strict)
from scripts.lab.corpora.sources import test_set, training_files
from scripts.lab.corpora.subwords import learn_bpe
from scripts.lab.corpora.text import length_filter, process_file, romanian


def build_parser(spec, description):
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output corpus folder (bin/, raw test files, bpe.codes, subword)")
    ap.add_argument("--raw-dir", help="where the raw corpora and test sets are (or are downloaded to); "
                    "default OUT/raw. Files are found by name anywhere below it")
    ap.add_argument("--offline", action="store_true", help="never download: refuse when a file is missing")
    recipes = spec["recipes"]
    ap.add_argument("--recipe", choices=sorted(recipes), default=spec["default_recipe"],
                    help="paper defaults for merges and dev/test sets: " +
                    "; ".join(f"{k}: {v['help']}" for k, v in sorted(recipes.items())))
    ap.add_argument("--bpe-merges", type=int, help="joint BPE merge operations (default: the recipe's)")
    ap.add_argument("--valid-sets", nargs="+", help="sacreBLEU test-set names concatenated as the validation set")
    ap.add_argument("--test-sets", nargs="+", help="sacreBLEU test-set names concatenated as the test set")
    ap.add_argument("--max-len", type=int, default=250, help="length filter: max subwords per side (train)")
    ap.add_argument("--max-ratio", type=float, default=1.5, help="length filter: max length ratio (train)")
    ap.add_argument("--workers", type=int, default=max(1, min(16, os.cpu_count() or 1)))
    return ap


def prepare(spec, args):
    """Run the pipeline of ``spec`` (languages, corpora, recipes) with parsed ``args``."""
    set_tag(spec["tag"])
    recipe = spec["recipes"][args.recipe]
    merges = args.bpe_merges or recipe["merges"]
    valid_sets = args.valid_sets or recipe["valid"]
    test_sets = args.test_sets or recipe["test"]
    src, tgt = spec["langs"]
    langpair = f"{src}-{tgt}"
    out = Path(args.out)
    raw = Path(args.raw_dir) if args.raw_dir else out / "raw"
    work = out / "work"
    ro_mode = getattr(args, "romanian", "none")
    check_settings(out, {"merges": merges, "valid": " ".join(valid_sets), "test": " ".join(test_sets),
                            "max_len": args.max_len, "max_ratio": args.max_ratio, "romanian": ro_mode,
                            "corpora": " ".join(c["name"] for c in spec["corpora"])})
    if (out / "DONE").exists():
        log(f"{out} is already prepared (delete {out / 'DONE'} to check it again)")
        return out
    log(f"{langpair}: BPE {merges:,} merges, valid {'+'.join(valid_sets)}, test {'+'.join(test_sets)}; "
           f"raw data under {raw}")

    def ro(text, lang):
        return romanian(text, ro_mode) if lang == "ro" else text

    # 1. raw text: training corpora concatenated; dev/test sets from sacreBLEU (text or SGM)
    if not exists(*(work / f"train.raw.{lang}" for lang in (src, tgt))):
        pairs = training_files(raw, spec["corpora"], (src, tgt), args.offline)
        with AtomicWriter(work / f"train.raw.{src}") as fs, AtomicWriter(work / f"train.raw.{tgt}") as ft:
            for name, (ps, pt) in pairs:
                n = 0
                for s, t in zip_strict(iter_lines(ps), iter_lines(pt), ps, pt):
                    fs.write(ro(s.strip(), src) + "\n")
                    ft.write(ro(t.strip(), tgt) + "\n")
                    n += 1
                if n == 0:
                    raise PrepError(f"{ps} is empty")
                log(f"training corpus {name}: {n:,} pairs")
    for split, sets in (("valid", valid_sets), ("test", test_sets)):
        if not exists(out / f"{split}.{src}", out / f"{split}.{tgt}"):
            srcs, refs = [], []
            for name in sets:
                s, r = test_set(raw, name, langpair, args.offline)
                log(f"{split}: {name} {len(s):,} sentences")
                srcs += s
                refs += r
            # the raw files are the BLEU references: the same (Romanian) normalisation as training
            write_lines(out / f"{split}.{tgt}", [ro(x, tgt) for x in refs])
            write_lines(out / f"{split}.{src}", [ro(x, src) for x in srcs])

    # 2. Moses normalisation + tokenisation
    for split in ("train", "valid", "test"):
        for lang in (src, tgt):
            raw_text = work / f"train.raw.{lang}" if split == "train" else out / f"{split}.{lang}"
            process_file("moses", lang, None, raw_text, work / f"{split}.tok.{lang}", args.workers, "tokenise")

    # 3. joint BPE
    learn_bpe([work / f"train.tok.{src}", work / f"train.tok.{tgt}"], out / "bpe.codes", merges, args.workers)
    for split in ("train", "valid", "test"):
        for lang in (src, tgt):
            process_file("bpe", lang, str(out / "bpe.codes"), work / f"{split}.tok.{lang}",
                            work / f"{split}.bpe.{lang}", args.workers, "apply BPE to")

    # 4. length filter (train only) and binarisation with one joined dictionary
    length_filter(work / f"train.bpe.{src}", work / f"train.bpe.{tgt}", work / f"train.clean.{src}",
                     work / f"train.clean.{tgt}", args.max_len, args.max_ratio)
    if not (out / "bin").is_dir():
        binarize(out / "bin", src, tgt, {"train": work / "train.clean", "valid": work / "valid.bpe",
                                         "test": work / "test.bpe"}, joined=True, workers=args.workers)
    write_marker(out, "subword", "subword-nmt")
    write_marker(out, "DONE", "ok")
    log(f"done: {out} (bin/, test.{src}/test.{tgt} raw, bpe.codes)")
    return out
