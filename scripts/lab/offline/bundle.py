"""Fill one git-ignored folder with what an air-gapped GPU machine lacks (``scripts/offline_bundle.sh DIR``).

The target (docs/GPU.md) has Python 3.12 with torch, numpy, sacrebleu, sentencepiece, tqdm, tabulate,
matplotlib, scikit-learn, PyYAML and regex, but not fairseq, hydra-core, omegaconf, the antlr4
runtime, bitarray or cffi, and no network.  The bundle holds

- ``wheels/``: those packages for cp312 manylinux x86_64 at the versions installed here (``--local-only``:
  for the Python running this instead, to test here; ``--with-local``: both; the travel limit has room
  for the target's set only once ``models/`` nears its budget).  PyPI has only an sdist of fairseq-fixed and of the antlr4
  runtime: fairseq is built per Python from its sdist without its torch C++ extensions
  (scripts/offline/fairseq_wheel_setup.py says why that suffices), antlr4 as one pure-Python wheel;
- ``data/<corpus>/``: the binarized corpora with their test/valid text and subword model (``--data``;
  ``--corpora``: only these), or in MANIFEST.json the command that builds a missing one;
- ``MANIFEST.json``: every file's size and sha256, the requirements, the corpora, and the reference
  models of ``models/`` (tracked: they travel with the working tree, so they are listed, not copied);
- ``requirements.txt``: what scripts/gpu_evidence.sh installs (``pip install --no-index --no-deps``).

The build fails with a clear message when the bundle and the tracked files pass ``limits.TRAVEL_MIB``.
Built wheels are cached in ``~/.cache/fast-decoding-bundle`` (``FAST_DECODING_BUNDLE_CACHE``).
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from scripts.lab.evaluation.reference_models import file_sha256
from scripts.lab.offline import limits

REPO = Path(__file__).resolve().parents[3]
FAIRSEQ = ("fairseq-fixed", "0.12.3.1")
DEPENDENCIES = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "bitarray", "cffi", "pycparser")
SDIST_ONLY = ("antlr4-python3-runtime",)  # no wheel on PyPI: one pure-Python wheel built here serves every Python
CORPORA = ("en-de", "en-de-distilled", "gec-en")  # gec-en: stage 1's IAD verifier and the base part's (offline/base_size.py)
TEACHER = "teacher.pt"  # in a distilled corpus's folder: the checkpoint its distill.json names
CORPUS_COMMANDS = {"en-de": "python -m scripts.build_message_corpus --pair en-de --out {data}/en-de",
                   "gec-en": "python -m scripts.build_gec_corpus --out {data}/gec-en",
                   "en-de-distilled": "built by the train part (scripts.distill) from the trained baseline"}
TARGET = {"python": "3.12", "abi": "cp312",
          "platforms": ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"]}
WHEEL_SETUP = REPO / "scripts" / "offline" / "fairseq_wheel_setup.py"
BUILD_REQUIREMENTS = ["cython", "numpy", "setuptools<81", "wheel"]


class BundleError(RuntimeError):
    """A bundle that cannot be built as asked; the message says how to fix it."""


def cache_root():
    return Path(os.environ.get("FAST_DECODING_BUNDLE_CACHE", Path.home() / ".cache" / "fast-decoding-bundle"))


def pip(python, *args):
    proc = subprocess.run([str(python), "-m", "pip", "-q", "--disable-pip-version-check", *args],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BundleError(f"pip {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def python_tag(python):
    """cpXY of ``python``; None when it does not run (a pyenv shim of a version not selected exits 127)."""
    try:
        out = subprocess.run([str(python), "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                             capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python312():
    """A working Python 3.12: python3.12 on PATH, else one of pyenv's 3.12 versions; None without one."""
    candidates = [shutil.which("python3.12")] + sorted(map(str, (Path.home() / ".pyenv" / "versions").glob("3.12*/bin/python3.12")))
    return next((c for c in candidates if c and python_tag(c) == TARGET["abi"]), None)


def pinned_requirements():
    """name==version of fairseq-fixed and its missing dependencies, at the versions installed here."""
    reqs = [f"{FAIRSEQ[0]}=={FAIRSEQ[1]}"]
    for name in DEPENDENCIES:
        try:
            reqs.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise BundleError(f"{name} is not installed in {sys.executable}: run scripts/setup.sh first "
                              "(the bundle pins the versions this repository is tested with)")
    return reqs


