"""scripts/benchmark.py (its harness in scripts/lab/evaluation/bench_*.py): interleaved timing and ratios (stub
runners with known times), rows files, families, the plot's Pareto front, and the output schema and counts on
the tiny model."""
import json
import math
from pathlib import Path

import pytest

from conftest import REPO
from scripts.lab.evaluation import bench_rows
from scripts.lab.evaluation.out_folder import LOCK
from scripts.lab.viz.speed_vs_bleu import own_axis_groups, panel_grid, pareto_front, read_results
from scripts import benchmark
from scripts.lab.evaluation import bench_harness, bench_jobs, bench_results, timing
from scripts.lab.evaluation.corpus import Corpus
from scripts.lab.training.model_list import read_models

SPEC_FIELDS = {"method", "config", "batch_size", "beam", "bleu", "sacrebleu_signature", "seconds",
               "tokens_per_s", "speed_ratio", "model_calls", "mean_accepted", "identical_to_greedy",
               "device", "dtype"}
NEW_FIELDS = {"family", "bleu_bp", "bleu_ratio", "ratio_vs_greedy", "ratio_vs_ct2", "ratio_vs_beam5",
              "speed_ratio_range", "peak_mem_mb", "mem_vs_greedy", "counts_over", "counts_sentences",
              "model_calls_all", "mean_accepted_all", "timed_tokens", "draft_width", "drafted_share"}
quiet = dict(log=lambda *a, **k: None)


# ----------------------------------------------------------------------------------------------
# stub runners on a fake clock: every timed pass of a runner costs a known time
# ----------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, load_of_round=()):
        self.t = 0.0
        self.full_passes = 0
        self.load_of_round = list(load_of_round)  # a job on the other core multiplies durations, per round of 2

    def __call__(self):
        return self.t

    def load(self):
        r = self.full_passes // 2
        return self.load_of_round[r] if r < len(self.load_of_round) else 1.0


class StubRunner:
    """Decodes sentence ids into [id, EOS]; a full pass over the timed batches costs ``per_pass``
    seconds of the fake clock (times the load); counts one model call per batch."""

    def __init__(self, name, per_pass, clock, calls_log, n=120, timed=16, batch=2):
        self.name, self.per_pass, self.clock, self.calls_log = name, per_pass, clock, calls_log
        ids = [(i, None) for i in range(n)]
        self.batches = [ids[i:i + batch] for i in range(0, n, batch)]
        self.timed_batches = [b for b in self.batches if b[0][0] < timed]
        self.timed = timed
        self.calls = 0

    def decode(self, batches):
        n = sum(len(b) for b in batches)
        self.clock.t += self.per_pass * (self.clock.load() if n == self.timed else 1.0) * n / self.timed
        self.clock.full_passes += n == self.timed
        self.calls += len(batches)
        self.calls_log.append((self.name, n))
        return {sid: [sid, 2] for b in batches for sid, _ in b}

    def text(self, tokens, corpus):
        return corpus.references[tokens[0]]

    def stats(self):
        return {}

    def reset_stats(self):
        self.calls = 0

    def model_calls(self):
        return self.calls

    def sync(self):
        pass


def test_interleaved_timing_alternates_and_gives_the_known_ratio():
    clock, log = FakeClock(), []
    row, ref = StubRunner("row", 0.1, clock, log), StubRunner("ref", 0.2, clock, log)
    times, (calls, _) = timing.time_interleaved([row, ref], runs=4, clock=clock)
    # a warm-up of both on their first 4 batches (8 sentences), then row ref | ref row | row ref | ref row
    assert log == [("row", 8), ("ref", 8)] + [(name, 16) for name in ["row", "ref", "ref", "row"] * 2]
    assert times[0] == pytest.approx([0.1] * 4) and times[1] == pytest.approx([0.2] * 4)
    assert calls == len(row.timed_batches) == 8  # counted over exactly one timed pass, not the warm-up
    ratio, spread = timing.pair_ratio(times[1], times[0])
    assert ratio == pytest.approx(2.0) and spread == pytest.approx((2.0, 2.0))
    slower = StubRunner("slow", 0.5, clock, [])
    times, _ = timing.time_interleaved([slower, ref], runs=2, clock=clock)
    assert timing.pair_ratio(times[1], times[0])[0] == pytest.approx(0.4)


def test_a_load_that_comes_and_goes_favours_neither_side():
    """A job that starts on the other core halfway through slows both sides of the later pairs
    alike: the interleaved ratio stays exact, where timing all row passes and then all reference
    passes would put the load on the reference only (and report 6x)."""
    clock, log = FakeClock(load_of_round=[1.0, 1.0, 3.0, 3.0]), []
    row, ref = StubRunner("row", 0.1, clock, log), StubRunner("ref", 0.2, clock, log)
    times, _ = timing.time_interleaved([row, ref], runs=4, clock=clock)
    assert times[0] == pytest.approx([0.1, 0.1, 0.3, 0.3]) and times[1] == pytest.approx([0.2, 0.2, 0.6, 0.6])
    assert timing.pair_ratio(times[1], times[0])[0] == pytest.approx(2.0)


def run_stubs(rows, per_pass, corpus, tmp_path, monkeypatch, log_lines=None):
    """run_benchmark over stub runners (``per_pass[(method, beam)]`` seconds per timed pass); ``log_lines``: a
    list that collects the benchmark's log lines."""
    clock, log, loads = FakeClock(), [], []

    def load(row, corpus, ckpt, args, beam, bs, *rest):
        loads.append((row["method"], beam, bs))
        return StubRunner(row["method"], per_pass[(row["method"], beam)], clock, log)

    monkeypatch.setattr(bench_harness, "_load_runner", load)
    ckpt = tmp_path / "model.pt"
    ckpt.write_text("")
    rows = [dict(r, path=str(ckpt)) for r in rows]
    logging = quiet if log_lines is None else dict(log=lambda *a, **k: log_lines.append(" ".join(map(str, a))))
    results = bench_harness.run_benchmark(rows, corpus, None, tmp_path / "out", batch_sizes=[8], runs=3,
                                          clock=clock, **logging)
    return results, loads


@pytest.fixture()
def stub_bench(tiny_corpus, tmp_path, monkeypatch):
    """Loads, order and every ratio are known exactly."""
    per_pass = {("fairseq greedy", 1): 0.2, ("fairseq beam", 4): 0.5, ("fairseq beam", 5): 0.8,
                ("IBDecoder", 4): 0.25, ("CTranslate2 greedy", 1): 0.02, ("drafting", 1): 0.1,
                ("slow drafting", 1): 0.4, ("engine greedy", 1): 0.125}
    rows = [
        {"method": "drafting", "args": "--task fast_translation --drafter jacobi_hgj", "lossless": True},
        {"method": "fairseq greedy", "baseline": True},
        {"method": "fairseq beam", "beams": [4, 5], "baseline": True},
        {"method": "IBDecoder", "args": "--target-order interleave", "beams": [4], "vs_beam5": True},
        {"method": "CTranslate2 greedy", "backend": "ctranslate2"},
        {"method": "slow drafting", "args": "--drafter input_copy"},
        {"method": "engine greedy", "args": "--task fast_translation --drafter none", "lossless": True},
    ]
    results, loads = run_stubs(rows, per_pass, tiny_corpus, tmp_path, monkeypatch)
    return results, loads, tmp_path / "out"


