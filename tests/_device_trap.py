"""A CPU stand-in for "the model is on a GPU": catch every tensor created without an explicit
device, and every op that mixes tensors of two devices, at the line that does it.

``device_trap()`` sets PyTorch's default device to ``meta`` (``with torch.device("meta")``), so
a factory call that forgets ``device=`` (``torch.zeros(3)``, ``torch.arange(n)``,
``torch.tensor(list)``) makes a meta tensor, while the model and its inputs live on the CPU; on a
GPU the same line would make a CPU tensor beside CUDA ones.  A small dispatch mode
(:class:`DeviceTrap`) then fails

* any op whose output is on ``meta`` (a tensor created on the default device), and
* any op that reads tensors of two devices, except 0-dim CPU tensors (CUDA kernels accept those
  as scalars too).

Deliberate host-side tensors say ``device="cpu"`` and pass.  fairseq's own modules (its encoder,
its sinusoidal table builder, its criteria's helpers) run in a *shielded* scope
(:func:`shielded`): the default device is the one of the module's inputs, as fairseq expects of a
model that ``.cuda()`` moved; the mixing check stays on there.
"""
import contextlib
import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class DeviceMixError(RuntimeError):
    """A tensor was created without a device, or an op mixed devices (the traceback shows where)."""


def _devices(tree):
    found = set()
    for t in tree_leaves(tree):
        if isinstance(t, torch.Tensor) and not (t.device.type == "cpu" and t.dim() == 0):
            found.add(t.device)
    return found


class DeviceTrap(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _devices((args, kwargs))
        if len(inputs) > 1:
            raise DeviceMixError(f"{func} mixes tensors on {sorted(map(str, inputs))}")
        out = func(*args, **kwargs)
        if any(t.device.type == "meta" for t in tree_leaves(out) if isinstance(t, torch.Tensor)):
            raise DeviceMixError(f"{func} made a tensor on the default device (meta): pass device=")
        return out


def _device_of(args, kwargs, default):
    for t in tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            return t.device
        if isinstance(t, torch.nn.Module):
            p = next(t.parameters(), None)
            if p is not None:
                return p.device
    return default


def shielded(fn, device=None):
    """``fn`` run with the default device of its tensors/module (or ``device``): for fairseq's own code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.device(device or _device_of(args, kwargs, "cpu")):
            return fn(*args, **kwargs)

    return wrapper


def _fairseq_shields():
    """(owner, attribute, device) of fairseq's functions that make tensors on the default device."""
    from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
    from fairseq.modules import MultiheadAttention, SinusoidalPositionalEmbedding

    return [(TransformerEncoderBase, "forward", None), (MultiheadAttention, "forward", None),
            (TransformerDecoderBase, "buffered_future_mask", None),
            (SinusoidalPositionalEmbedding, "get_embedding", "cpu")]


@contextlib.contextmanager
def device_trap(shield=()):
    """Run the body with default device ``meta`` under :class:`DeviceTrap`; fairseq's encoder and
    sinusoidal table (and any ``(owner, attribute, device)`` in ``shield``) run shielded."""
    patches = list(_fairseq_shields()) + list(shield)
    saved = []
    try:
        for owner, name, device in patches:
            raw = owner.__dict__[name]
            saved.append((owner, name, raw))
            if isinstance(raw, staticmethod):
                setattr(owner, name, staticmethod(shielded(raw.__func__, device)))
            else:
                setattr(owner, name, shielded(raw, device))
        with torch.device("meta"), DeviceTrap():
            yield
    finally:
        for owner, name, raw in reversed(saved):
            setattr(owner, name, raw)
