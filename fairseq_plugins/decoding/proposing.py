"""When the engine asks the drafter, and for how wide a draft: the width policy's plan applied to
the drafter, one object per batch (``engine.Run.proposals``).

Most drafters are asked for the next call's draft *before* the iteration's host synchronisation,
so that the draft's width rides along in it (one host read per iteration) and the policy's ``ask``
is decided an iteration ahead.  A drafter whose input is as wide as the longest prefix (GAD's,
``DrafterCapabilities.proposes_after_sync``) is asked *after* it, given the host's ``longest``, and
only when the policy's width for the call is known and not 0: asked an iteration ahead, as the
others are, it drafted for nothing after every probe (the width fell back to 0 once the probe's
result was learnt: ~2.5 plain steps wasted per probe, GAD's drafter catching up on the prefix).
Asking every drafter after the sync would cost a second host read (the draft's width) per
iteration; asking GAD's before it, wasted drafts.  So the two moments stay, behind one object.

It also tells the width policy whether the drafter proposed inside the interval it times (``asked``).
"""
from typing import Optional

from fairseq_plugins.decoding.drafters import Draft, Drafter
from fairseq_plugins.decoding.width_policy import Plan, WidthPolicy


class Proposals:
    def __init__(self, drafter: Drafter, policy: WidthPolicy, asks_after_sync: bool):
        self.drafter, self.policy, self.asks_after_sync = drafter, policy, asks_after_sync
        self.ask = True        # ask the drafter for the next proposal (decided an iteration ahead before the sync)
        self.drafting = True   # False once the plan says the batch never drafts again
        self.asked = False     # the drafter proposed since the policy's last record

    def propose(self, rows, opening: Optional[Plan] = None) -> None:
        """``rows.draft``: the next draft of a drafter asked before the sync (its width rides along in
        it); with ``opening`` (the policy's ``begin``), the batch's first call's draft, whichever the drafter."""
        if opening is not None:
            rows.draft = self._first(rows, opening)
        elif not self.asks_after_sync:
            rows.draft = self._draft(rows, self.ask)

    def _first(self, rows, opening: Plan) -> Draft:
        if self.asks_after_sync:
            return self._sized(rows)
        self.ask = opening.ask  # a prior that does not pay: the first call is a plain step, its draft not asked for
        draft = self._draft(rows, self.ask)
        if draft.size:  # trim to the widest useful draft (one sync before the first call, unless known)
            known = draft.width if draft.width is not None else int(draft.lengths.max())
            plan = self.policy.plan()
            draft = draft.trim(min(plan.width, known))
            self._follow(plan)
        return draft

    def next_call(self, rows, next_width: Optional[int]) -> None:
        """The next call's draft at the policy's width (``next_width``: its longest row, as synced)."""
        if self.asks_after_sync:
            rows.draft = self._sized(rows)
            return
        known = rows.draft.width if rows.draft.width is not None else next_width
        plan = self.policy.plan()
        rows.draft = rows.draft.trim(min(known or 0, plan.width))
        self._follow(plan)

    def take_asked(self) -> bool:
        """Whether the drafter proposed since the last call of this (the policy's record)."""
        asked, self.asked = self.asked, False
        return asked

    def _sized(self, rows) -> Draft:
        plan = self.policy.plan()
        draft = self._draft(rows, plan.width > 0).trim(plan.width)
        self._follow(plan)
        return draft

    def _follow(self, plan: Plan) -> None:
        self.ask = plan.ask  # False: the next call is a plain step whatever is proposed
        if plan.stopped:
            self.drafting = False  # no draft for the rest of this batch: plain steps, no drafter bookkeeping

    def _draft(self, rows, wanted: bool) -> Draft:
        if not wanted:  # the policy has decided on a plain step: nothing to propose
            return Draft.none(rows.n_gen, asked=False)
        if not self.drafting:  # asked, but a drafter that stopped has nothing to offer (the policy learns so)
            return Draft.none(rows.n_gen)
        self.asked = True
        longest = max(rows.lengths) if self.asks_after_sync else None  # host lengths are fresh then
        return self.drafter.propose(rows.out, rows.n_gen, longest=longest)
