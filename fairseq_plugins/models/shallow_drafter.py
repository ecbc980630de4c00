"""A cheap GAD drafter (docs/METHODS.md §3, "Shallow drafter"; our choice beyond GAD, whose
drafter is a full encoder-decoder of the verifier's size): ``--arch shallow_drafter_tiny``.

* No encoder of its own: it reads the *verifier's* encoder output.  Training holds a frozen copy
  of the verifier's encoder (``--verifier-path`` of ``--task nar_drafter``; eval mode, no gradient,
  not saved in the checkpoint); decoding reuses the output the engine's verifier computed for the
  batch.  The checkpoint stores a fingerprint of that encoder's weights, so decoding can refuse a
  drafter trained against another verifier (:func:`encoder_fingerprint`).
* 1-2 decoder layers of the verifier's width; token embeddings and output projection initialised
  from the verifier's (the [MASK] row fresh); optionally (``--draft-vocab N``) an output projection
  onto the N most frequent ids only, as the vocabulary projection dominates its cost on a CPU.
* The decoder input is GAD's ``[BOS, y_1..y_p, MASK x k]`` (``data.nar_drafter_batch``), but the
  prefix attends *causally* to itself (it never sees the masks), and the k mask slots attend to the
  prefix and to each other (bidirectionally): the prefix's keys/values do not depend on what
  follows, so decoding caches them across iterations and computes only the newly accepted tokens
  and the k slots (``decoding.drafters.shallow``).
"""
import hashlib
from argparse import Namespace
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import FairseqEncoder, FairseqEncoderDecoderModel, register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, base_architecture

from fairseq_plugins.models.nar_drafter import drafter_input, drafter_output


class ShallowDrafterError(ValueError):
    """The shallow drafter cannot be built or used this way; the message says how to fix it."""


@dataclass
class ShallowDrafterConfig(FairseqDataclass):
    decoder_layers: int = field(default=1, metadata={"help": "decoder layers (1-2: the drafter must be cheap)"})
    decoder_embed_dim: int = field(default=128, metadata={"help": "width: must be the verifier's"})
    decoder_ffn_embed_dim: int = field(default=512, metadata={"help": "feed-forward width"})
    decoder_attention_heads: int = field(default=4, metadata={"help": "attention heads"})
    dropout: float = field(default=0.1, metadata={"help": "dropout"})
    attention_dropout: float = field(default=0.0, metadata={"help": "attention dropout"})
    share_decoder_input_output_embed: bool = field(
        default=True, metadata={"help": "tie the drafter's token embeddings and output projection"})
    max_target_positions: int = field(default=1024, metadata={"help": "decoder positions"})
    draft_vocab: int = field(
        default=0, metadata={"help": "project onto the first N dictionary ids only (0: all): fairseq dictionaries list "
                             "symbols by frequency, so these are the N most frequent tokens; a rarer token is never "
                             "drafted (it costs a rejection, never a wrong output)"})


class VerifierEncoder(FairseqEncoder):
    """The verifier's encoder, frozen: always in eval mode, run without gradient, never saved
    (its weights are the verifier's; the drafter's checkpoint keeps only their fingerprint).
    Empty in a drafter loaded for decoding, where the engine's verifier provides the output."""

    def __init__(self, dictionary):
        super().__init__(dictionary)
        self.encoder = None
        self._register_state_dict_hook(_drop_encoder_keys)
        self._register_load_state_dict_pre_hook(self._keep_encoder_keys)

    def attach(self, encoder):
        for p in encoder.parameters():
            p.requires_grad_(False)
        self.encoder = encoder.eval()

    def train(self, mode=True):
        return super().train(False)  # the verifier's encoder output is what decoding will read: no dropout

    def forward(self, src_tokens, src_lengths=None, **unused):
        if self.encoder is None:
            raise ShallowDrafterError(
                "this shallow drafter has no encoder: it reads the verifier's encoder output, given at decoding by "
                "the engine (--drafter nar --drafter-path) and at training by --verifier-path VERIFIER.pt")
        with torch.no_grad():
            return self.encoder(src_tokens, src_lengths=src_lengths)

    def max_positions(self):
        return self.encoder.max_positions() if self.encoder is not None else int(1e5)

    def _keep_encoder_keys(self, state_dict, prefix, *unused):
        if self.encoder is not None:  # resuming a training: the attached verifier's weights stay
            for name, tensor in self.encoder.state_dict().items():
                state_dict.setdefault(prefix + "encoder." + name, tensor)


