"""The draft-width policy (fairseq_plugins/decoding/width_policy.py): widths follow what the drafts
achieve, a batch whose drafts never pay takes plain steps and probes now and then, and the fixed
policy is the papers' setting."""
import pytest

from fairseq_plugins.decoding.width_policy import (
    MAX_PROBE, PROBE, PROBE_BUDGET, PROBE_ROWS, AdaptiveBlock, WidthPolicy, draft_lengths)
from fairseq_plugins.decoding.iteration_cost import IterationCosts, rows_bucket

PLAIN = 1e-3  # seconds of an idle iteration in the synthetic timings


def timed_costs(slot_by_rows, draft=0.0, n=200, verify=0.0, widths=5):
    """IterationCosts fed with exact synthetic timings: per batch size, an idle iteration costs PLAIN,
    a drafting one PLAIN * (1 + draft + verify + slot * width) (CPU-like: slot 0.3 at batch 1, 0.6 at
    32), widths 0 .. ``widths`` - 1."""
    costs = IterationCosts()
    for rows, slot in slot_by_rows.items():
        costs.observe(rows, 0, False, PLAIN)
        for i in range(n):
            width, asked = i % widths, i % 3 > 0
            extra = (draft if asked else 0) + (verify + slot * width if width else 0)
            costs.observe(rows, width, asked, PLAIN * (1 + extra))
    return costs


def cpu_policy(probe=True):
    """A width policy on a device where a slot costs 30% of a plain step at batch 1 and 60% from 32 on."""
    return AdaptiveBlock(probe=probe, costs=timed_costs({1: 0.3, 2: 0.3, 4: 0.35, 8: 0.4, 16: 0.5, 32: 0.6}))


def test_fixed_block_always_allows_k():
    policy = WidthPolicy()
    policy.begin(4, 5)
    policy.update([5, 5, 5, 5], [0, 0, 0, 0])
    assert policy.width() == 5


def test_costs_are_fitted_from_the_timed_intervals():
    costs = timed_costs({1: 0.3, 32: 0.6}, draft=0.2)
    for rows, slot in ((1, 0.3), (32, 0.6)):
        rel = costs.relative(rows)
        assert rel["slot"] == pytest.approx(slot, abs=0.02) and rel["draft"] == pytest.approx(0.2, abs=0.02)
    assert costs.relative(24)["slot"] == pytest.approx(0.6, abs=0.02)  # same bucket as 32
    assert costs.relative(4)["slot"] == pytest.approx(0.3, abs=0.02)  # nearest measured bucket
    assert rows_bucket(1) == 1 and rows_bucket(5) == 8 and rows_bucket(32) == 32
    fresh = IterationCosts()
    assert fresh.idle_timed(1) == 0 and fresh.relative(1)["slot"] > 0  # the prior until measured
    fresh.observe(1, 3, True, 5 * PLAIN)  # no yardstick yet: nothing to measure it against
    assert fresh.idle_timed(1) == 0


def test_the_cost_fit_solves_its_normal_equations_as_numpy_does():
    import numpy as np

    from fairseq_plugins.decoding.iteration_cost import _solve3

    rng = np.random.default_rng(0)
    for _ in range(200):  # the fit's own moments: x = (asked, verified, width), nearly collinear, plus the ridge
        k = rng.integers(1, 40)
        width = rng.integers(0, k + 1, size=rng.integers(1, 300)) * rng.integers(0, 2)
        asked = (rng.random(width.size) < rng.random()) | (width > 0) * rng.integers(0, 2)
        x = np.stack([asked, width > 0, width], 1).astype(float)
        a, y = x.T @ x + 0.1 * np.eye(3), rng.normal(size=3) * 1e-3
        assert np.allclose(_solve3(a.tolist(), y.tolist()), np.linalg.solve(a, y), rtol=1e-9, atol=1e-12)