def test_a_drafter_on_another_checkpoint_is_timed_beside_its_greedy_models_engine(tiny_corpus, tmp_path, monkeypatch):
    """Frozen blockwise heads live in their own checkpoint but decode their base model's greedy: the
    row is timed beside the engine's greedy on the ``greedy_model`` checkpoint."""
    clock, log = FakeClock(), []
    per_pass = {"fairseq greedy": 0.2, "engine greedy": 0.1, "heads": 0.08}

    def load(row, corpus, ckpt, args, beam, bs, *rest):
        return StubRunner(row["method"], per_pass[row["method"]], clock, log)

    monkeypatch.setattr(bench_harness, "_load_runner", load)
    for model in ("base", "heads"):
        (tmp_path / "ckpt" / model).mkdir(parents=True)
        (tmp_path / "ckpt" / model / "checkpoint_best.pt").write_text("")
    rows = [{"method": "fairseq greedy", "model": "base", "baseline": True},
            {"method": "engine greedy", "model": "base", "args": "--drafter none", "lossless": True},
            {"method": "heads", "model": "heads", "args": "--drafter blockwise", "lossless": True,
             "greedy_model": "base"}]
    results = bench_harness.run_benchmark(rows, tiny_corpus, tmp_path / "ckpt", tmp_path / "out", batch_sizes=[8],
                                          runs=3, clock=clock, **quiet)
    by = {r["method"]: r for r in results}
    assert by["heads"]["ratio_vs_engine_greedy"] == pytest.approx(1.25)
    assert by["heads"]["identical_to_greedy"] == 1.0


def test_a_control_row_is_the_engines_greedy_timed_beside_itself(tiny_corpus, tmp_path, monkeypatch):
    """An A/A control (a second ``--drafter none`` row, ``"control": true``) is timed beside the
    engine's greedy as a drafting row is: its ratio is the harness's own spread; a control that is
    not the engine's greedy is refused before anything runs."""
    per_pass = {("fairseq greedy", 1): 0.2, ("engine greedy", 1): 0.125, ("engine greedy (A/A)", 1): 0.1}
    greedy = "--task fast_translation --drafter none"
    rows = [{"method": "engine greedy (A/A)", "args": greedy, "lossless": True, "control": True},
            {"method": "fairseq greedy", "baseline": True},
            {"method": "engine greedy", "args": greedy, "lossless": True}]
    results, loads = run_stubs(rows, per_pass, tiny_corpus, tmp_path, monkeypatch)
    assert [m for m, *_ in loads] == ["fairseq greedy", "engine greedy", "engine greedy (A/A)"]
    by = {r["method"]: r for r in results}
    assert by["engine greedy (A/A)"]["ratio_vs_engine_greedy"] == pytest.approx(1.25)
    assert by["engine greedy"]["ratio_vs_engine_greedy"] is None
    bad = [dict(rows[0], args="--task fast_translation --drafter input_copy")] + rows[1:]
    with pytest.raises(bench_harness.BenchmarkError, match="is a control: it must be the engine's greedy"):
        run_stubs(bad, per_pass, tiny_corpus, tmp_path, monkeypatch)


@pytest.mark.parametrize("aa_seconds,flagged", [(0.1, True), (0.124, False), (0.131, False), (0.14, True)])
def test_an_aa_control_outside_5_percent_flags_the_runs_timing_in_the_log_and_results_md(
        tiny_corpus, tmp_path, monkeypatch, aa_seconds, flagged):
    """Two copies of one decode reading more than 5% apart: every ratio of the run is that noisy, and the
    log and results.md say so, naming the control (x1.25 and x0.89 flagged; x1.008 and x0.954 not)."""
    per_pass = {("fairseq greedy", 1): 0.2, ("engine greedy", 1): 0.125, ("engine greedy (A/A)", 1): aa_seconds}
    greedy = "--task fast_translation --drafter none"
    rows = [{"method": "engine greedy (A/A)", "args": greedy, "lossless": True, "control": True},
            {"method": "fairseq greedy", "baseline": True},
            {"method": "engine greedy", "args": greedy, "lossless": True}]
    lines = []
    results, _ = run_stubs(rows, per_pass, tiny_corpus, tmp_path, monkeypatch, lines)
    ratio = {r["method"]: r for r in results}["engine greedy (A/A)"]["ratio_vs_engine_greedy"]
    assert ratio == pytest.approx(0.125 / aa_seconds, abs=1e-3)
    said = [line for line in lines if "timing unreliable on this run" in line]
    md = [line for line in (tmp_path / "out" / "results.md").read_text().splitlines()
          if "timing unreliable on this run" in line]
    assert len(said) == len(md) == int(flagged)
    assert all("engine greedy (A/A)" in line and f"x{ratio:.3f}" in line for line in said + md)


def test_a_checkpoint_rewritten_between_two_rows_is_a_clear_error(tiny_corpus, tmp_path, monkeypatch):
    """A training still running saves checkpoint_best.pt between the greedy row's load and the next
    row's: the lossless comparison and the interleaved timing would compare different weights."""
    clock, log = FakeClock(), []
    ckpt = tmp_path / "ckpt" / "base" / "checkpoint_best.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_text("weights at 2,000 updates")

    def load(row, *rest):
        if row["method"] == "fairseq greedy":  # the training saves a better checkpoint meanwhile
            ckpt.write_text("weights at 12,500 updates")
        return StubRunner(row["method"], 0.1, clock, log)

    monkeypatch.setattr(bench_harness, "_load_runner", load)
    rows = [{"method": "fairseq greedy", "model": "base", "baseline": True},
            {"method": "engine greedy", "model": "base", "args": "--drafter none", "lossless": True}]
    with pytest.raises(bench_harness.BenchmarkError, match="changed while the benchmark ran.*benchmark a copy"):
        bench_harness.run_benchmark(rows, tiny_corpus, tmp_path / "ckpt", tmp_path / "out", batch_sizes=[8],
                                    runs=1, clock=clock, **quiet)
    assert log  # the first row ran: the check is at each row's load, not a refusal up front


def test_rows_are_timed_against_loaded_baselines_with_known_ratios(stub_bench):
    results, loads, out = stub_bench
    # baselines first (greedy before beams), each loaded once; results keep the rows' order
    # then the engine's greedy, which the lossless drafting rows are also timed against
    assert loads[:4] == [("fairseq greedy", 1, 8), ("fairseq beam", 4, 8), ("fairseq beam", 5, 8),
                         ("engine greedy", 1, 8)]
    assert len(loads) == len(set(loads)) == 8
    assert [(r["method"], r["beam"]) for r in results] == [
        ("drafting", 1), ("fairseq greedy", 1), ("fairseq beam", 4), ("fairseq beam", 5), ("IBDecoder", 4),
        ("CTranslate2 greedy", 1), ("slow drafting", 1), ("engine greedy", 1)]
    by = {(r["method"], r["beam"]): r for r in results}
    expect = {  # (speed_ratio, ratio_vs_greedy, ratio_vs_ct2, ratio_vs_beam5)
        ("drafting", 1): (2.0, 2.0, 0.2, 8.0),
        ("slow drafting", 1): (0.5, 0.5, 0.05, 2.0),
        ("fairseq greedy", 1): (1.0, 1.0, 0.1, 4.0),
        ("fairseq beam", 4): (1.0, 0.4, 0.04, None),
        ("IBDecoder", 4): (2.0, 0.8, 0.08, 3.2),  # vs fairseq beam 4, chained to greedy; asked for beam 5
        ("CTranslate2 greedy", 1): (10.0, 10.0, 1.0, 40.0),
    }
    for key, (speed, vs_greedy, vs_ct2, vs_beam5) in expect.items():
        r = by[key]
        assert r["speed_ratio"] == pytest.approx(speed), key
        assert r["ratio_vs_greedy"] == pytest.approx(vs_greedy), key
        assert r["ratio_vs_ct2"] == pytest.approx(vs_ct2), key
        assert r["ratio_vs_beam5"] == (None if vs_beam5 is None else pytest.approx(vs_beam5)), key
    assert "fairseq beam (beam 4" in by[("IBDecoder", 4)]["ratio_vs"]
    # engine greedy seconds / row seconds, from pairs timed side by side; only for lossless drafting rows
    assert by[("drafting", 1)]["ratio_vs_engine_greedy"] == pytest.approx(1.25)
    assert by[("engine greedy", 1)]["ratio_vs_greedy"] == pytest.approx(1.6)
    assert all(r["ratio_vs_engine_greedy"] is None for r in results if r["method"] != "drafting")
    assert by[("drafting", 1)]["seconds"] == pytest.approx(0.1)
    assert by[("drafting", 1)]["family"] == "draft-and-verify" and by[("IBDecoder", 4)]["family"] == "orders"
    assert by[("drafting", 1)]["bleu"] == 100.0 and by[("drafting", 1)]["bleu_bp"] == 1.0
    assert by[("drafting", 1)]["model_calls"] == 8 and by[("drafting", 1)]["model_calls_all"] == 60
    assert by[("drafting", 1)]["peak_mem_mb"] is None  # stubs hold no torch models
    assert (out / "speed_vs_bleu.png").stat().st_size > 1000


