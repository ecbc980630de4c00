"""The reference models in models/ (scripts/lab/evaluation/reference_models.py): every shipped
entry matches its sha256 and decodes through stock fairseq-generate; a packed checkpoint is fp16 with
its tied embeddings stored once and no optimizer moments, and fairseq-train goes on from it at its
update count and learning rate; the replacement rule, the budget and the corpus check; the reference
run reads the folder (a converged model is not trained again, a training without a run folder goes
on from its snapshot)."""
import argparse
import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import PLUGIN_DIR, REPO, TINY_TRAIN_ARGS, fairseq_cli, run
from scripts.lab.evaluation import reference_models as rm
from scripts import reference_run
from scripts.lab.training import checkpoints, model_list, orchestration, packing

SHIPPED = rm.ReferenceModels(REPO / "models")


def test_the_shipped_folder_is_whole_and_within_budget():
    assert SHIPPED.problems() == []
    tracked = subprocess.run(["git", "ls-files", "*.pt"], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert all(p.startswith("models/") for p in tracked), tracked  # the only checkpoints in git
    assert {f"models/{e['checkpoint']}" for e in SHIPPED.models.values()} >= set(tracked)


@pytest.mark.parametrize("name", sorted(SHIPPED.models))
def test_a_shipped_model_decodes_with_stock_fairseq_generate(name):
    entry = SHIPPED.entry(name)
    for key in ("config", "corpus", "corpus_sha256", "updates", "stopped", "command", "sha256", "valid_bleu", "test_bleu"):
        assert key in entry, key
    if entry["test_bleu"] is None and "base" not in entry:
        pytest.skip(f"{name} does not translate by itself (a GAD drafter); the drafter tests decode with it")
    hypotheses, _ = shipped_hypotheses(name, "--beam", "2")
    assert len(hypotheses) == size_of_test_set(name)  # every test sentence
    assert sum(len(h.split()) for h in hypotheses.values()) > len(hypotheses)  # it translates, not only EOS


def size_of_test_set(name):
    """The number of sentences in shipped model ``name``'s test set."""
    return sum(1 for _ in open(next((SHIPPED.folder / SHIPPED.entry(name)["evaluation_data"]).glob("test.*"))))


def shipped_hypotheses(name, *args):
    """fairseq-generate's hypotheses of shipped model ``name`` on its test set, as its subword tokens (sentence id ->
    tokens: compared token for token), and its log."""
    entry = SHIPPED.entry(name)
    out = run([fairseq_cli("fairseq-generate"), str(SHIPPED.folder / entry["evaluation_data"] / "bin"), "--user-dir",
               PLUGIN_DIR, "--path", str(SHIPPED.checkpoint(name)), "--gen-subset", "test", "--batch-size", "64", "--cpu",
               "--max-len-a", "1.2", "--max-len-b", "10", *entry["generate"].split(), *args], timeout=600)
    return {h.split("\t")[0]: h.split("\t")[2] for h in out.stdout.splitlines() if h.startswith("H-")}, out.stderr


@pytest.mark.parametrize("name", sorted(n for n, e in SHIPPED.models.items() if "base" in e))
def test_shipped_frozen_heads_draft_and_give_their_bases_fairseq_greedy(name):
    """The heads ship on a base of this folder: with --acceptance exact at a fixed width (so they draft on every
    step) their output is the base's under fairseq's own greedy (SequenceGenerator), sentence for sentence."""
    greedy, _ = shipped_hypotheses(SHIPPED.entry(name)["base"], "--beam", "1", "--beam-search", "fairseq")
    drafted, log = shipped_hypotheses(name, "--beam", "1", "--drafter", "blockwise", "--acceptance", "exact",
                                      "--adaptive-block-size", "off")
    assert len(greedy) == size_of_test_set(name)
    assert drafted == greedy
    accepted = float(re.search(r"drafter blockwise \| acceptance exact \|.* mean accepted ([0-9.]+)", log).group(1))
    assert accepted > 1.1  # the heads drafted, and their drafts were taken


def test_a_packed_checkpoint_is_fp16_with_tied_embeddings_once_and_no_moments(tmp_path, tiny_model):
    size = rm.pack_checkpoint(tiny_model, tmp_path / "packed.pt")
    original = torch.load(tiny_model, map_location="cpu", weights_only=False)
    packed = torch.load(tmp_path / "packed.pt", map_location="cpu", weights_only=False)
    for key, tensor in original["model"].items():
        assert packed["model"][key].dtype == (torch.float16 if tensor.is_floating_point() else tensor.dtype)
        assert torch.equal(packed["model"][key].float(), tensor.half().float())
    tied = [k for k in packed["model"] if k.endswith("embed_tokens.weight")]
    assert len(tied) == 2 and packed["model"][tied[0]].data_ptr() == packed["model"][tied[1]].data_ptr()
    unique = {t.data_ptr(): t.numel() * 2 for t in packed["model"].values() if t.is_floating_point()}
    assert size < sum(unique.values()) + 64 * 1024  # stored once: no second copy of the embeddings
    assert packed["last_optimizer_state"]["state"] == {} and packed["cfg"] is not None
    assert packed["optimizer_history"][-1]["num_updates"] == original["optimizer_history"][-1]["num_updates"]


def test_fairseq_train_goes_on_from_a_packed_checkpoint(tmp_path, tiny_corpus, tiny_model):
    """At its update count and on its learning-rate schedule (a restart would warm up again from 1e-7)."""
    packed = tmp_path / "packed.pt"
    rm.pack_checkpoint(tiny_model, packed)
    done = torch.load(packed, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"]
    save = tmp_path / "save"
    run([fairseq_cli("fairseq-train"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task",
               "fast_translation", "--save-dir", str(save), "--max-update", str(done + 3), "--restore-file", str(packed),
               "--disable-validation", "--log-interval", "1"] + [a for a in TINY_TRAIN_ARGS if a != "--no-last-checkpoints"],
              timeout=600)
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == done + 3
    expected = 3e-3 * (50 ** 0.5) * (done + 3) ** -0.5  # inverse_sqrt past its 50 warm-up updates
    lr = state["last_optimizer_state"]["param_groups"][0]["lr"]
    assert abs(lr - expected) < 0.02 * expected, (lr, expected)


def fake_corpus(folder, content="a"):
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "dict.en.txt").write_text(content)
    (folder / "bin" / "test.en-de.en.bin").write_text(content)
    (folder / "test.en").write_text("x\n")
    (folder / "train.en").write_text("not shipped\n")
    return folder


def entry(name, updates, converged=False, valid_bleu=None):
    return {"name": name, "config": "c", "corpus": "en-de", "updates": updates, "valid_bleu": valid_bleu,
            "converged": {"updates": updates} if converged else None, "stopped": "s", "command": "fairseq-train",
            "test_bleu": None}


def test_a_model_is_replaced_only_by_a_better_converged_one(tmp_path, tiny_model):
    corpus = fake_corpus(tmp_path / "en-de")
    store = rm.ReferenceModels(tmp_path / "models")
    assert store.offer(entry("m", 500), tiny_model, corpus)
    assert not store.offer(entry("m", 400), tiny_model, corpus)  # an earlier snapshot
    assert store.offer(entry("m", 900), tiny_model, corpus)
    assert store.offer(entry("m", 800, converged=True, valid_bleu=30.0), tiny_model, corpus)
    assert not store.offer(entry("m", 2000), tiny_model, corpus)  # unconverged never replaces converged
    assert not store.offer(entry("m", 2000, converged=True, valid_bleu=29.0), tiny_model, corpus)
    again = rm.ReferenceModels(tmp_path / "models")
    assert again.entry("m")["updates"] == 800 and again.problems() == []
    assert (tmp_path / "models/data/en-de/test.en").exists() and not (tmp_path / "models/data/en-de/train.en").exists()
    assert again.entry("m")["sha256"] == rm.file_sha256(again.checkpoint("m"))
    again.checkpoint("m").write_bytes(b"changed")
    assert "does not match its sha256" in again.problems()[0]


def test_over_budget_is_refused_and_nothing_is_written(tmp_path, tiny_model):
    corpus = fake_corpus(tmp_path / "en-de")
    store = rm.ReferenceModels(tmp_path / "models")
    store.offer(entry("a", 100), tiny_model, corpus)
    before = sorted(p.name for p in (tmp_path / "models").rglob("*"))
    manifest = json.loads((tmp_path / "models" / rm.MANIFEST).read_text())
    manifest["budget_bytes"] = rm.folder_bytes(tmp_path / "models") + 1000
    (tmp_path / "models" / rm.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(SystemExit, match="over its budget"):
        store.offer(entry("b", 100), tiny_model, corpus)
    assert sorted(p.name for p in (tmp_path / "models").rglob("*")) == before
    assert "b" not in rm.ReferenceModels(tmp_path / "models").models


def test_two_runs_offering_side_by_side_keep_each_others_entries(tmp_path, tiny_model):
    """Stages 1 and 2 of the convergence run pack into the same folder from two processes: an offer
    reads the manifest again under the folder's lock instead of writing back the one it read at start."""
    corpus = fake_corpus(tmp_path / "en-de")
    stage1, stage2 = rm.ReferenceModels(tmp_path / "models"), rm.ReferenceModels(tmp_path / "models")
    assert stage1.offer(entry("baseline", 8000), tiny_model, corpus)
    assert stage2.offer(entry("l2r_kd", 500), tiny_model, corpus)
    assert not stage2.offer(entry("baseline", 7000), tiny_model, corpus)  # stage 1's newer snapshot is seen
    assert set(rm.ReferenceModels(tmp_path / "models").models) == {"baseline", "l2r_kd"}


def test_a_role_is_frozen_once_and_never_replaced(tmp_path, tiny_model):
    ckpts = tmp_path / "checkpoints"
    with pytest.raises(FileNotFoundError, match="no teacher checkpoint"):
        rm.freeze(ckpts, "teacher", tmp_path / "missing.pt")
    assert not (ckpts / "teacher").exists()
    with pytest.raises(ValueError, match="unknown role"):
        rm.freeze(ckpts, "baseline", tiny_model)
    teacher = rm.freeze(ckpts, "teacher", tiny_model)
    assert teacher == ckpts / "teacher" / "checkpoint_best.pt" and teacher.read_bytes() == tiny_model.read_bytes()
    newer = tmp_path / "newer.pt"
    torch.save({"model": {"w": torch.ones(1)}}, newer)  # a later baseline (it is read with the safe loader first)
    assert rm.freeze(ckpts, "teacher", newer).read_bytes() == tiny_model.read_bytes()
    assert rm.freeze(ckpts, "verifier", newer).read_bytes() == newer.read_bytes()  # each role on its own
    # the convergence run's stage 2 reads the roles: the orders the teacher, the drafters the verifier
    from scripts.lab.training.model_list import config_args, read_models
    for m in [m for name in ("convergence_kd.txt", "convergence_extra.txt")
              for m in read_models(REPO / "configs" / "reference" / name)]:
        words = " ".join(config_args(m["config"], "CK", "D", m["baseline"]) + m["extra"])
        assert "CK/baseline/" not in words and "{CKPT}/baseline/" not in words, m["name"]
        assert ("/teacher/" in words) == ("--init-from-l2r" in words), m["name"]


def test_frozen_blockwise_heads_ship_without_their_base_and_decode_as_it(tmp_path, tiny_corpus, tiny_model):
    """Frozen heads beside their base in models/ keep the heads only (the budget): stock fairseq-generate
    loads the base from the checkpoint the config names and decodes exactly as the base; a replaced base
    is refused by name, and the folder check reports it."""
    from test_blockwise import train_heads
    from fairseq_plugins.models import blockwise_transformer as bw

    heads, _ = train_heads(tiny_corpus / "bin", tiny_model, tmp_path / "bw", 10, "--freeze-base")
    store = rm.ReferenceModels(tmp_path / "models")
    assert store.offer(entry("baseline", 300), tiny_model, tiny_corpus)
    assert store.offer(entry("heads", 10), heads, tiny_corpus)
    packed = torch.load(store.checkpoint("heads"), map_location="cpu", weights_only=False)
    assert packed["model"] and all(k.startswith(bw.HEADS) for k in packed["model"])
    assert store.entry("heads")["base"] == "baseline" and store.entry("heads")["bytes"] < store.entry("baseline")["bytes"]
    assert store.problems() == []

    def greedy(name, cwd):
        out = run([fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--path",
                   f"{name}/checkpoint_best.pt", "--gen-subset", "test", "--beam", "1", "--batch-size", "16", "--cpu",
                   "--task", "fast_translation", "--beam-search", "fairseq"], cwd=cwd).stdout
        return sorted(line.split("\t") for line in out.splitlines() if line.startswith("H-"))

    ours, base = greedy("heads", tmp_path / "models"), greedy("baseline", tmp_path / "models")
    assert [(i, tokens) for i, _, tokens in ours] == [(i, tokens) for i, _, tokens in base] and len(ours) > 10
    assert all(abs(float(a[1]) - float(b[1])) < 1e-5 for a, b in zip(ours, base))
    # the heads' base replaced by another model: refused when loading, reported by the folder check
    other = tmp_path / "other.pt"
    state = torch.load(tiny_model, map_location="cpu", weights_only=False)
    state["model"]["encoder.layers.0.fc1.bias"] += 1
    torch.save(state, other)
    assert store.offer(dict(entry("baseline", 300, converged=True, valid_bleu=1.0)), other, tiny_corpus)
    assert "not the one its heads were trained on" in store.problems()[0]
    with pytest.raises(bw.BlockwiseModelError, match="is none of"):
        bw.shipped_base_state(argparse.Namespace(
            base_checkpoint=str(store.checkpoint("baseline")), base_sha256=store.entry("heads")["base_sha256"]))


def test_a_snapshot_of_another_corpus_is_not_resumed(tmp_path, tiny_model):
    store = rm.ReferenceModels(tmp_path / "models")
    store.offer(entry("m", 100), tiny_model, fake_corpus(tmp_path / "en-de"))
    assert store.resumable("m", tmp_path / "en-de") == store.checkpoint("m")
    with pytest.raises(SystemExit, match="another en-de corpus"):
        store.resumable("m", fake_corpus(tmp_path / "other", content="b"))


def record_trainings(monkeypatch, command):
    """The reference run's trainings as ``command(m, args, gpu)``; returns name -> the command each started."""
    started = {}

    class Recorder(orchestration.Job):
        def __init__(self, name, cmd, log, env):
            started[name] = cmd
            super().__init__(name, cmd, log, env)

    monkeypatch.setattr(orchestration, "train_command", command)
    monkeypatch.setattr(orchestration, "Job", Recorder)
    return started


def test_the_run_skips_converged_models_and_resumes_snapshots_from_the_folder(tmp_path, tiny_model, monkeypatch):
    data = tmp_path / "data"
    fake_corpus(data / "en-de")
    store = rm.ReferenceModels(tmp_path / "models")
    store.offer(entry("done", 800, converged=True, valid_bleu=30.0), tiny_model, data / "en-de")
    curve = {"name": "going", "subset": "valid", "beam": 4, "generate": "",
             "points": [{"updates": 300, "valid_loss": 6.0, "bleu": 3.0, "bp": 1.0}]}
    store.offer(dict(entry("going", 300), curve=curve), tiny_model, data / "en-de")
    store.offer(dict(entry("capped", 1000), curve=curve), tiny_model, data / "en-de")  # at this run's --max-update
    lst = tmp_path / "list.txt"
    lst.write_text("done cfg en-de\ngoing cfg en-de\nfresh cfg en-de\ncapped cfg en-de\n")
    started = record_trainings(monkeypatch, lambda m, args, gpu: [sys.executable, "-c", "pass"])
    reference_run.main(["--models", str(lst), "--data", str(data), "--out", str(tmp_path / "out"), "--parallel", "1",
                        "--poll-seconds", "0.05", "--models-dir", str(tmp_path / "models"), "--flatten-reference", "none",
                        "--max-update", "1000"])
    assert "done" not in started and "capped" not in started  # fairseq-train would add an update to "capped"
    assert started["going"][-2:] == ["--restore-file", str(store.checkpoint("going"))]
    assert "--restore-file" not in started["fresh"]
    assert json.loads((tmp_path / "out" / "going" / "curve.json").read_text())["points"] == curve["points"]  # its earlier points count


def test_a_converged_model_is_packed_with_its_bleu_and_command(tmp_path, tiny_corpus, tiny_model):
    out, models = tmp_path / "out", tmp_path / "models"
    updates = torch.load(tiny_model, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"]
    (out / "checkpoints" / "m").mkdir(parents=True)
    (out / "checkpoints" / "m" / f"checkpoint_1_{updates}.pt").symlink_to(tiny_model)
    (out / "m").mkdir()
    points = [{"updates": updates, "valid_loss": 5.0, "bleu": 1.5, "bp": 1.0}]
    (out / "m" / "curve.json").write_text(json.dumps(
        {"name": "m", "points": points, "converged": {"updates": updates, "min_points": 4, "tolerance": 0.3,
                                                       "min_updates": 0, "reference": None}}))
    lst = tmp_path / "list.txt"
    lst.write_text(f"m configs/models/baseline.args {tiny_corpus.name} beam=2\n")
    argv = ["--models", str(lst), "--data", str(tiny_corpus.parent), "--out", str(out), "--models-dir", str(models),
            "--name", "m", "--max-update", "5000"]
    reference_run.main(argv + ["--pack"])
    entry = rm.ReferenceModels(models).entry("m")
    assert entry["updates"] == updates and entry["converged"]["updates"] == updates and "converged at" in entry["stopped"]
    assert entry["valid_bleu"] == 1.5 and isinstance(entry["test_bleu"], float) and entry["beam"] == 2
    assert entry["command"].startswith("fairseq-train DATA/") and "--max-update 5000" in entry["command"]
    assert str(tmp_path) not in entry["command"] and "--user-dir fairseq_plugins " in entry["command"]
    assert entry["evaluation_data"] == f"data/{tiny_corpus.name}" and (models / "data" / tiny_corpus.name / "bin").exists()
    assert rm.ReferenceModels(models).problems() == []
    shipped = models / "data" / tiny_corpus.name  # what measuring needs, and no more (the budget)
    assert sorted(p.name for p in shipped.iterdir() if p.is_file()) == [  # valid's raw text: nothing reads it
        "spm.model", "subword", "test.de", "test.en"]
    assert sorted(p.name for p in (shipped / "bin").iterdir()) == sorted(
        p.name for p in (tiny_corpus / "bin").iterdir() if p.name.startswith(("dict.", "valid.", "test.")))


def snapshot_run_folders(tmp_path, tiny_model, line):
    """(data, out, packed, list, checkpoints folder) of a run of the one model ``line`` names, whose snapshot at
    400 updates is in tmp_path/models; ``packed`` is where a faked packer writes the names it packs."""
    data, out, name = tmp_path / "data", tmp_path / "out", line.split()[0]
    fake_corpus(data / "en-de")
    rm.ReferenceModels(tmp_path / "models").offer(entry(name, 400), tiny_model, data / "en-de")
    lst = tmp_path / "list.txt"
    lst.write_text(line + "\n")
    return data, out, tmp_path / "packed", lst, out / "checkpoints" / name


def test_a_model_in_training_goes_into_the_folder_every_n_updates_past_its_snapshot(tmp_path, tiny_model, monkeypatch,
                                                                                    capsys):
    """--snapshot-every 1000 with a snapshot at 400 updates there: the points at 1,500 and 2,500 are packed
    (each 1,000 past the one before), once each, while the training runs; 500, 1,000, 2,000 and 3,000 are not."""
    data, out, packed, lst, folder = snapshot_run_folders(tmp_path, tiny_model, "m cfg en-de")

    def command(m, args, gpu):  # saves six interval checkpoints, then trains on until two snapshots are packed
        return [sys.executable, "-c", f"import pathlib, time; f = pathlib.Path({str(folder)!r}); "
                "f.mkdir(parents=True, exist_ok=True); [(f / f'checkpoint_1_{u}.pt').write_text('') "
                f"for u in range(500, 3001, 500)]; p = pathlib.Path({str(packed)!r}); t = time.time()\n"
                "while time.time() - t < 30 and not (p.exists() and len(p.read_text().split()) >= 2): time.sleep(0.05)"]

    def score_one(self, m):  # the scorer: the next unscored checkpoint, BLEU rising 5 a point (never flat)
        path = self.curve_path(m["name"])
        return [sys.executable, "-c", f"import json, pathlib; p = pathlib.Path({str(path)!r}); "
                "c = json.loads(p.read_text()) if p.exists() else {'points': []}; "
                "done = {q['updates'] for q in c['points']}; "
                "u = min(u for u in range(500, 3001, 500) if u not in done); "
                "c['points'].append({'updates': u, 'valid_loss': 1.0, 'bleu': u / 100, 'bp': 1.0}); "
                "t = p.with_suffix('.tmp'); t.write_text(json.dumps(c)); t.replace(p)"]  # atomic, as the scorer's

    record_trainings(monkeypatch, command)
    monkeypatch.setattr(orchestration.ReferenceRun, "curve_command", score_one)
    monkeypatch.setattr(orchestration.ReferenceRun, "pack_command", lambda self, name: [
        sys.executable, "-c", f"open({str(packed)!r}, 'a').write({name!r} + '\\n')"])
    reference_run.main(["--models", str(lst), "--data", str(data), "--out", str(out), "--parallel", "1",
                        "--poll-seconds", "0.05", "--models-dir", str(tmp_path / "models"), "--flatten-reference",
                        "none", "--max-update", "5000", "--snapshot-every", "1000"])
    assert packed.read_text() == "m\nm\n"
    queued = [line.split("its snapshot at ")[1].split()[0] for line in capsys.readouterr().out.splitlines()
              if "its snapshot at" in line]
    assert queued == ["1500", "2500"]


def test_a_model_without_a_curve_is_snapshotted_from_its_interval_checkpoints_while_it_trains(tmp_path, tiny_model,
                                                                                           monkeypatch, capsys):
    """A drafter has no curve to count updates by: with a snapshot at 400 updates and --snapshot-every 1000, its
    interval checkpoints up to 1,500 queue one snapshot, those up to 3,000 another, and the end of its training
    packs it once more (done at its updates)."""
    data, out, packed, lst, folder = snapshot_run_folders(tmp_path, tiny_model, "drafter cfg en-de curve=no")

    def command(m, args, gpu):  # saves interval checkpoints to 1,500, waits for a pack, then to 3,000
        return [sys.executable, "-c", f"import pathlib, time; f = pathlib.Path({str(folder)!r}); "
                f"p = pathlib.Path({str(packed)!r}); f.mkdir(parents=True, exist_ok=True)\n"
                "def wait(n):\n t = time.time()\n"
                " while time.time() - t < 30 and not (p.exists() and len(p.read_text().split()) >= n): time.sleep(0.05)\n"
                "[(f / f'checkpoint_1_{u}.pt').write_text('') for u in range(500, 1501, 500)]; wait(1)\n"
                "[(f / f'checkpoint_1_{u}.pt').write_text('') for u in range(2000, 3001, 500)]; wait(2)"]

    record_trainings(monkeypatch, command)
    monkeypatch.setattr(orchestration.ReferenceRun, "pack_command", lambda self, name: [
        sys.executable, "-c", f"open({str(packed)!r}, 'a').write({name!r} + '\\n')"])
    reference_run.main(["--models", str(lst), "--data", str(data), "--out", str(out), "--parallel", "1",
                        "--poll-seconds", "0.05", "--models-dir", str(tmp_path / "models"), "--flatten-reference",
                        "none", "--max-update", "5000", "--snapshot-every", "1000"])
    queued = [line.split("its snapshot at ")[1].split()[0] for line in capsys.readouterr().out.splitlines()
              if "its snapshot at" in line]
    assert queued == ["1500", "3000"]
    assert packed.read_text() == "drafter\n" * 3


def test_a_snapshot_without_a_curve_packs_the_newest_whole_checkpoint(tmp_path, tiny_model):
    """checkpoint_last.pt while fairseq copies it there is unreadable: the interval checkpoint it copies from
    is packed; once whole (the end of a training past the last interval) it is packed, not an older one."""
    updates = torch.load(tiny_model, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"]
    m = {"name": "drafter", "curve": False}
    folder = tmp_path / "checkpoints" / "drafter"
    folder.mkdir(parents=True)
    (folder / f"checkpoint_1_{updates}.pt").symlink_to(tiny_model)
    last = folder / "checkpoint_last.pt"
    last.write_bytes(b"PK\x03\x04 half-written")
    assert checkpoints.snapshot_checkpoint(m, tmp_path, {"points": []}) == folder / f"checkpoint_1_{updates}.pt"
    last.unlink()
    last.symlink_to(tiny_model)
    assert checkpoints.snapshot_checkpoint(m, tmp_path, {"points": []}) == last
    (folder / f"checkpoint_1_{updates + 500}.pt").symlink_to(tiny_model)  # named newer than the last one's updates
    assert checkpoints.snapshot_checkpoint(m, tmp_path, {"points": []}) == folder / f"checkpoint_1_{updates + 500}.pt"


def test_a_snapshot_packs_the_newest_scored_checkpoint_not_the_one_being_saved(tmp_path, tiny_corpus, tiny_model):
    """While the training saves checkpoint_last.pt and the next interval checkpoint (unreadable halfway), a
    snapshot packs the newest checkpoint its curve has scored, with that point's validation BLEU."""
    out, models = tmp_path / "out", tmp_path / "models"
    updates = torch.load(tiny_model, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"]
    folder = out / "checkpoints" / "m"
    folder.mkdir(parents=True)
    (folder / f"checkpoint_1_{updates}.pt").symlink_to(tiny_model)
    for halfway in (f"checkpoint_1_{updates + 500}.pt", "checkpoint_last.pt"):
        (folder / halfway).write_bytes(b"PK\x03\x04 half-written")
    (out / "m").mkdir()
    (out / "m" / "curve.json").write_text(json.dumps(
        {"name": "m", "points": [{"updates": updates, "valid_loss": 5.0, "bleu": 1.5, "bp": 1.0}]}))
    lst = tmp_path / "list.txt"
    lst.write_text(f"m configs/models/baseline.args {tiny_corpus.name}\n")
    reference_run.main(["--models", str(lst), "--data", str(tiny_corpus.parent), "--out", str(out), "--models-dir",
                        str(models), "--name", "m", "--max-update", "5000", "--pack"])
    shipped = rm.ReferenceModels(models).entry("m")
    assert shipped["updates"] == updates and shipped["valid_bleu"] == 1.5 and not shipped["converged"]
    assert shipped["stopped"].startswith(f"not converged: {updates} of at most 5000")


def test_a_model_without_a_curve_goes_into_the_folder_when_its_training_ends_and_is_not_trained_again(
        tmp_path, tiny_model, monkeypatch):
    """A drafter or blockwise heads has no BLEU curve to converge on: done at its updates, it is packed at
    once (a lost machine costs only the model in training), and a run that finds it there leaves it."""
    data, out = tmp_path / "data", tmp_path / "out"
    fake_corpus(data / "en-de")
    lst = tmp_path / "list.txt"
    lst.write_text("drafter cfg en-de curve=no updates=0.5\nl2r cfg en-de\n")
    packed = tmp_path / "packed"

    def command(m, args, gpu):  # fairseq-train at its end: checkpoint_last.pt at the model's updates
        last = out / "checkpoints" / m["name"] / "checkpoint_last.pt"
        return [sys.executable, "-c", f"import pathlib, torch; p = pathlib.Path({str(last)!r}); "
                f"p.parent.mkdir(parents=True, exist_ok=True); torch.save({{'optimizer_history': "
                f"[{{'num_updates': {model_list.max_update_of(m, args)}}}]}}, p)"]

    started = record_trainings(monkeypatch, command)
    monkeypatch.setattr(orchestration.ReferenceRun, "pack_command", lambda self, name: [
        sys.executable, "-c", f"open({str(packed)!r}, 'a').write({name!r} + '\\n')"])
    argv = ["--models", str(lst), "--data", str(data), "--out", str(out), "--parallel", "1", "--poll-seconds", "0.05",
            "--models-dir", str(tmp_path / "models"), "--flatten-reference", "none", "--max-update", "1000"]
    reference_run.main(argv)
    assert packed.read_text() == "drafter\n"  # the model with a curve waits for its rule

    store = rm.ReferenceModels(tmp_path / "models")
    store.offer(dict(entry("drafter", 500), stopped="trained its 500 updates"), tiny_model, data / "en-de")
    started.clear()
    packed.unlink()
    shutil.rmtree(out)  # a new machine: the drafter is only in the folder
    reference_run.main(argv)
    assert "drafter" not in started and "l2r" in started and not packed.exists()


def test_a_model_without_a_curve_is_packed_with_its_budget_as_where_it_stopped(tmp_path, tiny_corpus, tiny_model):
    out, models = tmp_path / "out", tmp_path / "models"
    updates = torch.load(tiny_model, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"]
    (out / "checkpoints" / "heads").mkdir(parents=True)
    (out / "checkpoints" / "heads" / "checkpoint_last.pt").symlink_to(tiny_model)
    lst = tmp_path / "list.txt"
    lst.write_text(f"heads configs/models/baseline.args {tiny_corpus.name} curve=no\n")
    argv = ["--models", str(lst), "--data", str(tiny_corpus.parent), "--out", str(out), "--models-dir", str(models),
            "--name", "heads", "--pack"]
    reference_run.main(argv + ["--max-update", str(updates)])
    e = rm.ReferenceModels(models).entry("heads")
    assert e["stopped"] == f"trained its {updates} updates (no BLEU curve: judged by the rows that decode with it)"
    assert e["updates"] == updates and e["converged"] is None and e["valid_bleu"] is None and e["test_bleu"] is None
    (models / "MANIFEST.json").unlink()
    reference_run.main(argv + ["--max-update", str(updates + 1)])
    assert rm.ReferenceModels(models).entry("heads")["stopped"].startswith(f"not finished: {updates} of its {updates + 1}")


def test_a_failed_offer_removes_what_it_staged_and_a_leftover_is_named_with_its_rm(tmp_path, tiny_model):
    store = rm.ReferenceModels(tmp_path / "models")
    with pytest.raises(FileNotFoundError):  # the corpus to ship is not there: after the checkpoint was staged
        store.offer(entry("m", 100), tiny_model, tmp_path / "no-corpus")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == []
    assert store.problems() == []
    left = tmp_path / "models" / f".m{rm.STAGED}"  # what an offer killed outright (SIGKILL) leaves; git ignores it
    left.write_bytes(b"half a checkpoint")
    with pytest.raises(SystemExit) as err:
        store.check_whole()
    line = next(line for line in str(err.value.code).splitlines() if str(left) in line)
    subprocess.run(line.rsplit(": ", 1)[1], shell=True, check=True, cwd=tmp_path)  # the command it names
    assert not left.exists() and store.problems() == []
    store.check_whole()


def test_the_demos_model_lines_say_only_what_is_so():
    """No 'test BLEU None' for a model without a BLEU of its own, no 'the run goes on from here' read
    long after the run that packed a snapshot ended."""
    lines = [SHIPPED.describe(name) for name in SHIPPED.models]
    assert not [line for line in lines if "None" in line or "goes on from here" in line]
    for name, e in SHIPPED.models.items():
        assert (f"test BLEU {e['test_bleu']}" in SHIPPED.describe(name)) == (e["test_bleu"] is not None)
    assert "goes on from here" not in packing.SNAPSHOT
