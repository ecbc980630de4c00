"""Issue 49's edges: a shipped checkpoint checked before it is loaded (its sha256, the data folder's
dictionaries), the plugin's errors as one line without a traceback, fairseq's misleading errors
foreseen, fairseq-interactive going on after an undecodable line, ``--help`` listing the task's
options, and the threads of a CPU decode."""
import json
import os
import shutil
import subprocess

import pytest
import torch

from conftest import PLUGIN_DIR, REPO, fairseq_cli, run
from scripts.lab.evaluation.generation import Generation
from fairseq_plugins.shipped import file_sha256


def failed(cmd, **kw):
    """Run a command that must fail: its stderr."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    return proc.stderr


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "error:" in line]


FAST = ["--task", "fast_translation", "--beam", "1"]  # Generation.from_generate_args's options


def generate(data, checkpoint, *args):
    return [fairseq_cli("fairseq-generate"), str(data), "--user-dir", PLUGIN_DIR, "--task", "fast_translation",
            "--path", str(checkpoint), "--beam", "1", "--cpu", "--gen-subset", "test", *args]


# ---- 6: one line, no traceback ----

@pytest.mark.parametrize("args, message", [
    (["--drafter", "no_such_drafter"], "--drafter 'no_such_drafter' is unknown"),  # refused by the task
    (["--drafter", "input_copy", "--copy-ngram", "5"], "--copy-ngram must be 1, 2 or 3"),  # by the drafter
    (["--drafter", "input_copy", "--copy-anchor", "first"], "--copy-anchor must be one of next, unique"),
])
def test_a_refused_option_is_one_line_without_a_traceback(tiny_corpus, tiny_model, args, message):
    err = failed(generate(tiny_corpus / "bin", tiny_model, *args))
    assert "Traceback" not in err
    assert error_lines(err) == [err.strip().splitlines()[-1]]
    assert err.strip().splitlines()[-1].startswith(f"fairseq-generate: error: {message}")


def test_a_data_folder_without_its_dictionaries_names_the_folder_meant(tiny_corpus, tiny_model):
    err = failed(generate(tiny_corpus, tiny_model))  # the corpus folder, not its bin/
    assert "Traceback" not in err and "Could not infer language pair" not in err
    (line,) = error_lines(err)
    assert f"the data folder {tiny_corpus} has no dict.*.txt" in line
    assert f"{tiny_corpus / 'bin'} is probably meant" in line


# ---- 4: a shipped checkpoint is checked before it is loaded ----

@pytest.fixture
def shipped(tmp_path, tiny_corpus, tiny_model):
    """A models/ folder shipping the tiny model (its manifest entry as reference_models.py writes it)."""
    folder = tmp_path / "models"
    (folder / "tiny").mkdir(parents=True)
    checkpoint = folder / "tiny" / "checkpoint_best.pt"
    shutil.copy(tiny_model, checkpoint)
    shutil.copytree(tiny_corpus / "bin", folder / "data" / "tiny" / "bin")
    entry = {"name": "tiny", "checkpoint": "tiny/checkpoint_best.pt", "evaluation_data": "data/tiny",
             "sha256": file_sha256(checkpoint)}
    (folder / "MANIFEST.json").write_text(json.dumps({"budget_bytes": 1 << 30, "models": {"tiny": entry}}))
    return checkpoint, folder / "data" / "tiny" / "bin"


def flip_bytes(path, count=64):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2  # inside the weights
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))


def permuted_copy(bin_folder, dest, lang="de"):
    """The data folder with two symbols of dict.<lang>.txt swapped: the model's size, another order."""
    shutil.copytree(bin_folder, dest)
    lines = (dest / f"dict.{lang}.txt").read_text().splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]
    (dest / f"dict.{lang}.txt").write_text("".join(lines))
    return dest


def test_a_corrupt_shipped_checkpoint_is_an_error_naming_it(shipped):
    checkpoint, data = shipped
    Generation.from_generate_args(data, checkpoint, [*FAST])  # whole: it loads
    flip_bytes(checkpoint)
    err = failed(generate(data, checkpoint))
    assert "Traceback" not in err
    (line,) = error_lines(err)
    assert f"{checkpoint} does not match its sha256" in line and "--no-verify-shipped" in line
    Generation.from_generate_args(data, checkpoint, [*FAST, "--no-verify-shipped"])  # the user's choice


