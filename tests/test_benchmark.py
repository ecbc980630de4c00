"""scripts/benchmark.py: output schema (SPEC §4) on a tiny model, and clear errors."""
import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import benchmark  # noqa: E402

SPEC_FIELDS = {"method", "config", "batch_size", "beam", "bleu", "sacrebleu_signature", "seconds",
               "tokens_per_s", "speed_ratio", "model_calls", "mean_accepted", "identical_to_greedy",
               "device", "dtype"}


@pytest.fixture(scope="module")
def bench(tiny_corpus, tiny_model, tmp_path_factory):
    rows = [
        {"method": "fairseq greedy", "path": str(tiny_model), "args": "--task fast_translation", "baseline": True},
        {"method": "fairseq beam", "path": str(tiny_model), "args": "--task fast_translation", "beams": [2]},
        {"method": "CTranslate2 greedy", "path": str(tiny_model), "backend": "ctranslate2"},
    ]
    out = tmp_path_factory.mktemp("bench")
    results = benchmark.run_benchmark(rows, tiny_corpus, None, out, batch_sizes=[1, 8], runs=2,
                                      timed_sentences=16, device="cpu", threads=1, log=lambda *a, **k: None)
    return results, out


def test_every_row_has_the_spec_fields(bench):
    results, out = bench
    assert len(results) == 6  # 3 rows x 2 batch sizes
    lines = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert lines == results
    for r in results:
        assert SPEC_FIELDS <= set(r), SPEC_FIELDS - set(r)
        assert r["sentences"] == 120 and r["timed_sentences"] == 16
        assert r["seconds"] > 0 and r["tokens_per_s"] > 0
        assert r["sacrebleu_signature"].startswith("nrefs:1")
    assert (out / "results.md").read_text().count("\n|") >= 7
    assert (out / "speed_vs_bleu.png").stat().st_size > 1000


def test_baseline_ratio_is_one_and_calls_counted(bench):
    results, _ = bench
    greedy = [r for r in results if r["method"] == "fairseq greedy"]
    assert all(r["speed_ratio"] == 1.0 for r in greedy)
    # greedy calls the decoder once per step: at least the longest hypothesis per batch
    assert all(r["model_calls"] >= 120 / r["batch_size"] for r in greedy)


def test_ctranslate2_greedy_matches_fairseq_greedy_quality(bench):
    results, _ = bench
    by = {(r["method"], r["batch_size"]): r for r in results}
    for bs in (1, 8):
        assert abs(by[("CTranslate2 greedy", bs)]["bleu"] - by[("fairseq greedy", bs)]["bleu"]) < 1.5


def test_missing_checkpoint_is_a_clear_error(tiny_corpus, tmp_path):
    rows = [{"method": "x", "model": "nothing-here", "baseline": True}]
    with pytest.raises(benchmark.BenchmarkError, match="not found; train it first"):
        benchmark.run_benchmark(rows, tiny_corpus, tmp_path, tmp_path / "out", log=lambda *a, **k: None)


def test_empty_test_set_is_a_clear_error(tiny_corpus, tmp_path):
    corpus = tmp_path / "c"
    (corpus / "bin").mkdir(parents=True)
    for f in (tiny_corpus / "bin").iterdir():
        (corpus / "bin" / f.name).symlink_to(f)
    (corpus / "test.de").write_text("")
    with pytest.raises(benchmark.BenchmarkError, match="empty"):
        benchmark.Corpus(corpus)


def test_lossless_row_without_greedy_baseline_is_a_clear_error(tiny_corpus, tiny_model, tmp_path):
    rows = [{"method": "x", "path": str(tiny_model), "args": "--task fast_translation", "lossless": True}]
    with pytest.raises(benchmark.BenchmarkError, match="no greedy baseline"):
        benchmark.run_benchmark(rows, tiny_corpus, None, tmp_path, batch_sizes=[4], runs=1,
                                timed_sentences=4, log=lambda *a, **k: None)


def test_quality_batch_size_reuses_one_full_pass_and_checks_lossless_rows(tiny_corpus, tiny_model, tmp_path):
    rows = [
        {"method": "fairseq greedy", "path": str(tiny_model), "args": "--task fast_translation", "baseline": True},
        {"method": "engine greedy", "path": str(tiny_model), "args": "--task fast_translation --drafter none",
         "lossless": True},
    ]
    results = benchmark.run_benchmark(rows, tiny_corpus, None, tmp_path, batch_sizes=[1, 8], runs=1,
                                      timed_sentences=8, threads=1, log=lambda *a, **k: None,
                                      max_len=(1.2, 10), quality_batch_size=8)
    by = {(r["method"], r["batch_size"]): r for r in results}
    assert [(r["method"], r["batch_size"]) for r in results][:2] == [("fairseq greedy", 8), ("fairseq greedy", 1)]
    for bs, compared in ((8, 120), (1, 8)):
        r = by[("engine greedy", bs)]
        assert r["bleu_batch_size"] == 8 and r["sentences"] == 120
        assert r["identical_to_greedy"] == 1.0 and r["identical_sentences"] == compared
        assert r["mean_accepted"] == 1.0  # no drafter: one token per row and call
    assert by[("fairseq greedy", 1)]["bleu"] == by[("fairseq greedy", 8)]["bleu"]


def test_ckpt_and_data_placeholders_and_skip_missing_drafters(tmp_path):
    ckpts, data = tmp_path / "ckpt", tmp_path / "data" / "en-de"
    (ckpts / "baseline").mkdir(parents=True)
    (ckpts / "baseline" / "checkpoint_best.pt").write_bytes(b"")
    row = {"method": "GAD", "model": "baseline",
           "args": "--drafter nar --drafter-path {CKPT}/gad_drafter/checkpoint_best.pt --x {DATA}/en-de-kd"}
    args = benchmark.row_args(row, ckpts, data)
    assert args == f"--drafter nar --drafter-path {ckpts}/gad_drafter/checkpoint_best.pt --x {tmp_path / 'data'}/en-de-kd"
    assert not benchmark._checkpoint_exists(row, ckpts, data)  # the drafter is not trained yet: skipped
    (ckpts / "gad_drafter").mkdir()
    (ckpts / "gad_drafter" / "checkpoint_best.pt").write_bytes(b"")
    assert benchmark._checkpoint_exists(row, ckpts, data)
