"""Finding, downloading and extracting the raw data of the paper pipelines: training corpora
(found by file name under a raw-data folder, else their archive, else downloaded) and sacreBLEU
test sets (plain text, WMT SGM files, or ``sacrebleu --echo``)."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

from tqdm import tqdm

from scripts.lab.corpora.files import AtomicBinary, PrepError, iter_lines, log, read_lines, write_lines


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
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f, \
                tqdm(total=int(r.headers.get("Content-Length") or 0) or None, unit="B", unit_scale=True,
                     desc=dest.name, mininterval=10) as progress:
            for chunk in iter(lambda: r.read(1 << 20), b""):
                f.write(chunk)
                progress.update(len(chunk))
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
