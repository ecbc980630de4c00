"""The paper pipelines end to end on small files of the real formats, written by the test itself:
WMT-style parallel plain text and SGM test sets (WMT14 en-de, WMT16 en-ro) and ASPEC's
``|||``-separated lines, with real sentences from the system's translated message catalogs.
Each pipeline: prepare -> train a few updates (tiny dims) -> average -> decode with the benchmark
harness -> write the table; plus the dry runs of every table, the refusals, views, averaging and
the GPU-build choice of scripts/setup.sh.
"""
import io
import json
import math
import os
import random
import subprocess
import unicodedata
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

from conftest import REPO
from scripts.lab.evaluation import paper_plan
from scripts.lab.corpora import message_catalogs
from scripts.pipelines import corpus_prep
from scripts.pipelines import table as table_driver

TINY_TRAIN = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
              "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 "
              "--decoder-attention-heads 2 --max-update 6 --max-tokens 1024 --update-freq 1 --save-interval-updates 1 "
              "--keep-interval-updates 3 --num-workers 0 --log-interval 1")
DECODE = ["--device", "cpu", "--runs", "1", "--timed-sentences", "10", "--workers", "1", "--average-count", "2"]
SETS_14 = ["wmt09", "wmt10", "wmt11", "wmt12", "wmt13", "wmt14/full", "wmt15", "wmt16"]
PER_SET = 12


# ----------------------------------------------------------------------------------------------
# writing the real formats
# ----------------------------------------------------------------------------------------------


def catalog_pairs(lang, english_source=True, n=None):
    """(English, lang) or (lang, English) message pairs from /usr/share/locale, shuffled reproducibly."""
    cat = message_catalogs.collect("/usr/share/locale", [lang])
    pairs = []
    for domain in sorted(cat):
        for msgid, msgstr in sorted(cat[domain].items()):
            a, b = message_catalogs.normalise(msgid), message_catalogs.normalise(msgstr)
            if (message_catalogs.keep_message(msgid) and message_catalogs.keep_message(msgstr) and a != b
                    and 2 <= len(a.split()) <= 25):
                pairs.append((a, b) if english_source else (b, a))
    if len(pairs) < 500:
        pytest.skip(f"too few translated '{lang}' catalogs under /usr/share/locale")
    random.Random(7).shuffle(pairs)
    return pairs[:n] if n else pairs


def write_sgm(path, segments, setid, lang, role):
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f'<seg id="{i}">{s}</seg>\n' for i, s in enumerate(segments, 1))
    path.write_text(f'<{role}set setid="{setid}" srclang="any" trglang="{lang}">\n<doc sysid="ref" docid="d1" '
                    f'genre="news" origlang="en">\n<p>\n{body}</p>\n</doc>\n</{role}set>\n', encoding="utf-8")


def write_wmt(raw, pairs, corpora, langpair, sets):
    """Training corpora as plain parallel files under raw/training, test sets as SGM files under
    sacreBLEU's own relative paths.  Returns {set name: (sources, references)}."""
    from sacrebleu.dataset import DATASETS

    src, tgt = langpair.split("-")
    n_train = 300
    train, rest = pairs[:n_train], pairs[n_train:]
    for i, (name, files) in enumerate(corpora):
        part = train[i::len(corpora)]
        for j, lang in enumerate((src, tgt)):
            p = raw / "training" / files[lang]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("".join(x[j] + "\n" for x in part), encoding="utf-8")
    written = {}
    for k, name in enumerate(sets):
        chunk = rest[k * PER_SET:(k + 1) * PER_SET]
        src_rel, ref_rel = DATASETS[name].langpairs[langpair][:2]
        write_sgm(raw / "sgm" / src_rel, [c[0] for c in chunk], name, src, "src")
        write_sgm(raw / "sgm" / ref_rel, [c[1] for c in chunk], name, tgt, "ref")
        written[name] = ([c[0] for c in chunk], [c[1] for c in chunk])
    return written