def test_an_outlier_interval_moves_the_fit_little():
    costs = timed_costs({1: 0.3})
    costs.observe(1, 1, True, 1000 * PLAIN)  # the OS took the core for a second
    assert costs.relative(1)["slot"] < 0.8
    costs.observe(1, 0, False, 1000 * PLAIN)
    assert costs.buckets[1].plain < 2 * PLAIN


def test_the_same_drafts_are_verified_wider_where_slots_are_cheap():
    """The policy prices slots at what they cost on this device: on a GPU-like device, where a wide
    call costs about what a plain step does, the same acceptance buys a wider call than on a CPU."""
    widths = {}
    for name, slot in (("cpu", 0.3), ("gpu", 0.02)):
        policy = AdaptiveBlock(costs=timed_costs({1: slot}))
        policy.begin(1, 10)
        for _ in range(6):
            policy.update([2], [1], offered=[1])  # half of the draft tokens accepted: p -> 0.5
        widths[name] = policy.width()
    assert 1 <= widths["cpu"] < widths["gpu"]


def test_a_drafter_whose_proposal_costs_a_step_must_earn_it():
    cheap = AdaptiveBlock(costs=timed_costs({1: 0.3}, draft=0.0))
    dear = AdaptiveBlock(costs=timed_costs({1: 0.3}, draft=1.0))
    for policy in (cheap, dear):
        policy.begin(1, 4)
        for _ in range(6):
            policy.update([2], [1], offered=[1])
    assert cheap.width() >= 1 and dear.width() == 0


def test_an_unmeasured_device_times_idle_iterations_until_its_yardstick_holds():
    """A policy that drafts at every step times no idle iteration of its own: it forces one at once
    (not on the batch's first call, whose interval holds the encoder), then one every YARDSTICK_GAP
    iterations until YARDSTICKS are timed, then one every REFRESH."""
    from fairseq_plugins.decoding.width_policy import REFRESH, YARDSTICK_GAP, YARDSTICKS

    policy = AdaptiveBlock()
    policy.begin(1, 4)
    assert policy.width() >= 1  # the batch's first call: its interval holds the encoder and is never timed
    for _ in range(6):
        policy.update([4], [4], offered=[1])
    assert policy.width() == 0 and not policy.expects_draft()  # the yardstick: no draft scored, none asked
    widths = []
    for _ in range(4 * YARDSTICK_GAP):  # its interval was not timed (a kernel met a new shape): asked again
        widths.append(policy.width())
        policy.update([4], [4], offered=[1])
    assert widths.count(0) == 4 and widths[YARDSTICK_GAP - 1] == 0
    timed = []
    for _ in range(REFRESH + YARDSTICKS * YARDSTICK_GAP):
        w = policy.width()
        timed.append(w)
        policy.update([w], [w], offered=[1])
        policy.timed(w, w > 0, PLAIN * (2 if w else 1))
    idle = [i for i, w in enumerate(timed) if w == 0]
    gaps = [b - a for a, b in zip(idle, idle[1:])]
    assert policy.costs.idle_timed(1) >= YARDSTICKS
    assert gaps[: YARDSTICKS - 1] == [YARDSTICK_GAP] * (YARDSTICKS - 1) and set(gaps[YARDSTICKS - 1 :]) == {REFRESH}
    jacobi = AdaptiveBlock(probe=False)  # cannot resume after a plain step: never forced
    jacobi.begin(1, 4)
    jacobi.width()
    assert jacobi.width() >= 1


def test_the_yardstick_is_the_mean_of_the_first_idle_intervals():
    costs = IterationCosts()
    for seconds in (2 * PLAIN, PLAIN, PLAIN, PLAIN):  # the first read under load
        costs.observe(1, 0, False, seconds)
    assert costs.buckets[1].plain == pytest.approx(1.25 * PLAIN) and costs.idle_timed(1) == 4
    for _ in range(1000):  # then an EMA: the first read fades
        costs.observe(1, 0, False, PLAIN)
    assert costs.buckets[1].plain == pytest.approx(PLAIN, rel=1e-3)


