"""Diagnostics of trained models: where reordered decoders err (``order_errors``) and how well each
slot of a generation order is predicted (``slot_accuracy``)."""
