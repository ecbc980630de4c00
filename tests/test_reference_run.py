"""scripts/reference_run.py (its logic in scripts/lab/training/): model lists (update fractions, curve beams and
generation arguments, extra arguments), one model's learning curve scored incrementally from its interval
checkpoints, and the orchestration: the convergence watch stops a training's process group, a converged model
is not trained again, summary.json keeps the models of earlier runs, and no training outlives the command."""
import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from scripts.lab.evaluation import jobs
from scripts import reference_run
from scripts.lab.training import checkpoints, frozen_roles, model_list, orchestration, train_command
from scripts.lab.training import run as training_run


def test_model_list_lines(tmp_path):
    lst = tmp_path / "list.txt"
    lst.write_text("# c\nbase configs/models/baseline.args en-de\n"
                   "ht configs/orders/head_tail.args kd updates=0.5 beam=10 generate=\"--double-topk --nbest 1\" "
                   "--init-from-l2r {CKPT}/base/checkpoint_best.pt  # a comment\n")
    models = model_list.read_models(lst)
    assert [m["name"] for m in models] == ["base", "ht"]
    assert models[0]["beam"] is None and models[0]["generate"] == "" and models[0]["update_scale"] == 1.0
    assert models[1]["update_scale"] == 0.5 and models[1]["extra"] == ["--init-from-l2r", "{CKPT}/base/checkpoint_best.pt"]
    assert models[1]["beam"] == 10 and models[1]["generate"] == "--double-topk --nbest 1"
    args = argparse.Namespace(out=str(tmp_path / "out"), data=str(tmp_path), max_update=1000, interval=100,
                                            seed=1, stop_minutes=0, train_args=[])
    cmd = train_command.train_command(models[1], args, gpu=False)
    assert cmd[cmd.index("--max-update") + 1] == "500"
    assert cmd[cmd.index("--init-from-l2r") + 1] == str(tmp_path / "out" / "checkpoints" / "base" / "checkpoint_best.pt")
    assert not any("=" in w and not w.startswith("-") for w in cmd[cmd.index("--user-dir"):])  # no key reaches fairseq
    curve_cmd = orchestration.ReferenceRun(models, argparse.Namespace(
        out="o", data="d", skip_training=True, flatten_reference="none", curve_subset="valid", curve_beam=4),
        gpu=False).curve_command(models[1])
    assert curve_cmd[curve_cmd.index("--curve-beam") + 1] == "10" and "--generate=--double-topk --nbest 1" in curve_cmd


@pytest.mark.parametrize("line, message", [
    ("ht cfg kd beem=10", "unknown key 'beem='"),
    ("ht cfg kd beam=0", "bad beam= value"),
    ("ht cfg kd beam=four", "bad beam= value"),
    ("ht cfg kd curve=off", "bad curve= value"),
    ("ht cfg kd generate=\"--double-topk", "quote"),
    ("ht cfg", "NAME CONFIG CORPUS"),
])
def test_bad_model_list_line_names_the_line(tmp_path, line, message):
    lst = tmp_path / "list.txt"
    lst.write_text(f"base cfg kd\n{line}\n")
    with pytest.raises(SystemExit) as err:
        model_list.read_models(lst)
    assert f"list.txt:2 ({line!r})" in str(err.value) and message in str(err.value)


