"""Linear products ``x W^T (+ b)`` with ``W`` laid out for the product on its device, and on a CPU
the kernel picked by timing it: the output projection onto the vocabulary (the verifier's, a
drafter's onto its draft vocabulary) and the lean step's layer products.

* Everywhere, the plain kernel: for the vocabulary projections ``x @ W^T`` from ``W^T`` kept
  contiguous (``x @ W^T`` read in the stored layout is a transposed GEMV, 2.3x slower on a CPU for
  the largest matrix of a small model, d=128 V=8K); for the layers fairseq's own ``F.linear``.
* On a CPU in fp32 where oneDNN is available, a second kernel: oneDNN's linear on a weight packed once
  (``torch.ops.mkldnn._reorder_linear_weight``, the path torch's own inductor takes on a CPU).  MKL's
  GEMM on a few rows reads W again for about every row, the packed product reads it once: at d=128
  onto 8K ids, 104 us instead of 278 for the 10 columns of a verification call; for one row it is
  no faster (58 vs 55 us; 11 vs 3 us for a 384x128 layer product).  oneDNN builds and caches a
  kernel per shape (0.15-0.6 ms here), so its rows are padded (:func:`padded_rows`).  Which is faster depends on the
  CPU, the shape and the rows, so it is measured, not assumed: the first product of each bucket of
  row counts (1, 2-3, 4-7, ...) times both and the bucket keeps the faster (:class:`KernelChoice`).
  GPUs and half precision use the plain product.
"""
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

REPEATS = 5  # timed runs of each kernel when a bucket is first met (the fastest run counts)
EXACT_ROWS = 16  # up to this many rows oneDNN's kernel is built for the exact count: a verification call's columns
STEPS_PER_OCTAVE = 8  # above, 8 padded row counts per doubling (at most 12.5% of the rows wasted)


def padded_rows(rows: int) -> int:
    """The row count oneDNN's packed product runs ``rows`` rows as (our choice): exact up to
    ``EXACT_ROWS``, then rounded up to one of ``STEPS_PER_OCTAVE`` evenly spaced counts per doubling.  oneDNN
    builds a kernel per new shape (0.15-0.6 ms), and a drafter catching its cache up, or a batch of
    32 rows with drafts, meets a new row count at almost every call, so the count of shapes must stay
    bounded (16 + 8 per doubling); padding to the power of two itself wasted up to half the product:
    the 11 columns of a width-10 call onto 8K ids cost 142 us as 16 rows, 104 us as 11."""
    if rows <= EXACT_ROWS:
        return rows
    step = (1 << (rows - 1).bit_length()) // (2 * STEPS_PER_OCTAVE)  # (top / 2, top] in 8 steps
    return -(-rows // step) * step


def packing_available() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
                    and torch.ops.mkldnn._reorder_linear_weight is not None
                    and torch.ops.mkldnn._linear_pointwise is not None)
    except (AttributeError, RuntimeError):  # a torch build without these operators
        return False


def identity(t: Tensor):
    """What changes when a weight is replaced, moved, cast or updated in place through the tensor
    itself (an inference tensor, made under ``torch.inference_mode``, has no version counter: its
    storage stands for it).  Not an update through ``p.data`` (fairseq's optimizers: ``p.data`` is
    another tensor with its own counter): :func:`fingerprint` sees that."""
    return t.data_ptr(), (-1 if t.is_inference() else t._version), t.dtype, t.device


_RAMPS: Dict[tuple, Tensor] = {}  # (length, device) -> the weights of fingerprint's sum


def fingerprint(t: Tensor) -> Tensor:
    """A 0-d float32 tensor (on ``t``'s device, not read) that changes when the values of ``t``
    change, however they were changed: the sums of its rows (its last dimension) weighted by a ramp
    over the rows (1 to 2), so that rows swapped change it too.  One read of ``t`` (for every weight
    the shipped d=128 baseline's products copy, one CPU thread: 0.43 ms; a plain sum 0.27, a ramp
    over every value 0.75).  It misses a change that keeps every row's sum to float32 precision (two values
    of one row swapped); an optimizer's step, a reload or any update of whole rows moves it."""
    t = t.detach()
    rows = t.sum(dim=-1, dtype=torch.float32).reshape(-1) if t.dim() > 1 else t.float().reshape(-1)
    key = (rows.numel(), rows.device)
    ramp = _RAMPS.get(key)
    if ramp is None:
        ramp = _RAMPS[key] = torch.linspace(1.0, 2.0, rows.numel(), device=rows.device)
    return torch.dot(rows, ramp)


_PICKS: Dict[tuple, bool] = {}  # (the product's shape and kind, bucket) -> the second kernel: one per process


