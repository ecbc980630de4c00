"""One decoding core (issue 50): the three generators are built from one ``GenerationOptions`` read
once from fairseq's arguments (decoding/options.py), apply one list of logits processors
(decoding/logits_processors.py), build fairseq's hypotheses one way (decoding/hypotheses.py), and the
beam searches take one search protocol, passed in (decoding/search.py)."""
import dataclasses
import inspect
import math
from argparse import Namespace

import pytest
import torch

from _all_generators import BEAM_CASES, beam_model, random_sources
from engine_helpers import engine, gen_args, load, mixed_batches
from test_generation_options import PROBES
from test_logits_processors import EOS, PAD, UNK, fairseq_step

from fairseq_plugins.decoding.generation_options import GENERATORS, HONOURED, REFUSED, TABLES, GenerationOptionError
from fairseq_plugins.decoding.lean_beam import LeanBeamSearch
from fairseq_plugins.decoding.logits_processors import Steps
from fairseq_plugins.decoding.multi_token_beam import MultiTokenBeamSearch
from fairseq_plugins.decoding.options import GenerationOptions
from fairseq_plugins.decoding.search import BeamSearch, DoubleTopK, OuterTopK, Search, build_search

# every field of GenerationOptions and the fairseq option it is read from
FIELD_OF = {"beam": "beam", "max_len_a": "max_len_a", "max_len_b": "max_len_b", "min_len": "min_len",
            "unkpen": "unk_penalty", "lenpen": "len_penalty", "unnormalized": "normalize_scores",
            "temperature": "temperature", "no_repeat_ngram_size": "no_repeat_ngram_size"}


@pytest.fixture(scope="module")
def built(tiny_corpus, tiny_model, tmp_path_factory):
    """generator -> (build(**fairseq options), models, sample), each as fairseq-generate builds it."""
    models, task = load(tiny_corpus, tiny_model)
    case = next(c for c in BEAM_CASES if c[0] == "head_tail")
    rtask, rmodel = beam_model(tmp_path_factory.mktemp("reordered"), case)
    rtask.cfg.double_topk = False
    sample = mixed_batches(task, 6)[0]

    def build_engine(**kw):
        return engine(models, task, "none", **kw)

    def build_lean(**kw):
        task.cfg.drafter = None
        return task.build_generator(models, gen_args(**{"beam": 3, **kw}))

    def build_multi(**kw):
        return rtask.build_generator([rmodel], gen_args(**{"beam": 3, **kw}))

    rsample = random_sources(rtask.target_dictionary.pad(), rtask.target_dictionary.eos())
    return {"engine": (build_engine, models, sample), "lean_beam": (build_lean, models, sample),
            "multi_token_beam": (build_multi, [rmodel], rsample)}


def test_options_hold_every_honoured_option_and_refuse_the_refused():
    """Walk the tables: an option ``GenerationOptions`` holds is, set alone, either refused for that
    generator (the table's message) or held with its value; nothing it holds is read under another name."""
    assert sorted(FIELD_OF.values()) == sorted(f.name for f in dataclasses.fields(GenerationOptions)
                                               if f.name != "fallback")
    for generator in GENERATORS:
        for name, field in FIELD_OF.items():
            args = Namespace(**{name: PROBES[name]})
            if generator == "engine" and name != "beam":
                args.beam = 1  # the engine refuses fairseq's default beam 5
            if TABLES[generator][name].kind == REFUSED:
                with pytest.raises(GenerationOptionError, match="--" + name.replace("_", "-")):
                    GenerationOptions.from_args(args, generator)
                continue
            assert TABLES[generator][name].kind == HONOURED, (generator, name)
            options = GenerationOptions.from_args(args, generator)
            want = not PROBES[name] if name == "unnormalized" else PROBES[name]
            assert getattr(options, field) == want, (generator, name)
            assert options.fallback is None
    assert GenerationOptions.from_args(Namespace(beam=1, score_reference=True), "engine").fallback.startswith(
        "--score-reference")


def test_values_are_validated_once_with_a_message():
    with pytest.raises(GenerationOptionError, match="--temperature must be greater than 0"):
        GenerationOptions.from_args(Namespace(temperature=0.0), "lean_beam")
    with pytest.raises(GenerationOptionError, match="--min-len 9 exceeds the maximum length 8"):
        GenerationOptions(min_len=9, max_len_a=0.5, max_len_b=3).max_len(11, 1024)
    assert GenerationOptions(max_len_a=0.5, max_len_b=3).max_len(11, 1024) == 8  # int(0.5 * 11 + 3)
    assert GenerationOptions(max_len_b=3000).max_len(11, 1024) == 1023  # the model's positions - 1


