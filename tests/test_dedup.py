"""--dedup-ngram (fairseq_plugins/decoding/dedup.py): adjacent repeats of n-grams collapse to one
copy in the hypothesis, EOS and the positional scores stay aligned, lossless modes refuse it."""
import pytest
import torch
from fairseq.data import Dictionary

from fairseq_plugins.decoding.dedup import dedup_hypothesis, dedup_ngrams
from fairseq_plugins.tasks.fast_translation import (FastTranslationConfig, FastTranslationOptionError,
                                                    FastTranslationTask, validate_options)


def kept(tokens, n):
    return [tokens[i] for i in dedup_ngrams(tokens, n)]


def test_adjacent_repeats_collapse_up_to_n():
    assert kept([5, 5, 6], 1) == [5, 6]
    assert kept([5, 5, 5, 5, 6], 1) == [5, 6]
    assert kept([5, 6, 5, 6, 7], 1) == [5, 6, 5, 6, 7]  # a bigram repeat is not a unigram one
    assert kept([5, 6, 5, 6, 7], 2) == [5, 6, 7]
    assert kept([4, 5, 6, 5, 6, 5, 6, 4], 2) == [4, 5, 6, 4]
    assert kept([5, 6, 7, 5, 6, 7], 2) == [5, 6, 7, 5, 6, 7] and kept([5, 6, 7, 5, 6, 7], 3) == [5, 6, 7]
    assert kept([5, 6, 5, 8, 5], 3) == [5, 6, 5, 8, 5]  # repeats that are not adjacent stay
    assert kept([5, 6, 6, 5, 6, 6], 3) == [5, 6]  # 6 6 -> 6, then 5 6 5 6 -> 5 6
    assert kept([], 2) == []


def test_the_hypothesis_keeps_its_eos_score_and_aligned_positional_scores():
    eos = 2
    hypo = {"tokens": torch.tensor([7, 8, 8, 9, eos]), "score": torch.tensor(-1.5),
            "positional_scores": torch.tensor([-0.1, -0.2, -0.3, -0.4, -0.5])}
    out = dedup_hypothesis(hypo, 2, eos)
    assert out["tokens"].tolist() == [7, 8, 9, eos]
    assert out["positional_scores"].tolist() == pytest.approx([-0.1, -0.2, -0.4, -0.5])
    assert out["score"] is hypo["score"] and hypo["tokens"].tolist() == [7, 8, 8, 9, eos]  # input untouched
    clean = {"tokens": torch.tensor([7, 8, eos]), "positional_scores": torch.zeros(3)}
    assert dedup_hypothesis(clean, 2, eos) is clean


def test_fairseq_generate_output_is_deduplicated_by_the_task():
    d = Dictionary()
    for w in "a b c".split():
        d.add_symbol(w)
    cfg = FastTranslationConfig()
    cfg.dedup_ngram = 1
    task = FastTranslationTask(cfg, d, d)
    a, b = d.index("a"), d.index("b")
    hypos = [[{"tokens": torch.tensor([a, a, b, d.eos()]), "score": torch.tensor(0.0),
               "positional_scores": torch.zeros(4)}]]

    class Generator:
        def generate(self, models, sample, **kw):
            return hypos

    task._batch_iterator = None
    out = task.inference_step(Generator(), [], {"id": torch.tensor([0])})
    assert out[0][0]["tokens"].tolist() == [a, b, d.eos()]
    cfg.dedup_ngram = 0
    assert task.inference_step(Generator(), [], {"id": torch.tensor([0])})[0][0]["tokens"].tolist() == [a, a, b, d.eos()]


def test_lossless_decoding_refuses_it_and_n_must_not_be_negative():
    cfg = FastTranslationConfig()
    cfg.dedup_ngram, cfg.drafter = 2, "input_copy"
    with pytest.raises(FastTranslationOptionError, match="--drafter's output is fairseq's greedy output"):
        validate_options(cfg)
    cfg.dedup_ngram, cfg.drafter = -1, None
    with pytest.raises(FastTranslationOptionError, match="give n >= 1"):
        validate_options(cfg)
    cfg.dedup_ngram = 3
    validate_options(cfg)