def test_width_grows_when_drafts_are_accepted_and_is_capped_by_k():
    policy = cpu_policy()
    policy.begin(2, 6)
    assert policy.width() == 1  # the cautious prior: one slot at batch 2
    for _ in range(8):
        policy.update([6, 6], [6, 6])  # every draft token accepted: p -> 1
    assert policy.width() == 6


def test_useless_drafts_give_plain_steps_then_a_probe_with_doubling_gaps():
    policy = cpu_policy()
    policy.begin(PROBE_ROWS, 4)
    rows = PROBE_ROWS
    policy.update([4] * rows, [0] * rows)
    policy.update([4] * rows, [0] * rows)
    widths = []
    for _ in range(PROBE + 2 * PROBE + 1):
        w = policy.width()
        widths.append(w)
        policy.update([w] * rows, [0] * rows)  # nothing accepted, also when probing
    probes = [i for i, w in enumerate(widths) if w]
    assert all(w in (0, 1) for w in widths)
    assert probes[:2] == [PROBE - 1, PROBE - 1 + 2 * PROBE]  # the gap doubled after a probe that did not pay
    for _ in range(10 * MAX_PROBE):
        w = policy.width()
        policy.update([w] * rows, [0] * rows)
    assert policy.gap == MAX_PROBE  # the gap stops doubling


@pytest.mark.parametrize("draft", [0.1, 4.0])
def test_probes_that_cost_several_steps_come_further_apart(draft):
    """The probe interval grows past ``MAX_PROBE`` where a probe costs more (GAD's drafter catches up on
    the prefix: ~3.5 extra plain steps), so that probes cost at most ``PROBE_BUDGET`` of the plain
    steps; cheaper ones stop at ``MAX_PROBE``."""
    policy = AdaptiveBlock(costs=timed_costs({1: 0.3}, draft=draft))
    policy.begin(1, 4)
    for _ in range(4):
        policy.update([4], [0])
    probes = []
    for i in range(40 * MAX_PROBE):
        w = policy.width()
        if w:
            probes.append(i)
        policy.update([w], [0], offered=[1] if w else None)
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    extra = policy.costs.relative_cost(1, policy.probed, True) - 1.0
    if draft < 1:
        assert extra < PROBE_BUDGET * MAX_PROBE and policy.gap == MAX_PROBE
    else:
        assert policy.gap == int(extra / PROBE_BUDGET) > 3 * MAX_PROBE
    assert extra / min(gaps[-3:]) <= max(PROBE_BUDGET, extra / MAX_PROBE)  # what the probes cost per plain step


def test_a_probe_wider_than_any_call_timed_is_priced_as_the_widest_timed():
    """Only width-1 calls timed (IAD on en-de: two in 1,000 sentences): the line through them splits
    their excess between the call's fixed cost and the slot's as the ridge pleases, so a width-10 probe
    is priced as a width-1 call, for the probe interval's cap as for the width itself (the cap priced it
    by the extrapolated line: ~11 plain steps at width 10, probes ~2,100 iterations apart instead of ~360)."""
    costs = timed_costs({1: 0.96}, draft=0.2, verify=0.66, widths=2)
    policy = AdaptiveBlock(costs=costs)
    policy.begin(1, 10)
    for _ in range(4):
        policy.update([10], [0])
    for _ in range(40 * MAX_PROBE):
        w = policy.width()
        policy.update([w], [0], offered=[1] if w else None)
    width_1 = costs.relative_cost(1, 1, True) - 1.0
    assert policy.probed > 4 and costs.relative_cost(1, policy.probed, True) - 1.0 > 2 * width_1
    assert policy.gap == max(MAX_PROBE, int(width_1 / PROBE_BUDGET))


