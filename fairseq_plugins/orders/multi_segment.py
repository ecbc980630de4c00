"""``multi_segment``: IMDecoder Eq. 9-11, h/2 near-equal segments, each interleaved; step k takes the
k-th pair of every segment; positions (step, direction) Eq. 10, M(h,1)."""
import torch

from fairseq_plugins.orders.base import FoldedOrder, OrderError, register_order


@register_order
class MultiSegment(FoldedOrder):
    name = "multi_segment"
    default_directions = 4
    direction_embedding = True  # Eq. 10's second part: a learned direction embedding

    def check_directions(self, h):
        if h < 2 or h % 2:
            raise OrderError(f"--target-order multi_segment needs an even --directions >= 2 (got {h}): "
                             "each of the h/2 segments is decoded from both ends (IMDecoder Eq. 9)")

    def segment_count(self, h):
        return h // 2

    def natural_positions(self, t):
        return torch.div(t, self.z, rounding_mode="floor")  # Eq. 10, first part: the decoding step
