"""What a GPU user would hit first, checked on a CPU (issue 18), over every generator of the plugin
(tests/_all_generators.py):

* decoding never mutates the model (parameters, buffers, devices, dtypes, fairseq's sinusoidal
  table), also for a .half() model;
* NaN log-probs are masked as fairseq masks them, and no loop runs past max_len whatever the
  logits (NaN for one token; NaN everywhere);
* the device trap (tests/_device_trap.py): no tensor is created without a device and no op mixes
  devices, on the CPU and the full-projection (GPU) paths, and in one training step of every model
  and criterion; it catches an injected forgotten device;
* the sync budget (tests/_sync_counter.py): at most one host synchronisation per engine iteration
  and per beam step, no host-to-device copy inside a loop.
"""
import dataclasses
import math

import pytest
import torch

from _all_generators import (ACCEPTANCES, BEAM_CASES, BEAM_IDS, BEAM_SIZE, ENGINE_DRAFTERS, BackwardOnly, beam_generator,
                             beam_model, blockwise_model, engine_generator, model_state, nar_drafter_setup,
                             random_sources, reordered_training_setup, state_changes)
from _device_trap import DeviceMixError, device_trap
from _sync_counter import SyncCounter
from engine_helpers import decode_all, load, mismatches, mixed_batches, reference_greedy
from test_gad import gad_drafter  # noqa: F401  (the cached GAD drafter fixture)

ENGINE_CASES = [(d, "exact") for d in ENGINE_DRAFTERS] + [("nar", "all")]


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model, gad_drafter):  # noqa: F811
    models, task = load(tiny_corpus, tiny_model)
    blockwise, _, _ = blockwise_model(tiny_corpus, tiny_model)
    batches = mixed_batches(task, 4)[:2]  # 8 sentences of mixed lengths in 2 batches
    return models, task, blockwise, gad_drafter, batches


def build(setup, drafter, acceptance="exact", **kw):
    models, task, blockwise, nar_path, _ = setup
    return engine_generator(models, task, drafter, acceptance, blockwise=blockwise, nar_path=nar_path, **kw)


@pytest.fixture(scope="module")
def beam_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("beam_models")
    return {case[0]: beam_model(root / case[0], case) for case in BEAM_CASES}


# ---- 1. decoding never mutates the model ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_no_generator_mutates_the_model(setup, beam_models, dtype):
    models, task, blockwise, nar_path, batches = setup
    changed = {}
    for drafter, acceptance in ENGINE_CASES:
        gen, used = build(setup, drafter, acceptance)
        for m in used:
            m.to(dtype)
        before = [model_state(m) for m in used]
        decode_all(gen, used, batches[:1])
        for m, b in zip(used, before):
            diff = state_changes(b, model_state(m))
            if diff:
                changed[f"{drafter}/{acceptance}"] = diff
    for m in models + [blockwise]:
        m.float()
    for case in BEAM_CASES:
        btask, model = beam_models[case[0]]
        model.to(dtype)
        before = model_state(model)
        beam_generator(btask, model, case).generate([model], random_sources(1, 2))
        diff = state_changes(before, model_state(model))
        model.float()
        if diff:
            changed[case[0]] = diff
    assert not changed, changed


def test_the_model_state_check_sees_a_replaced_positional_table(setup):
    """The check above can fail: fairseq's sinusoidal table is an attribute, not a buffer."""
    models, *_ = setup
    pos = models[0].decoder.embed_positions
    assert isinstance(getattr(pos, "weights", None), torch.Tensor), "the tiny model has sinusoidal positions"
    before = model_state(models[0])
    saved = pos.weights
    try:
        pos.weights = pos.get_embedding(saved.size(0) + 1, saved.size(1), pos.padding_idx)
        assert any("embed_positions.weights" in c for c in state_changes(before, model_state(models[0])))
    finally:
        pos.weights = saved


# ---- 1. NaN log-probs and max_len ----
# A NaN logit makes the whole log-softmax row NaN (an fp16 overflow to inf: NaN at that token, -inf
# elsewhere), so what decoding meets is a sentence whose log-probs are all NaN/-inf.  fairseq masks
# NaN to -inf; its own greedy then asserts at max_len.  Here such a sentence must stop at max_len,
# and the other sentences of its batch must decode as without it.

def _nan_source_token(encoder, token):
    """Untie the encoder's token embedding and make ``token``'s NaN: every sentence holding it gets
    NaN encoder states, so NaN logits at every step; returns a function that undoes it."""
    saved = encoder.embed_tokens
    emb = torch.nn.Embedding(saved.num_embeddings, saved.embedding_dim, padding_idx=saved.padding_idx)
    with torch.no_grad():
        emb.weight.copy_(saved.weight)
        emb.weight[token] = math.nan
    encoder.embed_tokens = emb.to(saved.weight)

    def undo():
        encoder.embed_tokens = saved

    return undo