def test_no_probes_while_many_rows_are_left():
    policy = cpu_policy()
    policy.begin(32, 4)  # the prior does not pay at batch 32: plain steps from the start
    widths = [policy.width() for _ in range(4 * PROBE)]
    assert widths == [0] * len(widths) and not policy.expects_draft() and not policy.stopped()
    policy.select_rows(list(range(PROBE_ROWS)))  # rows left: probing resumes
    widths = []
    for _ in range(2 * PROBE):
        widths.append(policy.width())
        if widths[-1]:
            policy.update([1] * PROBE_ROWS, [0] * PROBE_ROWS)
    assert widths.count(1) == 1


def test_a_probe_that_pays_restores_drafting():
    policy = cpu_policy()
    policy.begin(1, 4)
    for _ in range(4):
        policy.update([4], [0])
    while policy.width() == 0:
        policy.update([0], [0])
    for _ in range(5):  # (at batch 1 the row's record weighs against the run's, RUN_PSEUDO tokens of rejections)
        policy.update([1], [1])  # the probe's draft token was accepted
    assert policy.width() >= 2


def test_a_paying_probe_halves_the_probe_interval_instead_of_resetting_it():
    """One lucky probe of a drafter whose run does not pay (GAD on en-de) must not buy a run of probes."""
    policy = cpu_policy()
    policy.begin(1, 4)
    for _ in range(4):
        policy.update([4], [0])
    for _ in range(2000):  # failing probes: the interval doubles up to MAX_PROBE
        if policy.width():
            policy.update([policy.probed], [0], offered=[1])
        else:
            policy.update([0], [0])
    assert policy.gap == MAX_PROBE
    while policy.width() == 0:
        policy.update([0], [0])
    policy.update([policy.probed], [policy.probed], offered=[1])  # this probe's drafts were all accepted
    assert policy.gap == MAX_PROBE // 2


def test_rows_leave_with_their_estimates():
    policy = cpu_policy()
    policy.begin(3, 4)
    policy.update([4, 4, 4], [4, 0, 4])
    before = list(policy.p)
    policy.select_rows([0, 2])
    assert policy.p == [before[0], before[2]]


def test_draft_lengths_count_leading_non_pad_tokens():
    import torch

    pad = 1
    draft = torch.tensor([[5, 6, 1, 7], [1, 5, 5, 5], [4, 4, 4, 4]])
    assert draft_lengths(draft, pad).tolist() == [2, 0, 4]
    assert draft_lengths(draft[:, :0], pad).tolist() == [0, 0, 0]


def test_expects_draft_is_false_only_when_the_next_width_is_zero():
    policy = cpu_policy()
    policy.begin(PROBE_ROWS, 4)
    widths, expects = [], []
    for it in range(6 * PROBE):
        w = policy.width()
        widths.append(w)
        expects.append(policy.expects_draft())
        if w:
            policy.update([w] * PROBE_ROWS, [0] * PROBE_ROWS)
    assert not all(expects) and any(widths)  # idle stretches and probes both happen
    for i in range(len(widths) - 1):
        if not expects[i]:
            assert widths[i + 1] == 0, i
    fixed = WidthPolicy()
    fixed.begin(8, 3)
    assert fixed.width() == 3 and fixed.expects_draft()


def test_without_probing_a_batch_that_stops_drafting_stays_plain():
    policy = cpu_policy(probe=False)
    policy.begin(1, 3)
    assert policy.width() >= 1
    policy.update([3], [0])
    policy.update([3], [0])
    assert [policy.width() for _ in range(10 * MAX_PROBE)] == [0] * (10 * MAX_PROBE)
    assert not policy.expects_draft() and policy.stopped()  # the engine drops the drafter for this batch


def test_a_probing_batch_never_stops_for_good():
    policy = cpu_policy()
    policy.begin(32, 4)
    for _ in range(6 * MAX_PROBE):
        w = policy.width()
        assert not policy.stopped()
        if w:
            policy.update([w] * 32, [0] * 32)
    fixed = WidthPolicy()
    fixed.begin(8, 3)
    assert not fixed.stopped()


