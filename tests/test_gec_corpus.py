"""The GEC-like corpus (scripts/build_gec_corpus.py, scripts/lab/corpora/gec_*.py): GEC's sentence lengths
and edit rates, a deterministic build, and splits that never share a correct sentence."""
from argparse import Namespace
import shlex

import pytest

from scripts.lab.corpora import gec_corpus, gec_errors, stdlib_prose
from scripts.corpus_edits import main as corpus_edits_main, summary
from scripts.lab.training.model_list import config_args


def _args(**kw):
    base = dict(seed=1, correct_share=0.25, edit_rate=0.12, train_copies=3, test_size=200, valid_size=100,
                min_words=12, max_words=50)
    base.update(kw)
    return Namespace(**base)


@pytest.fixture(scope="module")
def sentences():
    return stdlib_prose.prose_sentences(stdlib_prose.stdlib_texts(), 12, 50)


def test_the_standard_library_gives_enough_long_prose_sentences(sentences):
    assert len(sentences) > 5000
    words = [len(s.split()) for s in sentences]
    assert min(words) >= 12 and max(words) <= 50
    assert sum(words) / len(words) >= 18  # the mean; typo-en's is 5.3
    assert sentences == sorted(set(sentences))
    assert not any("::" in s or ">>>" in s or "{" in s for s in sentences)


def test_prose_filter_drops_code_and_keeps_prose():
    texts = ["Return the number of items in the container, counting every item that is not None.\n\n"
             "    >>> len(x) == 3\n\n"
             "Call self.method_name() to do the thing that this sentence describes in many words.\n\n"
             "Short one."]
    kept = stdlib_prose.prose_sentences(texts, 5, 50)
    assert kept == ["Return the number of items in the container, counting every item that is not None."]


def test_corruption_is_deterministic_and_edits_at_gecs_rate(sentences):
    splits = gec_corpus.build_pairs(sentences, _args())
    again = gec_corpus.build_pairs(sentences, _args())
    assert splits == again
    stats = summary([s for s, _ in splits["test"]], [t for _, t in splits["test"]])
    assert 0.05 <= stats["edit_ratio_mean"] <= 0.10  # GEC's 5-10% of tokens edited
    assert 0.2 <= stats["unchanged"] <= 0.5  # some sentences left correct, as in GEC data
    other_seed = gec_corpus.build_pairs(sentences, _args(seed=2))
    assert other_seed["test"] != splits["test"]


def test_splits_never_share_a_correct_sentence(sentences):
    splits = gec_corpus.build_pairs(sentences, _args())
    targets = {name: {t for _, t in rows} for name, rows in splits.items()}
    assert not targets["train"] & targets["test"] and not targets["train"] & targets["valid"]
    assert not targets["valid"] & targets["test"]
    assert len(targets["test"]) == 200 and len(splits["test"]) == 200  # one corruption each
    assert len(splits["train"]) > 2 * len(targets["train"])  # several corruptions of each training sentence


def test_every_edit_kind_occurs_and_correct_share_one_leaves_all_correct(sentences):
    sample = sentences[:400]
    assert all(gec_errors.corrupt(s, 1, 0, 1.0, 0.5) == (s, 0) for s in sample[:50])
    corrupted = [gec_errors.corrupt(s, 1, 0, 0.0, 0.3) for s in sample]
    pairs = list(zip(sample, (src for src, _ in corrupted)))
    assert all(edits > 0 for (ref, src), (_, edits) in zip(pairs, corrupted) if src != ref)
    assert sum(src != ref for ref, src in pairs) > 0.9 * len(pairs)
    assert any(len(src.split()) < len(ref.split()) for ref, src in pairs)  # drops
    assert any(len(src.split()) > len(ref.split()) for ref, src in pairs)  # doubles
    assert any(f" {w} " in f" {src} " and f" {w} " not in f" {ref} " for ref, src in pairs
               for w in gec_errors.PREPOSITIONS)
    assert gec_errors._suffix_change("returns") == "return" and gec_errors._suffix_change("parsing") == "parsed"


def test_corpus_edits_prints_corpora_side_by_side(tmp_path, capsys):
    for name, src, ref in (("a", ["x y z"], ["x y z"]), ("b", ["x y"], ["x y z"])):
        (tmp_path / f"{name}.src").write_text("\n".join(src) + "\n")
        (tmp_path / f"{name}.ref").write_text("\n".join(ref) + "\n")
    corpus_edits_main(["--pair", "a", str(tmp_path / "a.src"), str(tmp_path / "a.ref"),
                       "--pair", "b", str(tmp_path / "b.src"), str(tmp_path / "b.ref")])
    out = capsys.readouterr().out
    header, _, *rows = out.strip().splitlines()
    assert header.split("|")[2].strip() == "a" and header.split("|")[3].strip() == "b"
    unchanged = next(r for r in rows if r.startswith("| unchanged"))
    assert [c.strip() for c in unchanged.split("|")[2:4]] == ["1.0", "0.0"]


def test_the_manifest_ships_the_tiny_gec_verifier_and_records_what_does_not_ship():
    import json
    from pathlib import Path

    manifest = json.loads(Path("models/MANIFEST.json").read_text())
    records, shipped = manifest["not_shipped"], manifest["models"]
    assert "gec_tiny" in shipped and {"gec_base", "iad_typo"} <= set(records)
    for name, entry in records.items():  # each can be trained again with its command
        assert name not in shipped
        assert Path(entry["config"]).exists() and entry["command"].startswith(f"fairseq-train DATA/{entry['corpus']}/bin")
        assert len(entry["corpus_sha256"]) == 64 and entry["shipped"].startswith("not shipped")
    base, tiny = records["gec_base"], shipped["gec_tiny"]
    for entry in (base, tiny):
        assert all(a in entry["command"] for a in ("--source-lang gec", "--target-lang en", "--arch"))
    assert base["corpus_raw_sha256"].split()[0] == base["corpus_raw_sha256"][:64]
    assert tiny["corpus_sha256"] == base["corpus_sha256"]  # the side-by-side: one corpus
    assert tiny["evaluation_data"] == "data/gec-en" and tiny["test_bleu"] is not None
    assert "--arch transformer " in base["command"]  # Transformer base, not the tiny size
    for entry in (base, tiny):  # the recorded command is the config as it is now, not a stale copy of it
        words = shlex.split(entry["command"])
        assert [w for w in config_args(entry["config"], "CKPT", "DATA") if w not in words] == []
    assert "--arch transformer_fast_tiny " in tiny["command"]
    retrain = records["iad_typo"]["shipped"].split("retrain with ")[1]  # a list that still names it
    assert retrain.startswith("python -m scripts.reference_run --models ") and "--names iad_typo " in retrain
    assert any(line.split()[:1] == ["iad_typo"] for line in Path(retrain.split()[4]).read_text().splitlines())
