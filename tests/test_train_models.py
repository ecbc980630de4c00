"""scripts/train_models.sh: per-line update fractions, extra arguments with placeholders, DONE
markers, and the last checkpoint for models trained on a distilled corpus (a fake train.sh
records what it is given)."""
import shutil
import subprocess

from conftest import REPO

FAKE_TRAIN = """#!/usr/bin/env bash
config=$1 data=$2 save=$3; shift 3
mkdir -p "$save"
echo "$config $data $*" >> "$(dirname "$0")/../calls.txt"
echo best > "$save/checkpoint_best.pt"; echo last > "$save/checkpoint_last.pt"
echo "done training" > "$save/train.log"
"""


def test_lines_with_fractions_extra_arguments_and_distilled_corpora(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "train_models.sh", tmp_path / "scripts" / "train_models.sh")
    (tmp_path / "scripts" / "train.sh").write_text(FAKE_TRAIN)
    (tmp_path / "scripts" / "train.sh").chmod(0o755)
    (tmp_path / "a.args").write_text("--arch x --base {CKPT}/base/checkpoint_best.pt\n")
    data = tmp_path / "data"
    for corpus in ("gold", "kd"):
        (data / corpus / "bin").mkdir(parents=True)
    (data / "kd" / "distill.json").write_text("{}")
    (tmp_path / "list.txt").write_text(
        "# comment\n"
        "base a.args gold\n"
        "fine a.args kd updates=0.4 --init-from-l2r {CKPT}/base/checkpoint_best.pt --x {DATA}/y  # note\n")
    ckpt = tmp_path / "ckpt"
    cmd = ["bash", "scripts/train_models.sh", "list.txt", "data", "ckpt", "1000"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == 2
    ck, dt = str(ckpt.resolve()), str(data.resolve())
    assert calls[0].endswith("--max-update 1000")
    assert calls[1].endswith(f"--max-update 400 --init-from-l2r {ck}/base/checkpoint_best.pt --x {dt}/y")
    assert (ckpt / "fine" / "train.args").read_text() == f"--arch x --base {ck}/base/checkpoint_best.pt\n"
    assert (ckpt / "base" / "DONE-1000").exists() and (ckpt / "fine" / "DONE-400").exists()
    assert (ckpt / "base" / "checkpoint_best.pt").read_text() == "best\n"  # gold: fairseq's best
    assert (ckpt / "fine" / "checkpoint_best.pt").read_text() == "last\n"  # distilled: the last
    assert "distilled targets" in out
    subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=True)  # done: nothing retrained
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == 2
