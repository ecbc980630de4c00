"""The lean beam search (decoding/lean_beam.py): identical to fairseq's SequenceGenerator + BeamSearch
on every test sentence in fp32 -- every hypothesis of the beam (so any --nbest), tokens equal, scores
within 1e-5 -- at beam 4, 5 and 10, batch 1 and 32 (mixed lengths), with and without a length
penalty, and under --min-len, --max-len-b, --unkpen, --unnormalized, --temperature and
--no-repeat-ngram-size; the fallbacks to fairseq's generator, each with its log line; one
fairseq-generate run through the real CLI."""
import logging
import math

import pytest
import torch
from fairseq.ngram_repeat_block import NGramRepeatBlock
from fairseq.sequence_generator import SequenceGenerator

from conftest import PLUGIN_DIR, fairseq_cli, run
from engine_helpers import MAX_LEN_B, decode_all, gen_args, load, mixed_batches

from fairseq_plugins.decoding.lean_beam import LeanBeamSearch

# fp32: the lean step sums in another order than fairseq's modules; relative beyond |score| 1 (an
# --unnormalized score of -84 is a sum of 40 log-probs whose float32 spacing is 7.6e-6 there)
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model):
    models, task = load(tiny_corpus, tiny_model)
    task.cfg.drafter, task.cfg.beam_search = None, "lean"
    return models, task, {bs: mixed_batches(task, bs) for bs in (1, 8, 32)}


def lean(models, task, **kw):
    gen = task.build_generator(models, gen_args(**kw))
    assert isinstance(gen, LeanBeamSearch)
    return gen


def fairseq_beam(models, task, beam, lenpen=1.0, min_len=1, unkpen=0.0, unnormalized=False, temperature=1.0,
                 max_len_b=MAX_LEN_B, no_repeat_ngram_size=0):
    return SequenceGenerator(models, task.target_dictionary, beam_size=beam, max_len_a=0.0, max_len_b=max_len_b,
                             min_len=min_len, normalize_scores=not unnormalized, len_penalty=lenpen,
                             unk_penalty=unkpen, temperature=temperature, no_repeat_ngram_size=no_repeat_ngram_size)


def all_hypotheses(gen, models, batches):
    """{sentence id: every hypothesis, best first}."""
    out = {}
    with torch.no_grad():
        for sample in batches:
            hyps = gen.generate(models, sample)
            for i, sid in enumerate(sample["id"].tolist()):
                out[sid] = hyps[i]
    return out


def assert_identical(ref, got, beam):
    assert set(ref) == set(got) and len(ref) == 120
    for sid in ref:
        r, g = ref[sid], got[sid]
        assert len(g) == len(r) <= beam, sid
        for a, b in zip(r, g):
            assert b["tokens"].tolist() == a["tokens"].tolist(), sid
            assert abs(float(b["score"]) - float(a["score"])) <= TOLERANCE * max(1.0, abs(float(a["score"]))), sid
            assert b["positional_scores"].shape == a["positional_scores"].shape
            assert torch.allclose(b["positional_scores"], a["positional_scores"], atol=TOLERANCE, rtol=0), sid


@pytest.mark.parametrize("lenpen", [1.0, 0.6], ids=["lenpen1", "lenpen0.6"])
@pytest.mark.parametrize("bs", [1, 32])
@pytest.mark.parametrize("beam", [4, 5, 10])
def test_identical_to_fairseq_beam_search_on_every_sentence(setup, beam, bs, lenpen):
    models, task, batches = setup
    ref = all_hypotheses(fairseq_beam(models, task, beam, lenpen=lenpen), models, batches[bs])
    gen = lean(models, task, beam=beam, lenpen=lenpen)
    got = all_hypotheses(gen, models, batches[bs])
    assert_identical(ref, got, beam)
    assert all(len(h) == beam for h in ref.values())  # every sentence ended with a full beam (early stop)
    assert gen.stats["model_calls"] == gen.stats["steps"] > 0


@pytest.mark.parametrize("options", [
    dict(min_len=12),                 # EOS forbidden for a while: longer hypotheses than the model wants
    dict(max_len_b=6),                # EOS forced at the length limit: every hypothesis ends there
    dict(unkpen=-4.0),                # a negative --unkpen makes UNK win: the rule must be applied
    dict(unnormalized=True, lenpen=2.0),
    dict(temperature=0.7, lenpen=1.3),
], ids=["min_len", "max_len", "unkpen", "unnormalized", "temperature"])
def test_identical_under_the_length_and_score_options(setup, options):
    models, task, batches = setup
    ref = all_hypotheses(fairseq_beam(models, task, 5, **options), models, batches[8])
    got = all_hypotheses(lean(models, task, beam=5, **options), models, batches[8])
    assert_identical(ref, got, 5)
    lengths = [len(h["tokens"]) for hyps in got.values() for h in hyps]
    if "min_len" in options:
        assert min(lengths) >= options["min_len"] + 1
    if "max_len_b" in options:
        assert max(lengths) == options["max_len_b"] + 1
    if "unkpen" in options:
        assert any(task.target_dictionary.unk() in h["tokens"].tolist() for hyps in got.values() for h in hyps)


