"""DDGviz: the Jacobi iteration matrix ends in the greedy result, every token is fixed by the
iteration count of Prop. 1, dependencies point backwards, and the script writes a PNG and HTML."""
import pytest

from engine_helpers import MAX_LEN_B, load, reference_greedy


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model):
    models, task = load(tiny_corpus, tiny_model)
    return models, task


def test_trace_converges_to_greedy(setup):
    from scripts.lab.viz.ddg import jacobi_trace

    models, task = setup
    ds = task.dataset("test")
    for sid in (0, 10, 47):
        sample = ds.collater([ds[sid]])
        greedy = reference_greedy(models, task, [sample])[sid]["tokens"].tolist()
        trace = jacobi_trace(models[0], task, sample, max_len_b=MAX_LEN_B)
        assert trace.greedy == greedy
        assert trace.iterates[-1] == greedy  # the fixed point is the greedy output (Prop. 1)
        assert 1 <= trace.iterations <= len(greedy)  # at most m iterations
        assert all(1 <= f <= trace.iterations for f in trace.fixed_at)
        # Jacobi fixes at least the first k tokens after k iterations
        assert all(f <= j + 1 for j, f in enumerate(trace.fixed_at))
        assert all(p < j and (p < 0 or trace.fixed_at[p] < trace.fixed_at[j]) for j, p in enumerate(trace.parents))
        assert len(trace.probs) == trace.iterations and all(0.0 <= p <= 1.0 for row in trace.probs for p in row)


def test_script_writes_png_and_html(tiny_corpus, tiny_model, tmp_path):
    from scripts import ddgviz

    png, page = tmp_path / "ddg.png", tmp_path / "ddg.html"
    trace = ddgviz.main(["--path", str(tiny_model), "--data", str(tiny_corpus / "bin"), "--sentence-id", "10",
                         "--out", str(png), "--html", str(page), "--max-len-b", str(MAX_LEN_B)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = page.read_text(encoding="utf-8")
    assert text.count("<tr>") == trace.iterations + 1
    trace2 = ddgviz.main(["--path", str(tiny_model), "--data", str(tiny_corpus / "bin"), "--source",
                          "Open the file", "--out", str(tmp_path / "src.png"), "--max-len-b", str(MAX_LEN_B)])
    assert trace2.tokens[-1] == "</s>" and (tmp_path / "src.png").exists()
