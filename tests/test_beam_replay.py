"""The beam replay measurement (scripts/lab/evaluation/beam_replay.py): the count on a trace worked out by hand;
on the tiny model, the recorded beam's hypotheses are the lean beam's, a beam-1 replay of drafts that
are the beam's own path takes one call per sentence and of drafts that are always wrong one call per
step, IAD's drafts at beam 1 take exactly the engine's calls (batch 1, fixed width), and each
hypothesis's drafts are what greedy decoding (fairseq's, from that prefix) and a drafter of that
hypothesis alone give."""
from types import SimpleNamespace

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from engine_helpers import MAX_LEN_B, engine, gen_args, load, mixed_batches

from fairseq_plugins.decoding.drafters.base import DraftContext, StepResult
from fairseq_plugins.decoding.drafters.input_copy import InputCopyDrafter
from fairseq_plugins.decoding.lean_beam import LeanBeamSearch
from scripts.lab.evaluation.beam_replay import (K_MAX, BeamTrace, GreedyDrafts, RecordedBeamSearch,
                                                    beam_path_drafts, input_copy_drafts, measure, replay_calls)

# beam 2, steps 0..4: step 0 keeps two children of row 0 (both rows are the start symbol); steps 1 and 2
# keep one child per row (step 2 swaps the rows); step 3 keeps two children of row 0; step 4 is the last
HAND = BeamTrace(bos=2, beam=2, steps=5, parents=[[0, 0], [0, 1], [1, 0], [0, 0]],
                 tokens=[[5, 6], [7, 8], [9, 10], [11, 12]])
HAND_DRAFTS = {0: [[5, 7, 10, 11], [5, 7, 10, 11]], 1: [[7, 10, 11], [8, 9]], 2: [[], []], 3: [[11], [13]],
               4: [[4], [4]]}


def test_replay_counts_a_trace_worked_out_by_hand():
    drafts = HAND_DRAFTS.__getitem__
    # call 1 at step 0: the second survivor leaves row 0's draft (6, not 5) -> step 0 only;
    # call 2 at step 1: 7 and 8 on the drafts, then 9 (row 1's 2nd) and 10 (row 0's 2nd) -> step 3 is covered,
    # where row 1's draft [8, 9] has no third token; call 3 at step 4, the last
    assert replay_calls(HAND, drafts, K_MAX) == 3
    # k = 1: call 2 covers steps 1 and 2 (depth 1 is the cap); call 3 at step 3 (two children of row 0); call 4
    assert replay_calls(HAND, drafts, 1) == 4
    # drafts that are always wrong or empty: one step per call
    assert replay_calls(HAND, lambda s: [[99], [99]], K_MAX) == HAND.steps
    assert replay_calls(HAND, lambda s: [[], []], K_MAX) == HAND.steps
    # each hypothesis's future in the beam (its first surviving child's, ...)
    path = beam_path_drafts(HAND)
    assert path(0) == [[5, 7, 10], []] and path(1) == [[7, 10], [8, 9, 11]] and path(4) == [[], []]
    assert replay_calls(HAND, path, K_MAX) == 3
    assert HAND.prefixes()[3] == [(2, 6, 8, 9), (2, 5, 7, 10)]


def test_input_copy_rows_follow_the_beam():
    # x = [BOS, 10 11 12 10 11 13, EOS]: "10 11" occurs twice, so only a row's own anchor, not a
    # re-match, finds 12 after it.  Row 0 copies 10 at step 0 and row 1 does not (20); at step 1 the
    # rows swap: row 1 continues row 0 with the next source token 11, row 0 continues row 1
    trace = BeamTrace(bos=2, beam=2, steps=3, parents=[[0, 0], [1, 0]], tokens=[[10, 20], [21, 11]])
    sample = {"net_input": {"src_tokens": torch.tensor([[10, 11, 12, 10, 11, 13, 2]]), "src_lengths": torch.tensor([7])}}
    dictionary = SimpleNamespace(eos=lambda: 2, pad=lambda: 1)
    iad = input_copy_drafts(InputCopyDrafter(K_MAX, 2), trace, sample, dictionary)
    assert iad(0) == [[10, 11, 12, 10, 11, 13, 2]] * 2
    assert iad(1) == [[11, 12, 10, 11, 13, 2], []]
    assert iad(2) == [[], [12, 10, 11, 13, 2]]
    assert replay_calls(trace, iad, K_MAX) == 3  # row 0 leaves at steps 0 and 1 (20; 21 after an empty draft)


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model):
    models, task = load(tiny_corpus, tiny_model)
    task.cfg.drafter, task.cfg.beam_search = None, "lean"
    return models, task, mixed_batches(task, 1)


def lean(models, task, beam):
    gen = task.build_generator(models, gen_args(beam=beam, lenpen=0.6))
    assert isinstance(gen, LeanBeamSearch)
    return gen


