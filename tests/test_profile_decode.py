"""scripts/profile_decode.py: the instrumentation exists only while profiling, and the profile's
counts agree with what the generators count themselves."""
import pytest

from fairseq_plugins.decoding.acceptance import Exact
from fairseq_plugins.decoding.cache import KVCache
from fairseq_plugins.decoding.step import DecoderStep
from scripts.lab.evaluation import iteration_intervals, profile_points, row_profile
from scripts.lab.evaluation.corpus import Corpus
from scripts.lab.evaluation.runners import FairseqRunner


@pytest.fixture(scope="module")
def engine_runner(tiny_corpus, tiny_model):
    import torch

    torch.set_num_threads(1)
    corpus = Corpus(tiny_corpus)
    return FairseqRunner(corpus, tiny_model, "--task fast_translation --drafter jacobi_hgj --block-size 3 "
                         "--adaptive-block-size off",  # every iteration verifies a draft
                         1, 4, "cpu", False, 1, (1.2, 10), 8)


def test_resolve_paths_and_classes(engine_runner):
    roots = profile_points.roots_of(engine_runner)
    layers = engine_runner.models[0].decoder.layers
    assert profile_points.resolve("model.decoder.layers[*].self_attn", roots) == [l.self_attn for l in layers]
    assert profile_points.resolve("drafter", roots) == [engine_runner.generator.drafter]
    assert profile_points.resolve("model.no_such_part", roots) == []
    classes = profile_points.resolve("fairseq_plugins.decoding.acceptance:AcceptanceRule", roots)
    assert Exact in classes
    assert profile_points.resolve("no.such.module:Thing", roots) == []


def test_profile_counts_match_the_engine_and_leave_nothing_behind(engine_runner):
    model, gen = engine_runner.models[0], engine_runner.generator
    exact_call, commit, step_call = Exact.__dict__["__call__"], KVCache.__dict__["commit"], DecoderStep.__dict__["__call__"]
    engine_runner.decode(engine_runner.timed_batches)  # the engine's own count of this pass
    gen.reset_stats()
    engine_runner.decode(engine_runner.timed_batches)
    calls = gen.stats["model_calls"]
    summary = row_profile.profile_row(engine_runner, "cpu")
    by = {c["label"]: c for c in summary["components"]}
    # one verifier call per iteration, and an acceptance wherever a draft was verified (a row at the maximum
    # length takes a plain step); the proposal for the next call is made before the iteration's host sync,
    # so each batch ends with one proposal that is never verified
    assert by["decoder call"]["calls"] == calls
    assert 0.9 * calls <= by["acceptance"]["calls"] <= calls
    assert by["drafter.propose"]["calls"] == calls + len(engine_runner.timed_batches)
    assert by["decoder layers"]["calls"] == calls * len(model.decoder.layers)
    assert by["decoder layers"]["depth"] == 1 and by["self-attention"]["depth"] == 2 and by["encoder"]["depth"] == 0
    assert by["decoder layers"]["ms"] <= by["decoder call"]["ms"]
    assert 0 < by["search bookkeeping (rest of the row)"]["pct"] < 100
    syncs = {c["label"]: c for c in summary["host_syncs"]}
    assert syncs["host sync: Tensor.tolist"]["calls"] >= calls  # the engine reads its one host transfer per call
    # the monkeypatch is gone: no instance attribute left, the classes' own methods back
    assert "forward" not in vars(model.decoder) and "forward" not in vars(model.decoder.layers[0].self_attn)
    assert "propose" not in vars(gen.drafter)
    assert Exact.__dict__["__call__"] is exact_call and KVCache.__dict__["commit"] is commit
    assert DecoderStep.__dict__["__call__"] is step_call
    import torch

    assert torch.Tensor.tolist.__qualname__.endswith("tolist") and not hasattr(torch.Tensor.tolist, "__wrapped__")
    table = row_profile.markdown(summary)
    assert table.count("\n|") == 2 + len(summary["components"]) + len(summary["host_syncs"])