def test_calls_per_token_divides_the_timed_passs_calls_by_that_passs_tokens(stub_bench):
    """Stubs: one call per batch of 2 sentences, 2 tokens per sentence (id, EOS); 16 of 120 timed."""
    results, _, out = stub_bench
    by = {(r["method"], r["beam"]): r for r in results}
    drafting = by[("drafting", 1)]
    assert drafting["timed_tokens"] == 32  # the 16 timed sentences' tokens, EOS included
    # 8 calls / 32 tokens; not / the 240 tokens of all 120 sentences, nor / the 8 calls' 16 sentences
    assert drafting["calls_per_token"] == 0.25
    assert "calls/token" in (out / "results.md").read_text()


def test_beam_rows_without_a_greedy_baseline_get_no_ratio_vs_greedy(tiny_corpus, tmp_path, monkeypatch):
    rows = [{"method": "fairseq beam", "beams": [4], "baseline": True}, {"method": "IBDecoder", "beams": [4]}]
    results, _ = run_stubs(rows, {("fairseq beam", 4): 0.5, ("IBDecoder", 4): 0.25}, tiny_corpus, tmp_path,
                           monkeypatch)
    beam, ib = results
    assert beam["speed_ratio"] == 1.0 and ib["speed_ratio"] == pytest.approx(2.0)
    assert beam["ratio_vs_greedy"] is None and ib["ratio_vs_greedy"] is None and ib["ratio_vs_beam5"] is None


def test_derived_memory_difference():
    results = [
        {"method": "g", "corpus": "c", "batch_size": 1, "beam": 1, "baseline": True, "backend": "fairseq",
         "model": "m", "ratio_vs_greedy": 1.0, "peak_mem_mb": 100.0},
        {"method": "gad", "corpus": "c", "batch_size": 1, "beam": 1, "baseline": False, "backend": "fairseq",
         "model": "m", "ratio_vs_greedy": 3.0, "peak_mem_mb": 140.5},
        {"method": "g", "corpus": "c", "batch_size": 32, "beam": 1, "baseline": True, "backend": "fairseq",
         "model": "m", "ratio_vs_greedy": 1.0, "peak_mem_mb": 300.0},
    ]
    bench_results.add_derived_ratios(results)
    assert results[1]["mem_vs_greedy"] == pytest.approx(40.5)
    assert results[2]["mem_vs_greedy"] == 0.0  # compared within its own batch size
    assert results[1].get("ratio_vs_ct2") is None and results[1].get("ratio_vs_beam5") is None


def test_ratio_vs_ct2_is_against_ctranslate2s_default_compute_type_not_int8():
    """× CT2 reads against CTranslate2's greedy on the same weights; an int8 row of the same model,
    listed after it, must not become the reference (it did: the last CT2 row of the model won)."""
    def row(method, ratio, **kw):
        return dict({"method": method, "corpus": "c", "batch_size": 1, "beam": 1, "baseline": False,
                     "backend": "fairseq", "model": "m", "ratio_vs_greedy": ratio, "peak_mem_mb": None}, **kw)

    results = [row("g", 1.0, baseline=True), row("iad", 3.0),
               row("ct2", 1.5, backend="ctranslate2", compute_type="default"),
               row("ct2 int8", 4.0, backend="ctranslate2", compute_type="int8")]
    bench_results.add_derived_ratios(results)
    assert results[1]["ratio_vs_ct2"] == 2.0 and results[2]["ratio_vs_ct2"] == 1.0
    assert results[3]["ratio_vs_ct2"] == pytest.approx(4.0 / 1.5, abs=1e-3)


# ----------------------------------------------------------------------------------------------
# rows files, families, plan checks, the plot's Pareto front
# ----------------------------------------------------------------------------------------------


