"""The cheap GAD drafter (``--arch shallow_drafter_tiny``, docs/METHODS.md §3): it reads the
verifier's frozen encoder, its prefix is causal so decoding caches it, and its decode-time logits
are the training forward's; GAD with it is lossless; a drafter of another verifier is refused.
With ``--verifier-features`` it also reads the verifier's hidden states one position back
(teacher-forced at training, from the engine's verification calls at decoding).

``shallow_drafter``: about 100 fairseq-train updates against the tiny verifier on the verifier's
own greedy outputs of the test sources (distilled data), cached like the other fixtures;
``feature_drafter``: the same with ``--verifier-features``.
"""
import copy
import hashlib

import pytest
import torch

from conftest import PLUGIN_DIR, REPO, cached, fairseq_cli, run
from _device_trap import device_trap
from engine_helpers import decode_all, distill_test_set, engine, greedy_references, mismatches, reference_greedy
from fairseq_plugins.decoding.width_policy import WidthPolicy

BLOCK = 4
DRAFT_VOCAB = 700  # of 1096 ids: the drafter proposes only the 700 most frequent tokens
PAD, BOS = 1, 2
SHALLOW_ARGS = [
    "--task", "nar_drafter", "--arch", "shallow_drafter_tiny", "--criterion", "nar_drafter_loss",
    "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "128", "--decoder-layers", "2", "--dropout", "0.0", "--optimizer", "adam",
    "--adam-betas", "(0.9,0.98)", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "30",
    "--label-smoothing", "0.1", "--num-workers", "0", "--seed", "1", "--cpu", "--no-epoch-checkpoints",
    "--disable-validation", "--no-save-optimizer-state", "--save-interval", "1000", "--log-format", "simple",
    "--log-interval", "50", "--block-size", str(BLOCK), "--draft-vocab", str(DRAFT_VOCAB), "--max-tokens", "4096", "--max-update", "100",
]
FEATURE_ARGS = SHALLOW_ARGS + ["--verifier-features"]
EAGLE_ARGS = FEATURE_ARGS + ["--no-encoder-attention"]  # the source reaches it through the verifier's states alone


def _code_key():
    h = hashlib.sha1()
    for rel in ("models/shallow_drafter.py", "tasks/nar_drafter.py", "criterions/nar_drafter_loss.py",
                "data/nar_drafter_batch.py", "data/mask_dictionary.py"):
        h.update((REPO / "fairseq_plugins" / rel).read_bytes())
    return h.hexdigest()[:12]


def _trained(tiny_corpus, tiny_model, name, args):
    def build(save):
        data = distill_test_set(tiny_corpus, tiny_model, save)
        proc = run([fairseq_cli("fairseq-train"), str(data), "--user-dir", PLUGIN_DIR, "--save-dir", str(save),
                    "--verifier-path", str(tiny_model)] + args)
        (save / "train.log").write_text(proc.stdout + proc.stderr)

    return cached(name, [str(tiny_model), _code_key()] + args, build) / "checkpoint_last.pt"


@pytest.fixture(scope="session")
def shallow_drafter(tiny_corpus, tiny_model):
    return _trained(tiny_corpus, tiny_model, "shallow-drafter", SHALLOW_ARGS)


@pytest.fixture(scope="session")
def feature_drafter(tiny_corpus, tiny_model):
    return _trained(tiny_corpus, tiny_model, "shallow-drafter-features", FEATURE_ARGS)


@pytest.fixture(scope="session")
def eagle_drafter(tiny_corpus, tiny_model):
    return _trained(tiny_corpus, tiny_model, "shallow-drafter-eagle", EAGLE_ARGS)


DRAFTERS = ["shallow_drafter", "feature_drafter", "eagle_drafter"]
FEATURE_DRAFTERS = ["feature_drafter", "eagle_drafter"]


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model):
    return greedy_references(tiny_corpus, tiny_model)


def shallow(models, task, path, **kw):
    task.cfg.drafter_path = str(path)
    return engine(models, task, "nar", **kw)


def test_checkpoint_holds_no_encoder_and_the_verifiers_fingerprint(setup, shallow_drafter):
    from fairseq_plugins.models.shallow_drafter import weights_fingerprint

    models, _, _, _ = setup
    state = torch.load(shallow_drafter, map_location="cpu", weights_only=False)["model"]
    assert not [k for k in state if k.startswith("encoder.")]
    assert sum(1 for k in state if k.startswith("decoder.layers.") and k.endswith("fc1.weight")) == 2  # --decoder-layers 2
    assert torch.equal(state["verifier_fingerprint"], weights_fingerprint(models[0].encoder))
    assert not [k for k in state if "verifier_feature" in k or k == "verifier_decoder_fingerprint"]  # a plain drafter


def test_feature_training_learns_w_f_and_records_the_verifiers_decoder(setup, feature_drafter):
    """``fairseq-train ... --verifier-features`` (the tiny CLI training of the fixture): W_f moved away
    from its zero start, and the checkpoint fingerprints the verifier's decoder too, saving none of it."""
    from fairseq_plugins.models.shallow_drafter import weights_fingerprint

    models, _, _, _ = setup
    state = torch.load(feature_drafter, map_location="cpu", weights_only=False)["model"]
    assert not [k for k in state if k.startswith("encoder.")]  # neither the verifier's encoder nor its decoder
    w_f = state["decoder.verifier_feature_proj.weight"]
    assert w_f.shape == (64, 64) and w_f.abs().max() > 1e-3
    assert torch.equal(state["verifier_fingerprint"], weights_fingerprint(models[0].encoder))
    assert torch.equal(state["verifier_decoder_fingerprint"], weights_fingerprint(models[0].decoder))
    checkpoint = torch.load(feature_drafter, map_location="cpu", weights_only=False)
    assert checkpoint["optimizer_history"][-1]["num_updates"] == 100
    assert checkpoint["cfg"]["model"]["verifier_features"]


def test_eagle_drafter_has_no_encoder_attention_and_the_options_say_why_it_needs_the_states(
        tiny_corpus, tiny_model, eagle_drafter):
    """``--no-encoder-attention`` (with ``--verifier-features``): the trained checkpoint's layers have
    no encoder attention (the lossless and training-forward tests above decode it); without the
    verifier's states the drafter would never see the source, so the option alone is refused."""
    from fairseq_plugins.models.shallow_drafter import ShallowDrafterError

    state = torch.load(eagle_drafter, map_location="cpu", weights_only=False)["model"]
    assert not [k for k in state if "encoder_attn" in k] and "decoder.verifier_feature_proj.weight" in state
    assert [k for k in torch.load(tiny_model, map_location="cpu", weights_only=False)["model"] if "encoder_attn" in k]
    with pytest.raises(ShallowDrafterError, match="--no-encoder-attention .*add --verifier-features"):
        _build_with_task(tiny_corpus, ["--verifier-path", str(tiny_model), "--no-encoder-attention"])


def test_decoding_pass_with_its_cache_gives_the_training_forward(setup, shallow_drafter):
    """Cached prefix + fresh tokens + k masks per call, prefixes of mixed lengths growing by mixed
    amounts, rows leaving twice: the logits equal the one-pass training forward (1e-5)."""
    from fairseq_plugins.data.nar_drafter_batch import block_input
    from fairseq_plugins.decoding.drafters import DraftContext
    from fairseq_plugins.decoding.drafters.shallow import ShallowDrafter

    models, task, batches, _ = setup
    d = shallow(models, task, shallow_drafter, block_size=BLOCK).drafter
    assert isinstance(d, ShallowDrafter)
    net = batches[8][0]["net_input"]
    verifier_encoder = models[0].encoder
    g = torch.Generator().manual_seed(1)
    out = torch.randint(4, 500, (8, 60), generator=g)
    out[:, 0] = BOS
    with torch.no_grad():
        enc = verifier_encoder.forward_torchscript(net)
        d.begin(DraftContext(net["src_tokens"], net["src_lengths"], 50, 60, None, BOS, BOS, PAD, encoder_out=enc))
        rows = list(range(8))
        for n_gen, keep in (([0, 3, 7, 1, 0, 12, 5, 2], None), ([1, 4, 9, 5, 1, 13, 8, 3], None),
                            ([6, 14, 9], [1, 5, 6]), ([9, 12], [0, 2]), ([14], [1])):
            if keep is not None:
                d.select_rows(torch.tensor(keep))
                rows = [rows[i] for i in keep]
            n_gen = torch.tensor(n_gen)
            o = out[rows]
            src = {k: v[rows] for k, v in net.items()}
            lean = d.block_logits(o, n_gen, int(n_gen.max()))
            inp = block_input(o, n_gen, d.k, PAD, d.mask)
            plain = d.model.decoder(inp, encoder_out=verifier_encoder(src["src_tokens"], src["src_lengths"]),
                                    block=d.k)[0]
            assert lean.shape == (len(rows), BLOCK, DRAFT_VOCAB)
            assert torch.allclose(plain[:, :BLOCK], lean, atol=1e-5), (plain[:, :BLOCK] - lean).abs().max()
    assert d.cache.lengths.tolist() == [15]  # BOS + 14 tokens cached: each token was computed once


def _begun(drafter, models, net, rows, width, seed):
    """``drafter`` begun on ``net``'s batch (the verifier's encoder output, max_len = width - 10) and
    random outputs ``(rows, width)`` after BOS to decode against."""
    from fairseq_plugins.decoding.drafters import DraftContext

    out = torch.randint(4, 500, (rows, width), generator=torch.Generator().manual_seed(seed))
    out[:, 0] = BOS
    with torch.no_grad():
        enc = models[0].encoder.forward_torchscript(net)
        drafter.begin(DraftContext(net["src_tokens"], net["src_lengths"], width - 10, width, None, BOS, BOS, PAD,
                                   encoder_out=enc))
    return out


def test_rows_that_leave_before_the_first_proposal_leave_the_lazily_made_cache_too(setup, shallow_drafter):
    """The cache is made at a batch's first proposal (a batch decoded plain never pays for it):
    rows dropped before it, twice, are the rows it is made for; logits equal the training forward."""
    from fairseq_plugins.data.nar_drafter_batch import block_input

    models, task, batches, _ = setup
    d = shallow(models, task, shallow_drafter, block_size=BLOCK).drafter
    net = batches[8][0]["net_input"]
    out = _begun(d, models, net, 8, 60, seed=3)
    with torch.no_grad():
        d.select_rows(torch.tensor([1, 5, 6]))
        d.select_rows(torch.tensor([0, 2]))
        assert d.cache is None  # nothing proposed yet
        rows = [1, 6]
        src = {k: v[rows] for k, v in net.items()}
        for n_gen in ([4, 9], [9, 12]):
            n_gen = torch.tensor(n_gen)
            lean = d.block_logits(out[rows], n_gen, int(n_gen.max()))
            plain = d.model.decoder(block_input(out[rows], n_gen, d.k, PAD, d.mask),
                                    encoder_out=models[0].encoder(src["src_tokens"], src["src_lengths"]), block=d.k)[0]
            assert torch.allclose(plain[:, :BLOCK], lean, atol=1e-5), (plain[:, :BLOCK] - lean).abs().max()


def _of_depth(models, task, path, layers):
    """The trained drafter at ``path`` (2 layers), or cut to its first layer (the demo config's depth)."""
    from fairseq_plugins.decoding.drafters.shallow import ShallowDrafter

    d = shallow(models, task, path, block_size=BLOCK).drafter
    if layers == 1:
        model = copy.deepcopy(d.model)
        model.decoder.layers = model.decoder.layers[:1]
        d = ShallowDrafter(model, BLOCK, d.k, d.vocab, PAD, verifier=models[0])
    assert len(d.step.layers) == layers
    return d


@pytest.mark.parametrize("layers", [1, 2])
def test_one_row_pass_computes_the_mask_slots_alone_and_gives_the_training_forward(setup, shallow_drafter, layers):
    """At batch 1 the last layer carries on with the k mask slots alone (the new tokens give it only
    their keys/values; no attention mask): over calls of 1-5 new tokens the logits still equal the
    one-pass training forward (1e-5), and each token is cached once.  ``layers=1``: the trained
    drafter cut to its first layer (the demo config's depth)."""
    from fairseq_plugins.data.nar_drafter_batch import block_input

    models, task, batches, _ = setup
    d = _of_depth(models, task, shallow_drafter, layers)
    net = batches[1][0]["net_input"]
    out = _begun(d, models, net, 1, 40, seed=2)
    with torch.no_grad():
        enc = models[0].encoder.forward_torchscript(net)
        for n_gen in (0, 3, 4, 9, 11):  # 1 (BOS), 3, 1, 5, 2 tokens new to the cache
            lean = d.block_logits(out, torch.tensor([n_gen]), n_gen)
            inp = block_input(out, torch.tensor([n_gen]), d.k, PAD, d.mask)
            plain = d.model.decoder(inp, encoder_out=enc, block=d.k)[0]
            assert lean.shape == (1, BLOCK, DRAFT_VOCAB)
            assert torch.allclose(plain[:, :BLOCK], lean, atol=1e-5), (plain[:, :BLOCK] - lean).abs().max()
    assert d.cache.lengths.tolist() == [12] and d.cache.max_length == 12


