"""The draft-and-verify engine: lossless (identical to fairseq's greedy SequenceGenerator on every
test sentence, batch 1 and 8 with mixed lengths), KV-cache cut-back, edge cases, clear errors, and
one end-to-end fairseq-generate run."""
import copy
import dataclasses
import math
import time

import pytest
import torch

from _all_generators import PLAIN_DRAFTERS
from conftest import PLUGIN_DIR, fairseq_cli, run
from engine_helpers import (MAX_LEN_B, decode_all, engine, load, mismatches, mixed_batches,
                            reference_greedy)


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model):
    torch.manual_seed(0)
    models, task = load(tiny_corpus, tiny_model)
    batches = {bs: mixed_batches(task, bs) for bs in (1, 8)}
    refs = {bs: reference_greedy(models, task, batches[bs]) for bs in (1, 8)}
    return models, task, batches, refs


@pytest.mark.parametrize("bs", [1, 8])
@pytest.mark.parametrize("drafter", PLAIN_DRAFTERS)
def test_exact_equals_fairseq_greedy_on_every_sentence(setup, drafter, bs):
    models, task, batches, refs = setup
    gen = engine(models, task, drafter, block_size=3)
    hyps = decode_all(gen, models, batches[bs])
    assert len(hyps) == 120
    assert mismatches(refs[bs], hyps) == []
    for k, ref in refs[bs].items():  # scores agree up to fp32 rounding of the batched verifier call
        assert torch.allclose(hyps[k]["positional_scores"], ref["positional_scores"], atol=1e-4)
        assert abs(float(hyps[k]["score"]) - float(ref["score"])) < 1e-4
        assert hyps[k]["tokens"][-1].item() == task.target_dictionary.eos()
    stats = gen.stats
    assert stats["sentences"] == 120 and stats["produced_tokens"] == sum(len(h["tokens"]) for h in hyps.values())
    assert stats["accepted_tokens"] == stats["produced_tokens"]
    if drafter == "none":
        assert stats["iterations"] == stats["produced_tokens"]  # one token per row per call
        assert stats["draft_tokens"] == 0
    else:
        assert stats["iterations"] <= stats["produced_tokens"]
        assert gen.mean_accepted() >= 1.0


class _SpyStep:
    """The verifier's lean step, recording whether each call ran under torch.inference_mode."""

    def __init__(self, inner):
        self.inner, self.modes = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        self.modes.append(torch.is_inference_mode_enabled())
        return self.inner(*args, **kwargs)


def test_decodes_under_inference_mode_and_hands_back_ordinary_tensors(setup):
    """generate() runs its decode under torch.inference_mode (the step's dispatch is cheaper there)
    yet returns tensors fairseq's generate.py may update in place (it divides positional_scores)."""
    models, task, batches, refs = setup
    gen = engine(models, task, "input_copy", block_size=3)
    spy = gen.verifier.step = _SpyStep(gen.verifier.step)
    hyps = decode_all(gen, models, batches[8])
    assert spy.modes and all(spy.modes)
    assert mismatches(refs[8], hyps) == []
    for h in hyps.values():
        for key in ("tokens", "score", "positional_scores"):
            assert not h[key].is_inference(), key
        h["positional_scores"].div_(2.0)  # as fairseq_cli/generate.py does; an inference tensor refuses it


def test_the_timed_width_is_the_default_only_where_acceptance_is_exact(setup):
    """A width chosen from timings under a lossy rule would make the output depend on the clock."""
    from fairseq_plugins.decoding.width_policy import AdaptiveBlock

    models, task, _, _ = setup
    assert isinstance(engine(models, task, "input_copy").policy, AdaptiveBlock)
    assert type(engine(models, task, "input_copy", acceptance="topk").policy) is not AdaptiveBlock
    assert type(engine(models, task, "input_copy", adaptive_block_size="off").policy) is not AdaptiveBlock
    assert isinstance(engine(models, task, "input_copy", acceptance="topk", adaptive_block_size="on").policy,
                      AdaptiveBlock)
    assert type(engine(models, task, "none").policy) is not AdaptiveBlock


