"""Row bookkeeping shared by the plugin's beam searches (``lean_beam``: fairseq's beam search;
``multi_token_beam``: IBDecoder / DOUBLETOPK), docs/METHODS.md §2.

* Live hypotheses sit in preallocated buffers, ``beam`` consecutive rows per live sentence; a step
  reorders the columns used so far in place (:func:`reorder_prefix`), and rows of finished
  sentences leave with one ``index_select`` (:func:`live_sentences`).
* Finalised hypotheses live on the device: ``beam`` slots per sentence plus one trash slot that the
  masked writes of a step go to (:func:`finalising_slots`, :func:`slot_rows`).
* A step reads the host once (:func:`read_step`): which sentences are done, and whether any
  hypothesis finalises (the write is skipped when none does).
"""
from typing import Tuple

import torch
from torch import Tensor

# the first columns of the self-attention cache; it doubles when a hypothesis outgrows it
# (preallocating max_len + 1 columns would cost more memory than fairseq's growing cache)
INITIAL_CACHE_COLUMNS = 32


def reorder_prefix(buffer: Tensor, rows: Tensor, used: int):
    """Row i of the first ``used`` columns of ``buffer`` continues row ``rows[i]``, in place."""
    if used > 0:
        buffer[:, :used] = buffer[:, :used].index_select(0, rows)


def finalising_slots(count: Tensor, ending: Tensor, beam: int):
    """fairseq's cap of ``beam`` finalised hypotheses per sentence: of the candidates ``ending``
    ``(n, k)`` (in rank order), those that still find a slot.  -> (write, slot, new_count)."""
    slot = count.unsqueeze(1) + ending.long().cumsum(1) - 1
    write = ending & slot.lt(beam)
    return write, slot, count + write.long().sum(1)


def slot_rows(sent: Tensor, write: Tensor, slot: Tensor, beam: int) -> Tensor:
    """Rows of the finalised store ``(bsz * (beam + 1), ...)`` that the candidates go to: their slot
    of their sentence ``sent`` where they ``write``, the sentence's trash slot elsewhere."""
    return (sent.unsqueeze(1) * (beam + 1) + torch.where(write, slot, torch.full_like(slot, beam))).view(-1)


def read_step(done: Tensor, *conditions: Tensor) -> Tuple:
    """The one host read of a beam step: which live sentences are done, and for each of
    ``conditions`` (e.g. which hypotheses finalise) whether any element holds.
    -> ``(done flags, any of the first condition, ...)``."""
    flags = torch.cat([done] + [c.any().view(1) for c in conditions]).tolist()
    n = done.numel()
    return (flags[:n],) + tuple(bool(f) for f in flags[n:])


def live_sentences(done: Tensor, live: int) -> Tensor:
    """Positions of the ``live`` (host-known count) sentences that are not ``done``, in order, from
    the device's ``done`` (no copy from the host)."""
    return torch.argsort(done.to(torch.uint8), stable=True)[:live]
