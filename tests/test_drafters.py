"""Drafters in isolation: Jacobi (PAD initialisation, previous output = next draft, PJ/PGJ/HGJ
block layout) and input-guided copying (anchor at BOS, copy, unique n-gram re-anchoring, PAD
sentinel, dictionary mapping)."""
import pytest
import torch

from fairseq_plugins.decoding.drafters import DRAFTERS, DraftContext, NoDraft, StepResult
from fairseq_plugins.decoding.drafters.base import Drafter, DrafterCapabilities
from fairseq_plugins.decoding.drafters.input_copy import InputCopyDrafter
from fairseq_plugins.decoding.drafters.source import source_to_target_map
from fairseq_plugins.decoding.drafters.jacobi import JacobiDrafter

PAD, EOS, BOS = 1, 2, 2


def ctx(src, max_len=20, target_length=None, width=40, host_reads=None):
    src = torch.tensor(src)
    return DraftContext(src_tokens=src, src_lengths=(src != PAD).sum(1), max_len=max_len, width=width,
                        target_length=target_length, bos=BOS, eos=EOS, pad=PAD, host_reads=host_reads)


def step(drafter, out, n_gen, draft, top, accepted):
    count = accepted + 1
    for b in range(out.size(0)):
        n = int(n_gen[b])
        toks = torch.cat([draft[b, : int(accepted[b])], top[b, int(accepted[b]) : int(accepted[b]) + 1]])
        out[b, n + 1 : n + 1 + len(toks)] = toks
    drafter.observe(StepResult(draft=draft, top=top, top_lprob=torch.zeros(top.shape), accepted=accepted,
                               count=count, n_before=n_gen, out=out))
    return n_gen + count


def test_no_draft_is_empty():
    d = NoDraft()
    d.begin(ctx([[5, 6, EOS]]))
    assert d.propose(torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, dtype=torch.long)).tokens.shape == (1, 0)


def test_jacobi_pgj_starts_with_pad_and_reuses_the_previous_output():
    d = JacobiDrafter("pgj", block_size=3)
    d.begin(ctx([[5, 6, EOS]], target_length=torch.tensor([10])))
    out = torch.full((1, 40), PAD)
    out[0, 0] = BOS
    n = torch.zeros(1, dtype=torch.long)
    draft = d.propose(out, n).tokens
    assert draft.tolist() == [[PAD, PAD, PAD]]  # INITT: all PAD
    # the verifier predicted 10, 11, 12, 13; nothing of the (PAD) draft accepted -> keeps 10
    n = step(d, out, n, draft, torch.tensor([[10, 11, 12, 13]]), torch.tensor([0]))
    assert n.tolist() == [1]
    # next draft: the rest of block [0, 3) is positions 1, 2 -> previous iterate 11, 12
    assert d.propose(out, n).tokens.tolist() == [[11, 12, PAD]]
    # a call wider than the row's 2 draft slots + 1 (another row's draft in the batch): the prediction at the
    # column the row did not draft is not its own iterate and is not kept (the same draft at any batch size)
    n = step(d, out, n, torch.tensor([[11, 12, PAD]]), torch.tensor([[11, 12, 14, 15]]), torch.tensor([2]))
    assert n.tolist() == [4] and out[0, 1:5].tolist() == [10, 11, 12, 14]
    # block [3, 6): position 3 done, positions 4, 5 have no iterate yet (INITT), as at batch 1
    assert d.propose(out, n).tokens.tolist() == [[PAD, PAD, PAD]]
    n = step(d, out, n, torch.tensor([[PAD, PAD, PAD]]), torch.tensor([[16, 17, 18, 19]]), torch.tensor([0]))
    assert d.propose(out, n).tokens.tolist() == [[17, PAD, PAD]]  # then the previous iterate, as before