def _token_of_one_source(batches):
    """A token id that occurs in exactly one source of ``batches``, and that sentence's id."""
    seen = {}
    for b in batches:
        for sid, row in zip(b["id"].tolist(), b["net_input"]["src_tokens"]):
            for tok in set(row.tolist()) - {0, 1, 2, 3}:
                seen.setdefault(tok, set()).add(sid)
    return min((tok, ids.pop()) for tok, ids in seen.items() if len(ids) == 1)


def _check_bounded(hyps, max_len, n):
    assert len(hyps) == n
    for h in hyps.values():
        assert 1 <= len(h["tokens"]) <= max_len + 1


@pytest.mark.parametrize("drafter,acceptance", ENGINE_CASES + [("input_copy", a) for a in ACCEPTANCES[1:]])
@pytest.mark.parametrize("full_projection", [False, True], ids=["cpu_path", "full_projection"])
def test_a_nan_sentence_stops_at_max_len_and_leaves_the_others_alone(setup, drafter, acceptance, full_projection):
    models, task, blockwise, nar_path, batches = setup
    token, bad = _token_of_one_source(batches)
    gen, used = build(setup, drafter, acceptance, full_projection=full_projection, max_len_b=10)
    clean = decode_all(gen, used, batches)
    target = gen.drafter.model if acceptance == "all" else used[0]  # the drafter alone: its own encoder
    undo = _nan_source_token(target.encoder, token)
    try:
        gen, used = build(setup, drafter, acceptance, full_projection=full_projection, max_len_b=10)
        if acceptance == "all":
            undo()
            undo = _nan_source_token(gen.drafter.model.encoder, token)
        hyps = decode_all(gen, used, batches)
    finally:
        undo()
    _check_bounded(hyps, 10, 8)
    if acceptance in ("exact", "all"):  # (lossy rules under an adaptive width may draft differently per batch)
        assert mismatches({k: v for k, v in clean.items() if k != bad},
                          {k: v for k, v in hyps.items() if k != bad}) == []
    if acceptance != "all":  # the verifier scored every token of the NaN sentence -inf, never NaN
        assert not math.isnan(float(hyps[bad]["score"]))


def _decode_with_nan_everywhere(setup, drafter, acceptance, max_len_b):
    """Hypotheses of the engine whose logits are NaN for every sentence (the output projection all
    NaN: the verifier's, or the drafter's own when it decodes alone)."""
    models, task, blockwise, nar_path, batches = setup
    full = drafter in ("none", "jacobi_pj")  # both paths of the verifier's scoring
    if acceptance == "all":  # the drafter alone: NaN in its own output projection (a fresh copy per generator)
        gen, used = build(setup, drafter, acceptance, max_len_b=max_len_b)
        gen.drafter.model.decoder.output_projection.weight.data.fill_(math.nan)
        return decode_all(gen, used, batches)
    target = blockwise if drafter == "blockwise" else models[0]
    proj = target.decoder.output_projection
    saved = proj.weight
    proj.weight = torch.nn.Parameter(torch.full_like(saved, math.nan), requires_grad=False)
    try:
        gen, used = build(setup, drafter, acceptance, max_len_b=max_len_b, full_projection=full)
        return decode_all(gen, used, batches)
    finally:
        proj.weight = saved


@pytest.mark.parametrize("drafter,acceptance", ENGINE_CASES)
def test_nan_everywhere_stops_at_max_len(setup, drafter, acceptance):
    """NaN logits for every sentence (the output projection all NaN): every loop ends at max_len."""
    hyps = _decode_with_nan_everywhere(setup, drafter, acceptance, 6)
    _check_bounded(hyps, 6, 8)


@pytest.mark.parametrize("drafter,acceptance", ENGINE_CASES)
def test_a_row_stopped_at_max_len_ends_with_eos_as_fairseq_finalizes_it(setup, drafter, acceptance):
    """Log-probs -inf everywhere (NaN masked), so even EOS is -inf at max_len and the row is stopped
    there, not ended by a chosen EOS.  fairseq's greedy asserts at that point (sequence_generator.py:
    ``assert step < max_len``), and every hypothesis it does finalize ends with EOS at its last step
    (``tokens_clone[:, step] = self.eos``): so does the engine's, max_len + 1 tokens, EOS last only."""
    models, task, blockwise, nar_path, batches = setup
    eos = task.target_dictionary.eos()
    hyps = _decode_with_nan_everywhere(setup, drafter, acceptance, 6)
    assert len(hyps) == 8
    for h in hyps.values():
        tokens = h["tokens"].tolist()
        assert len(tokens) == 6 + 1 and tokens[-1] == eos and eos not in tokens[:-1], tokens
    if drafter == "none":  # what fairseq itself does in the same situation
        proj = models[0].decoder.output_projection
        saved = proj.weight
        proj.weight = torch.nn.Parameter(torch.full_like(saved, math.nan), requires_grad=False)
        try:
            with pytest.raises(AssertionError, match="6 < 6"):
                reference_greedy(models, task, batches[:1], max_len_b=6)
        finally:
            proj.weight = saved