def fairseq_sdist():
    """fairseq-fixed's sdist from the package index (cached)."""
    cache = cache_root()
    found = sorted(cache.glob("fairseq_fixed-*.tar.gz"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    # its setup.py imports torch to read its metadata: use this environment's (no isolated build)
    pip(sys.executable, "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
        f"{FAIRSEQ[0]}=={FAIRSEQ[1]}", "-d", str(cache))
    return sorted(cache.glob("fairseq_fixed-*.tar.gz"))[0]


def build_python(python, tag):
    """A virtual environment of ``python`` with the build requirements (compiler front ends only, no torch)."""
    venv = cache_root() / f"build-{tag}"
    exe = venv / "bin" / "python"
    if not (venv / "READY").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
        pip(exe, "install", *BUILD_REQUIREMENTS)
        (venv / "READY").write_text("ok\n")
    return exe


def fairseq_wheel(python, tag, dest):
    """fairseq-fixed built for ``python`` (cached by the sdist's and the setup file's hashes)."""
    sdist = fairseq_sdist()
    key = hashlib.sha256((file_sha256(sdist) + file_sha256(WHEEL_SETUP)).encode()).hexdigest()[:12]
    built = cache_root() / f"fairseq-{tag}-{key}"
    if not list(built.glob("*.whl")):
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(sdist) as tar:
                tar.extractall(tmp, filter="data")
            src = next(Path(tmp).glob("fairseq_fixed-*"))
            shutil.copy(WHEEL_SETUP, src / "setup.py")
            (src / "pyproject.toml").unlink(missing_ok=True)  # it lists torch as a build requirement
            print(f"[bundle] building fairseq-fixed for {tag} (about a minute)", flush=True)
            pip(build_python(python, tag), "wheel", "--no-deps", "--no-build-isolation", str(src), "-w", str(built))
    for whl in built.glob("*.whl"):
        shutil.copy(whl, dest)


def dependency_wheels(python, tag, reqs, dest):
    """Binary wheels of the dependencies for ``python`` (the target's tags when it is not this machine's)."""
    binary = [r for r in reqs[1:] if r.split("==")[0] not in SDIST_ONLY]
    if tag == TARGET["abi"] and python is None:
        platforms = [w for p in TARGET["platforms"] for w in ("--platform", p)]
        pip(sys.executable, "download", "--no-deps", "--only-binary=:all:", "--python-version", TARGET["python"],
            "--implementation", "cp", "--abi", TARGET["abi"], *platforms, "-d", str(dest), *binary)
    else:
        pip(python, "download", "--no-deps", "--only-binary=:all:", "-d", str(dest), *binary)


def wheels(dest, reqs, python312, local_only, with_local=False):
    """``dest`` filled with the wheels of every wanted Python (the target's; ``local_only``: this
    Python's; ``with_local``: both); returns their tags."""
    dest.mkdir(parents=True, exist_ok=True)
    local_tag = python_tag(sys.executable)
    pythons = {local_tag: sys.executable} if local_only or with_local else {}
    if not local_only:
        py312 = python312 or find_python312()
        if not py312:
            raise BundleError("no working Python 3.12 here to build fairseq-fixed's cp312 wheel: install one (e.g. "
                              "`pyenv install 3.12`) and pass --python312 PATH (--local-only: this Python's wheels only)")
        if python_tag(py312) != TARGET["abi"]:
            raise BundleError(f"--python312 {py312} is {python_tag(py312) or 'not a working Python'}, not {TARGET['abi']}")
        pythons[TARGET["abi"]] = py312
    for tag, python in pythons.items():
        fairseq_wheel(python, tag, dest)
        dependency_wheels(None if tag == TARGET["abi"] and tag != local_tag else python, tag, reqs, dest)
    for req in reqs:
        if req.split("==")[0] in SDIST_ONLY:
            pip(sys.executable, "wheel", "--no-deps", req, "-w", str(dest))
    return sorted(pythons)


def copy_corpora(data, dest, names=CORPORA):
    """{corpus: where it came from, the command that builds it, or that it was left out}; text of the
    train split stays home (training reads the binarized split).  ``names``: the corpora to carry."""
    unknown = sorted(set(names) - set(CORPORA))
    if unknown:
        raise BundleError(f"unknown corpus {', '.join(unknown)}: --corpora takes {', '.join(CORPORA)}")
    found = {}
    for name in CORPORA:
        src = Path(data) / name if data else None
        if name not in names:
            found[name] = {"missing": True, "left_out": True, "command": CORPUS_COMMANDS[name]}
            continue
        if src is None or not (src / "bin").is_dir():
            found[name] = {"missing": True, "command": CORPUS_COMMANDS[name]}
            continue
        record = src / "distill.json"
        teacher = Path(json.loads(record.read_text())["teacher"]) if record.exists() else None
        if teacher is not None and not teacher.is_file():  # the orders trained on it warm-start from its teacher
            raise BundleError(f"{record} names the teacher {teacher}, which is not here: the orders trained on "
                              f"{name} warm-start from it; leave {name} out of --data or restore the teacher")
        target = dest / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(src / "bin", target / "bin")
        for p in src.iterdir():
            if p.is_file() and not p.name.startswith("train."):
                shutil.copy(p, target / p.name)
        found[name] = {"from": str(src.resolve())}
        if teacher is not None:  # the teacher travels with its corpus
            shutil.copy(teacher, target / TEACHER)
            found[name]["teacher"] = str(teacher)
    return found


def reference_models():
    """The tracked reference models (models/MANIFEST.json when there is one, else the files)."""
    folder = REPO / "models"
    manifest = folder / "MANIFEST.json"
    if manifest.exists():
        return json.loads(manifest.read_text())
    return sorted(str(p.relative_to(REPO)) for p in folder.rglob("*.pt")) if folder.is_dir() else []


def check_ignored(dest):
    """A bundle inside the repository must be git-ignored (it travels as an ignored folder, never in git)."""
    try:
        dest.resolve().relative_to(REPO)
    except ValueError:
        return
    if subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", str(dest.resolve())]).returncode != 0:
        raise BundleError(f"{dest} is inside the repository but not git-ignored: use offline-bundle/ "
                          "(in .gitignore) or add the folder to .gitignore")


def check_size(dest):
    bundle, tracked = limits.folder_bytes(dest), limits.tracked_bytes(REPO)
    if bundle + tracked > limits.TRAVEL_MIB * limits.MIB:
        biggest = sorted(((p.stat().st_size, p) for p in dest.rglob("*") if p.is_file()), reverse=True)[:5]
        raise limits.LimitError(
            f"the bundle ({bundle / limits.MIB:.1f} MiB) and the tracked files ({tracked / limits.MIB:.1f} MiB) "
            f"are {(bundle + tracked) / limits.MIB:.1f} MiB, over the {limits.TRAVEL_MIB} MiB that travel; largest: "
            + ", ".join(f"{p.relative_to(dest)} {s / limits.MIB:.1f} MiB" for s, p in biggest)
            + ". Leave a corpus out (--corpora; it can be rebuilt there: see MANIFEST.json) or shrink models/")
    return bundle, tracked


def manifest(dest, reqs, tags, corpora):
    files = {str(p.relative_to(dest)): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
             for p in sorted(dest.rglob("*")) if p.is_file() and p.name != "MANIFEST.json"}
    return {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "requirements": reqs,
            "python_tags": tags, "corpora": corpora, "reference_models": reference_models(), "files": files}


def build(dest, data=None, python312=None, local_only=False, with_local=False, corpora=CORPORA):
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)  # git matches a folder pattern (offline-bundle/) only on a folder
    check_ignored(dest)
    reqs = pinned_requirements()
    shutil.rmtree(dest / "wheels", ignore_errors=True)
    tags = wheels(dest / "wheels", reqs, python312, local_only, with_local)
    shutil.rmtree(dest / "data", ignore_errors=True)  # a corpus left out this time must not travel from the last build
    corpora = copy_corpora(data, dest / "data", corpora)
    (dest / "requirements.txt").write_text("".join(r + "\n" for r in reqs))
    (dest / "MANIFEST.json").write_text(json.dumps(manifest(dest, reqs, tags, corpora), indent=1) + "\n")
    bundle, tracked = check_size(dest)
    print(f"[bundle] {dest}: {bundle / limits.MIB:.1f} MiB (+ {tracked / limits.MIB:.1f} MiB tracked files, "
          f"limit {limits.TRAVEL_MIB} MiB); wheels for {', '.join(tags)}; corpora: "
          + ", ".join(f"{k} ({'left out' if v.get('left_out') else 'missing: ' + v['command'] if v.get('missing') else 'copied'})"
                     for k, v in corpora.items()),
          flush=True)
    return dest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the bundle folder (git-ignored; offline-bundle/ is)")
    ap.add_argument("--data", help="data root with en-de/, en-de-distilled/, gec-en/ (as scripts/convergence_run.sh builds)")
    ap.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=CORPORA,
                    help="the corpora to carry (default: every one --data has); the base part needs gec-en only")
    ap.add_argument("--python312", help="a Python 3.12 interpreter (default: python3.12 on PATH, else pyenv's)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--local-only", action="store_true", help="only this Python's wheels (testing here)")
    which.add_argument("--with-local", action="store_true", help="this Python's wheels beside the target's")
    args = ap.parse_args(argv)
    try:
        build(args.dir, args.data, args.python312, args.local_only, args.with_local, args.corpora)
    except (BundleError, limits.LimitError) as err:
        raise SystemExit(f"error: {err}")


if __name__ == "__main__":
    main()
