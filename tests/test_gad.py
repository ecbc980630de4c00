"""GAD / GAD++ (Xia et al. §3.2): the NAR drafter's batch layout and glancing, its checkpoint
checks, and decoding through the engine -- GAD exact identical to fairseq greedy on every test
sentence (batch 1 and mixed-length batch 8), GAD++ with beta = 1 identical too, the drafter alone
unchanged by batching, clear errors, and fairseq-train -> fairseq-generate end to end.

Two drafters are trained through fairseq-train (cached like the other fixtures):

* ``gad_drafter``: a few updates on the tiny corpus (weak, but exactness must not depend on it);
* ``oracle_drafter``: trained on the verifier's own greedy outputs of the test sources, so its
  drafts are mostly right: decoding must then accept several tokens per call, which only works
  if the decode-time layout (left padding, BOS, masks, positions) is the training-time one.
"""
import copy
import hashlib

import pytest
import torch

from conftest import PLUGIN_DIR, REPO, cached, fairseq_cli, run
from engine_helpers import MAX_LEN_B, decode_all, distill_test_set, engine, greedy_references, mismatches

PAD, EOS, BOS, MASK = 1, 2, 2, 99

DRAFTER_ARGS = [
    "--task", "nar_drafter", "--arch", "nar_drafter_tiny", "--criterion", "nar_drafter_loss",
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
    "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128", "--share-all-embeddings", "--dropout", "0.0",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "50", "--label-smoothing", "0.1", "--num-workers", "0", "--seed", "1", "--cpu",
    "--no-epoch-checkpoints", "--disable-validation", "--no-save-optimizer-state", "--save-interval", "1000",
    "--log-format", "simple", "--log-interval", "50",
]
BLOCK = 4


def _code_key():
    """The drafter's training code: a change retrains the cached drafters."""
    h = hashlib.sha1()
    for rel in ("models/nar_drafter.py", "tasks/nar_drafter.py", "criterions/nar_drafter_loss.py",
                "data/nar_drafter_batch.py", "data/mask_dictionary.py"):
        h.update((REPO / "fairseq_plugins" / rel).read_bytes())
    return h.hexdigest()[:12]


def _train_drafter(data, save, verifier, updates, max_tokens):
    proc = run([fairseq_cli("fairseq-train"), str(data), "--user-dir", PLUGIN_DIR, "--save-dir", str(save),
                "--block-size", str(BLOCK), "--init-encoder-from", str(verifier), "--max-update", str(updates),
                "--max-tokens", str(max_tokens)] + DRAFTER_ARGS)
    (save / "train.log").write_text(proc.stdout + proc.stderr)


@pytest.fixture(scope="session")
def gad_drafter(tiny_corpus, tiny_model):
    """A few updates on the tiny corpus, encoder initialised from the verifier."""
    def build(save):
        _train_drafter(tiny_corpus / "bin", save, tiny_model, 60, 2048)

    return cached("gad-drafter", [str(tiny_model), _code_key()] + DRAFTER_ARGS, build) / "checkpoint_last.pt"


@pytest.fixture(scope="session")
def oracle_drafter(tiny_corpus, tiny_model):
    """Trained on the verifier's greedy outputs of the test sources (sequence-level distillation of
    exactly the sentences it will draft for)."""
    def build(save):
        distill_test_set(tiny_corpus, tiny_model, save)
        _train_drafter(save / "bin", save, tiny_model, 200, 4096)

    return cached("gad-oracle-drafter", [str(tiny_model), _code_key(), MAX_LEN_B] + DRAFTER_ARGS, build) / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model):
    return greedy_references(tiny_corpus, tiny_model)


def gad(models, task, drafter_path, **kw):
    task.cfg.drafter_path = str(drafter_path) if drafter_path is not None else None
    return engine(models, task, "nar", **kw)


# ---- training batch layout (hand-built) ----

