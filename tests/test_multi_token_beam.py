"""multi_token_beam.py: the batched search equals a plain-Python reading of IBDecoder Alg. 1 /
Imamura's DOUBLETOPK on a stub model, hand-checked cases, real-model consistency, and the CLI."""
import math
from itertools import product

import pytest
import torch
from fairseq.data import Dictionary
from torch.overrides import TorchFunctionMode

from _reorder_utils import build, multi_token
from conftest import PLUGIN_DIR, fairseq_cli, run
from fairseq_plugins.decoding.model_parts import ModelParts
from fairseq_plugins.decoding.multi_token_beam import FinishedHypotheses, ModelStepper
from fairseq_plugins.decoding.search import DoubleTopK
from fairseq_plugins.orders import OrderError, get_order

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
            for slot in range(z):  # --min-len: an end marker in slot t, its group's first, keeps >= step*z + t tokens
                if step * z + slot < min_len:
                    lp[slot, EOS] = -math.inf
            if step == max_steps - 1:  # forced end markers, as MultiTokenBeamSearch's GroupSteps
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
    gen = multi_token(order, dictionary(), beam=beam, len_penalty=1.0, min_len=min_len)
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
    gen = multi_token(order, dictionary(), beam=2, len_penalty=0.6, double_topk=True)
    out = gen.search(StubStepper(3, 2, 2), 3, max_len=8, device=torch.device("cpu"))
    for s in range(3):
        assert [(round(float(h["score"]), 4), h["tokens"].tolist()) for h in out[s]] == \
            reference_search(order, s, 2, 8, 0.6, True)


def test_hand_checked_greedy_and_end_marker_slots():
    order, d = get_order("interleave"), dictionary()
    a, b, c = 4, 5, 6
    # step 1: (a, b); step 2: (c, EOD) -> generation a b c EOD -> natural a c b
    table = [{0: {a: 0.9}, 1: {b: 0.8}}, {0: {c: 0.7}, 1: {EOS: 0.6}}]
    out = multi_token(order, d, beam=1, len_penalty=0.0).search(
        FixedStepper(1, 1, 2, table), 1, max_len=20, device=torch.device("cpu"))
    hyp = out[0][0]
    assert hyp["tokens"].tolist() == [a, c, b, EOS]
    assert math.isclose(float(hyp["score"]), math.log(0.9 * 0.8 * 0.7 * 0.6), rel_tol=1e-5)
    assert math.isclose(float(hyp["positional_scores"].sum()), float(hyp["score"]), rel_tol=1e-5)
    # EOD in the left slot: the right token of that group is dropped
    table = [{0: {a: 0.9}, 1: {b: 0.8}}, {0: {EOS: 0.7}, 1: {c: 0.6}}]
    out = multi_token(order, d, beam=1).search(
        FixedStepper(1, 1, 2, table), 1, max_len=20, device=torch.device("cpu"))
    assert out[0][0]["tokens"].tolist() == [a, b, EOS]


@pytest.mark.parametrize("name,h,c", CASES)
def test_min_len_allows_eos_from_the_absolute_step_min_len_whatever_its_slot_in_the_group(name, h, c):
    """fairseq forbids EOS while step < min_len (step = tokens kept).  A model that wants to end
    in every slot ends exactly at min_len natural tokens, at any offset of any group and of any
    segment: an end marker in slot t of its group, the first, keeps step*z + t tokens (with
    multi_segment the segments before it keep all theirs; none ends at offset 0 of a later
    segment while the earlier ones already hold min_len tokens)."""
    order, d = get_order(name, h, c), dictionary()
    table = [{slot: {EOS: 0.9, 4: 0.1} for slot in range(order.z)}]
    for min_len in range(1, 8):
        hyp = multi_token(order, d, beam=1, min_len=min_len).search(
            FixedStepper(1, 1, order.z, table), 1, max_len=12, device=torch.device("cpu"))[0][0]
        assert len(hyp["tokens"]) - 1 == min_len, (min_len, hyp["generation_tokens"].tolist())


def test_unk_penalty_as_fairseq():
    """``--unkpen`` lowers UNK's log-prob before selection, as fairseq's ``lprobs[:, unk] -= unk_penalty``."""
    order, d = get_order("interleave"), dictionary()
    a, b = 4, 5
    table = [{0: {d.unk(): 0.6, a: 0.4}, 1: {b: 0.9}}, {0: {EOS: 0.9}, 1: {EOS: 0.9}}]
    plain, penalised = (multi_token(order, d, beam=1, unk_penalty=pen).search(
        FixedStepper(1, 1, 2, table), 1, max_len=20, device=torch.device("cpu"))[0][0] for pen in (0.0, 1.0))
    assert plain["tokens"].tolist() == [d.unk(), b, EOS] and penalised["tokens"].tolist() == [a, b, EOS]
    assert math.isclose(float(penalised["positional_scores"][0]), math.log(0.4), rel_tol=1e-5)


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

    greedy = multi_token(order, d, beam=1, len_penalty=0.0).search(Branching(1, 1, 2), 1, 10, "cpu")
    beam = multi_token(order, d, beam=2, len_penalty=0.0).search(Branching(1, 2, 2), 1, 10, "cpu")
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
    gen = multi_token(model.generation_order, task.target_dictionary, beam=3, max_len_b=12,
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
    gen = multi_token(get_order("head_tail"), dictionary(), beam=W, double_topk=True)
    g = torch.Generator().manual_seed(W * 1000 + V)
    for _ in range(5):
        lprobs = torch.log_softmax(3 * torch.randn(6, W, 2, V, generator=g), dim=-1)
        lprobs[..., 1] = -math.inf
        scores = -5 * torch.rand(6, W, generator=g)
        got_score, got_tok, got_beam, got_lp = gen.strategy.step(0, lprobs, scores)
        want_score, want_beam, want_tok = _materialised_double_topk(scores, lprobs)
        assert torch.equal(got_score, want_score)
        assert torch.equal(got_beam, want_beam) and torch.equal(got_tok, want_tok)
        picked = lprobs.gather(1, got_beam[..., None, None].expand(-1, -1, 2, V)).gather(-1, got_tok[..., None])[..., 0]
        assert torch.equal(got_lp, picked)


# ---- sync budget, NaN safety (issue 18) ----

class SyncCounter(TorchFunctionMode):
    """Counts, per beam step, the calls that make a GPU wait for the host (``.tolist()``, ``.item()``,
    ``int()``/``bool()``/``float()`` of a tensor, ``nonzero``, boolean-mask indexing, copies to the
    host) and the copies of host data onto the device (``torch.tensor``, ``.to(device)``).  A step
    opens at each decoder call (``ModelStepper.step``) and the last one closes when the hypotheses
    are built (``FinishedHypotheses.hypotheses``, once per batch)."""

    SYNCS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__", "nonzero", "argwhere",
             "masked_select", "unique", "equal", "allclose", "is_nonzero", "cpu", "numpy"}
    HOST_DATA = {"tensor", "as_tensor", "new_tensor", "from_numpy"}

    def __init__(self):
        super().__init__()
        self.syncs, self.copies, self.rows, self.open = [], [], [], False

    def start_step(self):
        self.syncs.append(0)
        self.copies.append(0)
        self.open = True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.open:
            name = getattr(func, "__name__", "")
            index = args[1] if name in ("__getitem__", "__setitem__") and len(args) > 1 else None
            indices = index if isinstance(index, tuple) else (index,)
            if name in self.SYNCS or any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
                self.syncs[-1] += 1
            if name in self.HOST_DATA or (name in ("to", "copy_") and (
                    "device" in kwargs or any(isinstance(a, (str, torch.device)) for a in args[1:]))):
                self.copies[-1] += 1
        return func(*args, **kwargs)


@pytest.fixture
def sync_counter(monkeypatch):
    counter = SyncCounter()
    step, hypotheses = ModelStepper.step, FinishedHypotheses.hypotheses

    def counted_step(self, decoder_input):
        counter.start_step()
        counter.rows.append(decoder_input.size(0))
        return step(self, decoder_input)

    def uncounted_hypotheses(self, *args):
        counter.open = False
        return hypotheses(self, *args)

    monkeypatch.setattr(ModelStepper, "step", counted_step)
    monkeypatch.setattr(FinishedHypotheses, "hypotheses", uncounted_hypotheses)
    return counter


