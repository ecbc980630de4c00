"""How sure a BLEU gap is: the paired bootstrap over test sentences (Koehn 2004, "Statistical
significance tests for machine translation evaluation"), as sacreBLEU's ``--paired-bs`` draws it.

Both systems are rescored on the same resampled sentence sets, so what the two share (the hard
sentences) cancels and the interval is that of the *difference*, narrower than the two systems'
own intervals side by side.  sacreBLEU's own paired test reports each system's interval and a p-value
but not the difference's, so the resampling here reuses its sufficient statistics (the n-gram counts
per sentence that its corpus score sums) and its seed, and reads the interval off the resampled
differences (percentile interval).  The statistics come through sacreBLEU's public API only (a
one-sentence ``corpus_score`` and the static ``BLEU.compute_bleu``), so a release that renames its
private helpers does not break the report.
"""
from typing import Dict, Sequence

import numpy as np

SAMPLES = 1000  # sacreBLEU's default number of bootstrap resamples for --paired-bs
SEED = 12345  # sacreBLEU's default SACREBLEU_SEED, so a rerun draws the same resamples
LEVEL = 0.95


def paired_gap(metric, hypotheses: Sequence[str], control: Sequence[str], references: Sequence[str],
               samples: int = SAMPLES, seed: int = SEED) -> Dict[str, float]:
    """``metric``'s score of ``hypotheses`` minus ``control``'s on the same ``references``, with the
    :data:`LEVEL` percentile interval of that difference over ``samples`` paired resamples of the
    sentences, and ``below``: the share of resamples in which the difference is negative."""
    if not (len(hypotheses) == len(control) == len(references)):
        raise ValueError(f"paired bootstrap needs one line per reference: {len(hypotheses)} hypotheses, "
                         f"{len(control)} control lines, {len(references)} references")
    ours, theirs = _sentence_stats(metric, hypotheses, references), _sentence_stats(metric, control, references)
    gap = _score(metric, ours.sum(0)) - _score(metric, theirs.sum(0))
    draws = np.random.default_rng(seed).choice(len(references), size=(samples, len(references)), replace=True)
    diffs = np.array([_score(metric, ours[i].sum(0)) - _score(metric, theirs[i].sum(0)) for i in draws])
    low, high = np.percentile(diffs, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return {"gap": round(float(gap), 2), "low": round(float(low), 2), "high": round(float(high), 2),
            "below": round(float((diffs < 0).mean()), 3), "samples": samples}


def _sentence_stats(metric, hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """One row per sentence: system and reference length, then the matched and the total n-gram
    counts of each order, what ``metric``'s corpus score sums over the sentences."""
    rows = []
    for hypothesis, reference in zip(hypotheses, references):
        one = metric.corpus_score([hypothesis], [[reference]])
        rows.append([one.sys_len, one.ref_len, *one.counts, *one.totals])
    return np.array(rows, dtype=np.float64)


def _score(metric, stats: np.ndarray) -> float:
    """``metric``'s BLEU from summed sentence statistics (:func:`_sentence_stats`' columns)."""
    order = metric.max_ngram_order
    return metric.compute_bleu(correct=stats[2:2 + order].tolist(), total=stats[2 + order:].tolist(),
                               sys_len=int(stats[0]), ref_len=int(stats[1]), smooth_method=metric.smooth_method,
                               smooth_value=metric.smooth_value, effective_order=metric.effective_order,
                               max_ngram_order=order).score
