"""The air-gapped GPU path (issue 32, docs/GPU.md), dry-run on a CPU: a bundle built by
scripts/offline_bundle.sh, installed by scripts/gpu_evidence.sh into a fresh --target folder, both
parts run with --device cpu on a few sentences and a few updates, and their output held to the
return limits.  Building the bundle needs the package index (PyPI)."""
import json
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest
import torch

from scripts.lab.evaluation.reference_models import ReferenceModels, file_sha256
from scripts.lab.offline import bundle as bundle_mod
from scripts.lab.offline import base_size, limits
from tests.conftest import REPO, cached, run

DRY_TRAIN, DRY_TEST = 60, 4  # sentences of the dry run's corpora
GEC_STDLIB = ("argparse.py", "subprocess.py", "typing.py")  # a few hundred sentences, built in seconds


def small_gec():
    """A data root holding a small gec-en, built by scripts/build_gec_corpus.py from a few standard-library
    modules (cached)."""
    def build(out):
        stdlib = out / "stdlib"
        stdlib.mkdir()
        for name in GEC_STDLIB:
            shutil.copy(Path(sysconfig.get_paths()["stdlib"]) / name, stdlib / name)
        run([sys.executable, "-m", "scripts.build_gec_corpus", "--out", str(out / "gec-en"), "--stdlib", str(stdlib),
             "--test-size", "6", "--valid-size", "4", "--vocab-size", "300", "--train-copies", "2", "--workers", "1"],
            cwd=REPO)

    return cached("gec-dry", [GEC_STDLIB, file_sha256(REPO / "scripts" / "build_gec_corpus.py")], build)


def dry_corpora(corpus, root):
    """en-de cut from the tiny test corpus (its dictionaries) and the small gec-en (:func:`small_gec`): a data
    root as convergence_run.sh makes."""
    de = root / "en-de"
    sub = root / "sub"
    sub.mkdir(parents=True)
    de.mkdir()
    for split, n in (("train", DRY_TRAIN), ("valid", DRY_TEST), ("test", DRY_TEST)):
        for lang in ("en", "de"):
            for src, dest in ((corpus / f"{split}.sub.{lang}", sub / f"{split}.{lang}"), (corpus / f"{split}.{lang}", de / f"{split}.{lang}")):
                dest.write_text("".join(src.read_text().splitlines(keepends=True)[:n]))
    for name in ("spm.model", "subword"):
        shutil.copy(corpus / name, de / name)
    run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "en", "--target-lang", "de",
         "--trainpref", str(sub / "train"), "--validpref", str(sub / "valid"), "--testpref", str(sub / "test"),
         "--srcdict", str(corpus / "bin" / "dict.en.txt"), "--tgtdict", str(corpus / "bin" / "dict.de.txt"),
         "--destdir", str(de / "bin"), "--workers", "1"])
    shutil.copytree(small_gec() / "gec-en", root / "gec-en")
    shutil.rmtree(sub)
    return root


@pytest.fixture(scope="module")
def offline_bundle(tiny_corpus, tmp_path_factory):
    """A bundle of this Python's wheels and the dry-run corpora, built by the script."""
    data = dry_corpora(tiny_corpus, tmp_path_factory.mktemp("dry-data"))
    dest = tmp_path_factory.mktemp("bundle") / "offline-bundle"
    run(["bash", str(REPO / "scripts" / "offline_bundle.sh"), str(dest), "--data", str(data), "--local-only"])
    return dest


@pytest.fixture(scope="module")
def shipped(offline_bundle, tiny_model, tmp_path_factory):
    """A models/ folder as the repository ships one: a baseline (the tiny model) with its en-de set, no
    GEC-like verifier, so the speed part decodes the one and trains the other briefly."""
    folder = tmp_path_factory.mktemp("models")
    entry = {"name": "baseline", "config": "configs/models/baseline.args", "corpus": "en-de", "updates": 300,
             "converged": None, "stopped": "a test's", "command": "fairseq-train", "valid_bleu": None, "test_bleu": None}
    assert ReferenceModels(folder).offer(entry, tiny_model, offline_bundle / "data" / "en-de")
    return folder


