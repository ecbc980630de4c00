"""Blockwise parallel decoding (Stern et al. 2018): heads trained through fairseq-train on the tiny
checkpoint, lossless decoding (identical to the BASE checkpoint's fairseq greedy on every test
sentence, batch 1 and mixed-length batch 8), model calls = Stern iterations + 1, the heads'
training targets, --freeze-base, clear errors, sequence-level distillation, and the end-to-end
contract command lines."""
import json
import lzma
import math
import re
import shutil
import sys
from argparse import Namespace

import pytest
import torch

from conftest import PLUGIN_DIR, REPO, fairseq_cli, run
from engine_helpers import MAX_LEN_B, decode_all, engine, load, mismatches, mixed_batches, reference_greedy
from fairseq_plugins.decoding.width_policy import WidthPolicy
from scripts.lab.corpora import distilled_folder

K = 4
HEAD_TRAIN_ARGS = [
    "--task", "fast_translation", "--arch", "blockwise_transformer", "--block-heads", str(K),
    "--criterion", "blockwise_cross_entropy", "--label-smoothing", "0.1",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "20", "--weight-decay", "0.0001", "--max-tokens", "2048", "--num-workers", "0",
    "--seed", "1", "--cpu", "--no-epoch-checkpoints", "--no-last-checkpoints", "--log-format", "simple",
    "--log-interval", "10",
]


def train_heads(corpus_bin, base, save, updates, *extra):
    """The issue's contract command line: fairseq-train --arch blockwise_transformer --base-checkpoint ..."""
    proc = run([fairseq_cli("fairseq-train"), str(corpus_bin), "--user-dir", PLUGIN_DIR, "--base-checkpoint",
                str(base), "--save-dir", str(save), "--max-update", str(updates)] + HEAD_TRAIN_ARGS + list(extra))
    return save / "checkpoint_best.pt", proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def frozen(tiny_corpus, tiny_model, tmp_path_factory):
    return train_heads(tiny_corpus / "bin", tiny_model, tmp_path_factory.mktemp("bw_frozen"), 40, "--freeze-base")


@pytest.fixture(scope="module")
def setup(tiny_corpus, tiny_model, frozen):
    torch.manual_seed(0)
    models, task = load(tiny_corpus, frozen[0])
    base_models, _ = load(tiny_corpus, tiny_model)
    batches = {bs: mixed_batches(task, bs) for bs in (1, 8)}
    refs = {bs: reference_greedy(base_models, task, batches[bs]) for bs in (1, 8)}
    return models, base_models, task, batches, refs


# ---- lossless: frozen heads + exact = the base checkpoint's fairseq greedy ----

@pytest.mark.parametrize("bs,block", [(1, K), (8, K), (8, 2)])
def test_frozen_exact_equals_base_greedy_on_every_sentence(setup, bs, block):
    models, _, task, batches, refs = setup
    gen = engine(models, task, "blockwise", block_size=block)
    hyps = decode_all(gen, models, batches[bs])
    assert len(hyps) == 120
    assert mismatches(refs[bs], hyps) == []
    s = gen.stats
    assert s["draft_tokens"] > 0 and s["draft_accepted"] > 0  # the heads propose and some proposals pass
    assert 1.0 < gen.mean_accepted() <= block  # at most block-1 drafts + the verifier's token per call


class _PlainPolicy(WidthPolicy):
    """A width policy that never lets a draft through (what AdaptiveBlock does when drafts do not pay)."""

    def width(self):
        return 0

    def expects_draft(self):
        return False