def test_convergence_lists_decode_head_tail_at_its_papers_beam_with_doubletopk():
    for name in ("convergence_kd.txt", "convergence_extra.txt", "orders.txt"):
        models = {m["name"]: m for m in model_list.read_models(REPO / "configs" / "reference" / name)}
        if "head_tail" in models:
            assert models["head_tail"]["beam"] == 10 and models["head_tail"]["generate"] == "--double-topk", name
        assert all(m["beam"] is None for n, m in models.items() if n != "head_tail"), name
    models = model_list.read_models(REPO / "configs" / "reference" / "convergence_kd.txt")
    # a GAD drafter's checkpoint (--task nar_drafter) does not translate by itself, frozen heads translate as
    # their base does: no BLEU curve for them
    assert {m["name"] for m in models if not m["curve"]} == {m["name"] for m in models
                                                             if "gad_drafter" in m["name"] or "frozen" in m["name"]}
    # the reference trains before every model with a curve: every order's floor is 3x the updates at which
    # it flattened (the drafters, with no curve, may go first)
    assert [m["name"] for m in models if m["curve"]][0] == "l2r_kd"
    # what models/ ships trains first; the comparisons that do not ship (a list of their own) after the GEC-like verifier
    extra = {m["name"] for m in model_list.read_models(REPO / "configs" / "reference" / "convergence_extra.txt")}
    assert extra == {"ibdecoder_scratch", "gad_drafter", "gad_drafter_shallow_feat", "gad_drafter_shallow_eagle", "r2l",
                     "sa_l2r_c2"} and not extra & {m["name"] for m in models}
    # the set fits models/' 40 MiB with one drafter (stand-ins packed, 2026-11-27: 39.7 MiB)
    assert [m["name"] for m in models if "gad_drafter" in m["name"]] == ["gad_drafter_shallow"]
    script = (REPO / "scripts" / "convergence_run.sh").read_text()
    assert script.index('stage1 "$parallel"  # the GEC-like verifier') < script.index("convergence_extra  #")
    assert '[ "${2:-convergence_kd}" = convergence_kd ] || ship=()' in script  # comparisons never go into models/


def test_the_scorer_passes_over_a_model_without_a_curve(tmp_path, tiny_model):
    lst = tmp_path / "list.txt"
    lst.write_text("drafter cfg kd curve=no\nl2r cfg kd curve=yes\n")
    models = model_list.read_models(lst)
    assert [m["curve"] for m in models] == [False, True]
    for m in models:
        folder = tmp_path / "out" / "checkpoints" / m["name"]
        folder.mkdir(parents=True)
        (folder / "checkpoint_1_100.pt").symlink_to(tiny_model)
    run = orchestration.ReferenceRun(models, argparse.Namespace(
        out=str(tmp_path / "out"), data=str(tmp_path), skip_training=True, flatten_reference="none",
        curve_subset="valid", curve_beam=4), gpu=False)
    run.curve_command = lambda m: [sys.executable, "-c", "pass"]
    run.start_scorer()
    assert run.scorer[0] == "l2r"
    run.scorer[1].stop()
    run.scorer = None
    run.start_scorer()  # l2r's set was just given; the drafter is never given
    assert run.scorer is None


def test_curve_scores_only_new_checkpoints_and_skips_unreadable_ones(tmp_path, tiny_corpus, tiny_model):
    out = tmp_path / "out"
    folder = out / "checkpoints" / "m"
    folder.mkdir(parents=True)
    for updates in (100, 200, 250):
        (folder / f"checkpoint_1_{updates}.pt").symlink_to(tiny_model)
    (folder / "checkpoint_1_150.pt").write_bytes(tiny_model.read_bytes()[:4096])  # a training killed while saving
    (out / "m").mkdir()
    (out / "m" / "train.log").write_text("".join(
        f'2026-01-01 00:00:00 | INFO | valid | {{"epoch": 1, "valid_loss": "{loss}", "valid_num_updates": "{u}"}}\n'
        for u, loss in ((100, 5.5), (200, 5.25))))  # fairseq-train --log-format json
    scored = {"updates": 100, "valid_loss": None, "bleu": 12.34, "bp": 0.5}  # an earlier run's point
    (out / "m" / "curve.json").write_text(json.dumps({"name": "m", "subset": "test", "beam": 2, "generate": "",
                                                      "points": [scored]}))
    cmd = [sys.executable, "-m", "scripts.reference_run", "--curve", "--name", "m", "--corpus", tiny_corpus.name,
           "--data", str(tiny_corpus.parent), "--out", str(out), "--curve-subset", "test", "--curve-beam", "2",
           "--generate=", "--max-points", "1"]
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO)
    assert "skipped" in proc.stdout and "checkpoint_1_150.pt" in proc.stdout
    curve = json.loads((out / "m" / "curve.json").read_text())
    first, second = curve["points"]
    assert first == dict(scored, valid_loss=5.5)  # not decoded again; its loss filled in from the log
    assert second["updates"] == 200 and second["valid_loss"] == 5.25  # one new point (--max-points 1): not 250
    assert 0 <= second["bleu"] <= 100 and 0 < second["bp"] <= 1 and curve["sentences"] == 120
    wrong_beam = subprocess.run(cmd[:cmd.index("--curve-beam") + 1] + ["4"], capture_output=True, text=True, cwd=REPO)
    assert wrong_beam.returncode != 0 and "scored with beam 2, not 4" in wrong_beam.stderr