def write_aspec(root, pairs):
    """ASPEC-JE layout: train/train-N.txt (5 fields), dev/devtest/test (4 fields)."""
    files = {"train/train-1.txt": pairs[:150], "train/train-2.txt": pairs[150:250], "train/train-3.txt": pairs[250:300],
             "dev/dev.txt": pairs[300:315], "devtest/devtest.txt": pairs[315:330], "test/test.txt": pairs[330:345]}
    for rel, chunk in files.items():
        p = root / "ASPEC-JE" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for i, (ja, en) in enumerate(chunk, 1):
            fields = ([f"0.{900 - i}"] if rel.startswith("train") else []) + [f"A-B-{i:04d}", str(i), ja, en]
            lines.append(" ||| ".join(fields))
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files


WMT14_FILES = [("europarl-v7", {"en": "europarl-v7.de-en.en", "de": "europarl-v7.de-en.de"}),
               ("commoncrawl", {"en": "commoncrawl.de-en.en", "de": "commoncrawl.de-en.de"}),
               ("news-commentary-v9", {"en": "news-commentary-v9.de-en.en", "de": "news-commentary-v9.de-en.de"})]
WMT16_FILES = [("europarl-v8", {"en": "europarl-v8.ro-en.en", "ro": "europarl-v8.ro-en.ro"}),
               ("SETIMES2", {"en": "SETIMES.en-ro.en", "ro": "SETIMES.en-ro.ro"})]


@pytest.fixture(scope="module")
def papers(tmp_path_factory):
    """A raw-data root (raw/wmt14, raw/wmt16) and an ASPEC copy, written from the message catalogs."""
    root = tmp_path_factory.mktemp("papers")
    de = catalog_pairs("de")
    wmt14 = write_wmt(root / "raw" / "wmt14", de, WMT14_FILES, "en-de", SETS_14)
    ro = catalog_pairs("ro")
    # cedilla letters (the old Romanian encoding) on the Romanian side, to be normalised to comma-below
    ro = [(en, r.replace("ș", "ş").replace("ț", "ţ")) if i % 2 == 0 else (en, r) for i, (en, r) in enumerate(ro)]
    wmt16 = write_wmt(root / "raw" / "wmt16", ro, WMT16_FILES, "en-ro", ["wmt16/dev", "wmt16"])
    ja = catalog_pairs("ja", english_source=False)
    write_aspec(root / "aspec", ja)
    return {"root": root, "wmt14": wmt14, "wmt16": wmt16}


def drive(papers, *args):
    """Run scripts/pipelines/table.py in-process (its steps are subprocesses); returns its output."""
    out = io.StringIO()
    with redirect_stdout(out):
        table_driver.main(["--root", str(papers["root"]), "--offline", "--train-extra", TINY_TRAIN, *DECODE, *args])
    return out.getvalue()


def results(path):
    return {(r["method"], r["beam"]): r for r in map(json.loads, Path(path).read_text().splitlines())}


# ----------------------------------------------------------------------------------------------
# end to end: WMT14 (Imamura's recipe), WMT16 (Jacobi table), ASPEC (Imamura's ASPEC section)
# ----------------------------------------------------------------------------------------------