def test_jacobi_pj_drafts_the_whole_target_and_hgj_needs_no_length():
    pj = JacobiDrafter("pj", block_size=3)
    pj.begin(ctx([[5, EOS], [6, EOS]], target_length=torch.tensor([6, 4])))
    out = torch.full((2, 40), PAD)
    out[:, 0] = BOS
    n = torch.zeros(2, dtype=torch.long)
    first = pj.propose(out, n).tokens
    assert first.shape == (2, 20) and (first == PAD).all()  # INITT; the engine trims the call to the widest row
    top = torch.stack([torch.arange(100, 121), torch.arange(200, 221)])
    n = step(pj, out, n, first, top, torch.tensor([0, 0]))
    # the whole rest of each target (length incl. EOS 6 and 4) is drafted from the last iterate
    from fairseq_plugins.decoding.width_policy import draft_lengths

    draft = pj.propose(out, n).tokens
    assert draft_lengths(draft, PAD).tolist() == [4, 2]
    assert draft[0, :4].tolist() == [101, 102, 103, 104] and draft[1, :2].tolist() == [201, 202]
    with pytest.raises(ValueError, match="target length"):
        JacobiDrafter("pgj", 3).begin(ctx([[5, EOS]]))
    hgj = JacobiDrafter("hgj", block_size=4)
    hgj.begin(ctx([[5, EOS]], max_len=2))  # h = max_len + 1 = 3 positions: at most 2 drafted
    assert (hgj.propose(out[:1], torch.zeros(1, dtype=torch.long)).tokens == PAD).sum().item() == 4
    assert hgj.max_draft(50) == 4 and pj.max_draft(50) == 50


def test_jacobi_records_the_iterates_for_ddgviz():
    d = JacobiDrafter("pj", block_size=3, record=True)
    d.begin(ctx([[5, EOS]], target_length=torch.tensor([4])))
    out = torch.full((1, 40), PAD)
    out[0, 0] = BOS
    draft = d.propose(out, torch.zeros(1, dtype=torch.long)).tokens
    step(d, out, torch.zeros(1, dtype=torch.long), draft, torch.tensor([[7, 8, 9, EOS]]), torch.tensor([0]))
    assert len(d.history) == 1 and d.history[0]["guess"][0, 1:5].tolist() == [7, 8, 9, EOS]


ON_HOST = pytest.mark.parametrize("on_host", [False, True], ids=["tensor anchors", "host anchors"])


@ON_HOST
def test_input_copy_copies_from_bos_then_reanchors_on_a_unique_ngram(on_host):
    # left-padded source (fairseq layout): x = 10 11 12 13 14 EOS
    d = InputCopyDrafter(block_size=4, ngram=2)
    d.begin(ctx([[PAD, 10, 11, 12, 13, 14, EOS]], host_reads=on_host))
    out = torch.full((1, 40), PAD)
    out[0, 0] = BOS
    n = torch.zeros(1, dtype=torch.long)
    draft = d.propose(out, n).tokens
    assert draft.tolist() == [[10, 11, 12, 13]]  # anchored at x_0 = BOS
    # verifier agrees with 10, 11 then says 20 (bifurcation): output 10 11 20, no source match -> AR
    n = step(d, out, n, draft, torch.tensor([[10, 11, 20, 0, 0]]), torch.tensor([2]))
    assert d.propose(out, n).tokens.tolist() == [[PAD] * 4]
    # one token per call: 12 -> its 1-gram "12" is unique in x: copy 13 14 EOS + PAD sentinel
    n = step(d, out, n, torch.full((1, 4), PAD), torch.tensor([[12, 0, 0, 0, 0]]), torch.tensor([0]))
    assert d.propose(out, n).tokens.tolist() == [[13, 14, EOS, PAD]]