def test_the_threshold_is_that_of_the_starting_batch_size():
    policy = cpu_policy()
    policy.begin(32, 4)
    policy.select_rows([0, 1])  # two rows left: drafting with the prior would pay at batch 2
    assert policy.width() == 0


def test_a_row_whose_drafter_has_nothing_to_offer_stops_being_asked():
    """IAD offers no draft for a row whose output matches no source n-gram: such a row must close
    the width even though its acceptance estimate never moves (it sends no draft token to judge)."""
    policy = cpu_policy()
    policy.begin(2, 4)
    assert policy.width() == 1 and policy.expects_draft()
    widths, asked = [], 0
    for _ in range(4 * PROBE):
        widths.append(policy.width())
        asked += policy.expects_draft()
        policy.update([0, 0], [0, 0], offered=[0, 0])  # asked, nothing offered, a plain call
    assert widths[:3] == [1, 0, 0]  # closed after one empty ask (p = P_START, q = 0.75: a slot promises 1.5% more than
    # a plain step, less than MIN_GAIN)
    assert sum(widths) <= 3 and asked <= 6  # then only probes (gaps doubling), and the asks just before them
    # the same rows with drafts offered (and accepted) keep the width open
    policy = cpu_policy()
    policy.begin(2, 4)
    for _ in range(3 * PROBE):
        w = policy.width()
        policy.update([w, w], [w, w], offered=[1, 1])
    assert policy.width() == 4


def test_a_drafter_that_never_offers_stops_being_asked_even_where_asking_is_timed_as_free():
    """Where an ask's fitted cost is 0 (a cheap drafter, or a yardstick read high under load), the
    vanishing chance of a draft (q -> 0, never 0) still promised a little more than a plain step:
    the policy asked on and on (958 asks in 2,833 calls in a test run on loaded cores, 33-64 when
    quiet).  A width must promise more than MIN_GAIN over a plain step."""
    policy = AdaptiveBlock(costs=timed_costs({1: 0.3}, draft=0.0))
    asked = 0
    for _ in range(20):  # sentences at batch 1
        policy.begin(1, 4)
        ask = policy.expects_draft()
        for _ in range(20):
            policy.update([0], [0], offered=[0] if ask else None)  # asked: nothing to offer
            policy.width()
            ask = policy.expects_draft()
            asked += ask
        policy.select_rows([])
    assert asked < 0.1 * 20 * 20, asked  # the first asks, then only probes


def test_a_draftless_probe_counts_as_a_probe_that_did_not_pay():
    policy = cpu_policy()
    policy.begin(1, 4)
    policy.update([1], [0], offered=[1])
    policy.update([1], [0], offered=[1])
    gaps = []
    for _ in range(PROBE + 2 * PROBE + 2):
        w = policy.width()
        policy.update([0], [0], offered=[0])  # even the probe had no draft to send
        gaps.append(policy.gap)
    assert max(gaps) >= 4 * PROBE  # the gap doubled after each empty probe


def test_probing_policies_carry_what_they_learned_into_the_next_batches():
    policy = cpu_policy()
    policy.begin(1, 4)
    assert policy.width() == 1  # the cautious prior tries one slot
    for sentence in range(4):  # the prior learns from each sentence that leaves
        if sentence:
            policy.begin(1, 4)
        policy.update([1], [0], offered=[1])  # its drafts are rejected
    policy.begin(1, 4)
    assert not policy.expects_draft()  # the first call will be plain: its draft is not even asked for
    assert policy.prior_p < 0.3 and policy.width() == 0  # a new sentence no longer starts by drafting
    policy.begin(1, 4)  # a sentence that sent no draft teaches nothing
    assert policy.width() == 0
    good = cpu_policy()
    for _ in range(3):
        good.begin(1, 4)
        for _ in range(6):
            w = good.width()
            good.update([w], [w], offered=[1])  # every draft accepted
    good.begin(1, 4)
    assert good.expects_draft() and good.width() >= 2  # a new sentence starts wide
    # rows that leave mid-batch teach the prior too
    mid = cpu_policy()
    mid.begin(3, 4)
    mid.update([4, 4, 4], [0, 0, 0], offered=[1, 1, 1])
    before = mid.prior_p
    mid.select_rows([0])
    assert mid.prior_p < before


