"""fairseq-preprocess, run through this interpreter, into a folder written atomically: the one
binarisation of the message corpora, the paper pipelines and distillation."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from scripts.lab.corpora.files import PrepError, log


def binarize(dest, src, tgt, prefixes, joined=False, dicts=None, workers=1):
    """``fairseq-preprocess`` of the splits ``prefixes`` ({"train": prefix, "valid": ...}; the files
    are ``prefix.src`` / ``prefix.tgt``) into ``dest`` (via ``dest.tmp``, renamed when complete; an
    older ``dest`` is replaced).  One dictionary for both sides with ``joined``; existing ones with
    ``dicts`` = (source dictionary, target dictionary)."""
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
           "--destdir", str(tmp), "--workers", str(workers)]
    for split, prefix in prefixes.items():
        cmd += [f"--{split}pref", str(prefix)]
    if joined:
        cmd.append("--joined-dictionary")
    if dicts:
        cmd += ["--srcdict", str(dicts[0]), "--tgtdict", str(dicts[1])]
    log("binarizing: " + " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrepError(f"fairseq-preprocess failed:\n{proc.stderr[-3000:]}")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest
