"""decoding.projection: the laid-out products and the kernel each bucket of row counts keeps."""
import time

import pytest
import torch
import torch.nn.functional as F

from fairseq_plugins.decoding.projection import (KernelChoice, Product, StackedQKV, WeightCheck, Warmup, fingerprint,
                                                 packing_available, padded_rows)


def _slow(seconds, result):
    def kernel(x):
        time.sleep(seconds)
        return result(x)
    return kernel


def test_each_bucket_keeps_the_kernel_that_was_faster_on_its_first_input():
    def a(x):
        time.sleep(0.002 if x.size(0) > 1 else 0.0)  # slow on many rows
        return x + 1

    def b(x):
        time.sleep(0.0 if x.size(0) > 1 else 0.002)  # slow on one row
        return x + 1

    choice = KernelChoice()
    assert choice(1, torch.zeros(1, 4), a, b) is a
    assert choice(6, torch.zeros(6, 4), a, b) is b
    assert choice.picks == {1: False, 3: True}  # buckets by bit length: 1 -> 1, 4..7 -> 3
    calls = []
    c = lambda x: calls.append(x)  # noqa: E731
    d = lambda x: calls.append(x)  # noqa: E731
    assert choice(5, torch.zeros(5, 4), c, d) is d and not calls  # the bucket of 6 rows: kept, not timed again


@pytest.mark.skipif(not packing_available(), reason="torch built without oneDNN")
def test_a_bucket_of_row_counts_met_for_the_first_time_counts_as_a_warmup_once():
    w = torch.randn(64, 16)
    proj = Product(lambda: w, transposed=True)
    proj.refresh()
    proj._choice.kind = ()  # this product's own picks: a new bucket is timed here, not taken from an earlier test's
    proj._choice.picks = dict.fromkeys(range(1, 4), False)  # buckets 1, 2-3 and 4-7 timed: the plain kernel
    before = Warmup.events
    for rows in (1, 3, 3, 1, 2, 3, 5, 6, 7, 9):  # only bucket 8-15 (9 rows) is new
        proj(torch.randn(rows, 16))
    assert Warmup.events - before == 1


def test_rows_are_padded_exactly_up_to_16_then_to_one_of_8_counts_per_doubling():
    assert [padded_rows(r) for r in (1, 2, 11, 16)] == [1, 2, 11, 16]  # a width-10 call at batch 1: 11, not 16
    assert [padded_rows(r) for r in (17, 18, 21, 33, 100, 353)] == [18, 18, 22, 36, 104, 384]
    assert len({padded_rows(r) for r in range(1, 513)}) == 16 + 8 * 5  # shapes stay bounded: 8 per doubling


@pytest.mark.skipif(not packing_available(), reason="torch built without oneDNN")
def test_every_padded_row_count_the_packed_kernel_meets_first_counts_as_a_warmup():
    """oneDNN builds a kernel for each new shape: that interval says nothing about the next ones."""
    w = torch.randn(64, 16)
    proj = Product(lambda: w)
    proj.refresh()
    proj._choice.kind = ()
    proj._choice.picks = dict.fromkeys(range(1, 10), True)  # every bucket timed: the packed kernel
    before = Warmup.events
    for rows in (1, 3, 3, 1, 2, 3, 5, 17, 18, 20, 21):  # shapes 1, 3, 2, 5, 18, 20 and 22
        proj(torch.randn(rows, 16))
    assert Warmup.events - before == 7


