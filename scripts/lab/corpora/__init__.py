"""Corpus preparation shared by the message-catalog corpora (scripts/build_message_corpus.py,
scripts/build_typo_corpus.py), distillation (scripts/distill.py) and the paper data pipelines
(WMT14 en-de, WMT16 en-ro, ASPEC ja-en; scripts/pipelines/, docs/METHODS.md §5).

Every step of the pipelines writes its outputs to a temporary name and renames them when complete,
and is skipped when its outputs already exist: an interrupted preparation resumes where it stopped
and never leaves a half-written file behind.  The output folder has the layout
``scripts.lab.evaluation.corpus.Corpus`` reads:

    OUT/bin/                 fairseq-preprocess output (train/valid/test, dictionaries)
    OUT/test.SRC, test.TGT   the raw (detokenised) test set; test.TGT is the BLEU reference
    OUT/valid.SRC, valid.TGT the raw validation set
    OUT/subword              "subword-nmt" (Moses-tokenised + BPE) or "sentencepiece"
    OUT/bpe.codes / spm.*    the subword model(s)
    OUT/work/                intermediate files (tokenised, BPE'd, filtered); may be deleted
    OUT/DONE                 written last

Modules: :mod:`.files` (logging, atomic files, lines), :mod:`.sources` (finding, downloading and
extracting raw corpora and test sets), :mod:`.text` (tokenisation, segmentation and subwords
applied to files in worker processes; the length filter), :mod:`.subwords` (learning BPE and
sentencepiece models), :mod:`.binarize` (fairseq-preprocess), :mod:`.views` (reversed and
dev-as-test views of a prepared folder).

The offline corpus builders' logic: :mod:`.message_catalogs` (pairs from gettext catalogs; the message
corpus), :mod:`.offline_corpus` (their hash split, joint subwords and binarization), :mod:`.typos` (a
keyboard typo), :mod:`.stdlib_prose`, :mod:`.gec_errors` and :mod:`.gec_corpus` (the GEC-like corpus);
distillation's: :mod:`.distillation` (the teacher's shards) and :mod:`.distilled_folder` (the distilled
folder, shipped and restored).
"""
