"""Tokenisation, segmentation and subwords applied to every line of a file in worker processes
(Moses through sacremoses, MeCab through fugashi, subword-nmt BPE, sentencepiece), Romanian
normalisation, and the training pairs' length filter."""
import multiprocessing
import unicodedata
from pathlib import Path

from tqdm import tqdm

from scripts.lab.corpora.files import AtomicWriter, PrepError, count_lines, exists, iter_lines, log, zip_strict

_WORKER = {}

# Romanian (Sennrich et al.'s WMT16 scripts: normalise-romanian.py, remove-diacritics.py): cedilla
# forms -> comma-below forms, and optionally every diacritic removed.
_RO_NORMALISE = str.maketrans({"\u015f": "\u0219", "\u015e": "\u0218", "\u0163": "\u021b", "\u0162": "\u021a",
                               "\u201e": '"', "\u201d": '"'})
_RO_STRIP = str.maketrans({"\u0219": "s", "\u0218": "S", "\u021b": "t", "\u021a": "T", "\u0103": "a",
                           "\u0102": "A", "\u00e2": "a", "\u00c2": "A", "\u00ee": "i", "\u00ce": "I"})


def romanian(text, mode):
    """``mode``: none | normalise (cedilla -> comma below, Romanian quotes) | strip-diacritics."""
    if mode == "none":
        return text
    text = text.translate(_RO_NORMALISE)
    return text.translate(_RO_STRIP) if mode == "strip-diacritics" else text


def _init_worker(kind, lang, option):
    _WORKER.clear()
    _WORKER["kind"], _WORKER["option"], _WORKER["lang"] = kind, option, lang
    if kind == "moses":
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        _WORKER["norm"] = MosesPunctNormalizer(lang=lang, pre_replace_unicode_punct=True, post_remove_control_chars=True)
        _WORKER["tok"] = MosesTokenizer(lang=lang)
    elif kind == "mecab":
        import fugashi

        _WORKER["tagger"] = fugashi.Tagger()
    elif kind == "bpe":
        from subword_nmt.apply_bpe import BPE

        with open(option, encoding="utf-8") as codes:
            _WORKER["bpe"] = BPE(codes)
    elif kind == "spm":
        import sentencepiece as spm

        _WORKER["spm"] = spm.SentencePieceProcessor(model_file=option)


def _process(lines):
    kind = _WORKER["kind"]
    if kind == "moses":
        norm, tok, ro = _WORKER["norm"], _WORKER["tok"], _WORKER["option"]
        # Moses: normalize-punctuation.perl | remove-non-printing-char.perl | tokenizer.perl -a
        # (aggressive hyphen splitting, XML escaping), as in fairseq's prepare-wmt14en2de.sh
        return [tok.tokenize(romanian(norm.normalize(s), ro or "none"), aggressive_dash_splits=True,
                             return_str=True, escape=True) for s in lines]
    if kind == "mecab":
        tagger = _WORKER["tagger"]
        return [" ".join(w.surface for w in tagger(unicodedata.normalize("NFKC", s))) for s in lines]
    if kind == "bpe":
        bpe = _WORKER["bpe"]
        return [bpe.process_line(s) for s in lines]
    if kind == "spm":
        sp = _WORKER["spm"]
        return [" ".join(p) for p in sp.encode(lines, out_type=str)]
    raise ValueError(kind)


def process_file(kind, lang, option, src, dst, workers, what):
    """Apply one processing ``kind`` (moses | mecab | bpe | spm) to every line of ``src`` into
    ``dst`` (atomically), in ``workers`` processes, with progress."""
    if Path(dst).exists():
        return
    total = count_lines(src)
    progress = tqdm(total=total, desc=f"{what} {Path(src).name}", unit=" lines", mininterval=10)
    chunks = _chunks(iter_lines(src), 2000)
    with AtomicWriter(dst) as out:
        if workers > 1:
            ctx = multiprocessing.get_context("spawn")  # no fork of a process holding torch/threads
            with ctx.Pool(workers, initializer=_init_worker, initargs=(kind, lang, option)) as pool:
                for done in pool.imap(_process, chunks, chunksize=1):
                    out.write("".join(s + "\n" for s in done))
                    progress.update(len(done))
        else:
            _init_worker(kind, lang, option)
            for chunk in chunks:
                done = _process(chunk)
                out.write("".join(s + "\n" for s in done))
                progress.update(len(done))
    progress.close()


def _chunks(iterable, n):
    chunk = []
    for x in iterable:
        chunk.append(x)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def length_filter(src_in, tgt_in, src_out, tgt_out, max_len=250, max_ratio=1.5):
    """Drop training pairs with an empty side, a side longer than ``max_len`` subwords, or a length
    ratio above ``max_ratio`` (Moses' clean-corpus-n.perl, as fairseq's WMT scripts use it)."""
    if exists(src_out, tgt_out):
        return
    kept = dropped = 0
    progress = tqdm(total=count_lines(src_in), desc=f"length filter (1..{max_len} subwords, ratio <= {max_ratio})",
                    unit=" lines", mininterval=10)
    with AtomicWriter(src_out) as fs, AtomicWriter(tgt_out) as ft:
        for s, t in zip_strict(iter_lines(src_in), iter_lines(tgt_in), src_in, tgt_in):
            ls, lt = len(s.split()), len(t.split())
            if 0 < ls <= max_len and 0 < lt <= max_len and ls / lt <= max_ratio and lt / ls <= max_ratio:
                fs.write(s + "\n")
                ft.write(t + "\n")
                kept += 1
            else:
                dropped += 1
            progress.update()
    progress.close()
    if kept == 0:
        raise PrepError(f"the length filter left no training pair of {src_in} / {tgt_in}")
    log(f"kept {kept:,} training pairs, dropped {dropped:,}")
