"""The lean decoder step (decoding/step.py) gives fairseq's decoder's logits (atol 1e-5, fp32) over
whole sentences: token by token, in chunks, and with rows at different lengths, for post-norm and
pre-norm, sinusoidal and learned positions, shared and separate embeddings; and it breaks exact
ties the way fairseq's greedy search does (the engine's exact mode)."""
import pytest
import torch

from _reorder_utils import LAYOUTS, build, plain_transformer
from fairseq_plugins.decoding.step import DecoderStep

VARIANTS = {**LAYOUTS, "shared embeddings": ["--share-decoder-input-output-embed"]}


def _inputs(n=3, src_len=7, tgt_len=11, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (n, src_len), generator=g)
    src[0, :3] = 1  # a left-padded source, as fairseq batches them
    lengths = torch.tensor([src_len - 3] + [src_len] * (n - 1))
    prev = torch.randint(4, 40, (n, tgt_len), generator=g)
    prev[:, 0] = 2  # fairseq's start symbol
    return src, lengths, prev


@pytest.mark.parametrize("flags", list(VARIANTS.values()), ids=list(VARIANTS))
@torch.no_grad()
def test_step_gives_fairseq_logits(tmp_path, flags):
    model = plain_transformer(tmp_path, flags)
    src, lengths, prev = _inputs()
    ref, _ = model(src, lengths, prev, features_only=False)
    enc = model.encoder(src, src_lengths=lengths)
    step = DecoderStep(model.decoder)
    T = prev.size(1)
    # one token per call
    cache = step.begin(enc, capacity=3)  # grows as needed
    got = []
    for t in range(T):
        got.append(step(cache, prev[:, t : t + 1], torch.tensor([t]))[0])
        cache.advance(1)
    torch.testing.assert_close(torch.cat(got, 1), ref, atol=1e-5, rtol=0)
    # chunks of 4 (causal inside a chunk)
    cache = step.begin(enc, capacity=T)
    got = []
    for s in range(0, T, 4):
        chunk = prev[:, s : s + 4]
        got.append(step(cache, chunk, torch.arange(s, s + chunk.size(1)))[0])
        cache.advance(chunk.size(1))
    torch.testing.assert_close(torch.cat(got, 1), ref, atol=1e-5, rtol=0)
    # rows at different lengths (written at each row's own length, masked past it)
    cache = step.begin(enc, capacity=T)
    step(cache, prev[:, :5], torch.arange(5))
    cache.commit(torch.tensor([2, 5, 3]), 5, aligned=False)  # keep 2, 5 and 3 of the 5 entries
    starts = torch.tensor([2, 5, 3])
    slots = starts.unsqueeze(1) + torch.arange(4)
    logits, features = step(cache, prev.gather(1, slots), slots)
    for b in range(3):
        torch.testing.assert_close(logits[b], ref[b, starts[b] : starts[b] + 4], atol=1e-5, rtol=0)
    assert features.shape == (3, 4, model.decoder.embed_dim)


@torch.no_grad()
def test_rows_leave_and_the_rest_continue(tmp_path):
    model = plain_transformer(tmp_path, [])
    src, lengths, prev = _inputs(n=4)
    ref, _ = model(src, lengths, prev)
    step = DecoderStep(model.decoder)
    cache = step.begin(model.encoder(src, src_lengths=lengths), capacity=16)
    step(cache, prev[:, :6], torch.arange(6))
    cache.advance(6)
    keep = torch.tensor([3, 1])
    cache.select_rows(keep)
    got, _ = step(cache, prev[keep, 6:9], torch.arange(6, 9))
    torch.testing.assert_close(got, ref[keep, 6:9], atol=1e-5, rtol=0)


@torch.no_grad()
def test_beam_reorder_moves_every_layers_entries(tmp_path):
    """KVCache.reorder and growth: row r goes on from row rows[r]'s prefix in every layer, with its
    sentence's encoder states (2 beams per sentence, group=2)."""
    model = plain_transformer(tmp_path, [])
    src, lengths, prev = _inputs(n=2, tgt_len=9)
    beams = torch.randint(4, 40, (4, 9), generator=torch.Generator().manual_seed(3))
    beams[:, 0] = 2
    step = DecoderStep(model.decoder)
    cache = step.begin(model.encoder(src, src_lengths=lengths), capacity=4, group=2)  # grows at the next call
    step(cache, beams[:, :6], torch.arange(6))
    cache.advance(6)
    rows = torch.tensor([1, 1, 3, 2])  # within each sentence, as a beam step reorders
    cache.reorder(rows)
    got, _ = step(cache, beams[:, 6:9], torch.arange(6, 9))
    sent = torch.tensor([0, 0, 1, 1])
    full = torch.cat([beams[rows, :6], beams[:, 6:9]], 1)
    ref, _ = model(src[sent], lengths[sent], full)
    torch.testing.assert_close(got, ref[:, 6:9], atol=1e-5, rtol=0)


def test_unsupported_decoders_are_refused(tmp_path):
    from fairseq_plugins.decoding.step import UnsupportedDecoderError

    with pytest.raises(UnsupportedDecoderError, match="cross-self-attention"):
        DecoderStep(plain_transformer(tmp_path, ["--cross-self-attention"]).decoder)


@torch.no_grad()
def test_engine_breaks_exact_ties_as_fairseq_greedy(tmp_path):
    """Two tokens with the same output embedding get bit-identical log-probs at every step: fairseq's
    greedy picks one of them with topk over lprobs + running score; the engine must pick the same."""
    from argparse import Namespace

    from fairseq.sequence_generator import SequenceGenerator

    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    task, model, _ = build(tmp_path / "a", "l2r", None, 1, arch="transformer", seed=4)
    out = model.decoder.output_projection.weight
    out[5:40:2] = out[4:40:2].clone()  # tokens 4 & 5, 6 & 7, ...: exact ties everywhere
    out[2] *= 0.2  # EOS rarely wins: long outputs, many ties
    src, lengths, _ = _inputs(n=6, src_len=9, seed=3)
    sample = {"id": torch.arange(6), "net_input": {"src_tokens": src, "src_lengths": lengths}}
    ref = SequenceGenerator([model], task.target_dictionary, beam_size=1, max_len_b=20).generate([model], sample)
    # input_copy at full width: its verify calls are scored column-wise (chunks) on a CPU
    for drafter in ("none", "jacobi_hgj", "input_copy"):
        task.cfg.drafter, task.cfg.block_size, task.cfg.adaptive_block_size = drafter, 3, "off"
        gen = task.build_generator([model], Namespace(beam=1, max_len_a=0.0, max_len_b=20, min_len=1, unkpen=0.0,
                                                      lenpen=1.0, unnormalized=False, temperature=1.0))
        hyps = gen.generate([model], sample)
        for r, h in zip(ref, hyps):
            assert h[0]["tokens"].tolist() == r[0]["tokens"].tolist()
    assert any(t % 2 == 1 and t >= 4 for r in ref for t in r[0]["tokens"].tolist())  # ties were decided