def test_heads_run_only_when_a_draft_is_asked_for(setup):
    """Iterations the width policy runs as plain steps cost no head and no head projection: the
    heads run in propose(), not after every call."""
    models, _, task, batches, refs = setup
    gen = engine(models, task, "blockwise", block_size=K)
    calls = []
    heads = gen.drafter.heads
    gen.drafter.heads = lambda *a: calls.append(1) or heads(*a)
    hyps = decode_all(gen, models, batches[8])
    assert mismatches(refs[8], hyps) == [] and len(calls) > 0  # the paper's setting: heads at every call
    drafting = len(calls)
    calls.clear()
    gen.policy = _PlainPolicy()
    hyps = decode_all(gen, models, batches[8])
    assert mismatches(refs[8], hyps) == []
    assert len(calls) == 0 and drafting > 0  # plain steps throughout: the heads never ran


def test_blockwise_checkpoint_without_drafter_is_the_base_model(setup):
    """Head 1 is the identity path: fairseq's own greedy on the blockwise checkpoint = the base's."""
    models, _, task, batches, refs = setup
    assert mismatches(refs[8], reference_greedy(models, task, batches[8])) == []


# ---- combined scoring and proposal: model calls = Stern iterations + 1 ----

@torch.no_grad()
def stern_reference(model, sample, k, max_len, eos, pad, min_len=1):
    """Stern §3-4 written out for one sentence, without cache or engine: every model call re-runs the
    decoder over the whole sequence.  Call 1 predicts only (p_1..p_k at BOS); every further call
    verifies the pending proposals (one "verify" substep) and yields the next block's proposals at
    the last accepted position.  Returns (tokens, verify substeps, model calls)."""
    net = sample["net_input"]
    enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])

    def call(tokens):
        feats, _ = model.decoder(torch.tensor([tokens]), encoder_out=enc, features_only=True)
        return feats[0]

    def p1(feat, step):  # the base model's greedy choice under fairseq's constraints (pad, min/max len)
        lp = model.get_normalized_probs((model.decoder.output_layer(feat.view(1, 1, -1)), None), log_probs=True)[0, 0]
        lp[pad] = -math.inf
        if step < min_len:
            lp[eos] = -math.inf
        if step >= max_len:
            lp[torch.arange(lp.numel()) != eos] = -math.inf
        return int(lp.argmax())

    def heads(feat):  # p_2..p_k
        logits = model.decoder.output_layer(model.block_heads(feat, 2, k))
        logits[:, pad] = -math.inf
        return logits.argmax(-1).tolist()

    seq = [eos]  # fairseq starts the decoder with EOS
    feats = call(seq)
    calls, verifies = 1, 0
    nxt, draft = p1(feats[0], 0), heads(feats[0])
    while True:
        seq.append(nxt)
        if nxt == eos:
            return seq[1:], verifies, calls
        feats = call(seq + draft)
        calls, verifies = calls + 1, verifies + 1
        at = len(seq) - 1  # fed index of the last accepted token = its output step
        n = 0
        while n < len(draft) and draft[n] == p1(feats[at + n], at + n):
            seq.append(draft[n])
            n += 1
            if seq[-1] == eos:
                return seq[1:], verifies, calls
        nxt, draft = p1(feats[at + n], at + n), heads(feats[at + n])


