"""A drafter's output projection onto its draft vocabulary (the first ``N`` rows of the output
embedding, ``--draft-vocab N``): ``x @ W[:N]^T`` from a copy of the weight laid out for the
product, refreshed whenever the weight changes (dtype, device, in-place update).

* Everywhere: ``W[:N]^T`` contiguous, as ``step.VocabProjection`` (x @ W^T read in the stored
  layout is a slow transposed GEMV).
* On a CPU in fp32, where oneDNN is available: oneDNN's linear on a weight packed once
  (``torch.ops.mkldnn._reorder_linear_weight``, the path torch's own inductor takes on a CPU).
  For the 4-10 slots of a draft, MKL's GEMM reads W again for about every row (its time grows
  linearly with the rows); the packed product reads it once: 25 us instead of 41 us for 4 rows,
  36 instead of 76 for 10 (d=128, N=2,000, one thread, docs/RESULTS.md "Shallow GAD drafter").
  For one row it is slower (34 vs 12 us), so one row keeps the plain product.
"""
from typing import Optional

import torch
from torch import Tensor


def _packing_available() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
                    and torch.ops.mkldnn._reorder_linear_weight is not None
                    and torch.ops.mkldnn._linear_pointwise is not None)
    except (AttributeError, RuntimeError):  # a torch build without these operators
        return False


class DraftVocabProjection:
    """``proj(x)``: logits ``(..., N)`` of hidden states ``(..., d)`` over the first ``N`` ids."""

    def __init__(self, weight_of, rows_of):
        self._weight_of, self._rows_of = weight_of, rows_of  # read at refresh: the model may move or change
        self._t: Optional[Tensor] = None
        self._packed: Optional[Tensor] = None
        self._key = None

    def refresh(self, rows_hint: int):
        """Once per batch: re-derive the laid-out weights if the weight changed (``rows_hint``: the
        rows of a typical product, for the packing)."""
        w = self._weight_of()
        n = self._rows_of() or w.size(0)
        key = (w.data_ptr(), w._version, w.dtype, w.device, n)
        if key == self._key:
            return
        w = w[:n].detach()
        self._t = w.t().contiguous()
        self._packed = None
        if w.device.type == "cpu" and w.dtype == torch.float32 and _packing_available():
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), rows_hint)
        self._key = key

    def __call__(self, x: Tensor) -> Tensor:
        if self._packed is not None and x.numel() > x.size(-1):  # more than one row: the packed product
            return torch.ops.mkldnn._linear_pointwise(x, self._packed, None, "none", [], "")
        return x @ self._t
