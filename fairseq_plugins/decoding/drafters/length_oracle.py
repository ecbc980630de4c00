"""``--jacobi-length greedy_oracle``: PJ/PGJ's target length taken from a greedy pre-run (Santilli et
al. §4 report PJ and PGJ with the length known; ``drafters.jacobi``).

A wrapper, so that the engine knows nothing of target lengths: at each batch's ``begin`` it asks
the engine for greedy's hypothesis lengths through the one call the context carries
(``DraftContext.greedy_lengths``: a pre-run without a drafter, counted and timed as the oracle's,
``stats['oracle_model_calls']`` and ``stats['length_oracle']``), hands them to the drafter it wraps
as ``ctx.target_length``, and passes everything else through.
"""
from dataclasses import replace

from fairseq_plugins.decoding.drafters.base import DraftContext, Drafter


class GreedyLengthOracle(Drafter):
    def __init__(self, drafter: Drafter):
        self.drafter = drafter
        self.name = drafter.name
        self.capabilities = drafter.capabilities

    def begin(self, ctx: DraftContext) -> None:
        super().begin(ctx)
        self.drafter.begin(replace(ctx, target_length=ctx.greedy_lengths()))

    def propose(self, out, n_gen, longest=None):
        return self.drafter.propose(out, n_gen, longest=longest)

    def observe(self, step):
        self.drafter.observe(step)

    def select_rows(self, rows):
        self.drafter.select_rows(rows)

    def max_draft(self, max_len):
        return self.drafter.max_draft(max_len)
