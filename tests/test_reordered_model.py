"""reordered_transformer + ReorderedLanguagePairDataset: the training-time forward and step-wise
incremental decoding agree for every order; batches are shifted by z; order mismatches are refused."""
import pytest
import torch
from fairseq.data import LanguagePairDataset
from fairseq.modules import SinusoidalPositionalEmbedding

from _reorder_utils import ORDER_CASES, build, parse_train_args
from fairseq_plugins.data.reordered_dataset import ReorderedLanguagePairDataset
from fairseq_plugins.decoding.model_parts import ModelParts
from fairseq_plugins.decoding.multi_token_beam import ModelStepper
from fairseq_plugins.models.reordered_transformer import signed_sinusoid
from fairseq_plugins.orders import get_order
from fairseq_plugins.tasks.fast_translation import FastTranslationOptionError, check_model_matches_task


@pytest.mark.parametrize("name,h,c,flags", ORDER_CASES, ids=lambda v: str(v))
def test_training_forward_equals_incremental_decoding(tmp_path, name, h, c, flags):
    """fairseq's own training forward (with the order's slot embeddings and M(h,c)) and the lean
    step the beam search decodes with, z slots per call into the KV cache, give the same log-probs
    (sources of different lengths, left-padded as fairseq does)."""
    task, model, _ = build(tmp_path, name, h, c, flags)
    order = model.generation_order
    z = order.z
    torch.manual_seed(1)
    pad = task.source_dictionary.pad()
    src = torch.randint(4, 40, (3, 7))
    src[0, :3] = pad
    src_len = torch.tensor([4, 7, 7])
    tgt = torch.randint(4, 40, (3, 4 * z))
    prev = torch.cat([torch.full((3, z), task.target_dictionary.eos()), tgt[:, :-z]], 1)
    with torch.no_grad():
        full = model.get_normalized_probs(model(src, src_len, prev), log_probs=True)
        stepper = ModelStepper(ModelParts(model), {"src_tokens": src, "src_lengths": src_len}, 1, 2, order)  # capacity grows
        steps = [stepper.step(prev[:, :(k + 1) * z]) for k in range(4)]
    torch.testing.assert_close(full, torch.cat(steps, 1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name,h,c,flags", ORDER_CASES, ids=lambda v: str(v))
def test_collated_batch_of_mixed_lengths_equals_incremental_decoding(tmp_path, name, h, c, flags):
    """A training batch as the dataset collates it (targets of 1..13 tokens, every remainder modulo z,
    reordered, end-marker padded and right-padded with PAD) scores every real slot as the beam
    search's incremental steps do: the padding of shorter rows changes nothing."""
    task, model, _ = build(tmp_path, name, h, c, flags)
    d = task.target_dictionary
    eos, pad = d.eos(), d.pad()
    g = torch.Generator().manual_seed(3)
    tgts = [torch.cat([torch.randint(4, 40, (n,), generator=g), torch.tensor([eos])]) for n in range(1, 14)]
    srcs = [torch.cat([torch.randint(4, 40, (1 + n % 5,), generator=g), torch.tensor([eos])]) for n in range(13)]
    base = LanguagePairDataset(srcs, [len(s) for s in srcs], d, tgts, [len(t) for t in tgts], d)
    data = ReorderedLanguagePairDataset(base, model.generation_order)
    batch = data.collater([data[i] for i in range(len(tgts))])
    net_input, z = batch["net_input"], model.generation_order.z
    with torch.no_grad():
        full = model.get_normalized_probs(model(**net_input), log_probs=True)
        prev = net_input["prev_output_tokens"]
        stepper = ModelStepper(ModelParts(model), net_input, 1, prev.size(1), model.generation_order)
        steps = torch.cat([stepper.step(prev[:, :(k + 1) * z]) for k in range(prev.size(1) // z)], 1)
    real = batch["target"].ne(pad)
    assert not bool(real.all())  # shorter rows are padded
    torch.testing.assert_close(full[real], steps[real], atol=1e-5, rtol=0)


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
        want = order.reorder(tgts[i][:-1], eos=eos)[0]
        got = batch["target"][row]
        assert got[got.ne(pad)].tolist() == want.tolist()
        prev = batch["net_input"]["prev_output_tokens"][row]
        assert prev[:4].tolist() == [eos] * 4 and prev[4:len(want)].tolist() == want[:-4].tolist()
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


def test_checkpoint_of_an_older_format_is_refused(tmp_path):
    """A reordered checkpoint without the format marker (trained before distinct start slots) must not
    be decoded silently wrong: loading it says what changed and to retrain."""
    from fairseq_plugins.models.reordered_transformer import ReorderedCheckpointError

    _, model, _ = build(tmp_path, "interleave", 2, 2)
    state = model.state_dict()
    model.load_state_dict(state)  # the current format loads
    del state["decoder.embed_positions.format_version"]
    state.pop("decoder.embed_positions.start.weight")
    with pytest.raises(ReorderedCheckpointError, match="format 1.*Retrain"):
        model.load_state_dict(state)


def test_init_from_l2r_takes_the_l2r_weights_and_keeps_order_embeddings_fresh(tmp_path):
    from fairseq import checkpoint_utils

    from fairseq_plugins.models.reordered_transformer import ReorderedCheckpointError, init_from_l2r

    for sub in "abc":
        (tmp_path / sub).mkdir()
    _, l2r, l2r_args = build(tmp_path / "a", "l2r", None, 1, arch="transformer_fast_tiny", seed=5)
    ckpt = tmp_path / "l2r.pt"
    checkpoint_utils.torch_persistent_save(  # the fields of a fairseq-train checkpoint that loading reads
        {"model": l2r.state_dict(), "args": l2r_args, "extra_state": {},
         "optimizer_history": [{"criterion_name": "x", "optimizer_name": "y", "lr_scheduler_state": {},
                                "num_updates": 0}]}, str(ckpt))
    _, model, _ = build(tmp_path / "b", "interleave", 2, 1, seed=6)
    fresh = model.decoder.embed_positions.start.weight.clone()
    init_from_l2r(model, str(ckpt))
    for name, value in l2r.state_dict().items():
        if "embed_positions" not in name:
            torch.testing.assert_close(model.state_dict()[name], value, rtol=0, atol=0)
    torch.testing.assert_close(model.decoder.embed_positions.start.weight, fresh)
    _, small, _ = build(tmp_path / "c", "interleave", 2, 1, flags=["--decoder-embed-dim", "16",
                                                                   "--encoder-embed-dim", "16"])
    with pytest.raises(ReorderedCheckpointError, match="does not match this model's size"):
        init_from_l2r(small, str(ckpt))
    # an L2R model with separate embeddings cannot seed one that ties them (one tensor, three values)
    (tmp_path / "d").mkdir()
    _, unshared, unshared_args = build(tmp_path / "d", "l2r", None, 1, arch="transformer", seed=7)
    ckpt2 = tmp_path / "unshared.pt"
    checkpoint_utils.torch_persistent_save(
        {"model": unshared.state_dict(), "args": unshared_args, "extra_state": {},
         "optimizer_history": [{"criterion_name": "x", "optimizer_name": "y", "lr_scheduler_state": {},
                                "num_updates": 0}]}, str(ckpt2))
    with pytest.raises(ReorderedCheckpointError, match="share embeddings differently"):
        init_from_l2r(model, str(ckpt2))