def test_model_calls_are_stern_iterations_plus_one(setup, monkeypatch):
    """Per sentence (batch 1): the engine's model calls (its own count and a count of the lean
    decoder step's calls, so no hidden extra call can hide) = the verify substeps of Stern's
    algorithm + 1, the first call only proposing; the reference's tokens are fairseq's greedy."""
    from fairseq_plugins.decoding.step import DecoderStep

    models, _, task, batches, refs = setup
    model = models[0]
    tgt = task.target_dictionary
    gen = engine(models, task, "blockwise", block_size=K, adaptive_block_size="off")  # Stern's k every call
    layer_calls = []
    step_call = DecoderStep.__call__

    def counted(self, *args, **kwargs):
        layer_calls.append(1)
        return step_call(self, *args, **kwargs)

    monkeypatch.setattr(DecoderStep, "__call__", counted)
    hook = model.decoder.layers[0].register_forward_hook(lambda *a: layer_calls.append(1))  # fairseq's own path
    try:
        for sample in batches[1]:
            sid = int(sample["id"][0])
            before, hooked = gen.stats["model_calls"], len(layer_calls)
            hyp = decode_all(gen, models, [sample])[sid]
            calls, hooked = gen.stats["model_calls"] - before, len(layer_calls) - hooked
            src_len = sample["net_input"]["src_tokens"].size(1)
            max_len = min(int(0.0 * src_len + MAX_LEN_B), model.max_decoder_positions() - 1)
            tokens, verifies, ref_calls = stern_reference(model, sample, K, max_len, tgt.eos(), tgt.pad())
            assert tokens == refs[1][sid]["tokens"].tolist() == hyp["tokens"].tolist()
            assert calls == hooked == ref_calls == verifies + 1, sid
    finally:
        hook.remove()
    assert gen.stats["model_calls"] < gen.stats["produced_tokens"]  # fewer calls than greedy's one per token


# ---- training: targets, loss, --freeze-base ----

def test_head_target_is_y_t_plus_i_on_a_hand_built_batch():
    from fairseq_plugins.criterions.blockwise_cross_entropy import head_target

    P, E = 1, 2
    target = torch.tensor([[11, 12, 13, E, P, P],
                           [21, E, P, P, P, P],
                           [31, 32, 33, 34, 35, E]])
    assert torch.equal(head_target(target, 1, P), target)
    assert torch.equal(head_target(target, 2, P), torch.tensor([[12, 13, E, P, P, P],
                                                                [E, P, P, P, P, P],
                                                                [32, 33, 34, 35, E, P]]))
    assert torch.equal(head_target(target, 4, P), torch.tensor([[E, P, P, P, P, P],
                                                                [P, P, P, P, P, P],
                                                                [34, 35, E, P, P, P]]))
    assert torch.equal(head_target(target, 7, P), torch.full_like(target, P))


def _hand_batch(task):
    d = task.target_dictionary
    a, b, c, x = 147, 32, 401, 239  # ordinary pieces (> the 4 special symbols)
    E, P = d.eos(), d.pad()
    target = torch.tensor([[a, b, c, E], [x, E, P, P]])
    prev = torch.tensor([[E, a, b, c], [E, x, P, P]])
    src = torch.tensor([[P, a, b, E], [a, c, x, E]])  # fairseq's left-padded sources
    return {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([3, 4]), "prev_output_tokens": prev},
            "target": target, "ntokens": 6, "nsentences": 2}


def test_criterion_scores_head_i_against_y_t_plus_i(setup):
    """Every head's logged loss = fairseq's label_smoothed_nll_loss of that head's logits against a
    target written out by hand (EOS included, positions past the end not scored)."""
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
    from fairseq_plugins.criterions.blockwise_cross_entropy import BlockwiseCrossEntropyCriterion

    models, _, task, _, _ = setup
    model = models[0].eval()
    sample = _hand_batch(task)
    (a, b, c, E), (x, _, P, _) = sample["target"].tolist()
    expected = {1: [[a, b, c, E], [x, E, P, P]], 2: [[b, c, E, P], [E, P, P, P]],
                3: [[c, E, P, P], [P, P, P, P]], 4: [[E, P, P, P], [P, P, P, P]]}
    crit = BlockwiseCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1, head_loss="mean")
    with torch.no_grad():
        loss, sample_size, log = crit(model, sample)
        feats, _ = model(**sample["net_input"], features_only=True)
        for head, tgt in expected.items():
            logits = model.head_logits(feats, head)
            lp = model.get_normalized_probs((logits, None), log_probs=True)
            ref, ref_nll = label_smoothed_nll_loss(lp.view(-1, lp.size(-1)), torch.tensor(tgt).view(-1), 0.1, ignore_index=P)
            assert torch.allclose(log[f"loss_h{head}"], ref) and torch.allclose(log[f"nll_loss_h{head}"], ref_nll)
            assert log[f"ntokens_h{head}"] == sum(t != P for row in tgt for t in row)
    assert sample_size == 6
    # frozen base: the objective is the mean over heads 2..K (head 1 is logged for reference only)
    assert torch.allclose(loss, sum(log[f"loss_h{h}"] for h in range(2, K + 1)) / (K - 1))