def test_training_batch_layout_prefix_masks_targets():
    from fairseq.utils import make_positions

    from fairseq_plugins.data.nar_drafter_batch import drafter_sample

    target = torch.tensor([
        [5, 6, 7, EOS],        # m = 4, p = 0: the whole block is real
        [8, 9, EOS, PAD],      # m = 3, p = m-1 = 2: only the EOS is a target
        [5, 6, 7, EOS],        # m = 4, p = 2: EOS inside the block, then padding
        [10, EOS, PAD, PAD],   # m = 2, p = m-1 = 1
    ])
    sample = {"id": torch.arange(4), "ntokens": 11, "target": target,
              "net_input": {"src_tokens": torch.tensor([[4, EOS]] * 4), "src_lengths": torch.tensor([2] * 4),
                            "prev_output_tokens": torch.zeros(4, 4, dtype=torch.long)}}
    p = torch.tensor([0, 2, 2, 1])
    out = drafter_sample(sample, 3, BOS, PAD, MASK, prefix_lengths=p)
    M = MASK
    assert out["net_input"]["prev_output_tokens"].tolist() == [
        [PAD, PAD, BOS, M, M, M],
        [BOS, 8, 9, M, M, M],
        [BOS, 5, 6, M, M, M],
        [PAD, BOS, 10, M, M, M],
    ]
    assert out["target"].tolist() == [
        [5, 6, 7],
        [EOS, PAD, PAD],
        [7, EOS, PAD],
        [EOS, PAD, PAD],
    ]
    assert out["ntokens"] == 3 + 1 + 2 + 1
    assert out["net_input"]["src_tokens"] is sample["net_input"]["src_tokens"]
    assert sample["target"] is target  # the original batch is left alone
    # fairseq counts positions from the first non-pad token: BOS is position 0 in every row
    # (PAD slots get fairseq's padding position, shown as -1 here)
    pos = make_positions(out["net_input"]["prev_output_tokens"], PAD) - PAD - 1
    assert pos.tolist() == [[-1, -1, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5], [-1, 0, 1, 2, 3, 4]]


def test_prefix_lengths_are_uniform_over_0_to_m_minus_1():
    from fairseq_plugins.data.nar_drafter_batch import sample_prefix_lengths

    target = torch.tensor([[5, 6, 7, EOS], [EOS, PAD, PAD, PAD]])
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_prefix_lengths(target, PAD, g) for _ in range(4000)])
    assert draws[:, 1].unique().tolist() == [0]  # m = 1: the block starts at EOS
    counts = torch.bincount(draws[:, 0], minlength=4).tolist()
    assert len(counts) == 4 and all(800 < c < 1200 for c in counts), counts


def test_glancing_reveals_ratio_times_hamming_distance_among_real_slots():
    from fairseq_plugins.criterions.nar_drafter_loss import glancing_ratio, glancing_reveal

    target = torch.tensor([[5, 6, 7, 8, 9, 3], [5, 6, EOS, PAD, PAD, PAD], [5, 6, 7, 8, 9, 3]])
    pred = torch.tensor([[5, 0, 0, 0, 0, 3], [0, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 3]])
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        reveal = glancing_reveal(pred, target, PAD, 0.5, generator=g)
        # hamming distances 4, 3 (PAD slots never count), 0 -> floor(0.5 d) = 2, 1, 0 revealed
        assert reveal.sum(dim=1).tolist() == [2, 1, 0]
        assert not reveal[1, 3:].any()  # never a PAD slot
    assert glancing_reveal(pred, target, PAD, 0.0).sum() == 0
    assert glancing_ratio(0.5, 0.3, 100, 0) == 0.5 and glancing_ratio(0.5, 0.3, 100, 50) == pytest.approx(0.4)
    assert glancing_ratio(0.5, 0.3, 100, 1000) == pytest.approx(0.3)