def evidence(bundle, out, part, *extra, work):
    """scripts/gpu_evidence.sh as on the GPU machine, with the dry run's sizes."""
    return run(["bash", str(REPO / "scripts" / "gpu_evidence.sh"), str(bundle), str(out), "--part", part,
                "--device", "cpu", "--work", str(work), "--max-update", "2", "--interval", "2", "--sentences", "2", "--check-sentences", "2",
                "--runs", "1", "--batch-sizes", "2", "--train-args", "--max-tokens 256", *extra])


def records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_bundle_manifest(offline_bundle):
    manifest = json.loads((offline_bundle / "MANIFEST.json").read_text())
    assert manifest["requirements"][0] == "fairseq-fixed==0.12.3.1"
    assert (offline_bundle / "requirements.txt").read_text().split() == manifest["requirements"]
    for rel, entry in manifest["files"].items():  # every file listed with its true size and hash
        assert (offline_bundle / rel).stat().st_size == entry["bytes"]
        assert file_sha256(offline_bundle / rel) == entry["sha256"]
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert any(f"fairseq_fixed-0.12.3.1-{tag}" in rel for rel in manifest["files"])
    assert manifest["corpora"]["en-de"] == {"from": manifest["corpora"]["en-de"]["from"]}
    assert manifest["corpora"]["en-de-distilled"]["missing"]  # the train part distils it there
    assert not list((offline_bundle / "data" / "en-de").glob("train.*"))  # raw train text stays home
    assert (offline_bundle / "data" / "en-de" / "bin" / "train.en-de.en.bin").exists()


