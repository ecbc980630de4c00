"""The verifier: a stock fairseq encoder-decoder model that scores "each row's cached prefix + m new
tokens" in ONE call of the lean decoder step (``step.DecoderStep``): the last accepted token and
the draft, at each row's own logical positions, causal inside the new tokens.

Nothing of fairseq is patched and no weight is copied; any checkpoint of fairseq's transformer
family works as is (blockwise-head models too: their decoder is the base model's).
"""
from typing import Optional

from torch import Tensor

from fairseq_plugins.decoding.cache import KVCache
from fairseq_plugins.decoding.encoder import Encoder
from fairseq_plugins.decoding.step import DecoderStep, UnsupportedDecoderError
from fairseq_plugins.errors import PluginError


class UnsupportedVerifierError(PluginError, ValueError):
    """The model cannot be used as a draft-and-verify verifier; the message says why."""


class Verifier:
    def __init__(self, model):
        decoder = getattr(model, "decoder", None)
        needed = ("layers", "embed_tokens", "embed_positions", "output_layer")
        if decoder is None or not all(hasattr(decoder, n) for n in needed) or not hasattr(model, "encoder"):
            raise UnsupportedVerifierError(
                f"--drafter needs an encoder-decoder model of fairseq's transformer family as verifier; got "
                f"{type(model).__name__}. Decode it without --drafter.")
        try:
            self.step = DecoderStep(decoder, model)
        except UnsupportedDecoderError as err:
            raise UnsupportedVerifierError(f"--drafter: {err}") from None
        self.model = model
        self.encoder = Encoder(model.encoder, model)  # the lean pass where it is fairseq's encoder (decoding.encoder)
        self.encoder_out = None  # the current batch's encoder output (begin)

    def max_source_positions(self) -> Optional[int]:
        enc = self.model.encoder
        return enc.max_positions() if hasattr(enc, "max_positions") else None

    def begin(self, net_input, capacity: int) -> KVCache:
        """Run the encoder once for the batch; a fresh cache with its keys/values projected."""
        encoder_out = self.encoder(net_input)
        self.encoder_out = encoder_out  # the batch's, for a drafter that reads it (DraftContext.encoder_out)
        return self.step.begin(encoder_out, capacity)

    def __call__(self, cache: KVCache, tokens: Tensor, slots: Tensor, project: Optional[slice] = slice(None)):
        """``(logits (B, m, V), hidden (B, m, d))`` for ``tokens`` at ``slots`` after each row's cache;
        their keys/values are written at the rows' lengths (the engine commits what it accepts).
        ``project=None``: no logits (``project(hidden[:, a:b])`` gives them column range by range)."""
        return self.step(cache, tokens, slots, project=project)

    def project(self, hidden: Tensor) -> Tensor:
        """Logits of hidden states from ``__call__``: the decoder's output projection."""
        return self.step.output_layer(hidden)

    log_probs = staticmethod(DecoderStep.log_probs)
