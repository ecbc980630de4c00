"""Where in a translation BLEU is lost: n-gram precision by position (Imamura & Sumita §5.1, Table 3,
counted by quarters of the translation instead of its first and last n tokens).

A bidirectional order writes the two ends of a translation first (head-tail and IBDecoder: the start
left to right, the end right to left) and meets in the middle.  If one direction is the weaker, the
precision of its end falls below the L2R control's; if the meeting is, the middle quarters fall.
Imamura & Sumita counted the first and last n tokens of translations over 30 tokens; our sentences
are short (about 12 words), so every translation is cut into ``bins`` equal parts instead, and each
n-gram belongs to the part its centre falls in (a fraction of the translation's length).

Each n-gram is matched against the whole reference and clipped by the reference's count, as BLEU's
modified precision clips (Papineni et al. 2002, §2.1); where a translation holds an n-gram more often
than its reference, the first occurrences are the matched ones (our choice: BLEU itself does not
place its matches).  A part's corpus precision is its summed matches over its summed n-grams.  Tokens
are the BLEU metric's own (sacreBLEU's tokenizer).
"""
from collections import Counter
from typing import Callable, Dict, Sequence, Tuple


def position_precision(hypotheses: Sequence[str], references: Sequence[str], tokenize: Callable[[str], str],
                       orders: Tuple[int, ...] = (1, 4), bins: int = 4) -> Dict[int, Dict[str, list]]:
    """n -> ``precision`` (a fraction per part, None for a part without n-grams), ``matches`` and
    ``total`` (per part, over the corpus); ``tokenize``: a detokenised line to space-separated tokens
    (``corpus.bleu_metric().tokenizer``)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"precision by position needs one reference per translation: {len(hypotheses)} "
                         f"translations, {len(references)} references")
    pairs = [(tokenize(hyp).split(), tokenize(ref).split()) for hyp, ref in zip(hypotheses, references)]
    out = {}
    for n in orders:
        matches, totals = [0] * bins, [0] * bins
        for h, r in pairs:
            allowed = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            for i in range(len(h) - n + 1):
                gram, part = tuple(h[i:i + n]), min(bins - 1, int((i + n / 2) / len(h) * bins))
                totals[part] += 1
                if allowed[gram] > 0:
                    allowed[gram] -= 1
                    matches[part] += 1
        out[n] = {"precision": [m / t if t else None for m, t in zip(matches, totals)], "matches": matches,
                  "total": totals}
    return out
