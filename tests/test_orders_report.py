"""The orders' report (scripts/orders_report.py): gaps beside the papers', the rule that flags a gap to
explain, speed by batch size, junction errors from the benchmark's saved translations."""
import json
import time
from pathlib import Path

import pytest

from scripts.lab.analysis.orders_report import BEYOND_PAPER, markdown, paper_entry, report_rows
from scripts import orders_report
from scripts.lab.evaluation import bench_harness

PAPERS = {"ib": {"source": "paper A", "batch": 1, "beams": {"4": {"gap": -0.2, "speed": 1.9}}}}


def result(method, model, beam, bs, bleu, speed, baseline=False, group="orders"):
    return {"method": method, "model": model, "beam": beam, "batch_size": bs, "bleu": bleu, "bleu_bp": 0.9,
            "bleu_ratio": 0.95, "speed_ratio": speed, "baseline": baseline, "group": group, "corpus": "c"}


def test_each_order_and_beam_against_the_controls_same_beam_beside_the_paper():
    results = [result("L2R", "l2r", b, bs, 40.0 + b / 10, 1.0, baseline=True) for b in (1, 4) for bs in (32, 1)]
    results += [result("IB", "ib", 4, 32, 38.0, 1.5), result("IB", "ib", 4, 1, 38.0, 2.6),
                result("IB", "ib", 1, 32, 39.0, 1.8), result("IB", "ib", 1, 1, 39.0, 2.3),
                result("other group", "x", 1, 1, 10.0, 9.9, group="")]
    manifest = {"ib": {"updates": 13500, "stopped": "converged at 13500 updates"}}
    errors = {("IB", 4): {"repeats_per_100": 1.0, "drops_per_100": 2.0, "ref_tokens": 200,
                          "repeat_position": [0, 1, 1, 0], "drop_position": [0, 4, 0, 0]},
              ("L2R", 4): {"repeats_per_100": 0.1, "drops_per_100": 1.5, "ref_tokens": 200,
                           "repeat_position": [0, 0, 0, 0], "drop_position": [1, 1, 0, 1]}}
    intervals = {("IB", 4): {"gap": -2.4, "low": -3.5, "high": -1.3, "below": 1.0, "samples": 1000}}
    rows = report_rows(results, PAPERS, manifest, errors=errors, intervals=intervals)
    assert [(r["method"], r["beam"]) for r in rows] == [("IB", 4), ("IB", 1)]  # the results' order, once each
    ib4, ib1 = rows
    assert ib4["gap"] == pytest.approx(38.0 - 40.4) and ib4["control_bleu"] == 40.4  # the same beam's control
    assert ib4["paper_gap"] == -0.2 and ib4["beyond_paper"] == pytest.approx(-2.2)
    assert ib4["to_explain"] and -2.2 < -BEYOND_PAPER
    assert ib4["speed"] == {32: 1.5, 1: 2.6} and ib4["paper_speed"] == 1.9 and ib4["paper_batch"] == 1
    assert ib1["paper_gap"] is None and not ib1["to_explain"]  # the paper has no beam-1 entry here
    assert ib4["errors"]["repeats_per_100"] == 1.0 and ib4["control_errors"]["drops_per_100"] == 1.5
    assert ib4["updates"] == 13500 and ib1["updates"] == 13500
    assert ib4["gap_interval"] == [-3.5, -1.3] and ib1["gap_interval"] is None
    table = markdown(rows)
    assert "-2.40 [-3.50, -1.30] (-0.20) **-2.20 beyond**" in table and "13,500 (converged)" in table
    cells = {tuple(c.strip() for c in line.strip("|").split("|")[:3:2]): [c.strip() for c in line.strip("|").split("|")]
             for line in table.split("\n\n")[0].splitlines()[2:]}
    assert cells[("IB", "1")][4] == "-1.10"  # no interval, no paper figure at beam 1
    assert "95% of the gaps over 1,000 paired bootstrap resamples" in table
    assert "1.00 / 2.00 (0.10 / 1.50)" in table and "1.90x (1)" in table and "- paper A" in table
    where = {tuple(c.strip() for c in line.strip("|").split("|")[:3]): [c.strip() for c in line.strip("|").split("|")[3:]]
             for line in table.split("Where they stand")[1].splitlines() if line.startswith("| ")}
    assert where[("IB", "4", "drops")] == ["0.00", "2.00", "0.00", "0.00"]  # 4 of 200 reference words, second quarter
    assert where[("L2R", "4", "drops")] == ["0.50", "0.50", "0.00", "0.50"] and ("L2R", "1", "drops") not in where
    manifest["ib"]["stopped"] = "not converged: 13500 of at most 30000 updates when packed"
    table = markdown(report_rows(results, PAPERS, manifest, errors=errors))
    assert "13,500 (not converged)" in table and "-2.40 (-0.20)" in table and "bootstrap" not in table