@pytest.mark.parametrize("where", ["everywhere", "one_token"])
def test_nan_drafts_are_only_rejected_and_the_output_stays_fairseq_greedy(setup, where):
    """GAD's drafter with NaN logits (its output projection all NaN, or one token's row NaN, which
    its argmax then proposes everywhere): the drafts are ordinary token ids that the verifier
    rejects, and ``exact`` still gives fairseq's greedy output token for token."""
    models, task, blockwise, nar_path, batches = setup
    gen, used = build(setup, "nar", "exact", adaptive_block_size="off")  # draft at every call
    weight = gen.drafter.model.decoder.output_projection.weight.data  # the generator's own copy
    if where == "everywhere":
        weight.fill_(math.nan)
    else:
        weight[task.target_dictionary.index(",")].fill_(math.nan)
    hyps = decode_all(gen, used, batches)
    assert gen.stats["draft_tokens"] > 0
    assert mismatches(reference_greedy(models, task, batches), hyps) == []


@pytest.mark.parametrize("case", BEAM_CASES, ids=BEAM_IDS)
@pytest.mark.parametrize("everywhere", [False, True], ids=["one_sentence", "everywhere"])
def test_beam_stops_at_max_len_with_nan_and_leaves_the_others_alone(beam_models, case, everywhere):
    btask, model = beam_models[case[0]]
    eos = btask.target_dictionary.eos()
    sample = random_sources(1, eos)
    src = sample["net_input"]["src_tokens"]
    token = int(src[0, -2])  # the last word of sentence 0; NaN for every sentence when ``everywhere``
    clean = beam_generator(btask, model, case, max_len_b=7).generate([model], sample)
    if everywhere:
        src = src.clone()
        src[:, -2] = token
        sample = {"id": sample["id"], "net_input": {"src_tokens": src, "src_lengths": sample["net_input"]["src_lengths"]}}
    others = [i for i in range(4) if not everywhere and token not in src[i].tolist()]
    undo = _nan_source_token(model.encoder, token)
    try:
        hyps = beam_generator(btask, model, case, max_len_b=7).generate([model], sample)
    finally:
        undo()
    assert len(hyps) == 4
    for beams in hyps:
        assert len(beams) <= BEAM_SIZE
        assert all(len(h["tokens"]) <= 7 + 1 and h["tokens"][-1].item() == eos for h in beams)
    for i in others:
        assert [h["tokens"].tolist() for h in hyps[i]] == [h["tokens"].tolist() for h in clean[i]]


# ---- 2. the device trap ----

def test_the_trap_catches_a_forgotten_device():
    x = torch.ones(3)

    def forgot():
        return x + torch.zeros(3)

    def said():
        return x + torch.zeros(3, device=x.device)

    with pytest.raises(DeviceMixError, match="default device"):
        with device_trap():
            forgot()
    with device_trap():
        said()
        x + torch.tensor(2.0, device="cpu")  # a 0-dim CPU scalar is allowed, as on CUDA
    meta = torch.ones(3, device="meta")
    with pytest.raises(DeviceMixError, match="mixes tensors"):
        with device_trap():
            x + meta


def test_the_trap_catches_a_forgotten_device_inside_a_generator(setup, monkeypatch):
    """An engine whose drafter forgets a device in propose() fails under the trap, and only there."""
    models, task, blockwise, nar_path, batches = setup
    gen, used = build(setup, "input_copy")
    propose = type(gen.drafter).propose

    def careless(self, out, n_gen, longest=None):
        draft = propose(self, out, n_gen, longest=longest)
        return dataclasses.replace(draft, tokens=draft.tokens + torch.zeros(draft.tokens.shape,
                                                                          dtype=draft.tokens.dtype))  # no device=

    monkeypatch.setattr(type(gen.drafter), "propose", careless)
    decode_all(gen, used, batches[:1])  # fine on a CPU without the trap
    with pytest.raises(DeviceMixError):
        with device_trap():
            decode_all(gen, used, batches[:1])


@pytest.mark.parametrize("full_projection", [False, True], ids=["cpu_path", "full_projection"])
@pytest.mark.parametrize("acceptance", ACCEPTANCES)
def test_engine_under_the_device_trap(setup, acceptance, full_projection):
    failed = {}
    for drafter in ENGINE_DRAFTERS:
        gen, used = build(setup, drafter, acceptance, full_projection=full_projection)
        try:
            with device_trap():
                hyps = decode_all(gen, used, setup[4])
            assert len(hyps) == 8
        except DeviceMixError as err:
            failed[drafter] = repr(err)
    assert not failed, failed


