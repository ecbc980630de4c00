"""A generator built once decodes with the model's current weights, however they changed: fairseq's
optimizers update ``p.data`` in place, which leaves a parameter's version counter alone
(``decoding/projection.py``: ``WeightCheck``), so ``fairseq-train --eval-bleu`` validates with the
weights it trained, not with the copies its generator made when it was built."""
import re

import pytest
import torch

from _all_generators import BEAM_CASES, beam_generator, beam_model, random_sources
from conftest import PLUGIN_DIR, TINY_TRAIN_ARGS, fairseq_cli, run
from engine_helpers import decode_all, engine, gen_args, load, mixed_batches


def _perturb(model, seed=1, scale=0.3):
    """Every weight moved in place through ``p.data``, as fairseq's optimizers write them."""
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.data.add_(torch.randn(p.shape, generator=g) * scale * p.data.std().nan_to_num(0.1))


def _tokens(hypos):
    return {sid: h["tokens"].tolist() for sid, h in hypos.items()}


@pytest.mark.parametrize("which", ["lean_beam", "engine"])
def test_a_generator_built_once_follows_weights_changed_through_p_data(tiny_corpus, tiny_model, which):
    models, task = load(tiny_corpus, tiny_model)  # a copy of its own: the weights are changed below
    batches = mixed_batches(task, 8)[:3]

    def build():
        if which == "engine":
            return engine(models, task, "jacobi_pj", block_size=3)
        task.cfg.drafter = None
        return task.build_generator(models, gen_args(beam=3))

    gen = build()
    before = _tokens(decode_all(gen, models, batches))
    _perturb(models[0])
    after = _tokens(decode_all(gen, models, batches))
    fresh = _tokens(decode_all(build(), models, batches))
    assert fresh != before  # the change matters to the output, so the comparison below means something
    assert after == fresh


def test_the_multi_token_beam_follows_weights_changed_through_p_data(tmp_path):
    case = next(c for c in BEAM_CASES if c[0] == "head_tail")
    task, model = beam_model(tmp_path, case)
    sample = random_sources(task.target_dictionary.pad(), task.target_dictionary.eos())
    gen = beam_generator(task, model, case)

    def tokens(g):
        return [[h["tokens"].tolist() for h in row] for row in g.generate([model], sample)]

    before = tokens(gen)
    _perturb(model, scale=1.0)
    after = tokens(gen)
    fresh = tokens(beam_generator(task, model, case))
    assert fresh != before and after == fresh


def _valid_bleus(output: str):
    """The BLEU of every ``valid on 'valid' subset`` line fairseq logged, in order."""
    lines = [line for line in output.splitlines() if "valid on 'valid' subset" in line]
    return [float(re.search(r"\| bleu ([0-9.]+)", line).group(1)) for line in lines]


def test_eval_bleu_during_training_scores_the_trained_weights(tiny_corpus, tiny_model, tmp_path):
    """Fine-tune the tiny model 40 updates with --eval-bleu, validating at 20 and 40: the BLEU logged
    at 40 is the BLEU fairseq-validate gives the checkpoint saved then, loaded afresh.  With the
    generator's copies refreshed only by version counters it was the BLEU at 20 again (the load of
    the fine-tuned weights moved the counters once; the optimizer's updates never do)."""
    bleu_args = ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 40}',
                 "--eval-bleu-remove-bpe", "sentencepiece"]
    train_args = [a for a in TINY_TRAIN_ARGS if a != "--no-last-checkpoints"]
    train = run([fairseq_cli("fairseq-train"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
                 "--task", "fast_translation", "--save-dir", str(tmp_path), "--finetune-from-model", str(tiny_model),
                 "--max-update", "40", "--validate-interval-updates", "20", "--save-interval", "1000",
                 "--validate-interval", "1000"] + bleu_args + train_args)
    logged = _valid_bleus(train.stdout + train.stderr)
    assert len(logged) == 2, (train.stdout + train.stderr)[-3000:]
    validate = run([fairseq_cli("fairseq-validate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
                    "--task", "fast_translation", "--path", str(tmp_path / "checkpoint_last.pt"),
                    "--valid-subset", "valid", "--max-tokens", "2048", "--cpu"] + bleu_args)
    fresh = _valid_bleus(validate.stdout + validate.stderr)
    assert len(fresh) == 1, (validate.stdout + validate.stderr)[-3000:]
    assert logged[0] != fresh[0]  # the 20 updates between the two validations changed the output
    assert logged[1] == fresh[0]


def test_a_model_prepared_for_inference_skips_the_content_check_and_still_follows_a_reload(tiny_corpus, tiny_model):
    """fairseq-generate prepares its models for inference (they refuse ``train()``: no optimizer updates
    them), so the per-batch fingerprint read is skipped there; a model loaded again still counts."""
    from fairseq_plugins.decoding import projection

    models, task = load(tiny_corpus, tiny_model)
    batches = mixed_batches(task, 8)[:2]
    reads = []
    original = projection.fingerprint

    def counting(t):
        reads.append(1)
        return original(t)

    gen = engine(models, task, "jacobi_pj", block_size=3)
    projection.fingerprint = counting
    try:
        decode_all(gen, models, batches)
        assert reads  # a trainable model is checked
        reads.clear()
        models[0].make_generation_fast_()  # what fairseq's prepare_for_inference_ calls
        assert projection.trainable(models[0])() is False
        before = _tokens(decode_all(gen, models, batches))
        assert not reads  # a model prepared for inference is not
    finally:
        projection.fingerprint = original
    other, _ = load(tiny_corpus, tiny_model)
    _perturb(other[0])
    models[0].load_state_dict(other[0].state_dict())  # copy_ into the same tensors bumps their version counter
    after = _tokens(decode_all(gen, models, batches))
    assert after != before
    assert after == _tokens(decode_all(engine(models, task, "jacobi_pj", block_size=3), models, batches))
