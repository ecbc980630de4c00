"""The one-line summary of a draft-and-verify run (what the drafter bought), from ``generator.stats``.

``fairseq-generate`` prints it once, after the last batch (``FastTranslationTask.inference_step``)::

    draft-and-verify | drafter blockwise | acceptance exact | 120 sentences | model calls 402 |
    mean accepted 2.61 | draft tokens accepted 41.3% (679/1644)

* model calls: decoder invocations (a batch counts once per call);
* mean accepted: tokens appended per row per call (Stern's mean accepted block size k-hat: the
  accepted draft tokens plus the verifier's own token), ``accepted_tokens / iterations``;
* draft tokens accepted: accepted draft tokens / proposed draft tokens (PAD slots not counted).

Where only some calls verified a draft (``--drafter auto`` decoding most batches with plain greedy, a width
policy that stopped drafting), the mean over all calls is near 1.00 however many draft tokens passed;
the mean over the calls that verified a draft follows it: ``mean accepted 1.00 (1.56 on the 25
row-calls that verified a draft)``.
"""


def mean_accepted(stats) -> float:
    """Stern's mean accepted block size: tokens appended per row per call."""
    iterations = stats.get("iterations", 0)
    return stats["accepted_tokens"] / iterations if iterations else 0.0


def mean_accepted_when_drafted(stats):
    """Tokens appended per row per call that verified a draft (None: no such call counted)."""
    drafted = stats.get("drafted_iterations", 0)
    return 1.0 + stats.get("draft_accepted", 0) / drafted if drafted else None


def summary_line(stats) -> str:
    mean = mean_accepted(stats)
    when_drafted = mean_accepted_when_drafted(stats)
    drafted_rows = int(stats.get("drafted_iterations", 0))
    drafted = stats.get("draft_tokens", 0)
    share = (f"{100.0 * stats['draft_accepted'] / drafted:.1f}% ({int(stats['draft_accepted'])}/{int(drafted)})"
             if drafted else "n/a (no draft tokens)")
    parts = [
        "draft-and-verify", f"drafter {stats.get('drafter')}", f"acceptance {stats.get('acceptance')}",
        f"{int(stats.get('sentences', 0))} sentences", f"model calls {int(stats['model_calls'])}",
        f"mean accepted {mean:.2f}" + (
            f" ({when_drafted:.2f} on the {drafted_rows} row-calls that verified a draft)"
            if when_drafted is not None and drafted_rows < stats.get("iterations", 0) else ""),
        f"draft tokens accepted {share}",
    ]
    if stats.get("drafter_choice"):  # --drafter auto: what was chosen and why
        parts.append(stats["drafter_choice"])
    if stats.get("length_oracle"):
        parts.append(f"incl. {int(stats.get('oracle_model_calls', 0))} calls of the greedy length oracle")
    return " | ".join(parts)
