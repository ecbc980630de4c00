"""``--drafter auto`` (decoding/drafters/auto.py): candidates take turns on the first batches, the one
with the least time per token is kept (plain greedy unless another is clearly faster), and the output
is fairseq's greedy output whichever candidate decoded a batch."""
import pytest

from engine_helpers import decode_all, engine, load, mismatches, mixed_batches, reference_greedy
from fairseq_plugins.decoding.drafters import DrafterNotAvailableError
from fairseq_plugins.decoding.drafters.auto import DrafterChoice
from fairseq_plugins.decoding.report import mean_accepted_when_drafted, summary_line


def test_the_fastest_per_token_is_kept_and_plain_greedy_unless_clearly_beaten():
    choice = DrafterChoice(["none", "input_copy", "jacobi_hgj"], trial_batches=2, margin=0.05, trial_tokens=150)
    turns = [choice.next() for _ in range(9)]
    assert turns == ["none", "input_copy", "jacobi_hgj"] * 3
    cost = {"none": 1.0, "input_copy": 0.7, "jacobi_hgj": 1.1}  # seconds per 100 tokens
    choice.record("none", 50.0, 100)  # warm-up batches: not counted, however slow
    choice.record("input_copy", 50.0, 100)
    choice.record("jacobi_hgj", 0.1, 100)  # ... or fast
    for name in turns[3:]:
        choice.record(name, cost[name], 100)
    assert choice.chosen == "input_copy" and choice.next() == "input_copy"
    assert "chose input_copy" in choice.summary()
    close = DrafterChoice(["none", "input_copy"], trial_batches=1, margin=0.05, trial_tokens=0, warmup_batches=0)
    close.record("none", 1.0, 100)
    close.record("input_copy", 0.97, 100)  # 3% faster: within the margin, noise
    assert close.chosen == "none" and "no drafter was 5% faster" in close.summary()
    short = DrafterChoice(["none", "input_copy"], trial_batches=1, trial_tokens=50, warmup_batches=0)
    for _ in range(4):  # batches of 10 tokens: 5 of each are needed (0.9 against 1.0: within DROP, no racing)
        short.record("none", 1.0, 10)
        short.record("input_copy", 0.9, 10)
    assert short.chosen is None and short.batches == {"none": 4, "input_copy": 4}
    short.record("none", 1.0, 10)
    short.record("input_copy", 0.9, 10)
    assert short.chosen == "input_copy"
    with pytest.raises(ValueError, match="'none'"):
        DrafterChoice(["input_copy"])


def test_a_candidate_much_slower_than_plain_greedy_leaves_the_trial_early():
    """Racing: once it has half the trial's tokens, a candidate over DROP slower per token than
    ``none`` decodes no more trial batches (each is paid for); one merely slower stays to the end, and
    a new trial on longer sentences lets the dropped one try again."""
    from fairseq_plugins.decoding.drafters.auto import DROP

    choice = DrafterChoice(["none", "input_copy", "jacobi_hgj"], trial_batches=3, trial_tokens=200, warmup_batches=0)
    cost = {"none": 1.0, "input_copy": 1.1, "jacobi_hgj": 1.0 + 2 * DROP}  # seconds per 100 tokens
    turns = []
    for _ in range(3):  # 100 tokens a batch: half the trial's tokens after one batch
        name = choice.next(4)
        turns.append(name)
        choice.record(name, cost[name], 100)
    assert choice.racing == ["none", "input_copy"] and choice.dropped == {"jacobi_hgj": (pytest.approx(1 + 2 * DROP), "none")}
    while choice.chosen is None:
        name = choice.next(4)
        turns.append(name)
        choice.record(name, cost[name], 100)
    assert turns == ["none", "input_copy", "jacobi_hgj"] + ["none", "input_copy"] * 2
    assert choice.chosen == "none" and "jacobi_hgj left the trial at 1.50x" in choice.summary()
    assert choice.next(8) == "none" and choice.chosen is None  # twice as long: a new trial, all three again
    assert choice.racing == ["none", "input_copy", "jacobi_hgj"] and not choice.dropped