def test_rows_files_are_concatenated_in_order(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = {"method": "fairseq greedy", "model": "baseline", "baseline": True}
    a.write_text(json.dumps([base, {"method": "x", "model": "m"}]))
    b.write_text(json.dumps([dict(base), {"method": "y", "model": "m"}]))
    assert [r["method"] for r in bench_rows.load_rows([a, b])] == ["fairseq greedy", "x", "y"]
    b.write_text(json.dumps([{"method": "x", "model": "other"}]))
    with pytest.raises(bench_harness.BenchmarkError, match="defined differently"):
        bench_rows.load_rows([a, b])
    with pytest.raises(bench_harness.BenchmarkError, match="not found"):
        bench_rows.load_rows([tmp_path / "missing.json"])


def test_family_defaults_from_the_row():
    rows = {r["method"]: r for r in json.loads((REPO / "configs" / "benchmark" / "demo.json").read_text())}
    fam = {m: bench_rows.family_of(r) for m, r in rows.items()}
    assert fam["fairseq greedy (L2R)"] == fam["CTranslate2 beam"] == fam["engine greedy (no drafter)"] == "anchors"
    assert fam["IBDecoder"] == fam["double-token L2R (SA c=2)"] == fam["R2L (single-token)"] == "orders"
    assert fam["Jacobi HGJ b=3"] == fam["IAD input copy k=10 q=2 (en-de)"] == "draft-and-verify"
    assert fam["Mask-Predict 4 it"] == "non-autoregressive"
    assert bench_rows.family_of({"method": "GAD drafter alone", "args": "--drafter nar --acceptance all"}) \
        == "non-autoregressive"
    assert bench_rows.family_of({"method": "x", "args": "--drafter nar", "family": "orders"}) == "orders"
    # a reordered checkpoint knows its order: DOUBLETOPK alone marks the row as an order's search
    assert bench_rows.family_of({"method": "head-tail", "args": "--task fast_translation --double-topk"}) == "orders"
    with pytest.raises(bench_harness.BenchmarkError, match="unknown family"):
        bench_rows.family_of({"method": "x", "family": "fast"})


def test_reference_rows_time_every_drafter_beside_greedy_of_its_own_model():
    """configs/benchmark/reference.json (issue 17): every drafting row is lossless, and its model and
    corpus have fairseq's greedy (identity, ratios) and the engine's greedy (the pairs timed side by side)."""
    rows = bench_rows.load_rows([REPO / "configs" / "benchmark" / "reference.json"])
    greedy = {(r["model"], r["corpus"]) for r in rows if r.get("baseline") and r["beams"] == [1]}
    engine = {(r["model"], r["corpus"]) for r in rows if bench_rows.is_engine_greedy(r)}
    beam5 = {r["corpus"] for r in rows if r.get("baseline") and r["beams"] == [5]}
    drafting = [r for r in rows if bench_rows.drafter_of(r) not in (None, "none")]
    assert {bench_rows.drafter_of(r) for r in drafting} == {"input_copy", "jacobi_hgj", "nar", "blockwise", "auto"}
    for r in drafting:
        assert r.get("lossless") and bench_rows.is_drafting(r), r["method"]
        assert (r["model"], r["corpus"]) in greedy and (r["model"], r["corpus"]) in engine, r["method"]
    assert beam5 == {"gec-en", "en-de"}  # the papers' baseline (IAD's 6x is against beam 5)
    # every model's A/A control: the spread against which its drafting rows' ratios are read
    assert {(r["model"], r["corpus"]) for r in rows if r.get("control") and bench_rows.is_drafting(r)} == engine


def test_order_rows_are_the_convergence_runs_models_timed_against_l2r_kd_at_their_beam():
    """configs/benchmark/orders.json (issue 20, gaps at convergence): every order of the convergence run
    at greedy and at its paper's beam (head-tail 10, DOUBLETOPK; the others 4), each timed against the
    L2R-KD baseline at the same beam (the same-run speed ratio beside the BLEU gap)."""
    rows = bench_rows.load_rows([REPO / "configs" / "benchmark" / "orders.json"])
    lists = [REPO / "configs/reference/convergence_kd.txt", REPO / "configs/reference/convergence_extra.txt"]
    curves = {m["name"]: m for path in lists for m in read_models(path)}
    trained = set(curves)
    (l2r,) = [r for r in rows if r.get("baseline")]
    assert l2r["model"] == "l2r_kd"
    orders = {r["model"]: r for r in rows if not r.get("baseline")}
    assert set(orders) == {"r2l", "sa_l2r_c2", "head_tail", "ibdecoder", "ibdecoder_scratch", "ibdecoder_sa_c2",
                           "imdecoder_h4"}
    assert set(orders) | {"l2r_kd"} <= trained
    for name, r in orders.items():
        assert r["beams"] == [1, 10 if name == "head_tail" else 4], name
        # decoded with the search its curve was scored with (the DOUBLETOPK row decoded with Alg. 1's rule before)
        assert ("--double-topk" in r["args"].split()) == ("DOUBLETOPK" in r["method"]) == (
            curves[name]["generate"] == "--double-topk"), name
        assert set(r["beams"]) <= set(l2r["beams"]) and r["corpus"] == l2r["corpus"], name
        assert bench_rows.family_of(r) == "orders"


def test_a_group_times_its_rows_against_its_own_baseline(tiny_corpus, tmp_path, monkeypatch):
    """reference.json and orders.json in one run (the demo): the orders are timed against L2R-KD, their
    group's baseline, while the other rows keep fairseq's greedy on the baseline model."""
    per_pass = {("fairseq greedy", 1): 0.2, ("engine greedy", 1): 0.1, ("L2R-KD", 1): 0.4, ("IBDecoder", 1): 0.1}
    rows = [{"method": "fairseq greedy", "baseline": True},
            {"method": "engine greedy", "args": "--drafter none", "lossless": True},
            {"method": "L2R-KD", "baseline": True, "group": "orders"},
            {"method": "IBDecoder", "args": "--target-order interleave", "group": "orders"}]
    results, _ = run_stubs(rows, per_pass, tiny_corpus, tmp_path, monkeypatch)
    by = {r["method"]: r for r in results}
    assert by["IBDecoder"]["speed_ratio"] == pytest.approx(4.0) and by["IBDecoder"]["ratio_vs"].startswith("L2R-KD")
    assert by["engine greedy"]["speed_ratio"] == pytest.approx(2.0)
    assert by["engine greedy"]["ratio_vs"].startswith("fairseq greedy")


def test_the_demos_rows_files_plan_together_once_every_model_ships():
    """The default demo benchmarks reference.json and orders.json in one run: with every model present
    (rows are only skipped while their model is missing), each group keeps one baseline per corpus,
    beam and batch size (the demo failed at once when l2r_kd shipped, and would again with the heads)."""
    rows = bench_rows.load_rows([REPO / "configs" / "benchmark" / "reference.json",
                                REPO / "configs" / "benchmark" / "orders.json"])
    bench_rows.check_plan(list(bench_rows.expand_rows(rows, [1, 32])), REPO / "models" / "data" / "en-de")


def test_plan_errors_before_anything_runs(tiny_corpus, tmp_path):
    rows = [{"method": "a", "model": "nothing", "baseline": True}, {"method": "b", "model": "nothing", "baseline": True}]
    with pytest.raises(bench_harness.BenchmarkError, match="both baselines"):
        bench_harness.run_benchmark(rows, tiny_corpus, tmp_path, tmp_path / "out", **quiet)
    rows = [{"method": "a", "model": "nothing", "baseline": True}, {"method": "b", "model": "nothing", "vs_beam5": True}]
    with pytest.raises(bench_harness.BenchmarkError, match="ratio_vs_beam5"):
        bench_harness.run_benchmark(rows, tiny_corpus, tmp_path, tmp_path / "out", **quiet)
    with pytest.raises(bench_harness.BenchmarkError, match="not one of --batch-sizes"):  # it failed with a KeyError after the first row
        bench_harness.run_benchmark(rows[:1], tiny_corpus, tmp_path, tmp_path / "out", batch_sizes=(1,), quality_batch_size=64,
                                    **quiet)


def test_pareto_front():
    points = [(1.0, 14.6), (1.3, 14.6), (2.0, 10.0), (1.9, 9.0), (0.5, 15.9), (0.4, 15.0), (3.5, 2.8)]
    assert pareto_front(points) == [1, 2, 4, 6]


def test_a_group_timed_against_another_models_greedy_gets_an_axis_of_its_own():
    rows = [{"method": "fairseq greedy", "model": "base", "group": "", "beam": 1, "baseline": True},
            {"method": "lean beam", "model": "base", "group": "", "beam": 5, "baseline": False},
            {"method": "heads: fairseq greedy", "model": "heads", "group": "bw", "beam": 1, "baseline": True},
            {"method": "heads", "model": "heads", "group": "bw", "beam": 1, "baseline": False},
            {"method": "orders: L2R-KD", "model": "l2r", "group": "orders", "beam": 4, "baseline": True},
            {"method": "orders: L2R-KD", "model": "l2r", "group": "orders", "beam": 1, "baseline": True},
            {"method": "orders: IBDecoder", "model": "ib", "group": "orders", "beam": 1, "baseline": False}]
    rows = [dict(r, corpus="en-de", batch_size=1, bleu=30.0, ratio_vs_greedy=1.0) for r in rows]
    assert own_axis_groups(rows) == {"orders": "orders: L2R-KD"}  # the heads are timed against their own model
    lines, sizes = panel_grid(rows)
    assert [title for title, _, _ in lines] == ["en-de", "en-de, orders"] and sizes == [1]
    assert [r["method"] for r in lines[1][2][0]] == ["orders: L2R-KD", "orders: L2R-KD", "orders: IBDecoder"]
    assert "orders: L2R-KD" in lines[1][1] and "fairseq greedy" in lines[0][1]
    assert own_axis_groups(rows[:4]) == {}


DEMO_RESULTS = REPO / "docs" / "figures" / "demo_2026-11-28_whole_set.jsonl"


def test_the_demos_plot_one_colour_per_family_no_controls_one_baseline_per_panel_every_point_labelled(
        tmp_path, monkeypatch):
    """It had 27-30 legend entries with colours repeated, labelled an A/A control as a Pareto point and drew
    the orders (timed against L2R-KD) on the axis of rows timed against fairseq's greedy."""
    import types

    from scripts.lab.viz import speed_vs_bleu

    rows = read_results(DEMO_RESULTS)
    controls = [r for r in rows if "A/A control" in r["method"]]
    assert len(controls) == 6 and all(bench_rows.is_control(r) for r in controls)
    assert not [r for r in rows if bench_rows.is_control(r) and r not in controls]
    plt, figs = speed_vs_bleu.pyplot(), []
    monkeypatch.setattr(speed_vs_bleu, "pyplot", lambda: types.SimpleNamespace(subplots=plt.subplots, close=figs.append))
    speed_vs_bleu.plot(rows, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 1000
    panels = [ax for ax in figs[0].axes if ax.collections]
    families = {r["family"] for r in rows}
    colours = {tuple(c.get_edgecolor()[0]) for ax in panels for c in ax.collections}
    assert len(colours) == len(families) == 3
    shown = [r for r in rows if r not in controls]
    assert sum(len(ax.collections) for ax in panels) == len(shown)  # every row but the controls
    for ax in panels:
        assert len(ax.texts) == len(ax.collections)  # every point labelled
        orders = "orders" in ax.get_title()
        expected = [r for r in shown if (r["group"] == "orders") == orders and f"{r['corpus']}," in ax.get_title()
                    and ax.get_title().endswith(f"batch size {r['batch_size']}")]
        assert len(ax.collections) == len(expected), ax.get_title()
        assert ("L2R-KD" in ax.get_xlabel()) == orders
    legend = [t.get_text() for legend in figs[0].legends for t in legend.get_texts()]
    assert not [t for t in legend if "A/A" in t and "not shown" not in t]
    numbered = [t for t in legend if t.strip()[:1].isdigit()]
    assert len(numbered) == len({r["method"] for r in shown})


def test_the_plot_script_names_the_file_and_line_of_a_bad_results_line(tmp_path):
    from scripts import benchmark_plot

    lines = DEMO_RESULTS.read_text().splitlines()
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines[:2] + [lines[2][: len(lines[2]) // 2]]) + "\n")  # cut short by a full disk
    with pytest.raises(SystemExit) as err:
        benchmark_plot.main([str(path), "--out", str(tmp_path / "p.png")])
    assert str(err.value.code).startswith(f"error: {path}:3: not a whole JSON line")
    path.write_text("\n".join(lines[:3] + ['{"method": "x"}']) + "\n")
    with pytest.raises(SystemExit) as err:
        benchmark_plot.main([str(path), "--out", str(tmp_path / "p.png")])
    assert str(err.value.code).startswith(f"error: {path}:4: a results line without corpus")
    assert not (tmp_path / "p.png").exists()


# ----------------------------------------------------------------------------------------------
# the real thing on the tiny model
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench(tiny_corpus, tiny_model, tmp_path_factory):
    rows = [
        {"method": "fairseq greedy", "path": str(tiny_model), "args": "--task fast_translation", "baseline": True},
        # beam 4: since the one decoding core the lean beam holds ~0.3 MB less (beam 8: 6.63 MB, was 6.95), and at beam 2
        # its decode no longer rises above the peak it shares with greedy (the weights and a pass every row makes)
        {"method": "fairseq beam", "path": str(tiny_model), "args": "--task fast_translation", "beams": [4]},
        {"method": "CTranslate2 greedy", "path": str(tiny_model), "backend": "ctranslate2"},
    ]
    out = tmp_path_factory.mktemp("bench")
    results = bench_harness.run_benchmark(rows, tiny_corpus, None, out, batch_sizes=[1, 8], runs=2,
                                          timed_sentences=16, device="cpu", threads=1, **quiet)
    return results, out


def test_every_row_has_the_spec_fields(bench):
    results, out = bench
    assert len(results) == 6  # 3 rows x 2 batch sizes
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert lines == results
    for r in results:
        assert SPEC_FIELDS | NEW_FIELDS <= set(r), (SPEC_FIELDS | NEW_FIELDS) - set(r)
        assert r["sentences"] == 120 and r["timed_sentences"] == 16 and r["counts_sentences"] == 16
        assert r["seconds"] > 0 and r["tokens_per_s"] > 0 and r["speed_ratio"] > 0
        assert r["sacrebleu_signature"].startswith("nrefs:1")
        # sacreBLEU's brevity penalty: exp(1 - 1/ratio) below ratio 1, else 1
        assert r["bleu_bp"] == pytest.approx(min(1.0, math.exp(1 - 1 / r["bleu_ratio"])), abs=2e-3)
    assert (out / "results.md").read_text().count("\n|") >= 7
    assert (out / "speed_vs_bleu.png").stat().st_size > 1000


def test_counts_and_memory_are_measured_at_each_batch_size(bench):
    results, _ = bench
    by = {(r["method"], r["batch_size"]): r for r in results}
    g1, g8 = by[("fairseq greedy", 1)], by[("fairseq greedy", 8)]
    # greedy at batch 1 calls the decoder once per generated token (EOS included)
    assert g1["model_calls"] == g1["timed_tokens"]
    # at batch 8 one call serves every row of the batch: fewer calls for the same sentences
    assert g8["model_calls"] < g8["timed_tokens"] and g8["timed_tokens"] == g1["timed_tokens"]
    assert g1["model_calls_all"] > g1["model_calls"]  # all 120 sentences vs the 16 timed ones
    # memory: the weights at least; beam 4 holds four times the hypotheses of greedy at batch 8
    import torch

    state = torch.load(str(g1["model"]), map_location="cpu", weights_only=False)["model"]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state.values()}
    weights_mb = sum(storages.values()) / 2 ** 20  # shared embeddings once, as in memory
    assert weights_mb < g1["peak_mem_mb"] < weights_mb + 20
    assert by[("fairseq beam", 8)]["mem_vs_greedy"] > 0
    assert by[("CTranslate2 greedy", 8)]["peak_mem_mb"] is None
    assert by[("CTranslate2 greedy", 8)]["ratio_vs_ct2"] == 1.0 and g8["ratio_vs_ct2"] < 1.0


def test_calls_per_token_is_one_for_greedy_at_batch_1(bench):
    results, out = bench
    by = {(r["method"], r["batch_size"]): r for r in results}
    g1, g8 = by[("fairseq greedy", 1)], by[("fairseq greedy", 8)]
    assert g1["calls_per_token"] == 1.0  # one decoder call per generated token, EOS included
    # at batch 8 one call serves up to 8 rows: calls are the longest output of each batch
    assert 1 / 8 <= g8["calls_per_token"] < 1.0
    assert g8["calls_per_token"] == round(g8["model_calls"] / g8["timed_tokens"], 4)
    assert by[("CTranslate2 greedy", 1)]["calls_per_token"] is None  # CTranslate2 counts no calls
    table = [line for line in (out / "results.md").read_text().splitlines() if line.startswith("|")]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    g1_cells = [c.strip() for c in table[2].strip("|").split("|")]  # rows in order: fairseq greedy at batch 1 first
    assert g1_cells[head.index("calls/token")] == "1"


def test_calls_per_token_of_lossless_drafting_rows(tiny_corpus, tiny_model, tmp_path):
    """The engine's greedy makes exactly one call per token at batch 1; input-copy drafting (IAD),
    token for token the same output, makes fewer where the copied source is accepted."""
    rows = [
        {"method": "fairseq greedy", "path": str(tiny_model), "args": "--task fast_translation", "baseline": True},
        {"method": "engine greedy", "path": str(tiny_model), "args": "--task fast_translation --drafter none",
         "lossless": True},
        # a fixed width: the cost-aware width policy may stop drafting on a loaded CPU
        {"method": "IAD", "path": str(tiny_model), "lossless": True,
         "args": "--task fast_translation --drafter input_copy --block-size 10 --copy-ngram 2 --adaptive-block-size off"},
    ]
    results = bench_harness.run_benchmark(rows, tiny_corpus, None, tmp_path, batch_sizes=[1], runs=1,
                                          timed_sentences=16, threads=1, memory=False, **quiet)
    by = {r["method"]: r for r in results}
    engine, iad = by["engine greedy"], by["IAD"]
    assert engine["calls_per_token"] == 1.0 and engine["model_calls"] == engine["timed_tokens"]
    assert iad["identical_to_greedy"] == 1.0 and iad["timed_tokens"] == engine["timed_tokens"]
    assert iad["calls_per_token"] < 1.0
    assert iad["calls_per_token"] == round(iad["model_calls"] / engine["timed_tokens"], 4)
    # the widths the policy chose: a fixed width of 10 sends at most 10 slots, in the calls where IAD has a draft
    assert 1.0 <= iad["draft_width"] <= 10 and 0 < iad["drafted_share"] <= 1
    # every accepted draft token was one of the slots of a drafted call (batch 1: a call is a row-call)
    drafted_slots = iad["drafted_share"] * iad["model_calls"] * iad["draft_width"]
    assert drafted_slots >= 0.98 * (iad["timed_tokens"] - iad["model_calls"])
    assert engine["draft_width"] is None and engine["drafted_share"] == 0.0  # the engine, no drafter
    assert by["fairseq greedy"]["draft_width"] is None and by["fairseq greedy"]["drafted_share"] is None


def test_an_auto_row_says_which_drafter_it_kept_and_why(tiny_corpus, tiny_model, tmp_path):
    rows = [
        {"method": "fairseq greedy", "path": str(tiny_model), "args": "--task fast_translation", "baseline": True},
        {"method": "engine greedy", "path": str(tiny_model), "args": "--task fast_translation --drafter none",
         "lossless": True},
        {"method": "auto", "path": str(tiny_model), "args": "--task fast_translation --drafter auto", "lossless": True},
    ]
    results = bench_harness.run_benchmark(rows, tiny_corpus, None, tmp_path, batch_sizes=[4], runs=1,
                                          timed_sentences=16, threads=1, memory=False, **quiet)
    by = {r["method"]: r for r in results}
    assert "drafter_choice" not in by["engine greedy"]
    choice = by["auto"]["drafter_choice"]
    assert choice.startswith("drafter auto: ") and "ms per token" in choice
    assert f"- auto, batch 4: {choice}" in (tmp_path / "results.md").read_text().splitlines()


def test_ctranslate2_greedy_matches_fairseq_greedy_quality(bench):
    results, _ = bench
    by = {(r["method"], r["batch_size"]): r for r in results}
    for bs in (1, 8):
        assert abs(by[("CTranslate2 greedy", bs)]["bleu"] - by[("fairseq greedy", bs)]["bleu"]) < 1.5


def test_missing_checkpoint_is_a_clear_error(tiny_corpus, tmp_path):
    rows = [{"method": "x", "model": "nothing-here", "baseline": True}]
    with pytest.raises(bench_harness.BenchmarkError, match="not found; train it first"):
        bench_harness.run_benchmark(rows, tiny_corpus, tmp_path, tmp_path / "out", **quiet)


def test_empty_test_set_is_a_clear_error(tiny_corpus, tmp_path):
    corpus = tmp_path / "c"
    (corpus / "bin").mkdir(parents=True)
    for f in (tiny_corpus / "bin").iterdir():
        (corpus / "bin" / f.name).symlink_to(f)
    (corpus / "test.de").write_text("")
    with pytest.raises(bench_harness.BenchmarkError, match="empty"):
        Corpus(corpus)


def test_lossless_row_without_greedy_baseline_is_a_clear_error(tiny_corpus, tiny_model, tmp_path):
    rows = [{"method": "x", "path": str(tiny_model), "args": "--task fast_translation", "lossless": True}]
    with pytest.raises(bench_harness.BenchmarkError, match="no greedy baseline"):
        bench_harness.run_benchmark(rows, tiny_corpus, None, tmp_path, batch_sizes=[4], runs=1,
                                    timed_sentences=4, **quiet)


def test_quality_batch_size_reuses_one_full_pass_and_checks_lossless_rows(tiny_corpus, tiny_model, tmp_path):
    rows = [
        {"method": "fairseq greedy", "path": str(tiny_model), "args": "--task fast_translation", "baseline": True},
        {"method": "engine greedy", "path": str(tiny_model), "args": "--task fast_translation --drafter none",
         "lossless": True},
    ]
    results = bench_harness.run_benchmark(rows, tiny_corpus, None, tmp_path, batch_sizes=[1, 8], runs=1,
                                          timed_sentences=8, threads=1, max_len=(1.2, 10), quality_batch_size=8,
                                          memory=False, **quiet)
    by = {(r["method"], r["batch_size"]): r for r in results}
    assert [(r["method"], r["batch_size"]) for r in results][:2] == [("fairseq greedy", 8), ("fairseq greedy", 1)]
    for bs, compared in ((8, 120), (1, 8)):
        r = by[("engine greedy", bs)]
        assert r["bleu_batch_size"] == 8 and r["sentences"] == 120
        assert r["identical_to_greedy"] == 1.0 and r["identical_sentences"] == compared
        assert r["mean_accepted"] == r["mean_accepted_all"] == 1.0  # no drafter: one token per row and call
        assert r["model_calls"] == by[("fairseq greedy", bs)]["model_calls"]  # same steps as fairseq greedy
        assert r["peak_mem_mb"] is None  # memory=False
    # counts at batch 1 are batch 1's own, not the quality pass's (batch 8, all sentences)
    assert by[("engine greedy", 1)]["model_calls"] == by[("engine greedy", 1)]["timed_tokens"]
    assert by[("engine greedy", 1)]["model_calls_all"] == by[("engine greedy", 8)]["model_calls_all"]
    assert by[("fairseq greedy", 1)]["bleu"] == by[("fairseq greedy", 8)]["bleu"]


def test_ckpt_and_data_placeholders_and_skip_missing_drafters(tmp_path):
    ckpts, data = tmp_path / "ckpt", tmp_path / "data" / "en-de"
    (ckpts / "baseline").mkdir(parents=True)
    (ckpts / "baseline" / "checkpoint_best.pt").write_bytes(b"")
    row = {"method": "GAD", "model": "baseline",
           "args": "--drafter nar --drafter-path {CKPT}/gad_drafter/checkpoint_best.pt --x {DATA}/en-de-kd"}
    args = bench_rows.row_args(row, ckpts, data)
    assert args == f"--drafter nar --drafter-path {ckpts}/gad_drafter/checkpoint_best.pt --x {tmp_path / 'data'}/en-de-kd"
    # the drafter is not trained yet: skipped, and named as what is missing (the message blamed the verifier, which is there)
    assert bench_rows.missing_checkpoints(row, ckpts, data) == [ckpts / "gad_drafter" / "checkpoint_best.pt"]
    (ckpts / "gad_drafter").mkdir()
    (ckpts / "gad_drafter" / "checkpoint_best.pt").write_bytes(b"")
    assert bench_rows.missing_checkpoints(row, ckpts, data) == []


def test_skip_missing_names_the_rows_left_out_under_the_table(tmp_path, monkeypatch):
    """A newcomer reads results.md, not the console: a row left out for want of a model is named there,
    with what is missing; a row --only leaves out is not named (it was not asked for)."""
    ckpts = tmp_path / "ckpt"
    (ckpts / "baseline").mkdir(parents=True)
    (ckpts / "baseline" / "checkpoint_best.pt").write_bytes(b"")
    rows = [{"method": "fairseq greedy", "model": "baseline", "baseline": True},
            {"method": "GAD", "model": "baseline",
             "args": "--drafter nar --drafter-path {CKPT}/gad/checkpoint_best.pt"},
            {"method": "blockwise", "model": "heads"}]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    seen = {}

    def fake_jobs(rows, data, checkpoints, out, *args, skipped=(), **kwargs):  # the decoding itself is tested above
        seen.update(rows=[r["method"] for r in rows], skipped=list(skipped))
        results = [{"method": r["method"], "corpus": "en-de", "beam": 1, "batch_size": 1} for r in rows]
        bench_results.write_outputs(results, out, skipped)
        return results

    monkeypatch.setattr(bench_jobs, "run_benchmark_jobs", fake_jobs)
    monkeypatch.setattr(bench_results, "plot", lambda results, path: None)
    out = tmp_path / "out"
    out.mkdir()
    common = ["--rows", str(tmp_path / "rows.json"), "--data", str(tmp_path), "--checkpoints", str(ckpts),
              "--skip-missing"]
    benchmark.main(common + ["--out", str(out)])
    assert seen["rows"] == ["fairseq greedy"]
    notes = [line for line in (out / "results.md").read_text().splitlines() if line.startswith("- not run: ")]
    assert notes == [f"- not run: 'GAD' (no {ckpts}/gad/checkpoint_best.pt)",
                     f"- not run: 'blockwise' (no {ckpts}/heads/checkpoint_best.pt)"]
    benchmark.main(common + ["--out", str(out), "--only", "GAD"])
    assert seen == {"rows": ["fairseq greedy"], "skipped": [f"'GAD' (no {ckpts}/gad/checkpoint_best.pt)"]}


# ----------------------------------------------------------------------------------------------
# --jobs: rows split over processes side by side
# ----------------------------------------------------------------------------------------------


def test_split_keeps_rows_that_share_a_key_together_and_balances_the_rest():
    rows = ["a1", "b1", "a2", "c1", "b2", "d1"]  # a row's key: its letter; c and d share "cd" too
    keys = {"a1": ["a"], "a2": ["a"], "b1": ["b"], "b2": ["b"], "c1": ["c", "cd"], "d1": ["d", "cd"]}
    weight = {"a1": 5, "a2": 5, "b1": 1, "b2": 1, "c1": 2, "d1": 2}
    parts = bench_jobs.split(rows, keys.__getitem__, weight.__getitem__, 2)
    assert sorted(parts) == [[0, 2], [1, 3, 4, 5]]  # a (10) alone; b (2) and c+d (4) beside it, in order
    assert bench_jobs.split(rows, keys.__getitem__, weight.__getitem__, 9) == [[0, 2], [3, 5], [1, 4]]  # one part per unit
    assert bench_jobs.split(rows, lambda r: ["all"], weight.__getitem__, 2) == [list(range(6))]


def test_the_demos_rows_split_so_every_reference_runs_in_the_rows_own_job():
    """A row in one process and its baseline (reference, greedy output, engine greedy) in another would
    be an error or a ratio against nothing: every row's dependencies are in its own part."""
    rows = bench_rows.load_rows([REPO / "configs/benchmark/reference.json", REPO / "configs/benchmark/orders.json"])
    data, ckpts = REPO / "models/data/en-de", REPO / "models"
    parts = bench_jobs.split(rows, lambda r: bench_jobs._row_keys(r, ckpts, data), lambda r: bench_jobs._row_weight(r, (1, 32)), 2)
    assert len(parts) == 2 and sorted(i for p in parts for i in p) == list(range(len(rows)))
    part_of = {rows[i]["method"]: k for k, p in enumerate(parts) for i in p}
    for row in rows:
        folder, group = bench_rows.corpus_folder(row, data), bench_rows.group_of(row)
        baselines = [r for r in rows if r.get("baseline") and bench_rows.corpus_folder(r, data) == folder
                     and bench_rows.group_of(r) == group]
        models = {row.get("model"), row.get("greedy_model")} - {None}
        tied = baselines + [r for r in rows if r.get("model") in models and (r.get("baseline") or r.get("args", "").endswith("--drafter none"))]
        assert tied, row["method"]
        assert {part_of[r["method"]] for r in tied} == {part_of[row["method"]]}, row["method"]
    assert part_of["blockwise k=4 frozen: heads (exact)"] == part_of["blockwise k=4 frozen: fairseq greedy"]
    assert part_of["orders: IBDecoder"] == part_of["orders: L2R-KD"]


@pytest.fixture()
def two_groups(tiny_corpus, tiny_model, tmp_path):
    """Two independent groups on two copies of the tiny model: the rows split into two jobs."""
    import shutil

    other = tmp_path / "other" / "checkpoint_best.pt"
    other.parent.mkdir()
    shutil.copy(tiny_model, other)
    rows = [
        {"method": "greedy A", "path": str(tiny_model), "args": "--task fast_translation --beam-search fairseq", "baseline": True},
        {"method": "greedy B", "path": str(other), "args": "--task fast_translation --beam-search fairseq",
         "baseline": True, "group": "B"},
        {"method": "engine A", "path": str(tiny_model), "args": "--task fast_translation --drafter none", "lossless": True},
        {"method": "engine B", "path": str(other), "args": "--task fast_translation --drafter none", "lossless": True,
         "group": "B"},
    ]
    return rows, other


def test_jobs_give_one_processs_results_and_files(two_groups, tiny_corpus, tmp_path, capfd):
    rows, _ = two_groups
    kw = dict(batch_sizes=[4], runs=1, timed_sentences=8, threads=1, memory=False, max_len=(0.0, 6))  # short: quick
    kw["skipped"] = ["'GAD' (its drafter not trained yet)"]  # named under the table, by one process or by the merge
    one = bench_jobs.run_benchmark_jobs(rows, tiny_corpus, None, tmp_path / "one", jobs=1, **kw, **quiet)
    two = bench_jobs.run_benchmark_jobs(rows, tiny_corpus, None, tmp_path / "two", jobs=2, **kw)
    for folder in ("one", "two"):
        assert "- not run: 'GAD' (its drafter not trained yet)" in (tmp_path / folder / "results.md").read_text()
    assert [r["method"] for r in two] == [r["method"] for r in one] == ["greedy A", "greedy B", "engine A", "engine B"]
    assert [r["jobs"] for r in one] == [1] * 4 and [r["jobs"] for r in two] == [2] * 4
    for a, b in zip(one, two):  # the same decodes: only the clock differs
        for key in ("bleu", "model_calls", "model_calls_all", "identical_to_greedy", "timed_tokens", "ratio_vs"):
            assert a[key] == b[key], (a["method"], key)
    assert two[2]["identical_to_greedy"] == two[3]["identical_to_greedy"] == 1.0
    out = capfd.readouterr().out
    assert "[job 1] [bench" in out and "[job 2] [bench" in out
    written = [json.loads(line) for line in (tmp_path / "two" / "results.jsonl").read_text().splitlines()]
    assert [r["method"] for r in written] == [r["method"] for r in two]
    assert "2 processes side by side" in (tmp_path / "two" / "results.md").read_text()
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [LOCK, "results.jsonl", "results.md", "speed_vs_bleu.png"]


def test_a_failing_job_stops_the_run_with_its_error_and_writes_nothing(two_groups, tiny_corpus, tmp_path):
    rows, other = two_groups
    other.unlink()  # group B's checkpoint is gone: its job fails at its first row
    with pytest.raises(bench_harness.BenchmarkError, match="checkpoint .*other.* not found"):
        bench_jobs.run_benchmark_jobs(rows, tiny_corpus, None, tmp_path / "out", jobs=2, batch_sizes=[4], runs=1,
                                     timed_sentences=8, threads=1, memory=False, max_len=(0.0, 6))
    assert not (tmp_path / "out").exists() or [p.name for p in (tmp_path / "out").iterdir()] == [LOCK]


def _fail_once_started(started, message):
    import time

    for _ in range(1200):  # until the other job runs (it cannot be this process: each job has its own)
        if Path(started).exists():
            raise bench_harness.BenchmarkError(message)
        time.sleep(0.05)
    raise AssertionError("the other job never started")


def _write_later(started, late, seconds):
    import os
    import time

    Path(started).write_text(str(os.getpid()))
    time.sleep(seconds)
    Path(late).write_text("finished")


def _job(kind, *args):
    return {"fail": _fail_once_started, "write": _write_later}[kind](*args)


def test_the_first_failing_process_stops_the_others(tmp_path):
    """A job still running when another fails is killed at once, not left to finish and write (Pool.terminate)."""
    import os

    started, late = tmp_path / "started.pid", tmp_path / "late.txt"
    with pytest.raises(bench_harness.BenchmarkError, match="first"):
        bench_jobs.run_in_processes(_job, [("fail", str(started), "first"), ("write", str(started), str(late), 30.0)],
                                        poll=0.05)
    assert not late.exists()
    with pytest.raises(ProcessLookupError):  # the writer is gone, not sleeping on
        os.kill(int(started.read_text()), 0)


def test_jobs_refuse_a_gpu_and_a_bad_count_before_anything_runs(two_groups, tiny_corpus, tmp_path):
    rows, _ = two_groups
    with pytest.raises(bench_harness.BenchmarkError, match="use --jobs 1"):
        bench_jobs.run_benchmark_jobs(rows, tiny_corpus, None, tmp_path / "out", jobs=2, device="cuda")
    with pytest.raises(bench_harness.BenchmarkError, match="at least 1"):
        bench_jobs.run_benchmark_jobs(rows, tiny_corpus, None, tmp_path / "out", jobs=0)
    assert bench_jobs.run_benchmark_jobs([], tiny_corpus, None, tmp_path / "none", jobs=2, **quiet) == []  # all skipped
    with pytest.raises(bench_harness.BenchmarkError, match="both baselines"):  # the plan is checked in the parent
        bench_jobs.run_benchmark_jobs(rows + [dict(rows[0], method="greedy A2")], tiny_corpus, None, tmp_path / "out",
                                     jobs=2)
    assert not (tmp_path / "out").exists()


# --out: files replaced whole, checked writable before any decoding, one run at a time, workers stopped


def test_results_are_replaced_whole_or_not_at_all(tmp_path):
    """A write that fails half-way (here a row that does not serialise; a full disk alike) leaves the earlier file."""
    (tmp_path / "results.jsonl").write_text('{"method": "earlier"}\n')
    with pytest.raises(TypeError):
        bench_results.write_outputs([{"method": "a"}, {"method": "b", "bleu": object()}], tmp_path)
    assert (tmp_path / "results.jsonl").read_text() == '{"method": "earlier"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]  # no temporary file left


def test_an_output_that_cannot_be_written_is_found_before_any_decoding(two_groups, tiny_corpus, tmp_path):
    rows, _ = two_groups
    lines = []
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}"
        (out / "results.jsonl").mkdir(parents=True)  # where the results go, taken by a folder
        with pytest.raises(bench_harness.BenchmarkError, match="results.jsonl is not a file"):
            bench_jobs.run_benchmark_jobs(rows, tiny_corpus, None, out, jobs=jobs, batch_sizes=[4], runs=1,
                                              timed_sentences=8, threads=1, memory=False, max_len=(0.0, 6),
                                              log=lambda *a, **k: lines.append(a))
    assert lines == []  # nothing decoded
    with pytest.raises(bench_harness.BenchmarkError, match="not a file"):  # run_benchmark itself checks too
        bench_harness.run_benchmark(rows[:1], tiny_corpus, None, tmp_path / "out1", batch_sizes=[4], runs=1, **quiet)


def _descendants(pid):
    """The pids of ``pid``'s processes, children of children included (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _as_from_a_shell():
    """In the benchmark's process before exec: SIGINT and SIGTERM at their defaults and not blocked, as a
    command started from a shell has them (a test runner's worker may hand down another state)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _signal_state(pid):
    """The signal masks the kernel reports for ``pid`` (blocked, ignored, caught), for a failure's message."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return [line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
    except OSError:  # no /proc
        return "unknown"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_second_run_into_one_out_is_refused_and_a_signal_stops_every_worker(two_groups, tiny_corpus, tmp_path, sig):
    """Two benchmarks into one --out crashed on the shared .jobs folder; SIGTERM to a --jobs 2 benchmark left both
    workers decoding for minutes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    rows, _ = two_groups
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    cmd = [sys.executable, "-m", "scripts.benchmark", "--rows", str(tmp_path / "rows.json"), "--data", str(tiny_corpus),
           "--out", str(tmp_path / "out"), "--jobs", "2", "--threads", "1", "--batch-sizes", "1", "--runs", "200",
           "--no-memory", "--max-len-b", "20"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_as_from_a_shell)
    try:
        for _ in range(2400):  # until both jobs decode (bounded: a broken start fails, it does not hang)
            text = (tmp_path / "first.log").read_text()
            if "[job 1] [bench" in text and "[job 2] [bench" in text or first.poll() is not None:
                break
            time.sleep(0.1)
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        workers = _descendants(first.pid)
        assert len(workers) >= 2
        second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode != 0 and f"another run (pid {first.pid}) is writing into" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        state = _signal_state(first.pid)
        first.send_signal(getattr(signal, sig))
        try:
            first.wait(timeout=600)  # a bound against a hang, not a speed: a loaded 2-core CI machine is slow to unwind
        except subprocess.TimeoutExpired:
            pytest.fail(f"{sig} did not stop the benchmark within 600 s; its signal state then: {state}; its log: "
                        + (tmp_path / "first.log").read_text()[-2000:])
        for _ in range(600):
            if not any(_alive(p) for p in workers):
                break
            time.sleep(0.1)
        assert not [p for p in workers if _alive(p)], "workers outlived the benchmark"
        assert not (tmp_path / "out" / ".jobs").exists()
    finally:
        for p in [first.pid] + _descendants(first.pid):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        first.wait()
        log.close()
