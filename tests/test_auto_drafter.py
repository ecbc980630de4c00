"""``--drafter auto`` (decoding/drafters/auto.py): candidates take turns on the first batches, the one
with the least time per token is kept (plain greedy unless another is clearly faster), and the output
is fairseq's greedy output whichever candidate decoded a batch."""
import pytest

from engine_helpers import decode_all, engine, load, mismatches, mixed_batches, reference_greedy
from fairseq_plugins.decoding.drafters import DrafterNotAvailableError
from fairseq_plugins.decoding.drafters.auto import DrafterChoice
from fairseq_plugins.decoding.report import summary_line


def test_the_fastest_per_token_is_kept_and_plain_greedy_unless_clearly_beaten():
    choice = DrafterChoice(["none", "input_copy", "jacobi_hgj"], trial_batches=2, margin=0.05)
    turns = [choice.next() for _ in range(6)]
    assert turns == ["none", "input_copy", "jacobi_hgj"] * 2
    cost = {"none": 1.0, "input_copy": 0.7, "jacobi_hgj": 1.1}  # seconds per 100 tokens
    for name in turns:
        choice.record(name, cost[name], 100)
    assert choice.chosen == "input_copy" and choice.next() == "input_copy"
    assert "chose input_copy" in choice.summary()
    close = DrafterChoice(["none", "input_copy"], trial_batches=1, margin=0.05)
    close.record("none", 1.0, 100)
    close.record("input_copy", 0.97, 100)  # 3% faster: within the margin, noise
    assert close.chosen == "none" and "no drafter was 5% faster" in close.summary()
    with pytest.raises(ValueError, match="'none'"):
        DrafterChoice(["input_copy"])


def test_auto_is_fairseq_greedy_token_for_token_and_says_what_it_chose(tiny_corpus, tiny_model):
    models, task = load(tiny_corpus, tiny_model)
    batches = mixed_batches(task, 4)
    gen = engine(models, task, "auto", block_size=4)
    assert sorted(gen.drafter.candidates) == ["input_copy", "jacobi_hgj", "none"]  # no heads, no drafter path
    hyp = decode_all(gen, models, batches)
    assert not mismatches(reference_greedy(models, task, batches), hyp)
    assert gen.choice.chosen in gen.drafter.candidates  # 30 batches: each candidate had its 3
    assert set(gen.choice.batches.values()) == {3}
    assert f"chose {gen.choice.chosen}" in summary_line(gen.stats)


def test_auto_refuses_a_lossy_rule(tiny_corpus, tiny_model):
    models, task = load(tiny_corpus, tiny_model)
    with pytest.raises(DrafterNotAvailableError, match="--acceptance exact"):
        engine(models, task, "auto", acceptance="topk")
