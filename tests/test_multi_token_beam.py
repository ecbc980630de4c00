"""multi_token_beam.py: the batched search equals a plain-Python reading of IBDecoder Alg. 1 /
Imamura's DOUBLETOPK on a stub model, hand-checked cases, real-model consistency, and the CLI."""
import math
from itertools import product

import pytest
import torch
from fairseq.data import Dictionary

from _reorder_utils import build
from conftest import PLUGIN_DIR, fairseq_cli, run
from fairseq_plugins.decoding.multi_token_beam import MultiTokenBeamSearch
from fairseq_plugins.orders import get_order

EOS, PAD, V = 2, 1, 8


def dictionary():
    d = Dictionary()
    for i in range(V - 4):
        d.add_symbol(f"w{i}")
    return d


def stub_lprobs(sentence, history, z):
    """Fixed, history-dependent log-probs (z, V); EOS grows likelier with length."""
    g = torch.Generator().manual_seed(hash((sentence, tuple(history))) % (2 ** 31))
    logits = 2.0 * torch.randn(z, V, generator=g)
    logits[:, EOS] += 0.4 * len(history) - 1.5
    return torch.log_softmax(logits, -1)


class StubStepper:
    def __init__(self, bsz, beam, z):
        self.sentence = torch.arange(bsz).repeat_interleave(beam)
        self.z, self.calls = z, 0

    def step(self, decoder_input):
        self.calls += 1
        return torch.stack([stub_lprobs(int(s), row.tolist(), self.z)
                            for s, row in zip(self.sentence, decoder_input)])

    def reorder(self, rows, shrink=False):
        self.sentence = self.sentence[rows]


class FixedStepper(StubStepper):
    """Log-probs given per step as {slot: {token: prob}} tables, history-independent."""

    def __init__(self, bsz, beam, z, table):
        super().__init__(bsz, beam, z)
        self.table = table

    def step(self, decoder_input):
        step = decoder_input.size(1) // self.z - 1
        lp = torch.full((decoder_input.size(0), self.z, V), -30.0)
        for slot, probs in self.table[min(step, len(self.table) - 1)].items():
            for tok, p in probs.items():
                lp[:, slot, tok] = math.log(p)
        return lp


def reference_search(order, sentence, B, max_len, lenpen, double_topk, min_len=1):
    """Plain-Python Alg. 1 with the same finishing rules as the batched search (module docstring)."""
    z, S, w = order.z, order.segments, order.width
    max_steps = max_len // z + 1
    live, finals = [([], 0.0, [])], []
    for step in range(max_steps):
        lps = []
        for hist, _, _ in live:
            lp = stub_lprobs(sentence, [EOS] * z + hist, z)
            lp[:, PAD] = -math.inf
            for slot in range(z):  # --min-len: an end marker at offset i of a segment keeps >= step*z + i tokens
                if step * z + slot % w < min_len:
                    lp[slot, EOS] = -math.inf
            if step == max_steps - 1:  # forced end markers, as _force_end
                room = max_len - step * z
                for seg in range(S):
                    keep = room // S + (1 if seg < room % S else 0)
                    if keep < w:
                        eos_lp = lp[seg * w + keep, EOS].item()
                        lp[seg * w + keep] = -math.inf
                        lp[seg * w + keep, EOS] = eos_lp
            lps.append(lp)
        cands = []
        if double_topk:
            left = sorted(((sc + lps[b][0, t].item(), b, t) for b, (_, sc, _) in enumerate(live) for t in range(V)),
                          reverse=True)[:2 * B]
            pairs = sorted(((s + lps[b][1, r].item(), b, (t, r)) for s, b, t in left for r in range(V)),
                           reverse=True)[:3 * B]
            cands = [(s, b, toks) for s, b, toks in pairs]
        else:
            for b, (_, sc, _) in enumerate(live):
                top = [lps[b][i].topk(B).indices.tolist() for i in range(z)]
                groups = sorted(((sum(lps[b][i, t].item() for i, t in enumerate(toks)), toks)
                                 for toks in product(*top)), reverse=True)[:B]
                cands += [(sc + g, b, toks) for g, toks in groups]
            cands.sort(reverse=True)
        new_live = []
        for rank, (score, b, toks) in enumerate(cands):
            if score == -math.inf:
                continue
            hist, _, hist_lp = live[b]
            toks_lp = [lps[b][i, t].item() for i, t in enumerate(toks)]
            if EOS in toks:
                if rank < B and len(finals) < B:
                    gen = hist + list(toks)
                    kept = len(order.restore(torch.tensor(gen), eos=EOS))
                    finals.append((score / (kept + 1) ** lenpen, gen))
            elif len(new_live) < B:
                new_live.append((hist + list(toks), score, hist_lp + toks_lp))
        live = new_live
        if len(finals) >= B or not live:
            break
    finals.sort(key=lambda f: -f[0])
    return [(round(s, 4), order.restore(torch.tensor(g), eos=EOS).tolist() + [EOS]) for s, g in finals]


