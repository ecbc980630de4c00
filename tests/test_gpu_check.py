"""The GPU check (scripts/lab/evaluation/gpu_check.py), the first command a GPU user runs (scripts/gpu_check.sh): its dry run on a
CPU in CI (fp32 on a CPU: every lossless generator identical to fairseq's greedy), and the report
itself on a GPU (marked ``cuda``, run by scripts/gpu_check.sh)."""
import pytest
import torch

from _all_generators import PLAIN_DRAFTERS
from scripts.lab.evaluation import gpu_check


def test_dry_run_on_cpu_reports_every_lossless_generator(tiny_corpus, tiny_model, capsys):
    rates = gpu_check.main(["--data", str(tiny_corpus / "bin"), "--path", str(tiny_model), "--device", "cpu",
                            "--sentences", "12"])
    out = capsys.readouterr().out
    assert "torch " + torch.__version__ in out and "device: cpu" in out
    assert "identical to fairseq's greedy" in out and "engine greedy (--drafter none)" in out
    assert set(rates) == {"fp32"} and set(rates["fp32"]) == set(PLAIN_DRAFTERS) | {"lean beam 5 (vs fairseq's beam 5)"}  # no heads, no drafter model given
    assert all(rate == 1.0 for rate in rates["fp32"].values()), rates  # lossless, fp32 on one device


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh runs it there)")
def test_gpu_report(tiny_corpus, tiny_model):
    rates = gpu_check.main(["--data", str(tiny_corpus / "bin"), "--path", str(tiny_model), "--device", "cuda"])
    assert set(rates) == {"fp32", "fp16"}


def test_the_check_on_a_machine_without_a_gpu_says_so_and_fails():
    """It ran pytest, printed its skips and exited 0: a check that checked nothing read as passed."""
    import os
    import subprocess

    from conftest import REPO

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no device torch can see, on any machine
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    assert "no GPU: nothing to check" in proc.stdout + proc.stderr
    assert "skipped" not in proc.stdout + proc.stderr  # pytest was not run
