"""Synthetic learning tasks for every generation order.  A tiny model of each order is trained
in-process through the plugin's own task, dataset (reordering + shift by z), model and fairseq's
label-smoothed criterion, then decoded with the generator fairseq-generate would use (the order's
own multi-token beam search, fairseq's beam search for plain L2R) on held-out pairs; the score is
the share reproduced exactly, and the share whose length is wrong.

The task, ``ALIGN``: copy a source of 4..14 symbols out of 32 with one symbol class in eight
dropped and one doubled.  The target (4..16 tokens, every remainder modulo z <= 4) has a length
known only from the whole source, so an order that must place its directions' junction
(head-tail, IBDecoder) or its segment boundary (IMDecoder) has to count, as the length of a real
translation is known only from the whole source.  It replaces a copy task (length 2..8 over 16
symbols) that every order saturated.  Adding local reordering (swapped source pairs) left L2R at
0.4 exact after 500 updates: too slow to converge for a test.
"""
import random
from argparse import Namespace
from dataclasses import dataclass

import torch
from fairseq import options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.data import Dictionary, LanguagePairDataset

from _reorder_utils import write_dict
from conftest import PLUGIN_DIR

FIRST = 4  # first ordinary symbol of a fairseq Dictionary (bos, pad, eos, unk come first)


def linear_decay(step, updates, warmup):
    """fairseq's polynomial_decay with power 1 and end_learning_rate 0: a run ends converged at its
    budget, not wherever in its noise a still-high learning rate leaves it."""
    return min(step / warmup, (updates - step + 1) / (updates - warmup + 1))


@dataclass(frozen=True)
class SyntheticTask:
    """Random source sequences, the deterministic target of each, and the training recipe."""
    vocab: int
    source_lengths: tuple
    target_lengths: tuple
    transduce: callable
    updates: int
    batch: int
    schedule: callable

    def pairs(self, n, seed):
        rng = random.Random(seed)
        out = []
        while len(out) < n:
            src = [rng.randrange(FIRST, FIRST + self.vocab) for _ in range(rng.randint(*self.source_lengths))]
            tgt = self.transduce(src)
            if self.target_lengths[0] <= len(tgt) <= self.target_lengths[1]:
                out.append((src, tgt))
        return out


def align(src):
    """One symbol class in eight is dropped, one is doubled (length change); the others copied."""
    return [t for s in src for t in {0: [s, s], 1: []}.get((s - FIRST) % 8, [s])]


ALIGN = SyntheticTask(32, (4, 14), (4, 16), align, updates=500, batch=64, schedule=linear_decay)


def pair_dataset(pairs, d, task):
    eos = d.eos()
    src = [torch.tensor(s + [eos]) for s, _ in pairs]
    tgt = [torch.tensor(t + [eos]) for _, t in pairs]
    ds = LanguagePairDataset(src, [len(t) for t in src], d, tgt, [len(t) for t in tgt], d)
    if task.order is not None:
        from fairseq_plugins.data.reordered_dataset import ReorderedLanguagePairDataset

        ds = ReorderedLanguagePairDataset(ds, task.order)
    return ds


def build(folder, order_flags, synthetic=ALIGN, dim=64, layers=2, seed=1):
    if (folder / "dict.src.txt").exists():
        d = Dictionary.load(str(folder / "dict.src.txt"))
    else:
        d = write_dict(folder, synthetic.vocab)
    arch = "transformer_fast_tiny" if not order_flags else "reordered_transformer_tiny"
    argv = [str(folder), "--user-dir", PLUGIN_DIR, "--task", "fast_translation", "-s", "src", "-t", "tgt",
            "--arch", arch, "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim),
            "--encoder-ffn-embed-dim", str(4 * dim), "--decoder-ffn-embed-dim", str(4 * dim),
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.0",
            "--share-all-embeddings"] + list(order_flags)
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    model = task.build_model(args)
    return task, model, d


