"""``--arch reordered_transformer_*``: fairseq's transformer with a decoder for a generation order.

The decoder is fairseq's ``TransformerDecoder`` -- its training forward runs unchanged -- with two
parts swapped where the papers say:

* ``embed_positions``: an ``OrderEmbedding`` of the order's positions (``fairseq_plugins.orders``)
  with a sinusoid that accepts negative values (IBDecoder Eq. 7) or a learned table (Imamura &
  Sumita 3.1), IMDecoder's direction embedding (Eq. 10) and a start-slot embedding;
* ``buffered_future_mask``: the self-attention mask M(h,c) of Eq. 4 (with the order's ablations)
  instead of the causal mask.

Decoding (z new slots per call, KV cache) goes through the plugin's lean decoder step
(``fairseq_plugins.decoding.step``), which embeds slots with ``OrderEmbedding.embed_slots``; the
multi-token beam search drives it.

The model records its order in its args (``target_order_signature``), so a checkpoint decoded
with another order is refused by ``FastTranslationTask`` (clear error).
"""
import math

import torch
import torch.nn as nn
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerModel, base_architecture
from fairseq.models.transformer.transformer_legacy import transformer_vaswani_wmt_en_de_big

from fairseq_plugins.orders import get_order, order_from_config
from fairseq_plugins.errors import PluginError


def signed_sinusoid(positions, dim):
    """fairseq's sinusoidal table (sin half, then cos half), computed directly for any integer
    position, negative ones included (IBDecoder Eq. 7 keeps the locality bias per direction)."""
    half = dim // 2
    scale = math.log(10000) / (half - 1)
    inv_freq = torch.exp(torch.arange(half, device=positions.device, dtype=torch.float) * -scale)
    angles = positions.float().unsqueeze(-1) * inv_freq
    emb = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    if dim % 2:
        emb = torch.nn.functional.pad(emb, (0, 1))
    return emb


#: 2: distinct start slots and token-scale direction embeddings (checkpoints of format 1 are refused)
FORMAT_VERSION = 2


class ReorderedCheckpointError(PluginError, ValueError):
    """A checkpoint this version of the plugin cannot decode correctly; the message says what to do."""


class OrderEmbedding(nn.Module):
    """What a decoder slot adds to its token embedding: position, direction and start-slot
    embeddings, all a function of the slot index alone (so training and decoding compute them
    the same way, from ``slots``).

    * positions: signed sinusoid (IBDecoder Eq. 7) or a learned table (Imamura & Sumita 3.1,
      fairseq's learned-position init);
    * directions (IMDecoder Eq. 10): a learned table at the token embeddings' scale (init as
      fairseq's token embeddings, times ``embed_scale``): at fairseq's positional scale (norm ~1
      vs ~sqrt(d) for a token) the h directions of a step are barely distinguishable and the
      model duplicates tokens across them;
    * start slots: the z decoder inputs of the first step are all EOS (fairseq's start symbol), so
      a learned start-slot embedding at the token scale is added to slots 0..z-1.  This is the
      same as giving every start slot its own start symbol -- Imamura & Sumita start the left
      direction with BOS and the right with EOS -- generalised to any z (SA c>1, IMDecoder h=4,
      IBDecoder+SA need z = 4 distinct starts; a stock dictionary has two spare symbols).  With
      identical starts the slots of the first group differ only by small position embeddings,
      and SA / multi-segment models learn to duplicate the first group (docs/METHODS.md §1).
    """

    def __init__(self, order, dim, max_target_positions, embed_scale=1.0):
        super().__init__()
        self.order, self.dim, self.embed_scale = order, dim, float(embed_scale)
        self.max_slots = max_target_positions + order.z  # end markers pad the target by < z slots
        self.learned = None
        if order.position_embedding == "learned":
            self.learned = nn.Embedding(self.max_slots, dim)
            nn.init.normal_(self.learned.weight, mean=0, std=dim ** -0.5)
        self.direction = None
        if order.direction_embedding:
            self.direction = nn.Embedding(order.h, dim)
            nn.init.normal_(self.direction.weight, mean=0, std=dim ** -0.5)
        self.start = None
        if order.z > 1:
            self.start = nn.Embedding(order.z, dim)
            nn.init.normal_(self.start.weight, mean=0, std=dim ** -0.5)
        self.register_buffer("format_version", torch.tensor(FORMAT_VERSION))

    def forward(self, prev_output_tokens, incremental_state=None, positions=None):
        """fairseq's ``embed_positions`` interface (training forward): the embeddings of slots
        0..T-1, ``(1, T, dim)``, added to the token embeddings of every row."""
        slots = torch.arange(prev_output_tokens.size(1), device=prev_output_tokens.device)
        return self.embed_slots(slots).unsqueeze(0)

    def embed_slots(self, slots, like=None):
        """``slots``: 0-based slot indices (any shape) -> embeddings ``slots.shape + (dim,)``."""
        positions = self.order.positions_at(slots)
        if self.learned is not None:  # slots < max_slots: the generator caps its length by max_positions()
            emb = self.learned(positions)
        else:
            emb = signed_sinusoid(positions, self.dim)
        if self.direction is not None:
            emb = emb + self.embed_scale * self.direction(self.order.directions_at(slots))
        if self.start is not None:
            first = (slots < self.order.z).unsqueeze(-1)
            emb = emb + torch.where(first, self.embed_scale * self.start(slots.clamp(max=self.order.z - 1)), 0.0)
        return emb if like is None else emb.to(like)