def test_a_policy_without_probes_retries_whole_batches_at_doubling_gaps():
    """Jacobi cannot probe inside a batch: once its learned prior does not pay, batches decode plain
    (the drafter dropped) except trial batches from the cautious prior, ever further apart; a trial
    that pays brings drafting back for every batch."""
    from fairseq_plugins.decoding.width_policy import MAX_BATCH_GAP, P_START

    policy = cpu_policy(probe=False)
    trials = []
    for batch in range(40):
        policy.begin(1, 3)
        drafting = policy.width() > 0
        trials.append(drafting)
        if drafting:
            policy.update([3], [0], offered=[1])  # the batch's drafts are rejected
            policy.update([3], [0], offered=[1])
        else:
            assert policy.stopped()  # a plain batch: the engine drops the drafter at once
    first_plain = trials.index(False)
    assert first_plain <= 3  # a few failing batches teach the prior
    later = [i for i, t in enumerate(trials) if t and i > first_plain]
    gaps = [b - a for a, b in zip(later, later[1:])]
    assert len(later) >= 3 and gaps == sorted(gaps) and max(gaps) <= MAX_BATCH_GAP
    # trials whose drafts are accepted: drafting resumes for the next batches (each row that leaves moves
    # the prior by CARRY: from ~0.13, two paying trials lift it past what one slot must promise)
    trials, resumed = 0, False
    # bounded: a prior that the trial rule calls paying but no width does (two thresholds) would leave every
    # batch plain and no trial ever again
    for _ in range(4 * MAX_BATCH_GAP):
        policy.begin(1, 3)
        if not policy.width():
            continue
        if trials == 2:
            resumed = True
            break
        trials += 1
        for _ in range(6):
            policy.update([3], [3], offered=[1])
    assert resumed
    for _ in range(3):
        assert policy.width() >= 1 and policy.p[0] > P_START / 2
        policy.update([3], [3], offered=[1])
        policy.begin(1, 3)


def test_acceptance_is_pooled_over_draft_tokens_not_averaged_over_calls():
    """A call that accepted its 10 draft tokens, then one that rejected its first: 10 of 11 tokens
    tried were accepted (p about 0.8 with the discount), not "one good call, one bad call" (0.35)."""
    policy = cpu_policy()
    policy.begin(1, 10)
    policy.update([10], [10])
    policy.update([10], [0])
    assert policy.p[0] > 0.75


def test_a_probe_tries_the_width_that_would_pay_best():
    """Where a drafting call has a large fixed cost and a slot costs little (a CPU at batch 1: the
    drafting iteration's own operations), one slot never pays but a wide call may: the probe is wide."""
    policy = AdaptiveBlock(costs=timed_costs({1: 0.02}, draft=1.5))
    policy.begin(1, 8)
    for _ in range(4):
        policy.update([8], [1])  # p -> 0.5: no width pays now
    widths = [policy.width() for _ in range(PROBE)]
    assert widths[:-1] == [0] * (PROBE - 1) and widths[-1] >= 4  # at p = 0.5 slots past ~5 add < 0.02 tokens


def test_a_verification_call_s_fixed_cost_is_told_apart_from_its_slots():
    costs = timed_costs({1: 0.1}, draft=0.3, verify=0.9)
    rel = costs.relative(1)
    # (the ridge toward the priors, verify 0 and slot 0.3, shrinks the fit a little: ~20 intervals weigh in)
    assert rel["draft"] == pytest.approx(0.3, abs=0.05) and rel["verify"] == pytest.approx(0.9, abs=0.05)
    assert rel["slot"] == pytest.approx(0.1, abs=0.02)
    assert costs.relative_cost(1, 10, True) == pytest.approx(1 + 0.3 + 0.9 + 1.0, abs=0.1)
    assert costs.relative_cost(1, 0, False) == 1.0 and costs.widest(1) == 4


