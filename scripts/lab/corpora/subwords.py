"""Learning the subword models: subword-nmt BPE merges and sentencepiece models."""
import os
import shutil
import time
from pathlib import Path

from scripts.lab.corpora.files import AtomicWriter, count_lines, log, tmp_name


def learn_bpe(inputs, codes, merges, workers):
    """subword-nmt ``learn_bpe`` with ``merges`` merge operations over the concatenation of
    ``inputs`` (one joint model when the inputs are both languages)."""
    if Path(codes).exists():
        return
    from subword_nmt.learn_bpe import learn_bpe as learn

    joint = tmp_name(Path(codes).with_suffix(".input"))
    with open(joint, "w", encoding="utf-8", newline="\n") as out:
        for path in inputs:
            with open(path, encoding="utf-8", newline="\n") as f:
                shutil.copyfileobj(f, out)
    n = count_lines(joint)
    log(f"learning {merges:,} BPE merges (subword-nmt) on {n:,} lines of {', '.join(Path(p).name for p in inputs)}")
    start = time.time()
    try:
        with open(joint, encoding="utf-8") as infile, AtomicWriter(codes) as outfile:
            learn(infile, outfile, merges, min_frequency=2, num_workers=workers)
    finally:
        joint.unlink(missing_ok=True)
    log(f"BPE codes written to {codes} ({time.time() - start:.0f}s)")


def train_sentencepiece(inputs, prefix, vocab_size, model_type="bpe", **options):
    """One sentencepiece model (``model_type``: bpe or unigram) of ``vocab_size`` pieces on ``inputs``
    -> ``prefix``.model/.vocab; ``options`` override sentencepiece's training options."""
    model = Path(f"{prefix}.model")
    if model.exists():
        return model
    import sentencepiece as spm

    log(f"training sentencepiece ({model_type}, {vocab_size:,} pieces) on {', '.join(Path(p).name for p in inputs)}")
    tmp_prefix = tmp_name(Path(prefix))
    settings = dict(model_type=model_type, character_coverage=0.9995, input_sentence_size=5_000_000,
                    shuffle_input_sentence=True, bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0, hard_vocab_limit=False,
                    minloglevel=2, num_threads=os.cpu_count() or 1)
    spm.SentencePieceTrainer.train(input=",".join(str(p) for p in inputs), model_prefix=str(tmp_prefix),
                                   vocab_size=vocab_size, **dict(settings, **options))
    os.replace(f"{tmp_prefix}.vocab", f"{prefix}.vocab")
    os.replace(f"{tmp_prefix}.model", model)
    return model