def test_a_training_resumes_from_its_newest_readable_checkpoint(tmp_path, tiny_model):
    folder = tmp_path / "m"
    folder.mkdir()
    assert checkpoints.restore_file(folder) is None  # a fresh start
    (folder / "checkpoint_last.pt").symlink_to(tiny_model)
    assert checkpoints.restore_file(folder) is None  # fairseq's own checkpoint_last.pt
    (folder / "checkpoint_last.pt").unlink()
    (folder / "checkpoint_last.pt").write_bytes(tiny_model.read_bytes()[:4096])  # killed while copying it
    (folder / "checkpoint_1_100.pt").symlink_to(tiny_model)
    (folder / "checkpoint_1_200.pt").write_bytes(tiny_model.read_bytes()[:4096])
    assert checkpoints.restore_file(folder) == folder / "checkpoint_1_100.pt"


def flat_curve(last_updates):
    """Five points, the last two within 0.3 BLEU: the rule holds at ``last_updates``."""
    bleus = [10.0, 20.0, 30.0, 35.0, 35.2]
    return {"name": "m", "subset": "valid", "beam": 4, "generate": "", "points": [
        {"updates": last_updates - 500 * (4 - i), "valid_loss": None, "bleu": b, "bp": 1.0} for i, b in enumerate(bleus)]}


def fake_training(out, name, curve, seconds):
    """A stand-in for fairseq-train: notes its pid, writes the curve its scorer would, then runs ``seconds``."""
    script = (f"import json, os, pathlib, time; d = pathlib.Path({str(out / name)!r}); d.mkdir(parents=True, exist_ok=True); "
              f"(d / 'pid').write_text(str(os.getpid())); (d / 'curve.json').write_text(json.dumps({curve!r})); "
              f"time.sleep({seconds})")
    return [sys.executable, "-c", script]


def group_alive(pgid, wait=3.0):
    """Whether a live (not zombie) process is in group ``pgid`` ``wait`` seconds from now, or as soon as none is."""
    deadline = time.time() + wait
    while True:
        alive = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            alive |= fields[0] != "Z" and int(fields[2]) == pgid  # state, ppid, pgrp
        if not alive or time.time() > deadline:
            return alive
        time.sleep(0.1)