CASES = [("l2r", 1, 1), ("l2r", 1, 2), ("r2l", 1, 2), ("head_tail", 2, 1), ("interleave", 2, 1),
         ("interleave", 2, 2), ("multi_segment", 4, 1)]


@pytest.mark.parametrize("name,h,c", CASES)
@pytest.mark.parametrize("beam,min_len", [(1, 1), (3, 1), (3, 5)])
def test_batched_search_equals_reference(name, h, c, beam, min_len):
    order = get_order(name, h, c)
    gen = MultiTokenBeamSearch(order, dictionary(), beam_size=beam, lenpen=1.0, min_len=min_len)
    bsz = 4
    out = gen.search(StubStepper(bsz, beam, order.z), bsz, max_len=9, device=torch.device("cpu"))
    for s in range(bsz):
        got = [(round(float(h["score"]), 4), h["tokens"].tolist()) for h in out[s]]
        assert got == reference_search(order, s, beam, 9, 1.0, False, min_len=min_len)
        for h in out[s]:
            assert min_len + 1 <= len(h["tokens"]) <= 10  # min_len..max_len natural tokens + EOS
    assert gen.stats["model_calls"] >= 1 and gen.stats["steps"] == gen.stats["model_calls"]


@pytest.mark.parametrize("name", ["head_tail", "interleave"])
def test_double_topk_equals_reference(name):
    order = get_order(name)
    gen = MultiTokenBeamSearch(order, dictionary(), beam_size=2, lenpen=0.6, double_topk=True)
    out = gen.search(StubStepper(3, 2, 2), 3, max_len=8, device=torch.device("cpu"))
    for s in range(3):
        assert [(round(float(h["score"]), 4), h["tokens"].tolist()) for h in out[s]] == \
            reference_search(order, s, 2, 8, 0.6, True)


def test_hand_checked_greedy_and_end_marker_slots():
    order, d = get_order("interleave"), dictionary()
    a, b, c = 4, 5, 6
    # step 1: (a, b); step 2: (c, EOD) -> generation a b c EOD -> natural a c b
    table = [{0: {a: 0.9}, 1: {b: 0.8}}, {0: {c: 0.7}, 1: {EOS: 0.6}}]
    out = MultiTokenBeamSearch(order, d, beam_size=1, lenpen=0.0).search(
        FixedStepper(1, 1, 2, table), 1, max_len=20, device=torch.device("cpu"))
    hyp = out[0][0]
    assert hyp["tokens"].tolist() == [a, c, b, EOS]
    assert math.isclose(float(hyp["score"]), math.log(0.9 * 0.8 * 0.7 * 0.6), rel_tol=1e-5)
    assert math.isclose(float(hyp["positional_scores"].sum()), float(hyp["score"]), rel_tol=1e-5)
    # EOD in the left slot: the right token of that group is dropped
    table = [{0: {a: 0.9}, 1: {b: 0.8}}, {0: {EOS: 0.7}, 1: {c: 0.6}}]
    out = MultiTokenBeamSearch(order, d, beam_size=1).search(
        FixedStepper(1, 1, 2, table), 1, max_len=20, device=torch.device("cpu"))
    assert out[0][0]["tokens"].tolist() == [a, b, EOS]