def train(task, model, d, synthetic=ALIGN, updates=None, lr=3e-3, warmup=60, seed=1, every=None, report=None):
    """Adam on 4000 training pairs with the task's recipe (``updates`` overrides its budget);
    ``report(update)`` is called (model in eval mode) every ``every`` updates, for learning curves."""
    updates, batch = updates or synthetic.updates, synthetic.batch
    data = pair_dataset(synthetic.pairs(4000, seed), d, task)
    crit = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-8)
    rng = random.Random(seed)
    model.train()
    for step in range(1, updates + 1):
        for g in opt.param_groups:
            g["lr"] = lr * synthetic.schedule(step, updates, warmup)
        sample = data.collater([data[i] for i in rng.sample(range(len(data)), batch)])
        loss, sample_size, _ = crit(model, sample)
        opt.zero_grad()
        (loss / sample_size).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if every and report and step % every == 0:
            model.eval()
            report(step)
            model.train()
    model.eval()
    return model


@dataclass
class Score:
    exact: float  # share of held-out pairs reproduced exactly
    length_errors: float  # share whose hypothesis length differs from the reference's
    too_short: dict  # reference length mod 4 -> count of hypotheses too short
    too_long: dict

    def __str__(self):
        return (f"exact {self.exact:.3f} length errors {self.length_errors:.3f} "
                f"short {dict(sorted(self.too_short.items()))} long {dict(sorted(self.too_long.items()))}")


def score(task, model, d, synthetic=ALIGN, n=200, beam=4, seed=12345):
    pairs = synthetic.pairs(n, seed)
    data = pair_dataset(pairs, d, task)
    gen = task.build_generator([model], Namespace(beam=beam, max_len_a=1.5, max_len_b=4, min_len=1, lenpen=1.0,
                                                  unkpen=0.0, sampling=False, temperature=1.0,
                                                  match_source_len=False, no_repeat_ngram_size=0))
    hits, wrong_length, short, long = 0, 0, {}, {}
    with torch.no_grad():
        for s in range(0, n, 100):
            sample = data.collater([data[i] for i in range(s, min(n, s + 100))])
            hyps = gen.generate([model], sample)
            for i, sid in enumerate(sample["id"].tolist()):
                hyp, ref = hyps[i][0]["tokens"].tolist(), pairs[sid][1] + [d.eos()]
                hits += hyp == ref
                if len(hyp) != len(ref):
                    wrong_length += 1
                    side = short if len(hyp) < len(ref) else long
                    side[(len(ref) - 1) % 4] = side.get((len(ref) - 1) % 4, 0) + 1
    return Score(hits / n, wrong_length / n, short, long)


ORDERS = {  # the learning test's orders: name -> fast_translation flags
    "l2r": [],
    "r2l": ["--target-order", "r2l"],
    "sa_l2r_c2": ["--target-order", "l2r", "--tokens-per-direction", "2"],
    "head_tail": ["--target-order", "head_tail"],
    "interleave": ["--target-order", "interleave"],
    "interleave_c2": ["--target-order", "interleave", "--tokens-per-direction", "2"],
    "multi_segment_h4": ["--target-order", "multi_segment", "--directions", "4"],
}


# Learning curves: python tests/_learning.py UPDATES EVERY SEED [orders...]; the learning rate decays to 0 at
# UPDATES, so the score of a budget is the last report of a run with that UPDATES, not a report midway.
if __name__ == "__main__":
    import sys
    import tempfile
    import time
    from pathlib import Path

    torch.set_num_threads(1)
    synthetic = ALIGN
    updates, every, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    for name in sys.argv[4:] or list(ORDERS):
        with tempfile.TemporaryDirectory() as tmp:
            task, model, d = build(Path(tmp), ORDERS[name], synthetic, seed=seed)
            t0 = time.time()

            def report(step):
                print(f"{name:18s} seed {seed} update {step:5d} {score(task, model, d, synthetic)} "
                      f"({time.time() - t0:.0f}s)", flush=True)

            train(task, model, d, synthetic, updates=updates, seed=seed, every=every, report=report)