def test_watch_stops_a_converged_training_and_does_not_restart_it(tmp_path, monkeypatch):
    out = tmp_path / "out"
    lst = tmp_path / "list.txt"
    lst.write_text("l2r_kd cfg kd\nr2l cfg kd\n")
    curves = {"l2r_kd": flat_curve(2500), "r2l": flat_curve(5000)}  # r2l is flat, but before 3 x 2,500
    seconds = {"l2r_kd": 60, "r2l": 2}
    monkeypatch.setattr(orchestration, "train_command",
                        lambda m, args, gpu: fake_training(out, m["name"], curves[m["name"]], seconds[m["name"]]))
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"earlier": {"points": [], "converged": None}}))
    argv = ["--models", str(lst), "--data", str(tmp_path), "--out", str(out), "--parallel", "2", "--poll-seconds", "0.1"]
    start = time.time()
    reference_run.main(argv)
    assert time.time() - start < 20  # not the 60 s the L2R stand-in would run
    pid = int((out / "l2r_kd" / "pid").read_text())
    assert not group_alive(pid)
    converged = json.loads((out / "l2r_kd" / "curve.json").read_text())["converged"]
    assert converged["updates"] == 2500 and converged["min_updates"] == 0
    assert "converged" not in json.loads((out / "r2l" / "curve.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"earlier", "l2r_kd", "r2l"}  # the earlier run's entry kept
    assert summary["l2r_kd"]["converged"]["updates"] == 2500 and summary["r2l"]["converged"] is None

    (out / "l2r_kd" / "pid").unlink()
    reference_run.main(argv + ["--names", "l2r_kd", "r2l"])
    assert not (out / "l2r_kd" / "pid").exists()  # converged: not trained again
    assert (out / "r2l" / "pid").exists()


def test_threads_reach_each_training(tmp_path, monkeypatch, capsys):
    """--threads 2 (one training alone on 2 cores) sets the training's OpenMP and MKL threads; more threads than
    cores in all are warned of, 0 is refused."""
    out = tmp_path / "out"
    lst = tmp_path / "list.txt"
    lst.write_text("typo cfg kd\n")
    note = "import os, pathlib; pathlib.Path({!r}).write_text(os.environ['OMP_NUM_THREADS'] + os.environ['MKL_NUM_THREADS'])"
    monkeypatch.setattr(orchestration, "train_command",
                        lambda m, args, gpu: [sys.executable, "-c", note.format(str(tmp_path / "train_threads"))])
    argv = ["--models", str(lst), "--data", str(tmp_path), "--out", str(out), "--parallel", "1", "--poll-seconds", "0.1",
            "--flatten-reference", "none"]
    monkeypatch.setattr(training_run.os, "cpu_count", lambda: 2)
    reference_run.main(argv + ["--threads", "2"])
    assert (tmp_path / "train_threads").read_text() == "22"
    assert "warning" not in capsys.readouterr().out  # one training, 2 threads, 2 cores
    reference_run.main(argv + ["--threads", "2", "--parallel", "2"])
    assert "more threads than the 2 cores" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        reference_run.main(argv + ["--threads", "0"])


def test_trainings_die_with_the_command(tmp_path, monkeypatch):
    """The finally: of the run stops every training it started (here: the command interrupted)."""
    out = tmp_path / "out"
    monkeypatch.setattr(orchestration, "train_command",
                        lambda m, args, gpu: [sys.executable, "-c", "import time; time.sleep(60)"])
    args = argparse.Namespace(out=str(out), data=str(tmp_path), skip_training=False, parallel=2, threads=1,
                                            flatten_reference="l2r_kd", min_points=5, tolerance=0.3, poll_seconds=0.1)
    run = orchestration.ReferenceRun([{"name": "a", "curve": True}, {"name": "b", "curve": True}], args, gpu=False)
    groups = []

    def interrupted(seconds):  # the run's first pause (stop() waits with time.sleep, too)
        if not groups:
            groups.extend(job.group for job in run.trainings.values())
            raise KeyboardInterrupt
        sleep(seconds)

    sleep = time.sleep
    monkeypatch.setattr(orchestration.time, "sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert len(groups) == 2 and not any(group_alive(g) for g in groups)


def test_a_job_dies_with_a_killed_parent(tmp_path):
    """SIGKILL leaves no finally: to run; the kernel's parent-death signal still ends the job."""
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from scripts.lab.evaluation import jobs; "
        "job = jobs.Job('sleep', [sys.executable, '-c', 'import time; time.sleep(60)'], sys.argv[2], None); "
        "print(job.group, flush=True); time.sleep(60)"), str(REPO), str(tmp_path / "job.log")],
        stdout=subprocess.PIPE, text=True, cwd=REPO)
    group = int(parent.stdout.readline())
    assert group_alive(group, wait=0)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert not group_alive(group)


def test_job_stop_ends_the_whole_group(tmp_path):
    job = jobs.Job("sh", ["sh", "-c", "sleep 60 & sleep 60"], tmp_path / "log", None)  # a child of the job, too
    time.sleep(0.3)
    assert group_alive(job.group, wait=0)
    assert job.stop(grace=5) == -signal.SIGTERM and not group_alive(job.group)


