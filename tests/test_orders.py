"""orders.py: every order round-trips, lays out end markers as documented, and builds Eq. 4."""
import math

import pytest
import torch

from fairseq_plugins.orders import ABLATIONS, OrderError, get_order, order_from_config, order_signature_of_config

EOS = 2


def all_orders():
    for c in (1, 2, 3):
        yield get_order("l2r", 1, c)
        yield get_order("r2l", 1, c)
        yield get_order("head_tail", 2, c)
        yield get_order("interleave", 2, c)
        yield get_order("interleave", 2, c, middle_to_side=True)
        for h in (2, 4, 6):
            yield get_order("multi_segment", h, c)


ORDERS = list(all_orders())


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.signature)
def test_round_trip_and_end_markers(order):
    for n in range(0, 65):
        y = torch.arange(10, 10 + n)
        tokens, positions, directions = order.reorder(y, eos=EOS)
        assert len(tokens) % order.z == 0 and len(positions) == len(directions) == len(tokens)
        groups = tokens.view(-1, order.z).eq(EOS).any(1)
        assert groups[-1] and not groups[:-1].any(), "end markers only (and always) in the last group"
        assert sorted(tokens[tokens.ne(EOS)].tolist()) == y.tolist()
        assert order.restore(tokens, eos=EOS).tolist() == y.tolist()
        # trailing tokens after the final group and junk after an end marker are dropped
        junk = torch.cat([tokens, torch.tensor([7, 8, EOS, 9])])
        assert order.restore(junk, eos=EOS).tolist() == y.tolist()


def test_sequences_of_the_papers():
    y = [11, 12, 13, 14, 15, 16]  # y1..y6 of IBDecoder Figure 1
    assert get_order("interleave").reorder(y, eos=EOS)[0].tolist() == [11, 16, 12, 15, 13, 14, EOS, EOS]  # Eq. 6
    assert get_order("interleave").reorder(y, eos=EOS)[1].tolist() == [1, -1, 2, -2, 3, -3, 4, -4]  # Eq. 7
    assert get_order("r2l").reorder(y, eos=EOS)[0].tolist() == [16, 15, 14, 13, 12, 11, EOS]
    ms = get_order("multi_segment", 4)  # Eq. 9: segments y1..y3, y4..y6, each interleaved
    tokens, positions, directions = ms.reorder(y, eos=EOS)
    assert tokens.tolist() == [11, 13, 14, 16, 12, EOS, 15, EOS]
    assert positions.tolist() == [0, 0, 0, 0, 1, 1, 1, 1] and directions.tolist() == [0, 1, 2, 3] * 2  # Eq. 10
    # Imamura: one EOD for an odd length, two for an even one, the last pair holds an EOD
    assert get_order("head_tail").reorder(y[:5], eos=EOS)[0].tolist() == [11, 15, 12, 14, 13, EOS]
    assert get_order("head_tail").reorder(y, eos=EOS)[0].tolist() == [11, 16, 12, 15, 13, 14, EOS, EOS]
    assert get_order("l2r", 1, 2).reorder(y[:5], eos=EOS)[0].tolist() == [11, 12, 13, 14, 15, EOS]


def test_end_marker_in_either_slot():
    order = get_order("interleave")
    assert order.restore([11, 15, 12, EOS], eos=EOS).tolist() == [11, 12, 15]  # (y, EOD): y kept
    assert order.restore([11, 15, EOS, 12], eos=EOS).tolist() == [11, 15]  # (EOD, y): rest of the group dropped
    ms = get_order("multi_segment", 4)  # each segment keeps its tokens before its own end marker
    assert ms.restore([11, 13, 14, 16, 12, EOS, EOS, 15], eos=EOS).tolist() == [11, 12, 13, 14, 16]


@pytest.mark.parametrize("h,c", [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (2, 3)])
def test_mask_is_eq4(h, c):
    name = {1: "l2r", 2: "interleave", 4: "multi_segment"}[h]
    order = get_order(name, h, c)
    n = 13
    mask = order.mask(n)
    for i in range(1, n + 1):
        for j in range(1, n + 1):
            want = 0.0 if math.ceil(i / (h * c)) >= math.ceil(j / (h * c)) else -math.inf
            assert mask[i - 1, j - 1].item() == want


def test_ablation_masks():
    n = 8
    assert torch.equal(get_order("interleave", vanilla_mask=True).mask(n), get_order("l2r").mask(n))
    indep = get_order("interleave", independent_directions=True)
    d = indep.directions(n)
    allowed = indep.mask(n).eq(0)
    assert not (allowed & (d[:, None] != d[None, :])).any()
    assert torch.equal(get_order("interleave", vanilla_positions=True).positions(n), torch.arange(n))
    assert get_order("interleave", middle_to_side=True).reorder([1 + 10, 12, 13, 14], eos=EOS)[0].tolist()[:4] == [13, 12, 14, 11]


def test_incremental_mask_rows():
    order = get_order("interleave", vanilla_mask=True)
    assert torch.equal(order.incremental_mask(4, 2), order.mask(6)[4:])
    assert get_order("interleave").incremental_mask(4, 2) is None  # M(h,c): a new group sees everything


def test_bad_options_are_clear_errors():
    with pytest.raises(OrderError, match="even --directions"):
        get_order("multi_segment", 3)
    with pytest.raises(OrderError, match="exactly two directions"):
        get_order("interleave", 4)
    with pytest.raises(OrderError, match="one direction"):
        get_order("l2r", 2)
    with pytest.raises(OrderError, match="unknown target order"):
        get_order("zigzag")
    with pytest.raises(OrderError, match="unknown order option"):
        get_order("interleave", vanila_mask=True)


def test_config_helpers():
    class Cfg:
        target_order, directions, tokens_per_direction = "l2r", 0, 1

    assert order_from_config(Cfg) is None and order_signature_of_config(Cfg) is None
    Cfg.tokens_per_direction = 2
    assert order_signature_of_config(Cfg) == "l2r(h=1,c=2)"
    for flag in ABLATIONS:
        setattr(Cfg, flag, False)
    Cfg.target_order, Cfg.tokens_per_direction, Cfg.vanilla_mask = "interleave", 1, True
    assert order_signature_of_config(Cfg) == "interleave(h=2,c=1,vanilla_mask)"
