"""What a decoding profile measures, and the instrumentation that measures it only while profiling.

:data:`POINTS` says what to measure: one line per component, ``(label, target, method)``.
``target`` is either an attribute path from a row's objects (:func:`roots_of`: ``model`` (the
first model), ``generator``, ``drafter`` and ``verifier`` (engine rows)), where ``[*]`` means every
element (``model.decoder.layers[*].self_attn``), or ``"module:Class"`` for every instance of a
class and its subclasses (objects made per batch, such as the KV cache or an acceptance rule).
A target object absent from a row (no drafter in fairseq's greedy) is skipped; a class, module or
method that does not exist is an error (:class:`ProfilePointError`), so that a rename cannot
silently drop a row of the profile.  Several lines may share a label (fairseq's and the engine's
version of the same part).  New components -- the lean decoder step, a drafter's model -- are one
line each.  :func:`instrumented` wraps them in ``torch.profiler.record_function``: a monkeypatch
that exists only inside it (nothing is added to normal runs) and is undone afterwards.
"""
import functools
import importlib
import re
from contextlib import contextmanager

# label, target, method: what to wrap in record_function(label) while profiling (see the docstring).
# The lean step's per-layer parts (_layer, _self_attention...) have no public name in decoding/step.py
# yet: check_points makes a rename there an error instead of a missing row.
POINTS = [
    ("encoder", "model.encoder", "forward"),            # fairseq's generators, and the lean pass's fallback
    ("encoder", "fairseq_plugins.decoding.encoder:EncoderPass", "__call__"),  # the lean pass: engine, beam
    ("decoder call", "model.decoder", "forward"),       # fairseq's generators
    ("decoder call", "fairseq_plugins.decoding.step:DecoderStep", "__call__"),  # the lean step: engine, beam
    ("encoder K/V projection", "fairseq_plugins.decoding.step:DecoderStep", "begin"),
    ("decoder layers", "model.decoder.layers[*]", "forward"),
    ("decoder layers", "fairseq_plugins.decoding.step:DecoderStep", "_layer"),
    ("self-attention", "model.decoder.layers[*].self_attn", "forward"),
    ("self-attention", "fairseq_plugins.decoding.step:DecoderStep", "_self_attention"),
    ("encoder attention", "model.decoder.layers[*].encoder_attn", "forward"),
    ("encoder attention", "fairseq_plugins.decoding.step:DecoderStep", "_encoder_attention"),
    ("feed-forward (fc1, fc2)", "fairseq_plugins.decoding.step:DecoderStep", "_feed_forward"),
    ("feed-forward (fc1, fc2)", "model.decoder.layers[*].fc1", "forward"),
    ("feed-forward (fc1, fc2)", "model.decoder.layers[*].fc2", "forward"),
    ("output projection", "model.decoder.output_projection", "forward"),
    ("log-softmax", "model", "get_normalized_probs"),   # fairseq's EnsembleModel.forward_decoder
    ("log-softmax", "verifier", "log_probs"),
    ("drafter.propose", "drafter", "propose"),
    ("drafter.observe", "drafter", "observe"),
    ("acceptance", "fairseq_plugins.decoding.acceptance:AcceptanceRule", "__call__"),
    ("cache.commit", "fairseq_plugins.decoding.cache:KVCache", "commit"),
    ("reorder / drop rows", "fairseq_plugins.decoding.cache:KVCache", "select_rows"),
    ("reorder / drop rows", "fairseq_plugins.decoding.cache:KVCache", "reorder"),
    ("reorder / drop rows", "model.encoder", "reorder_encoder_out"),
    ("reorder / drop rows", "model.decoder", "reorder_incremental_state_scripting"),
    ("reorder / drop rows", "drafter", "select_rows"),
]
# --engine-steps: the engine's named steps of an iteration (engine.py), around the components above
ENGINE_STEPS = [(f"engine: {name.strip('_').replace('_', ' ')}", "fairseq_plugins.decoding.engine:DraftVerifyGenerator", name)
                for name in ("_verify", "_append", "_observe", "_count_drafts", "_propose", "_sync", "_learn",
                             "_drop_finished", "_next_call")] + [
    ("scoring", "fairseq_plugins.decoding.scoring:ColumnScorer", "score"),  # the projection onto the vocabulary too
]


def _wrap(label, fn):
    import torch

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)

    return wrapped


def resolve(target, roots):
    """Objects named by ``target``: an attribute path from ``roots`` (``[*]``: every element), or
    ``"module:Class"`` -> that class and its subclasses (as classes).  Missing parts give []
    (:func:`check_points` tells a class that does not exist from a part a row does not have)."""
    if ":" in target:
        module, name = target.split(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return []
        found, todo = [], [cls]
        while todo:
            c = todo.pop()
            found.append(c)
            todo.extend(c.__subclasses__())
        return found
    objs = [roots]
    for part in re.findall(r"[^.\[\]]+|\[\*\]", target):
        nxt = []
        for obj in objs:
            if part == "[*]":
                nxt.extend(list(obj))
            elif isinstance(obj, dict):
                if obj.get(part) is not None:
                    nxt.append(obj[part])
            elif getattr(obj, part, None) is not None:
                nxt.append(getattr(obj, part))
        objs = nxt
    return objs


class ProfilePointError(RuntimeError):
    """A profile point names a class or method that does not exist (renamed?): fix :data:`POINTS`."""


def check_points(points):
    """Every class target exists and defines its method (itself or a subclass)."""
    for label, target, method in points:
        if ":" in target and not any(method in vars(cls) for cls in resolve(target, {})):
            raise ProfilePointError(f"profile point '{label}': {target} has no method {method}; update POINTS")


@contextmanager
def instrumented(points, roots):
    """Wrap every (label, target, method) of ``points`` found from ``roots``; undo on exit.
    Also wraps ``torch.Tensor.tolist`` (a host sync that is no aten op)."""
    import torch

    check_points(points)
    undo = []
    try:
        for label, target, method in points:
            for obj in resolve(target, roots):
                if isinstance(obj, type):
                    raw = obj.__dict__.get(method)  # only where the class itself defines it
                    if raw is None:
                        continue
                    if isinstance(raw, (staticmethod, classmethod)):
                        new = type(raw)(_wrap(label, raw.__func__))
                    else:
                        new = _wrap(label, raw)
                    setattr(obj, method, new)
                    undo.append(lambda o=obj, m=method, r=raw: setattr(o, m, r))
                else:
                    fn = getattr(obj, method, None)
                    if fn is None:
                        raise ProfilePointError(f"profile point '{label}': {target} ({type(obj).__name__}) has no "
                                                f"method {method}; update POINTS")
                    own = method in vars(obj)
                    setattr(obj, method, _wrap(label, fn))
                    undo.append((lambda o=obj, m=method, f=fn: setattr(o, m, f)) if own
                                else (lambda o=obj, m=method: delattr(o, m)))
        tolist = torch.Tensor.tolist
        torch.Tensor.tolist = _wrap("Tensor.tolist", tolist)
        undo.append(lambda: setattr(torch.Tensor, "tolist", tolist))
        yield
    finally:
        for fn in reversed(undo):
            fn()


def roots_of(runner):
    gen = runner.generator
    return {"model": runner.models[0], "generator": gen, "drafter": getattr(gen, "drafter", None),
            "verifier": getattr(gen, "verifier", None)}
