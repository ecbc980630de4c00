"""The lean encoder pass (decoding/encoder.py) gives fairseq's encoder output (atol 1e-5, fp32) for
post-norm and pre-norm layers, sinusoidal and learned positions and --layernorm-embedding, at batch
1 and on a left-padded batch; an encoder that is not fairseq's runs through fairseq's own pass; and a
weight changed after the pass was built is seen at the next batch."""
import pytest
import torch

from _reorder_utils import LAYOUTS, plain_transformer
from fairseq_plugins.decoding.encoder import lean_encoder

VARIANTS = {**LAYOUTS, "layernorm embedding": ["--layernorm-embedding"]}


def _sources(n=3, src_len=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (n, src_len), generator=g)
    src[0, :3] = 1  # a left-padded source, as fairseq batches them
    src[:, -1] = 2
    return src


def _assert_same(got, ref, padded):
    real = ~padded.t().unsqueeze(-1)  # (S, B, 1): fairseq's padded positions hold values no one reads
    torch.testing.assert_close(got["encoder_out"][0] * real, ref["encoder_out"][0] * real, atol=1e-5, rtol=0)
    for key in ("encoder_padding_mask", "encoder_embedding", "src_lengths"):
        torch.testing.assert_close(got[key][0], ref[key][0], atol=1e-6, rtol=0)
    assert got["encoder_out"][0].shape == ref["encoder_out"][0].shape


@pytest.mark.parametrize("flags", list(VARIANTS.values()), ids=list(VARIANTS))
@torch.no_grad()
def test_lean_encoder_gives_fairseq_encoder_output(tmp_path, flags):
    model = plain_transformer(tmp_path, flags)
    lean = lean_encoder(model.encoder)
    assert lean is not None
    src = _sources()
    lengths = src.ne(1).sum(1)
    _assert_same(lean(src), model.encoder(src, src_lengths=lengths), src.eq(1))
    one = src[1:2]  # batch 1: no padding, no mask
    _assert_same(lean(one), model.encoder(one, src_lengths=lengths[1:2]), one.eq(1))


@torch.no_grad()
def test_lean_encoder_sees_weights_changed_after_it_was_built(tmp_path):
    model = plain_transformer(tmp_path, [])
    lean = lean_encoder(model.encoder)
    src = _sources()
    before = lean(src)["encoder_out"][0].clone()
    layer = model.encoder.layers[0]
    layer.self_attn.k_proj.weight.mul_(1.5)  # in place (its version counter moves)
    layer.fc1.weight = torch.nn.Parameter(layer.fc1.weight * 0.5)  # replaced
    ref = model.encoder(src, src_lengths=src.ne(1).sum(1))
    got = lean(src)
    assert not torch.allclose(got["encoder_out"][0], before)
    _assert_same(got, ref, src.eq(1))


def test_an_encoder_that_is_not_fairseqs_runs_through_fairseq(tmp_path):
    model = plain_transformer(tmp_path, [])

    class Custom(type(model.encoder)):
        def forward(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None):
            return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)

    model.encoder.__class__ = Custom
    assert lean_encoder(model.encoder) is None
    assert lean_encoder(torch.nn.Linear(2, 2)) is None
