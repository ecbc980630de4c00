"""scripts/reference_run.py: model lists (update fractions, extra arguments) and one model's
learning curve computed from its interval checkpoints."""
import json
import subprocess
import sys

from conftest import REPO
from scripts import reference_run


def test_model_list_lines(tmp_path):
    lst = tmp_path / "list.txt"
    lst.write_text("# c\nbase configs/models/baseline.args en-de\n"
                   "ht configs/orders/head_tail.args kd updates=0.5 --init-from-l2r {CKPT}/base/checkpoint_best.pt\n")
    models = reference_run.read_models(lst)
    assert [m["name"] for m in models] == ["base", "ht"]
    assert models[1]["update_scale"] == 0.5 and models[1]["extra"] == ["--init-from-l2r", "{CKPT}/base/checkpoint_best.pt"]
    args = reference_run.argparse.Namespace(out=str(tmp_path / "out"), data=str(tmp_path), max_update=1000, interval=100,
                                            seed=1, stop_minutes=0, train_args=[])
    cmd = reference_run.train_command(models[1], args, gpu=False)
    assert cmd[cmd.index("--max-update") + 1] == "500"
    assert cmd[cmd.index("--init-from-l2r") + 1] == str(tmp_path / "out" / "checkpoints" / "base" / "checkpoint_best.pt")


def test_curve_of_interval_checkpoints(tmp_path, tiny_corpus, tiny_model):
    out = tmp_path / "out"
    folder = out / "checkpoints" / "m"
    folder.mkdir(parents=True)
    (folder / "checkpoint_1_100.pt").symlink_to(tiny_model)
    (out / "m").mkdir()
    (out / "m" / "train.log").write_text('2026-01-01 00:00:00 | INFO | valid | {"epoch": 1, "valid_loss": "5.5", '
                                         '"valid_num_updates": "100"}\n')  # fairseq-train --log-format json
    subprocess.run([sys.executable, "-m", "scripts.reference_run", "--curve", "--name", "m", "--corpus",
                    tiny_corpus.name, "--data", str(tiny_corpus.parent), "--out", str(out), "--curve-subset", "test",
                    "--curve-beam", "2"], check=True, capture_output=True, text=True, cwd=REPO)
    curve = json.loads((out / "m" / "curve.json").read_text())
    (point,) = curve["points"]
    assert point["updates"] == 100 and point["valid_loss"] == 5.5
    assert 0 <= point["bleu"] <= 100 and 0 < point["bp"] <= 1
