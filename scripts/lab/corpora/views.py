"""Views of a prepared corpus folder over the same binarized data: reversed, or with the
validation set as the test split."""
import os
import shutil
from pathlib import Path

from scripts.lab.corpora.files import PrepError, log


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