def test_sync_counter_sees_every_kind_of_sync():
    """The counter is not blind: each sync kind counts once, plain device work not at all."""
    t = torch.tensor([3, 0, 1], device="cpu")
    counter = SyncCounter()
    with counter:
        counter.start_step()
        t.tolist()
        t[0].item()
        bool(t[0])
        int(t[0])
        t.nonzero()
        _ = t[t > 0]
        if t[1]:
            pass
        assert counter.syncs == [7] and counter.copies == [0]
        counter.start_step()
        torch.tensor([1], device="cpu")
        t.to("cpu")
        t.to(torch.float)  # a dtype change alone is no copy between devices
        (t + 1).topk(2)
        torch.full((2,), 1, device="cpu")
    assert counter.syncs == [7, 0] and counter.copies == [0, 2]


SYNC_CASES = [("head_tail", 2, 1, [], False), ("head_tail", 2, 1, [], True), ("interleave", 2, 1, [], False),
              ("interleave", 2, 2, [], False), ("multi_segment", 4, 1, [], False),
              ("interleave", 2, 1, ["--vanilla-mask"], True), ("interleave", 2, 1, ["--independent-directions"], False),
              ("interleave", 2, 1, ["--middle-to-side"], False), ("interleave", 2, 1, ["--vanilla-positions"], True)]


def _random_batch(task, lengths, seed=3):
    torch.manual_seed(seed)
    pad, width = task.source_dictionary.pad(), max(lengths)
    src = torch.full((len(lengths), width), pad)
    for i, n in enumerate(lengths):  # fairseq left-pads sources
        src[i, width - n:] = torch.randint(4, 40, (n,))
    return {"net_input": {"src_tokens": src, "src_lengths": torch.tensor(lengths)}}


class EndsBySentence:
    """Wraps a stepper: sentence s ends at step 1 + s (EOS has log-prob 0 in every slot from then on,
    -inf before), so the sentences leave the batch one step after another.  Rows are followed
    through ``reorder`` with device ops only, as the search's own state."""

    def __init__(self, stepper, bsz, beam, eos):
        self.stepper, self.eos, self.step_no = stepper, eos, 0
        self.sentence = torch.arange(bsz, device="cpu").repeat_interleave(beam)

    def step(self, decoder_input):
        lprobs = self.stepper.step(decoder_input)
        ending = (self.sentence + 1 <= self.step_no)[:, None]
        lprobs[..., self.eos] = torch.where(ending, 0.0, -math.inf)
        self.step_no += 1
        return lprobs

    def reorder(self, rows, shrink=False):
        self.sentence = self.sentence.index_select(0, rows)
        self.stepper.reorder(rows, shrink)


@pytest.mark.parametrize("name,h,c,flags,double_topk", SYNC_CASES, ids=lambda v: str(v))
def test_at_most_one_sync_and_no_copy_per_step(tmp_path, sync_counter, name, h, c, flags, double_topk):
    """Every order and ablation, with and without DOUBLETOPK: one host sync per beam step (the
    ``nonzero`` that drops finished sentences) and no host-to-device copy, while sentences leave
    the batch at different steps."""
    task, model, _ = build(tmp_path, name, h, c, flags)
    order, bsz, beam = model.generation_order, 4, 3
    gen = multi_token(order, task.target_dictionary, beam=beam, double_topk=double_topk, min_len=2)
    sample = _random_batch(task, [7, 3, 6, 5])
    stepper = EndsBySentence(ModelStepper(ModelParts(model), sample["net_input"], beam, 12 * order.z, order), bsz, beam,
                             task.target_dictionary.eos())
    with torch.inference_mode(), sync_counter:
        out = gen.search(stepper, bsz, 20, torch.device("cpu"))
    steps = gen.stats["steps"]
    assert sync_counter.rows == [12, 12, 9, 6, 3] and steps == 5 and all(len(hypos) == beam for hypos in out)
    assert max(sync_counter.syncs) <= 1 and sum(sync_counter.syncs) >= 1, sync_counter.syncs
    assert sync_counter.copies == [0] * steps


