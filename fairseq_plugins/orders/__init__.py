"""Generation orders (docs/METHODS.md §1): how a target sentence is laid out for a multi-token decoder.

One class per order, each in its own module and registered by name (:func:`register_order`):

=================  ===============================================================================
``l2r``            y1..yn; c>1 is semi-autoregressive SA (Wang et al. 2018; IBDecoder Table 2 #6)
``r2l``            yn..y1; c>1 is Imamura & Sumita's "double-token R2L"
``head_tail``      Imamura & Sumita 3.2: L1 R1 L2 R2 ..., learned positional embedding, M(2,1)
``interleave``     IBDecoder Eq. 6-8: y1 yn y2 yn-1 ..., signed sinusoidal positions Eq. 7, M(2,c)
                   (c>1 is IBDecoder+SA, Eq. 12)
``multi_segment``  IMDecoder Eq. 9-11: h/2 near-equal segments, each interleaved, step k takes the
                   k-th pair of every segment; positions (step, direction) Eq. 10, M(h,1)
=================  ===============================================================================

What every order shares (the segment layout, end markers, restoring, the M(h,c) mask) is
:class:`~.base.GenerationOrder`; an order says how a segment is permuted, where its positions come
from and which directions it has.  Adding one: a module here and one import below
(docs/ARCHITECTURE.md, "Adding a generation order").
"""
from fairseq_plugins.orders.base import (ABLATIONS, ORDERS, GenerationOrder, OrderError, get_order,  # noqa: F401
                                         order_from_config, order_signature_of_config, order_signature_of_model,
                                         register_order)
from fairseq_plugins.orders import l2r, r2l, head_tail, interleave, multi_segment  # noqa: F401,E401  (registration)

ORDER_NAMES = tuple(ORDERS)

__all__ = ["GenerationOrder", "OrderError", "get_order", "order_from_config", "order_signature_of_config",
           "order_signature_of_model", "register_order", "ORDER_NAMES", "ABLATIONS"]
