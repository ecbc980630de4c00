"""The cheap GAD drafter (``--arch shallow_drafter_tiny``, docs/METHODS.md §3): it reads the
verifier's frozen encoder, its prefix is causal so decoding caches it, and its decode-time logits
are the training forward's; GAD with it is lossless; a drafter of another verifier is refused.

``shallow_drafter``: about 100 fairseq-train updates against the tiny verifier on the verifier's
own greedy outputs of the test sources (distilled data), cached like the other fixtures.
"""
import copy
import hashlib

import pytest
import torch

from conftest import PLUGIN_DIR, REPO, cached, fairseq_cli, run
from engine_helpers import decode_all, distill_test_set, engine, greedy_references, mismatches

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


def _code_key():
    h = hashlib.sha1()
    for rel in ("models/shallow_drafter.py", "tasks/nar_drafter.py", "criterions/nar_drafter_loss.py",
                "data/nar_drafter_batch.py", "data/mask_dictionary.py"):
        h.update((REPO / "fairseq_plugins" / rel).read_bytes())
    return h.hexdigest()[:12]


@pytest.fixture(scope="session")
def shallow_drafter(tiny_corpus, tiny_model):
    def build(save):
        data = distill_test_set(tiny_corpus, tiny_model, save)
        proc = run([fairseq_cli("fairseq-train"), str(data), "--user-dir", PLUGIN_DIR, "--save-dir", str(save),
                    "--verifier-path", str(tiny_model)] + SHALLOW_ARGS)
        (save / "train.log").write_text(proc.stdout + proc.stderr)

    return cached("shallow-drafter", [str(tiny_model), _code_key()] + SHALLOW_ARGS, build) / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model):
    return greedy_references(tiny_corpus, tiny_model)


def shallow(models, task, path, **kw):
    task.cfg.drafter_path = str(path)
    return engine(models, task, "nar", **kw)


def test_checkpoint_holds_no_encoder_and_the_verifiers_fingerprint(setup, shallow_drafter):
    from fairseq_plugins.models.shallow_drafter import encoder_fingerprint

    models, _, _, _ = setup
    state = torch.load(shallow_drafter, map_location="cpu", weights_only=False)["model"]
    assert not [k for k in state if k.startswith("encoder.")]
    assert sum(1 for k in state if k.startswith("decoder.layers.") and k.endswith("fc1.weight")) == 2  # --decoder-layers 2
    assert torch.equal(state["verifier_fingerprint"], encoder_fingerprint(models[0].encoder))


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


@pytest.mark.parametrize("layers", [1, 2])
def test_one_row_pass_computes_the_mask_slots_alone_and_gives_the_training_forward(setup, shallow_drafter, layers):
    """At batch 1 the last layer carries on with the k mask slots alone (the new tokens give it only
    their keys/values; no attention mask): over calls of 1-5 new tokens the logits still equal the
    one-pass training forward (1e-5), and each token is cached once.  ``layers=1``: the trained
    drafter cut to its first layer (the demo config's depth)."""
    from fairseq_plugins.data.nar_drafter_batch import block_input
    from fairseq_plugins.decoding.drafters.shallow import ShallowDrafter

    models, task, batches, _ = setup
    d = shallow(models, task, shallow_drafter, block_size=BLOCK).drafter
    if layers == 1:
        model = copy.deepcopy(d.model)
        model.decoder.layers = model.decoder.layers[:1]
        d = ShallowDrafter(model, BLOCK, d.k, d.vocab, PAD, verifier=models[0])
    assert len(d.step.layers) == layers
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


@pytest.mark.parametrize("bs", [1, 8])
@pytest.mark.parametrize("width", ["off", "auto"])  # the paper's k every call; the cost-aware width (default)
def test_gad_exact_with_the_shallow_drafter_equals_fairseq_greedy(setup, shallow_drafter, bs, width):
    models, task, batches, refs = setup
    gen = shallow(models, task, shallow_drafter, block_size=BLOCK, adaptive_block_size=width)
    hyps = decode_all(gen, models, batches[bs])
    assert len(hyps) == 120 and mismatches(refs[bs], hyps) == []
    for k, ref in refs[bs].items():
        assert abs(float(hyps[k]["score"]) - float(ref["score"])) < 1e-4
    assert gen.stats["drafter"] == "nar"
    if width == "off":  # trained on the verifier's outputs: most drafts are right, several tokens per call
        assert gen.mean_accepted() > 1.8, gen.mean_accepted()


@pytest.mark.parametrize("acceptance", ["exact", "all"])
def test_batched_gad_with_the_shallow_drafter_syncs_once_per_iteration(setup, shallow_drafter, acceptance):
    """Rows of different cache lengths (batch 8): the drafter knows its call's width from the
    verifier's columns it observed (or its own draft, alone), so the engine's one host sync per
    iteration stays the only one (tests/_sync_counter.py)."""
    from _sync_counter import SyncCounter
    from test_gpu_safety import SETUP_SYNCS_PER_BATCH, _budget_message, _plugin_syncs

    models, task, batches, refs = setup
    gen = shallow(models, task, shallow_drafter, acceptance=acceptance, block_size=BLOCK, adaptive_block_size="off")
    gen.lazy_verify = False  # every column projected at once, as on a GPU (chunked scoring reads the host by design)
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