def test_recording_leaves_the_beam_unchanged(setup):
    models, task, batches = setup
    plain = lean(models, task, 4)
    recorded = RecordedBeamSearch.of(plain)
    for sample in batches:
        want = plain.generate(models, sample)[0]
        trace = recorded.record(sample)
        assert len(trace.hypotheses) == len(want) == 4
        for got, ref in zip(trace.hypotheses, want):
            assert torch.equal(got["tokens"], ref["tokens"]) and torch.equal(got["score"], ref["score"])
        # the trace is the beam's: the best hypothesis is a live prefix (plus EOS) at the step it ended
        best = tuple(want[0]["tokens"].tolist())
        assert best[:-1] in [p[1:] for p in trace.prefixes()[len(best) - 1]]
        assert len(trace.parents) == trace.steps - 1 and len(trace.argmax) == trace.steps
    assert type(plain) is LeanBeamSearch and "trace" not in vars(plain)


def test_beam_one_own_path_is_one_call_per_sentence_and_wrong_drafts_one_step_per_call(setup):
    models, task, batches = setup
    recorded = RecordedBeamSearch.of(lean(models, task, 1))
    pad = task.target_dictionary.pad()
    for sample in batches:
        trace = recorded.record(sample)
        assert replay_calls(trace, beam_path_drafts(trace), K_MAX) == 1
        greedy = GreedyDrafts(recorded, trace, sample)  # at beam 1 the beam's path is its own greedy continuation
        assert replay_calls(trace, greedy, K_MAX) == 1 and greedy.decoded == 0
        assert replay_calls(trace, lambda s: [[pad] * K_MAX], K_MAX) == trace.steps
    tallies = measure(lean(models, task, 4), batches[:10], task, ks=(4,))
    assert all(t.sentences == 10 and t.calls <= t.steps for t in tallies.values())


@pytest.mark.parametrize("k", [3, K_MAX])
def test_input_copy_at_beam_one_takes_the_engines_calls(setup, k):
    models, task, batches = setup
    gen = engine(models, task, "input_copy", block_size=k, adaptive_block_size="off")
    gen.reset_stats()
    with torch.no_grad():
        for sample in batches[:60]:
            gen.generate(models, sample)
    task.cfg.drafter = None
    tallies = measure(lean(models, task, 1), batches[:60], task, kinds=("input_copy",), ks=(k,))
    tally = tallies["input_copy", k]
    assert tally.steps == gen.stats["accepted_tokens"]
    assert tally.calls == gen.stats["iterations"] < tally.steps  # and some drafts were taken


def test_each_hypothesis_drafts_what_greedy_and_iad_give_from_its_prefix(setup):
    models, task, batches = setup
    plain = lean(models, task, 4)
    recorded = RecordedBeamSearch.of(plain)
    tgt = task.target_dictionary
    fairseq_greedy = SequenceGenerator(models, tgt, beam_size=1, max_len_a=0.0, max_len_b=MAX_LEN_B)
    decoded = 0
    for sample in batches[:4]:
        trace = recorded.record(sample)
        greedy = GreedyDrafts(plain, trace, sample)
        iad = input_copy_drafts(InputCopyDrafter.from_config(SimpleNamespace(block_size=K_MAX, copy_ngram=2), task),
                                trace, sample, tgt)
        prefixes = trace.prefixes()
        for step in range(1, trace.steps, 2):
            for prefix, continuation, draft in zip(prefixes[step], greedy(step), iad(step)):
                ref = fairseq_greedy.generate(models, sample, prefix_tokens=torch.tensor([prefix[1:]]))[0][0]
                assert list(_all(continuation)) == ref["tokens"].tolist()[step:], prefix
                assert draft == alone(task, sample, prefix), prefix
        decoded += greedy.decoded
    assert decoded > 0  # continuations off the beam were decoded, not only read from the beam


def _all(continuation):
    j = 0
    while True:
        try:
            yield continuation[j]
        except IndexError:
            return
        j += 1


def alone(task, sample, prefix):
    """IAD's draft after ``prefix``, from a drafter of that one hypothesis told its tokens one by one."""
    tgt = task.target_dictionary
    drafter = InputCopyDrafter.from_config(SimpleNamespace(block_size=K_MAX, copy_ngram=2), task)
    src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    drafter.begin(DraftContext(src_tokens=src, src_lengths=lengths, max_len=len(prefix), width=len(prefix) + 1,
                               target_length=None, bos=prefix[0], eos=tgt.eos(), pad=tgt.pad(), host_reads=False))
    out = torch.tensor([list(prefix) + [tgt.pad()]])
    one = torch.ones(1, dtype=torch.long)
    drafter.propose(out, one - 1)
    for n in range(1, len(prefix)):
        drafter.observe(StepResult(draft=out[:, :1], top=out[:, n : n + 1], top_lprob=torch.zeros(1, 1),
                                   accepted=one - 1, count=one, n_before=one * (n - 1), out=out, n_after=one * n))
    draft = drafter.propose(out, one * (len(prefix) - 1))
    return draft.tokens[0, : int(draft.lengths[0])].tolist()