def test_a_drafter_far_faster_than_plain_greedy_sends_the_others_out_and_is_kept_at_once():
    """Racing against the leader, not only against ``none``: at base size, batch 1, IAD took 3.4 ms a token
    against 11.4 for plain greedy and 10.7 for Jacobi, yet the trial ran 13 batches of each slow one.
    Once both have half the trial's tokens, plain greedy and Jacobi leave, and the one left is kept; a
    candidate within DROP of the leader stays in."""
    from fairseq_plugins.decoding.drafters.auto import DROP

    choice = DrafterChoice(["none", "input_copy", "jacobi_hgj"], trial_batches=3, trial_tokens=200, warmup_batches=0)
    cost = {"none": 11.4, "input_copy": 3.4, "jacobi_hgj": 10.7}  # seconds per 100 tokens
    turns = []
    while choice.chosen is None:
        name = choice.next(4)
        turns.append(name)
        choice.record(name, cost[name], 100)  # half the trial's tokens after one batch each
    # plain greedy was out after input_copy's first batch, Jacobi after its own (a candidate is judged once timed)
    assert turns == ["none", "input_copy", "jacobi_hgj"]
    assert choice.chosen == "input_copy" and choice.racing == ["input_copy"]
    assert "none left the trial at 3.35x input_copy's time per token" in choice.summary()
    choice = DrafterChoice(["none", "input_copy", "jacobi_hgj"], trial_batches=2, trial_tokens=200, warmup_batches=0)
    cost = {"none": 1.0, "input_copy": 1.0 / (1 + DROP / 2), "jacobi_hgj": 1.0 + DROP / 4}  # all within DROP of the fastest
    while choice.chosen is None:
        name = choice.next(4)
        choice.record(name, cost[name], 100)
    assert not choice.dropped and choice.batches == {"none": 2, "input_copy": 2, "jacobi_hgj": 2}
    assert choice.chosen == "input_copy"
    # a new leader sends several out at once (both timed slower than it by more than DROP), and is kept
    choice = DrafterChoice(["none", "jacobi_hgj", "input_copy"], trial_batches=3, trial_tokens=200, warmup_batches=0)
    for name, seconds in (("none", 1.0), ("jacobi_hgj", 1.1)):
        assert choice.next(4) == name
        choice.record(name, seconds, 100)
    assert choice.next(4) == "input_copy"
    choice.record("input_copy", 0.5, 100)
    assert set(choice.dropped) == {"none", "jacobi_hgj"} and choice.chosen == "input_copy"


def test_auto_is_fairseq_greedy_token_for_token_and_says_what_it_chose(tiny_corpus, tiny_model):
    models, task = load(tiny_corpus, tiny_model)
    batches = mixed_batches(task, 4)
    gen = engine(models, task, "auto", block_size=4)
    candidates = gen.drafter.candidates  # every registered drafter that runs here: no heads, no drafter path; not
    assert {"none", "input_copy", "jacobi_hgj"} <= set(candidates)  # PJ/PGJ, which take a target length
    assert not {"blockwise", "nar", "jacobi_pj", "jacobi_pgj", "auto"} & set(candidates)
    hyp = decode_all(gen, models, batches)
    assert not mismatches(reference_greedy(models, task, batches), hyp)
    assert gen.choice.chosen in gen.drafter.candidates  # each candidate: 1 warm-up, then 3+ counted batches ...
    racing = gen.choice.racing
    assert min(gen.choice.batches[n] for n in racing) >= 3 and min(gen.choice.tokens[n] for n in racing) >= 256
    assert all(gen.choice.tokens[n] >= 128 for n in gen.choice.dropped)  # ... or half the tokens, then out
    assert f"chose {gen.choice.chosen}" in summary_line(gen.stats)
    s = gen.stats  # the accepted figure follows the draft acceptance: per row-call that verified a draft
    assert 0 < s["drafted_iterations"] < s["iterations"]  # plain greedy's batches verify none
    assert mean_accepted_when_drafted(s) == pytest.approx(1 + s["draft_accepted"] / s["drafted_iterations"])
    assert f"({mean_accepted_when_drafted(s):.2f} on the {s['drafted_iterations']} row-calls" in summary_line(s)


