"""Every generation order learns a synthetic transduction about as well as L2R (issue 20, item 4).

``_learning.ALIGN``: copy a source of 4..14 symbols out of 32, one symbol class in eight dropped
and one doubled, so the target (4..16 tokens, every remainder modulo z <= 4) has a length known
only from the whole source, and the junction of two directions (head-tail, IBDecoder) or the
segment boundary of IMDecoder sits where only a count over the source puts it.  A tiny model per
order and seed (d=64, 2+2 layers, 500 updates of 64 pairs, learning rate warmed up over 60 updates
and decayed linearly to 0) is decoded with the order's own beam search (beam 4) on 200 held-out
pairs.

The budget is past the flat part: L2R's exact-match share, seeds 1/2/3, at 250 updates
0.830/0.880/0.855, at 500 0.970/0.980/0.980, at 1000 0.985/0.980/0.985 (each run with its own
linear decay).  At 500 updates, seeds 1/2 (exact; wrong length): l2r 0.970/0.980 (0.025/0.010),
r2l 0.975/0.975 (0.010/0.010), sa_l2r_c2 0.920/0.945 (0.025/0.030), head_tail 0.925/0.950
(0.045/0.035), interleave 0.975/0.975 (0.010/0.005), interleave_c2 0.950/0.940 (0.025/0.045),
multi_segment_h4 0.920/0.910 (0.025/0.020).

MARGIN: two seeds of one order differ by up to 0.025 (0.010 for L2R over three seeds); the bar is
four times that below L2R's mean, 0.10: IMDecoder's 0.915 passes, the issue's "87% of L2R" (0.85
here) fails, and so does the first release's IMDecoder (identical start slots and direction
embeddings at the positional scale: 0.620, seed 1).  Identical start slots alone cost less here
(SA c=2 0.885, IMDecoder 0.905, seed 1) than the margin: the start-slot test below checks that
mechanism directly.  Wrong lengths: at most LENGTH_FACTOR times L2R's share (0.0175 here) or
LENGTH_FLOOR; the worst order measured has 0.040.  Cost: 342 s of one core for the 14 trainings
and decodings (about 5.7 minutes); it replaces a copy task (lengths 2..8) that every order
saturated (0.98-1.0).

IMDecoder's gap (seed 1, 1000 held-out pairs: 0.893 against IBDecoder's 0.969 and L2R's 0.985) is
not its lengths (12 too short, 22 too long, 73 wrong tokens of the right length): 89 of its 107
errors start in the two directions that begin at the segment boundary, a position only a count
over the whole source gives, against 18 in the two that begin at the sentence's ends as
IBDecoder's do (teacher-forced, all four are 0.985-1.0 right at the first step).
"""
import statistics

import pytest
import torch

from _learning import ALIGN, ORDERS, build, score, train

SEEDS = (1, 2)
MARGIN = 0.10
LENGTH_FACTOR, LENGTH_FLOOR = 4.0, 0.05


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """order name -> the ``Score`` of each seed; every order is trained once per module."""
    runs = {}

    def scores(name):
        if name not in runs:
            torch.set_num_threads(1)
            runs[name] = []
            for seed in SEEDS:
                task, model, d = build(tmp_path_factory.mktemp(f"{name}-{seed}"), ORDERS[name], ALIGN, seed=seed)
                train(task, model, d, ALIGN, seed=seed)
                runs[name].append(score(task, model, d, ALIGN))
                print(f"{name} seed {seed}: {runs[name][-1]}")
        return runs[name]

    return scores


def mean(values):
    return statistics.fmean(values)


def test_l2r_converges_within_the_budget(learned):
    l2r = learned("l2r")
    assert mean(s.exact for s in l2r) >= 0.90, [str(s) for s in l2r]


@pytest.mark.parametrize("name", [n for n in ORDERS if n != "l2r"])
def test_every_order_learns_as_well_as_l2r(learned, name):
    l2r, order = learned("l2r"), learned(name)
    l2r_exact, exact = mean(s.exact for s in l2r), mean(s.exact for s in order)
    assert exact >= l2r_exact - MARGIN, (
        f"{name}: {exact:.3f} of held-out pairs reproduced exactly, L2R {l2r_exact:.3f} (margin {MARGIN}): "
        f"{[str(s) for s in order]}")
    l2r_length, length = mean(s.length_errors for s in l2r), mean(s.length_errors for s in order)
    assert length <= max(LENGTH_FACTOR * l2r_length, LENGTH_FLOOR), (
        f"{name}: {length:.3f} of hypotheses have the wrong length, L2R {l2r_length:.3f}: {[str(s) for s in order]}")


@pytest.mark.parametrize("name", ["sa_l2r_c2", "head_tail", "interleave", "interleave_c2", "multi_segment_h4"])
def test_first_step_slots_differ_at_the_token_scale(tmp_path, name):
    """The z decoder inputs of the first step (all the start symbol EOS) must differ by about a
    token embedding, not only by a position embedding (norm ~1-8 vs ~sqrt(d))."""
    task, model, d = build(tmp_path, ORDERS[name], dim=128)
    dec = model.decoder
    z = dec.order.z
    with torch.no_grad():
        tokens = torch.full((1, z), d.eos())
        x = dec.embed_scale * dec.embed_tokens(tokens)[0] + dec.embed_positions.embed_slots(torch.arange(z))
        token_norm = (dec.embed_scale * dec.embed_tokens.weight[4:]).norm(dim=1).mean()
    gaps = [float((x[i] - x[j]).norm()) for i in range(z) for j in range(i + 1, z)]
    assert min(gaps) > 0.7 * float(token_norm), (gaps, float(token_norm))
    if dec.embed_positions.direction is not None:  # IMDecoder's directions at the token scale too
        directions = dec.embed_scale * dec.embed_positions.direction.weight
        assert float(directions.norm(dim=1).min()) > 0.5 * float(token_norm)
