"""Half precision on a CPU for every generator and every training criterion (issue 18, item 4): the
GPU user's setting (``--fp16``) in every dtype-sensitive place, without a GPU.

* every generator of tests/_all_generators.py decodes a ``.half()`` model (inputs as
  fairseq-generate --fp16 gives them: integer tokens, the model halved): a hypothesis for every
  sentence, no NaN; the share identical to fairseq's own half greedy (SequenceGenerator, beam 1,
  same half model) is printed for the engine's rows, the share identical to the same search in
  fp32 for the multi-token beam (whose reference is not left-to-right greedy);
* every criterion runs forward and backward through fairseq's ``train_step`` on a half model
  (``--fp16``) and under ``torch.autocast`` float16 on an fp32 model (``--amp``).
"""
import math

import pytest
import torch

from _all_generators import (BEAM_CASES, BEAM_IDS, ENGINE_DRAFTERS, LEAN_CASES, BackwardOnly, beam_generator, beam_model,
                             blockwise_model, engine_generator, nar_drafter_setup, random_sources,
                             reordered_training_setup)
from engine_helpers import MAX_LEN_B, decode_all, gen_args, load, mixed_batches, reference_greedy
from test_gad import gad_drafter  # noqa: F401  (the cached GAD drafter fixture)

LOSSLESS = set(ENGINE_DRAFTERS)  # with --acceptance exact


def report(capsys, line):
    with capsys.disabled():
        print(f"\n[fp16 on cpu] {line}")


@pytest.fixture(scope="module")
def half_setup(tiny_corpus, tiny_model, gad_drafter):  # noqa: F811
    models, task = load(tiny_corpus, tiny_model)
    blockwise, _, _ = blockwise_model(tiny_corpus, tiny_model)
    for m in models + [blockwise]:
        m.half()
    batches = mixed_batches(task, 8)[:3]  # 24 sentences of mixed lengths
    ref = reference_greedy(models, task, batches)
    return models, task, blockwise, gad_drafter, batches, ref


@pytest.mark.parametrize("drafter,acceptance", [(d, "exact") for d in ENGINE_DRAFTERS]
                         + [("input_copy", "topk"), ("input_copy", "min_block"), ("nar", "gad_pp"), ("nar", "all")])
def test_engine_generators_decode_in_half(half_setup, capsys, drafter, acceptance):
    models, task, blockwise, nar_path, batches, ref = half_setup
    for full in (False, True):
        gen, used = engine_generator(models, task, drafter, acceptance, blockwise=blockwise, nar_path=nar_path,
                                     full_projection=full)
        hyps = decode_all(gen, used, batches)
        assert set(hyps) == set(ref)
        for h in hyps.values():
            assert len(h["tokens"]) and not math.isnan(float(h["score"]))
            assert not torch.isnan(h["positional_scores"]).any()
        same = sum(hyps[i]["tokens"].tolist() == ref[i]["tokens"].tolist() for i in ref) / len(ref)
        path = "full projection" if full else "cpu path"
        report(capsys, f"{drafter}/{acceptance} ({path}): identical to fairseq's half greedy on {same:.1%} of "
                       f"{len(ref)} sentences")
        if drafter in LOSSLESS and acceptance == "exact":
            # fp16: not assumed identical (another summation order), but a lossless row stays close
            assert same >= 0.8, same


@pytest.fixture(scope="module")
def beam_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("half_beam_models")
    return {case[0]: beam_model(root / case[0], case) for case in BEAM_CASES}


@pytest.mark.parametrize("case", BEAM_CASES, ids=BEAM_IDS)
def test_beam_decodes_in_half(beam_models, capsys, case):
    btask, model = beam_models[case[0]]
    sample = random_sources(1, 2)
    full = beam_generator(btask, model, case).generate([model], sample)
    model.half()
    try:
        half = beam_generator(btask, model, case).generate([model], sample)
    finally:
        model.float()
    assert len(half) == len(full)
    for beams in half:
        assert beams, "every sentence gets a hypothesis"
        assert all(not math.isnan(float(h["score"])) and not torch.isnan(h["positional_scores"]).any()
                   for h in beams)
    same = sum(a[0]["tokens"].tolist() == b[0]["tokens"].tolist() for a, b in zip(half, full)) / len(full)
    search = "lean beam" if case[0] in LEAN_CASES else "multi-token beam"
    report(capsys, f"{search} {case[0]}: best hypothesis identical to fp32 on {same:.0%} of {len(full)}")