def test_base_loss_weight_keeps_the_bases_share_of_a_fine_tuned_objective(setup):
    """--base-loss-weight w: w x head 1's loss + (1 - w) x the mean of heads 2..K (the mean is w = 1/K);
    refused where it cannot mean anything (a frozen base, one drawn head, w outside (0, 1))."""
    import copy

    from fairseq_plugins.criterions.blockwise_cross_entropy import (
        BlockwiseCriterionError, BlockwiseCrossEntropyCriterion)

    models, _, task, _, _ = setup
    tuned = copy.deepcopy(models[0]).eval().requires_grad_(True)  # a fine-tuned model: every parameter trains
    sample = _hand_batch(task)
    mean = BlockwiseCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    weighted = BlockwiseCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1, base_loss_weight=0.8)
    with torch.no_grad():
        loss_mean, _, log = mean(tuned, sample)
        loss_weighted, _, _ = weighted(tuned, sample)
    heads = [log[f"loss_h{h}"] for h in range(1, K + 1)]
    assert torch.allclose(loss_mean, sum(heads) / K)
    assert torch.allclose(loss_weighted, 0.8 * heads[0] + 0.2 * sum(heads[1:]) / (K - 1))
    assert not torch.allclose(loss_weighted, loss_mean)
    with pytest.raises(BlockwiseCriterionError, match="frozen base"):
        weighted(models[0], sample)
    with pytest.raises(BlockwiseCriterionError, match="--head-loss mean"):
        BlockwiseCrossEntropyCriterion(task, False, 0.1, head_loss="random", base_loss_weight=0.5)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(BlockwiseCriterionError, match="strictly between 0 and 1"):
            BlockwiseCrossEntropyCriterion(task, False, 0.1, base_loss_weight=bad)


def test_random_head_loss_draws_one_trainable_head_reproducibly(setup):
    from fairseq_plugins.criterions.blockwise_cross_entropy import BlockwiseCrossEntropyCriterion

    models, _, task, _, _ = setup
    model = models[0]
    crit = BlockwiseCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1, head_loss="random")
    sample = _hand_batch(task)

    def draws(seed):
        torch.manual_seed(seed)
        out = []
        model.train()  # the tiny model has dropout 0: train mode only switches the criterion to drawing
        try:
            for _ in range(12):
                loss, _, log = crit(model, sample)
                drawn = [h for h in range(1, K + 1) if log[f"ntokens_h{h}"] > 0]
                assert len(drawn) == 1 and torch.allclose(loss, log[f"loss_h{drawn[0]}"])
                out.append(drawn[0])
        finally:
            model.eval()
        return out

    first = draws(3)
    assert first == draws(3)  # seeded by torch's generator (fairseq reseeds it every update)
    assert set(first) <= set(range(2, K + 1)) and len(set(first)) > 1  # frozen: heads 2..K, uniformly


def _state(path):
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(str(path))["model"]