class _PrefixFedBlocker(NGramRepeatBlock):
    """fairseq's own n-gram rule (NGramRepeatBlock's CPU path) handed the hypotheses' tokens so far,
    as its CUDA kernel reads them; fairseq's CPU path is handed the whole padded buffer and bans nothing."""

    def __init__(self, n):
        super().__init__(n, use_extension=False)

    def forward(self, tokens, lprobs, bsz, beam_size, step):
        return self._no_repeat_ngram(tokens[:, : step + 1], lprobs, bsz, beam_size, step)


@pytest.mark.parametrize("n", [2, 3])
def test_no_repeat_ngram_size_bans_what_fairseqs_rule_bans(setup, n):
    models, task, batches = setup
    ref_gen = fairseq_beam(models, task, 5, no_repeat_ngram_size=n)
    ref_gen.repeat_ngram_blocker = _PrefixFedBlocker(n)
    ref = all_hypotheses(ref_gen, models, batches[8])
    got = all_hypotheses(lean(models, task, beam=5, no_repeat_ngram_size=n), models, batches[8])
    assert_identical(ref, got, 5)
    eos = task.target_dictionary.eos()
    for hyps in got.values():
        for h in hyps:
            seq = [eos] + h["tokens"].tolist()[:-1]  # the start symbol counts, the final EOS is forced
            grams = [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]
            assert len(grams) == len(set(grams)), seq
    plain = all_hypotheses(lean(models, task, beam=5), models, batches[8])
    assert any(plain[s][0]["tokens"].tolist() != got[s][0]["tokens"].tolist() for s in got)  # it changed something


def test_sentences_leave_the_batch_and_the_cache_follows(setup):
    """Batch 32 of mixed lengths: sentences finish at different steps and leave; a sentence decoded
    alone gives the same hypotheses."""
    models, task, batches = setup
    gen = lean(models, task, beam=4)
    together = all_hypotheses(gen, models, batches[32])
    alone = all_hypotheses(gen, models, batches[1])
    for sid in together:
        assert [h["tokens"].tolist() for h in together[sid]] == [h["tokens"].tolist() for h in alone[sid]]


def test_hypotheses_are_ordinary_tensors_generate_py_may_update(setup):
    models, task, batches = setup
    hyps = lean(models, task, beam=5).generate(models, batches[8][0])
    for h in hyps[0]:
        h["positional_scores"].div_(math.log(2))  # as fairseq_cli/generate.py does
        assert h["tokens"][-1].item() == task.target_dictionary.eos()


def test_the_generic_gpu_safety_cases_decode_with_the_lean_beam(tmp_path):
    """tests/_all_generators.py's LEAN_CASES (device trap, NaN, sync budget, model not mutated, half)
    really reach the lean beam search."""
    from _all_generators import BEAM_CASES, LEAN_CASES, beam_generator, beam_model

    for case in BEAM_CASES:
        if case[0] in LEAN_CASES:
            task, model = beam_model(tmp_path / case[0], case)
            assert isinstance(beam_generator(task, model, case), LeanBeamSearch), case[0]


# ---- the choice of generator ----

FALLBACKS = [
    ("--sampling", dict(sampling=True, beam=1)),
    ("--diverse-beam-groups", dict(diverse_beam_groups=2, beam=4)),
    ("--diversity-rate", dict(diversity_rate=0.5)),
    ("--match-source-len", dict(match_source_len=True)),
    ("--constraints", dict(constraints="ordered")),
    ("--prefix-size", dict(prefix_size=1)),
    ("--print-alignment", dict(print_alignment="hard")),
    ("--score-reference", dict(score_reference=True)),
]


@pytest.mark.parametrize("option,args", FALLBACKS, ids=[f[0] for f in FALLBACKS])
def test_unsupported_options_fall_back_to_fairseq_with_one_log_line(setup, caplog, option, args):
    models, task, _ = setup
    with caplog.at_level(logging.INFO, logger="fairseq_plugins.decoding.lean_beam"):
        gen = task.build_generator(models, gen_args(**args))
    assert not isinstance(gen, LeanBeamSearch)
    lines = [r.getMessage() for r in caplog.records if r.name == "fairseq_plugins.decoding.lean_beam"]
    assert len(lines) == 1 and option in lines[0] and "fairseq's SequenceGenerator" in lines[0], lines


