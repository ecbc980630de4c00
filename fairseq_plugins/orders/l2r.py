"""``l2r``: y1..yn, one direction; c>1 is semi-autoregressive SA (Wang et al. 2018; IBDecoder Table 2 #6)."""
from fairseq_plugins.orders.base import GenerationOrder, register_order


@register_order
class LeftToRight(GenerationOrder):
    name = "l2r"

    def segment_permutation(self, length):
        return list(range(length))