class KernelChoice:
    """Per bucket of row counts, the faster of two kernels computing the same product, measured on
    the bucket's first input (host timing: CPU kernels only, which run synchronously).  The picks are
    shared by every product of the same ``kind`` in the process (the same layer shape in every model
    and generator): timed once, and two generators compared side by side use the same kernels."""

    def __init__(self, kind: tuple = ()):
        self.kind = kind
        self.picks: Dict[int, bool] = {}  # bucket -> use the second kernel (this product's view of _PICKS)

    def __call__(self, rows: int, x: Tensor, first: Callable[[Tensor], Tensor], second: Callable[[Tensor], Tensor]):
        """The kernel to use for ``rows`` rows (``x``: an input of that many, timed when its bucket is new)."""
        bucket = rows.bit_length()
        pick = self.picks.get(bucket)
        if pick is None and self.kind:
            pick = _PICKS.get(self.kind + (bucket,))
        if pick is None:
            times = [float("inf"), float("inf")]
            for _ in range(REPEATS + 1):  # the first round warms both up; interleaved
                for i, kernel in enumerate((first, second)):
                    t = time.perf_counter()
                    kernel(x)
                    times[i] = min(times[i], time.perf_counter() - t)
            pick = times[1] < times[0]
            if self.kind:
                _PICKS[self.kind + (bucket,)] = pick
        self.picks[bucket] = pick
        return second if pick else first


class Warmup:
    """How many products so far met a bucket of row counts or a padded row count for the first time (a
    kernel timed, oneDNN building its kernel for the shape: 0.15-0.6 ms each).  The engine leaves the iterations in
    which this grew out of the costs it learns (``iteration_cost``): they say nothing about the next ones."""

    events = 0


class Product:
    """``proj(x)`` = ``x W[:N]^T + b`` for hidden states ``(..., d)``; ``weight_of``/``bias_of`` are
    read at :meth:`refresh` (once per batch: the model may have moved or changed), ``rows_of``: the
    rows of W used (0: all; a drafter's ``--draft-vocab``)."""

    def __init__(self, weight_of: Callable[[], Tensor], bias_of: Callable[[], Optional[Tensor]] = lambda: None,
                 rows_of: Callable[[], int] = lambda: 0, transposed: bool = False):
        self._weight_of, self._bias_of, self._rows_of = weight_of, bias_of, rows_of
        self._transposed = transposed  # plain kernel x @ W^T from a contiguous copy (else F.linear)
        self._w: Optional[Tensor] = None
        self._t: Optional[Tensor] = None
        self._wt: Optional[Tensor] = None  # W^T as a view (no copy): the addmm F.linear makes of a 2-D input
        self._b: Optional[Tensor] = None
        self._packed: Optional[Tensor] = None
        self._choice: Optional[KernelChoice] = None
        self._kernels: Dict[int, Callable[[Tensor], Tensor]] = {}  # rows -> the kernel kept for them
        self._shapes: set = set()  # padded row counts the packed kernel has run (oneDNN built a kernel for each)
        self._key = None
        self._content: Optional[Sequence[float]] = None  # the fingerprints the copies were last checked against

    def tensors(self) -> List[Tensor]:
        """The tensors this product copies (what :class:`WeightCheck` fingerprints)."""
        return [t for t in (self._weight_of(), self._bias_of()) if t is not None]

    def refresh(self, content: Optional[Sequence[float]] = None):
        """Lay out the weights again if they were replaced, moved, cast or updated in place
        (``identity``) or, given their ``content`` (:class:`WeightCheck`: fingerprints of
        :meth:`tensors`), if that differs from the last seen."""
        if content is None:
            content = self._content
        self._content = content
        w, b = self._weight_of(), self._bias_of()
        n = self._rows_of() or w.size(0)
        key = (identity(w), n, None if b is None else identity(b), tuple(content or ()))
        if key == self._key:
            return
        w = w[:n].detach()
        self._w, self._b = w, None if b is None else b[:n].detach()
        self._t = w.t().contiguous() if self._transposed else None
        self._wt = w.t()
        self._packed, self._choice, self._kernels, self._shapes = None, None, {}, set()
        if w.device.type == "cpu" and w.dtype == torch.float32 and packing_available():
            # no rows hint: a hint of 1 packs for GEMV, 1.7x slower at 2-10 rows
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous())
            self._choice = KernelChoice(kind=(tuple(w.shape), b is not None, self._transposed))
        self._key = key

    def _plain(self, x: Tensor) -> Tensor:
        if self._t is not None:
            return x @ self._t
        if x.dim() == 2:  # what F.linear runs for a 2-D input, without its dispatch and views (same result, bitwise)
            return torch.mm(x, self._wt) if self._b is None else torch.addmm(self._b, x, self._wt)
        return F.linear(x, self._w, self._b)

    def _packed_product(self, x: Tensor) -> Tensor:
        """oneDNN's product with the rows padded (:func:`padded_rows`)."""
        d = x.size(-1)
        rows = x.numel() // d
        top = padded_rows(rows)
        flat = x.reshape(rows, d)
        if top != rows:
            flat = F.pad(flat, (0, 0, 0, top - rows))
        y = torch.ops.mkldnn._linear_pointwise(flat, self._packed, self._b, "none", [], "")
        return y[:rows].view(*x.shape[:-1], y.size(-1))

    def __call__(self, x: Tensor) -> Tensor:
        if self._w is None:
            self.refresh()
        if self._choice is None or x.dtype != torch.float32 or x.device.type != "cpu":
            return self._plain(x)
        rows = x.numel() // max(x.size(-1), 1)
        kernel = self._kernels.get(rows)
        if kernel is None:
            if rows == 0:
                return self._plain(x)
            bucket_known = rows.bit_length() in self._choice.picks
            kernel = self._kernels[rows] = self._choice(rows, x, self._plain, self._packed_product)
            shape = padded_rows(rows) if kernel == self._packed_product else None
            if not bucket_known or (shape is not None and shape not in self._shapes):  # timed, or a kernel built
                Warmup.events += 1
            if shape is not None:
                self._shapes.add(shape)
        return kernel(x)