@ON_HOST
def test_input_copy_keeps_copying_while_the_verifier_agrees_and_needs_unique_matches(on_host):
    d = InputCopyDrafter(block_size=2, ngram=2)
    d.begin(ctx([[10, 11, 10, 12, 13, EOS]], host_reads=on_host))
    out = torch.full((1, 40), PAD)
    out[0, 0] = BOS
    n = torch.zeros(1, dtype=torch.long)
    draft = d.propose(out, n).tokens
    assert draft.tolist() == [[10, 11]]
    # all accepted, verifier's own token is 10 = the next source token: the anchor moves on
    n = step(d, out, n, draft, torch.tensor([[10, 11, 10]]), torch.tensor([2]))
    assert d.propose(out, n).tokens.tolist() == [[12, 13]]
    if on_host:  # the re-anchoring below is the tensor path's; the host path's is compared with it further down
        return
    # a fresh row whose output ends with "10": ambiguous 1-gram, no copy (Alg. 1); "11 10" 2-gram is unique
    out2 = torch.full((1, 40), PAD)
    out2[0, :3] = torch.tensor([BOS, 11, 10])
    e = InputCopyDrafter(block_size=2, ngram=1, anchor="unique")
    e.begin(ctx([[10, 11, 10, 12, 13, EOS]], host_reads=False))
    assert e._rematch(out2, torch.tensor([2])).tolist() == [e.lost]  # no anchor
    e = InputCopyDrafter(block_size=2, ngram=2, anchor="unique")
    e.begin(ctx([[10, 11, 10, 12, 13, EOS]], host_reads=False))
    assert e._rematch(out2, torch.tensor([2])).tolist() == [3]  # x = [BOS, 10, 11, 10, ...]: index 3
    # --copy-anchor next: the ambiguous "10" anchors at its first occurrence after the last copied position
    e = InputCopyDrafter(block_size=2, ngram=1, anchor="next")
    e.begin(ctx([[10, 11, 10, 12, 13, EOS]], host_reads=False))
    e._prepare()
    assert e._rematch(out2, torch.tensor([2])).tolist() == [1]  # nothing copied yet: the first "10"
    e.reached = torch.tensor([2])  # x_1 x_2 = "10 11" copied
    assert e._rematch(out2, torch.tensor([2])).tolist() == [3]
    e.reached = torch.tensor([3])  # no "10" after x_3: no anchor
    assert e._rematch(out2, torch.tensor([2])).tolist() == [e.lost]


@ON_HOST
@pytest.mark.parametrize("anchor", ["unique", "next"])
def test_input_copy_after_an_edit_anchors_on_a_repeated_token_after_what_it_copied(on_host, anchor):
    """x = 10 11 12 10 13 EOS: the output copies 10 11 12, inserts 20, then says 10 (which occurs
    twice).  Alg. 1 (``unique``) has no anchor; ``next`` anchors at the 10 after the copied 12."""
    d = InputCopyDrafter(block_size=3, ngram=2, anchor=anchor)
    d.begin(ctx([[10, 11, 12, 10, 13, EOS]], host_reads=on_host))
    out = torch.full((1, 40), PAD)
    out[0, 0] = BOS
    n = torch.zeros(1, dtype=torch.long)
    draft = d.propose(out, n).tokens
    assert draft.tolist() == [[10, 11, 12]]
    n = step(d, out, n, draft, torch.tensor([[10, 11, 12, 20]]), torch.tensor([3]))  # all taken, then 20
    draft = d.propose(out, n).tokens
    assert draft.tolist() == [[PAD] * 3]  # "12 20", "20": nowhere in x
    n = step(d, out, n, draft, torch.tensor([[10, 0, 0, 0]]), torch.tensor([0]))
    want = [[13, EOS, PAD]] if anchor == "next" else [[PAD] * 3]
    assert d.propose(out, n).tokens.tolist() == want


def _anchor_by_search(x, output, q, anchor="unique", reached=0):
    """Alg. 1 line 3 by a plain search: the source index after the unique occurrence of the output's
    last n-gram, for the longest n <= q that occurs at all; where that one is not unique, None
    (``unique``) or its first occurrence ending after ``reached`` (``next``)."""
    for n in range(min(q, len(output)), 0, -1):
        ends = [e for e in range(n, len(x) + 1) if x[e - n : e] == output[-n:]]
        if ends:  # x_1..x_e ends with it: the drafter's index e
            if len(ends) == 1:
                return ends[0]
            return next((e for e in ends if e > reached), None) if anchor == "next" else None
    return None