def test_a_drafter_without_drafts_stops_being_asked(setup):
    """A drafter asked for a draft may have none (IAD when no source n-gram matches): the engine
    must tell the width policy, or the width stays open and the drafter is asked every iteration."""
    models, task, batches, refs = setup
    gen = engine(models, task, "input_copy", block_size=3)
    from fairseq_plugins.decoding.drafters import Draft

    asks = []

    def propose(out, n_gen, longest=None):  # never a draft: PAD in every slot (no slot worth scoring)
        asks.append(1)
        return Draft.of(out.new_full((out.size(0), 3), task.target_dictionary.pad()), task.target_dictionary.pad())

    gen.drafter.propose = propose
    hyps = decode_all(gen, models, batches[1])
    assert mismatches(refs[1], hyps) == []
    assert gen.stats["draft_tokens"] == 0
    assert len(asks) < 0.25 * gen.stats["model_calls"], (len(asks), gen.stats["model_calls"])


def test_jacobi_block_of_one_greedy_oracle_and_larger_blocks(setup):
    models, task, batches, refs = setup
    for drafter, block in (("jacobi_pgj", 1), ("jacobi_hgj", 6)):
        assert mismatches(refs[8], decode_all(engine(models, task, drafter, block_size=block), models, batches[8])) == []
    gen = engine(models, task, "jacobi_pgj", block_size=3, jacobi_length="greedy_oracle")
    assert mismatches(refs[8], decode_all(gen, models, batches[8])) == []
    assert gen.stats["length_oracle"] is True and gen.stats["oracle_model_calls"] > 0
    assert gen.stats["model_calls"] > gen.stats["oracle_model_calls"]  # the pre-run is counted too
    # the plain pre-run asks no drafter: the width policy (which learns across batches) never sees it
    begun = []
    begin = gen.policy.begin
    gen.policy.begin = lambda *a: begun.append(a) or begin(*a)
    decode_all(gen, models, batches[8])
    assert len(begun) == len(batches[8])
    hgj = engine(models, task, "jacobi_hgj", block_size=3, jacobi_length="greedy_oracle")
    decode_all(hgj, models, batches[8][:1])
    assert hgj.stats["length_oracle"] is False  # HGJ needs no length


def test_a_drafter_gets_greedys_lengths_through_one_call_of_its_context(setup):
    """The length oracle is no engine code: any drafter may ask ``ctx.greedy_lengths()`` (a greedy
    pre-run, counted as the oracle's) and gets the lengths of fairseq's greedy hypotheses, EOS included."""
    from fairseq_plugins.decoding.drafters import NoDraft

    models, task, batches, refs = setup
    seen = {}

    class AsksTheLength(NoDraft):
        def begin(self, ctx):
            super().begin(ctx)
            seen[len(seen)] = ctx.greedy_lengths().tolist()

    gen = engine(models, task, "none")
    gen.drafter = AsksTheLength()
    hyps = decode_all(gen, models, batches[8][:3])
    assert mismatches({k: refs[8][k] for k in hyps}, hyps) == []
    for b, sample in enumerate(batches[8][:3]):
        assert seen[b] == [len(refs[8][sid]["tokens"]) for sid in sample["id"].tolist()]
    assert gen.stats["length_oracle"] is True and gen.stats["oracle_model_calls"] * 2 == gen.stats["model_calls"]


def test_stats_accumulate_and_reset(setup):
    models, task, batches, _ = setup
    # fixed width: the cost-aware width follows timings, so two passes may make different calls
    gen = engine(models, task, "jacobi_hgj", adaptive_block_size="off")
    decode_all(gen, models, batches[8][:2])
    first = dict(gen.stats)
    decode_all(gen, models, batches[8][:2])
    assert gen.stats["model_calls"] == 2 * first["model_calls"] and gen.stats["sentences"] == 32
    gen.reset_stats()
    assert gen.stats["model_calls"] == 0 and gen.stats["iterations"] == 0


# ---- scoring only the columns some row uses (CPU) ----