def test_precision_by_position_sits_beside_the_controls_at_the_same_beam():
    results = [result("L2R", "l2r", b, 1, 40.0, 1.0, baseline=True) for b in (1, 4)]
    results += [result("IB", "ib", 4, 1, 38.0, 2.0), result("IB", "ib", 1, 1, 37.0, 2.0)]
    ib = {1: {"precision": [0.70, 0.60], "matches": [7, 6], "total": [10, 10]}}
    by_position = {("IB", 4): ib, ("L2R", 4): {1: {"precision": [0.70, 0.75], "matches": [7, 3], "total": [10, 4]}},
                   ("L2R", 1): {1: {"precision": [0.5, None], "matches": [1, 0], "total": [2, 0]}}}
    rows = report_rows(results, PAPERS, {}, by_position=by_position)
    assert rows[0]["precision"] is ib and rows[0]["control_precision"] is by_position[("L2R", 4)]
    assert rows[1]["precision"] is None  # no translations of IB at beam 1: no row in the table
    table = markdown(rows).split("Where the translation loses")[1]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| IB")]
    assert cells == [["IB", "4", "1-grams", "70.0 (70.0) +0.0", "60.0 (75.0) -15.0"]]
    assert "0.00-0.50" in table and "0.50-1.00" in table
    assert "Where the translation loses" not in markdown(report_rows(results, PAPERS, {}))


def test_a_gap_within_the_rule_is_not_flagged_and_a_run_without_a_control_is_refused():
    results = [result("L2R", "l2r", 4, 1, 40.0, 1.0, baseline=True), result("IB", "ib", 4, 1, 38.4, 2.0)]
    (row,) = report_rows(results, PAPERS, {})
    assert row["beyond_paper"] == pytest.approx(-1.4) and not row["to_explain"]
    with pytest.raises(ValueError, match="no baseline row"):
        report_rows(results[1:], PAPERS, {})
    assert paper_entry(PAPERS, "ib", 10) is None and paper_entry(PAPERS, "nope", 4) is None


def test_the_shipped_papers_file_names_the_orders_of_the_benchmark():
    from conftest import REPO

    papers = json.loads((REPO / "configs/papers/orders.json").read_text())
    models = {r["model"] for r in json.loads((REPO / "configs/benchmark/orders.json").read_text())}
    named = set(papers) - {"_about"}
    assert named <= models, named - models
    for name in named:
        for beam, at in papers[name]["beams"].items():
            assert int(beam) >= 1 and at["speed"] > 0 and at["gap"] <= 0.5, (name, beam)


def test_saved_translations_are_the_scored_ones_and_the_report_reads_them(tiny_corpus, tiny_model, tmp_path, capsys):
    """The benchmark's quality pass writes what it scored: sacreBLEU of the file equals the row's BLEU;
    the report counts junction errors from those files against the test references."""
    import sacrebleu

    rows = [{"method": "L2R: greedy", "path": str(tiny_model), "args": "--task fast_translation --beam-search fairseq",
             "baseline": True, "group": "orders", "beams": [1, 2]},
            {"method": "engine", "path": str(tiny_model), "args": "--task fast_translation --drafter none",
             "lossless": True, "group": "orders"}]
    out = tmp_path / "out"
    results = bench_harness.run_benchmark(rows, tiny_corpus, None, out, batch_sizes=[4], runs=1, timed_sentences=8,
                                          threads=1, memory=False, max_len=(0.0, 8), hypotheses=out / "hypotheses",
                                          log=lambda *a, **k: None)
    refs = (tiny_corpus / "test.de").read_text(encoding="utf-8").splitlines()
    for r in results:
        lines = (out / "hypotheses" / r["hypotheses"]).read_text(encoding="utf-8").splitlines()
        assert len(lines) == len(refs)
        assert sacrebleu.corpus_bleu(lines, [refs]).score == pytest.approx(r["bleu"], abs=0.01)
    assert sorted(p.name for p in (out / "hypotheses").iterdir()) == [
        "L2R_greedy.beam1.txt", "L2R_greedy.beam2.txt", "engine.beam1.txt"]
    orders_report.main([str(out), "--data", str(tiny_corpus), "--manifest", str(tmp_path / "none.json")])
    (row,) = json.loads((out / "orders_report.json").read_text())
    assert row["method"] == "engine" and row["gap"] == 0.0  # lossless: its control's BLEU
    assert row["gap_interval"] == [0.0, 0.0]  # paired with its control's saved translations at the same beam
    assert row["errors"] == row["control_errors"] and row["errors"]["sentences"] == len(refs)
    assert row["precision"] == row["control_precision"] and sum(row["precision"]["1"]["total"]) > 0
    printed = capsys.readouterr().out
    assert "engine" in printed and "Where the translation loses" in printed