def test_wmt14_imamura_table_end_to_end(papers):
    log = drive(papers, "--table", "imamura", "--sections", "base_wmt14", "--only", "Single-token L2R", "bidir")
    data = papers["root"] / "data" / "wmt14_en_de_imamura"
    # the corpus: the layout scripts/benchmark.py reads, test = newstest2010..2016 concatenated, raw text
    expected = [r for name in SETS_14[1:] for r in papers["wmt14"][name][1]]
    assert (data / "test.de").read_text(encoding="utf-8").splitlines() == expected
    assert (data / "valid.en").read_text(encoding="utf-8").splitlines() == papers["wmt14"]["wmt09"][0]
    assert (data / "subword").read_text().strip() == "subword-nmt" and (data / "bpe.codes").exists()
    from scripts.lab.evaluation.corpus import Corpus

    corpus = Corpus(data)
    assert (corpus.src, corpus.tgt, len(corpus.references)) == ("en", "de", len(expected))
    assert not list(data.rglob("*.tmp*")) and not (data / "bin.tmp").exists()  # nothing half-written
    # each model: checkpoint_final.pt is the mean of its 2 best checkpoints (Imamura: "N best")
    ckpt = papers["root"] / "imamura" / "checkpoints"
    for name in ("base_wmt14_l2r", "base_wmt14_bidir"):
        best = sorted(ckpt.glob(f"{name}/checkpoint.best_loss_*.pt"), key=lambda p: float(p.stem.split("_")[-1]))[:2]
        assert len(best) == 2
        states = [torch.load(p, map_location="cpu")["model"] for p in best]
        final = torch.load(ckpt / name / "checkpoint_final.pt", map_location="cpu")["model"]
        for k, v in final.items():
            if torch.is_floating_point(v):
                assert torch.allclose(v, (states[0][k].double() + states[1][k].double()).div(2).to(v.dtype)), k
        assert any(not torch.equal(states[0][k], states[1][k]) for k in final)  # a real average of two models
    # the table: the paper's numbers beside measured ones, the L2R row is the ratio reference
    res = results(papers["root"] / "imamura" / "results" / "base_wmt14" / "results.jsonl")
    assert set(res) == {("Single-token L2R", 10), ("Double-token bidir. (proposed)", 10)}
    assert all(r["sentences"] == len(expected) for r in res.values())
    md = (papers["root"] / "imamura" / "table.md").read_text()
    l2r = next(line for line in md.splitlines() if line.startswith("| Single-token L2R"))
    cells = [c.strip() for c in l2r.strip("|").split("|")]
    assert cells[:4] == ["Single-token L2R", "10", "26.45", "1,997 (—)"]
    assert float(cells[4]) == res[("Single-token L2R", 10)]["bleu"] and cells[6] == "1.00"
    assert "| Double-token bidir. (proposed) | 10 | 25.62 | 2,251 (113%) |" in md
    # resumable: a second run redoes nothing but the decoding bookkeeping
    before = (ckpt / "base_wmt14_l2r" / "train.log").stat().st_size
    again = drive(papers, "--table", "imamura", "--sections", "base_wmt14", "--only", "Single-token L2R", "bidir")
    assert again.count("done already") >= 6 and "$ " not in again.replace("$ write", "")
    assert (ckpt / "base_wmt14_l2r" / "train.log").stat().st_size == before
    assert "fairseq_cli.train" in log


def test_wmt16_jacobi_table_end_to_end(papers):
    drive(papers, "--table", "jacobi", "--sections", "enro", "--only", "HGJ")
    data = papers["root"] / "data" / "wmt16_en_ro"
    test_ro = (data / "test.ro").read_text(encoding="utf-8")
    # Romanian normalisation (default): cedilla letters -> comma below, in the BLEU reference too
    assert "ş" not in test_ro and "ţ" not in test_ro
    raw_refs = papers["wmt16"]["wmt16"][1]
    assert test_ro.splitlines() == [r.replace("ş", "ș").replace("ţ", "ț").replace("„", '"').replace("”", '"')
                                    for r in raw_refs]
    assert any("ş" in r or "ţ" in r for r in raw_refs)
    res = results(papers["root"] / "jacobi" / "results" / "enro" / "results.jsonl")
    hgj = res[("HGJ Decoding (b = 3)", 1)]
    assert hgj["identical_to_greedy"] == 1.0 and hgj["sentences"] == PER_SET  # lossless on every sentence
    md = (papers["root"] / "jacobi" / "table.md").read_text()
    assert "| HGJ Decoding (b = 3) | 1 | 1.38 | 27.41 |" in md and "| 1.000 |" in md


def test_aspec_imamura_section_end_to_end(papers):
    drive(papers, "--table", "imamura", "--sections", "base_aspec", "--only", "Single-token L2R",
          "--aspec-dir", str(papers["root"] / "aspec"))
    data = papers["root"] / "data" / "aspec_ja_en"
    assert len((data / "test.en").read_text().splitlines()) == 30  # devtest + test
    dja, den = (data / "bin" / "dict.ja.txt").read_text(), (data / "bin" / "dict.en.txt").read_text()
    assert dja != den  # one vocabulary per side (Imamura & Sumita)
    raw = (data / "test.ja").read_text(encoding="utf-8").splitlines()
    seg = (data / "work" / "test.tok.ja").read_text(encoding="utf-8").splitlines()
    assert len(seg) == len(raw) and sum(s.count(" ") for s in seg) > 2 * sum(r.count(" ") for r in raw)  # MeCab words
    res = results(papers["root"] / "imamura" / "results" / "base_aspec" / "results.jsonl")
    assert res[("Single-token L2R", 10)]["sentences"] == 30
    assert "| Single-token L2R | 10 | 28.65 | 1,891 (—) |" in (papers["root"] / "imamura" / "table.md").read_text()