def test_dry_run_both_parts(offline_bundle, shipped, tmp_path):
    """Both parts into one OUT, as the two commands of one visit may write: every step ran, on the
    bundle's fairseq, and OUT comes back whole."""
    out = tmp_path / "out"
    evidence(offline_bundle, out, "speed", "--bench-rows", "reference.json", "--bench-only", "IAD k=10 q=2 (", "Jacobi",
             "--models-dir", str(shipped), work=tmp_path / "speed")
    evidence(offline_bundle, out, "train", "--names", "baseline", "l2r_kd", "ibdecoder", work=tmp_path / "train")
    summary = (out / "summary.md").read_text()
    assert "## speed" in summary and "## train" in summary  # the second part kept the first's section
    rows = records(out)
    assert not [r for r in rows if r.get("status") in ("skipped", "failed")]
    env = [r for r in rows if r["step"] == "environment"]
    assert len(env) == 2 and all(r["device"] == "cpu" for r in env)
    assert "gec_tiny trained briefly first" in summary  # the shipped baseline decoded, the missing verifier trained
    assert "/fast-decoding-site." in summary  # fairseq came from the bundle's --target folder, not the venv's
    bench = [r for r in rows if r["step"] == "benchmark reference.json"]
    methods = {r["method"] for r in bench}
    assert {"en-de: fairseq greedy", "gec->en: IAD k=10 q=2 (fixed width)"} <= methods, methods
    assert all(r["batch_size"] == 2 and r["dtype"] == "fp32" and r["tokens_per_s"] > 0 for r in bench)
    lossless = [r for r in bench if "Jacobi" in r["method"] or "IAD" in r["method"]]
    assert lossless and all(r["identical_to_greedy"] == 1.0 for r in lossless)
    assert any(r["step"] == "gpu_check" and r["finished"] for r in rows)
    probe = [r for r in rows if r["step"] == "cost probe"]  # the dry run's: tiny, batch 1 and 2, widths 1 and 3
    assert sorted((r["size"], r["batch"], r["width"]) for r in probe) == [("tiny", b, w) for b in (1, 2) for w in (1, 3)]
    assert all(r["iterations"] > 0 and r["dtype"] == "fp32" for r in probe)
    assert "#### tiny: transformer_fast_tiny" in summary and "| batch | plain step ms | m=1 | m=3 |" in summary
    bleu = {(r["model"], r["beam"]): r for r in rows if r["step"] == "test_bleu"}
    assert set(bleu) == {("l2r_kd", 1), ("l2r_kd", 4), ("ibdecoder", 1), ("ibdecoder", 4)}
    assert bleu[("l2r_kd", 4)]["gap_to_l2r_kd"] == 0.0
    distill = [r for r in rows if r["step"] == "distill"]
    assert distill and distill[0]["sentences"] == DRY_TRAIN
    packed = {}
    for archive in sorted(out.glob("models-*.tar.gz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                state = torch.load(tar.extractfile(member), map_location="cpu", weights_only=False)
                packed[member.name] = state
    assert set(packed) == {"baseline.pt", "l2r_kd.pt", "ibdecoder.pt"}
    for state in packed.values():
        assert state["last_optimizer_state"]["state"] == {}  # packed as models/ keeps them: no moments, resumable
        assert {v.dtype for v in state["model"].values() if v.is_floating_point()} == {torch.float16}
    names = {p.name for p in out.iterdir()}
    assert {"summary.md", "results.jsonl", "logs-speed.tar.gz", "logs-train.tar.gz"} <= names
    assert limits.output_problems(out) == []


def test_deadline_skips_and_says_so(offline_bundle, shipped, tmp_path):
    """A deadline that leaves no time: every step is skipped with its reason, and OUT still comes back."""
    out = tmp_path / "out"
    evidence(offline_bundle, out, "speed", "--deadline", "1", "--models-dir", str(shipped), work=tmp_path / "work")
    rows = records(out)
    skipped = {r["step"] for r in rows if r.get("status") == "skipped"}
    assert {"environment", "bootstrap", "gpu_check", "cost probe", "benchmark reference.json fp32"} <= skipped, skipped
    assert "skipped" in (out / "summary.md").read_text()
    assert (out / "logs-speed.tar.gz").exists() and limits.output_problems(out) == []


def test_output_limits_catch_each_breach(tmp_path):
    ok = tmp_path / "ok"
    (ok / "a" / "b").mkdir(parents=True)
    (ok / "a" / "b" / "x.txt").write_text("x")
    assert limits.output_problems(ok) == []
    for make, expected in (
        (lambda d: [(d / f"f{i}").write_text("x") for i in range(limits.OUT_FILES + 1)], "files >"),
        (lambda d: (d / "big.bin").write_bytes(b"\0" * (limits.OUT_FILE_MIB * limits.MIB + 1)), "MiB >"),
        (lambda d: ((d / "a" / "b" / "c").mkdir(parents=True), (d / "a" / "b" / "c" / "x").write_text("x")), "deeper"),
        (lambda d: (d / "bad name").write_text("x"), "name outside"),
    ):
        folder = tmp_path / expected.replace(" ", "_")
        folder.mkdir()
        make(folder)
        problems = limits.output_problems(folder)
        assert any(expected in p for p in problems), (expected, problems)


def test_bundle_over_the_travel_limit_fails_clearly(tmp_path, monkeypatch):
    (tmp_path / "w.bin").write_bytes(b"\0" * limits.MIB)
    monkeypatch.setattr(limits, "TRAVEL_MIB", 1)
    with pytest.raises(limits.LimitError, match="over the 1 MiB that travel.*w.bin"):
        bundle_mod.check_size(tmp_path)


def test_cp312_wheel_is_built_when_python312_exists(tmp_path):
    """The target's wheel set: fairseq-fixed built by a Python 3.12 from its sdist, its compiled
    modules loadable there, and every dependency as a cp312 or pure wheel."""
    py312 = bundle_mod.find_python312()
    if not py312:
        pytest.skip("no working Python 3.12 (PATH or pyenv): the cp312 bundle cannot be built on this machine")
    dest = tmp_path / "wheels"
    tags = bundle_mod.wheels(dest, bundle_mod.pinned_requirements(), py312, local_only=False)
    assert "cp312" in tags
    names = [p.name for p in dest.iterdir()]
    for name in ("fairseq_fixed", "bitarray", "cffi"):
        assert any(n.startswith(name) and "cp312" in n for n in names), (name, names)
    target = tmp_path / "site"
    subprocess.run([py312, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--find-links", str(dest),
                    "--target", str(target), *bundle_mod.pinned_requirements()], check=True)
    probe = ("import importlib.util, sys\n"
             "for name in ('libbleu', 'data/data_utils_fast'):\n"
             "    f = next(__import__('pathlib').Path(sys.argv[1], 'fairseq').glob(name + '.cpython-312-*.so'))\n"
             "    spec = importlib.util.spec_from_file_location(name.split('/')[-1], f)\n"
             "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n")
    build_python = bundle_mod.build_python(py312, "cp312")  # has numpy, which data_utils_fast needs
    subprocess.run([str(build_python), "-c", probe, str(target)], check=True)


def test_a_distilled_corpus_travels_with_its_teacher(tmp_path, tiny_model):
    """The orders on the GPU warm-start from the teacher of the distilled corpus they train on: the bundle
    carries it beside the corpus, and refuses a corpus whose teacher is gone."""
    kd = tmp_path / "data" / "en-de-distilled"
    (kd / "bin").mkdir(parents=True)
    (kd / "bin" / "train.en-de.de.bin").write_bytes(b"x")
    (kd / "train.sub.de").write_text("stays home\n")
    (kd / "distill.json").write_text(json.dumps({"teacher": str(tiny_model)}))
    found = bundle_mod.copy_corpora(tmp_path / "data", tmp_path / "bundle")
    assert found["en-de-distilled"]["teacher"] == str(tiny_model)
    assert (tmp_path / "bundle" / "en-de-distilled" / bundle_mod.TEACHER).read_bytes() == tiny_model.read_bytes()
    assert not (tmp_path / "bundle" / "en-de-distilled" / "train.sub.de").exists()
    (kd / "distill.json").write_text(json.dumps({"teacher": str(tmp_path / "gone.pt")}))
    with pytest.raises(bundle_mod.BundleError, match="names the teacher"):
        bundle_mod.copy_corpora(tmp_path / "data", tmp_path / "bundle2")
    assert not (tmp_path / "bundle2" / "en-de-distilled").exists()  # nothing half-copied


# ---- the base part (issue 48) ----
TINY_BASE = ("--arch transformer_fast_tiny --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 "
             "--decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
             "--encoder-attention-heads 2 --decoder-attention-heads 2 --max-tokens 256")


@pytest.fixture(scope="module")
def gec_bundle(tmp_path_factory):
    """A bundle's data as ``offline_bundle.sh DIR --corpora gec-en`` leaves it: a small gec-en built by
    scripts/build_gec_corpus.py from a few standard-library modules.  No wheels: the base part runs on
    this Python's fairseq (the install path is test_dry_run_both_parts')."""
    data = small_gec()
    dest = tmp_path_factory.mktemp("gec-bundle")
    found = bundle_mod.copy_corpora(data, dest / "data", ["gec-en"])
    assert found["gec-en"] == {"from": str((data / "gec-en").resolve())} and found["en-de"]["left_out"]
    return dest


def base_part(bundle, out, work, *extra):
    """The base part as gpu_evidence.sh runs it, on the CPU with a tiny architecture and 2 updates."""
    return run([sys.executable, "-m", "scripts.lab.offline.evidence", "--bundle", str(bundle), "--out", str(out),
                "--part", "base", "--device", "cpu", "--work", str(work), "--max-update", "2", "--runs", "1",
                "--base-sentences", "2", "--base-cpu-batch-sizes", "2", "--base-units", "greedy", "--base-cpu-jobs", "1",
                "--train-args", TINY_BASE, *extra], cwd=REPO)


def test_gec_en_travels_without_its_train_text(tmp_path):
    """--corpora gec-en: the bundle carries gec-en's bin/, test/valid text and subword model, nothing of
    the corpora left out, and says which were left out."""
    src = tmp_path / "data" / "gec-en"
    (src / "bin").mkdir(parents=True)
    for name in ("bin/train.gec-en.en.bin", "test.en", "test.gec", "valid.en", "spm.model", "subword", "train.en"):
        (src / name).write_text(name)
    (tmp_path / "data" / "en-de" / "bin").mkdir(parents=True)
    found = bundle_mod.copy_corpora(tmp_path / "data", tmp_path / "bundle", ["gec-en"])
    assert found["gec-en"] == {"from": str(src.resolve())}
    assert found["en-de"]["left_out"] and not (tmp_path / "bundle" / "en-de").exists()
    copied = sorted(str(p.relative_to(tmp_path / "bundle" / "gec-en")) for p in (tmp_path / "bundle" / "gec-en").rglob("*")
                    if p.is_file())
    assert copied == ["bin/train.gec-en.en.bin", "spm.model", "subword", "test.en", "test.gec", "valid.en"]
    with pytest.raises(bundle_mod.BundleError, match="--corpora takes"):
        bundle_mod.copy_corpora(tmp_path / "data", tmp_path / "bundle2", ["gec"])


def test_base_units_cover_every_gec_row_with_the_baselines_it_is_timed_against():
    methods = {r["method"] for r in json.loads(base_size.ROWS.read_text())}
    assert set().union(*base_size.UNITS.values()) == methods
    for name, unit in base_size.UNITS.items():
        assert "fairseq greedy" in unit, name
        if any("beam 5" in m for m in unit):
            assert "fairseq beam 5" in unit, name
        if any(m.startswith(("IAD", "Jacobi", "auto", "engine greedy (A/A")) for m in unit):
            assert "engine greedy" in unit, name


def test_base_part_dry_run(gec_bundle, tmp_path):
    """The base part end to end on the CPU: the model trained (tiny here) and saved at its stop, packed,
    scored on the whole test set, its manifest entry, and the benchmark unit's rows in the base table."""
    out, work = tmp_path / "out", tmp_path / "work"
    base_part(gec_bundle, out, work, "--deadline", "400", "--bench-reserve", "60")
    rows = records(out)
    assert not [r for r in rows if r.get("status") in ("skipped", "failed", "stopped")], rows
    train = next(r for r in rows if r["step"] == "train gec_base")
    assert train["updates"] == 2 and train["stopped"] == "--max-update 2" and train["valid_loss"] is not None
    assert train["command"].startswith("fairseq-train DATA/gec-en/bin --user-dir fairseq_plugins")
    assert "--arch transformer " in train["command"] and "--stop-time-hours" in train["command"]
    packed = work / "checkpoints" / "gec_base" / "checkpoint_best.pt"
    state = torch.load(packed, map_location="cpu", weights_only=False)
    assert {v.dtype for v in state["model"].values() if v.is_floating_point()} == {torch.float16}
    bleu = next(r for r in rows if r["step"] == "test BLEU gec_base")
    assert bleu["sentences"] == 6  # the whole test set
    entry = next(r for r in rows if r["step"] == "base manifest entry")
    assert entry["sha256"] == file_sha256(packed) and entry["test_bleu"] == bleu["bleu"]
    assert entry["updates"] == 2 and entry["shipped"].startswith("not shipped: too large")
    assert entry["corpus_sha256"] == (gec_bundle / "data" / "gec-en" / "corpus.sha256").read_text().split()[0]
    units = [r for r in rows if r["step"] == "base benchmark unit"]
    assert [(u["unit"], u["status"], u["sentences"]) for u in units] == [("gec_base greedy cpu batch 2", "done", 4)]
    table = [r for r in rows if r["step"] == "base table"]
    assert {r["method"] for r in table} == {f"gec_base: {m}" for m in base_size.UNITS["greedy"]}
    assert all(r["batch_size"] == 2 and r["threads"] == 1 and r["sentences"] == 4 for r in table)
    lossless = [r for r in table if not r["baseline"]]
    assert lossless and all(r["identical_to_greedy"] == 1.0 for r in lossless)
    assert all(r["ratio_vs_engine_greedy"] for r in table if r["method"].endswith(("IAD k=10 q=2", "auto")))
    summary = (out / "summary.md").read_text()
    assert "### the base-size table, cpu" in summary and "| gec_base | IAD k=10 q=2 | 2 | 4 |" in summary
    assert "not run: the GPU's units (fp16): --device cpu" in summary
    assert (out / "logs-base.tar.gz").exists() and limits.output_problems(out) == []


def test_base_part_skips_what_does_not_fit(gec_bundle, tmp_path):
    """A deadline that leaves less than the training's least time once the measurements' reserve is kept:
    the training is skipped with that reason, and the steps that need its checkpoint say why they did not run."""
    out = tmp_path / "out"
    base_part(gec_bundle, out, tmp_path / "work", "--deadline", "45", "--bench-reserve", "25")
    rows = records(out)
    reasons = {r["step"]: r.get("reason") for r in rows if r.get("status") == "skipped"}
    assert "--bench-reserve" in reasons["train gec_base"] and "needs at least 60 s" in reasons["train gec_base"]
    assert "did not save one" in reasons["pack gec_base"]
    assert not [r for r in rows if r["step"] in ("base table", "base manifest entry")]
    assert "train gec_base: skipped" in (out / "summary.md").read_text()
    assert limits.output_problems(out) == []


def test_base_units_merge_into_one_table(tmp_path):
    """Two units' rows: the fairseq greedy both ran is kept once, an IAD row of one reads × CT2 against
    the CTranslate2 fp32 greedy of the other, and CTranslate2's outputs are counted where they differ
    from fairseq's greedy of its own unit."""
    def row(method, ratio, **kw):
        return dict({"method": f"gec_base: {method}", "model": "gec_base", "corpus": "gec-en", "group": "gec_base",
                     "batch_size": 1, "beam": 1, "baseline": False, "backend": "fairseq", "ratio_vs_greedy": ratio,
                     "peak_mem_mb": None, "hypotheses": None}, **kw)

    (tmp_path / "g.txt").write_text("a b\nc d\ne f\n")
    (tmp_path / "c.txt").write_text("a b\nc x\ne f\n")
    ct2_unit = [row("fairseq greedy", 1.0, baseline=True, hypotheses="g.txt"),
                row("CTranslate2 greedy", 2.0, backend="ctranslate2", compute_type="default", hypotheses="c.txt"),
                row("CTranslate2 greedy int8", 5.0, backend="ctranslate2", compute_type="int8", hypotheses="g.txt")]
    base_size.differs_from_fairseq(ct2_unit, tmp_path)
    assert [r.get("differs_from_fairseq") for r in ct2_unit] == [None, 1, 0]
    greedy_unit = [row("fairseq greedy", 1.0, baseline=True), row("IAD k=10 q=2", 3.0)]
    table = base_size.merged(greedy_unit + ct2_unit)
    assert [r["method"].split(": ")[1] for r in table] == ["fairseq greedy", "IAD k=10 q=2", "CTranslate2 greedy",
                                                           "CTranslate2 greedy int8"]  # gec.json's order
    assert next(r for r in table if "IAD" in r["method"])["ratio_vs_ct2"] == 1.5
    assert "| gec_base | IAD k=10 q=2 | 1 |" in base_size.table(table)


def test_base_units_start_with_the_targets_at_batch_1():
    """Units start in priority order (the deadline stops the last): the base model's greedy unit at batch
    1 first, then its beam at batch 1 and greedy at batch 8, ..., and the tiny model's after all of them."""
    batches = [1, 8, 32]
    units = [base_size.Unit(m, n, "cuda", b, 8) for m in ("gec_tiny", "gec_base") for n in base_size.UNITS for b in batches]
    order = [(u.model, u.name, u.batch) for u in sorted(units, key=lambda u: base_size.priority(u, batches))]
    assert order[:5] == [("gec_base", "greedy", 1), ("gec_base", "beam", 1), ("gec_base", "greedy", 8),
                         ("gec_base", "drafters", 1), ("gec_base", "beam", 8)]
    assert {m for m, _, _ in order[:12]} == {"gec_base"} and order[-1] == ("gec_tiny", "ctranslate2", 32)
