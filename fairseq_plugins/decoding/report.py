"""The one-line summary of a draft-and-verify run (what the drafter bought), from ``generator.stats``.

``fairseq-generate`` prints it once, after the last batch (``FastTranslationTask.inference_step``)::

    draft-and-verify | drafter blockwise | acceptance exact | 120 sentences | model calls 402 |
    mean accepted 2.61 | draft tokens accepted 41.3% (679/1644)

* model calls: decoder invocations (a batch counts once per call);
* mean accepted: tokens appended per row per call (Stern's mean accepted block size k-hat: the
  accepted draft tokens plus the verifier's own token), ``accepted_tokens / iterations``;
* draft tokens accepted: accepted draft tokens / proposed draft tokens (PAD slots not counted).
"""


def mean_accepted(stats) -> float:
    """Stern's mean accepted block size: tokens appended per row per call."""
    iterations = stats.get("iterations", 0)
    return stats["accepted_tokens"] / iterations if iterations else 0.0


def summary_line(stats) -> str:
    mean = mean_accepted(stats)
    drafted = stats.get("draft_tokens", 0)
    share = (f"{100.0 * stats['draft_accepted'] / drafted:.1f}% ({int(stats['draft_accepted'])}/{int(drafted)})"
             if drafted else "n/a (no draft tokens)")
    parts = [
        "draft-and-verify", f"drafter {stats.get('drafter')}", f"acceptance {stats.get('acceptance')}",
        f"{int(stats.get('sentences', 0))} sentences", f"model calls {int(stats['model_calls'])}",
        f"mean accepted {mean:.2f}", f"draft tokens accepted {share}",
    ]
    if stats.get("length_oracle"):
        parts.append(f"incl. {int(stats.get('oracle_model_calls', 0))} calls of the greedy length oracle")
    return " | ".join(parts)