@pytest.mark.parametrize("drafter", ["input_copy", "jacobi_hgj"])
def test_reading_the_host_on_a_cpu_changes_nothing(setup, drafter):
    """On a CPU the engine reads the host where it is free (IAD's anchors for a one-row batch, the
    running scores); as on a GPU (``host_reads = False``) it reads only its one sync.
    Hypotheses, scores bit for bit, and every count agree."""
    models, task, batches, _ = setup
    results = []
    for reads in (False, True):
        gen = engine(models, task, drafter, block_size=7, adaptive_block_size="off")
        gen.host_reads, gen.lazy_verify = reads, False  # the same products either way (chunks would round otherwise)
        hyps = {**decode_all(gen, models, batches[8]), **{-1 - k: h for k, h in
                                                          decode_all(gen, models, batches[1][:12]).items()}}
        results.append((hyps, dict(gen.stats)))
    (device, device_stats), (host, host_stats) = results
    assert mismatches(device, host) == []
    assert all(torch.equal(device[k]["positional_scores"], host[k]["positional_scores"]) for k in device)
    assert device_stats == host_stats and host_stats["draft_accepted"] > 0


@pytest.mark.parametrize("acceptance", ["exact", "topk", "min_block", "gad_pp"])
def test_scoring_until_every_row_rejected_changes_nothing(setup, acceptance):
    """The engine projects the fed columns chunk by chunk and stops once every row has rejected a
    draft token; hypotheses, scores and every count equal those of scoring all columns, under every
    prefix acceptance rule (the relaxed ones accept long drafts: several chunks)."""
    models, task, batches, _ = setup
    results = []
    for lazy in (False, True):  # full-width drafts (no timed width), so that the chunks matter
        gen = engine(models, task, "input_copy", acceptance=acceptance, block_size=7, gad_beta=5, gad_tau=5.0,
                     adaptive_block_size="off")
        gen.lazy_verify = lazy
        hyps = {**decode_all(gen, models, batches[8]), **{-1 - k: h for k, h in
                                                          decode_all(gen, models, batches[1][:12]).items()}}
        results.append((hyps, dict(gen.stats)))
    (full, full_stats), (lazy, lazy_stats) = results
    assert mismatches(full, lazy) == []
    for k in full:
        assert torch.allclose(full[k]["positional_scores"], lazy[k]["positional_scores"], atol=1e-5)
    assert full_stats == lazy_stats
    assert lazy_stats["draft_accepted"] > 0


def _burn(seconds):
    """Spend ``seconds`` of this process's CPU time (the engine's CPU clock counts no sleep)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _spy_choices(gen):
    """The scorer's choices, counted: {True: calls chunked, False: calls scored all at once}."""
    calls = {True: 0, False: 0}
    choose = gen.scorer.schedule.chunked

    def chunked(rows, m):
        choice = choose(rows, m)
        calls[choice] += 1
        return choice

    gen.scorer.schedule.chunked = chunked
    return calls


def _copying_the_answer(gen, batches, refs):
    """IAD copies fairseq's greedy output instead of the source (as in GEC, where most of the output is
    the input): drafts are accepted far into the call."""
    answers = {tuple(b["net_input"]["src_tokens"][0].tolist()): refs[int(b["id"][0])]["tokens"] for b in batches}
    begin = gen.drafter.begin

    def copying(ctx):
        answer = answers[tuple(ctx.src_tokens[0].tolist())].unsqueeze(0)
        begin(dataclasses.replace(ctx, src_tokens=answer, src_lengths=torch.tensor([answer.size(1)])))

    gen.drafter.begin = copying


@pytest.mark.parametrize("kernel", ["a read of the matrix per product", "a read per row"])
def test_the_engine_learns_from_the_timings_which_way_to_project_the_columns(setup, kernel):
    """A projection whose cost is per product (oneDNN's packed kernel at base size), with drafts
    accepted far into the call: the engine learns to project all columns at once.  One whose cost is
    per row (MKL's GEMM), with drafts rejected early (IAD's copies of an en-de source): chunk by
    chunk.  Every output is fairseq's greedy output."""
    models, task, batches, refs = setup
    per_product = kernel.endswith("product")
    gen = engine(models, task, "input_copy", block_size=7, adaptive_block_size="off")
    if per_product:
        _copying_the_answer(gen, batches[1][:40], refs[1])
    fixed, per_row = (0.003, 0.0) if per_product else (0.0, 0.0015)
    project = gen.verifier.project
    gen.verifier.project = lambda h: (_burn(fixed + per_row * h.shape[0] * h.shape[1]), project(h))[1]
    calls = _spy_choices(gen)
    hyps = decode_all(gen, models, batches[1][:40])
    assert mismatches({k: refs[1][k] for k in hyps}, hyps) == []
    share = calls[True] / (calls[True] + calls[False])
    reach = gen.scorer.schedule.buckets[1].reach
    if per_product:
        assert reach[4] > 0.5, reach  # most calls need three chunks or more: three products, not one
        assert share < 0.3, calls
    else:
        assert reach[2] < 0.3, reach  # most calls need one chunk
        assert share > 0.7, calls