# ----------------------------------------------------------------------------------------------
# preparation details and refusals
# ----------------------------------------------------------------------------------------------


def test_aspec_sentencepiece_per_side(papers, tmp_path):
    from scripts.pipelines import prepare_aspec_ja_en as aspec

    out = tmp_path / "spm"
    aspec.main(["--aspec-dir", str(papers["root"] / "aspec"), "--out", str(out), "--subword", "sentencepiece",
                "--vocab-size", "1000", "--workers", "1"])
    assert (out / "subword").read_text().strip() == "sentencepiece"
    assert (out / "spm.ja.model").exists() and (out / "spm.en.model").exists()
    from scripts.lab.evaluation.corpus import Corpus

    c = Corpus(out)
    assert (c.src, c.tgt) == ("ja", "en")
    pieces = (out / "work" / "test.sub.en").read_text(encoding="utf-8").splitlines()
    # the pieces undo to the raw reference (sentencepiece drops control characters, e.g. a \x04 in a catalog)
    printable = ["".join(ch for ch in r if unicodedata.category(ch)[0] != "C") for r in c.references]
    assert [c.detokenize(p) for p in pieces] == printable


def test_aspec_malformed_line_is_refused(papers, tmp_path):
    from scripts.pipelines import prepare_aspec_ja_en as aspec

    bad = tmp_path / "aspec"
    write_aspec(bad, catalog_pairs("ja", english_source=False))
    path = bad / "ASPEC-JE" / "train" / "train-2.txt"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace(" ||| ", " | ", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit, match=r"train-2.txt:3: expected 5"):
        aspec.main(["--aspec-dir", str(bad), "--out", str(tmp_path / "out"), "--workers", "1"])
    assert not (tmp_path / "out" / "work" / "train.raw.ja").exists()  # nothing half-written
    assert not list((tmp_path / "out").rglob("*.tmp*"))
    (bad / "ASPEC-JE" / "dev" / "dev.txt").unlink()
    path.write_text("\n".join(line for i, line in enumerate(lines) if i != 2) + "\n")
    with pytest.raises(SystemExit, match="dev.txt not found under --aspec-dir"):
        aspec.main(["--aspec-dir", str(bad), "--out", str(tmp_path / "out2"), "--workers", "1"])


