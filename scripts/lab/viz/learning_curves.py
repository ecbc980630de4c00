"""A reference run's learning curves (``OUT/curves.png``): validation BLEU and validation loss by updates,
one line a model."""


def plot(summary, path):
    from scripts.lab.viz.pyplot import pyplot

    plt = pyplot()

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, c in summary.items():
        pts = [p for p in c["points"] if p["bleu"] is not None]
        a.plot([p["updates"] for p in pts], [p["bleu"] for p in pts], marker="o", ms=3, label=name)
        pts = [p for p in c["points"] if p["valid_loss"] is not None]
        b.plot([p["updates"] for p in pts], [p["valid_loss"] for p in pts], marker="o", ms=3, label=name)
    a.set(xlabel="updates", ylabel="sacreBLEU (validation set)", title="BLEU during training")
    b.set(xlabel="updates", ylabel="validation loss (label-smoothed, base 2)", title="validation loss")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