def test_drafter_alone_under_the_device_trap(setup):
    gen, used = build(setup, "nar", "all")
    with device_trap():
        assert len(decode_all(gen, used, setup[4])) == 8


@pytest.mark.parametrize("case", BEAM_CASES, ids=BEAM_IDS)
def test_beam_under_the_device_trap(beam_models, case):
    btask, model = beam_models[case[0]]
    gen = beam_generator(btask, model, case)
    sample = random_sources(1, 2)
    with device_trap():
        assert all(gen.generate([model], sample))


def _train_step(task, model, criterion, sample):
    model.train()
    try:
        with device_trap():
            loss, sample_size, log = task.train_step(sample, model, criterion, BackwardOnly(), update_num=1)
    finally:
        model.eval()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert torch.isfinite(loss) and sample_size > 0
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_training_steps_under_the_device_trap(tiny_corpus, tiny_model, tmp_path):
    """One fairseq train_step (forward, criterion, backward) of every model/criterion of the plugin."""
    task, model, criterion, sample = reordered_training_setup(tmp_path / "reordered")
    _train_step(task, model, criterion, sample)

    blockwise, btask, bargs = blockwise_model(tiny_corpus, tiny_model)
    btask.load_dataset("valid")
    ds = btask.dataset("valid")
    sample = ds.collater([ds[i] for i in range(6)])
    _train_step(btask, blockwise, btask.build_criterion(bargs), sample)

    ntask, nar, ncrit = nar_drafter_setup(tiny_corpus, tiny_model)
    ntask.load_dataset("valid")
    ds = ntask.dataset("valid")
    torch.manual_seed(1)
    _train_step(ntask, nar, ncrit, ds.collater([ds[i] for i in range(6)]))


# ---- 3. the sync budget ----

# per batch, outside the loop: the encoder's padding check (step.begin), the first draft's width,
# the stats read at the end, and one read of the fingerprints of the weights each group copied
# (projection.WeightCheck): the verifier's encoder pass and decoder step, a drafter model's step and its
# vocabulary projection (the shallow drafter)
SETUP_SYNCS_PER_BATCH = 7


def _budget_message(counter, calls, batches):
    return (f"{counter.count('sync')} syncs for {calls} iterations in {batches} batches; by line: "
            f"{counter.where('sync')}; host-to-device: {counter.where('h2d')}")


def _plugin_syncs(counter):
    """Syncs the plugin's own lines make (fairseq's encoder checks its padding once per batch, ``via``)."""
    return sum(n for (k, _, at), n in counter.events.items() if k == "sync" and at.startswith("fairseq_plugins"))


@pytest.mark.parametrize("drafter,acceptance", ENGINE_CASES)
def test_engine_syncs_at_most_once_per_iteration(setup, drafter, acceptance):
    batches = setup[4]
    gen, used = build(setup, drafter, acceptance, full_projection=True)
    decode_all(gen, used, batches[:1])  # warm (one-off preparations: the positional table)
    gen.reset_stats()
    counter = SyncCounter()
    with counter:
        decode_all(gen, used, batches)
    calls = gen.stats["model_calls"]
    msg = _budget_message(counter, calls, len(batches))
    assert _plugin_syncs(counter) <= calls + SETUP_SYNCS_PER_BATCH * len(batches), msg
    # no host-to-device copy inside the loop: no line copies more than once per batch
    assert all(n <= len(batches) for n in counter.where("h2d").values()), msg


@pytest.mark.parametrize("case", BEAM_CASES, ids=BEAM_IDS)
def test_beam_syncs_at_most_once_per_step(beam_models, case):
    """The same batch searched to two length limits: the extra steps cost at most one sync each
    (what a search does once per batch -- the length limit, the encoder's padding check, the
    hypotheses' read-back -- is the same in both)."""
    btask, model = beam_models[case[0]]
    sample = random_sources(1, 2)
    runs = []
    for max_len_b in (6, 14):
        gen = beam_generator(btask, model, case, max_len_b=max_len_b)
        gen.generate([model], sample)  # warm
        gen.reset_stats()
        counter = SyncCounter()
        with counter:
            gen.generate([model], sample)
        runs.append((gen.stats["model_calls"], counter))
    (steps_a, a), (steps_b, b) = runs
    assert steps_b > steps_a
    msg = f"{_budget_message(a, steps_a, 1)}\n{_budget_message(b, steps_b, 1)}"
    assert _plugin_syncs(b) - _plugin_syncs(a) <= steps_b - steps_a, msg
    assert all(n <= 1 for n in b.where("h2d").values()), msg
