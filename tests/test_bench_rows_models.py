"""A benchmark row for several models ("models"): one row per model, each timed in its own model's
group (the GEC-like rows at tiny and base size on one corpus); CTranslate2 rows' compute type."""
import json

import pytest

from scripts.lab.evaluation.bench_rows import BenchmarkError, group_of, load_rows


def _rows(tmp_path, rows):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    return load_rows([path])


def test_a_row_for_two_models_is_two_rows_in_their_own_groups(tmp_path):
    rows = _rows(tmp_path, [{"method": "fairseq greedy", "models": ["tiny", "base"], "args": "--beam-search fairseq",
                             "baseline": True},
                            {"method": "IAD", "models": ["tiny", "base"], "group": "g", "args": "--drafter input_copy"}])
    assert [r["method"] for r in rows] == ["tiny: fairseq greedy", "base: fairseq greedy", "tiny: IAD", "base: IAD"]
    assert [r["model"] for r in rows] == ["tiny", "base", "tiny", "base"]
    assert [group_of(r) for r in rows] == ["tiny", "base", "g/tiny", "g/base"]
    assert all("models" not in r for r in rows)


@pytest.mark.parametrize("row", [{"method": "x", "models": []}, {"method": "x", "models": "tiny"},
                                 {"method": "x", "models": ["a"], "model": "b"}])
def test_a_bad_models_list_is_refused(tmp_path, row):
    with pytest.raises(BenchmarkError, match="'models' is a non-empty list"):
        _rows(tmp_path, [row])


def test_the_gec_rows_expand_per_model_and_ask_for_int8():
    rows = load_rows(["configs/benchmark/gec.json"])
    models = {r["model"] for r in rows}
    assert models == {"gec_tiny", "gec_base"}
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        assert sum(bool(r.get("baseline")) for r in mine) == 2  # greedy and beam 5, per model
        assert {r.get("compute_type", "default") for r in mine if r.get("backend") == "ctranslate2"} == {"default", "int8"}
