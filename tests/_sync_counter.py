"""Count the calls that make a GPU host wait for the device (a "sync"), without a GPU.

:class:`SyncCounter` is a ``TorchFunctionMode`` that records, with the line of the plugin that made it,

* **sync**: a tensor read on the host (``tolist``, ``item``, ``bool()``/``int()``/``float()``/
  ``index()`` of a tensor), a data-dependent shape (``nonzero``, ``argwhere``, ``masked_select``,
  ``unique``, indexing with a boolean tensor) and a blocking device-to-host copy (``.cpu()``,
  ``.numpy()``, ``.to("cpu")``);
* **h2d**: a tensor built from Python data (``torch.tensor``/``as_tensor`` of lists or numbers)
  onto a device.  On a CPU the model's device and the host are one, so the convention is: a
  deliberate host-side tensor says ``device="cpu"`` (the string) and is not counted; one built
  with the model's device (``device=src.device``) is, as it is a blocking copy on a GPU.

Events are tagged with the innermost frame inside ``fairseq_plugins`` (file:line), so a test can
say which line of the plugin exceeded its budget; events from fairseq/torch internals called by
the plugin carry the plugin line that called them, prefixed ``via``.
"""
import collections
import os
import sys

import torch
from torch.overrides import TorchFunctionMode

_T = torch.Tensor
SYNC_METHODS = {_T.tolist, _T.item, _T.__bool__, _T.__int__, _T.__float__, _T.__index__, _T.nonzero,
                _T.numpy, _T.cpu, _T.masked_select, _T.unique, _T.argwhere}
SYNC_FUNCTIONS = {torch.nonzero, torch.argwhere, torch.masked_select, torch.unique}
FROM_DATA = {torch.tensor, torch.as_tensor}
PLUGIN = os.sep + "fairseq_plugins" + os.sep
TORCH = os.path.dirname(torch.__file__)


def _where():
    """``fairseq_plugins/...:line`` of the plugin line that made the call, prefixed ``via `` when the
    call itself was made by other code the plugin called (e.g. fairseq's encoder)."""
    f = sys._getframe(3)
    direct = True
    while f is not None:
        name = f.f_code.co_filename
        if PLUGIN in name:
            return ("" if direct else "via ") + f"{name[name.index(PLUGIN) + 1:]}:{f.f_lineno}"
        direct = direct and name.startswith(TORCH)  # torch's own Python wrappers are transparent
        f = f.f_back
    return "outside the plugin"


def _is_cpu_target(args, kwargs):
    for a in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(a, (str, torch.device)):
            return torch.device(a).type == "cpu"
    return False


def _bool_index(index):
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class SyncCounter(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.events = collections.Counter()  # (kind, what, where) -> count

    def _record(self, kind, what):
        self.events[(kind, what, _where())] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if func in SYNC_METHODS or func in SYNC_FUNCTIONS:
            self._record("sync", name)
        elif func is _T.to and _is_cpu_target(args, kwargs):
            self._record("sync", "to(cpu)")
        elif func in (_T.__getitem__, _T.__setitem__) and len(args) > 1 and _bool_index(args[1]):
            self._record("sync", "boolean index")
        elif func in FROM_DATA and args and not isinstance(args[0], torch.Tensor):
            device = kwargs.get("device")
            if device is not None and not (isinstance(device, str) and device == "cpu"):
                self._record("h2d", name)
        return func(*args, **kwargs)

    def count(self, kind):
        return sum(n for (k, _, _), n in self.events.items() if k == kind)

    def where(self, kind):
        """{'file:line what': count} of one kind, for assertion messages."""
        out = collections.Counter()
        for (k, what, at), n in self.events.items():
            if k == kind:
                out[f"{at} {what}"] += n
        return dict(out)