# ---- KV cache cut-back ----

def _scratch_lprobs(verifier, src, tokens):
    """Feed ``tokens`` one at a time into a fresh cache; log-probs after each (reference)."""
    cache = verifier.begin(src, capacity=4)  # grows as needed
    out = []
    for t in range(tokens.size(1)):
        lp = verifier.log_probs(verifier(cache, tokens[:, t : t + 1], torch.full((tokens.size(0), 1), t))[0])
        cache.advance(1)
        out.append(lp[:, 0])
    return torch.stack(out, 1)


@torch.no_grad()
def test_decoding_after_rollback_equals_decoding_from_scratch(setup):
    """Per-row cut-back: rows keep different shares of a verified draft; what they decode next
    equals decoding their accepted prefix from scratch, also after a row leaves the batch."""
    from fairseq_plugins.decoding.verifier import Verifier

    models, task, batches, _ = setup
    verifier = Verifier(models[0])
    sample = batches[8][0]
    src = {k: v[:2] for k, v in sample["net_input"].items()}
    eos = task.target_dictionary.eos()
    g = torch.Generator().manual_seed(3)
    seq = torch.randint(4, len(task.target_dictionary), (2, 12), generator=g)
    seq[:, 0] = eos
    ref = _scratch_lprobs(verifier, src, seq)
    # rows: 1 prefix token, then a 5-token draft of which row 0 keeps 2 and row 1 keeps 4
    cache = verifier.begin(src, capacity=16)
    verifier(cache, seq[:, :1], torch.zeros(1, dtype=torch.long))
    cache.advance(1)
    wrong = seq[:, 1:6].clone()
    wrong[0, 2:] = 7  # row 0's draft is right for 2 tokens only, the rest is junk that must be cut
    verifier(cache, wrong, torch.arange(1, 6))
    cache.commit(torch.tensor([2, 4]), 5, aligned=False)  # lengths 3 and 5
    # continue each row from its own accepted length with the true tokens
    nxt = torch.stack([seq[0, 3:6], seq[1, 5:8]])
    pos = torch.stack([torch.arange(3, 6), torch.arange(5, 8)])
    got = verifier.log_probs(verifier(cache, nxt, pos)[0])
    assert torch.allclose(got[0], ref[0, 3:6], atol=1e-5)
    assert torch.allclose(got[1], ref[1, 5:8], atol=1e-5)
    # keep all 3 in both rows (lengths 6 and 8), then drop row 1: the remaining row is alone and aligned
    cache.commit(torch.tensor([3, 3]), 8, aligned=False)
    cache.select_rows(torch.tensor([0]), aligned=True, max_length=6)
    got0 = verifier.log_probs(verifier(cache, seq[:1, 6:9], torch.arange(6, 9))[0])
    assert torch.allclose(got0[0], ref[0, 6:9], atol=1e-5)
    cache.commit(torch.tensor([1]), 7, aligned=True)  # accept 1 of 3: cut back the single row
    got0 = verifier.log_probs(verifier(cache, seq[:1, 7:11], torch.arange(7, 11))[0])
    assert torch.allclose(got0[0], ref[0, 7:11], atol=1e-5)


# ---- edge cases ----

def _one(task, tokens):
    ds = task.dataset("test")
    item = dict(ds[0])
    item["source"] = torch.tensor(tokens + [task.source_dictionary.eos()])
    return ds.collater([item])


