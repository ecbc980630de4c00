"""The NAR drafter of Generalized Aggressive Decoding (Xia et al., §3.2.1, Fig. 3):
``--arch nar_drafter_{tiny,base,big}``.

A transformer encoder-decoder whose decoder reads the target prefix ``y_1..y_p`` followed by ``k``
[MASK] tokens with *bidirectional* self-attention (no causal mask) and predicts
``y_{p+1}..y_{p+k}`` in one pass (layout: ``fairseq_plugins.data.nar_drafter_batch``).  Everything
else is fairseq's transformer: the same sub-modules, sizes and checkpoint format, so the encoder
(and embeddings) can be initialised from the verifier (``--init-encoder-from`` of the task).

``forward(..., block=k)`` returns the logits of the last ``k`` decoder positions only (the mask
slots), so neither training nor decoding projects the prefix onto the vocabulary.
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerModel, base_architecture
from fairseq.models.transformer.transformer_legacy import transformer_vaswani_wmt_en_de_big


def drafter_input(decoder, tokens, encoder_out, added=None):
    """A drafter decoder's input: the encoder states and padding mask, and the embedded tokens
    (token, position counted from the first non-pad token, layer norm, dropout) as ``(T, B, C)``;
    ``added`` ``(B, T, C)``: an input added to the token embeddings (the shallow drafter's verifier features)."""
    enc = encoder_out["encoder_out"][0] if encoder_out and len(encoder_out["encoder_out"]) else None
    enc_pad = (encoder_out["encoder_padding_mask"][0]
               if encoder_out and len(encoder_out["encoder_padding_mask"]) else None)
    x = decoder.embed_scale * decoder.embed_tokens(tokens)
    if getattr(decoder, "quant_noise", None) is not None:
        x = decoder.quant_noise(x)
    if decoder.project_in_dim is not None:
        x = decoder.project_in_dim(x)
    if added is not None:
        x = x + added
    if decoder.embed_positions is not None:
        x = x + decoder.embed_positions(tokens)  # counted from the first non-pad token (left padding)
    if decoder.layernorm_embedding is not None:
        x = decoder.layernorm_embedding(x)
    return enc, enc_pad, decoder.dropout_module(x).transpose(0, 1)


def drafter_output(decoder, x):
    """The last layer's ``(T, B, C)`` states -> ``(B, T, C)`` features (final layer norm, projection out)."""
    if decoder.layer_norm is not None:
        x = decoder.layer_norm(x)
    x = x.transpose(0, 1)
    if decoder.project_out_dim is not None:
        x = decoder.project_out_dim(x)
    return x


class NARDrafterDecoder(TransformerDecoder):
    """fairseq's decoder run over the whole input at once without the causal mask (§3.2.1).

    ``features`` is the training forward; decoding runs the same weights through the lean decoder
    step (``decoding.drafters.nar``), tested against this forward."""

    def features(self, tokens, encoder_out):
        enc, enc_pad, x = drafter_input(self, tokens, encoder_out)
        pad_mask = tokens.eq(self.padding_idx)  # PAD keys masked; no future mask: bidirectional
        for layer in self.layers:
            x, _, _ = layer(x, enc, enc_pad, None, self_attn_mask=None, self_attn_padding_mask=pad_mask)
        return drafter_output(self, x)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                full_context_alignment=True, alignment_layer=None, alignment_heads=None, src_lengths=None,
                return_all_hiddens=False, block=None):
        if incremental_state is not None:
            raise ValueError("the NAR drafter has no incremental decoding: it reads prefix + masks in one pass")
        x = self.features(prev_output_tokens, encoder_out)
        if block is not None:
            x = x[:, -block:]
        if not features_only:
            x = self.output_layer(x)
        return x, {"attn": [None], "inner_states": None}


@register_model("nar_drafter")
class NARDrafterModel(TransformerModel):
    """GAD's NAR drafter: prefix + k [MASK] -> the next k tokens (train with ``--task nar_drafter``)."""

    is_nar_drafter = True  # fast_translation refuses it as --path (it is a --drafter-path)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return NARDrafterDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=getattr(args, "no_cross_attention", False))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, block=None, return_all_hiddens=False,
                features_only=False, **kwargs):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only, block=block)


@register_model_architecture("nar_drafter", "nar_drafter_tiny")
def nar_drafter_tiny(args):
    """CPU demo size, as transformer_fast_tiny: d=128, 3+3 layers, 4 heads, ffn 512, shared embeddings."""
    from fairseq_plugins.models.architectures import transformer_fast_tiny

    transformer_fast_tiny(args)


@register_model_architecture("nar_drafter", "nar_drafter_base")
def nar_drafter_base(args):
    """Transformer base (GAD §4.2.1, drafter = verifier architecture): d=512, 6+6 layers, 8 heads, ffn 2048."""
    base_architecture(args)


@register_model_architecture("nar_drafter", "nar_drafter_big")
def nar_drafter_big(args):
    """Transformer big (GAD Table 8/9): d=1024, 6+6 layers, 16 heads, ffn 4096, dropout 0.3."""
    transformer_vaswani_wmt_en_de_big(args)
