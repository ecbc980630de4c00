"""Shared steps of the paper data pipelines (WMT14 en-de, WMT16 en-ro, ASPEC ja-en; docs/METHODS.md §5).

Every step writes its outputs to a temporary name and renames them when complete, and is skipped
when its outputs already exist: an interrupted preparation resumes where it stopped and never leaves
a half-written file behind.  Every step prints what it does, with progress for the long ones.

The output folder has the layout ``scripts/benchmark.py`` reads (its ``Corpus`` class):

    OUT/bin/                 fairseq-preprocess output (train/valid/test, dictionaries)
    OUT/test.SRC, test.TGT   the raw (detokenised) test set; test.TGT is the BLEU reference
    OUT/valid.SRC, valid.TGT the raw validation set
    OUT/subword              "subword-nmt" (Moses-tokenised + BPE) or "sentencepiece"
    OUT/bpe.codes / spm.*    the subword model(s)
    OUT/work/                intermediate files (tokenised, BPE'd, filtered); may be deleted
    OUT/DONE                 written last
"""
import hashlib
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class PrepError(SystemExit):
    """A missing or malformed input: the message says which file and how to fix it."""

    def __init__(self, message):
        super().__init__(f"error: {message}")


# ----------------------------------------------------------------------------------------------
# logging, progress, atomic files
# ----------------------------------------------------------------------------------------------

_TAG = ["prep"]


def set_tag(tag):
    _TAG[0] = tag


def log(message):
    print(f"[{_TAG[0]}] {message}", flush=True)


class Progress:
    """Prints ``what: n/total (p%)`` at most every ``every`` seconds, and once at the end."""

    def __init__(self, what, total=None, every=10.0):
        self.what, self.total, self.every = what, total, every
        self.n, self.start, self.last = 0, time.time(), time.time()

    def update(self, k=1):
        self.n += k
        now = time.time()
        if now - self.last >= self.every:
            self.last = now
            self._print()

    def _print(self, end=False):
        pct = f" ({100.0 * self.n / self.total:.0f}%)" if self.total else ""
        total = f"/{self.total:,}" if self.total else ""
        log(f"{self.what}: {self.n:,}{total} lines{pct}, {time.time() - self.start:.0f}s" + (" - done" if end else ""))

    def close(self):
        self._print(end=True)


def tmp_name(path):
    path = Path(path)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


class AtomicWriter:
    """``with AtomicWriter(path) as f:`` writes lines to a temporary file renamed to ``path`` only
    when the block completes; on an error the temporary file is removed."""

    def __init__(self, path):
        self.path = Path(path)
        self.tmp = tmp_name(self.path)

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "w", encoding="utf-8", newline="\n")
        return self.f

    def __exit__(self, exc_type, exc, tb):
        self.f.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
        return False


def write_lines(path, lines):
    with AtomicWriter(path) as f:
        for line in lines:
            f.write(line + "\n")


def read_lines(path):
    """Lines of a UTF-8 text file split on '\\n' only (corpora contain '\\r' and U+2028 inside lines)."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


def iter_lines(path):
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n").rstrip("\r")


def count_lines(path):
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def exists(*paths):
    return all(Path(p).exists() for p in paths)


# ----------------------------------------------------------------------------------------------
# finding, downloading and extracting the raw data
# ----------------------------------------------------------------------------------------------


def find_file(raw_dir, basename, prefer=None):
    """``basename`` anywhere under ``raw_dir``; with several, the one whose path ends with ``prefer``."""
    hits = sorted(p for p in Path(raw_dir).rglob(basename) if p.is_file()) if Path(raw_dir).is_dir() else []
    if len(hits) > 1 and prefer:
        preferred = [p for p in hits if str(p).endswith(prefer)]
        hits = preferred or hits
    if len(hits) > 1:
        raise PrepError(f"{len(hits)} files named {basename} under {raw_dir} ({', '.join(map(str, hits[:4]))}); "
                        "keep one, or pass a --raw-dir that holds only the one you want")
    return hits[0] if hits else None


def download(url, dest):
    """Fetch ``url`` to ``dest`` (via ``dest.part``, so an interrupted download is not mistaken for
    a complete one), printing progress."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    log(f"downloading {url} -> {dest}")
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
            total = int(r.headers.get("Content-Length") or 0)
            done, last = 0, time.time()
            for chunk in iter(lambda: r.read(1 << 20), b""):
                f.write(chunk)
                done += len(chunk)
                if time.time() - last > 10:
                    last = time.time()
                    pct = f" ({100 * done / total:.0f}%)" if total else ""
                    log(f"  {done / 2**20:,.0f} MiB{pct}")
    except OSError as e:
        part.unlink(missing_ok=True)
        raise PrepError(f"could not download {url}: {e}. Without internet, download it elsewhere and put it "
                        f"(or the files it contains) under --raw-dir {dest.parent}") from None
    os.replace(part, dest)