def test_wmt_refusals(papers, tmp_path):
    from scripts.pipelines import prepare_wmt14_en_de as wmt14

    raw = tmp_path / "raw"
    write_wmt(raw, catalog_pairs("de"), WMT14_FILES, "en-de", ["wmt13", "wmt14/full"])
    # a training file with one line less than its other side
    p = raw / "training" / "commoncrawl.de-en.de"
    p.write_text("".join(p.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(SystemExit, match="commoncrawl.de-en.en and .*commoncrawl.de-en.de differ in length"):
        wmt14.main(["--out", str(tmp_path / "a"), "--raw-dir", str(raw), "--offline", "--workers", "1"])
    assert not list((tmp_path / "a").rglob("train.raw.*"))
    # a missing training corpus, offline: the names to provide and where they come from
    p.unlink()
    with pytest.raises(SystemExit, match=r"commoncrawl.de-en.en and commoncrawl.de-en.de \(from https://www.statmt.org"):
        wmt14.main(["--out", str(tmp_path / "b"), "--raw-dir", str(raw), "--offline", "--workers", "1"])
    # a truncated SGM test set
    write_wmt(raw, catalog_pairs("de"), WMT14_FILES, "en-de", ["wmt13", "wmt14/full"])
    sgm = next(raw.rglob("newstest2014-deen-ref.de.sgm"))
    sgm.write_text(sgm.read_text().split("<seg")[0])
    with pytest.raises(SystemExit, match="holds no <seg"):
        wmt14.main(["--out", str(tmp_path / "c"), "--raw-dir", str(raw), "--offline", "--workers", "1"])
    # a test set that is absent, offline
    sgm.unlink()
    with pytest.raises(SystemExit, match="newstest2014-deen-ref.de.sgm"):
        wmt14.main(["--out", str(tmp_path / "d"), "--raw-dir", str(raw), "--offline", "--workers", "1"])


def test_views_reverse_and_dev_as_test(papers):
    main = papers["root"] / "data" / "wmt16_en_ro"
    if not (main / "DONE").exists():
        pytest.skip("needs the WMT16 corpus of test_wmt16_jacobi_table_end_to_end")
    from scripts.lab.evaluation.corpus import Corpus

    rev = corpus_prep.make_view(main, papers["root"] / "data" / "view_ro_en", reverse=True)
    c = Corpus(rev)
    assert (c.src, c.tgt) == ("ro", "en") and c.references == (main / "test.en").read_text().splitlines()
    dev = corpus_prep.make_view(main, papers["root"] / "data" / "view_dev", test_from="valid")
    assert Corpus(dev).references == (main / "valid.ro").read_text().splitlines()
    assert os.path.realpath(dev / "bin" / "test.en-ro.ro.bin") == str((main / "bin" / "valid.en-ro.ro.bin").resolve())


def test_average_refuses_too_few_checkpoints(tmp_path):
    from scripts import average_checkpoints

    (tmp_path / "checkpoint_1_10.pt").write_bytes(b"")
    with pytest.raises(SystemExit, match=r"has 1 update checkpoints .*, 5 wanted"):
        average_checkpoints.select(tmp_path, num_update=5)


def test_table_shows_calls_per_token_and_calls_per_timed_sentence(tmp_path):
    """The table reads the benchmark's results: calls/token beside the ratio, and calls per sentence
    over the sentences the calls were counted on (the timed ones, not every test sentence)."""
    from scripts.lab.evaluation import paper_tables as T

    table = T.Table("t", "T", "cite", {}, [], [T.Section("s", "S", "c", 1)],
                    [T.Row("s", "greedy", "m", "", reference=True), T.Row("s", "GAD", "m", "")], ["Iter."])
    common = {"beam": 1, "batch_size": 1, "bleu_batch_size": 1, "sentences": 100, "timed_sentences": 10,
              "counts_sentences": 10, "device": "cpu", "dtype": "fp32", "runs": 1, "max_len": "1.2*src+10"}
    res = [dict(common, method="greedy", seconds=2.0, tokens_per_s=50.0, model_calls=100, calls_per_token=1.0),
           dict(common, method="GAD", seconds=1.0, tokens_per_s=100.0, model_calls=40, calls_per_token=0.4)]
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in res))
    md = T.render_table(table, table.sections, table.rows, tmp_path, {})
    head = next(line for line in md.splitlines() if line.startswith("| method"))
    gad = next(line for line in md.splitlines() if line.startswith("| GAD"))
    cells = dict(zip([c.strip() for c in head.strip("|").split("|")], [c.strip() for c in gad.strip("|").split("|")]))
    assert cells["speed-up"] == "2.00" and cells["calls/token"] == "0.400"
    assert cells["calls/sentence"] == "4.00"  # 40 calls over the 10 timed sentences


# ----------------------------------------------------------------------------------------------
# dry runs: every command of every full-size table, nothing written
# ----------------------------------------------------------------------------------------------


def dry(table, tmp_path, *extra):
    out = io.StringIO()
    with redirect_stdout(out):
        table_driver.main(["--table", table, "--dry-run", "--root", str(tmp_path / "root"), "--device", "cuda",
                           "--gpus", "8", *extra])
    assert not (tmp_path / "root").exists()  # nothing run, nothing written
    return out.getvalue()


def registered(*names):
    return not paper_plan.missing_registrations(names)