def test_freeze_base_leaves_every_base_parameter_bit_identical(tiny_corpus, tiny_model, frozen, tmp_path):
    base, heads = _state(tiny_model), _state(frozen[0])
    assert set(heads) - set(base) == {"block_heads.fc1.weight", "block_heads.fc1.bias",
                                      "block_heads.fc2.weight", "block_heads.fc2.bias"}
    changed = [k for k in base if not torch.equal(base[k], heads[k])]
    assert changed == []  # 40 Adam updates with weight decay: not one bit of the base moved
    assert heads["block_heads.fc2.weight"].shape == ((K - 1) * 64, K * 128)  # k-1 output blocks, hidden k*d_ffn
    # the heads were trained: every head's loss is printed and heads 2..K improved over the run
    log = frozen[1]
    inner = [dict(re.findall(r"(?<!\w)(loss_h\d)=([\d.]+)", l)) for l in log.splitlines() if "train_inner" in l]
    first, last = inner[0], inner[-1]
    assert set(first) == {f"loss_h{h}" for h in range(1, K + 1)}
    assert all(float(last[f"loss_h{h}"]) < float(first[f"loss_h{h}"]) for h in range(2, K + 1))
    # without --freeze-base the same command fine-tunes the base (so the check above can fail)
    tuned, log = train_heads(tiny_corpus / "bin", tiny_model, tmp_path / "tuned", 5, "--head-loss", "random")
    tuned = _state(tuned)
    assert any(not torch.equal(base[k], tuned[k]) for k in base if k.startswith("decoder.layers."))
    assert "loss_h" in log


# ---- clear errors ----

def test_checkpoint_without_heads_is_a_clear_error(tiny_corpus, tiny_model):
    from fairseq_plugins.decoding.drafters import DrafterNotAvailableError

    models, task = load(tiny_corpus, tiny_model)
    with pytest.raises(DrafterNotAvailableError, match=r"(?s)without them.*fairseq-train .*--arch blockwise_transformer "
                                                        r"--base-checkpoint"):
        engine(models, task, "blockwise", block_size=None)


def test_block_size_larger_than_k_is_a_clear_error(setup):
    from fairseq_plugins.decoding.drafters import DrafterNotAvailableError

    models, _, task, _, _ = setup
    with pytest.raises(DrafterNotAvailableError, match=rf"--block-size {K + 1} .*K={K} heads"):
        engine(models, task, "blockwise", block_size=K + 1)
    assert engine(models, task, "blockwise", block_size=None).drafter.block == K  # unset: all heads


def test_bad_base_checkpoint_and_criterion_misuse_are_clear_errors(setup, frozen, tiny_model, tmp_path):
    from fairseq_plugins.criterions.blockwise_cross_entropy import (BlockwiseCriterionError,
                                                                    BlockwiseCrossEntropyCriterion)
    from fairseq_plugins.models.blockwise_transformer import BlockwiseModelError, BlockwiseTransformerModel

    _, base_models, task, _, _ = setup
    for path, match in ((tmp_path / "missing.pt", "does not exist"), (None, "pass its checkpoint with --base-checkpoint"),
                        (frozen[0], "'blockwise_transformer' model; blockwise heads go on")):
        with pytest.raises(BlockwiseModelError, match=match):
            BlockwiseTransformerModel.build_model(Namespace(base_checkpoint=path and str(path), block_heads=2), task)
    with pytest.raises(BlockwiseModelError, match="--decoder-layers 6 differs from the base"):
        BlockwiseTransformerModel.build_model(
            Namespace(base_checkpoint=str(tiny_model), block_heads=2, decoder_layers=6), task)
    crit = BlockwiseCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    with pytest.raises(BlockwiseCriterionError, match="use --arch blockwise_transformer"):
        crit(base_models[0], _hand_batch(task))


# ---- sequence-level distillation ----

@pytest.fixture(scope="module")
def mini_corpus(tiny_corpus, tmp_path_factory):
    """The tiny corpus with its first 200 training pairs only (same dictionaries, valid/test as is)."""
    out = tmp_path_factory.mktemp("mini_corpus")
    for f in tiny_corpus.iterdir():
        if f.is_file() and f.name != "DONE":
            shutil.copy2(f, out / f.name)
    for lang in ("en", "de"):
        lines = (tiny_corpus / f"train.sub.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)[:200]
        (out / f"train.sub.{lang}").write_text("".join(lines), encoding="utf-8")
    run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "en", "--target-lang", "de",
         "--trainpref", str(out / "train.sub"), "--validpref", str(out / "valid.sub"), "--testpref",
         str(out / "test.sub"), "--destdir", str(out / "bin"), "--srcdict", str(tiny_corpus / "bin" / "dict.en.txt"),
         "--tgtdict", str(tiny_corpus / "bin" / "dict.de.txt"), "--workers", "1"])
    return out