def test_beam_beats_greedy_on_a_known_case():
    """Greedy takes left a (0.55) whose continuations are poor; beam 2 also keeps b (0.45), which
    ends with certainty: the best hypothesis is b c, score log 0.45."""
    order, d = get_order("head_tail"), dictionary()
    a, b, c, x = 4, 5, 6, 7

    class Branching(StubStepper):
        def step(self, decoder_input):
            lp = torch.full((decoder_input.size(0), 2, V), -30.0)
            for r, row in enumerate(decoder_input.tolist()):
                if len(row) == 2:
                    lp[r, 0, a], lp[r, 0, b], lp[r, 1, c] = math.log(0.55), math.log(0.45), 0.0
                elif row[2] == a:
                    lp[r, :, EOS], lp[r, :, x] = math.log(0.3), math.log(0.7)
                else:
                    lp[r, :, EOS] = 0.0
            return lp

    greedy = MultiTokenBeamSearch(order, d, beam_size=1, lenpen=0.0).search(Branching(1, 1, 2), 1, 10, "cpu")
    beam = MultiTokenBeamSearch(order, d, beam_size=2, lenpen=0.0).search(Branching(1, 2, 2), 1, 10, "cpu")
    assert greedy[0][0]["tokens"].tolist()[0] == a
    assert float(greedy[0][0]["score"]) < math.log(0.45)
    assert beam[0][0]["tokens"].tolist() == [b, c, EOS]
    assert math.isclose(float(beam[0][0]["score"]), math.log(0.45), rel_tol=1e-5)


@pytest.mark.parametrize("name,h,c", [("interleave", 2, 1), ("interleave", 2, 2), ("multi_segment", 4, 1),
                                      ("head_tail", 2, 1)])
def test_real_model_scores_and_batching(tmp_path, name, h, c):
    """On a random tiny model: the reported score is the teacher-forced score of the generated
    sequence (cache reordering is right), and a mixed-length batch decodes as sentences alone."""
    task, model, _ = build(tmp_path, name, h, c)
    gen = MultiTokenBeamSearch(model.generation_order, task.target_dictionary, beam_size=3, max_len_b=12,
                               double_topk=(c == 1 and h == 2))
    torch.manual_seed(3)
    pad = task.source_dictionary.pad()
    lengths = [7, 4, 6]
    src = torch.full((3, 7), pad)
    for i, n in enumerate(lengths):  # fairseq left-pads sources
        src[i, 7 - n:] = torch.randint(4, 40, (n,))
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor(lengths)}}
    batched = gen.generate([model], sample)
    z, eos = model.generation_order.z, task.target_dictionary.eos()
    for i, n in enumerate(lengths):
        alone = gen.generate([model], {"net_input": {"src_tokens": src[i:i + 1, 7 - n:],
                                                     "src_lengths": torch.tensor([n])}})[0]
        assert [h["tokens"].tolist() for h in alone] == [h["tokens"].tolist() for h in batched[i]]
        for hyp in batched[i]:
            g = hyp["generation_tokens"]
            prev = torch.cat([torch.full((z,), eos), g[:-z]])[None]
            with torch.no_grad():
                lp = model.get_normalized_probs(model(src[i:i + 1, 7 - n:], torch.tensor([n]), prev), log_probs=True)
            forced = lp[0].gather(-1, g[:, None]).sum()
            assert math.isclose(float(forced), float(hyp["positional_scores"].sum()), abs_tol=1e-3)