class DeviceCopies(TorchFunctionMode):
    """Counts the copies onto a device (``.to(device)``, ``.copy_``, ``.cuda()``): on a GPU each one
    from the host is a blocking transfer."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "cuda" or (name in ("to", "copy_") and (
                "device" in kwargs or any(isinstance(a, (str, torch.device)) for a in args[1:]))):
            self.count += 1
        return func(*args, **kwargs)


def test_hypotheses_reach_the_device_in_two_copies_per_batch(tmp_path, monkeypatch):
    """Building a batch's hypotheses (restored on the host) copies them onto the model's device at
    once: two copies (tokens, scores) whatever the number of hypotheses, not some per hypothesis."""
    task, model, _ = build(tmp_path, "interleave", 2, 1, [])
    gen = multi_token(model.generation_order, task.target_dictionary, beam=3, max_len_b=10)
    sample = _random_batch(task, [7, 3, 6, 5])
    counter, hypotheses = DeviceCopies(), FinishedHypotheses.hypotheses

    def counted(self, *args):
        with counter:
            return hypotheses(self, *args)

    monkeypatch.setattr(FinishedHypotheses, "hypotheses", counted)
    out = gen.generate([model], sample)
    assert sum(len(hypos) for hypos in out) == 4 * 3
    assert counter.count <= 2, counter.count


class PoisonedStepper:
    """Wraps a stepper: the log-probs of ``token`` become ``value`` (NaN as after an fp16 overflow)
    in every slot, or every log-prob when ``token`` is None."""

    def __init__(self, stepper, token, value):
        self.stepper, self.token, self.value = stepper, token, value

    def step(self, decoder_input):
        lprobs = self.stepper.step(decoder_input)
        if self.token is None:
            return torch.full_like(lprobs, self.value)
        lprobs[..., self.token] = self.value
        return lprobs

    def reorder(self, rows, shrink=False):
        self.stepper.reorder(rows, shrink)


@pytest.mark.parametrize("name,double_topk", [("head_tail", True), ("interleave", False), ("multi_segment", False)])
def test_nan_in_the_vocabulary_is_never_chosen(tmp_path, name, double_topk):
    """A NaN log-prob for the token the model likes best behaves as -inf (fairseq's guard): every
    sentence still gets hypotheses, no score is NaN, and they equal the -inf run bit for bit."""
    task, model, _ = build(tmp_path, name)
    order, d = model.generation_order, task.target_dictionary
    sample = _random_batch(task, [7, 3, 6])
    gen = multi_token(order, d, beam=3, max_len_b=10, double_topk=double_topk)
    favourite = gen.generate([model], sample)[0][0]["generation_tokens"][0].item()

    def decode(value):
        stepper = ModelStepper(ModelParts(model), sample["net_input"], 3, 12 * order.z, order)
        with torch.inference_mode():
            return gen.search(PoisonedStepper(stepper, favourite, value), 3, 10, torch.device("cpu"))

    poisoned, masked = decode(float("nan")), decode(-math.inf)
    for hypos, want in zip(poisoned, masked):
        assert len(hypos) == 3
        assert [(h["tokens"].tolist(), float(h["score"])) for h in hypos] == \
            [(h["tokens"].tolist(), float(h["score"])) for h in want]
        for h in hypos:
            assert math.isfinite(float(h["score"])) and favourite not in h["generation_tokens"].tolist()
            assert not torch.isnan(h["positional_scores"]).any() and len(h["tokens"]) <= 11


@pytest.mark.parametrize("value", [float("nan"), -math.inf])
@pytest.mark.parametrize("double_topk", [False, True])
def test_no_usable_log_prob_ends_within_the_length_limit(value, double_topk):
    """NaN or -inf everywhere: the loop stops within max_len // z + 1 decoder calls, with no NaN
    score (a sentence without any finite hypothesis gets none, rather than a NaN one)."""
    order = get_order("head_tail")
    gen = multi_token(order, dictionary(), beam=3, double_topk=double_topk)
    stepper = PoisonedStepper(StubStepper(2, 3, 2), None, value)
    out = gen.search(stepper, 2, max_len=9, device=torch.device("cpu"))
    assert len(out) == 2 and gen.stats["model_calls"] <= 9 // 2 + 1
    assert all(math.isfinite(float(h["score"])) for hypos in out for h in hypos)


def test_double_topk_rule_lives_in_its_constructor():
    """DOUBLETOPK is defined for two directions of one token each; any other order is refused with
    a message that says what to do."""
    DoubleTopK(4, get_order("interleave"))
    for order in (get_order("interleave", 2, 2), get_order("multi_segment", 4), get_order("l2r", 1, 2)):
        with pytest.raises(OrderError, match="drop --double-topk"):
            multi_token(order, dictionary(), double_topk=True)