def test_a_point_that_names_nothing_is_an_error(engine_runner):
    """A renamed class or method fails the profile instead of silently dropping its row."""
    profile_points.check_points(profile_points.POINTS)  # every point of the table exists today
    for point in [("x", "fairseq_plugins.decoding.step:DecoderStep", "no_such_method"),
                  ("x", "fairseq_plugins.decoding.step:NoSuchClass", "__call__")]:
        with pytest.raises(profile_points.ProfilePointError, match="update POINTS"):
            profile_points.check_points([point])
    roots = profile_points.roots_of(engine_runner)
    with pytest.raises(profile_points.ProfilePointError, match="no method no_such_method"):
        with profile_points.instrumented([("x", "model.encoder", "no_such_method")], roots):
            pass
    assert "forward" not in vars(engine_runner.models[0].encoder)
    with profile_points.instrumented([("x", "model.no_such_part", "forward")], roots):  # absent from this row: skipped
        pass


def test_operation_count_counts_each_top_level_operation_once():
    """scripts/time_drafter_step.py --count-ops: an operation's own internals (torch.ones fills an empty
    tensor; linear calls addmm) are not counted again, every call of the function is."""
    import torch

    from scripts.lab.evaluation.operations import operations

    x, w = torch.ones(2, 4), torch.ones(3, 4)
    n, y = operations(lambda: torch.nn.functional.linear(torch.ones(2, 4) + x, w))
    assert n == 3 and y.shape == (2, 3)  # ones, add, linear
    assert operations(lambda: [x + 1 for _ in range(5)])[0] == 5


def test_engine_steps_split_an_iteration_and_its_operations(engine_runner):
    """--engine-steps: every named step of the engine is a point (a rename fails here), the verifier
    call nests inside _verify, and the operations add up: each top-level one counted once, in the
    row, in the step that made it and in every labelled part around it."""
    profile_points.check_points(profile_points.ENGINE_STEPS)
    gen = engine_runner.generator
    engine_runner.decode(engine_runner.timed_batches)
    gen.reset_stats()
    engine_runner.decode(engine_runner.timed_batches)
    calls = gen.stats["model_calls"]
    summary = row_profile.profile_row(engine_runner, "cpu", profile_points.POINTS + profile_points.ENGINE_STEPS)
    by = {c["label"]: c for c in summary["components"]}
    assert by["engine: verify"]["calls"] == by["decoder call"]["calls"] == calls
    assert by["engine: sync"]["calls"] == calls and by["decoder call"]["depth"] == 1
    assert by["engine: verify"]["ops"] > by["decoder call"]["ops"] + by["scoring"]["ops"] - 1
    assert by["decoder call"]["ops"] > by["decoder layers"]["ops"] > 0
    top = [c for c in summary["components"] if c["depth"] == 0]
    assert sum(c["ops"] for c in top) == summary["operations"]  # the rest included: nothing lost, nothing twice
    assert by["engine: learn"]["ops"] == 0  # the width policy's bookkeeping is host arithmetic


def test_iteration_intervals_are_the_engines_own_timings_by_width(engine_runner):
    """--intervals: every timed iteration of the passes, by (draft width, proposed), as the engine
    times them for its width policy; the policy's own ``timed`` is back afterwards."""
    gen = engine_runner.generator
    timed = gen.policy.timed
    calls_before = gen.stats["model_calls"]
    seen = iteration_intervals.iteration_intervals(engine_runner, passes=1)
    calls = gen.stats["model_calls"] - calls_before
    # every iteration but each batch's first (its interval holds the encoder) and those that warmed a kernel
    assert calls - 2 * len(engine_runner.timed_batches) <= sum(map(len, seen.values())) < calls
    assert all(w <= 3 for w, _ in seen) and any(w == 3 for w, _ in seen)  # --block-size 3, fixed width
    assert all(t > 0 for times in seen.values() for t in times)
    assert "timed" not in vars(gen.policy) and gen.policy.timed == timed
    table = iteration_intervals.intervals_markdown(seen, unit=1e-3)
    assert table.count("\n|") == 1 + len(seen)
