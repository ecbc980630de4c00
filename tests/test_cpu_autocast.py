"""--cpu-bf16-autocast (fairseq_plugins/tasks/cpu_autocast.py): a training's forward runs in bf16 on a CPU
that has bf16 matrix products, its weights stay fp32, and anywhere else the option falls back with a
line naming it.  fairseq-train runs it end to end."""
import sys

import pytest
import torch
from fairseq import checkpoint_utils, optim, options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from conftest import PLUGIN_DIR, fairseq_cli, run
from fairseq_plugins.tasks.cpu_autocast import choose_autocast, cpu_has_bf16

TINY = ["--arch", "transformer_fast_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
        "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        "--share-all-embeddings"]
needs_bf16 = pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no native bf16 matrix products")


def test_the_choice_is_honoured_on_a_bf16_cpu_and_named_where_it_falls_back():
    assert choose_autocast(False, "cpu", True) == (False, None)
    on, line = choose_autocast(True, "cpu", True)
    assert on and "--cpu-bf16-autocast" in line
    on, line = choose_autocast(True, "cuda", True)
    assert not on and "--cpu-bf16-autocast" in line and "cuda" in line and "--fp16" in line
    on, line = choose_autocast(True, "cpu", False)
    assert not on and "--cpu-bf16-autocast" in line and "fp32" in line


def _train_step_dtypes(tiny_corpus, flags):
    """The dtypes of the decoder's output projection and of the weights, around one task.train_step."""
    argv = [str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task", "fast_translation", "--cpu",
            "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "512"] + TINY + flags
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    model = task.build_model(args)
    task.load_dataset("valid")
    batch = next(task.get_batch_iterator(task.dataset("valid"), max_tokens=512).next_epoch_itr(shuffle=False))
    crit = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    seen = []
    model.encoder.layers[0].fc1.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    optimizer = optim.build_optimizer(convert_namespace_to_omegaconf(args).optimizer, list(model.parameters()))
    loss, _, _ = task.train_step(batch, model, crit, optimizer, update_num=0)
    grads = {p.grad.dtype for p in model.parameters() if p.grad is not None}
    return seen, {p.dtype for p in model.parameters()}, grads, loss


@needs_bf16
def test_a_train_step_runs_its_forward_in_bf16_and_keeps_fp32_weights(tiny_corpus):
    seen, weights, grads, loss = _train_step_dtypes(tiny_corpus, ["--cpu-bf16-autocast"])
    assert seen == [torch.bfloat16]
    assert weights == {torch.float32} and grads == {torch.float32}
    plain_seen, _, _, plain_loss = _train_step_dtypes(tiny_corpus, [])
    assert plain_seen == [torch.float32]
    assert torch.isfinite(loss) and abs(loss.item() - plain_loss.item()) < 0.02 * plain_loss.item()


@needs_bf16
def test_fairseq_train_trains_in_bf16_autocast_and_saves_fp32_weights(tiny_corpus, tmp_path):
    proc = run([fairseq_cli("fairseq-train"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
                "--task", "fast_translation", "--cpu", "--cpu-bf16-autocast", "--optimizer", "adam", "--lr", "1e-3",
                "--max-tokens", "512", "--max-update", "3", "--save-dir", str(tmp_path), "--no-epoch-checkpoints",
                "--disable-validation", "--num-workers", "0"] + TINY)
    log = proc.stdout + proc.stderr
    assert log.count("--cpu-bf16-autocast: forward and backward in bf16") == 1
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 3
    assert {t.dtype for t in state["model"].values() if t.is_floating_point()} == {torch.float32}