@pytest.mark.parametrize("drafter", DRAFTERS)
@pytest.mark.parametrize("bs", [1, 8])
@pytest.mark.parametrize("width", ["off", "auto"])  # the paper's k every call; the cost-aware width (default)
def test_gad_exact_with_the_shallow_drafter_equals_fairseq_greedy(setup, request, drafter, bs, width):
    """Batch 8: mixed source lengths, rows finishing at different times and leaving the batch."""
    models, task, batches, refs = setup
    gen = shallow(models, task, request.getfixturevalue(drafter), block_size=BLOCK, adaptive_block_size=width)
    hyps = decode_all(gen, models, batches[bs])
    assert len(hyps) == 120 and mismatches(refs[bs], hyps) == []
    for k, ref in refs[bs].items():
        assert abs(float(hyps[k]["score"]) - float(ref["score"])) < 1e-4
    assert gen.stats["drafter"] == "nar"
    if width == "off":  # trained on the verifier's outputs: most drafts are right, several tokens per call
        assert gen.mean_accepted() > 1.8, gen.mean_accepted()


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_shallow_drafters_keep_to_the_device_and_decode_in_half(setup, request, drafter):
    """The GPU path, checked on a CPU: under the device trap (no tensor made without a device, no
    operation mixing devices) the one-row path (batch 1) and the batched one (batch 8, rows leaving)
    decode fairseq's greedy output; with a ``.half()`` verifier (the drafter follows its dtype, the
    verifier's states come in half) every sentence gets a hypothesis without NaN, mostly fairseq's own
    half greedy (another summation order: not assumed identical)."""
    import math

    models, task, batches, refs = setup
    path = request.getfixturevalue(drafter)
    for bs in (1, 8):
        some = batches[bs][: 24 // bs]
        gen = shallow(models, task, path, block_size=BLOCK, adaptive_block_size="off")
        with device_trap():
            hyps = decode_all(gen, models, some)
        assert len(hyps) == 24 and mismatches({i: refs[bs][i] for i in hyps}, hyps) == []
    half = [copy.deepcopy(models[0]).half()]
    ref = reference_greedy(half, task, batches[8][:3])
    gen = shallow(half, task, path, block_size=BLOCK, adaptive_block_size="off")
    hyps = decode_all(gen, half, batches[8][:3])
    assert set(hyps) == set(ref) and gen.drafter.step.decoder.embed_tokens.weight.dtype == torch.float16
    assert all(len(h["tokens"]) and not math.isnan(float(h["score"])) for h in hyps.values())
    same = sum(hyps[i]["tokens"].tolist() == ref[i]["tokens"].tolist() for i in ref) / len(ref)
    assert same >= 0.8, same


@pytest.mark.parametrize("drafter, acceptance, width", [
    ("shallow_drafter", "exact", "off"), ("shallow_drafter", "all", "off"), ("feature_drafter", "exact", "off"),
    ("feature_drafter", "exact", "every third call")])
def test_batched_gad_with_the_shallow_drafter_syncs_once_per_iteration(setup, request, drafter, acceptance, width):
    """Rows of different cache lengths (batch 8): the drafter knows its call's width from the
    verifier's columns it observed (or its own draft, alone), and stores the verifier's states
    without reading them, so the engine's one host sync per iteration stays the only one
    (tests/_sync_counter.py); also when it catches up over calls it was not asked in."""
    from _sync_counter import SyncCounter
    from test_gpu_safety import SETUP_SYNCS_PER_BATCH, _budget_message, _plugin_syncs

    models, task, batches, refs = setup
    gen = shallow(models, task, request.getfixturevalue(drafter), acceptance=acceptance, block_size=BLOCK,
                  adaptive_block_size="off")
    # as on a GPU: every column projected at once, nothing read on the host but the sync (on a CPU the engine reads by design)
    gen.lazy_verify, gen.host_reads = False, False
    if width != "off":
        gen.policy = EveryThirdCall()
    few = batches[8][:3]
    decode_all(gen, models, few[:1])  # warm (one-off preparations: the positional table)
    gen.reset_stats()
    counter = SyncCounter()
    with counter:
        hyps = decode_all(gen, models, few)
    calls = gen.stats["model_calls"]
    assert calls > 0
    assert _plugin_syncs(counter) <= calls + SETUP_SYNCS_PER_BATCH * len(few), _budget_message(counter, calls, len(few))
    if acceptance == "exact":
        assert mismatches({k: refs[8][k] for k in hyps}, hyps) == []


def test_drafter_alone_reads_the_verifiers_encoder_and_ignores_batching(setup, shallow_drafter):
    models, task, batches, _ = setup
    out = {bs: decode_all(shallow(models, task, shallow_drafter, acceptance="all", block_size=3), models,
                          batches[bs]) for bs in (1, 8)}
    assert len(out[1]) == 120 and mismatches(out[1], out[8]) == []


def test_a_drafter_of_another_verifier_is_refused_a_half_precision_one_accepted(setup, shallow_drafter):
    from fairseq_plugins.decoding.drafters.nar import NARDrafterError

    models, task, _, _ = setup
    other = copy.deepcopy(models[0])
    with torch.no_grad():
        other.encoder.layers[0].fc1.weight[0, 0] += 0.01
    with pytest.raises(NARDrafterError, match="trained against another verifier .*--verifier-path"):
        shallow([other], task, shallow_drafter)
    shallow([copy.deepcopy(models[0]).half()], task, shallow_drafter)  # fp16 (fairseq-generate --fp16): same verifier


def _build(tiny_corpus, extra):
    from fairseq import options, tasks

    argv = [str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR] + SHALLOW_ARGS + extra
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    return tasks.setup_task(args).build_model(args)


def test_training_options_are_checked(tiny_corpus, tiny_model):
    from fairseq_plugins.models.shallow_drafter import ShallowDrafterError
    from fairseq_plugins.tasks.nar_drafter import NARDrafterOptionError

    with pytest.raises(NARDrafterOptionError, match="give the verifier checkpoint with --verifier-path"):
        _build(tiny_corpus, [])
    with pytest.raises(NARDrafterOptionError, match="instead of --init-encoder-from"):
        _build(tiny_corpus, ["--init-encoder-from", str(tiny_model), "--verifier-path", str(tiny_model)])
    with pytest.raises(ShallowDrafterError, match="give --decoder-embed-dim 64"):
        _build(tiny_corpus, ["--verifier-path", str(tiny_model), "--decoder-embed-dim", "32"])
    model = _build(tiny_corpus, ["--verifier-path", str(tiny_model)])
    model.train()
    assert not model.encoder.encoder.training  # the verifier's encoder stays in eval mode
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and not [n for n in trained if n.startswith("encoder.")]
    state = model.state_dict()  # as a checkpoint holds it: no encoder; loading keeps the attached one
    assert not [k for k in state if k.startswith("encoder.")]
    model.load_state_dict(state, strict=True)
    state["verifier_fingerprint"] = state["verifier_fingerprint"].flip(1)  # a drafter of another verifier
    with pytest.raises(ShallowDrafterError, match="trained against another verifier than --verifier-path"):
        model.load_state_dict(state, strict=True)


# ---- --verifier-features: the verifier's hidden states one position back (EAGLE) ----

def _loud(drafter, seed=0):
    """The drafter with a random W_f: the short training leaves it small, so a state read at the
    wrong position would hardly move the logits; with this one it moves them a lot."""
    w = drafter.feature_proj.weight
    with torch.no_grad():
        w.copy_(torch.randn(w.shape, generator=torch.Generator().manual_seed(seed)) * 0.3)
    return drafter


def _states_at(inp, slots, states, k):
    """The training forward's ``verifier_features`` for ``block_input``'s ``(inp, slots)``, written
    out: at the column of position ``j >= 1`` of a row, ``states[b, j - 1]``; zeros at PAD, BOS and
    the ``k`` mask slots."""
    feats = states.new_zeros(inp.size(0), inp.size(1), states.size(2))
    for b in range(inp.size(0)):
        for t in range(inp.size(1) - k):
            j = int(slots[b, t])
            if inp[b, t] != PAD and j >= 1:
                feats[b, t] = states[b, j - 1]
    return feats


def _observe(drafter, states, n_before, counts, width, seed):
    """A verification call as the engine reports it: ``width`` columns fed per row, the verifier's
    state at position ``n_before + c`` in column ``c``; past each row's ``counts`` the columns are
    rejected draft tokens, whose states (random here) the drafter must never read."""
    from fairseq_plugins.decoding.drafters.base import StepResult

    cols = torch.arange(width)
    at = (n_before.unsqueeze(1) + cols).clamp(max=states.size(1) - 1)
    fed = states.gather(1, at.unsqueeze(2).expand(-1, -1, states.size(2)))
    garbage = torch.randn(fed.shape, generator=torch.Generator().manual_seed(seed)) * 5
    fed = torch.where((cols.unsqueeze(0) >= counts.unsqueeze(1)).unsqueeze(2), garbage, fed)
    top = torch.zeros(n_before.size(0), width, dtype=torch.long)
    drafter.observe(StepResult(draft=top[:, 1:], top=top, top_lprob=top.float(), accepted=counts - 1, count=counts,
                               n_before=n_before, out=None, hidden=fed))


@pytest.mark.parametrize("drafter", FEATURE_DRAFTERS)
def test_observed_states_give_the_training_forward_through_rejections_and_leaving_rows(setup, request, drafter):
    """Verification calls of mixed widths, each row accepting a different number of columns and
    rejecting the rest, rows leaving twice: the incremental decode's logits equal the training
    forward's given the states one position back (1e-5)."""
    from fairseq_plugins.data.nar_drafter_batch import block_input

    models, task, batches, _ = setup
    d = _loud(shallow(models, task, request.getfixturevalue(drafter), block_size=BLOCK).drafter)
    net = batches[8][0]["net_input"]
    out = _begun(d, models, net, 8, 60, seed=4)
    states = torch.randn(8, 60, 64, generator=torch.Generator().manual_seed(5))  # the verifier's, per position
    rows, n_gen = list(range(8)), torch.zeros(8, dtype=torch.long)
    schedule = (([1, 1, 1, 1, 1, 1, 1, 1], 1, None), ([3, 1, 5, 2, 1, 4, 2, 5], 5, None),
                ([2, 5, 1], 5, [1, 5, 6]), ([1, 3], 4, [0, 2]), ([4], 5, [1]), ([1], 1, None))
    with torch.no_grad():
        for call, (counts, width, keep) in enumerate(schedule):
            if keep is not None:
                d.select_rows(torch.tensor(keep))
                rows, n_gen = [rows[i] for i in keep], n_gen[keep]
            counts = torch.tensor(counts)
            _observe(d, states[rows], n_gen, counts, width, seed=call)
            n_gen = n_gen + counts
            lean = d.block_logits(out[rows], n_gen, int(n_gen.max()))
            inp, slots = block_input(out[rows], n_gen, d.k, PAD, d.mask, with_slots=True)
            src = {k: v[rows] for k, v in net.items()}
            plain = d.model.decoder(inp, encoder_out=models[0].encoder(src["src_tokens"], src["src_lengths"]),
                                    block=d.k, verifier_features=_states_at(inp, slots, states[rows], d.k))[0]
            assert torch.allclose(plain[:, :BLOCK], lean, atol=1e-5), (call, (plain[:, :BLOCK] - lean).abs().max())
    assert n_gen.tolist() == [12] and d.cache.lengths.tolist() == [13]  # BOS + 12 tokens, each cached once


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("drafter", FEATURE_DRAFTERS)
def test_one_row_with_observed_states_gives_the_training_forward(setup, request, drafter, layers):
    """Batch 1 (the mask slots alone in the last layer): calls of 1-5 new tokens, the verifier having
    rejected part of its columns each time; logits equal the training forward's (1e-5)."""
    from fairseq_plugins.data.nar_drafter_batch import block_input

    models, task, batches, _ = setup
    d = _loud(_of_depth(models, task, request.getfixturevalue(drafter), layers))
    net = batches[1][0]["net_input"]
    out = _begun(d, models, net, 1, 40, seed=2)
    states = torch.randn(1, 40, 64, generator=torch.Generator().manual_seed(6))
    n_gen = torch.tensor([0])
    with torch.no_grad():
        enc = models[0].encoder.forward_torchscript(net)
        for call, (count, width) in enumerate(((0, 0), (3, 5), (1, 4), (5, 5), (2, 2), (4, 5))):
            if count:
                _observe(d, states, n_gen, torch.tensor([count]), width, seed=call)
                n_gen = n_gen + count
            lean = d.block_logits(out, n_gen, int(n_gen))  # 1 (BOS), 3, 1, 5, 2, 4 tokens new to the cache
            inp, slots = block_input(out, n_gen, d.k, PAD, d.mask, with_slots=True)
            plain = d.model.decoder(inp, encoder_out=enc, block=d.k, verifier_features=_states_at(inp, slots, states, d.k))[0]
            assert torch.allclose(plain[:, :BLOCK], lean, atol=1e-5), (call, (plain[:, :BLOCK] - lean).abs().max())
    assert d.cache.lengths.tolist() == [16]


def test_teacher_forced_states_are_the_verifiers_one_position_back(setup):
    """At training the frozen verifier's decoder runs over the left-padded prefixes: each column of
    position j gets the state fairseq's decoder computes at j - 1 over the whole target."""
    from fairseq_plugins.data.nar_drafter_batch import drafter_sample
    from fairseq_plugins.models.shallow_drafter import teacher_forced_features

    models, task, batches, _ = setup
    sample = batches[8][2]
    verifier = models[0]
    length = sample["target"].ne(PAD).sum(dim=1)
    p = torch.minimum(torch.tensor([0, 1, 2, 5, 9, 30, 3, 7]), length - 1)
    batch = drafter_sample(sample, BLOCK, BOS, PAD, len(task.target_dictionary), prefix_lengths=p)
    prev = batch["net_input"]["prev_output_tokens"]
    with torch.no_grad():
        enc = verifier.encoder(sample["net_input"]["src_tokens"], src_lengths=sample["net_input"]["src_lengths"])
        feats = teacher_forced_features(verifier.decoder, prev, enc, BLOCK, PAD)
        whole = verifier.decoder(sample["net_input"]["prev_output_tokens"], encoder_out=enc, features_only=True)[0]
    T = prev.size(1)
    assert feats.shape == (8, T, 64)
    for b in range(8):
        first = T - BLOCK - 1 - int(p[b])  # BOS's column
        assert not feats[b, : first + 1].any() and not feats[b, T - BLOCK :].any()
        assert torch.allclose(feats[b, first + 1 : T - BLOCK], whole[b, : int(p[b])], atol=1e-5)
    assert p.max() > 20 and p.min() == 0  # long and empty prefixes


class EveryThirdCall(WidthPolicy):
    """A width policy that drafts in every third call and takes plain steps between: the drafter's
    state (its cache, the verifier's states) must catch up over several calls it was not asked in."""

    def begin(self, bsz, k, clock=None):
        super().begin(bsz, k)
        self.calls = 0

    def width(self):
        self.calls += 1
        return self.k if self.calls % 3 == 0 else 0


def test_gad_asks_its_drafter_only_for_calls_that_score_the_draft(setup, shallow_drafter):
    """GAD proposes after the sync, once the next call's width is known: a call the width policy
    makes plain costs no proposal (asked an iteration ahead, it drafted once for nothing after every
    probe of the cost-aware width: the drafter's catch-up, ~2.5 plain steps each on en-de)."""
    models, task, batches, refs = setup
    gen = shallow(models, task, shallow_drafter, block_size=BLOCK)
    gen.policy = EveryThirdCall()
    d = gen.drafter
    asked, widths = [], []
    propose, verify = d.propose, gen._verify
    d.propose = lambda *a, **kw: asked.append(1) or propose(*a, **kw)
    gen._verify = lambda run, rows: widths.append(rows.draft.size) or verify(run, rows)
    hyps = decode_all(gen, models, batches[8])
    assert mismatches(refs[8], hyps) == []
    drafted = sum(w > 0 for w in widths)
    assert drafted > 30 and len(asked) == drafted, (len(asked), drafted, len(widths))


@pytest.mark.parametrize("width", ["off", "every third call"])
def test_states_the_engine_hands_over_are_the_verifiers_teacher_forced_ones(setup, feature_drafter, width):
    """GAD at batch 8 (rows leaving at different times, the verifier rejecting drafts): at every
    proposal the drafter's logits equal the training forward's, whose states the frozen verifier's
    decoder computes teacher-forced over the rows' outputs (the states decoding takes from the
    verification calls; 1e-4: the lean verifier step against fairseq's decoder).  Drafting in every
    third call only, the states of the calls between are stored when the next proposal reads them
    (and before rows leave)."""
    from fairseq_plugins.data.nar_drafter_batch import block_input
    from fairseq_plugins.models.shallow_drafter import teacher_forced_features

    models, task, batches, refs = setup
    gen = shallow(models, task, feature_drafter, block_size=BLOCK, adaptive_block_size="off")
    if width != "off":
        gen.policy = EveryThirdCall()
    d = _loud(gen.drafter)
    verifier = models[0]
    seen = {"diff": [], "rows": [], "fresh": set()}
    begin, select_rows, block_logits = d.begin, d.select_rows, d.block_logits

    def spy_begin(ctx):
        begin(ctx)
        seen.update(order=torch.arange(ctx.src_tokens.size(0)), enc=ctx.encoder_out)

    def spy_select_rows(rows):
        select_rows(rows)
        seen["order"] = seen["order"][rows]

    def spy_block_logits(out, n_gen, longest, fresh=None):
        lean = block_logits(out, n_gen, longest, fresh=fresh)
        enc = verifier.encoder.reorder_encoder_out(seen["enc"], seen["order"])
        inp = block_input(out, n_gen, d.k, PAD, d.mask)
        plain = d.model.decoder(inp, encoder_out=enc, block=d.k,
                                verifier_features=teacher_forced_features(verifier.decoder, inp, enc, d.k, PAD))[0]
        seen["diff"].append(float((plain[:, : d.block] - lean).abs().max()))
        seen["rows"].append(out.size(0))
        return lean

    d.begin, d.select_rows, d.block_logits = spy_begin, spy_select_rows, spy_block_logits
    hyps = decode_all(gen, models, batches[8][:5])
    assert mismatches({k: refs[8][k] for k in hyps}, hyps) == []
    assert len(seen["diff"]) > (50 if width == "off" else 15) and max(seen["diff"]) < 1e-4, max(seen["diff"])
    assert len(set(seen["rows"])) >= 4  # rows left the batch at different times
    assert gen.stats["draft_accepted"] < gen.stats["draft_tokens"]  # drafts were rejected


def _build_with_task(tiny_corpus, extra):
    from fairseq import options, tasks

    argv = [str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR] + SHALLOW_ARGS + extra
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    return task, task.build_model(args)


def test_a_new_feature_drafter_is_the_plain_one_until_w_f_learns(tiny_corpus, tiny_model):
    """W_f starts at zero: with the plain drafter's weights, the feature drafter's training forward
    gives exactly the plain one's logits although the verifier's states it reads are not zero; the
    option adds W_f and the verifier's (frozen, unsaved) decoder, nothing else."""
    from fairseq_plugins.data.nar_drafter_batch import drafter_sample

    task, plain = _build_with_task(tiny_corpus, ["--verifier-path", str(tiny_model)])
    _, feat = _build_with_task(tiny_corpus, ["--verifier-path", str(tiny_model), "--verifier-features"])
    assert plain.encoder.decoder is None and plain.verifier_states(None, None, BLOCK) is None  # no cost without
    w_f = feat.decoder.verifier_feature_proj.weight
    assert not w_f.any() and w_f.requires_grad
    assert not feat.encoder.decoder.training and not [p for p in feat.encoder.decoder.parameters() if p.requires_grad]
    extra = set(feat.state_dict()) - set(plain.state_dict())
    assert extra == {"decoder.verifier_feature_proj.weight", "verifier_decoder_fingerprint"}
    missing = feat.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert set(missing) == extra
    task.load_dataset("test")
    ds = task.dataset("test")
    sample = ds.collater([ds[i] for i in range(8)])
    batch = drafter_sample(sample, BLOCK, BOS, PAD, task.mask_idx, prefix_lengths=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]))
    net = batch["net_input"]
    plain.eval(), feat.eval()
    with torch.no_grad():
        states = feat.verifier_states(net["prev_output_tokens"], feat.encoder(net["src_tokens"], net["src_lengths"]), BLOCK)
        assert states.abs().sum() > 1
        ours = feat(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], block=BLOCK)[0]
        theirs = plain(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], block=BLOCK)[0]
    assert torch.equal(ours, theirs)


