"""A synthetic learning task for every generation order: copy random sequences of mixed odd and
even lengths.  A tiny model of each order is trained in-process through the plugin's own task,
dataset (reordering + shift by z), model and fairseq's label-smoothed criterion, then decoded with
the generator fairseq-generate would use (the order's own multi-token beam search, fairseq's beam
search for plain L2R) on held-out sequences; the score is the share reproduced exactly.

The test that would have caught identical start slots (SA and multi-segment models duplicating
their first group) and small direction embeddings (IMDecoder mixing its directions up).
"""
import math
import random
from argparse import Namespace

import torch
from fairseq import options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.data import Dictionary, LanguagePairDataset

from _reorder_utils import write_dict
from conftest import PLUGIN_DIR

VOCAB = 16
LENGTHS = (2, 8)  # odd and even target lengths, every remainder modulo z (<= 4)


def sequences(n, seed):
    rng = random.Random(seed)
    return [[rng.randrange(4, 4 + VOCAB) for _ in range(rng.randint(*LENGTHS))] for _ in range(n)]


def pair_dataset(seqs, d, task):
    eos = d.eos()
    src = [torch.tensor(s + [eos]) for s in seqs]
    tgt = [torch.tensor(s + [eos]) for s in seqs]  # copy task
    ds = LanguagePairDataset(src, [len(t) for t in src], d, tgt, [len(t) for t in tgt], d)
    order = task.order
    if order is not None:
        from fairseq_plugins.data.reordered_dataset import ReorderedLanguagePairDataset

        ds = ReorderedLanguagePairDataset(ds, order)
    return ds


def build(folder, order_flags, dim=64, layers=2, seed=1):
    d = write_dict(folder, VOCAB) if not (folder / "dict.src.txt").exists() else Dictionary.load(str(folder / "dict.src.txt"))
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


def train(task, model, d, updates=250, batch=128, lr=3e-3, warmup=60, seed=1):
    data = pair_dataset(sequences(4000, seed), d, task)
    crit = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-8)
    rng = random.Random(seed)
    model.train()
    for step in range(1, updates + 1):
        for g in opt.param_groups:  # fairseq's inverse_sqrt schedule
            g["lr"] = lr * min(step / warmup, math.sqrt(warmup / step))
        sample = data.collater([data[i] for i in rng.sample(range(len(data)), batch)])
        loss, sample_size, _ = crit(model, sample)
        opt.zero_grad()
        (loss / sample_size).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    return model


def exact_match_rate(task, model, d, n=200, beam=4, seed=12345):
    seqs = sequences(n, seed)
    data = pair_dataset(seqs, d, task)
    gen = task.build_generator([model], Namespace(beam=beam, max_len_a=1.0, max_len_b=4, min_len=1, lenpen=1.0,
                                                  unkpen=0.0, sampling=False, temperature=1.0,
                                                  match_source_len=False, no_repeat_ngram_size=0))
    hits = 0
    with torch.no_grad():
        for s in range(0, n, 100):
            sample = data.collater([data[i] for i in range(s, min(n, s + 100))])
            hyps = gen.generate([model], sample)
            for i, sid in enumerate(sample["id"].tolist()):
                hits += hyps[i][0]["tokens"].tolist() == seqs[sid] + [d.eos()]
    return hits / n


ORDERS = {  # the learning test's orders: name -> fast_translation flags
    "l2r": [],
    "r2l": ["--target-order", "r2l"],
    "sa_l2r_c2": ["--target-order", "l2r", "--tokens-per-direction", "2"],
    "head_tail": ["--target-order", "head_tail"],
    "interleave": ["--target-order", "interleave"],
    "interleave_c2": ["--target-order", "interleave", "--tokens-per-direction", "2"],
    "multi_segment_h4": ["--target-order", "multi_segment", "--directions", "4"],
}


if __name__ == "__main__":  # tuning aid: python tests/_learning.py [updates] [orders...]
    import sys
    import tempfile
    from pathlib import Path

    torch.set_num_threads(1)
    for name in sys.argv[2:] or list(ORDERS):
        with tempfile.TemporaryDirectory() as tmp:
            task, model, d = build(Path(tmp), ORDERS[name])
            train(task, model, d, updates=int(sys.argv[1]) if len(sys.argv) > 1 else 250)
            print(f"{name:18s} exact {exact_match_rate(task, model, d):.3f}", flush=True)