@pytest.mark.skipif(not packing_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("bias", [False, True])
def test_the_packed_and_plain_products_agree_at_every_row_count(bias):
    torch.manual_seed(0)
    w = torch.randn(300, 32)
    b = torch.randn(300) if bias else None
    proj = Product(lambda: w, lambda: b)
    proj.refresh()
    for rows in (1, 2, 3, 5, 11, 17, 40):  # 2 x rows: 2, 4, 6, 10, 22, 34 (run as 36 by oneDNN: padded) and 80
        x = torch.randn(2, rows, 32)
        ref = F.linear(x, w, b)
        assert torch.allclose(proj(x), ref, atol=1e-4)
        assert torch.allclose(proj._packed_product(x), ref, atol=1e-4)  # both kernels, whichever was kept
        assert torch.allclose(proj._plain(x), ref, atol=1e-4)


def test_the_product_follows_the_weight_and_keeps_only_the_draft_rows():
    w = torch.randn(50, 8)
    rows = {"n": 20}
    proj = Product(lambda: w, rows_of=lambda: rows["n"], transposed=True)
    x = torch.randn(3, 8)
    assert torch.allclose(proj(x), x @ w[:20].t(), atol=1e-5)
    with torch.no_grad():
        w.mul_(2)  # an in-place update (load_state_dict) seen at the next refresh
    rows["n"] = 0  # 0: every row
    proj.refresh()
    assert proj(x).shape == (3, 50) and torch.allclose(proj(x), x @ w.t(), atol=1e-5)


def test_half_precision_and_a_cpu_without_onednn_keep_the_plain_product():
    w = torch.randn(40, 8)
    half = Product(lambda: w.half())
    half.refresh()
    assert half._choice is None
    assert half(torch.randn(4, 8).half()).dtype == torch.float16
    with torch.backends.mkldnn.flags(enabled=False):
        plain = Product(lambda: w)
        plain.refresh()
        assert plain._choice is None


def test_products_of_the_same_kind_share_their_picks():
    """Timed once per process: a second product of the same shape (another generator's copy of the
    model) keeps the first one's kernel without timing, so two generators compare like with like."""
    fast, slow = (lambda x: x), (lambda x: time.sleep(0.002))
    kind = ("test-kind", id(fast))
    assert KernelChoice(kind)(3, torch.zeros(3, 4), slow, fast) is fast
    timed = []
    assert KernelChoice(kind)(2, torch.zeros(2, 4), lambda x: timed.append(1), lambda x: timed.append(2)) is not None
    assert timed == []  # bucket 2 (2-3 rows) was picked by the first: nothing run here


def test_a_weight_changed_through_p_data_is_seen_by_the_weight_check_not_by_its_version():
    """fairseq's optimizers update ``p.data`` in place: the parameter's version counter stays."""
    w = torch.nn.Parameter(torch.randn(50, 8))
    proj = Product(lambda: w, transposed=True)
    check = WeightCheck([proj])
    check.refresh()
    x = torch.randn(3, 8)
    before = proj(x)
    w.data.mul_(2)
    proj.refresh()  # identity alone: the version counter did not move
    assert torch.equal(proj(x), before)
    check.refresh()
    assert torch.allclose(proj(x), x @ w.detach().t(), atol=1e-5) and not torch.allclose(proj(x), before)
    w.data[[3, 7]] = w.data[[7, 3]]  # a swap of two rows keeps their sum: the ramp sees it
    check.refresh()
    assert torch.allclose(proj(x), x @ w.detach().t(), atol=1e-5)


def test_the_stacked_qkv_projection_follows_its_three_weights_changed_through_p_data():
    attn = torch.nn.Module()
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(attn, name, torch.nn.Linear(8, 8))
    qkv = StackedQKV(attn)
    check = WeightCheck([qkv])
    check.refresh()
    attn.k_proj.bias.data.add_(1.0)
    check.refresh()
    x = torch.randn(2, 8)
    assert torch.allclose(qkv(x)[:, 8:16], attn.k_proj(x), atol=1e-5)


def test_fingerprints_differ_for_changed_values_and_are_equal_for_equal_ones():
    t = torch.randn(4, 5)
    assert fingerprint(t).item() == fingerprint(t.clone()).item()
    u = t.clone()
    u[0, 0] += 1e-3
    assert fingerprint(u).item() != fingerprint(t).item()
    assert fingerprint(t.half()).dtype == torch.float32