def _distill(data, teacher, out):
    return run([sys.executable, str(REPO / "scripts" / "distill.py"), "--data", str(data), "--path", str(teacher),
                "--out", str(out), "--beam", "1", "--batch-size", "16", "--shard-size", "64",
                # a fixed length cap: with a*src+b, fairseq's cap depends on the padded batch width
                "--max-len-a", "0", "--max-len-b", str(MAX_LEN_B)]).stdout


@pytest.fixture(scope="module")
def distilled(mini_corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("distilled") / "kd"
    return out, _distill(mini_corpus, tiny_model, out)


def test_distillation_writes_one_teacher_line_per_source_in_order(mini_corpus, tiny_model, distilled):
    from fairseq.data import Dictionary, data_utils

    out, log = distilled
    assert "200/200 sentences" in log and "0 gold fallbacks" in log
    lines = (out / "train.sub.de").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200 and all(lines)
    # in order: line i is the teacher's greedy translation of source i, decoded here one sentence at a time
    models, task = load(mini_corpus, tiny_model)
    task.load_dataset("train")
    ds = task.dataset("train")
    ref = reference_greedy(models, task, [ds.collater([ds[i]]) for i in range(len(ds))])
    tgt = task.target_dictionary
    assert [tgt.string(ref[i]["tokens"]) for i in range(200)] == lines
    # the new bin/: same dictionaries, the original sources in the original order, the teacher's targets
    d = Dictionary.load(str(mini_corpus / "bin" / "dict.de.txt"))
    for name in ("dict.en.txt", "dict.de.txt", "test.en-de.de.bin", "valid.en-de.en.idx"):
        assert (out / "bin" / name).read_bytes() == (mini_corpus / "bin" / name).read_bytes()
    new_src = data_utils.load_indexed_dataset(str(out / "bin" / "train.en-de.en"), d)
    new_tgt = data_utils.load_indexed_dataset(str(out / "bin" / "train.en-de.de"), d)
    assert len(new_src) == len(new_tgt) == 200
    assert all(torch.equal(new_src[i], ds.src[i]) for i in range(200))
    assert [tgt.string(new_tgt[i]) for i in range(200)] == lines
    for name in ("test.de", "test.sub.de", "valid.en", "spm.model", "subword"):  # benchmark.Corpus works on it
        assert (out / name).read_bytes() == (mini_corpus / name).read_bytes()
    assert "nothing to do" in _distill(mini_corpus, tiny_model, out)


def test_distillation_resumes_from_its_shards_and_keeps_gold_for_empty_outputs(mini_corpus, tiny_model, distilled,
                                                                                tmp_path):
    """Completed shards are reused (an edited line survives), a missing one is translated again, and an
    empty teacher output keeps the gold target."""
    out = tmp_path / "kd"
    shutil.copytree(distilled[0], out)
    lines = (out / "train.sub.de").read_text(encoding="utf-8").splitlines()
    (out / "distill.json").unlink()  # as if interrupted before the end
    shard1 = out / "shards" / "shard-00001.txt"  # ids 64..127
    edited = shard1.read_text(encoding="utf-8").splitlines()
    edited[0], edited[1] = "", "▁Datei ▁nicht ▁gefunden"
    shard1.write_text("".join(line + "\n" for line in edited), encoding="utf-8")
    (out / "shards" / "shard-00002.txt").unlink()
    log = _distill(mini_corpus, tiny_model, out)
    assert "4 shards of 64, 3 done before" in log and "64/64 sentences" in log
    again = (out / "train.sub.de").read_text(encoding="utf-8").splitlines()
    gold = (mini_corpus / "train.sub.de").read_text(encoding="utf-8").splitlines()
    assert again[64] == gold[64] != lines[64] and again[65] == "▁Datei ▁nicht ▁gefunden"
    assert again[:64] == lines[:64] and again[66:] == lines[66:]
    assert "1 sentences without a teacher output" in log


def test_a_shipped_distillation_restores_the_same_corpus_without_the_teacher(mini_corpus, distilled, tmp_path):
    """--ship writes the targets (xz) and the record; --restore rebuilds byte-identical binarized splits
    from them on the original corpus (what models/ keeps so that snapshots resume on a new machine)."""
    from scripts.lab.evaluation.reference_models import corpus_sha256

    out, _ = distilled
    record = json.loads((out / "distill.json").read_text())
    shipped = tmp_path / "shipped"
    distilled_folder.ship(out, shipped, record)
    assert sorted(p.name for p in shipped.iterdir()) == ["distill.json", "train.sub.de.xz"]
    log = run([sys.executable, str(REPO / "scripts" / "distill.py"), "--data", str(mini_corpus), "--restore",
               str(shipped), "--out", str(tmp_path / "again")]).stdout
    assert "restored" in log
    again = tmp_path / "again"
    assert corpus_sha256(again) == corpus_sha256(out)
    for name in ("train.sub.en", "train.sub.de", "test.de"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    assert json.loads((again / "distill.json").read_text())["teacher"] == record["teacher"]
    # a corpus of another size is refused, and nothing is written
    with pytest.raises(AssertionError, match="restore on the corpus they were distilled from"):
        truncated = shipped.parent / "truncated"
        shutil.copytree(shipped, truncated)
        with lzma.open(truncated / "train.sub.de.xz", "wt", encoding="utf-8") as f:
            f.write("eins\n")
        run([sys.executable, str(REPO / "scripts" / "distill.py"), "--data", str(mini_corpus), "--restore",
             str(truncated), "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


def test_distilled_folder_trains_heads(tiny_model, distilled, tmp_path):
    ckpt, log = train_heads(distilled[0] / "bin", tiny_model, tmp_path / "heads", 3, "--freeze-base")
    assert ckpt.exists() and "done training" in log


# ---- end to end: the "Done when" ----

def _hyps(output):
    return sorted((l.split("\t")[0], l.split("\t")[2]) for l in output.splitlines() if l.startswith("H-"))


def test_fairseq_generate_blockwise_exact_prints_the_base_greedy_hypotheses(tiny_corpus, tiny_model, frozen):
    gen = [fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task",
           "fast_translation", "--beam", "1", "--batch-size", "16", "--cpu", "--gen-subset", "test",
           "--max-len-b", str(MAX_LEN_B)]
    base = run(gen + ["--path", str(tiny_model), "--beam-search", "fairseq"])  # fairseq's own greedy
    fast = run(gen + ["--path", str(frozen[0]), "--drafter", "blockwise", "--acceptance", "exact"])
    assert len(_hyps(base.stdout)) == 120 and _hyps(fast.stdout) == _hyps(base.stdout)
    summary = [l for l in (fast.stdout + fast.stderr).splitlines() if "draft-and-verify |" in l]
    assert len(summary) == 1, summary
    assert "drafter blockwise | acceptance exact | 120 sentences" in summary[0]
    calls = int(re.search(r"model calls (\d+)", summary[0]).group(1))
    mean = float(re.search(r"mean accepted ([\d.]+)", summary[0]).group(1))
    share = float(re.search(r"draft tokens accepted ([\d.]+)%", summary[0]).group(1))
    assert mean > 1.0 and 0 < share < 100 and 0 < calls
    assert "draft-and-verify |" not in base.stdout + base.stderr  # fairseq's own generator: no line
