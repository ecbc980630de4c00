"""A cheap GAD drafter (docs/METHODS.md §3, "Shallow drafter"; our choice beyond GAD, whose
drafter is a full encoder-decoder of the verifier's size): ``--arch shallow_drafter_tiny``.

* No encoder of its own: it reads the *verifier's* encoder output.  Training holds a frozen copy
  of the verifier's encoder (``--verifier-path`` of ``--task nar_drafter``; eval mode, no gradient,
  not saved in the checkpoint); decoding reuses the output the engine's verifier computed for the
  batch.  The checkpoint stores a fingerprint of that encoder's weights, so decoding can refuse a
  drafter trained against another verifier (:func:`weights_fingerprint`).
* Optionally (``--verifier-features``; our choice beyond GAD, after EAGLE, Li et al. 2024) each
  prefix position ``j`` also reads the verifier decoder's last hidden state at ``j - 1`` through a
  learned ``W_f`` (:func:`teacher_forced_features` at training; the engine's verification calls at
  decoding); the checkpoint then also fingerprints the verifier's decoder.
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
from fairseq_plugins.errors import PluginError


class ShallowDrafterError(PluginError, ValueError):
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
    verifier_features: bool = field(
        default=False, metadata={"help": "add to each prefix position j's input W_f times the verifier decoder's last "
                                 "hidden state at j-1 (EAGLE, Li et al. 2024; W_f starts at zero): at training the "
                                 "frozen verifier's decoder runs teacher-forced over the prefix, at decoding the "
                                 "engine's verification calls give them; the drafter then cannot decode alone"})
    no_encoder_attention: bool = field(
        default=False, metadata={"help": "no encoder attention in the drafter's layers (needs --verifier-features, "
                                 "which then carry the source, as in EAGLE's drafter): 46 instead of 55 operations "
                                 "per drafting iteration (scripts/time_drafter_step.py --count-ops)"})


class VerifierEncoder(FairseqEncoder):
    """The verifier's encoder (and, with ``--verifier-features``, its decoder), frozen: always in
    eval mode, run without gradient, never saved (their weights are the verifier's; the drafter's
    checkpoint keeps only their fingerprints).  Empty in a drafter loaded for decoding, where the
    engine's verifier provides the encoder output and the hidden states."""

    def __init__(self, dictionary):
        super().__init__(dictionary)
        self.encoder = None
        self.decoder = None
        self._register_state_dict_hook(_drop_verifier_keys)
        self._register_load_state_dict_pre_hook(self._keep_verifier_keys)

    def attach(self, encoder, decoder=None):
        for module in (encoder, decoder):
            for p in module.parameters() if module is not None else ():
                p.requires_grad_(False)
        self.encoder = encoder.eval()
        self.decoder = decoder.eval() if decoder is not None else None

    def train(self, mode=True):
        return super().train(False)  # the verifier's outputs (encoder, hidden states) are what decoding reads: no dropout

    def forward(self, src_tokens, src_lengths=None, **unused):
        if self.encoder is None:
            raise ShallowDrafterError(
                "this shallow drafter has no encoder: it reads the verifier's encoder output, given at decoding by "
                "the engine (--drafter nar --drafter-path) and at training by --verifier-path VERIFIER.pt")
        with torch.no_grad():
            return self.encoder(src_tokens, src_lengths=src_lengths)

    def max_positions(self):
        return self.encoder.max_positions() if self.encoder is not None else int(1e5)

    def _keep_verifier_keys(self, state_dict, prefix, *unused):
        for part in VERIFIER_PARTS:  # resuming a training: the attached verifier's weights stay
            module = getattr(self, part)
            for name, tensor in (module.state_dict().items() if module is not None else ()):
                state_dict.setdefault(f"{prefix}{part}.{name}", tensor)


VERIFIER_PARTS = ("encoder", "decoder")  # the verifier's modules a VerifierEncoder may hold (never saved)


def _drop_verifier_keys(module, state_dict, prefix, local_metadata):
    for key in [k for k in state_dict if k.startswith(tuple(prefix + part + "." for part in VERIFIER_PARTS))]:
        del state_dict[key]


def weights_fingerprint(module) -> torch.Tensor:
    """``(2, 20)`` uint8: SHA-1 of the module's parameters (names, shapes, values) rounded to fp16
    and to bf16, so the same verifier matches after ``.half()`` / ``--bf16`` as well as in fp32."""
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        h = hashlib.sha1()
        for name, p in module.named_parameters():
            h.update(f"{name}{tuple(p.shape)}".encode())
            h.update(p.detach().to(device="cpu", dtype=dtype).view(torch.int16).numpy().tobytes())
        rows.append(torch.tensor(list(h.digest()), dtype=torch.uint8))
    return torch.stack(rows)


