"""N-gram deduplication of a reordered model's output (``--dedup-ngram N``, off by default).

Decoders that predict several tokens per step (SA, IBDecoder+SA) or meet in the middle (head-tail,
interleaving) tend to repeat a word or phrase, chiefly where their directions join.  Zhang et al.
(IBDecoder, §5 "Effect of c", Fig. 4 and Table 5, footnote 8) apply n-gram deduplication to the
semi-autoregressive results, after Wang et al. (2018, SAT); our choice of the rule, which the papers
leave open: an n-gram (n = 1..N) immediately followed by a copy of itself keeps one copy, smallest
n first, until no adjacent copy is left.  It is a post-process on the natural-order hypothesis, so
it never touches a lossless left-to-right decode (the draft-and-verify engine ignores it); the
hypothesis's score stays the search's, its positional scores drop the removed tokens' entries.
"""
from typing import Dict, List

import torch


def dedup_ngrams(tokens: List[int], n_max: int) -> List[int]:
    """``tokens`` with every adjacent repeat of an n-gram (n <= ``n_max``) collapsed to one copy;
    returns the indices kept, in order."""
    keep = list(range(len(tokens)))
    changed = True
    while changed:
        changed = False
        for n in range(1, n_max + 1):
            i = 0
            while i + 2 * n <= len(keep):
                first = [tokens[k] for k in keep[i:i + n]]
                if first == [tokens[k] for k in keep[i + n:i + 2 * n]]:
                    del keep[i + n:i + 2 * n]
                    changed = True
                else:
                    i += 1
    return keep


def dedup_hypothesis(hypo: Dict, n_max: int, eos: int) -> Dict:
    """A fairseq hypothesis dict with its tokens (the final EOS kept) deduplicated."""
    tokens = hypo["tokens"]
    body = tokens[:-1] if tokens.numel() and int(tokens[-1]) == eos else tokens
    keep = dedup_ngrams(body.tolist(), n_max)
    if len(keep) == body.numel():
        return hypo
    index = torch.tensor(keep + list(range(body.numel(), tokens.numel())), dtype=torch.long, device=tokens.device)
    out = dict(hypo, tokens=tokens.index_select(0, index))
    scores = hypo.get("positional_scores")
    if scores is not None and scores.numel() == tokens.numel():
        out["positional_scores"] = scores.index_select(0, index)
    return out
