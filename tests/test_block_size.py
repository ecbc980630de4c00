"""The draft-width policy (fairseq_plugins/decoding/block_size.py): widths follow what the drafts
achieve, a batch whose drafts never pay takes plain steps and probes now and then, and the fixed
policy is the papers' setting."""
from fairseq_plugins.decoding.block_size import MAX_PROBE, PROBE, PROBE_ROWS, AdaptiveBlock, FixedBlock, draft_lengths
from fairseq_plugins.decoding.iteration_cost import IterationCosts


def measured(slot_cost, k=8):
    """Costs as the engine would have timed them: an iteration of width w costs 1 + slot_cost(B) * w
    plain steps at B rows, for every batch-size bucket."""
    costs = IterationCosts(ema=1.0)
    for rows in (1, 2, 4, 8, 16, 32, 64):
        for w in range(k + 1):
            costs.observe(rows, w, 1e-3 * (1 + slot_cost(rows) * w))
    return costs


def cpu_slot(rows):
    """A slot's extra cost on this CPU (d=128 demo models): 30% of a plain step at batch 1, 60% from 32."""
    return min(0.6, 0.3 + 0.3 * (rows - 1) / 31)


def cpu_policy(probe=True):
    return AdaptiveBlock(probe=probe, costs=measured(cpu_slot))


def test_fixed_block_always_allows_k():
    policy = FixedBlock()
    policy.begin(4, 5)
    policy.update([5, 5, 5, 5], [0, 0, 0, 0])
    assert policy.width() == 5


def test_the_same_drafts_are_verified_wider_where_width_is_cheap():
    """The width follows the device's measured costs: at batch 32 a CPU (every scored column paid for)
    takes plain steps where a GPU (a wide call costs about what a narrow one does) drafts wide."""
    widths = {}
    for device, slot in (("cpu", cpu_slot), ("gpu", lambda rows: 0.02)):
        policy = AdaptiveBlock(costs=measured(slot))
        policy.begin(32, 8)
        policy.update([8] * 32, [1] * 32)  # half of the tried draft tokens accepted: p -> 0.45
        widths[device] = policy.width()
    assert widths["cpu"] == 0 and widths["gpu"] >= 4  # gpu: the 5th slot adds 0.45^5 = 0.02 tokens for 0.02


def test_costs_timed_while_decoding_replace_the_prior():
    policy = AdaptiveBlock()
    policy.begin(1, 4)
    assert policy.width() == 1  # the prior: one slot tried
    for _ in range(5):  # this device: a slot costs as much as a plain step, and only 40% are accepted
        policy.timed(1, 0, 1e-3)
        policy.timed(1, 1, 2e-3)
        policy.update([1], [0])
        policy.update([1], [1])
    assert policy.width() == 0


def test_a_plain_step_is_timed_once_per_batch_size_as_the_yardstick():
    policy = AdaptiveBlock()
    policy.begin(1, 4)
    policy.timed(1, 1, 1.2e-3)  # only drafting iterations timed so far
    policy.update([1], [1])
    assert policy.width() == 0  # a plain step, to be timed
    policy.timed(1, 0, 1e-3)
    assert policy.width() >= 1  # drafting again (its drafts were accepted)


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
    for _ in range(3):
        policy.update([1], [1])  # the probe's draft token was accepted
    assert policy.width() >= 2


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
    fixed = FixedBlock()
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
    fixed = FixedBlock()
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
    assert widths[:2] == [1, 0]  # closed after one empty ask (p = P_START: q p < theta at q = 0.75)
    assert sum(widths) <= 3 and asked <= 6  # then only probes (gaps doubling), and the asks just before them
    # the same rows with drafts offered (and accepted) keep the width open
    policy = cpu_policy()
    policy.begin(2, 4)
    for _ in range(3 * PROBE):
        w = policy.width()
        policy.update([w, w], [w, w], offered=[1, 1])
    assert policy.width() == 4


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
    from fairseq_plugins.decoding.block_size import MAX_BATCH_GAP, P_START

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
    # a trial whose drafts are accepted: drafting resumes for the next batches
    while True:
        policy.begin(1, 3)
        if policy.width():
            break
    for _ in range(6):
        policy.update([3], [3], offered=[1])
    for _ in range(3):
        policy.begin(1, 3)
        assert policy.width() >= 1 and policy.p[0] > P_START / 2