def test_a_missing_translations_file_is_a_clear_error(tmp_path):
    (tmp_path / "results.jsonl").write_text(json.dumps(dict(result("L2R", "l2r", 1, 1, 40.0, 1.0, baseline=True),
                                                            hypotheses="L2R.beam1.txt")) + "\n")
    with pytest.raises(SystemExit, match="missing: run the benchmark again"):
        orders_report.main([str(tmp_path), "--data", str(tmp_path / "c")])


def test_two_methods_that_would_share_a_translations_file_are_refused_up_front(tiny_corpus, tmp_path):
    rows = [{"method": "a: b", "baseline": True, "path": "x"}, {"method": "a b", "path": "x"}]
    with pytest.raises(bench_harness.BenchmarkError, match="one file"):
        bench_harness.run_benchmark(rows, tiny_corpus, None, tmp_path / "out", hypotheses=tmp_path / "h",
                                    log=lambda *a, **k: None)
    assert not (tmp_path / "out").exists()


def test_a_run_without_orders_reports_nothing_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "results.jsonl").write_text(json.dumps(result("greedy", "b", 1, 1, 40.0, 1.0, True, group="")) + "\n")
    orders_report.main([str(tmp_path), "--data", str(tmp_path / "c")])
    assert "nothing to report" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


def test_the_gpu_evidence_reports_the_orders_beside_the_papers(tiny_corpus, tmp_path, monkeypatch):
    """The speed part's benchmark of the orders' rows is followed by the orders' report, in OUT's summary
    and records (the benchmark itself is faked here: its run is the dry run's, tests/test_offline_bundle.py)."""
    import argparse

    from scripts.lab.offline import evidence

    refs = (tiny_corpus / "test.de").read_text(encoding="utf-8").splitlines()
    args = argparse.Namespace(device="cpu", deadline=600, start=time.time(), work=str(tmp_path / "work"), out=str(tmp_path / "out"),
                              part="speed", models_dir=str(tmp_path / "models"), batch_sizes=[1, 32], runs=1,
                              sentences=8, bench_only=None)
    ev = evidence.Evidence(args)
    ev.measured = tmp_path / "measured"
    ev.measured.mkdir()
    (ev.measured / "en-de").symlink_to(tiny_corpus)
    real = ev.checked

    def checked(name, cmd, limit=None):
        if "scripts.benchmark" not in map(str, cmd):
            return real(name, cmd, limit)
        out = Path(cmd[cmd.index("--out") + 1])
        assert "--save-hypotheses" in cmd
        (out / "hypotheses").mkdir(parents=True)
        rows = []
        for method, model, baseline, bleu in (("orders: L2R-KD", "l2r_kd", True, 40.0), ("orders: IBDecoder", "ibdecoder", False, 37.5)):
            name_ = method.replace(": ", "_").replace("-", "_") + ".beam4.txt"
            (out / "hypotheses" / name_).write_text("\n".join(refs) + "\n")
            rows += [dict(result(method, model, 4, bs, bleu, 1.0 if baseline else 2.0, baseline, group="orders"),
                          corpus="en-de", hypotheses=name_) for bs in (32, 1)]
        (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (out / "results.md").write_text("the table\n")
        return 0, ""

    monkeypatch.setattr(ev, "checked", checked)
    ev.benchmark("orders.json", False)
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    (report,) = [r for r in records if r.get("step") == "orders report orders.json"]
    assert report["gap"] == -2.5 and report["paper_gap"] == -0.2 and report["errors"]["repeats_per_100"] == 0.0
    assert "the orders beside the papers, fp32" in (tmp_path / "out" / "summary.md").read_text()


def test_accuracy_by_direction_sits_beside_the_controls(tiny_corpus, tiny_model, tmp_path):
    results = [result("L2R", "l2r", 4, 1, 40.0, 1.0, baseline=True), result("IB", "ib", 4, 1, 38.4, 2.0)]
    accuracy = {"ib": {"0": 0.65, "1": 0.6}, "l2r": {0: 0.667}}
    (row,) = report_rows(results, PAPERS, {}, accuracy=accuracy)
    assert row["accuracy"] == {"0": 0.65, "1": 0.6} and row["control_accuracy"] == {0: 0.667}
    assert "| 0.650 / 0.600 (0.667) " in markdown([row])
    assert "accuracy" not in markdown(report_rows(results, PAPERS, {}))  # no column when none was measured
    # from the checkpoints folder: the models found there (the control here), by direction
    (tmp_path / "l2r").mkdir()
    (tmp_path / "l2r" / "checkpoint_best.pt").symlink_to(tiny_model)
    found = orders_report.direction_accuracy(results, tmp_path, tiny_corpus, "orders")
    assert list(found) == ["l2r"] and list(found["l2r"]) == [0] and 0.0 < found["l2r"][0] < 1.0