def test_a_width_wider_than_any_timed_is_tried_then_priced_as_measured():
    """Only one-slot calls timed (they cost 2.2 plain steps: a CPU's fixed cost per verification
    call) and drafts mostly accepted: the policy tries the full width instead of concluding from
    the one-slot calls that ten slots cost 10 plain steps; once ten slots are timed dear, it drops them."""
    costs = timed_costs({1: 1.0}, draft=0.2, widths=2)  # widths 0 and 1: slot and verify not told apart
    policy = AdaptiveBlock(costs=costs)
    policy.begin(1, 10)
    for _ in range(4):
        policy.update([10], [9])  # p -> 0.9
    assert policy.width() == 10
    for _ in range(100):
        costs.observe(1, 10, True, PLAIN * 12.0)  # ten slots really cost 11 plain steps more
    assert costs.widest(1) == 10 and policy.width() < 10


def test_slot_acceptance_is_conditional_on_the_slots_before():
    """IAD-like drafts: half the calls reject the first slot, the other half accept all ten.  Per
    token that is p = 0.5, but a slot after an accepted one is nearly always accepted."""
    from fairseq_plugins.decoding.width_policy import SlotAcceptance

    slots = SlotAcceptance()
    for _ in range(20):
        slots.update([10], [0])
        slots.update([10], [10])
    assert slots.conditional(2, 0.5) > 0.85 and slots.conditional(10, 0.5) > 0.85
    assert slots.conditional(11, 0.5) == 0.5  # never scored: the caller's guess
    decaying = SlotAcceptance()  # a drafter whose later slots guess worse (blockwise heads)
    for _ in range(30):
        decaying.update([4, 4], [1, 3])
    assert decaying.conditional(2, 0.5) == pytest.approx((0.5 * 30 + 2) / (30 + 4), abs=0.1)
    assert decaying.conditional(2, 0.5) < decaying.conditional(3, 0.5) == pytest.approx(1.0, abs=0.15)


def test_an_idle_policy_refits_nothing_until_its_probe():
    calls = {"n": 0}
    costs = timed_costs({1: 0.3}, draft=2.0)  # drafting costs 3 plain steps: nothing pays
    fit = costs.relative

    def counted(rows):
        calls["n"] += 1
        return fit(rows)

    costs.relative = counted
    policy = AdaptiveBlock(costs=costs)
    policy.begin(1, 4)
    for _ in range(4):
        policy.update([4], [0])
    assert policy.width() == 0
    calls["n"] = 0
    widths = [policy.width() for _ in range(PROBE - 2)]
    assert widths == [0] * (PROBE - 2) and calls["n"] == 0  # counting down: no fit evaluated


def test_an_ask_without_a_draft_is_priced_as_the_ask_alone():
    """IAD has a draft in only some of its asks (typo correction: ~60%); an ask without one scores no
    slot and costs the ask alone, not a wide call.  Drafts that are fully accepted when there, a
    third of the time, and ten slots at 7.3 plain steps: drafting pays (4.3 tokens for ~3.3 plain
    steps), though it would not if every ask cost the wide call (4.3 tokens for 7.3)."""
    policy = AdaptiveBlock(costs=timed_costs({1: 0.5}, draft=0.3, verify=1.0, widths=11))
    policy.begin(1, 10)
    for _ in range(12):
        policy.update([10], [10], offered=[1])
        policy.update([0], [0], offered=[0])
        policy.update([0], [0], offered=[0])
    assert 0.2 < policy.q[0] < 0.5 and policy.width() == 10
    never = AdaptiveBlock(costs=timed_costs({1: 0.5}, draft=0.3, verify=1.0, widths=11))
    never.begin(1, 10)
    for _ in range(12):
        never.update([10], [10], offered=[1])
    for _ in range(12):
        never.update([0], [0], offered=[0])  # the drafter stopped having drafts: the ask alone does not pay
    assert never.width() == 0