def extract(archive, basenames, dest_dir):
    """Extract the members of ``archive`` whose file name is in ``basenames`` into ``dest_dir``
    (flattened).  Returns the names extracted."""
    archive, dest_dir = Path(archive), Path(dest_dir)
    wanted, got = set(basenames), []
    log(f"extracting {', '.join(sorted(wanted))} from {archive.name}")
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                for info in z.infolist():
                    name = Path(info.filename).name
                    if name in wanted and not info.is_dir():
                        with z.open(info) as src, AtomicBinary(dest_dir / name) as dst:
                            shutil.copyfileobj(src, dst)
                        got.append(name)
        else:
            with tarfile.open(archive) as t:
                for member in t:
                    name = Path(member.name).name
                    if name in wanted and member.isfile():
                        with t.extractfile(member) as src, AtomicBinary(dest_dir / name) as dst:
                            shutil.copyfileobj(src, dst)
                        got.append(name)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise PrepError(f"{archive} is not a readable archive ({e}); delete it so that it is downloaded again, "
                        "or replace it with a complete copy") from None
    return got


class AtomicBinary(AtomicWriter):
    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "wb")
        return self.f


def training_files(raw_dir, corpora, langs, offline):
    """Locate (or download and extract) the parallel training corpora.

    ``corpora``: list of dicts ``{"name", "url", "files": {lang: basename}}``.  A file is looked up
    by its name anywhere under ``raw_dir``; failing that, the corpus archive (the URL's file name)
    is looked up there and extracted; failing that, it is downloaded unless ``offline``."""
    pairs, missing = [], []
    for corpus in corpora:
        names = [corpus["files"][lang] for lang in langs]
        paths = [find_file(raw_dir, n) for n in names]
        if not all(paths):
            archive_name = corpus["url"].rsplit("/", 1)[-1].split("?")[0] if corpus.get("url") else None
            archive = find_file(raw_dir, corpus.get("archive", archive_name)) if archive_name else None
            if archive is None and not offline and corpus.get("url"):
                archive = Path(raw_dir) / corpus.get("archive", archive_name)
                download(corpus["url"], archive)
            if archive is not None:
                extract(archive, names, Path(raw_dir) / "extracted")
                paths = [find_file(raw_dir, n, prefer=f"extracted/{n}") for n in names]
        if not all(paths):
            missing.append(f"  {corpus['name']}: {' and '.join(names)} (from {corpus.get('url', 'the corpus provider')})")
            continue
        pairs.append((corpus["name"], paths))
    if missing:
        raise PrepError("training corpora not found under --raw-dir " + str(raw_dir) + ":\n" + "\n".join(missing) +
                        "\nPut the files (or their archives) there" + ("" if offline else ", or check the internet connection"))
    return pairs


_SEG = re.compile(r"<seg.*?>(.*)</seg>.*?")


