"""Generation orders (SPEC §1). Placeholder until the orders issue lands: only plain l2r."""


def order_from_config(cfg):
    if cfg.target_order == "l2r" and cfg.tokens_per_direction == 1 and cfg.directions in (0, 1):
        return None
    raise NotImplementedError("target orders other than l2r are not implemented yet")


def order_signature_of_config(cfg):
    return None if order_from_config(cfg) is None else cfg.target_order


def order_signature_of_model(model):
    return getattr(getattr(model, "cfg", None), "target_order_signature", None)
