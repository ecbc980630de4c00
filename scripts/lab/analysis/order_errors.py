"""Where a reordered model's translations go wrong (issue "reordered models at convergence").

Bidirectional decoders are known to repeat or drop words where their directions meet (Zhang et al.
§5, Imamura & Sumita §5): the left-to-right and right-to-left halves each produce the junction's
word, or neither does.  These counts, over natural-order token sequences (hypotheses after
``restore``, references), say how often that happens and where in the sentence:

* ``repeats``: adjacent equal tokens in the hypothesis beyond those of its reference (a word the
  reference also repeats is no error, as often as the reference repeats it);
* ``drops``: reference tokens that the hypothesis skips, aligned in order (``difflib``'s longest
  matching blocks): a reference span with nothing in its place, or the part of a replaced span
  longer than its replacement -- what the junction loses when neither half says a word (a word
  said differently is a substitution, not a drop);
* ``missing`` / ``extra``: reference tokens the hypothesis lacks / hypothesis tokens the
  reference lacks (bag of tokens, so a moved word is neither; a different word counts in both);
* ``repeat_position`` / ``drop_position``: histograms of where the repeats stand, as a fraction
  of the hypothesis length, and where the drops stand, as a fraction of the reference length (a
  token's centre), in ``bins`` equal bins -- a peak at 0.5 is the junction of head-tail /
  interleaving, at 0.25 and 0.75 the two junctions of IMDecoder h=4 (two segments, each
  interleaved).

Compare an order's counts with the L2R model's on the same sentences: L2R has no junction.
"""
from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Dict, List, Sequence


@dataclass
class ErrorCounts:
    bins: int = 10
    sentences: int = 0
    hyp_tokens: int = 0
    ref_tokens: int = 0
    repeats: int = 0
    drops: int = 0
    missing: int = 0
    extra: int = 0
    repeat_position: List[int] = field(default_factory=list)
    drop_position: List[int] = field(default_factory=list)

    def __post_init__(self):
        if self.bins < 1:
            raise ValueError(f"bins must be >= 1 (got {self.bins})")
        if not self.repeat_position:
            self.repeat_position = [0] * self.bins
        if not self.drop_position:
            self.drop_position = [0] * self.bins

    def _bin(self, index, length):
        # a token's centre, (i + 0.5) / n: by its start, short sentences crowd fixed bins (n = 2 puts
        # its second token at exactly 0.5), which a corpus of short messages turns into false peaks
        return min(self.bins - 1, int(self.bins * (index + 0.5) / length))

    def add(self, hyp: Sequence, ref: Sequence):
        """Count one sentence (token ids or words, natural order, no EOS)."""
        hyp, ref = list(hyp), list(ref)
        self.sentences += 1
        self.hyp_tokens += len(hyp)
        self.ref_tokens += len(ref)
        legit = Counter(ref[i] for i in range(1, len(ref)) if ref[i] == ref[i - 1])  # repeats the reference has
        for i in range(1, len(hyp)):
            if hyp[i] != hyp[i - 1]:
                continue
            if legit[hyp[i]] > 0:
                legit[hyp[i]] -= 1
                continue
            self.repeats += 1
            self.repeat_position[self._bin(i, len(hyp))] += 1
        for i in dropped(hyp, ref):
            self.drops += 1
            self.drop_position[self._bin(i, len(ref))] += 1
        h, r = Counter(hyp), Counter(ref)
        self.missing += sum((r - h).values())
        self.extra += sum((h - r).values())

    def summary(self) -> Dict[str, float]:
        """Rates per 100 reference tokens, and the histograms (counts; over ``ref_tokens``)."""
        per = 100.0 / max(1, self.ref_tokens)
        return {"sentences": self.sentences, "ref_tokens": self.ref_tokens,
                "length_ratio": self.hyp_tokens / max(1, self.ref_tokens),
                "repeats_per_100": self.repeats * per, "drops_per_100": self.drops * per,
                "missing_per_100": self.missing * per, "extra_per_100": self.extra * per,
                "repeat_position": list(self.repeat_position), "drop_position": list(self.drop_position)}


def dropped(hyp: Sequence, ref: Sequence) -> List[int]:
    """Indices of the reference tokens that ``hyp`` skips (module docstring, ``drops``); a replaced span
    longer than its replacement drops its last tokens."""
    out = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, list(ref), list(hyp), autojunk=False).get_opcodes():
        if tag == "delete":
            out.extend(range(i1, i2))
        elif tag == "replace" and i2 - i1 > j2 - j1:
            out.extend(range(i1 + (j2 - j1), i2))
    return out


def count_errors(hypotheses: Sequence[Sequence], references: Sequence[Sequence], bins: int = 10) -> ErrorCounts:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references: pass one per sentence, "
                         "in the same order")
    counts = ErrorCounts(bins=bins)
    for hyp, ref in zip(hypotheses, references):
        counts.add(hyp, ref)
    return counts