def test_a_data_folder_with_the_shipped_dictionary_in_another_order_is_an_error(shipped, tmp_path):
    checkpoint, data = shipped
    other = permuted_copy(data, tmp_path / "other")
    with pytest.raises(ValueError) as error:
        Generation.from_generate_args(other, checkpoint, [*FAST])
    message = str(error.value)
    assert f"{other / 'dict.de.txt'} is not the dictionary {checkpoint} was trained with" in message
    assert "another order" in message and str(data) in message


def test_a_data_folder_of_another_size_is_one_line_for_any_checkpoint(tiny_corpus, tiny_model, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_corpus / "bin", other)
    for lang in ("en", "de"):  # one joined dictionary (--share-all-embeddings), a symbol longer
        with open(other / f"dict.{lang}.txt", "a") as f:
            f.write("an_extra_symbol 1\n")
    err = failed(generate(other, tiny_model))  # was torch's "size mismatch" traceback
    assert "Traceback" not in err
    (line,) = error_lines(err)
    assert f"{tiny_model} was trained with other dictionaries than the data folder {other}'s dict.<lang>.txt" in line


def test_a_shipped_checkpoint_is_hashed_once_per_file(shipped, monkeypatch):
    from fairseq_plugins import shipped as shipped_check

    checkpoint, _ = shipped
    calls = []
    monkeypatch.setattr(shipped_check, "file_sha256", lambda p: calls.append(p) or file_sha256(p))
    for _ in range(3):
        shipped_check.verify_shipped(checkpoint)
    assert len(calls) == 1
    flip_bytes(checkpoint)  # another modification: hashed again, and refused
    with pytest.raises(shipped_check.ShippedCheckpointError):
        shipped_check.verify_shipped(checkpoint)


# ---- 7: fairseq-interactive goes on after a line that is not UTF-8 ----

def test_interactive_reports_an_undecodable_line_and_translates_the_others():
    """README's interactive command on the shipped baseline; its second input line is not UTF-8."""
    models = REPO / "models"
    cmd = [fairseq_cli("fairseq-interactive"), str(models / "data/en-de/bin"), "--user-dir", PLUGIN_DIR,
           "--task", "fast_translation", "--source-lang", "en", "--target-lang", "de",
           "--path", str(models / "baseline/checkpoint_best.pt"), "--beam", "4", "--lenpen", "0.6", "--cpu",
           "--bpe", "sentencepiece", "--sentencepiece-model", str(models / "data/en-de/spm.model")]
    text = b"Open the file.\nBad \xff\xfe input.\nSave the document.\n"
    proc = subprocess.run(cmd, input=text, capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                          timeout=600)
    out, err = proc.stdout.decode(), proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err[-3000:]
    assert "input line 2: not valid UTF-8, skipped" in err
    sources = [line.split("\t")[1].replace(" ", "").replace("\u2581", " ").strip()  # its pieces, read back
               for line in out.splitlines() if line.startswith("S-")]
    hypotheses = [line for line in out.splitlines() if line.startswith("D-")]
    assert sources == ["Open the file.", "Save the document."] and len(hypotheses) == 2


# ---- 9: --help lists the task's options ----

def test_help_lists_the_task_options():
    out = run([fairseq_cli("fairseq-generate"), "--user-dir", PLUGIN_DIR, "--task", "fast_translation",
               "--help"]).stdout
    for option in ("--drafter", "--acceptance", "--block-size", "--target-order", "--beam-search", "--cpu-threads",
                   "--no-verify-shipped", "--copy-ngram"):
        assert f"\n  {option} " in out, option


# ---- 10: threads of a CPU decode ----

def test_fairseq_generate_decodes_on_one_thread_unless_told(tiny_corpus, tiny_model, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    err = run(generate(tiny_corpus / "bin", tiny_model)).stderr
    assert "CPU threads: 1 (the plugin's default for decoding" in err
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    err = run(generate(tiny_corpus / "bin", tiny_model)).stderr
    assert "CPU threads: 2 (OMP_NUM_THREADS=2)" in err  # the user's setting, left alone


def test_in_process_a_decode_keeps_its_callers_threads(tiny_corpus, tiny_model, monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        torch.set_num_threads(2)  # as the benchmark's --threads 2
        Generation.from_generate_args(tiny_corpus / "bin", tiny_model, [*FAST])
        assert torch.get_num_threads() == 2
        Generation.from_generate_args(tiny_corpus / "bin", tiny_model, [*FAST, "--cpu-threads", "1"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