def test_a_model_without_a_reference_converges_at_three_times_where_its_own_curve_first_flattened(tmp_path):
    """``--flatten-reference self`` (stage 1): two flat points can be a pause (the typo verifier: 68.93,
    68.87 at 2,500 and 3,000 updates, then 77 at 10,000).  A record made under another rule (no floor)
    is judged again, not trusted; the model converges once flat at 3x where it first flattened."""
    out = tmp_path / "out"
    (out / "typo").mkdir(parents=True)
    bleus = {500: 35.0, 1000: 56.2, 1500: 62.2, 2000: 67.3, 2500: 68.93, 3000: 68.87}
    curve = {"name": "typo", "points": [{"updates": u, "valid_loss": None, "bleu": b, "bp": 1.0} for u, b in bleus.items()],
             "converged": {"updates": 3000, "min_points": 4, "tolerance": 0.3, "min_updates": 0, "reference": None}}
    (out / "typo" / "curve.json").write_text(json.dumps(curve))
    args = argparse.Namespace(out=str(out), data=str(tmp_path), skip_training=True,
                                            flatten_reference="self", min_points=4, tolerance=0.3)
    run = orchestration.ReferenceRun([{"name": "typo", "curve": True}], args, gpu=False)
    run.watch()
    assert "typo" not in run.converged and "converged" not in json.loads((out / "typo" / "curve.json").read_text())
    for updates, bleu in ((4000, 73.4), (5000, 74.7), (7000, 76.1), (8500, 76.9), (8500 + 250, 77.0)):
        curve["points"].append({"updates": updates, "valid_loss": None, "bleu": bleu, "bp": 1.0})
        curve.pop("converged", None)
        (out / "typo" / "curve.json").write_text(json.dumps(curve))
        run.watch()
        assert "typo" not in run.converged  # flat at 8,750 but short of 3 x 3,000
    curve["points"].append({"updates": 9000, "valid_loss": None, "bleu": 77.1, "bp": 1.0})
    (out / "typo" / "curve.json").write_text(json.dumps(curve))
    run.watch()
    record = json.loads((out / "typo" / "curve.json").read_text())["converged"]
    assert "typo" in run.converged and record["updates"] == 9000 and record["min_updates"] == 9000
    assert record["reference"] == "self"


def test_a_training_at_its_max_update_is_not_started_again(tmp_path, monkeypatch):
    """fairseq-train resumed at --max-update runs one more update and can overwrite checkpoint_best.pt,
    the verifier a drafter was trained against: the run must leave such a model alone."""
    import torch

    out = tmp_path / "out"
    lst = tmp_path / "list.txt"
    lst.write_text("done cfg kd\nhalf cfg kd\n")
    for name, updates in (("done", 1000), ("half", 999)):
        (out / "checkpoints" / name).mkdir(parents=True)
        torch.save({"optimizer_history": [{"num_updates": updates}]}, out / "checkpoints" / name / "checkpoint_last.pt")
    monkeypatch.setattr(orchestration, "train_command",
                        lambda m, args, gpu: fake_training(out, m["name"], flat_curve(100), 0))
    reference_run.main(["--models", str(lst), "--data", str(tmp_path), "--out", str(out), "--parallel", "2",
                        "--poll-seconds", "0.1", "--max-update", "1000", "--flatten-reference", "none"])
    assert not (out / "done" / "pid").exists()
    assert (out / "half" / "pid").exists()


def test_an_exported_checkpoint_loads_with_fairseq(tmp_path, tiny_corpus, tiny_model):
    """--export drops the optimizer state but keeps what fairseq's loader reads (extra_state's iterator)."""
    from fairseq import checkpoint_utils

    (tmp_path / "out" / "checkpoints" / "m").mkdir(parents=True)
    (tmp_path / "out" / "checkpoints" / "m" / "checkpoint_best.pt").symlink_to(tiny_model)
    checkpoints.export([{"name": "m", "corpus": tiny_corpus.name}], tmp_path / "out", tmp_path / "export", tiny_corpus.parent)
    exported = tmp_path / "export" / "m" / "checkpoint_best.pt"
    assert torch_load(exported)["last_optimizer_state"] is None
    models, _ = checkpoint_utils.load_model_ensemble([str(exported)], arg_overrides={"data": str(tiny_corpus / "bin")})
    assert len(models) == 1


