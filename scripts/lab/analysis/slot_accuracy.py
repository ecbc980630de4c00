"""Per-slot accuracy of a multi-token decoder under teacher forcing (issue "reordered models at
convergence", item 3): which of the z slots of a decoding step the model predicts well.

A step of an order with h directions and c tokens per direction fills z = h*c slots (docs/METHODS.md
§1).  If one slot lags -- the right-to-left slot of head-tail, the second token of an SA pair, the
first group whose inputs are all start symbols -- the quality gap lives there.  The model reads the
gold reordered target (the training forward, ``model.eval()``, no dropout) and its argmax at every
slot is compared with the target, grouped three ways:

* ``by_slot[j]``: slot j of its step (0..z-1);
* ``by_direction[d]``: the direction of the slot (``GenerationOrder.directions_at``; 0 = left-to-right);
* ``first_step`` / ``later_steps``: the first group (start symbols only) against the rest.

End markers (EOS padding of the reordered target) count like tokens, as the criterion scores them.
``sentences=N`` reads only the first N sentences of the split (by id, as the corpus lists them): a
sample of a large split, such as how well a model fits its own training sentences.

``hide_later_slots=True`` (orders with c > 1 words per direction a step, IBDecoder+SA): the first word
of each direction in a step no longer sees the inputs of the step's later slots.  Under M(h,c) (Eq. 4,
inputs shifted by z) the word just before the first one is such an input, so the drop in the first
slots' accuracy is how much they use it.  Only the first slots' rates measure that: the later slots keep
their mask but read the first slots' states, which change.
"""
from collections import defaultdict
from contextlib import contextmanager
from typing import Dict, Optional

import torch

from fairseq_plugins.orders import get_order


def _rates(hits: Dict, totals: Dict) -> Dict:
    return {k: hits[k] / totals[k] for k in sorted(totals) if totals[k]}


def later_slot_keys(order, length: int) -> torch.Tensor:
    """Boolean ``(length, length)``: query slot i may not see key slot j, where both are of one step, i holds
    the first word of its direction (no earlier slot of the step has its direction: the order says which
    slot is which, ``directions_at``) and j a later word."""
    t = torch.arange(length, device="cpu")
    step = torch.div(t, order.z, rounding_mode="floor")
    direction = order.directions_at(t)
    same_step = step[:, None] == step[None, :]
    first = ~(same_step & (direction[:, None] == direction[None, :]) & (t[None, :] < t[:, None])).any(dim=1)
    return same_step & first[:, None] & ~first[None, :]


@contextmanager
def later_slots_hidden(model):
    """Within the block: ``model``'s training forward uses M(h,c) with :func:`later_slot_keys` masked out."""
    order = getattr(model, "generation_order", None)
    if order is None or order.c < 2:
        raise ValueError("hiding a step's later slots needs an order with more than one word per direction a step "
                         "(IBDecoder+SA, --tokens-per-direction 2); with one, every slot is its direction's first word")
    decoder = model.decoder
    full = decoder.buffered_future_mask

    def masked(tensor):
        mask = full(tensor)
        return mask.masked_fill(later_slot_keys(order, mask.size(0)).to(mask.device), float("-inf"))

    decoder.buffered_future_mask = masked
    try:
        yield
    finally:
        del decoder.buffered_future_mask  # the class's method again


@torch.no_grad()
def slot_accuracy(task, model, subset: str = "valid", max_tokens: int = 4096, sentences: Optional[int] = None,
                  hide_later_slots: bool = False) -> Dict:
    """Teacher-forced accuracy of ``model`` on ``subset`` of ``task`` (a ``fast_translation`` task set
    up with the model's order flags, so its batches carry the reordered target); ``sentences``: only
    the first that many of the split, by id; ``hide_later_slots``: see the module's docstring."""
    if sentences is not None and sentences < 1:
        raise ValueError(f"sentences must be at least 1 (got {sentences}); leave it out to read the whole split")
    if hide_later_slots:
        with later_slots_hidden(model):
            return slot_accuracy(task, model, subset, max_tokens, sentences)
    order = getattr(model, "generation_order", None) or get_order("l2r")
    if task.datasets.get(subset) is None:
        task.load_dataset(subset)
    model.eval()
    pad = task.target_dictionary.pad()
    itr = task.get_batch_iterator(dataset=task.dataset(subset), max_tokens=max_tokens,
                                  max_positions=None, ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    hits, totals = defaultdict(lambda: defaultdict(int)), defaultdict(lambda: defaultdict(int))
    device = next(model.parameters()).device
    for sample in itr:
        rows = slice(None)
        if sentences is not None:
            rows = sample["id"].lt(sentences)
            if not rows.any():
                continue  # batches are grouped by length, so the first N sentences are spread over them
        net_input = {k: v[rows].to(device) if torch.is_tensor(v) else v for k, v in sample["net_input"].items()}
        target = sample["target"][rows].to(device)
        logits = model(**net_input)[0]
        right = logits.argmax(dim=-1).eq(target)
        valid = target.ne(pad)
        slots = torch.arange(target.size(1), device=device)
        groups = {"by_slot": slots % order.z, "by_direction": order.directions_at(slots),
                  "step": (slots >= order.z).long()}  # 0: the first step
        for name, key in groups.items():
            for value in key.unique().tolist():
                cols = key.eq(value)
                hits[name][value] += int((right & valid)[:, cols].sum())
                totals[name][value] += int(valid[:, cols].sum())
    step = _rates(hits["step"], totals["step"])
    return {"order": order.signature if not order.is_plain_l2r else "l2r", "z": order.z,
            "accuracy": sum(hits["by_slot"].values()) / max(1, sum(totals["by_slot"].values())),
            "by_slot": _rates(hits["by_slot"], totals["by_slot"]),
            "by_direction": _rates(hits["by_direction"], totals["by_direction"]),
            "first_step": step.get(0), "later_steps": step.get(1)}


def checkpoint_slot_accuracy(path, data_bin, subset: str = "valid", cpu: bool = True, sentences: Optional[int] = None,
                             hide_later_slots: bool = False):
    """(updates or None, :func:`slot_accuracy`) of the fairseq checkpoint at ``path`` on ``data_bin``'s
    ``subset`` (its first ``sentences``, or all), the task set up from the checkpoint's own config (its
    order flags); ``cpu=False``: on the GPU when there is one."""
    from fairseq import checkpoint_utils  # the plugin's tasks and models are registered: this package is imported

    overrides = {"data": str(data_bin)}
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path), overrides)  # read once: the model and its updates
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], overrides, state=state)
    model = models[0].float()
    if not cpu and torch.cuda.is_available():
        model = model.cuda()
    history = state.get("optimizer_history") or [{}]
    return history[-1].get("num_updates"), slot_accuracy(task, model, subset, sentences=sentences,
                                                         hide_later_slots=hide_later_slots)

