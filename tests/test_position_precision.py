"""Precision by position (scripts/lab/analysis/position_precision.py): which part of a translation
loses n-grams, each n-gram placed by its centre and clipped as BLEU clips."""
import pytest

from scripts.lab.analysis.position_precision import position_precision


def split(line):
    return line  # already space-separated tokens


def test_a_wrong_second_half_shows_only_in_the_later_parts():
    ref = "a b c d e f g h"
    result = position_precision(["a b c d x y z w"], [ref], split, orders=(1, 2), bins=2)
    assert result[1]["precision"] == [1.0, 0.0] and result[1]["total"] == [4, 4]
    # bigrams' centres at 1..7 of 8: "d x" (centre 4) falls in the second part and matches nothing
    assert result[2]["total"] == [3, 4] and result[2]["matches"] == [3, 0]


def test_matches_are_clipped_by_the_reference_and_the_first_occurrence_is_the_matched_one():
    result = position_precision(["b a a a"], ["a b"], split, orders=(1,), bins=2)
    assert result[1]["matches"] == [2, 0]  # "b" and the first "a"; the other two "a" exceed the reference's one
    assert result[1]["precision"] == [1.0, 0.0]
    corpus = position_precision(["a b", "c d"], ["a b", "x d"], split, orders=(1,), bins=2)
    assert corpus[1]["matches"] == [1, 2] and corpus[1]["total"] == [2, 2]  # summed over sentences


def test_a_part_without_ngrams_has_no_precision_and_lengths_must_match():
    result = position_precision(["a b"], ["a b"], split, orders=(4,), bins=2)
    assert result[4]["precision"] == [None, None] and result[4]["total"] == [0, 0]
    with pytest.raises(ValueError, match="one reference per translation"):
        position_precision(["a"], ["a", "b"], split)


def test_the_metrics_tokenizer_splits_punctuation_before_counting():
    import sacrebleu

    tokenize = sacrebleu.metrics.BLEU().tokenizer
    result = position_precision(["Hallo, Welt."], ["Hallo, Welt."], tokenize, orders=(1,), bins=1)
    assert result[1]["total"] == [4] and result[1]["precision"] == [1.0]  # Hallo , Welt .