@pytest.mark.parametrize("anchor", ["unique", "next"])
@pytest.mark.parametrize("q", [1, 2, 3])
def test_input_copy_reanchoring_matches_a_plain_search(q, anchor):
    """Random left-padded sources over a few symbols (many repeats), random outputs and copied
    positions: the batched re-anchoring and the host's lookup find the index a per-row search finds,
    or no anchor where the search finds none."""
    g = torch.Generator().manual_seed(q)
    for trial in range(150):
        bsz, slen = 3, int(torch.randint(2, 9, (1,), generator=g))
        src = torch.randint(10, 14, (bsz, slen), generator=g)
        lengths = torch.randint(1, slen + 1, (bsz,), generator=g)
        for b in range(bsz):  # fairseq's layout: left padding, EOS last
            src[b, : slen - lengths[b]] = PAD
            src[b, -1] = EOS
        d, h = (InputCopyDrafter(block_size=3, ngram=q, anchor=anchor) for _ in range(2))
        h.host_rows = bsz
        d.begin(ctx(src.tolist(), host_reads=False))
        h.begin(ctx(src.tolist(), host_reads=True))
        d._prepare(), h._prepare()  # (built when first drafted from)
        reached = [int(torch.randint(0, int(lengths[b]) + 1, (1,), generator=g)) for b in range(bsz)]
        d.reached, h.host.reached = torch.tensor(reached), list(reached)
        out = torch.full((bsz, 20), PAD)
        out[:, 0] = BOS
        n_gen = torch.randint(0, 6, (bsz,), generator=g)
        out[:, 1:7] = torch.randint(10, 15, (bsz, 6), generator=g)
        got = d._rematch(out, n_gen).tolist()
        n = n_gen.tolist()
        on_host = [h.host._rematch(b, tail, n[b]) for b, tail in enumerate(h.host._tails(out, n))]
        for b in range(bsz):
            x = [t for t in src[b].tolist() if t != PAD]  # x_1 .. x_n (EOS included); x_0 = BOS never matches
            found = _anchor_by_search(x, out[b, 1 : 1 + int(n_gen[b])].tolist(), q, anchor, reached[b])
            expected = d.lost if found is None else found
            assert got[b] == expected and on_host[b] == expected, (trial, b, x, out[b, : 1 + int(n_gen[b])].tolist())


@pytest.mark.parametrize("host_reads", [False, True])
def test_input_copy_builds_nothing_until_drafted_from_and_follows_rows_dropped_before(host_reads):
    """A batch whose width policy never asks IAD for a draft pays nothing for its anchors; rows that
    leave before the first draft leave the sources the anchors are then built from."""
    src = [[PAD, 11, 12, 13, EOS], [21, 22, 23, 24, EOS], [PAD, PAD, 31, 32, EOS]]
    d = InputCopyDrafter(block_size=3, ngram=2)
    d.host_rows = 3
    d.begin(ctx(src, host_reads=host_reads))
    out, n_gen = torch.full((3, 20), PAD), torch.zeros(3, dtype=torch.long)
    out[:, 0] = BOS
    empty = torch.full((3, 0), PAD)
    n_gen = step(d, out, n_gen, empty, torch.tensor([[11], [21], [31]]), torch.zeros(3, dtype=torch.long))
    assert not d.prepared and d.host is None  # plain steps only: nothing built
    keep = torch.tensor([0, 2])
    d.select_rows(keep)
    out, n_gen = out.index_select(0, keep), n_gen.index_select(0, keep)
    fresh = InputCopyDrafter(block_size=3, ngram=2)
    fresh.host_rows = 3
    fresh.begin(ctx([src[0], src[2]], host_reads=host_reads))
    fresh.stale = True  # (the same plain step behind it)
    got, want = d.propose(out, n_gen), fresh.propose(out, n_gen)
    assert d.prepared and (d.host is not None) == host_reads
    assert torch.equal(got.tokens, want.tokens) and got.tokens[:, 0].tolist() == [12, 32]  # copying on after 11, 31


def test_input_copy_option_checks_and_dictionary_mapping():
    with pytest.raises(ValueError, match="--copy-ngram"):
        InputCopyDrafter(block_size=3, ngram=4)
    with pytest.raises(ValueError, match="--copy-anchor must be one of next, unique"):
        InputCopyDrafter(block_size=3, ngram=2, anchor="first")
    from types import SimpleNamespace

    class Huge:  # a target vocabulary too large for the re-anchoring's n-gram integers
        def __len__(self):
            return 1 << 20

    with pytest.raises(ValueError, match="vocabularies of up to .* use --drafter jacobi_hgj"):
        InputCopyDrafter.from_config(SimpleNamespace(), SimpleNamespace(target_dictionary=Huge()))
    from fairseq.data import Dictionary

    a, b = Dictionary(), Dictionary()
    for w in ("x", "y"):
        a.add_symbol(w)
    for w in ("y", "z", "x"):
        b.add_symbol(w)
    assert source_to_target_map(a, a) is None
    m = source_to_target_map(a, b)
    assert m[a.index("x")] == b.index("x") and m[a.index("y")] == b.index("y")