def test_cli_train_and_generate_interleave(tiny_corpus, tmp_path):
    """fairseq-train --task fast_translation --target-order interleave, then fairseq-generate:
    one H- line per test sentence, references printed in natural order."""
    save = tmp_path / "ckpt"
    run([fairseq_cli("fairseq-train"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR, "--task", "fast_translation",
         "--target-order", "interleave", "--arch", "reordered_transformer_tiny", "--encoder-layers", "1",
         "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
         "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--optimizer", "adam", "--lr", "3e-3",
         "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--criterion", "label_smoothed_cross_entropy",
         "--label-smoothing", "0.1", "--max-tokens", "512", "--max-update", "30", "--num-workers", "0", "--cpu",
         "--save-dir", str(save), "--no-epoch-checkpoints", "--disable-validation", "--log-format", "simple"])
    out = run([fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
               "--task", "fast_translation", "--target-order", "interleave", "--path", str(save / "checkpoint_last.pt"),
               "--beam", "2", "--batch-size", "64", "--max-len-b", "20", "--cpu", "--gen-subset", "test"]).stdout
    hyps = [line for line in out.splitlines() if line.startswith("H-")]
    assert len(hyps) == 120
    refs = (tiny_corpus / "test.sub.de").read_text(encoding="utf-8").splitlines()
    t_lines = {int(line.split("\t")[0][2:]): line.split("\t")[1] for line in out.splitlines() if line.startswith("T-")}
    same = sum(t_lines[i] == refs[i] for i in t_lines)
    assert same >= 0.95 * len(refs), "T- lines must be the natural-order references"
    # without order flags fairseq-generate decodes in the checkpoint's own order: the same hypotheses
    plain = run([fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
                 "--task", "fast_translation", "--path", str(save / "checkpoint_last.pt"),
                 "--beam", "2", "--batch-size", "64", "--max-len-b", "20", "--cpu", "--gen-subset", "test"]).stdout
    assert sorted(line for line in plain.splitlines() if line.startswith("H-")) == sorted(hyps)
    # a checkpoint trained with interleave refuses another order
    with pytest.raises(AssertionError, match="trained with order interleave"):
        run([fairseq_cli("fairseq-generate"), str(tiny_corpus / "bin"), "--user-dir", PLUGIN_DIR,
             "--task", "fast_translation", "--target-order", "head_tail", "--path", str(save / "checkpoint_last.pt"),
             "--cpu", "--gen-subset", "test"])
    # scripts/pmi.py (Eq. 13) runs through fairseq's loading/batching on the reordered checkpoint
    from scripts import pmi

    ckpt = str(save / "checkpoint_last.pt")
    result = pmi.main([str(tiny_corpus / "bin"), "--model", ckpt, "--base", ckpt, "--cpu"])
    assert math.isfinite(result["model"]["ppl"]) and result["model"]["ppl"] > 1 and result["pmi"] == 0.0


def _materialised_double_topk(scores, lprobs):
    """DOUBLETOPK as first built: every (left candidate, right token) pair of the full vocabulary."""
    n, W, _, V = lprobs.shape
    left_lp, right_lp = lprobs[:, :, 0, :], lprobs[:, :, 1, :]
    left_score, left_idx = (scores[:, :, None] + left_lp).view(n, W * V).topk(min(2 * W, W * V), dim=1)
    left_beam, left_tok = torch.div(left_idx, V, rounding_mode="floor"), left_idx % V
    right = left_score[..., None] + right_lp.gather(1, left_beam[..., None].expand(-1, -1, V))
    cand_score, idx = right.view(n, -1).topk(min(3 * W, right[0].numel()), dim=1)
    j = torch.div(idx, V, rounding_mode="floor")
    beam, ltok, rtok = left_beam.gather(1, j), left_tok.gather(1, j), idx % V
    return cand_score, beam, torch.stack([ltok, rtok], -1)


@pytest.mark.parametrize("W,V", [(1, 7), (4, 50), (10, 30), (10, 2000), (3, 5)])
def test_double_topk_without_the_pair_table_equals_the_materialised_one(W, V):
    """Same candidates (scores, beams, tokens) as ranking all 2W x V pairs, including vocabularies
    smaller than 3W and -inf log-probs (PAD, forbidden end markers)."""
    gen = MultiTokenBeamSearch(get_order("head_tail"), dictionary(), beam_size=W, double_topk=True)
    g = torch.Generator().manual_seed(W * 1000 + V)
    for _ in range(5):
        lprobs = torch.log_softmax(3 * torch.randn(6, W, 2, V, generator=g), dim=-1)
        lprobs[..., 1] = -math.inf
        scores = -5 * torch.rand(6, W, generator=g)
        got_score, got_beam, got_tok, got_lp = gen._double_topk(scores, lprobs)
        want_score, want_beam, want_tok = _materialised_double_topk(scores, lprobs)
        assert torch.equal(got_score, want_score)
        assert torch.equal(got_beam, want_beam) and torch.equal(got_tok, want_tok)
        picked = lprobs.gather(1, got_beam[..., None, None].expand(-1, -1, 2, V)).gather(-1, got_tok[..., None])[..., 0]
        assert torch.equal(got_lp, picked)
