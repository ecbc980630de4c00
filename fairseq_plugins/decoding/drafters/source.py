"""The source sentence as a drafter reads it (shared by the drafters that copy from it).

The engine gives a drafter fairseq's batch as it is (``DraftContext.src_tokens``): sources
left-padded (fairseq's default), each ending with EOS, in *source*-dictionary ids.  A drafter that
proposes source tokens as output tokens needs them in target-dictionary ids: one id map per run
(:func:`source_to_target_map`, None when both sides share one dictionary), applied per batch
(:func:`in_target_ids`).
"""
from typing import Optional

import torch
from torch import Tensor


def source_to_target_map(src_dict, tgt_dict) -> Optional[Tensor]:
    """None when both dictionaries are the same list of symbols, else an id map through strings
    (``<unk>`` where the target lacks a piece)."""
    if src_dict is tgt_dict or list(src_dict.symbols) == list(tgt_dict.symbols):
        return None
    # built on the host once; in_target_ids moves it to the sources' device
    return torch.tensor([tgt_dict.index(sym) for sym in src_dict.symbols], dtype=torch.long, device="cpu")


def in_target_ids(src_tokens: Tensor, pad: int, id_map: Optional[Tensor]) -> Tensor:
    """``src_tokens`` ``(B, S)`` in target-dictionary ids, PAD kept (``id_map``: :func:`source_to_target_map`'s)."""
    if id_map is None:
        return src_tokens
    id_map = id_map.to(src_tokens.device)
    return torch.where(src_tokens == pad, src_tokens, id_map[src_tokens])