def test_dry_run_imamura(tmp_path):
    text = dry("imamura", tmp_path)
    assert text.count("fairseq_cli.train") == 24  # 2 sizes x 2 corpora x (5 orders + Mask-Predict)
    assert "prepare_wmt14_en_de.py --recipe imamura" in text
    assert "SKIPPED corpus aspec: ASPEC is licensed: pass --aspec-dir" in text
    assert f"--warmup-updates {5 * math.ceil(4_500_000 / 500)}" in text  # 5 epochs of ~500 sentences
    assert "--target-order head_tail --double-topk" in text and "--iter-decode-with-beam 5" in text
    assert "--best 10" in text and "--batch-sizes 32" in text and "--fp16" in text
    # Imamura trained on 1 GPU with 4 x 4096 tokens: on 8 GPUs, 8 x 2048 x 1
    assert "--max-tokens 2048 --update-freq 1" in text


def test_dry_run_gad(tmp_path):
    text = dry("gad", tmp_path)
    assert "--max-tokens 20000 --update-freq 4" in text  # Table 13 on 8 GPUs, as the paper
    assert "--acceptance gad_pp --gad-beta 5 --gad-tau 6.0" in text  # WMT16 EN-RO high-efficiency
    assert "corpus_prep.py view" in text and "--reverse" in text
    drafter = [line for line in text.splitlines() if "train drafter_ende" in line][0]
    built = registered("task:nar_drafter", "arch:nar_drafter_base", "criterion:nar_drafter_loss")
    assert ("not built in this plugin yet" in drafter) == (not built)
    one = dry("gad", tmp_path, "--gpus", "1", "--sections", "ende")
    assert "--max-tokens 20000 --update-freq 32" in one and "roen" not in one


def test_dry_run_stern_ibdecoder_jacobi(tmp_path):
    stern = dry("stern", tmp_path)
    assert "--block-heads 10 --freeze-base" in stern and "--test-from valid" in stern
    assert stern.count("fairseq_cli.train") == 23
    heads = [line for line in stern.splitlines() if "train bw_both_k8" in line][0]
    built = registered("arch:blockwise_transformer", "criterion:blockwise_cross_entropy")
    assert ("not built in this plugin yet" in heads) == (not built)
    ib = dry("ibdecoder", tmp_path)
    assert "--num-update-checkpoints 5" in ib and "--lenpen 0.6" in ib and "--target-order multi_segment --directions 4" in ib
    kd = [line for line in ib.splitlines() if "train transformer_kd" in line][0]
    assert ("SKIPPED" in kd) == (not (REPO / "scripts" / "distill.py").exists())
    jac = dry("jacobi", tmp_path)
    assert "--jacobi-length greedy_oracle" in jac and "--drafter jacobi_hgj --block-size 3" in jac


# ----------------------------------------------------------------------------------------------
# scripts/setup.sh: which torch build for which GPU
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("smi, variant", [
    ("printf 'Tesla V100-SXM2-16GB, 7.0\\n'", "cu126"),
    ("printf 'NVIDIA A100-SXM4-80GB, 8.0\\nNVIDIA A100-SXM4-80GB, 8.0\\n'", "cu128"),
    ("printf 'NVIDIA H100 80GB HBM3, 9.0\\nTesla V100-PCIE-32GB, 7.0\\n'", "cu126"),  # the oldest decides
    ("exit 1", "cu126"),  # a driver that cannot report compute_cap
    (None, "cpu"),
])
def test_setup_picks_the_torch_build(tmp_path, smi, variant):
    path = os.environ["PATH"]
    if smi is not None:
        fake = tmp_path / "bin" / "nvidia-smi"
        fake.parent.mkdir()
        fake.write_text(f'#!/bin/sh\ncase "$*" in *compute_cap*) {smi};; -L) echo "GPU 0";; *) echo 535.54;; esac\n')
        fake.chmod(0o755)
        path = f"{fake.parent}:{path}"
    else:
        path = ":".join(p for p in path.split(":") if not (Path(p) / "nvidia-smi").exists())
    env = dict(os.environ, PATH=path)
    env.pop("TORCH_VARIANT", None)
    got = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh"), "--print-variant"], env=env,
                         capture_output=True, text=True)
    assert got.stdout.strip().splitlines()[-1] == variant, got.stdout + got.stderr
    env["TORCH_VARIANT"] = "cu128"
    assert subprocess.run(["bash", str(REPO / "scripts" / "setup.sh"), "--print-variant"], env=env,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1] == "cu128"
