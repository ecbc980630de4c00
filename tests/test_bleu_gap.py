"""The paired bootstrap interval of a BLEU gap (scripts/lab/analysis/bleu_gap.py)."""
import random

import pytest
import sacrebleu

from scripts.lab.analysis.bleu_gap import paired_gap


def systems(n=300, seed=0):
    """References, a system whose sentences range from exact to mostly wrong (a wide spread of sentence
    scores), and a control equal to it but worse on every 15th sentence."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) for _ in range(n)]

    def noisy(line, p):
        return " ".join(w if rng.random() > p else rng.choice(words) for w in line.split())

    ours = [noisy(r, rng.choice([0.0, 0.3, 0.8])) for r in refs]
    control = [noisy(h, 0.5) if i % 15 == 0 else h for i, h in enumerate(ours)]
    return refs, ours, control


def test_the_gap_is_sacrebleus_and_pairing_keeps_its_interval_off_zero():
    refs, ours, control = systems()
    metric = sacrebleu.metrics.BLEU()
    gap = paired_gap(metric, ours, control, refs)
    expected = sacrebleu.corpus_bleu(ours, [refs]).score - sacrebleu.corpus_bleu(control, [refs]).score
    assert gap["gap"] == pytest.approx(expected, abs=0.01) and gap["gap"] > 0.5
    assert gap["low"] < gap["gap"] < gap["high"]
    # the two systems differ on 20 of 300 sentences: resampled together, the sentences they share cancel,
    # so the interval stays above zero (drawn apart, this corpus's interval ran from -5 to +9 BLEU)
    assert 0 < gap["low"] and gap["high"] - gap["low"] < 4 and gap["below"] == 0.0


def test_swapping_the_systems_mirrors_the_interval_and_a_system_against_itself_is_zero():
    refs, ours, control = systems()
    metric = sacrebleu.metrics.BLEU()
    forward, backward = paired_gap(metric, ours, control, refs), paired_gap(metric, control, ours, refs)
    assert backward["gap"] == -forward["gap"]
    assert (backward["low"], backward["high"]) == (-forward["high"], -forward["low"])  # same seed, same draws
    assert backward["below"] == 1.0
    same = paired_gap(metric, ours, ours, refs)
    assert (same["gap"], same["low"], same["high"]) == (0.0, 0.0, 0.0)


def test_a_translation_file_of_another_length_is_refused():
    refs, ours, control = systems(n=30)
    with pytest.raises(ValueError, match="one line per reference: 29 hypotheses, 30 control lines, 30 references"):
        paired_gap(sacrebleu.metrics.BLEU(), ours[:-1], control, refs)
