"""Acceptance rules on stub log-probs: exact (top-1), topk (Stern §5.1), min_block (Stern §5.3),
gad_pp (GAD++ Eq. 8-9); forbidden tokens (-inf) are never accepted by any rule."""
import math

import pytest
import torch

from fairseq_plugins.decoding.acceptance import Exact, GADPlusPlus, MinBlock, TopK, build_acceptance, prefix_length

NEG = -math.inf


def stub(rows):
    """rows: per row, per position, a dict token -> log-prob (others -inf). Returns lprobs, top."""
    v = 8
    lp = torch.full((len(rows), len(rows[0]), v), NEG)
    for b, row in enumerate(rows):
        for i, dist in enumerate(row):
            for t, p in dist.items():
                lp[b, i, t] = p
    return lp, lp.argmax(-1)


# one row, draft of 3 tokens, 4 verifier positions
DIST = [
    {1: -0.1, 2: -2.0, 3: -3.0},   # slot 0: top 1, 2nd 2, 3rd 3
    {4: -0.5, 5: -1.0, 6: -4.5},   # slot 1: top 4, 2nd 5, 3rd 6 (gap 4.0)
    {2: -0.2, 7: -0.3},            # slot 2
    {3: -0.1},                     # after the draft
]


def test_prefix_length():
    ok = torch.tensor([[True, True, False, True], [False, True, True, True], [True, True, True, True]])
    assert prefix_length(ok).tolist() == [2, 0, 4]
    assert prefix_length(torch.zeros(2, 0, dtype=torch.bool)).tolist() == [0, 0]


def test_exact_accepts_the_top1_prefix_only():
    lp, top = stub([DIST, DIST, DIST])
    draft = torch.tensor([[1, 4, 2], [1, 5, 2], [2, 4, 2]])
    assert Exact()(draft, lp, top).tolist() == [3, 1, 0]
    assert Exact()(torch.empty(1, 0, dtype=torch.long), lp[:1, :1], top[:1, :1]).tolist() == [0]


def test_topk_accepts_tokens_in_the_verifier_top_n():
    lp, top = stub([DIST] * 3)
    draft = torch.tensor([[2, 5, 7], [3, 4, 2], [2, 6, 2]])
    assert TopK(2)(draft, lp, top).tolist() == [3, 0, 1]
    assert TopK(3)(draft, lp, top).tolist() == [3, 3, 3]
    assert TopK(1)(draft, lp, top).tolist() == Exact()(draft, lp, top).tolist()


def test_topk_never_accepts_forbidden_tokens():
    # only token 2 is allowed at slot 0 (e.g. EOS forced at max_len): top-2 would include a -inf token
    lp, top = stub([[{2: 0.0}, {1: 0.0}]])
    assert TopK(2)(torch.tensor([[5]]), lp, top).tolist() == [0]


def test_min_block_accepts_at_least_l_minus_one_admissible_draft_tokens():
    lp, top = stub([DIST, DIST])
    draft = torch.tensor([[3, 6, 7], [1, 4, 2]])
    assert MinBlock(2)(draft, lp, top).tolist() == [1, 3]   # row 0 forced 1; row 1 exact 3 > 1
    assert MinBlock(3)(draft, lp, top).tolist() == [2, 3]
    assert MinBlock(1)(draft, lp, top).tolist() == [0, 3]   # l = 1 is the exact rule
    # PAD (or any -inf token) stops the forced block: it is never accepted
    assert MinBlock(4)(torch.tensor([[3, 0, 7]]), lp[:1], top[:1]).tolist() == [1]


def test_gad_pp_needs_top_beta_and_a_gap_within_tau():
    lp, top = stub([DIST] * 4)
    draft = torch.tensor([[2, 5, 7], [3, 4, 2], [2, 6, 2], [1, 4, 7]])
    # beta=2, tau=2: slot0 token 2 (rank 2, gap 1.9) ok; slot1 token 5 (rank 2, gap .5) ok; slot2 token 7 ok
    assert GADPlusPlus(2, 2.0)(draft, lp, top).tolist() == [3, 0, 1, 3]
    # beta=3, tau=2: token 3 at slot 0 is rank 3 but gap 2.9 > tau (Eq. 9 fails)
    assert GADPlusPlus(3, 2.0)(draft, lp, top).tolist() == [3, 0, 1, 3]
    assert GADPlusPlus(3, 3.0)(draft, lp, top).tolist() == [3, 3, 1, 3]   # slot1 token 6: gap 4.0 > 3
    assert GADPlusPlus(3, 4.0)(draft, lp, top).tolist() == [3, 3, 3, 3]
    # Eq. 8 alone: beta=1 with any tau is the exact rule
    assert GADPlusPlus(1, 100.0)(draft, lp, top).tolist() == Exact()(draft, lp, top).tolist()


def test_build_acceptance_from_options_and_bad_values():
    class Cfg:
        acceptance, acceptance_topk, min_block_size, gad_beta, gad_tau = "gad_pp", 2, 2, 5, 3.0

    rule = build_acceptance(Cfg)
    assert isinstance(rule, GADPlusPlus) and rule.beta == 5 and rule.tau == 3.0
    Cfg.acceptance = "nope"
    with pytest.raises(ValueError, match="unknown"):
        build_acceptance(Cfg)
    with pytest.raises(ValueError, match="--acceptance-topk"):
        TopK(0)
    with pytest.raises(ValueError, match="--min-block-size"):
        MinBlock(0)
    with pytest.raises(ValueError, match="--gad-tau"):
        GADPlusPlus(3, -1.0)
