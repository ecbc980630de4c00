"""``r2l``: yn..y1; c>1 is Imamura & Sumita's "double-token R2L"."""
from fairseq_plugins.orders.base import GenerationOrder, register_order


@register_order
class RightToLeft(GenerationOrder):
    name = "r2l"

    def segment_permutation(self, length):
        return list(range(length))[::-1]