def test_auto_is_one_engine_per_candidate_sharing_the_verifier(tiny_corpus, tiny_model, monkeypatch):
    """``auto`` chooses among engines (none unwraps it): one per candidate, the model's encoder pass
    and decoder step built once for all of them."""
    from fairseq_plugins.decoding import verifier

    built = []
    init = verifier.Verifier.__init__
    monkeypatch.setattr(verifier.Verifier, "__init__", lambda self, model: built.append(1) or init(self, model))
    models, task = load(tiny_corpus, tiny_model)
    gen = engine(models, task, "auto", block_size=4)
    assert set(gen.engines) == set(gen.drafter.candidates) and len(built) == 1
    assert all(e.drafter is gen.drafter.candidates[n] and e.verifier is gen.verifier
               for n, e in gen.engines.items())
    assert all(e.stats is gen.stats for e in gen.engines.values()) and gen.stats["drafter"] == "auto"


def test_auto_refuses_a_lossy_rule(tiny_corpus, tiny_model):
    models, task = load(tiny_corpus, tiny_model)
    with pytest.raises(DrafterNotAvailableError, match="--acceptance exact"):
        engine(models, task, "auto", acceptance="topk")


def test_a_batch_of_much_longer_sources_starts_a_new_trial():
    """fairseq-generate sorts by length: a choice made on the shortest sentences is tried again once
    the sources are twice as long (no warm-up batches then)."""
    choice = DrafterChoice(["none", "input_copy"], trial_batches=1, trial_tokens=0, warmup_batches=1)
    for name, cost in (("none", 9.0), ("input_copy", 9.0), ("none", 1.0), ("input_copy", 1.2)):
        assert choice.next(3) == name
        choice.record(name, cost, 100)
    assert choice.chosen == "none" and choice.chosen_at == 3
    assert choice.next(5) == "none"  # under twice as long: the choice holds
    assert choice.next(6) == "none" and choice.chosen is None  # a new trial, counted from its first batch
    # a run that ends here says what it chose and that it was trying again
    assert choice.summary().startswith("drafter auto: chose none (trial 1, sources up to 3 tokens)")
    assert "a new trial on longer sources began" in choice.summary()
    choice.record("none", 1.0, 100)
    assert choice.next(6) == "input_copy"
    choice.record("input_copy", 0.5, 100)
    assert choice.chosen == "input_copy" and choice.trials == 2 and "trial 2" in choice.summary()


def test_the_summary_gives_the_choice_with_the_timings_it_was_made_on_and_no_time_for_untried_candidates():
    """It printed '0.000 ms' for candidates not tried yet, and the unfinished trial's timings beside the choice an
    earlier trial made."""
    choice = DrafterChoice(["none", "input_copy", "jacobi_hgj"], trial_batches=1, trial_tokens=0, warmup_batches=0)
    assert "0.000" not in choice.summary() and "none not tried" in choice.summary()
    choice.record(choice.next(3), 1.0, 100)  # none: 10 ms per token
    assert "none 10.000" in choice.summary() and "input_copy not tried, jacobi_hgj not tried" in choice.summary()
    choice.record(choice.next(3), 0.5, 100)  # input_copy: 5 ms
    choice.record(choice.next(3), 2.0, 100)  # jacobi_hgj: 20 ms
    made = choice.summary()
    assert made.startswith("drafter auto: chose input_copy (trial 1") and "none 10.000, input_copy 5.000, jacobi_hgj 20.000" in made
    assert choice.next(6) == "none" and choice.chosen is None  # twice as long: a new trial ...
    choice.record("none", 7.0, 100)  # ... whose first batch is slow
    later = choice.summary()
    assert later.startswith(made) and "a new trial" in later and "70.000" not in later


def test_the_mean_accepted_of_the_calls_that_verified_a_draft_is_beside_the_overall_one():
    """'mean accepted 1.00' beside '14% of draft tokens accepted' read as a contradiction: most calls had no draft."""
    stats = {"drafter": "auto (none)", "acceptance": "exact", "sentences": 50, "model_calls": 900, "iterations": 1000,
             "accepted_tokens": 1004, "draft_tokens": 100, "draft_accepted": 14, "drafted_iterations": 25}
    line = summary_line(stats)
    assert "mean accepted 1.00 (1.56 on the 25 row-calls that verified a draft)" in line
    assert "draft tokens accepted 14.0% (14/100)" in line
    every = dict(stats, drafted_iterations=1000, accepted_tokens=1140, draft_accepted=140, draft_tokens=1000)
    assert "mean accepted 1.14 |" in summary_line(every)  # every call drafted: one figure says it