def test_empty_and_one_token_sources_match_fairseq(setup):
    models, task, _, _ = setup
    samples = [_one(task, []), _one(task, [task.source_dictionary.index("▁Datei")])]
    ref = reference_greedy(models, task, samples)
    for drafter in ("none", "jacobi_hgj", "jacobi_pj", "input_copy"):
        assert mismatches(ref, decode_all(engine(models, task, drafter), models, samples)) == []


def test_source_longer_than_max_positions_is_a_clear_error(setup):
    from fairseq_plugins.decoding.engine import DraftVerifyOptionError

    models, task, _, _ = setup
    limit = models[0].encoder.max_positions()
    sample = _one(task, [100] * (limit + 5))
    with pytest.raises(DraftVerifyOptionError, match="at most .*skip-invalid-size-inputs-valid-test"):
        decode_all(engine(models, task, "jacobi_hgj"), models, [sample])


def _eos_loving(model, eos):
    """A copy of the model whose output layer prefers EOS everywhere (a bias on its logit)."""
    m = copy.deepcopy(model)
    old = m.decoder.output_projection
    proj = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    proj.weight = old.weight
    with torch.no_grad():
        proj.bias.zero_()
        proj.bias[eos] = 50.0
    m.decoder.output_projection = proj
    return m.eval()


@pytest.mark.parametrize("min_len", [0, 1, 3])
def test_eos_first_and_min_len_as_fairseq(setup, min_len):
    models, task, batches, _ = setup
    eos = task.target_dictionary.eos()
    eos_models = [_eos_loving(models[0], eos)]
    ref = reference_greedy(eos_models, task, batches[8][:2], min_len=min_len)
    assert all(len(h["tokens"]) == max(1, min_len + 1) for h in ref.values())  # EOS as soon as allowed
    for drafter in ("none", "jacobi_pgj", "input_copy"):
        gen = engine(eos_models, task, drafter, min_len=min_len)
        assert mismatches(ref, decode_all(gen, eos_models, batches[8][:2])) == []


def test_drafts_running_past_eos_are_cut_at_eos(setup):
    """A drafter plugged in without touching the engine: it proposes the greedy output followed by
    junk after EOS; everything up to EOS is accepted in one call and nothing after it survives."""
    from fairseq_plugins.decoding.drafters import Draft, Drafter

    models, task, batches, refs = setup
    pad = task.target_dictionary.pad()

    class OracleDrafter(Drafter):
        name = "oracle"

        def __init__(self, answers):
            self.answers = answers

        def begin(self, ctx):
            super().begin(ctx)
            self.rows = [self.answers[i] for i in self.ids]

        def max_draft(self, max_len):
            return max_len + 5

        def propose(self, out, n_gen, longest=None):
            k = max(len(a) for a in self.rows) + 5
            draft = torch.full((len(self.rows), k), pad, dtype=torch.long)
            for r, a in enumerate(self.rows):
                tail = torch.cat([a, torch.tensor([17, 23, 5, 9, 11])])  # junk past EOS
                draft[r, : len(tail) - int(n_gen[r])] = tail[int(n_gen[r]):]
            return Draft.of(draft, pad)

        def select_rows(self, rows):
            self.rows = [self.rows[i] for i in rows.tolist()]

    gen = engine(models, task, "none", adaptive_block_size="off")  # the whole draft in one call
    answers = {k: v["tokens"] for k, v in refs[8].items()}
    gen.drafter = OracleDrafter(answers)
    hyps = {}
    for sample in batches[8]:
        gen.drafter.ids = sample["id"].tolist()
        hyps.update(decode_all(gen, models, [sample]))
    assert mismatches(refs[8], hyps) == []
    assert gen.stats["model_calls"] == len(batches[8])  # one verification call per batch
    assert gen.stats["iterations"] == 120


# ---- clear errors ----

def test_beam_larger_than_one_with_a_drafter_is_a_clear_error(setup):
    from fairseq_plugins.decoding.engine import DraftVerifyOptionError

    models, task, _, _ = setup
    with pytest.raises(DraftVerifyOptionError, match="--beam 1"):
        engine(models, task, "jacobi_hgj", beam=5)


# ---- end to end ----