class ReorderedTransformerDecoder(TransformerDecoder):
    """TransformerDecoder for a generation order: the order's slot embeddings and the M(h,c) mask."""

    def __init__(self, args, dictionary, embed_tokens, order, no_encoder_attn=False):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.order = order
        self.embed_positions = OrderEmbedding(order, self.embed_dim, self.max_target_positions, self.embed_scale)
        self._mask_cache = {}

    def max_positions(self):
        return self.max_target_positions

    def buffered_future_mask(self, tensor):
        """M(h,c) of Eq. 4 (float 0/-inf, ``(T, T)``) where fairseq's training forward asks for its causal mask."""
        T = tensor.size(0)
        key = (T, tensor.device, tensor.dtype)
        if key not in self._mask_cache:
            self._mask_cache = {key: self.order.mask(T).to(device=tensor.device, dtype=tensor.dtype)}
        return self._mask_cache[key]

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        if incremental_state is not None and self.order.z > 1:
            raise NotImplementedError(
                "fairseq's incremental decoding feeds one token per call; a reordered model decodes z slots per "
                "step with the plugin's multi-token beam search (fairseq-generate --task fast_translation)")
        return super().forward(prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state,
                                **kwargs)

    def upgrade_state_dict_named(self, state_dict, name):
        """Refuse checkpoints of an older format: decoding them with this code would be silently wrong."""
        key = f"{name}.embed_positions.format_version" if name else "embed_positions.format_version"
        version = int(state_dict[key]) if key in state_dict else 1
        if version != FORMAT_VERSION:
            raise ReorderedCheckpointError(
                f"this reordered_transformer checkpoint has format {version}, but this plugin decodes format "
                f"{FORMAT_VERSION} (format 2 gave every start slot of a step its own learned embedding and the "
                "direction embeddings the token scale; older models duplicate tokens across slots). Retrain it "
                "with the same fairseq-train command; a trained L2R model can be a warm start (--init-from-l2r).")
        return super().upgrade_state_dict_named(state_dict, name)


@register_model("reordered_transformer")
class ReorderedTransformerModel(TransformerModel):
    """Transformer trained and decoded in a generation order (``--target-order`` of the task)."""

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.generation_order = decoder.order

    @classmethod
    def build_model(cls, args, task):
        order = order_from_config(args) or get_order("l2r")
        args.target_order_signature = order.signature  # read back by orders.order_signature_of_model
        return super().build_model(args, task)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        order = order_from_config(args) or get_order("l2r")
        return ReorderedTransformerDecoder(args, tgt_dict, embed_tokens, order,
                                           no_encoder_attn=getattr(args, "no_cross_attention", False))



@register_model_architecture("reordered_transformer", "reordered_transformer_tiny")
def reordered_transformer_tiny(args):
    """CPU demo size, as transformer_fast_tiny: d=128, 3+3 layers, 4 heads, ffn 512, shared embeddings."""
    from fairseq_plugins.models.architectures import transformer_fast_tiny

    transformer_fast_tiny(args)


@register_model_architecture("reordered_transformer", "reordered_transformer_base")
def reordered_transformer_base(args):
    """Transformer base (both papers): d=512, 6+6 layers, 8 heads, ffn 2048."""
    base_architecture(args)


@register_model_architecture("reordered_transformer", "reordered_transformer_big")
def reordered_transformer_big(args):
    """Transformer big (both papers): d=1024, 6+6 layers, 16 heads, ffn 4096, dropout 0.3."""
    transformer_vaswani_wmt_en_de_big(args)


def init_from_l2r(model, path):
    """Warm start (``--init-from-l2r PATH``): copy a trained left-to-right transformer's weights into
    a freshly built reordered model of the same size.  Encoder, token embeddings, decoder layers and
    output projection are taken over; the order's own position/direction/start-slot embeddings
    (``decoder.embed_positions``) stay freshly initialised, the L2R's positional table is not used."""
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(path)["model"]
    own = model.state_dict()
    fresh = {k for k in own if k.startswith("decoder.embed_positions.")}
    missing = sorted(k for k in own if k not in fresh and k not in state)
    wrong = sorted(k for k in own if k not in fresh and k in state and state[k].shape != own[k].shape)
    if missing or wrong:
        detail = "; ".join([f"missing {k}" for k in missing[:3]] +
                           [f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in wrong[:3]])
        raise ReorderedCheckpointError(
            f"--init-from-l2r {path}: that checkpoint does not match this model's size ({detail}); train the "
            "reordered model with the L2R model's --arch dimensions (e.g. transformer_fast_tiny -> "
            "reordered_transformer_tiny) or drop --init-from-l2r")
    model.load_state_dict({k: state[k] for k in own if k not in fresh} | {k: own[k] for k in fresh}, strict=True)
    loaded = model.state_dict()
    differ = [k for k in own if k not in fresh and not torch.equal(loaded[k], state[k].to(loaded[k].dtype))]
    if differ:  # a tied tensor took another key's value: the two models tie their embeddings differently
        raise ReorderedCheckpointError(
            f"--init-from-l2r {path}: the L2R model and this model share embeddings differently ({differ[0]}); use "
            "the same --share-all-embeddings / --share-decoder-input-output-embed as the L2R training")
    return model