def _drop_encoder_keys(module, state_dict, prefix, local_metadata):
    for key in [k for k in state_dict if k.startswith(prefix + "encoder.")]:
        del state_dict[key]


def encoder_fingerprint(encoder) -> torch.Tensor:
    """``(2, 20)`` uint8: SHA-1 of the encoder's parameters (names, shapes, values) rounded to fp16
    and to bf16, so the same verifier matches after ``.half()`` / ``--bf16`` as well as in fp32."""
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        h = hashlib.sha1()
        for name, p in encoder.named_parameters():
            h.update(f"{name}{tuple(p.shape)}".encode())
            h.update(p.detach().to(device="cpu", dtype=dtype).view(torch.int16).numpy().tobytes())
        rows.append(torch.tensor(list(h.digest()), dtype=torch.uint8))
    return torch.stack(rows)


def fingerprint_matches(stored: torch.Tensor, encoder) -> bool:
    ours = encoder_fingerprint(encoder)
    stored = stored.to("cpu")
    return any(torch.equal(ours[i], stored[i]) for i in range(2))


class ShallowDrafterDecoder(TransformerDecoder):
    """fairseq's decoder over ``[BOS, prefix, MASK x k]`` (left-padded) in one pass, under the
    shallow drafter's mask: prefix causal, mask slots see everything (:func:`block_attention_mask`)."""

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                block=None, **unused):
        if incremental_state is not None or block is None:
            raise ShallowDrafterError("the shallow drafter's training forward needs block=k and no incremental "
                                      "state (decoding runs through decoding.drafters.shallow)")
        x = self.features(prev_output_tokens, encoder_out, block)[:, -block:]
        if not features_only:
            x = self.output_layer(x)
        return x, {"attn": [None], "inner_states": None}

    def output_layer(self, features):
        """Logits over the draft vocabulary: the first ``draft_vocab`` ids (all when 0)."""
        n = getattr(self, "draft_vocab", 0)
        return F.linear(features, self.output_projection.weight[:n]) if n else self.output_projection(features)

    def features(self, tokens, encoder_out, k):
        enc, enc_pad, x = drafter_input(self, tokens, encoder_out)
        heads = self.layers[0].self_attn.num_heads
        mask = block_attention_mask(tokens, k, self.padding_idx, x.dtype).repeat_interleave(heads, dim=0)
        for layer in self.layers:
            x, _, _ = layer(x, enc, enc_pad, None, self_attn_mask=mask)
        return drafter_output(self, x)


def block_attention_mask(tokens, k: int, pad: int, dtype=torch.float32):
    """Additive ``(B, T, T)`` self-attention mask of ``[PAD.., BOS, prefix, MASK x k]`` rows: a prefix
    column attends to the non-PAD columns up to itself (causal: its states can be cached), each of
    the last ``k`` columns to every non-PAD column (the block is bidirectional).  A PAD column
    attends to itself only, so no row of the mask is empty."""
    T = tokens.size(1)
    idx = torch.arange(T, device=tokens.device)
    allowed = (idx.view(1, T) <= idx.view(T, 1)) | (idx.view(T, 1) >= T - k)
    allowed = allowed.unsqueeze(0) & tokens.ne(pad).unsqueeze(1)
    allowed = allowed | torch.eye(T, dtype=torch.bool, device=tokens.device).unsqueeze(0)
    return torch.zeros(allowed.shape, dtype=dtype, device=tokens.device).masked_fill_(~allowed, float("-inf"))


