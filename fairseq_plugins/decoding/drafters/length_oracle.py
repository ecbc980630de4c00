"""PJ/PGJ's target length (``--jacobi-length``, Santilli et al. §4; ``drafters.jacobi``): a wrapper,
so that the engine knows nothing of target lengths.

At each batch's ``begin`` it hands the drafter it wraps the rows' target lengths as
``ctx.target_length`` and passes everything else through: ``max``, fairseq's maximum length
(``max_len + 1`` tokens with EOS, as HGJ's); ``greedy_oracle``, the lengths of greedy's hypotheses,
which it asks the engine for through the one call the context carries
(``DraftContext.greedy_lengths``: a pre-run without a drafter that the engine counts and times as
the oracle's, ``stats['oracle_model_calls']`` and ``stats['length_oracle']``).
"""
from dataclasses import replace

from fairseq_plugins.decoding.drafters.base import DraftContext, Drafter

SOURCES = ("max", "greedy_oracle")  # --jacobi-length


class LengthOracle(Drafter):
    def __init__(self, drafter: Drafter, source: str):
        if source not in SOURCES:
            raise ValueError(f"unknown target length source {source!r}; one of {', '.join(SOURCES)}")
        self.drafter, self.source = drafter, source
        self.name = drafter.name
        self.capabilities = drafter.capabilities

    def begin(self, ctx: DraftContext) -> None:
        super().begin(ctx)
        if self.source == "max":
            length = ctx.src_tokens.new_full((ctx.src_tokens.size(0),), ctx.max_len + 1)
        else:
            length = ctx.greedy_lengths()
        self.drafter.begin(replace(ctx, target_length=length))

    def propose(self, out, n_gen, longest=None):
        return self.drafter.propose(out, n_gen, longest=longest)

    def observe(self, step):
        self.drafter.observe(step)

    def select_rows(self, rows):
        self.drafter.select_rows(rows)

    def max_draft(self, max_len):
        return self.drafter.max_draft(max_len)