def test_ensembles_lm_fusion_and_the_flag_fall_back_too(setup, caplog):
    models, task, _ = setup
    cases = [
        ("an ensemble of 2 models", lambda: task.build_generator(models * 2, gen_args(beam=5))),
        ("--lm-path", lambda: task.build_generator(models, gen_args(beam=5),
                                                   extra_gen_cls_kwargs={"lm_model": models[0], "lm_weight": 0.1})),
        ("--beam-search fairseq", lambda: _with_flag(task, lambda: task.build_generator(models, gen_args(beam=5)))),
    ]
    for words, build in cases:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fairseq_plugins.decoding.lean_beam"):
            gen = build()
        assert isinstance(gen, SequenceGenerator), words
        lines = [r.getMessage() for r in caplog.records if r.name == "fairseq_plugins.decoding.lean_beam"]
        assert len(lines) == 1 and words in lines[0], lines


def _with_flag(task, build):
    task.cfg.beam_search = "fairseq"
    try:
        return build()
    finally:
        task.cfg.beam_search = "lean"


def test_an_unsupported_decoder_falls_back_naming_it(setup, caplog):
    models, task, _ = setup
    model = models[0]
    model.decoder.cross_self_attention = True  # what the lean step refuses (restored below)
    try:
        with caplog.at_level(logging.INFO, logger="fairseq_plugins.decoding.lean_beam"):
            gen = task.build_generator(models, gen_args(beam=5))
    finally:
        model.decoder.cross_self_attention = False
    assert isinstance(gen, SequenceGenerator)
    lines = [r.getMessage() for r in caplog.records if r.name == "fairseq_plugins.decoding.lean_beam"]
    assert len(lines) == 1 and "--cross-self-attention" in lines[0], lines


# ---- the real command line ----

def _h_lines(stdout):
    rows = sorted(l.split("\t") for l in stdout.splitlines() if l.startswith("H-"))
    return [(r[0], r[2]) for r in rows], [float(r[1]) for r in rows]


def test_fairseq_generate_uses_the_lean_beam_by_default_and_prints_fairseqs_hypotheses(tiny_corpus, tiny_model):
    base = [fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task",
            "fast_translation", "--path", str(tiny_model), "--beam", "5", "--nbest", "2", "--lenpen", "0.6",
            "--batch-size", "32", "--cpu", "--gen-subset", "test", "--max-len-b", str(MAX_LEN_B)]
    fast = run(base)
    plain = run(base + ["--beam-search", "fairseq"])
    assert "beam search: the lean beam search" in fast.stdout + fast.stderr
    assert "beam search: fairseq's SequenceGenerator (--beam-search fairseq)" in plain.stdout + plain.stderr
    (fast_h, fast_s), (plain_h, plain_s) = _h_lines(fast.stdout), _h_lines(plain.stdout)
    assert len(plain_h) == 240 and fast_h == plain_h  # ids and both best hypotheses identical
    assert max(abs(a - b) for a, b in zip(plain_s, fast_s)) < 1e-4  # printed in base 2, 4 decimals' rounding
    bleu = [[l.split("BLEU")[1] for l in (p.stdout + p.stderr).splitlines() if "BLEU" in l] for p in (fast, plain)]
    assert bleu[0] and bleu[0] == bleu[1]


def test_fairseq_interactive_translates_raw_text_with_the_lean_beam(tiny_corpus, tiny_model):
    """fairseq-interactive (raw text in, the task's generator) decodes with the lean beam by default,
    the same hypotheses as fairseq's own generator, in its buffered batches."""
    text = "\n".join((tiny_corpus / "test.en").read_text().splitlines()[:12]) + "\n"
    base = [fairseq_cli("fairseq-interactive"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task",
            "fast_translation", "--path", str(tiny_model), "--source-lang", "en", "--target-lang", "de",
            "--bpe", "sentencepiece", "--sentencepiece-model", str(tiny_corpus / "spm.model"), "--beam", "5",
            "--lenpen", "0.6", "--buffer-size", "5", "--batch-size", "5", "--cpu", "--max-len-b", str(MAX_LEN_B)]
    fast = run(base, input=text)
    plain = run(base + ["--beam-search", "fairseq"], input=text)
    assert "beam search: the lean beam search" in fast.stdout + fast.stderr
    (fast_h, fast_s), (plain_h, plain_s) = _h_lines(fast.stdout), _h_lines(plain.stdout)
    assert len(plain_h) == 12 and fast_h == plain_h
    assert max(abs(a - b) for a, b in zip(plain_s, fast_s)) < 1e-4