def torch_load(path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def test_freeze_copies_a_checkpoint_once_and_needs_no_data(tmp_path, tiny_model, capsys):
    reference_run.main(["--out", str(tmp_path / "ref"), "--freeze", "teacher", str(tiny_model)])
    teacher = tmp_path / "ref" / "checkpoints" / "teacher" / "checkpoint_best.pt"
    assert teacher.read_bytes() == tiny_model.read_bytes() and "updates)" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="no verifier checkpoint"):
        reference_run.main(["--out", str(tmp_path / "ref"), "--freeze", "verifier", str(tmp_path / "missing.pt")])
    with pytest.raises(SystemExit):  # training still needs the data root
        reference_run.main(["--out", str(tmp_path / "ref")])
    assert "--data is required" in capsys.readouterr().err


def test_on_a_new_machine_the_orders_floor_comes_from_the_shipped_reference_curve(tmp_path):
    """The run folder is new, so it has no curve of L2R-KD, which converged on another machine and ships in
    models/ with its curve: the orders' floor is read from there, and an order whose curve meets the rule at
    it is stopped and packed (before, it found no floor and trained on to --max-update)."""
    import json

    from scripts.lab.evaluation import learning_curve

    out, store = tmp_path / "out", tmp_path / "models"
    store.mkdir()
    reference = [{"updates": 100 * i, "bleu": b} for i, b in enumerate([10.0, 20.0, 30.0, 35.0, 35.1], 1)]
    (store / "MANIFEST.json").write_text(json.dumps({"models": {"l2r_kd": {
        "name": "l2r_kd", "updates": 500, "converged": {"updates": 500}, "curve": {"points": reference}}}}))
    models = [{"name": "l2r_kd", "curve": True, "update_scale": 1.0},
              {"name": "ibdecoder", "curve": True, "update_scale": 1.0}]
    floor = learning_curve.min_updates(reference, 5, 0.3)
    order = [{"updates": 500 * i, "bleu": b} for i, b in enumerate([30.0, 33.0, 34.0, 34.5, 34.6], 1)]
    assert order[-1]["updates"] >= floor
    (out / "ibdecoder").mkdir(parents=True)
    learning_curve.write(out / "ibdecoder" / "curve.json", {"points": order})

    def run_with(models_dir):
        args = argparse.Namespace(out=str(out), data=str(tmp_path), skip_training=True, parallel=1,
                                                flatten_reference="l2r_kd", max_update=30000, min_points=5,
                                                tolerance=0.3, models_dir=models_dir)
        run = orchestration.ReferenceRun(models, args, gpu=False)
        run.log = lambda line: None
        return run

    without = run_with(None)
    assert without.reference_floor() is None
    without.watch()
    assert "ibdecoder" not in without.converged
    run = run_with(str(store))
    assert run.reference_floor() == floor
    run.watch()
    assert "ibdecoder" in run.converged and run.to_pack == ["ibdecoder"]
    assert learning_curve.read(out / "ibdecoder" / "curve.json")["converged"]["min_updates"] == floor


def test_a_model_whose_frozen_role_is_missing_waits_for_a_later_run(tmp_path, capsys):
    """The drafters of stage 2 train for the verifier frozen after stage 1: run beside stage 1 they are
    not started (and not failed) until it exists."""
    lst = tmp_path / "list.txt"
    lst.write_text("drafter configs/models/gad_drafter_shallow.args en-de baseline=verifier curve=no\n")
    (m,) = model_list.read_models(lst)
    args = argparse.Namespace(out=str(tmp_path / "ref"), data=str(tmp_path), max_update=10, interval=5,
                                            seed=1, stop_minutes=0, train_args=[], parallel=1, skip_training=False,
                                            flatten_reference="none", models_dir=None)
    needs = train_command.missing_inputs(train_command.train_command(m, args, gpu=False), tmp_path / "ref" / "checkpoints")
    assert needs == [str(tmp_path / "ref" / "checkpoints" / "verifier" / "checkpoint_best.pt")]
    run = orchestration.ReferenceRun([m], args, gpu=False)
    run.start_trainings()
    assert not run.trainings and run.waiting == {"drafter": needs} and not run.pending