def _h_lines(stdout):
    lines = sorted(l.split("\t") for l in stdout.splitlines() if l.startswith("H-"))
    return [(l[0], l[2]) for l in lines], [float(l[1]) for l in lines]


def test_fairseq_generate_with_hgj_prints_the_same_hypotheses(tiny_corpus, tiny_model):
    base = [fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task",
            "fast_translation", "--path", str(tiny_model), "--beam", "1", "--batch-size", "16", "--cpu",
            "--gen-subset", "test", "--max-len-b", str(MAX_LEN_B)]
    plain = run(base + ["--beam-search", "fairseq"]).stdout  # fairseq's own greedy
    proc = run(base + ["--drafter", "jacobi_hgj", "--block-size", "3"])
    fast = proc.stdout
    # the run ends with one summary line of its counts (every drafter)
    summary = [l for l in (proc.stdout + proc.stderr).splitlines() if "draft-and-verify |" in l]
    assert len(summary) == 1 and "drafter jacobi_hgj | acceptance exact | 120 sentences | model calls" in summary[0]
    (plain_h, plain_s), (fast_h, fast_s) = _h_lines(plain), _h_lines(fast)
    assert len(plain_h) == 120
    assert fast_h == plain_h  # ids and hypotheses identical
    # the printed scores agree to fp32 rounding (a k-token call sums in another order than k 1-token calls)
    assert max(abs(a - b) for a, b in zip(plain_s, fast_s)) < 1e-4


@pytest.mark.parametrize("drafter", ["none", "jacobi_hgj", "input_copy"])
def test_half_precision_decodes_on_cpu(tiny_corpus, tiny_model, drafter):
    """The fp16 path (the GPU setting) in every dtype-sensitive place -- cache buffers, the cached
    transposed output projection, fp32 log-softmax, acceptance -- without a GPU: a half model
    decodes every sentence and agrees with fairseq's own half-precision greedy on nearly all
    (not asserted to be identical: the two compute in different orders in fp16)."""
    models, task = load(tiny_corpus, tiny_model)
    models[0].half()
    batches = mixed_batches(task, 8)
    ref = reference_greedy(models, task, batches)
    got = decode_all(engine(models, task, drafter), models, batches)
    assert set(got) == set(ref)
    same = sum(got[i]["tokens"].tolist() == ref[i]["tokens"].tolist() for i in ref) / len(ref)
    assert same >= 0.9, same


@pytest.mark.parametrize("on_host", [False, True], ids=["torch adds", "numpy adds on the host"])
def test_running_scores_add_one_float32_log_prob_per_column_as_fairseq(on_host):
    """The running score before each fed column is the row's score plus the draft tokens' log-probs
    added one at a time in float32 (fairseq adds one per step; a cumsum rounds otherwise), a
    non-finite log-prob (an inadmissible draft token) adding 0: bit for bit, against a plain loop."""
    from fairseq_plugins.decoding.scoring import running_scores

    g = torch.Generator().manual_seed(0)
    lprobs = torch.randn(5, 8, 30, generator=g) * 7
    lprobs[1, 2, :] = -math.inf
    lprobs[3, 4, :] = math.nan
    draft = torch.randint(0, 30, (5, 7), generator=g)
    score = torch.randn(5, generator=g) * 50
    expected = torch.empty(5, 8)
    for b in range(5):
        acc = score[b].clone()
        expected[b, 0] = acc
        for i in range(7):
            lp = lprobs[b, i, draft[b, i]]
            acc = acc + (lp if torch.isfinite(lp) else torch.zeros(()))
            expected[b, i + 1] = acc
    got = running_scores(score, lprobs, draft, on_host=on_host)
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    assert torch.equal(running_scores(score, lprobs, draft[:, :0], on_host=on_host), score.unsqueeze(1))
    # a double accumulation (what cumsum does on a CPU) rounds otherwise: the inputs are wide enough to show it
    assert not torch.equal(torch.cat([score.unsqueeze(1), score.unsqueeze(1) + torch.nan_to_num(
        lprobs[:, :7].gather(2, draft.unsqueeze(2)).squeeze(2), nan=0.0, neginf=0.0).double().cumsum(1).float()], 1), expected)
