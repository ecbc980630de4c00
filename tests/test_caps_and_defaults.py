"""Caps and defaults said, not silent (issue 49): ``--block-size`` is bounded, ``--acceptance topk``
needs its N, a lossy rule gives the same output at every batch size (Jacobi's did not), a beam
above the vocabulary is capped as fairseq caps it, and alignments come when asked."""
from argparse import Namespace

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from _all_generators import BEAM_CASES, beam_model, random_sources
from engine_helpers import decode_all, engine, gen_args, load, mixed_batches

from fairseq_plugins.decoding.drafters.base import MAX_BLOCK_SIZE
from fairseq_plugins.decoding.lean_beam import LeanBeamSearch
from fairseq_plugins.tasks.fast_translation import FastTranslationConfig, FastTranslationOptionError, validate_options


def _cfg(**kw):
    cfg = FastTranslationConfig()
    for key, value in kw.items():
        setattr(cfg, key, value)
    return cfg


def test_a_block_size_above_the_cap_is_refused_with_the_cap():
    validate_options(_cfg(drafter="jacobi_pj", block_size=MAX_BLOCK_SIZE))
    with pytest.raises(FastTranslationOptionError, match=f"--block-size 10000 is above {MAX_BLOCK_SIZE}.*at most"):
        validate_options(_cfg(drafter="jacobi_pj", block_size=10000))


def test_topk_acceptance_needs_its_n():
    with pytest.raises(FastTranslationOptionError, match="--acceptance topk needs its N: add --acceptance-topk N"):
        validate_options(_cfg(drafter="jacobi_pj", acceptance="topk"))
    validate_options(_cfg(drafter="jacobi_pj", acceptance="topk", acceptance_topk=2))


@pytest.fixture(scope="module")
def tiny(tiny_corpus, tiny_model):
    return load(tiny_corpus, tiny_model)


@pytest.mark.parametrize("drafter,acceptance", [("jacobi_hgj", "topk"), ("jacobi_pgj", "min_block"),
                                                ("jacobi_hgj", "gad_pp")])
def test_a_lossy_rule_gives_the_same_output_at_every_batch_size(tiny, drafter, acceptance):
    """A Jacobi row kept the verifier's predictions at the columns a wider row of its batch added:
    its next draft, and so what a lossy rule accepted, depended on the batch (on the shipped baseline's
    first 200 test sentences, batch 64 against 1: HGJ 20 differed with top-2, 95 with min_block)."""
    models, task = tiny
    gen = engine(models, task, drafter, acceptance=acceptance, block_size=4, adaptive_block_size="off")
    outputs = [{sid: h["tokens"].tolist() for sid, h in decode_all(gen, models, mixed_batches(task, bs)).items()}
               for bs in (1, 16)]
    assert outputs[0] == outputs[1]


def test_the_lean_beam_caps_a_beam_above_the_vocabulary_as_fairseq(tmp_path):
    case = next(c for c in BEAM_CASES if c[0] == "lean_stock")
    task, model = beam_model(tmp_path, case)
    vocab = len(task.target_dictionary)
    sample = random_sources(task.target_dictionary.pad(), task.target_dictionary.eos())
    args = gen_args(beam=vocab + 5, max_len_b=6)
    gen = task.build_generator([model], args)
    assert isinstance(gen, LeanBeamSearch) and gen.beam_size == vocab - 1
    ref = SequenceGenerator([model], task.target_dictionary, beam_size=vocab + 5, max_len_a=0, max_len_b=6)
    with torch.no_grad():
        got, want = gen.generate([model], sample), ref.generate([model], sample)
    assert [[h["tokens"].tolist() for h in row] for row in got] == [[h["tokens"].tolist() for h in row] for row in want]


def test_the_multi_token_beam_caps_a_beam_above_the_vocabulary(tmp_path):
    case = next(c for c in BEAM_CASES if c[0] == "head_tail")
    task, model = beam_model(tmp_path, case)
    vocab = len(task.target_dictionary)
    sample = random_sources(task.target_dictionary.pad(), task.target_dictionary.eos())
    gen = task.build_generator([model], Namespace(**vars(gen_args(beam=vocab + 5, max_len_b=6))))
    hypos = gen.generate([model], sample)
    assert gen.beam_size == vocab - 1 and all(0 < len(row) <= vocab - 1 for row in hypos)


def test_a_drafter_asked_for_alignments_gives_fairseqs_with_their_attention(tiny):
    """--print-alignment with --drafter was refused; now fairseq's greedy generator with alignments
    decodes (one log line), the same tokens --acceptance exact gives, with attention and alignment."""
    models, task = tiny
    sample = mixed_batches(task, 4)[0]
    exact = engine(models, task, "jacobi_pj")
    aligned = engine(models, task, "jacobi_pj", print_alignment="hard")
    assert not hasattr(aligned, "drafter")
    with torch.no_grad():
        want, got = exact.generate(models, sample), aligned.generate(models, sample)
    for w, g in zip(want, got):
        assert torch.equal(w[0]["tokens"], g[0]["tokens"])
        assert isinstance(g[0]["attention"], torch.Tensor) and g[0]["alignment"] is not None