def read_sgm(path):
    """Segments of a WMT SGM file (the text between <seg ...> and </seg>, one per line; whitespace
    collapsed), the way sacreBLEU reads these files."""
    segs = []
    for line in iter_lines(path):
        if line.startswith("<seg "):
            segs.append(re.sub(r"\s+", " ", _SEG.sub(r"\1", line).strip()))
    if not segs:
        raise PrepError(f"{path} holds no <seg ...>...</seg> lines: not a WMT SGM test set (or truncated)")
    return segs


def sacrebleu_files(name, langpair):
    """sacreBLEU's own file names of a test set: {'src': relative path, 'ref': relative path}."""
    from sacrebleu.dataset import DATASETS

    if name not in DATASETS:
        raise PrepError(f"unknown test set {name!r}; sacreBLEU knows e.g. wmt13, wmt14/full, wmt16")
    files = DATASETS[name].langpairs.get(langpair)
    if not files:
        raise PrepError(f"sacreBLEU's {name} has no {langpair} test set")
    return {"src": files[0], "ref": files[1]}


def test_set(raw_dir, name, langpair, offline):
    """(source lines, reference lines) of a sacreBLEU test set, e.g. ``wmt14/full`` for ``en-de``.

    Looked up under ``raw_dir`` as plain text ``<name>.<langpair>.<lang>`` (``/`` in the name
    becomes ``_``, e.g. ``wmt14_full.en-de.en``) or as the WMT SGM files under sacreBLEU's file
    names (e.g. ``newstest2014-deen-src.en.sgm``); else fetched with ``sacrebleu -t NAME -l
    LANGPAIR --echo src|ref`` (and kept as plain text under raw_dir/sacrebleu/)."""
    src_lang, tgt_lang = langpair.split("-")
    stem = name.replace("/", "_") + "." + langpair
    sides = {}
    for role, lang in (("src", src_lang), ("ref", tgt_lang)):
        txt = find_file(raw_dir, f"{stem}.{lang}")
        if txt is not None:
            sides[role] = read_lines(txt)
            continue
        rel = sacrebleu_files(name, langpair)[role]
        sgm = find_file(raw_dir, Path(rel).name, prefer=rel)
        if sgm is not None:
            sides[role] = read_sgm(sgm)
            continue
        if offline:
            raise PrepError(f"test set {name} ({langpair}, {role}) not found under --raw-dir {raw_dir}: expected "
                            f"{stem}.{lang} (plain text) or {Path(rel).name} (SGM, from {sacrebleu_url(name)})")
        sides[role] = sacrebleu_echo(name, langpair, role)
        write_lines(Path(raw_dir) / "sacrebleu" / f"{stem}.{lang}", sides[role])
    if len(sides["src"]) != len(sides["ref"]):
        raise PrepError(f"test set {name} ({langpair}): {len(sides['src'])} source lines but {len(sides['ref'])} "
                        "reference lines; the files do not belong together")
    if any(not s.strip() for s in sides["src"]):
        raise PrepError(f"test set {name} ({langpair}) has empty source lines; the files are malformed")
    return sides["src"], sides["ref"]


def sacrebleu_url(name):
    from sacrebleu.dataset import DATASETS

    return ", ".join(DATASETS[name].data)


def sacrebleu_echo(name, langpair, role):
    cmd = [str(Path(sys.executable).parent / "sacrebleu"), "-t", name, "-l", langpair, "--echo", role]
    if not Path(cmd[0]).exists():
        cmd[0:1] = [sys.executable, "-m", "sacrebleu"]
    log(f"fetching {name} {langpair} {role} with: {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PrepError(f"sacrebleu could not fetch {name} ({langpair}): {proc.stderr.strip()[-500:]}. Offline, put the "
                        f"SGM files from {sacrebleu_url(name)} under --raw-dir")
    return proc.stdout.rstrip("\n").split("\n")


# ----------------------------------------------------------------------------------------------
# text processing (run in worker processes; the state lives in module globals of each worker)
# ----------------------------------------------------------------------------------------------

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
        import unicodedata

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
    progress = Progress(f"{what} {Path(src).name}", total)
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