def fingerprint_matches(stored: torch.Tensor, module) -> bool:
    ours = weights_fingerprint(module)
    stored = stored.to("cpu")
    return any(torch.equal(ours[i], stored[i]) for i in range(2))


class ShallowDrafterDecoder(TransformerDecoder):
    """fairseq's decoder over ``[BOS, prefix, MASK x k]`` (left-padded) in one pass, under the
    shallow drafter's mask: prefix causal, mask slots see everything (:func:`block_attention_mask`).
    With ``--verifier-features``, ``W_f`` times the verifier's hidden states is added to the input
    embeddings (``verifier_features``: :func:`teacher_forced_features`' layout)."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=getattr(args, "no_encoder_attention", False))
        self.verifier_feature_proj = None  # W_f: d x d, no bias
        if getattr(args, "verifier_features", False):
            self.verifier_feature_proj = torch.nn.Linear(self.embed_dim, self.embed_dim, bias=False)
            # zero-initialised: a new drafter starts exactly as the plain one, features enter as W_f learns
            torch.nn.init.zeros_(self.verifier_feature_proj.weight)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                block=None, verifier_features=None, **unused):
        if incremental_state is not None or block is None:
            raise ShallowDrafterError("the shallow drafter's training forward needs block=k and no incremental "
                                      "state (decoding runs through decoding.drafters.shallow)")
        x = self.features(prev_output_tokens, encoder_out, block, verifier_features)[:, -block:]
        if not features_only:
            x = self.output_layer(x)
        return x, {"attn": [None], "inner_states": None}

    def output_layer(self, features):
        """Logits over the draft vocabulary: the first ``draft_vocab`` ids (all when 0)."""
        n = getattr(self, "draft_vocab", 0)
        return F.linear(features, self.output_projection.weight[:n]) if n else self.output_projection(features)

    def feature_input(self, verifier_features):
        """``W_f`` times the verifier's hidden states ``(B, T, d)``, added to the input embeddings; None
        without ``--verifier-features``."""
        if self.verifier_feature_proj is None:
            return None
        if verifier_features is None:
            raise ShallowDrafterError("this drafter reads the verifier's hidden states (--verifier-features): give "
                                      "them (training: --verifier-path VERIFIER.pt; decoding: the engine's verifier)")
        return F.linear(verifier_features, self.verifier_feature_proj.weight)

    def features(self, tokens, encoder_out, k, verifier_features=None):
        enc, enc_pad, x = drafter_input(self, tokens, encoder_out, added=self.feature_input(verifier_features))
        heads = self.layers[0].self_attn.num_heads
        mask = block_attention_mask(tokens, k, self.padding_idx, x.dtype).repeat_interleave(heads, dim=0)
        for layer in self.layers:
            x, _, _ = layer(x, enc, enc_pad, None, self_attn_mask=mask)
        return drafter_output(self, x)


def teacher_forced_features(verifier_decoder, tokens, encoder_out, block: int, pad: int) -> torch.Tensor:
    """The verifier decoder's last hidden states (before its output projection) as the drafter
    reads them, ``(B, T, d)`` for its input ``tokens`` ``[PAD.., BOS, y_1..y_p, MASK x k]`` ``(B, T)``:
    at the column of ``y_j`` the state at ``j - 1`` (BOS's for ``j = 1``), the one that predicted
    ``y_j`` (EAGLE, Li et al. 2024, pairs each token with the feature it was drafted from); zeros at
    PAD, BOS and the ``block`` mask slots (GAD's [MASK] inputs, unchanged: they read the features
    through attention to the prefix).  The verifier is causal: run (no gradient, eval mode) over
    the prefixes right-padded, each state is the one decoding computes."""
    B, T = tokens.shape
    width = T - block  # BOS + the longest prefix
    d = verifier_decoder.output_embed_dim
    if width <= 1:  # every row is BOS alone: no state is read
        return encoder_out["encoder_out"][0].new_zeros(B, T, d)
    cols = torch.arange(width, device=tokens.device).unsqueeze(0)
    n_pad = tokens[:, :width].eq(pad).long().sum(dim=1, keepdim=True)  # left padding
    src = cols + n_pad
    # right-padded [BOS, y_1 .. y_{p-1}]: no column reads the last token's state
    right = tokens.gather(1, src.clamp(max=width - 1)).masked_fill(src >= width, pad)[:, : width - 1]
    was_training = verifier_decoder.training
    verifier_decoder.eval()
    with torch.no_grad():
        hidden = verifier_decoder(right, encoder_out=encoder_out, features_only=True)[0]
    verifier_decoder.train(was_training)
    at = cols - n_pad - 1  # the state read by each column: its position in the row, minus one
    states = hidden.gather(1, at.clamp(min=0).unsqueeze(2).expand(-1, -1, d)).masked_fill((at < 0).unsqueeze(2), 0)
    return F.pad(states, (0, 0, 0, block))


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
        self.register_buffer("verifier_fingerprint", torch.zeros(2, 20, dtype=torch.uint8))  # of its encoder
        if self.reads_verifier_features:  # its hidden states are read too: its decoder's weights must match
            self.register_buffer("verifier_decoder_fingerprint", torch.zeros(2, 20, dtype=torch.uint8))

    @property
    def reads_verifier_features(self) -> bool:
        return self.decoder.verifier_feature_proj is not None

    def fingerprints(self):
        """``(buffer name, the verifier's module it fingerprints)`` of every fingerprint the drafter keeps."""
        names = [("verifier_fingerprint", "encoder")]
        return names + [("verifier_decoder_fingerprint", "decoder")] if self.reads_verifier_features else names

    @classmethod
    def build_model(cls, cfg, task):
        default = ShallowDrafterConfig()  # a Namespace config (the legacy parser) may lack some fields
        args = Namespace(**{n: getattr(cfg, n, getattr(default, n)) for n in default.__dataclass_fields__ if n != "_name"})
        args.encoder_embed_dim = args.decoder_embed_dim  # the verifier's width (checked by attach_verifier)
        base_architecture(args)  # fairseq's defaults for the rest (post-norm, sinusoidal positions)
        if args.no_encoder_attention and not args.verifier_features:
            raise ShallowDrafterError("--no-encoder-attention leaves the drafter blind to the source unless it reads "
                                      "the verifier's hidden states: add --verifier-features, or keep the encoder attention")
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
        states = self.verifier_states(prev_output_tokens, encoder_out, block) if block is not None else None
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only, block=block,
                            verifier_features=states)

    def verifier_states(self, prev_output_tokens, encoder_out, block: int):
        """The frozen verifier's hidden states the training forward reads (:func:`teacher_forced_features`),
        None without ``--verifier-features`` (nothing computed)."""
        if not self.reads_verifier_features:
            return None
        if self.encoder.decoder is None:
            raise ShallowDrafterError("a drafter with --verifier-features trains against the verifier's decoder: give "
                                      "it with --verifier-path VERIFIER.pt (decoding reads the engine's verifier)")
        return teacher_forced_features(self.encoder.decoder, prev_output_tokens, encoder_out, block,
                                       self.decoder.padding_idx)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        for name, _ in self.fingerprints():
            stored = state_dict.get(name)
            if self.encoder.encoder is not None and stored is not None and stored.any() and not torch.equal(
                    stored.cpu(), getattr(self, name).cpu()):
                raise ShallowDrafterError(
                    "this drafter checkpoint was trained against another verifier than --verifier-path; resume with "
                    "the verifier it was trained with, or start a new drafter (--reset-optimizer does not help)")
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    def attach_verifier(self, verifier, initialise: bool):
        """Read ``verifier``'s encoder (with ``--verifier-features`` also its decoder) from now on (frozen)
        and record their fingerprints; with ``initialise``, start the token embeddings and output
        projection from the verifier's."""
        dim = verifier.encoder.embed_tokens.embedding_dim if hasattr(verifier.encoder, "embed_tokens") else None
        ddim = verifier.decoder.embed_tokens.embedding_dim
        if self.decoder.embed_dim != ddim or (dim is not None and dim != ddim):
            raise ShallowDrafterError(
                f"the shallow drafter is as wide as its verifier: give --decoder-embed-dim {ddim} (and an "
                f"--decoder-attention-heads that divides it); got {self.decoder.embed_dim}")
        self.encoder.attach(verifier.encoder, verifier.decoder if self.reads_verifier_features else None)
        for name, part in self.fingerprints():
            getattr(self, name).copy_(weights_fingerprint(getattr(verifier, part)))
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
