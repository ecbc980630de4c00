"""fairseq's hypotheses (``SequenceGenerator.finalize_hypos``), built one way for every generator:
a dict of ``tokens`` (EOS last), ``score`` (the sum of the log-probs, divided by ``length **
--lenpen`` unless ``--unnormalized``), ``positional_scores`` (each token's log-prob: the differences
of the running scores) and ``attention``/``alignment`` None.  The beams finalise many hypotheses at
once on the device: :func:`final_score` and :func:`differences_` work on whole batches, :func:`hypothesis`
makes the dict; the engine's rows go through :func:`from_log_probs`.
"""
from typing import Dict

from torch import Tensor


def final_score(score: Tensor, length, options) -> Tensor:
    """fairseq's final score of hypotheses of ``length`` tokens (EOS included; an int or a tensor
    like ``score``): ``score / length ** --lenpen``, or ``score`` itself with ``--unnormalized``."""
    if not options.normalize_scores:
        return score
    return score / length ** options.len_penalty


def differences_(running: Tensor) -> Tensor:
    """Running scores ``(..., length)`` -> each token's own (the differences along the last
    dimension), in place: fairseq's positional scores."""
    running[..., 1:] = running[..., 1:] - running[..., :-1]
    return running


def hypothesis(tokens: Tensor, score: Tensor, positional_scores: Tensor, **extra) -> Dict:
    """fairseq's hypothesis dict (``extra``: a generator's own keys, e.g. the multi-token beam's
    ``generation_tokens``)."""
    return {"tokens": tokens, "score": score, "attention": None, "alignment": None,
            "positional_scores": positional_scores, **extra}


def from_log_probs(tokens: Tensor, lprobs: Tensor, options) -> Dict:
    """The hypothesis of ``tokens`` (EOS last) whose log-probs are ``lprobs``, accumulated as fairseq
    accumulates them (running scores, then their differences)."""
    running = lprobs.cumsum(dim=0)
    return hypothesis(tokens, final_score(running[-1].clone(), tokens.numel(), options),
                      differences_(running.clone()))
