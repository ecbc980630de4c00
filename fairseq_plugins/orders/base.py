"""What every generation order shares: the layout in segments, end markers, restoring, the mask.

The layout is described by three numbers and one per-segment permutation: the natural target is
cut into ``S`` segments (1, or h/2 for multi_segment); every segment is permuted (identity,
reversed, folded ``y1 yL y2 yL-1 ...``, or the fold reversed for the middle-to-side ablation) and
padded with end markers; each decoding step takes ``w = z/S`` tokens from every segment in turn.
An order (one module of this package) gives the permutation, the positions and the directions.

End markers.  The end-of-decoding token EOD of both papers is the dictionary's EOS (``</s>``): no
symbol is added, so checkpoints and the joined dictionary stay those of stock fairseq, and the
decoder's start symbols are EOS too (fairseq's convention; IBDecoder footnote 3 shifts by z).
Every segment is padded with EOS up to ``m*w`` tokens, ``m = floor(L_min/w) + 1`` steps, L_min the
shortest segment: the first step holding an EOS is the last one, and every segment fits
(for S=1 the length is ceil((n+1)/z)*z; for h=2,c=1 that is Imamura's "one or two EODs").
Restoring cuts at the first step whose group holds an end marker; inside that group each
segment keeps only its tokens before its first end marker (the rest of the group is dropped).
The end marker's index is the dictionary's ``eos()``, which every caller passes.
"""
from functools import lru_cache

import torch

from fairseq_plugins.errors import PluginError

ABLATIONS = ("vanilla_mask", "vanilla_positions", "middle_to_side", "independent_directions")
ORDERS = {}  # name -> GenerationOrder subclass, in registration order (the task's --target-order choices)


class OrderError(PluginError, ValueError):
    """Inconsistent order options: the message says what is wrong and how to fix it."""


def register_order(cls):
    """Class decorator: ``cls.name`` becomes a ``--target-order`` choice."""
    if cls.name in ORDERS:
        raise OrderError(f"two generation orders are named {cls.name!r}: rename one")
    ORDERS[cls.name] = cls
    return cls