class StackedQKV(Product):
    """A fairseq attention's q/k/v projections stacked into one product (one GEMM instead of three);
    :meth:`refresh` re-stacks them when any of the six tensors was replaced, moved, cast or updated."""

    def __init__(self, attn):
        self._attn, self._stack_key, self._stacked = attn, None, (None, None)
        super().__init__(lambda: self._stacked[0], lambda: self._stacked[1])

    def _parts(self):
        sa = self._attn
        return (sa.q_proj.weight, sa.k_proj.weight, sa.v_proj.weight, sa.q_proj.bias, sa.k_proj.bias, sa.v_proj.bias)

    def tensors(self) -> List[Tensor]:
        return list(self._parts())

    def refresh(self, content: Optional[Sequence[float]] = None):
        parts = self._parts()
        key = tuple(identity(t) for t in parts) + (tuple(content or self._content or ()),)
        if key != self._stack_key:
            self._stacked = (torch.cat([t.detach() for t in parts[:3]], 0), torch.cat([t.detach() for t in parts[3:]], 0))
            self._stack_key = key
        super().refresh(content)


def trainable(model) -> Callable[[], bool]:
    """Whether ``model`` can still be trained, asked at each batch: fairseq's ``make_generation_fast_``
    (called by ``prepare_for_inference_``) replaces the model's ``train`` with one that refuses; a
    generator built without its model (None) always checks."""
    return lambda: model is None or "train" not in vars(model)


class WeightCheck:
    """Once per batch, whether the weights a group of products copied changed in content since
    (:func:`fingerprint`, all of them read in one host read: one synchronisation on a GPU, where
    the device is idle at a batch's start): each product whose fingerprints moved lays its weights
    out again.  Weights updated through ``p.data`` (fairseq's optimizers, so ``--eval-bleu`` during
    training) keep their tensor's version counter, so :func:`identity` alone decoded with the copies
    of the old weights.  Checking costs less than laying out, not nothing: on the shipped d=128
    baseline, one CPU thread, the fingerprints take 0.6 ms a batch, laying every product out again
    15 ms; at batch 1 a sentence took 10.5 ms instead of 9.0 greedy (``--drafter input_copy``) and
    16.9 instead of 15.9 at beam 4 (60 valid sentences, the faster of 5 interleaved runs each).
    A NaN weight never equals its last fingerprint: such a product is laid out at every batch.

    The fingerprints are read only while the model can still be trained (``checks_content``, from
    :func:`trainable`): a model fairseq prepared for inference (fairseq-generate, fairseq-interactive
    and the benchmark call ``prepare_for_inference_``) refuses ``train()``, so no optimizer updates it,
    and its copies follow a move or a reload (:func:`identity`) without the per-batch read."""

    def __init__(self, products: Sequence["Product"], checks_content: Callable[[], bool] = lambda: True):
        self.products = [p for p in products if p is not None]
        self.checks_content = checks_content

    def refresh(self):
        if not self.checks_content():
            for p in self.products:
                p.refresh()
            return
        groups = [p.tensors() for p in self.products]
        flat = [t for g in groups for t in g]
        if not flat:
            return
        prints = torch.stack([fingerprint(t) for t in flat]).tolist()  # the one host read
        at = 0
        for p, g in zip(self.products, groups):
            p.refresh(prints[at : at + len(g)])
            at += len(g)


class VocabProjection:
    """A fairseq decoder's output projection onto its vocabulary (its first ``rows_of()`` ids: a
    drafter's ``--draft-vocab``) as a :class:`Product`; fairseq's own ``output_layer`` where it is
    not a plain bias-free linear layer (adaptive softmax, a custom layer)."""

    def __init__(self, decoder, rows_of: Callable[[], int] = lambda: 0, checks_content: Callable[[], bool] = lambda: True):
        self.decoder = decoder
        proj = getattr(decoder, "output_projection", None)
        plain = isinstance(proj, torch.nn.Linear) and proj.bias is None
        self.product = Product(lambda: proj.weight, rows_of=rows_of, transposed=True) if plain else None
        self.check = WeightCheck([self.product], checks_content)

    def refresh(self):
        """Once per batch (the weight may have moved or changed since the last: :class:`WeightCheck`)."""
        self.check.refresh()

    def __call__(self, x: Tensor) -> Tensor:
        return self.decoder.output_layer(x) if self.product is None else self.product(x)