def _random_run(on_host, seed, q, k=3, anchor="next"):
    """A drafter through 12 calls of a random 'verifier' that follows the copy half the time, with
    plain steps and a dropped row in between; returns every draft (tokens, lengths)."""
    import random

    g = random.Random(seed)
    bsz, slen = 3, g.randint(2, 9)
    src = torch.full((bsz, slen), PAD)
    for b in range(bsz):  # fairseq's layout: left padding, EOS last; few symbols, many repeats
        length = g.randint(1, slen)
        src[b, slen - length :] = torch.tensor([g.randint(10, 13) for _ in range(length)])
        src[b, -1] = EOS
    d = InputCopyDrafter(block_size=k, ngram=q, anchor=anchor)
    d.host_rows = bsz  # the host path for the whole batch (by default only for one row)
    d.begin(ctx(src.tolist(), max_len=30, width=60, host_reads=on_host))
    out = torch.full((bsz, 60), PAD)
    out[:, 0] = BOS
    n = torch.zeros(bsz, dtype=torch.long)
    drafts = []
    for it in range(12):
        proposal = d.propose(out, n)
        drafts.append((proposal.tokens.tolist(), proposal.lengths.tolist()))
        draft = proposal.tokens[:, :0] if g.random() < 0.2 else proposal.tokens  # a plain step now and then
        width = draft.size(1)
        accepted = torch.tensor([g.randint(0, min(width, int(proposal.lengths[b]))) for b in range(bsz)])
        top = torch.tensor([[g.randint(10, 13) for _ in range(width + 1)] for _ in range(bsz)])
        for b in range(bsz):
            if width and g.random() < 0.5:  # the verifier agrees with the copy, past the accepted prefix too
                top[b, :width] = draft[b]
        n = step(d, out, n, draft, top, accepted)
        if it == 6:  # the middle row finished
            keep = torch.tensor([0, 2])
            d.select_rows(keep)
            out, n, bsz = out[keep], n[keep], 2
    return drafts


@pytest.mark.parametrize("anchor", ["unique", "next"])
@pytest.mark.parametrize("q", [1, 2, 3])
def test_input_copy_host_anchors_draft_what_the_tensor_path_drafts(q, anchor):
    """The two ways of keeping IAD's anchors (tensors on the device, lists on a CPU's host) propose
    the same drafts through copies, bifurcations, plain steps, re-anchoring and dropped rows."""
    for seed in range(120):
        assert _random_run(True, seed, q, anchor=anchor) == _random_run(False, seed, q, anchor=anchor), seed


def test_input_copy_keeps_one_rows_anchors_on_a_cpus_host_and_a_batchs_in_tensors():
    """The host path where it wins on any CPU (one row: a handful of operations against ~30), the
    tensor path for a batch (its operations do not grow with the rows) and wherever reads wait."""
    d = InputCopyDrafter(block_size=3, ngram=2)
    for src, host_reads, on_host in (([[10, 11, 12, EOS]], None, True),  # a CPU: reads are free
                                     ([[10, 11, 12, EOS], [PAD, 13, 14, EOS]], None, False),
                                     ([[10, 11, 12, EOS]], False, False)):  # as on a GPU
        d.begin(ctx(src, host_reads=host_reads))
        d._prepare()  # (built when first drafted from)
        assert (d.host is not None) == on_host, src


def test_what_a_drafter_needs_is_one_frozen_record():
    """No class flags: the engine reads ``capabilities`` once; a variant sets its own (PJ: a target
    length, no adaptive width by default)."""
    import dataclasses

    for flag in ("target_length", "adaptive_block", "drafts_after_plain_steps", "standalone", "needs_all_columns",
                 "proposes_after_sync"):
        assert not hasattr(Drafter, flag)
    assert all(isinstance(DRAFTERS[n].capabilities, DrafterCapabilities) for n in DRAFTERS.names if n != "auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Drafter.capabilities.standalone = True
    pj, hgj = JacobiDrafter("pj", 3).capabilities, JacobiDrafter("hgj", 3).capabilities
    assert pj.target_length and not pj.adaptive_block and not hgj.target_length and hgj.adaptive_block
    assert pj.needs_all_columns and not pj.drafts_after_plain_steps
    assert JacobiDrafter.capabilities.target_length is False  # the class record is left alone