def test_mask_is_appended_after_every_symbol():
    from fairseq.data import Dictionary

    from fairseq_plugins.data.mask_dictionary import MASK_SYMBOL, DictionaryMismatchError, check_aligned, with_mask

    d = Dictionary()
    for w in "a b c".split():
        d.add_symbol(w)
    m = with_mask(d)
    assert m.symbols[:-1] == d.symbols and m.symbols[-1] == MASK_SYMBOL and len(d) == len(m) - 1
    check_aligned(m.symbols, d.symbols, "target", "drafter", "verifier")
    other = copy.deepcopy(d)
    other.symbols[5], other.symbols[6] = other.symbols[6], other.symbols[5]
    with pytest.raises(DictionaryMismatchError, match="drafter's target dictionary .*verifier's target dictionary.*"
                       "first difference at id 5"):
        check_aligned(m.symbols, other.symbols, "target", "drafter", "verifier")
    with pytest.raises(DictionaryMismatchError, match="already holds"):
        with_mask(m)


# ---- decoding: GAD is lossless ----

@pytest.mark.parametrize("bs", [1, 8])
@pytest.mark.parametrize("which", ["gad_drafter", "oracle_drafter"])
@pytest.mark.parametrize("width", ["off", "auto"])  # the paper's k every call; the cost-aware width (default)
def test_gad_exact_equals_fairseq_greedy_on_every_sentence(setup, request, which, bs, width):
    models, task, batches, refs = setup
    drafter = request.getfixturevalue(which)
    gen = gad(models, task, drafter, block_size=BLOCK, adaptive_block_size=width)
    hyps = decode_all(gen, models, batches[bs])
    assert len(hyps) == 120
    assert mismatches(refs[bs], hyps) == []
    for k, ref in refs[bs].items():
        assert abs(float(hyps[k]["score"]) - float(ref["score"])) < 1e-4
    stats = gen.stats
    assert stats["drafter"] == "nar" and stats["produced_tokens"] == sum(len(h["tokens"]) for h in hyps.values())
    if width == "off":
        assert stats["draft_tokens"] == BLOCK * stats["iterations"]  # the drafter never proposes PAD
        if which == "oracle_drafter":  # mostly-right drafts: several tokens per verifier call
            assert gen.mean_accepted() > 1.8, gen.mean_accepted()


@pytest.mark.parametrize("bs", [1, 8])
def test_gad_pp_with_beta_1_equals_exact(setup, oracle_drafter, bs):
    models, task, batches, refs = setup
    gen = gad(models, task, oracle_drafter, acceptance="gad_pp", gad_beta=1, gad_tau=3.0, block_size=3)
    assert mismatches(refs[bs], decode_all(gen, models, batches[bs])) == []
    loose = gad(models, task, oracle_drafter, acceptance="gad_pp", gad_beta=5, gad_tau=3.0, block_size=3)
    hyps = decode_all(loose, models, batches[bs])
    assert len(hyps) == 120 and all(h["tokens"][-1].item() == task.target_dictionary.eos() for h in hyps.values())
    assert loose.mean_accepted() >= gen.mean_accepted()


# ---- the drafter alone (--acceptance all) ----

