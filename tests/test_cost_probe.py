"""The cost probe (``python -m scripts.cost_probe``, ``scripts/lab/evaluation/verification_cost.py``): one engine
iteration verifying a draft of width m against a plain step, on tiny random weights, on the CPU."""
import json
import sys

import pytest
import torch

from fairseq_plugins.decoding.step import DecoderStep
from scripts.lab.evaluation import verification_cost as vc
from tests.conftest import REPO, run

STEPS, REPEATS = 6, 5


def test_command_prints_a_table_and_a_record_per_size_batch_and_width(tmp_path):
    """The CI run: every (size, batch, width) has a record; width 1 is the yardstick (ratio exactly 1);
    a wider width's intervals are the engine's iterations *at that width* (a probe that timed plain
    steps for every width would count none there)."""
    out = tmp_path / "probe" / "cost.jsonl"
    proc = run([sys.executable, "-m", "scripts.cost_probe", "--sizes", "tiny", "--batches", "1", "2",
                "--widths", "1", "3", "--steps", str(STEPS), "--repeats", str(REPEATS), "--out", str(out)], cwd=REPO)
    lines = proc.stdout.splitlines()
    assert any(line.startswith("### tiny: transformer_fast_tiny (d=128") and "cpu fp32" in line for line in lines)
    assert "| batch | plain step ms | m=1 | m=3 |" in lines
    rows = {line.split(" | ")[0]: line for line in lines if line.startswith("| 1 |") or line.startswith("| 2 |")}
    assert set(rows) == {"| 1", "| 2"} and all("1.00x" in r and "-" not in r for r in rows.values())
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["size"], r["batch"], r["width"]) for r in records) == [
        ("tiny", b, w) for b in (1, 2) for w in (1, 3)]
    assert [p.name for p in out.parent.iterdir()] == ["cost.jsonl"]  # written atomically: no temporary left
    for r in records:
        assert r["device"] == "cpu" and r["dtype"] == "fp32" and r["threads"] == 1 and r["torch"] == torch.__version__
        assert r["draft_slots"] == r["width"] - 1 and r["steps"] == STEPS and r["vocab"] == 8000
        # every timed pass: STEPS intervals (the batch's first call holds the encoder and is not timed)
        assert 0 < r["iterations"] <= REPEATS * STEPS and r["median_seconds"] > 0
        if r["width"] == 1:
            assert r["ratio"] == 1.0
        else:
            assert r["ratio"] > 0 and r["ratio_range"][0] <= r["ratio"] <= r["ratio_range"][1]


def test_width_m_scores_m_columns_and_takes_the_plain_steps_calls(monkeypatch):
    """Width m: every call of the probe's engine feeds m columns and projects all m onto the vocabulary
    (not a CPU's lazy cut at the first rejection), no draft token is accepted, and the sentences take
    as many calls as plain greedy's (the same iterations, every one at the width)."""
    device, _ = vc.device_setup("cpu")
    torch.manual_seed(0)
    d, model, desc = vc.build_model("tiny", device)
    assert (desc["d"], desc["layers"], desc["vocab"]) == (128, 3, 8000)
    calls = []  # (columns fed, columns projected onto the vocabulary) of each call
    real_call, real_projection = DecoderStep.__call__, DecoderStep.output_layer

    def recording(self, cache, tokens, slots, project=slice(None)):
        calls.append([tokens.size(1), 0])
        return real_call(self, cache, tokens, slots, project=project)

    def projecting(self, hidden):
        calls[-1][1] += hidden.size(1)
        return real_projection(self, hidden)

    monkeypatch.setattr(DecoderStep, "__call__", recording)
    monkeypatch.setattr(DecoderStep, "output_layer", projecting)
    sample = vc.random_sample(d, 3, device)
    stats = {}
    for width in (1, 4):
        gen = vc.engine(model, d, width, STEPS)
        calls.clear()
        hyps = gen.generate([model], sample)
        assert calls == [[width, width]] * (STEPS + 1)
        assert [len(h[0]["tokens"]) for h in hyps] == [STEPS + 1] * 3  # the length forced: STEPS tokens and EOS
        stats[width] = gen.stats
    assert stats[4]["model_calls"] == stats[1]["model_calls"] == STEPS + 1
    assert stats[4]["draft_tokens"] == 3 * 3 * (STEPS + 1) and stats[4]["draft_accepted"] == 0


def test_options_without_the_plain_step_are_refused(capsys):
    with pytest.raises(SystemExit):
        vc.main(["--widths", "2", "4"])
    assert "include 1: the plain step" in capsys.readouterr().err


def test_gpu_evidence_step_reports_the_probe(tmp_path):
    """The speed part's step (here its CPU dry-run sizes): the tables in summary.md, every record in
    results.jsonl, the probe's own JSONL in the logs that the tarball carries; nothing more under OUT."""
    import argparse
    import time

    from scripts.lab.offline import evidence

    args = argparse.Namespace(device="cpu", deadline=600, start=time.time(), work=str(tmp_path / "work"),
                              out=str(tmp_path / "out"), part="speed")
    ev = evidence.Evidence(args)
    ev.step("cost probe", "cost_probe", ev.cost_probe)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "#### tiny: transformer_fast_tiny" in summary and "| batch | plain step ms | m=1 | m=3 |" in summary
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["step"], r["batch"], r["width"]) for r in rows) == [
        ("cost probe", b, w) for b in (1, 2) for w in (1, 3)]
    assert all(r["iterations"] > 0 for r in rows)
    assert len((tmp_path / "work" / "logs" / "cost_probe.jsonl").read_text().splitlines()) == 4
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.jsonl", "summary.md"]
