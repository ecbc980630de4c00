"""Shared helpers of the draft-and-verify tests: load the tiny checkpoint in-process, build
batches of *mixed* source lengths (fairseq's own iterator sorts by length), run fairseq's greedy
``SequenceGenerator`` as the reference."""
import dataclasses
from argparse import Namespace

import torch

from scripts.lab.evaluation.generation import Generation
from fairseq_plugins.tasks.fast_translation import FastTranslationConfig

# short enough to keep the tests fast, long enough that the 300-update model hits it (forced EOS)
MAX_LEN_B = 40


def load(corpus, checkpoint):
    """The checkpoint with the task it was trained with, in eval mode, and the test split loaded."""
    # one intra-op thread: the tiny model gains nothing from more, and on a shared 2-core machine
    # two threads per op spin against other jobs and slow the tests down several times
    torch.set_num_threads(1)

    loaded = Generation.from_checkpoint(checkpoint, corpus / "bin")
    loaded.dataset("test")
    return loaded.models, loaded.task


def gen_args(**kw):
    args = dict(beam=1, max_len_a=0.0, max_len_b=MAX_LEN_B, min_len=1, unkpen=0.0, lenpen=1.0,
                unnormalized=False, temperature=1.0)
    args.update(kw)
    return Namespace(**args)


def mixed_batches(task, batch_size, split="test"):
    """Consecutive ids (not length-sorted): every batch mixes short and long sources."""
    ds = task.dataset(split)
    ids = list(range(len(ds)))
    return [ds.collater([ds[i] for i in ids[s : s + batch_size]]) for s in range(0, len(ids), batch_size)]


def reference_greedy(models, task, batches, **kw):
    from fairseq.sequence_generator import SequenceGenerator

    a = gen_args(**kw)
    gen = SequenceGenerator(models, task.target_dictionary, beam_size=1, max_len_a=a.max_len_a,
                            max_len_b=a.max_len_b, min_len=a.min_len, unk_penalty=a.unkpen)
    return decode_all(gen, models, batches)


def greedy_references(corpus, checkpoint, batch_sizes=(1, 8)):
    """(models, task, {bs: mixed batches}, {bs: fairseq's greedy hypotheses by id})."""
    models, task = load(corpus, checkpoint)
    batches = {bs: mixed_batches(task, bs) for bs in batch_sizes}
    refs = {bs: reference_greedy(models, task, batches[bs]) for bs in batch_sizes}
    return models, task, batches, refs


def decode_all(gen, models, batches):
    out = {}
    with torch.no_grad():
        for sample in batches:
            hyps = gen.generate(models, sample)
            for i, sid in enumerate(sample["id"].tolist()):
                out[sid] = hyps[i][0]
    return out


def engine(models, task, drafter, acceptance="exact", block_size=3, **kw):
    task.cfg.drafter = drafter
    task.cfg.acceptance = acceptance
    task.cfg.block_size = block_size
    # every drafter's and rule's own options at their defaults (registry.with_options marks them with an owner)
    defaults = {f.name: f.default for f in dataclasses.fields(FastTranslationConfig) if "owner" in f.metadata}
    defaults["adaptive_block_size"] = "auto"
    defaults.pop("drafter_path", None)  # the caller's (tests of --drafter nar set it)
    if acceptance == "topk":
        defaults["acceptance_topk"] = 2  # required with topk (no default): the papers' N
    for key, value in defaults.items():
        setattr(task.cfg, key, kw.pop(key, value))
    return task.build_generator(models, gen_args(**kw))


def mismatches(ref, hyp):
    assert set(ref) == set(hyp)
    return [k for k in sorted(ref) if not torch.equal(ref[k]["tokens"], hyp[k]["tokens"])]


def distill_test_set(corpus, checkpoint, save):
    """The verifier's greedy outputs of the test sources, binarized with the corpus's dictionaries
    as ``save/bin`` (train split): a drafter trained on it drafts mostly right on the test set."""
    import sys

    from conftest import run

    models, task = load(corpus, checkpoint)
    ds = task.dataset("test")
    ref = reference_greedy(models, task, mixed_batches(task, 16))
    raw = save / "raw"
    raw.mkdir()
    src = [task.source_dictionary.string(ds[i]["source"]) for i in range(len(ds))]
    hyp = [task.target_dictionary.string(ref[i]["tokens"]) for i in range(len(ds))]
    (raw / "train.en").write_text("\n".join(src) + "\n")
    (raw / "train.de").write_text("\n".join(hyp) + "\n")
    b = corpus / "bin"
    run([sys.executable, "-m", "fairseq_cli.preprocess", "-s", "en", "-t", "de", "--srcdict", str(b / "dict.en.txt"),
         "--tgtdict", str(b / "dict.de.txt"), "--trainpref", str(raw / "train"), "--destdir", str(save / "bin"),
         "--workers", "1"])
    return save / "bin"
