"""matplotlib's pyplot for the scripts' figures: the Agg backend (no display on a training host) and
matplotlib's own logger at WARNING (fairseq's logging set-up leaves the root logger at DEBUG, so
matplotlib's font search would flood a run's log)."""
import logging


def pyplot():
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
