"""How sure a BLEU gap is: the paired bootstrap over test sentences (Koehn 2004, "Statistical
significance tests for machine translation evaluation"), as sacreBLEU's ``--paired-bs`` draws it.

Both systems are rescored on the same resampled sentence sets, so what the two share (the hard
sentences) cancels and the interval is that of the *difference*, narrower than the two systems'
own intervals side by side.  sacreBLEU's own paired test reports each system's interval and a p-value
but not the difference's, so the resampling here reuses its sufficient statistics (the n-gram counts
per sentence that its corpus score sums) and its seed, and reads the interval off the resampled
differences (percentile interval).
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
    ours = np.array(metric._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype=np.float64)
    theirs = np.array(metric._extract_corpus_statistics(list(control), [list(references)]), dtype=np.float64)
    gap = metric._compute_score_from_stats(ours.sum(0)).score - metric._compute_score_from_stats(theirs.sum(0)).score
    draws = np.random.default_rng(seed).choice(len(references), size=(samples, len(references)), replace=True)
    diffs = np.array([metric._compute_score_from_stats(ours[i].sum(0)).score
                      - metric._compute_score_from_stats(theirs[i].sum(0)).score for i in draws])
    low, high = np.percentile(diffs, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return {"gap": round(float(gap), 2), "low": round(float(low), 2), "high": round(float(high), 2),
            "below": round(float((diffs < 0).mean()), 3), "samples": samples}