# ----------------------------------------------------------------------------------------------
# subwords, length filter, binarisation
# ----------------------------------------------------------------------------------------------


def learn_bpe(inputs, codes, merges, workers):
    """subword-nmt ``learn_bpe`` with ``merges`` merge operations over the concatenation of
    ``inputs`` (one joint model when the inputs are both languages)."""
    if Path(codes).exists():
        return
    from subword_nmt.learn_bpe import learn_bpe as learn

    joint = tmp_name(Path(codes).with_suffix(".input"))
    with open(joint, "w", encoding="utf-8", newline="\n") as out:
        for path in inputs:
            with open(path, encoding="utf-8", newline="\n") as f:
                shutil.copyfileobj(f, out)
    n = count_lines(joint)
    log(f"learning {merges:,} BPE merges (subword-nmt) on {n:,} lines of {', '.join(Path(p).name for p in inputs)}")
    start = time.time()
    try:
        with open(joint, encoding="utf-8") as infile, AtomicWriter(codes) as outfile:
            learn(infile, outfile, merges, min_frequency=2, num_workers=workers)
    finally:
        joint.unlink(missing_ok=True)
    log(f"BPE codes written to {codes} ({time.time() - start:.0f}s)")


def train_sentencepiece(inputs, prefix, vocab_size):
    """One sentencepiece BPE model of ``vocab_size`` pieces on ``inputs`` -> ``prefix``.model/.vocab."""
    model = Path(f"{prefix}.model")
    if model.exists():
        return model
    import sentencepiece as spm

    log(f"training sentencepiece (BPE, {vocab_size:,} pieces) on {', '.join(Path(p).name for p in inputs)}")
    tmp_prefix = tmp_name(Path(prefix))
    spm.SentencePieceTrainer.train(
        input=",".join(str(p) for p in inputs), model_prefix=str(tmp_prefix), vocab_size=vocab_size,
        model_type="bpe", character_coverage=0.9995, input_sentence_size=5_000_000, shuffle_input_sentence=True,
        bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0, hard_vocab_limit=False, minloglevel=2,
        num_threads=os.cpu_count() or 1)
    os.replace(f"{tmp_prefix}.vocab", f"{prefix}.vocab")
    os.replace(f"{tmp_prefix}.model", model)
    return model


def length_filter(src_in, tgt_in, src_out, tgt_out, max_len=250, max_ratio=1.5):
    """Drop training pairs with an empty side, a side longer than ``max_len`` subwords, or a length
    ratio above ``max_ratio`` (Moses' clean-corpus-n.perl, as fairseq's WMT scripts use it)."""
    if exists(src_out, tgt_out):
        return
    kept = dropped = 0
    progress = Progress(f"length filter (1..{max_len} subwords, ratio <= {max_ratio})", count_lines(src_in))
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


def zip_strict(a, b, name_a, name_b):
    sentinel = object()
    ia, ib = iter(a), iter(b)
    n = 0
    while True:
        x, y = next(ia, sentinel), next(ib, sentinel)
        if x is sentinel and y is sentinel:
            return
        if x is sentinel or y is sentinel:
            raise PrepError(f"{name_a} and {name_b} differ in length (after line {n:,}): a parallel corpus needs "
                            "one line per sentence on both sides")
        n += 1
        yield x, y


def binarize(out, src, tgt, prefixes, joined, workers):
    """fairseq-preprocess (through this interpreter) into ``out/bin`` (via ``out/bin.tmp``)."""
    dest = Path(out) / "bin"
    if dest.is_dir():
        return
    tmp = Path(out) / "bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
           "--trainpref", str(prefixes["train"]), "--validpref", str(prefixes["valid"]),
           "--testpref", str(prefixes["test"]), "--destdir", str(tmp), "--workers", str(workers)]
    if joined:
        cmd.append("--joined-dictionary")
    log("binarizing: " + " ".join(cmd))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrepError(f"fairseq-preprocess failed:\n{proc.stderr[-3000:]}")
    os.replace(tmp, dest)