def test_a_feature_drafter_of_another_verifier_decoder_is_refused_and_cannot_draft_alone(setup, shallow_drafter,
                                                                                         feature_drafter):
    from fairseq_plugins.decoding.drafters.nar import NARDrafterError

    models, task, batches, _ = setup
    other = copy.deepcopy(models[0])
    with torch.no_grad():
        other.decoder.layers[0].fc1.weight[0, 0] += 0.01  # same encoder, another decoder
    with pytest.raises(NARDrafterError, match="trained against another verifier .*--verifier-features its decoder"):
        shallow([other], task, feature_drafter)
    shallow([other], task, shallow_drafter)  # the plain drafter reads the encoder only
    shallow([copy.deepcopy(models[0]).half()], task, feature_drafter)  # fp16: the same verifier
    gen = shallow(models, task, feature_drafter, acceptance="all")
    with pytest.raises(NARDrafterError, match="--verifier-features: it reads the verifier's hidden states.*--acceptance exact"):
        decode_all(gen, models, batches[8][:1])


def test_feature_training_options_are_checked(tiny_corpus, tiny_model):
    from fairseq_plugins.models.shallow_drafter import ShallowDrafterError

    _, model = _build_with_task(tiny_corpus, ["--verifier-path", str(tiny_model), "--verifier-features"])
    model.train()
    assert not model.encoder.decoder.training  # the verifier's decoder stays in eval mode
    state = model.state_dict()
    assert not [k for k in state if k.startswith("encoder.")]
    model.load_state_dict(state, strict=True)  # resuming: the attached verifier's decoder stays
    assert model.encoder.decoder is not None
    state["verifier_decoder_fingerprint"] = state["verifier_decoder_fingerprint"].flip(1)
    with pytest.raises(ShallowDrafterError, match="trained against another verifier than --verifier-path"):
        model.load_state_dict(state, strict=True)
    with pytest.raises(ShallowDrafterError, match="reads the verifier's hidden states .*--verifier-features"):
        model.decoder(torch.tensor([[BOS, 5, 6, 7]]), encoder_out=None, block=2)