@pytest.mark.parametrize("generator", GENERATORS)
def test_every_generator_decodes_to_the_one_max_length(built, generator):
    """With --min-len at fairseq's maximum length every hypothesis has exactly that many tokens and
    EOS, and one more is refused naming it: the same length for the same options, whatever the
    generator.  Its score is fairseq's: the positional scores' sum over length ** --lenpen."""
    build, models, sample = built[generator]
    src_len = sample["net_input"]["src_tokens"].size(1)
    max_len = min(int(0.5 * src_len + 2), models[0].max_decoder_positions() - 1)
    gen = build(max_len_a=0.5, max_len_b=2, min_len=max_len, lenpen=0.6)
    assert gen.options == GenerationOptions.from_args(gen_args(max_len_a=0.5, max_len_b=2, min_len=max_len,
                                                                lenpen=0.6, beam=gen.options.beam), generator)
    with torch.no_grad():
        hypos = gen.generate(models, sample)
    for row in hypos:
        for h in row:
            assert len(h["tokens"]) == max_len + 1 and int(h["tokens"][-1]) == 2
            want = h["positional_scores"].sum() / (max_len + 1) ** 0.6
            assert math.isclose(float(h["score"]), float(want), rel_tol=1e-5, abs_tol=1e-5)
            assert h["attention"] is None and h["alignment"] is None
    gen = build(max_len_a=0.5, max_len_b=2, min_len=max_len + 1)
    with pytest.raises(GenerationOptionError, match=f"--min-len {max_len + 1} exceeds the maximum length {max_len};"):
        gen.generate(models, sample)


@pytest.mark.parametrize("generator", ["engine", "lean_beam"])
def test_the_generators_processors_give_fairseqs_masks(built, generator):
    """The list the generator applies, on columns at their own steps, equals fairseq's per-step
    code with the run's --min-len and --unkpen (a builder that dropped one would differ)."""
    gen = built[generator][0](min_len=4, unkpen=1.5)
    d = gen.tgt_dict
    assert (d.eos(), d.pad(), d.unk()) == (EOS, PAD, UNK)  # fairseq_step's
    max_len, g = 7, torch.Generator().manual_seed(5)
    lp = torch.log_softmax(torch.randn(3, 6, len(d), generator=g), dim=-1)
    lp[torch.rand(3, 6, len(d), generator=g) < 0.05] = math.nan
    steps = torch.arange(2, 8).unsqueeze(0) + torch.tensor([[0], [1], [2]])
    got = gen.processors(lp.clone(), Steps(steps, max_len))
    for b in range(3):
        for i in range(6):
            want = fairseq_step(lp[b : b + 1, i], int(steps[b, i]), max_len, 4, 1.5)[0]
            assert torch.equal(got[b, i], want), (b, i)


class Recording(Search):
    """A strategy handed in: fairseq's beam search, recording its calls."""

    def __init__(self, inner):
        super().__init__(inner.beam_size)
        self.inner, self.calls = inner, []

    def step(self, step, lprobs, scores):
        self.calls.append((step, tuple(lprobs.shape), None if scores is None else tuple(scores.shape)))
        return self.inner.step(step, lprobs, scores)


def test_one_search_protocol_in_fairseqs_shape():
    for cls in (Search, BeamSearch, OuterTopK, DoubleTopK):
        assert list(inspect.signature(cls.step).parameters) == ["self", "step", "lprobs", "scores"], cls
    assert issubclass(OuterTopK, Search) and issubclass(DoubleTopK, Search) and issubclass(BeamSearch, Search)


@pytest.mark.parametrize("generator", ["lean_beam", "multi_token_beam"])
def test_the_beams_search_with_the_strategy_passed_in(built, generator):
    """The strategy given to the constructor is the one that searches: every step calls it with the
    step's log-probs and running scores, and the output is the default strategy's."""
    build, models, sample = built[generator]
    plain = build(max_len_b=8)
    options, cls = plain.options, type(plain)
    if generator == "lean_beam":
        strategy = Recording(build_search(options, plain.vocab_size))
        gen = LeanBeamSearch(models[0], plain.tgt_dict, options, strategy)
    else:
        strategy = Recording(build_search(options, len(plain.tgt_dict), plain.order))
        gen = MultiTokenBeamSearch(plain.order, plain.tgt_dict, options, strategy)
    assert isinstance(gen, cls)
    with torch.no_grad():
        want, got = plain.generate(models, sample), gen.generate(models, sample)
    assert len(strategy.calls) == gen.stats["steps"] > 0
    assert [c[0] for c in strategy.calls] == list(range(len(strategy.calls)))
    for row_w, row_g in zip(want, got):
        assert [h["tokens"].tolist() for h in row_w] == [h["tokens"].tolist() for h in row_g]
