"""``head_tail``: Imamura & Sumita §3.2, L1 R1 L2 R2 ... with a learned positional embedding, M(2,1)."""
from fairseq_plugins.orders.base import FoldedOrder, register_order


@register_order
class HeadTail(FoldedOrder):
    name = "head_tail"
    position_embedding = "learned"  # positions are the slot index: the index of the learned embedding