def test_at_batch_1_one_rejection_does_not_stop_a_row_whose_run_drafts_well():
    """Typo correction at batch 1: sentences of ~8 tokens whose first draft token is often a typo.
    The run's drafts are mostly accepted, so a row keeps drafting after one rejection and one ask
    without a draft (with its own short record alone it took plain steps to its end); a run whose
    drafts fail stops drafting in its new sentences."""
    policy = AdaptiveBlock(costs=timed_costs({1: 0.1}, draft=0.3, verify=0.8, widths=11))
    for _ in range(10):  # sentences whose drafts were accepted
        policy.begin(1, 10)
        for _ in range(3):
            w = policy.width()
            policy.update([w], [w], offered=[1])
    policy.begin(1, 10)
    policy.width()
    policy.update([10], [0], offered=[1])  # the first draft token rejected
    policy.update([0], [0], offered=[0])   # re-anchoring found nothing
    assert policy.width() == 10 and policy.expects_draft()
    bad = AdaptiveBlock(costs=timed_costs({1: 0.1}, draft=0.3, verify=0.8, widths=11))
    for _ in range(10):
        bad.begin(1, 10)
        for _ in range(3):
            w = bad.width()
            bad.update([w], [0], offered=[1])  # rejected at once
    bad.begin(1, 10)
    assert bad.width() == 0


def test_record_times_the_interval_between_records_on_the_policys_own_clock():
    """The engine passes no clock and reads none: ``record`` times the interval since the previous
    one itself (the batch's first holds the encoder: not timed) and learns what the call achieved."""
    policy = AdaptiveBlock()
    policy.begin(1, 4)
    ticks, seen = iter([1.0, 3.5, 4.0]), []
    policy.clock = lambda: next(ticks)
    timed = policy.timed
    policy.timed = lambda w, asked, s: seen.append((w, asked, s)) or timed(w, asked, s)
    policy.record(0, True)
    policy.record(2, False, sent=[2], got=[1])
    policy.record(0, True, offered=[0])
    assert seen == [(2, False, 2.5), (0, True, 0.5)]
    assert policy.t[0] > 0 and policy.q[0] < 1.0  # a tried draft token and a draftless ask were learnt


def test_the_engine_talks_to_the_policy_through_begin_plan_record_and_select_rows(tiny_corpus, tiny_model):
    """Two calls per iteration (plan, record) and two lifecycle calls; a plan is the width, then
    whether the drafter is asked, then whether the batch stopped, as the policy's own methods say."""
    from engine_helpers import decode_all, engine, load, mismatches, mixed_batches, reference_greedy
    from fairseq_plugins.decoding.width_policy import Plan

    models, task = load(tiny_corpus, tiny_model)
    batches = mixed_batches(task, 8)[:3]
    gen = engine(models, task, "input_copy", block_size=3)
    called = []

    class Spy:
        def __init__(self, policy):
            self._policy = policy

        def __getattr__(self, name):
            called.append(name)
            return getattr(self._policy, name)

    gen.policy = Spy(gen.policy)
    hyps = decode_all(gen, models, batches)
    assert mismatches(reference_greedy(models, task, batches), hyps) == []
    assert set(called) == {"adaptive", "begin", "plan", "record", "select_rows"}, set(called)
    assert called.count("record") == gen.stats["model_calls"]
    jacobi = AdaptiveBlock(probe=False)  # a prior that does not pay, no probes: plain steps, stopped at once
    jacobi.prior_p = 0.0
    assert jacobi.begin(1, 4).ask  # the first batch is a trial from P_START
    assert jacobi.begin(1, 4) == Plan(0, False, False) and jacobi.plan() == Plan(0, False, True)