@register_model("shallow_drafter", dataclass=ShallowDrafterConfig)
class ShallowDrafterModel(FairseqEncoderDecoderModel):
    """The cheap GAD drafter: the verifier's frozen encoder + 1-2 decoder layers (train with
    ``--task nar_drafter --verifier-path VERIFIER.pt``)."""

    is_nar_drafter = True  # fast_translation refuses it as --path (it is a --drafter-path)
    reads_verifier_encoder = True  # decoding.drafters.nar hands it to decoding.drafters.shallow

    def __init__(self, cfg, encoder, decoder):
        super().__init__(encoder, decoder)
        self.cfg = cfg
        self.register_buffer("verifier_fingerprint", torch.zeros(2, 20, dtype=torch.uint8))

    @classmethod
    def build_model(cls, cfg, task):
        default = ShallowDrafterConfig()  # a Namespace config (the legacy parser) may lack some fields
        args = Namespace(**{n: getattr(cfg, n, getattr(default, n)) for n in default.__dataclass_fields__ if n != "_name"})
        args.encoder_embed_dim = args.decoder_embed_dim  # the verifier's width (checked by attach_verifier)
        base_architecture(args)  # fairseq's defaults for the rest (post-norm, sinusoidal positions)
        tgt = task.target_dictionary
        embed = torch.nn.Embedding(len(tgt), args.decoder_embed_dim, tgt.pad())
        torch.nn.init.normal_(embed.weight, mean=0, std=args.decoder_embed_dim ** -0.5)
        torch.nn.init.constant_(embed.weight[tgt.pad()], 0)
        decoder = ShallowDrafterDecoder(args, tgt, embed)
        if not 0 <= args.draft_vocab <= len(tgt) or 0 < args.draft_vocab <= tgt.nspecial:
            raise ShallowDrafterError(f"--draft-vocab must be 0 (all) or in {tgt.nspecial + 1}..{len(tgt)}, the "
                                      f"dictionary's size with [MASK]; got {args.draft_vocab}")
        decoder.draft_vocab = args.draft_vocab  # our choice: the vocabulary projection dominates a drafter's cost
        return cls(cfg, VerifierEncoder(task.source_dictionary), decoder)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, block=None, features_only=False, **unused):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only, block=block)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        stored = state_dict.get("verifier_fingerprint")
        if self.encoder.encoder is not None and stored is not None and stored.any() and not torch.equal(
                stored.cpu(), self.verifier_fingerprint.cpu()):
            raise ShallowDrafterError(
                "this drafter checkpoint was trained against another verifier than --verifier-path; resume with "
                "the verifier it was trained with, or start a new drafter (--reset-optimizer does not help)")
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    def attach_verifier(self, verifier, initialise: bool):
        """Read ``verifier``'s encoder from now on (frozen) and record its fingerprint; with
        ``initialise``, start the token embeddings and output projection from the verifier's."""
        dim = verifier.encoder.embed_tokens.embedding_dim if hasattr(verifier.encoder, "embed_tokens") else None
        ddim = verifier.decoder.embed_tokens.embedding_dim
        if self.decoder.embed_dim != ddim or (dim is not None and dim != ddim):
            raise ShallowDrafterError(
                f"the shallow drafter is as wide as its verifier: give --decoder-embed-dim {ddim} (and an "
                f"--decoder-attention-heads that divides it); got {self.decoder.embed_dim}")
        self.encoder.attach(verifier.encoder)
        self.verifier_fingerprint.copy_(encoder_fingerprint(verifier.encoder))
        if initialise:
            ours = self.decoder
            with torch.no_grad():
                n = verifier.decoder.embed_tokens.weight.size(0)  # the [MASK] row (index n) keeps its init
                ours.embed_tokens.weight[:n].copy_(verifier.decoder.embed_tokens.weight)
                if not ours.share_input_output_embed:
                    ours.output_projection.weight[:n].copy_(verifier.decoder.output_projection.weight)


@register_model_architecture("shallow_drafter", "shallow_drafter_tiny")
def shallow_drafter_tiny(args):
    """For the CPU demo's verifier (transformer_fast_tiny, d=128): 1 layer, 4 heads, ffn 512
    (one layer: at batch 1 on a CPU one layer costs about a third of a plain engine step)."""
    args.decoder_layers = getattr(args, "decoder_layers", 1)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 512)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)


@register_model_architecture("shallow_drafter", "shallow_drafter_base")
def shallow_drafter_base(args):
    """For a transformer-base verifier (d=512): 2 layers, 8 heads, ffn 2048."""
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 2048)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 8)
