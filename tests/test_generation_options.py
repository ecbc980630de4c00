"""Every fairseq generation option, for every generator of the plugin, is honoured, refused with a
message naming it, or a fallback to fairseq's generator with a log line naming it
(``decoding/generation_options.py``): none is ignored.  The walk reads fairseq's own
``GenerationConfig``, so an option a new fairseq adds fails here until it is classified."""
import dataclasses
import logging
from argparse import Namespace

import pytest
import torch
from fairseq.dataclass.configs import GenerationConfig
from fairseq.sequence_generator import SequenceGenerator
from fairseq.sequence_scorer import SequenceScorer

from _all_generators import BEAM_CASES, beam_model, random_sources
from engine_helpers import engine, gen_args, load, mixed_batches

from fairseq_plugins.decoding.engine import DraftVerifyGenerator
from fairseq_plugins.decoding.generation_options import (FALLBACK, GENERATORS, HONOURED, REFUSED, TABLES,
                                                         GenerationOptionError, flag)
from fairseq_plugins.decoding.lean_beam import LeanBeamSearch
from fairseq_plugins.decoding.multi_token_beam import MultiTokenBeamSearch

FIELDS = [f.name for f in dataclasses.fields(GenerationConfig) if not f.name.startswith("_")]

# a value that sets each option (not fairseq's default); an option fairseq adds needs one here too
PROBES = dict(
    beam=2, beam_mt=2, nbest=2, max_len_a=1.0, max_len_b=30, max_len_a_mt=1.0, max_len_b_mt=30, min_len=2,
    match_source_len=True, unnormalized=True, no_early_stop=True, no_beamable_mm=True, lenpen=0.6, lenpen_mt=0.6,
    unkpen=1.0, replace_unk="@@ ", sacrebleu=True, score_reference=True, prefix_size=1, no_repeat_ngram_size=2,
    sampling=True, sampling_topk=5, sampling_topp=0.9, constraints="ordered", temperature=0.7, diverse_beam_groups=2,
    diverse_beam_strength=0.7, diversity_rate=0.5, print_alignment="hard", print_step=True, lm_path="lm.pt",
    lm_weight=0.5, iter_decode_eos_penalty=0.5, iter_decode_max_iter=4, iter_decode_force_max_iter=True,
    iter_decode_with_beam=2, iter_decode_with_external_reranker=True, retain_iter_history=True, retain_dropout=True,
    retain_dropout_modules=["TransformerDecoderLayer"], decoding_format="unigram", no_seed_provided=True,
    eos_token="</s>",
)
OURS = {"engine": DraftVerifyGenerator, "lean_beam": LeanBeamSearch, "multi_token_beam": MultiTokenBeamSearch}
LOGGERS = {"engine": "fairseq_plugins.decoding.engine", "lean_beam": "fairseq_plugins.decoding.lean_beam"}


@pytest.mark.parametrize("generator", GENERATORS)
def test_every_fairseq_generation_option_is_classified_once(generator):
    table = TABLES[generator]
    assert sorted(table) == sorted(FIELDS), "classify the new option in decoding/generation_options.py"
    assert all(rule.kind in (HONOURED, REFUSED, FALLBACK) and rule.why for rule in table.values())
    assert sorted(PROBES) == sorted(FIELDS)


@pytest.fixture(scope="module")
def builders(tiny_corpus, tiny_model, tmp_path_factory):
    """generator -> build(args) as fairseq-generate builds it (task.build_generator)."""
    models, task = load(tiny_corpus, tiny_model)
    case = next(c for c in BEAM_CASES if c[0] == "head_tail")
    rtask, rmodel = beam_model(tmp_path_factory.mktemp("reordered"), case)

    def build_engine(**kw):
        return engine(models, task, "jacobi_pj", **kw)

    def build_lean(**kw):
        task.cfg.drafter = None
        return task.build_generator(models, gen_args(**{"beam": 4, **kw}))

    def build_multi(**kw):
        return rtask.build_generator([rmodel], Namespace(**{**vars(gen_args(beam=3)), **kw}))

    return {"engine": build_engine, "lean_beam": build_lean, "multi_token_beam": build_multi}, (models, task)


@pytest.mark.parametrize("generator", GENERATORS)
def test_each_option_does_what_its_table_says(builders, caplog, generator):
    """Set alone, a refused option raises a message naming it, a fallback gives fairseq's generator
    and one log line naming it, an honoured one gives the plugin's own generator, silently."""
    build = builders[0][generator]
    for name, rule in TABLES[generator].items():
        caplog.clear()
        with caplog.at_level(logging.INFO):
            if rule.kind == REFUSED:
                with pytest.raises(GenerationOptionError, match=flag(name)):
                    build(**{name: PROBES[name]})
                continue
            gen = build(**{name: PROBES[name]})
        lines = [r.getMessage() for r in caplog.records if r.name == LOGGERS.get(generator)]
        if rule.kind == FALLBACK:
            assert isinstance(gen, (SequenceGenerator, SequenceScorer)), name
            assert any(flag(name) in line and "fairseq's" in line for line in lines), (name, lines)
        else:
            assert isinstance(gen, OURS[generator]), name
            assert not any("does not support" in line for line in lines), (name, lines)


def test_a_drafter_with_score_reference_scores_the_references(builders):
    """It printed the engine's greedy hypotheses as the references' scores."""
    build, (models, task) = builders
    gen = build["engine"](score_reference=True)
    sample = mixed_batches(task, 4)[0]
    hypos = task.inference_step(gen, models, sample)
    for i, row in enumerate(hypos):
        ref = sample["target"][i]
        assert torch.equal(row[0]["tokens"], ref[ref.ne(task.target_dictionary.pad())])


@pytest.mark.parametrize("generator", ["engine", "multi_token_beam"])
def test_retain_dropout_is_refused_where_the_lean_step_decodes(builders, generator):
    with pytest.raises(GenerationOptionError, match="--retain-dropout"):
        builders[0][generator](retain_dropout=True)


def test_the_lean_beam_falls_back_to_fairseq_for_retain_dropout(builders, caplog):
    with caplog.at_level(logging.INFO, logger="fairseq_plugins.decoding.lean_beam"):
        gen = builders[0]["lean_beam"](retain_dropout=True)
    assert type(gen) is SequenceGenerator
    assert any("--retain-dropout" in r.getMessage() for r in caplog.records)


def test_the_multi_token_beam_honours_unnormalized_and_temperature(tmp_path):
    """It ignored both (and refuses --no-repeat-ngram-size, which it ignored too)."""
    case = next(c for c in BEAM_CASES if c[0] == "head_tail")
    task, model = beam_model(tmp_path, case)
    sample = random_sources(task.target_dictionary.pad(), task.target_dictionary.eos())

    def best(**kw):
        gen = task.build_generator([model], Namespace(**{**vars(gen_args(beam=3, max_len_b=12)), **kw}))
        return [row[0] for row in gen.generate([model], sample)]

    plain, raw = best(lenpen=1.0), best(unnormalized=True)
    for p, r in zip(plain, raw):
        assert torch.allclose(r["score"], r["positional_scores"].sum(), atol=1e-4)  # the sum itself
    assert any(not torch.allclose(p["score"], r["score"]) for p, r in zip(plain, raw))
    hot = best(temperature=3.0)
    assert any(not torch.allclose(p["positional_scores"].sum(), h["positional_scores"].sum())
               for p, h in zip(plain, hot))