def test_a_pinned_teacher_comes_from_the_repositorys_history_checked_by_sha256(tmp_path):
    """configs/reference/teacher.txt names a baseline snapshot that models/ has since replaced: any clone
    with the history gets the same bytes, and a wrong sha256 or a missing commit stops with a clear error."""
    import hashlib

    words = [w for w in (REPO / "configs/reference/teacher.txt").read_text().split("\n") if w and not w.startswith("#")]
    assert len(words) == 1 and len(words[0].split()) == 3  # COMMIT PATH SHA256
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "model.pt").write_bytes(b"old weights")
    subprocess.run(git + ["add", "model.pt"], check=True)
    subprocess.run(git + ["commit", "-qm", "a snapshot"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (repo / "model.pt").write_bytes(b"new weights")  # the working tree moved on
    pin = tmp_path / "teacher.txt"
    pin.write_text(f"# c\n{commit} model.pt {hashlib.sha256(b'old weights').hexdigest()}\n")
    dest = frozen_roles.pinned_checkpoint(pin, tmp_path / "out.pt", repo)
    assert dest.read_bytes() == b"old weights"
    pin.write_text(f"{commit} model.pt {hashlib.sha256(b'new weights').hexdigest()}\n")
    with pytest.raises(SystemExit, match="does not have the sha256"):
        frozen_roles.pinned_checkpoint(pin, tmp_path / "out2.pt", repo)
    pin.write_text(f"{'0' * 40} model.pt {hashlib.sha256(b'old weights').hexdigest()}\n")
    with pytest.raises(SystemExit, match="git fetch --unshallow"):
        frozen_roles.pinned_checkpoint(pin, tmp_path / "out3.pt", repo)
    assert not (tmp_path / "out2.pt").exists() and not (tmp_path / "out3.pt").exists()


def test_stop_minutes_count_from_where_a_training_resumes(tmp_path, monkeypatch, tiny_model):
    """fairseq's --stop-time-hours is compared with the training time a resumed checkpoint saved: a model
    resumed after 2 hours of training must get --stop-minutes 30 more, not stop at once (as gec_tiny did)."""
    import torch

    from fairseq_plugins.compat import load_checkpoint

    out = tmp_path / "out"
    folder = out / "checkpoints" / "resumed"
    folder.mkdir(parents=True)
    state = load_checkpoint(tiny_model)
    state.setdefault("extra_state", {})["previous_training_time"] = 7200.0
    torch.save(state, folder / "checkpoint_last.pt")
    asked = {}
    monkeypatch.setattr(orchestration, "train_command",
                        lambda m, args, gpu: asked.__setitem__(m["name"], args.stop_minutes) or [sys.executable, "-c", ""])  # the last call: the one started
    args = argparse.Namespace(out=str(out), data=str(tmp_path), skip_training=False, parallel=2, threads=1, seed=1,
                              flatten_reference="none", max_update=10 ** 6, models_dir=None, stop_minutes=30.0,
                              interval=5, train_args=[])
    run = orchestration.ReferenceRun([{"name": n, "curve": True} for n in ("resumed", "fresh")], args, gpu=False)
    try:
        run.start_trainings()
    finally:
        run.stop_all()
    assert asked == {"resumed": 150.0, "fresh": 30.0}
    m = {"name": "x", "corpus": "c", "config": "configs/models/gec_tiny.args", "extra": [], "baseline": None,
         "updates": None}
    cmd = train_command.train_command(m, train_command.counted_from(args, folder / "checkpoint_last.pt"), gpu=False)
    assert cmd[cmd.index("--stop-time-hours") + 1] == "2.5000"
    assert train_command.counted_from(argparse.Namespace(stop_minutes=0), folder / "checkpoint_last.pt").stop_minutes == 0


def test_runs_side_by_side_share_the_training_slots(tmp_path, monkeypatch):
    """Stages 1 and 2 run side by side with --parallel 2 each: two trainings between them, and the slot
    one frees goes to the other run's next model at once (the orders no longer wait for L2R-KD)."""
    from scripts.lab.evaluation.jobs import TrainingSlots

    out = tmp_path / "out"
    monkeypatch.setattr(orchestration, "train_command",
                        lambda m, args, gpu: [sys.executable, "-c", "import time; time.sleep(60)"])
    args = argparse.Namespace(out=str(out), data=str(tmp_path), skip_training=False, parallel=2, threads=1,
                                            flatten_reference="none", max_update=10, models_dir=None)
    other = TrainingSlots(out / "slots", 2)  # the run beside this one trains a model
    assert other.take("baseline")
    run = orchestration.ReferenceRun([{"name": n, "curve": True} for n in ("l2r_kd", "ibdecoder")], args, gpu=False)
    try:
        run.start_trainings()
        assert list(run.trainings) == ["l2r_kd"] and [m["name"] for m in run.pending] == ["ibdecoder"]
        run.start_trainings()  # still no slot
        assert list(run.trainings) == ["l2r_kd"]
        other.free("baseline")
        run.start_trainings()
        assert list(run.trainings) == ["l2r_kd", "ibdecoder"] and not run.pending
        assert not other.take("typo")  # now this run holds both
        run.trainings["l2r_kd"].stop()
        run.collect_trainings()  # its training ended: the slot is free for the run beside
        assert other.take("typo")
    finally:
        run.stop_all()
        other.free("typo")
    after = TrainingSlots(out / "slots", 1)
    assert after.take("x")  # stopping the run let its slots go
    after.free("x")


def test_the_floor_warning_names_only_models_the_rule_judges(tmp_path):
    """When L2R-KD flattens, the models whose cap comes before the orders' floor are named; a model
    without a curve (a drafter, blockwise heads) trains its set length and is not among them."""
    from scripts.lab.evaluation import learning_curve

    out = tmp_path / "out"
    args = argparse.Namespace(out=str(out), data=str(tmp_path), skip_training=False, parallel=2, threads=1,
                                            flatten_reference="l2r_kd", max_update=1000, min_points=5, tolerance=0.3)
    models = [{"name": "l2r_kd", "curve": True, "update_scale": 1.0},
              {"name": "ibdecoder", "curve": True, "update_scale": 1.0},
              {"name": "drafter", "curve": False, "update_scale": 0.2}]
    run = orchestration.ReferenceRun(models, args, gpu=False)
    logged = []
    run.log = logged.append
    points = [{"updates": 100 * i, "bleu": b} for i, b in enumerate([10.0, 20.0, 30.0, 35.0, 35.1], 1)]
    (out / "l2r_kd").mkdir(parents=True)
    learning_curve.write(out / "l2r_kd" / "curve.json", {"points": points})
    floor = run.reference_floor()
    assert floor == learning_curve.min_updates(points, 5, 0.3) > 1000
    assert len(logged) == 1 and "ibdecoder stop at --max-update first" in logged[0] and "drafter" not in logged[0]


def test_a_pack_under_a_smaller_max_update_than_the_trainings_is_refused(tiny_model):
    """The manifest's command and its 'of at most N updates' are this run's --max-update: packing gec_tiny (trained
    to 12,000) with the default 8000 wrote 8000 into both.  tiny_model: 300 updates under --max-update 300."""
    from scripts.lab.training import packing

    with pytest.raises(SystemExit, match=r"at 300 updates, past this run's --max-update 200: run this with the "
                                         r"training's own, --max-update 300"):
        packing.check_max_update({"name": "m"}, tiny_model, 300, 200)
    with pytest.raises(SystemExit, match=r"--max-update 150$"):  # a model that trains 2x the run's --max-update
        packing.check_max_update({"name": "m", "update_scale": 2.0}, tiny_model, 300, 200)
    packing.check_max_update({"name": "m"}, tiny_model, 300, 300)
    packing.check_max_update({"name": "m"}, tiny_model, 300, 5000)  # a snapshot that a later run trains further
