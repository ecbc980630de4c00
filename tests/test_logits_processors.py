"""fairseq's rules on the log-probs as one list of processors (decoding/logits_processors.py): applied
to many columns at their own steps, it must give what fairseq's SequenceGenerator gives one step at a time."""
import math

import pytest
import torch

from fairseq_plugins.decoding.logits_processors import logits_processors
from fairseq_plugins.decoding.options import GenerationOptions

EOS, PAD, UNK, V = 2, 1, 3, 11


class Dictionary:
    def eos(self):
        return EOS

    def pad(self):
        return PAD

    def unk(self):
        return UNK

    def __len__(self):
        return V


def processors(min_len=1, unk_penalty=0.0):
    return logits_processors(GenerationOptions(min_len=min_len, unk_penalty=unk_penalty), Dictionary())


def fairseq_step(lprobs, step, max_len, min_len, unk_penalty):
    """sequence_generator.py's per-step code on ``(B, V)``, transcribed."""
    lprobs = lprobs.clone()
    lprobs[lprobs != lprobs] = torch.tensor(-math.inf).to(lprobs)
    lprobs[:, PAD] = -math.inf
    lprobs[:, UNK] -= unk_penalty
    if step >= max_len:
        lprobs[:, :EOS] = -math.inf
        lprobs[:, EOS + 1 :] = -math.inf
    elif step < min_len:  # fairseq's else-branch (no prefix tokens); min_len <= max_len
        lprobs[:, EOS] = -math.inf
    return lprobs


def noisy_lprobs(shape, seed):
    g = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(torch.randn(*shape, V, generator=g), dim=-1)
    lp[torch.rand(*shape, V, generator=g) < 0.05] = math.nan  # fp16 overflow
    return lp


@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("unk_penalty", [0.0, 1.5])
def test_columns_at_their_steps_equal_fairseq_step_by_step(per_row, unk_penalty):
    B, m, max_len, min_len = 3, 6, 7, 4
    c = processors(min_len=min_len, unk_penalty=unk_penalty)
    for seed, first in enumerate((0, 2, 3, 5)):
        lp = noisy_lprobs((B, m), seed)
        steps = torch.arange(first, first + m)
        if per_row:
            steps = steps.unsqueeze(0) + torch.tensor([[0], [1], [2]])
        got = c.apply(lp.clone(), steps, max_len)
        bounded = c.apply(lp.clone(), steps, max_len, min_step=int(steps.min()), max_step=int(steps.max()))
        for b in range(B):
            for i in range(m):
                step = int(steps[i] if not per_row else steps[b, i])
                want = fairseq_step(lp[b : b + 1, i], step, max_len, min_len, unk_penalty)[0]
                assert torch.equal(got[b, i], want), (seed, b, i, step)
                assert torch.equal(bounded[b, i], want)
        assert not torch.isnan(got).any()


def test_host_bounds_only_skip_masks_that_cannot_apply():
    c = processors(min_len=2)
    lp = noisy_lprobs((2, 3), 7)
    steps = torch.tensor([[2, 3, 4], [3, 4, 5]])
    # every step is >= min_len and < max_len: the bounds let it skip both masks, the result is the same
    assert torch.equal(c.apply(lp.clone(), steps, 10, min_step=2, max_step=5), c.apply(lp.clone(), steps, 10))
    forced = c.apply(lp.clone(), steps, 4)  # steps 4 and 5 are at/after max_len: only EOS survives there
    at_max = steps >= 4
    assert torch.isinf(forced[at_max][:, [t for t in range(V) if t != EOS]]).all()
    assert torch.isfinite(forced[at_max][:, EOS]).all() and torch.isfinite(forced[~at_max][:, EOS]).any()


def test_a_beam_shaped_block_broadcasts():
    """The multi-token beam's (n, beam, z, V) log-probs with one step per group slot."""
    c = processors(min_len=3)
    lp = noisy_lprobs((2, 4, 2), 3)
    steps = torch.tensor([2, 3])  # the two slots of the group
    out = c.apply(lp.clone(), steps, 3)
    assert torch.isinf(out[:, :, 0, EOS]).all()  # step 2 < min_len
    assert torch.isinf(out[:, :, 1, :EOS]).all() and torch.isinf(out[:, :, 1, EOS + 1 :]).all()  # step 3 = max_len