def test_lean_beam_decodes_in_half_near_fairseqs_half_beam(tiny_corpus, tiny_model, capsys):
    """The lean beam search of a half model (the GPU setting) against fairseq's own half beam search
    on the trained tiny model: every sentence decoded, no NaN, the share of identical best hypotheses
    printed (not assumed 1.0: the two sum in different orders in fp16)."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_plugins.decoding.lean_beam import LeanBeamSearch

    models, task = load(tiny_corpus, tiny_model)
    models[0].half()
    task.cfg.drafter, task.cfg.beam_search = None, "lean"
    batches = mixed_batches(task, 8)[:3]  # 24 sentences of mixed lengths
    ref = decode_all(SequenceGenerator(models, task.target_dictionary, beam_size=5, max_len_a=0.0,
                                       max_len_b=MAX_LEN_B, len_penalty=0.6), models, batches)
    gen = task.build_generator(models, gen_args(beam=5, lenpen=0.6))
    assert isinstance(gen, LeanBeamSearch)
    hyps = decode_all(gen, models, batches)
    assert set(hyps) == set(ref)
    for h in hyps.values():
        assert len(h["tokens"]) and not math.isnan(float(h["score"])) and not torch.isnan(h["positional_scores"]).any()
    same = sum(hyps[i]["tokens"].tolist() == ref[i]["tokens"].tolist() for i in ref) / len(ref)
    report(capsys, f"lean beam 5: best hypothesis identical to fairseq's half beam 5 on {same:.1%} of {len(ref)} sentences")
    assert same >= 0.8, same


def _step(task, model, criterion, sample, amp):
    model.train()
    try:
        with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
            loss, sample_size, _ = task.train_step(sample, model, criterion, BackwardOnly(), update_num=1)
    finally:
        model.eval()
    grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
    assert torch.isfinite(loss) and sample_size > 0
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
    for p in model.parameters():
        p.grad = None
    return float(loss)


def _training_setups(tiny_corpus, tiny_model, folder):
    task, model, criterion, sample = reordered_training_setup(folder)
    yield "reordered_transformer + label_smoothed_cross_entropy", task, model, criterion, sample
    blockwise, btask, bargs = blockwise_model(tiny_corpus, tiny_model)
    btask.load_dataset("valid")
    ds = btask.dataset("valid")
    yield ("blockwise_transformer + blockwise_cross_entropy", btask, blockwise, btask.build_criterion(bargs),
           ds.collater([ds[i] for i in range(6)]))
    ntask, nar, ncrit = nar_drafter_setup(tiny_corpus, tiny_model)
    ntask.load_dataset("valid")
    ds = ntask.dataset("valid")
    yield "nar_drafter + nar_drafter_loss", ntask, nar, ncrit, ds.collater([ds[i] for i in range(6)])


@pytest.mark.parametrize("mode", ["fp16", "amp"])
def test_every_criterion_trains_in_half(tiny_corpus, tiny_model, tmp_path, capsys, mode):
    for name, task, model, criterion, sample in _training_setups(tiny_corpus, tiny_model, tmp_path / "reordered"):
        torch.manual_seed(1)
        fp32 = _step(task, model, criterion, sample, amp=False)
        if mode == "fp16":
            model.half()
        torch.manual_seed(1)
        low = _step(task, model, criterion, sample, amp=mode == "amp")
        model.float()
        report(capsys, f"{name} ({mode}): loss {low:.4f} (fp32 {fp32:.4f})")
        assert abs(low - fp32) <= 0.05 * abs(fp32) + 0.05, (name, mode, low, fp32)
