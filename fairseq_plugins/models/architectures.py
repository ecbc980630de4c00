"""Transformer sizes used by the configs: the papers' base/big (fairseq's own) and a tiny CPU demo one.

``transformer_fast_tiny`` is sized so the demo trains in minutes on 2 CPU cores (d=128, 3+3 layers);
it is a plain fairseq ``transformer``, so fairseq's greedy/beam and CTranslate2 load it unchanged.
"""
from fairseq.models import register_model_architecture
from fairseq.models.transformer import base_architecture


@register_model_architecture("transformer", "transformer_fast_tiny")
def transformer_fast_tiny(args):
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 128)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 512)
    args.encoder_layers = getattr(args, "encoder_layers", 3)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 512)
    args.decoder_layers = getattr(args, "decoder_layers", 3)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", True)
    args.dropout = getattr(args, "dropout", 0.1)
    base_architecture(args)
