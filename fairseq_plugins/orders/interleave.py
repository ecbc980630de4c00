"""``interleave``: IBDecoder Eq. 6-8, y1 yn y2 yn-1 ... with signed sinusoidal positions (Eq. 7),
M(2,c); c>1 is IBDecoder+SA (Eq. 12)."""
import torch

from fairseq_plugins.orders.base import FoldedOrder, register_order


@register_order
class Interleave(FoldedOrder):
    name = "interleave"

    def natural_positions(self, t):
        ceil_half = torch.div(t + 2, 2, rounding_mode="floor")  # ceil((slot+1)/2)
        return torch.where(t % 2 == 0, ceil_half, -ceil_half)  # Eq. 7: (-1)^(t-1) * ceil(t/2)