def test_drafter_alone_is_unchanged_by_batching_and_takes_k_tokens_per_call(setup, oracle_drafter):
    models, task, batches, refs = setup
    out = {}
    for bs in (1, 8):
        gen = gad(models, task, oracle_drafter, acceptance="all", block_size=3)
        out[bs] = decode_all(gen, models, batches[bs])
        if bs == 1:  # k tokens per call until the EOS: ceil(len / k) calls per sentence
            assert gen.stats["model_calls"] == sum(-(-len(h["tokens"]) // 3) for h in out[1].values())
    # left padding + key padding mask: a row's draft does not depend on the other rows of the batch
    assert mismatches(out[1], out[8]) == []
    eos = task.target_dictionary.eos()
    assert all(h["tokens"][-1].item() == eos and (h["tokens"][:-1] != eos).all() for h in out[1].values())


# ---- clear errors ----

def test_missing_drafter_path_is_a_clear_error(setup):
    from fairseq_plugins.decoding.drafters import DrafterNotAvailableError

    models, task, _, _ = setup
    with pytest.raises(DrafterNotAvailableError, match="--drafter nar needs a NAR drafter checkpoint: pass --drafter-path"):
        gad(models, task, None)


def test_verifier_checkpoint_as_drafter_is_a_clear_error(setup, tiny_model):
    from fairseq_plugins.decoding.drafters.nar import NARDrafterError

    models, task, _, _ = setup
    with pytest.raises(NARDrafterError, match="is not a NAR drafter checkpoint .*--task fast_translation"):
        gad(models, task, tiny_model)


def test_drafter_passed_as_verifier_is_a_clear_error(setup, gad_drafter):
    from fairseq import checkpoint_utils

    from fairseq_plugins.tasks.fast_translation import FastTranslationOptionError

    _, task, _, _ = setup
    with pytest.raises(FastTranslationOptionError, match="is a NAR drafter .*pass it as --drafter-path"):
        checkpoint_utils.load_model_ensemble([str(gad_drafter)], task=task)


def test_drafter_with_another_dictionary_is_a_clear_error(setup, gad_drafter, tmp_path):
    from fairseq_plugins.data.mask_dictionary import DictionaryMismatchError

    models, task, _, _ = setup
    state = torch.load(gad_drafter, map_location="cpu", weights_only=False)
    symbols = state["task_state"]["nar_drafter"]["target_symbols"]
    symbols[100], symbols[101] = symbols[101], symbols[100]  # as a corpus with another vocabulary would
    torch.save(state, tmp_path / "other.pt")
    with pytest.raises(DictionaryMismatchError,
                       match=r"drafter's target dictionary \(.*other.pt.*is not the verifier's target dictionary "
                             r"\(.*dict.de.txt.*first difference at id 100"):
        gad(models, task, tmp_path / "other.pt")


def test_block_size_above_the_drafters_and_drafter_alone_with_jacobi_are_clear_errors(setup, gad_drafter):
    from fairseq_plugins.decoding.drafters.nar import NARDrafterError
    from fairseq_plugins.decoding.engine import DraftVerifyOptionError

    models, task, _, _ = setup
    with pytest.raises(NARDrafterError, match=f"--block-size {BLOCK + 1} exceeds the drafter's block size k={BLOCK}"):
        gad(models, task, gad_drafter, block_size=BLOCK + 1)
    task.cfg.drafter_path = str(gad_drafter)
    with pytest.raises(DraftVerifyOptionError, match="--acceptance all decodes with the drafter alone"):
        engine(models, task, "jacobi_hgj", acceptance="all")


# ---- dtype ----

def test_drafter_follows_the_verifiers_dtype(setup, oracle_drafter):
    """fp16 verifier (as fairseq-generate --fp16 leaves it): the drafter is moved to fp16 too."""
    models, task, batches, _ = setup
    half = [copy.deepcopy(models[0]).half()]
    gen = gad(half, task, oracle_drafter, block_size=3)
    try:
        hyps = decode_all(gen, half, batches[8][:2])
    except RuntimeError as err:  # a CPU build without fp16 kernels
        pytest.skip(f"no fp16 on this CPU: {err}")
    assert next(gen.drafter.model.parameters()).dtype == torch.float16
    assert len(hyps) == 16


# ---- end to end ----

def _h_lines(stdout):
    return sorted((l.split("\t")[0], l.split("\t")[2]) for l in stdout.splitlines() if l.startswith("H-"))


def test_fairseq_generate_with_gad_prints_the_greedy_hypotheses(tiny_corpus, tiny_model, gad_drafter):
    base = [fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task",
            "fast_translation", "--path", str(tiny_model), "--beam", "1", "--batch-size", "16", "--cpu",
            "--gen-subset", "test", "--max-len-b", str(MAX_LEN_B)]
    plain = _h_lines(run(base + ["--beam-search", "fairseq"]).stdout)  # fairseq's own greedy
    fast = _h_lines(run(base + ["--drafter", "nar", "--drafter-path", str(gad_drafter), "--block-size", "3"]).stdout)
    assert len(plain) == 120 and fast == plain


def test_lean_drafting_pass_gives_the_training_forward(setup, oracle_drafter):
    """Decoding runs the drafter through the lean decoder step (encoder keys/values projected once
    per batch, kept as rows leave, prefixes of mixed lengths left-padded); its logits must be those
    of the plain forward pass the drafter was trained with."""
    from fairseq_plugins.data.nar_drafter_batch import block_input
    from fairseq_plugins.decoding.drafters import DraftContext

    models, task, batches, _ = setup
    gen = gad(models, task, oracle_drafter, block_size=BLOCK)
    d = gen.drafter
    sample = batches[8][0]
    net = sample["net_input"]
    d.begin(DraftContext(net["src_tokens"], net["src_lengths"], 50, 60, None, BOS, EOS, PAD))
    g = torch.Generator().manual_seed(1)
    out = torch.randint(4, 500, (8, 60), generator=g)
    out[:, 0] = BOS
    with torch.no_grad():
        # (prefix lengths, rows kept from the previous call, their original ids): rows leave twice
        for n_gen, keep, rows in ((torch.tensor([0, 3, 7, 1, 0, 12, 5, 2]), None, list(range(8))),
                                  (torch.tensor([4, 9, 2]), [1, 5, 6], [1, 5, 6]),
                                  (torch.tensor([6]), [1], [5])):
            if keep is not None:
                d.select_rows(torch.tensor(keep))
            o = out[rows]
            src = {k: v[rows] for k, v in net.items()}
            inp, slots = block_input(o, n_gen, d.k, PAD, d.mask, with_slots=True)
            assert torch.equal(inp, block_input(o, n_gen, d.k, PAD, d.mask))
            enc = d.model.encoder(src["src_tokens"], src_lengths=src["src_lengths"])
            plain = d.model.decoder(inp, encoder_out=enc, block=d.k)[0]
            lean = d.block_logits(inp, slots)
            assert lean.shape == (len(n_gen), BLOCK, d.vocab + 1)
            assert torch.allclose(plain[:, :BLOCK], lean, atol=1e-5)
            assert d.propose(o, n_gen).tokens.tolist() == plain[:, :BLOCK, : d.vocab].argmax(-1).tolist()


@pytest.mark.parametrize("decoder", [False, True])
def test_init_from_the_verifier_copies_the_encoder_and_optionally_the_decoder(tiny_corpus, tiny_model, decoder):
    import torch
    from fairseq import checkpoint_utils, options, tasks

    argv = [str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--block-size", str(BLOCK),
            "--init-encoder-from", str(tiny_model)] + (["--init-decoder"] if decoder else []) + DRAFTER_ARGS
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    drafter = task.build_model(args).state_dict()
    verifier = checkpoint_utils.load_checkpoint_to_cpu(str(tiny_model))["model"]
    assert torch.equal(drafter["encoder.layers.0.fc1.weight"], verifier["encoder.layers.0.fc1.weight"])
    emb = verifier["decoder.embed_tokens.weight"]
    assert torch.equal(drafter["decoder.embed_tokens.weight"][: emb.size(0)], emb)  # + the [MASK] row
    for name in ("decoder.layers.0.self_attn.k_proj.weight", "decoder.layers.1.encoder_attn.v_proj.weight",
                 "decoder.layers.1.fc2.weight"):
        assert torch.equal(drafter[name], verifier[name]) == decoder, name


def test_init_decoder_without_a_verifier_is_a_clear_error(tiny_corpus):
    from fairseq import options, tasks

    from fairseq_plugins.tasks.nar_drafter import NARDrafterOptionError

    argv = [str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--block-size", str(BLOCK), "--init-decoder"] + DRAFTER_ARGS
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    with pytest.raises(NARDrafterOptionError, match="--init-encoder-from"):
        tasks.setup_task(args).build_model(args)
