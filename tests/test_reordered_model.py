"""reordered_transformer + ReorderedLanguagePairDataset: the training-time forward and step-wise
incremental decoding agree for every order; batches are shifted by z; order mismatches are refused."""
import pytest
import torch
from fairseq.data import LanguagePairDataset
from fairseq.modules import SinusoidalPositionalEmbedding

from _reorder_utils import ORDER_CASES, build, parse_train_args
from fairseq_plugins.data.reordered_dataset import ReorderedLanguagePairDataset
from fairseq_plugins.models.reordered_transformer import signed_sinusoid
from fairseq_plugins.orders import get_order
from fairseq_plugins.tasks.fast_translation import FastTranslationOptionError, check_model_matches_task


@pytest.mark.parametrize("name,h,c,flags", ORDER_CASES, ids=lambda v: str(v))
def test_training_forward_equals_incremental_decoding(tmp_path, name, h, c, flags):
    task, model, _ = build(tmp_path, name, h, c, flags)
    z = model.generation_order.z
    torch.manual_seed(1)
    src = torch.randint(4, 40, (3, 7))
    src_len = torch.tensor([7, 7, 7])
    tgt = torch.randint(4, 40, (3, 4 * z))
    prev = torch.cat([torch.full((3, z), task.target_dictionary.eos()), tgt[:, :-z]], 1)
    with torch.no_grad():
        full = model.get_normalized_probs(model(src, src_len, prev), log_probs=True)
        enc = model.encoder(src, src_lengths=src_len)
        state, steps = {}, []
        for k in range(4):
            out = model.decoder(prev[:, :(k + 1) * z], encoder_out=enc, incremental_state=state)
            steps.append(model.get_normalized_probs(out, log_probs=True))
    torch.testing.assert_close(full, torch.cat(steps, 1), atol=1e-5, rtol=0)


def test_mask_hides_future_groups(tmp_path):
    _, model, _ = build(tmp_path, "interleave", 2, 1)
    src, src_len = torch.randint(4, 40, (1, 5)), torch.tensor([5])
    prev = torch.randint(4, 40, (1, 8))
    changed = prev.clone()
    changed[0, 6:] = 5  # the last group's inputs
    with torch.no_grad():
        a, b = model(src, src_len, prev)[0], model(src, src_len, changed)[0]
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_signed_sinusoid_matches_fairseq_for_positive_positions():
    table = SinusoidalPositionalEmbedding.get_embedding(20, 16)
    torch.testing.assert_close(signed_sinusoid(torch.arange(20), 16), table)
    neg = signed_sinusoid(torch.tensor([-3]), 16)[0]
    torch.testing.assert_close(neg[:8], -table[3, :8])  # sin is odd, cos even
    torch.testing.assert_close(neg[8:], table[3, 8:])


def test_collater_shifts_by_z_and_keeps_natural_reference(tmp_path):
    task, _, _ = build(tmp_path, "interleave", 2, 2)
    d = task.target_dictionary
    eos, pad = d.eos(), d.pad()
    tgts = [torch.tensor([10, 11, 12, eos]), torch.tensor([20, 21, 22, 23, 24, 25, eos])]
    srcs = [torch.tensor([5, 6, eos]), torch.tensor([7, eos])]
    base = LanguagePairDataset(srcs, [3, 2], d, tgts, [4, 7], d)
    order = get_order("interleave", 2, 2)
    batch = ReorderedLanguagePairDataset(base, order).collater([base[0], base[1]])
    for row, i in enumerate(batch["id"].tolist()):
        want, positions, directions = order.reorder(tgts[i][:-1], eos=eos)
        got = batch["target"][row]
        assert got[got.ne(pad)].tolist() == want.tolist()
        prev = batch["net_input"]["prev_output_tokens"][row]
        assert prev[:4].tolist() == [eos] * 4 and prev[4:len(want)].tolist() == want[:-4].tolist()
        assert batch["net_input"]["target_positions"][row, :len(want)].tolist() == positions.tolist()
        assert batch["net_input"]["target_directions"][row, :len(want)].tolist() == directions.tolist()
        nat = batch["natural_target"][row]
        assert nat[nat.ne(pad)].tolist() == tgts[i].tolist()
    assert batch["ntokens"] == 4 + 8  # ceil((n+1)/z)*z slots: n=3 -> 4, n=6 -> 8


def test_checkpoint_order_mismatch_is_a_clear_error(tmp_path):
    _, model, _ = build(tmp_path, "interleave", 2, 1)
    other = parse_train_args(tmp_path, ["--arch", "reordered_transformer_tiny", "--target-order", "multi_segment",
                                        "--directions", "4"])
    with pytest.raises(FastTranslationOptionError, match=r"trained with order interleave\(h=2,c=1\).*multi_segment"):
        check_model_matches_task(model, other)


def test_stock_model_with_target_order_is_a_clear_error(tmp_path):
    from fairseq import tasks

    args = parse_train_args(tmp_path, ["--arch", "transformer_fast_tiny"]) if (tmp_path / "dict.src.txt").exists() \
        else None
    if args is None:
        build(tmp_path, "interleave")  # writes the dictionaries
        args = parse_train_args(tmp_path, ["--arch", "transformer_fast_tiny"])
    stock = tasks.setup_task(args).build_model(args)
    wanted = parse_train_args(tmp_path, ["--arch", "transformer_fast_tiny", "--target-order", "interleave"])
    with pytest.raises(FastTranslationOptionError, match="reordered_transformer"):
        check_model_matches_task(stock, wanted)


def test_inconsistent_flags_are_clear_errors(tmp_path):
    from fairseq import tasks

    build(tmp_path, "interleave")
    with pytest.raises(FastTranslationOptionError, match="even --directions"):
        tasks.setup_task(parse_train_args(tmp_path, ["--arch", "reordered_transformer_tiny", "--target-order",
                                                     "multi_segment", "--directions", "3"]))
    with pytest.raises(FastTranslationOptionError, match="--double-topk"):
        tasks.setup_task(parse_train_args(tmp_path, ["--arch", "reordered_transformer_tiny", "--target-order",
                                                     "multi_segment", "--double-topk"]))
