"""What a model decodes through in the beam searches (the lean beam search, the multi-token beam
search): its encoder pass and its lean decoder step, made once per model, and the self-attention
cache a batch starts with."""
from fairseq_plugins.decoding.beam_rows import INITIAL_CACHE_COLUMNS
from fairseq_plugins.decoding.cache import KVCache
from fairseq_plugins.decoding.encoder import Encoder
from fairseq_plugins.decoding.step import DecoderStep


class ModelParts:
    """A model's encoder pass and lean decoder step, kept across batches (their first batch lays out,
    and on a CPU packs, every weight: ~5 ms for a 3+3-layer d=128 model, more than a whole sentence
    at batch 1; later batches only check the weights' fingerprints, ``projection.WeightCheck``).
    Raises ``step.UnsupportedDecoderError`` for a decoder the lean step cannot run."""

    def __init__(self, model):
        self.model, self.encoder, self.step = model, Encoder(model.encoder, model), DecoderStep(model.decoder, model)

    def begin(self, net_input, capacity: int, group: int, granule: int = 1) -> KVCache:
        """The encoder pass over ``net_input`` (once per sentence) and a cache for ``group`` rows per
        sentence sharing its keys/values; the self-attention buffers start at ``INITIAL_CACHE_COLUMNS``
        columns (rounded up to ``granule``, a step's slots), or ``capacity`` if fewer, and double."""
        start = -(-INITIAL_CACHE_COLUMNS // granule) * granule
        return self.step.begin(self.encoder(net_input), min(capacity, start), group=group)