def write_marker(out, name, text):
    write_lines(Path(out) / name, [text])


def make_view(main, view, reverse=False, test_from="test"):
    """A second corpus folder over the same binarized data, without copying it: ``reverse`` swaps
    source and target (e.g. de-en from en-de), ``test_from="valid"`` makes the validation set the
    test split (to decode a paper's development-set table).  Binarized files are symbolic links."""
    main, view = Path(main).resolve(), Path(view)
    if (view / "DONE").exists():
        return view
    src, tgt = _langs_of(main)
    vsrc, vtgt = (tgt, src) if reverse else (src, tgt)
    tmp = view.with_name(view.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "bin").mkdir(parents=True)
    for split, from_split in (("train", "train"), ("valid", "valid"), ("test", test_from)):
        for lang in (src, tgt):
            for ext in ("bin", "idx"):
                target = main / "bin" / f"{from_split}.{src}-{tgt}.{lang}.{ext}"
                if target.exists():
                    os.symlink(target, tmp / "bin" / f"{split}.{vsrc}-{vtgt}.{lang}.{ext}")
    for lang in (src, tgt):
        os.symlink(main / "bin" / f"dict.{lang}.txt", tmp / "bin" / f"dict.{lang}.txt")
        for split, from_split in (("valid", "valid"), ("test", test_from)):
            shutil.copyfile(main / f"{from_split}.{lang}", tmp / f"{split}.{lang}")
    for name in ("subword", "bpe.codes", "bpe.codes." + src, "bpe.codes." + tgt, "spm." + src + ".model",
                 "spm." + tgt + ".model"):
        if (main / name).exists():
            shutil.copyfile(main / name, tmp / name)
    (tmp / "VIEW").write_text(f"{main} reverse={reverse} test={test_from}\n")
    (tmp / "DONE").write_text("ok\n")
    shutil.rmtree(view, ignore_errors=True)
    os.replace(tmp, view)
    log(f"view {view}: {vsrc}->{vtgt}, test = {test_from} of {main.name}")
    return view


def _langs_of(folder):
    pairs = sorted({p.name.split(".")[1] for p in (Path(folder) / "bin").glob("train.*-*.*.bin")})
    if not pairs:
        raise PrepError(f"{folder}/bin holds no binarized train split: prepare the corpus first")
    return pairs[0].split("-")


def fingerprint(*parts):
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]


def check_settings(out, settings):
    """Refuse to resume in a folder prepared with other settings (its files would be mixed)."""
    path = Path(out) / "SETTINGS"
    text = "\n".join(f"{k}={v}" for k, v in sorted(settings.items())) + "\n"
    if path.exists() and path.read_text() != text:
        raise PrepError(f"{out} was prepared with other settings:\n{path.read_text()}now:\n{text}"
                        "Use another --out folder, or delete this one to start over")
    Path(out).mkdir(parents=True, exist_ok=True)
    if not path.exists():
        write_lines(path, text.rstrip("\n").split("\n"))


def main(argv=None):
    """``corpus_prep.py view MAIN VIEW [--reverse] [--test-from valid]``: see :func:`make_view`."""
    import argparse

    ap = argparse.ArgumentParser(description=make_view.__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    v = sub.add_parser("view", help="a reversed and/or dev-as-test view of a prepared corpus folder")
    v.add_argument("main")
    v.add_argument("view")
    v.add_argument("--reverse", action="store_true")
    v.add_argument("--test-from", choices=["test", "valid"], default="test")
    args = ap.parse_args(argv)
    set_tag("view")
    if not (Path(args.main) / "DONE").exists():
        raise PrepError(f"{args.main} is not a finished corpus folder (no DONE): prepare it first")
    make_view(args.main, args.view, reverse=args.reverse, test_from=args.test_from)


if __name__ == "__main__":
    main()