class GenerationOrder:
    """reorder / restore / positions / directions / mask (Eq. 4) of one generation order.

    A subclass is one order: its ``name``, its default number of directions, ``check_directions``,
    ``segment_permutation`` and ``natural_positions``; bidirectional orders derive from
    :class:`FoldedOrder`.  ``positions`` are the paper's values before any embedding offset;
    ``position_embedding`` says how the model embeds them: ``sinusoidal`` (signed allowed, Eq. 7) or
    ``learned`` (Imamura).  ``direction_embedding`` is True when the model adds a learned direction
    embedding (Eq. 10).
    """

    name = None
    default_directions = 1
    bidirectional = False
    position_embedding = "sinusoidal"
    direction_embedding = False

    def __init__(self, directions=None, tokens_per_direction=1, vanilla_mask=False,
                 vanilla_positions=False, middle_to_side=False, independent_directions=False):
        h = self.default_directions if not directions else int(directions)
        c = int(tokens_per_direction)
        if c < 1:
            raise OrderError(f"--tokens-per-direction must be >= 1 (got {c})")
        self.check_directions(h)
        if middle_to_side and not self.bidirectional:
            raise OrderError("--middle-to-side reverses a bidirectional order; use it with "
                             "--target-order interleave (IBDecoder Table 2 #4)")
        self.h, self.c, self.z = h, c, h * c
        self.vanilla_mask, self.vanilla_positions = bool(vanilla_mask), bool(vanilla_positions)
        self.middle_to_side, self.independent_directions = bool(middle_to_side), bool(independent_directions)
        self.segments = self.segment_count(h)
        self.width = self.z // self.segments  # tokens each segment contributes per step

    # ---- what an order says ----
    def check_directions(self, h):
        """Raise OrderError when the order cannot have ``h`` directions."""
        if h != 1:
            raise OrderError(f"--target-order {self.name} has one direction; drop --directions {h} "
                             "(or use --target-order multi_segment for several directions)")

    def segment_count(self, h):
        return 1

    def segment_permutation(self, length):
        """Natural indices of one segment in generation order."""
        raise NotImplementedError

    def natural_positions(self, t):
        """The order's own positions of 0-based slots ``t`` (Eq. 5: T_t = t-1 by default)."""
        return t

    # ---- identity ----
    @property
    def signature(self):
        """A string naming everything a trained model depends on (checked at decode time)."""
        flags = [a for a in ABLATIONS if getattr(self, a)]
        return f"{self.name}(h={self.h},c={self.c}{''.join(',' + f for f in flags)})"

    @property
    def is_plain_l2r(self):
        return self.signature == "l2r(h=1,c=1)"

    def __repr__(self):
        return f"GenerationOrder<{self.signature}>"

    # ---- layout ----
    def _segment_lengths(self, n):
        """IMDecoder's h/2 near-equal segments (Eq. 9); the first ones take the remainder."""
        s = self.segments
        return [n // s + (1 if i < n % s else 0) for i in range(s)]

    @lru_cache(maxsize=4096)
    def gather_index(self, n):
        """Generation-order layout for n natural tokens: a natural index per slot, -1 for EOS."""
        lengths = self._segment_lengths(n)
        steps = lengths[-1] // self.width + 1  # the shortest segment ends in the last step
        starts = [sum(lengths[:i]) for i in range(self.segments)]
        padded = []
        for start, length in zip(starts, lengths):
            seg = [start + i for i in self.segment_permutation(length)]
            padded.append(seg + [-1] * (steps * self.width - len(seg)))
        w = self.width
        return tuple(idx for k in range(steps) for seg in padded for idx in seg[k * w:(k + 1) * w])

    def positions(self, length, offset=0):
        """Positions of slots offset..offset+length-1 (0-based slot t, paper's t = slot+1)."""
        return self.positions_at(torch.arange(offset, offset + length, device="cpu"))

    def positions_at(self, t):
        """Positions of the 0-based slot indices ``t`` (any shape): a function of the slot alone."""
        return t if self.vanilla_positions else self.natural_positions(t)  # Table 2 #3: vanilla positions

    def directions(self, length, offset=0):
        """Direction id of every slot (Eq. 10, second part; 0 = left-to-right)."""
        return self.directions_at(torch.arange(offset, offset + length, device="cpu"))

    def directions_at(self, t):
        """Direction ids of the 0-based slot indices ``t`` (any shape)."""
        segment = torch.div(t % self.z, self.width, rounding_mode="floor")
        if not self.bidirectional:
            return segment
        return 2 * segment + (t % self.width) % 2  # the fold alternates L, R inside a segment

    def reorder(self, tokens, eos):
        """Natural target ids WITHOUT the final EOS -> (tokens, positions, directions), all in
        generation order, end markers included, length a multiple of z."""
        tokens = torch.as_tensor(tokens, dtype=torch.long, device="cpu")
        index = torch.tensor(self.gather_index(len(tokens)), dtype=torch.long, device="cpu")
        out = torch.full(index.shape, eos, dtype=torch.long, device="cpu")
        keep = index >= 0
        out[keep] = tokens[index[keep]]
        return out, self.positions(len(out)), self.directions(len(out))

    def kept_slots(self, generated, eos):
        """Slots of a generated sequence that survive restoring, as a list of slot indices."""
        generated = generated.tolist() if isinstance(generated, torch.Tensor) else list(generated)
        is_end = [tok == eos for tok in generated]
        final_step = None
        for slot, end in enumerate(is_end):
            if end:
                final_step = slot // self.z
                break
        kept = []
        for slot in range(len(generated)):
            step, seg_start = slot // self.z, slot - slot % self.width
            if final_step is not None and step > final_step:
                break
            if final_step is not None and step == final_step and any(is_end[seg_start:slot + 1]):
                continue  # at or after the segment's first end marker in the final group
            kept.append(slot)
        return kept

    def restore_index(self, generated, eos):
        """Slot indices of a generated sequence in natural order (end markers dropped)."""
        kept = self.kept_slots(generated, eos)
        per_segment = [[] for _ in range(self.segments)]
        for slot in kept:
            per_segment[(slot % self.z) // self.width].append(slot)
        natural = []
        for slots in per_segment:
            perm = self.segment_permutation(len(slots))
            seg = [None] * len(slots)
            for gen_pos, nat_pos in enumerate(perm):
                seg[nat_pos] = slots[gen_pos]
            natural.extend(seg)
        return natural

    def restore(self, generated, eos):
        """Generation order (end markers and trailing tokens allowed) -> natural order, no markers."""
        generated = torch.as_tensor(generated, dtype=torch.long, device=getattr(generated, "device", "cpu"))
        return generated[torch.tensor(self.restore_index(generated, eos), dtype=torch.long, device=generated.device)]

    # ---- attention ----
    def allowed(self, length):
        """Boolean matrix: query slot i may attend decoder-input slot j (Eq. 4 and ablations)."""
        t = torch.arange(length, device="cpu")
        if self.vanilla_mask:
            ok = t[:, None] >= t[None, :]  # M(1,1), Table 2 #2
        else:
            step = torch.div(t, self.z, rounding_mode="floor")  # ceil(i/(h*c)) - 1, 0-based
            ok = step[:, None] >= step[None, :]  # Eq. 4
        if self.independent_directions:  # Table 2 #5: no attention across directions
            d = self.directions(length)
            ok = ok & (d[:, None] == d[None, :])
        return ok

    def mask(self, length):
        """The float 0/-inf self-attention mask M(h,c) of Eq. 4 (with the order's ablations)."""
        return torch.zeros(length, length, device="cpu").masked_fill(~self.allowed(length), float("-inf"))

    def incremental_mask(self, past, new):
        """Rows past..past+new of the mask (new queries over past+new keys); None if all allowed."""
        allowed = self.allowed(past + new)[past:]
        if bool(allowed.all()):
            return None
        return torch.zeros(allowed.shape, device="cpu").masked_fill(~allowed, float("-inf"))

    def __hash__(self):
        return hash(self.signature)

    def __eq__(self, other):
        return isinstance(other, GenerationOrder) and other.signature == self.signature


class FoldedOrder(GenerationOrder):
    """A bidirectional order: each segment folded ``y1 yL y2 yL-1 ...`` (IBDecoder Eq. 6, Imamura's
    fold), reversed by the middle-to-side ablation; the fold alternates L, R inside a segment."""

    bidirectional = True
    default_directions = 2

    def check_directions(self, h):
        if h != 2:
            raise OrderError(f"--target-order {self.name} has exactly two directions (got --directions {h}); "
                             "for more directions use --target-order multi_segment --directions 4")

    def segment_permutation(self, length):
        fold = []
        for k in range((length + 1) // 2):
            fold.append(k)
            if length - 1 - k != k:
                fold.append(length - 1 - k)
        return fold[::-1] if self.middle_to_side else fold


def get_order(name, directions=None, tokens_per_direction=1, **ablations):
    """The order object of docs/METHODS.md §1 (``directions=None`` or 0: the order's own h)."""
    if name not in ORDERS:
        raise OrderError(f"unknown target order {name!r}; choose one of {', '.join(ORDERS)}")
    unknown = set(ablations) - set(ABLATIONS)
    if unknown:
        raise OrderError(f"unknown order option(s) {sorted(unknown)}; known: {', '.join(ABLATIONS)}")
    return _cached_order(name, directions or None, tokens_per_direction,
                         tuple(bool(ablations.get(a, False)) for a in ABLATIONS))


@lru_cache(maxsize=None)
def _cached_order(name, directions, tokens_per_direction, flags):
    return ORDERS[name](directions, tokens_per_direction, **dict(zip(ABLATIONS, flags)))


def order_from_config(cfg):
    """The order of a task/model config, or None for plain l2r (h=1, c=1, no ablations)."""
    order = get_order(getattr(cfg, "target_order", "l2r") or "l2r", getattr(cfg, "directions", 0) or None,
                      getattr(cfg, "tokens_per_direction", 1) or 1,
                      **{a: getattr(cfg, a, False) for a in ABLATIONS})
    return None if order.is_plain_l2r else order


def order_signature_of_config(cfg):
    order = order_from_config(cfg)
    return None if order is None else order.signature


def order_signature_of_model(model):
    """The order a model was trained with; None for plain l2r (every stock fairseq model)."""
    order = getattr(model, "generation_order", None)
    return None if order is None or order.is_plain_l2r else order.signature

