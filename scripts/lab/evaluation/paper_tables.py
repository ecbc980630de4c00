"""What each paper table needs: corpora, models (with their configs/papers/*.args), decoding rows,
and the paper's own numbers to print beside the measured ones.  Read by scripts/pipelines/table.py.

A *section* is one block of a paper table (one corpus, model size or training regime, decoded at
one batch size); every row belongs to one section and names the model it decodes and its
fairseq-generate arguments (the benchmark's row format, scripts/benchmark.py).  ``{CKPT}`` in
arguments is the table's checkpoint folder; every model ends as ``{CKPT}/NAME/checkpoint_final.pt``
(the average the paper takes, or the last checkpoint where it takes none).
"""
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Tuple

BLOCKWISE = ("arch:blockwise_transformer", "criterion:blockwise_cross_entropy")
NAR_DRAFTER = ("task:nar_drafter", "arch:nar_drafter_base", "criterion:nar_drafter_loss")


@dataclass
class Corpus:
    key: str
    folder: str                      # under the data root
    prepare: Tuple[str, ...] = ()    # script + arguments ({RAW}: raw-data root, {ASPEC}: --aspec-dir)
    view_of: Optional[str] = None    # a view (corpus_prep.py view) of another corpus
    view_args: Tuple[str, ...] = ()
    share: str = "--share-all-embeddings"
    paper_train_sentences: int = 0   # for the dry run's estimate of epoch-based placeholders
    needs_aspec: bool = False


@dataclass
class Model:
    name: str
    config: str                      # configs/papers/<paper>/<x>.args
    corpus: str                      # training corpus key
    args: str = ""                   # arch, order flags, ...: appended to the config
    average: Optional[Tuple[str, int]] = None  # ("last", N) update checkpoints | ("best", N) | None
    distill_from: Optional[str] = None  # train on the teacher's beam output (scripts/distill.py)
    distill_beam: int = 5
    needs: Tuple[str, ...] = ()      # models whose checkpoint the args name ({CKPT}/NAME/...)
    requires: Tuple[str, ...] = ()   # plugin registrations the model needs ("arch:...", "task:...")
    seed: int = 1


@dataclass
class Row:
    section: str
    method: str
    model: str
    args: str
    beam: int = 1
    paper: dict = field(default_factory=dict)
    reference: bool = False          # the section's speed reference (ratio 1.0)
    baseline: bool = False           # benchmark baseline (greedy rows: identical-to-greedy reference)
    lossless: bool = False           # report the identical-to-greedy fraction
    uses: Tuple[str, ...] = ()       # other models the args name (a drafter)
    requires: Tuple[str, ...] = ()


@dataclass
class Section:
    key: str
    title: str
    corpus: str
    batch_size: int


@dataclass
class Table:
    key: str
    title: str
    citation: str
    corpora: dict
    models: list
    sections: list
    rows: list
    paper_columns: list              # keys of Row.paper, in order
    ratio: str = "seconds"           # "seconds": speed-up = reference time / row time (same sentences);
    #                                  "tokens_per_s": ratio of tokens/s (Imamura & Sumita's "Ratio")
    runs: int = 5
    notes: list = field(default_factory=list)
    gpu_hours: str = ""
    disk: str = ""

    def model(self, name):
        return next(m for m in self.models if m.name == name)


# ----------------------------------------------------------------------------------------------
# corpora
# ----------------------------------------------------------------------------------------------

def wmt14(key="wmt14"):
    return Corpus(key, "wmt14_en_de", ("scripts/pipelines/prepare_wmt14_en_de.py", "--recipe", "standard",
                                       "--raw-dir", "{RAW}/wmt14"), paper_train_sentences=4_500_000)


def wmt14_de_en():
    return Corpus("wmt14_de_en", "wmt14_de_en", view_of="wmt14", view_args=("--reverse",))


def wmt16():
    return Corpus("wmt16", "wmt16_en_ro", ("scripts/pipelines/prepare_wmt16_en_ro.py", "--raw-dir", "{RAW}/wmt16"),
                  paper_train_sentences=610_000)


def wmt16_ro_en():
    return Corpus("wmt16_ro_en", "wmt16_ro_en", view_of="wmt16", view_args=("--reverse",))


def _by_key(*corpora):
    return {c.key: c for c in corpora}


# ----------------------------------------------------------------------------------------------
# Imamura & Sumita, Table 2 (a) base and (b) big, WMT-14 en-de and ASPEC ja-en
# ----------------------------------------------------------------------------------------------

IMAMURA_NUMBERS = {  # (size, corpus) -> method -> (BLEU, tokens/s (ratio))
    ("base", "wmt14"): {"bidir": (25.62, "2,251 (113%)"), "l2r": (26.45, "1,997 (—)"), "r2l": (25.79, "2,004 (100%)"),
                        "dt_l2r": (24.55, "2,349 (118%)"), "dt_r2l": (24.43, "2,327 (117%)"),
                        "mp10": (22.31, "1,564 (78%)"), "mp4": (19.62, "2,910 (146%)")},
    ("base", "aspec"): {"bidir": (28.23, "2,811 (149%)"), "l2r": (28.65, "1,891 (—)"), "r2l": (28.31, "1,775 (94%)"),
                        "dt_l2r": (26.47, "2,717 (144%)"), "dt_r2l": (27.26, "2,725 (144%)"),
                        "mp10": (25.05, "1,476 (78%)"), "mp4": (22.08, "2,836 (150%)")},
    ("big", "wmt14"): {"bidir": (25.56, "1,888 (124%)"), "l2r": (26.59, "1,520 (—)"), "r2l": (26.14, "1,537 (101%)"),
                       "dt_l2r": (24.16, "1,915 (126%)"), "dt_r2l": (24.42, "1,958 (129%)"),
                       "mp10": (23.47, "1,092 (72%)"), "mp4": (20.34, "2,234 (147%)")},
    ("big", "aspec"): {"bidir": (27.50, "2,241 (155%)"), "l2r": (27.85, "1,449 (—)"), "r2l": (28.23, "1,376 (95%)"),
                       "dt_l2r": (26.17, "2,229 (154%)"), "dt_r2l": (26.57, "2,208 (152%)"),
                       "mp10": (25.00, "1,095 (76%)"), "mp4": (22.30, "2,060 (142%)")},
}


def imamura():
    corpora = _by_key(
        Corpus("wmt14", "wmt14_en_de_imamura", ("scripts/pipelines/prepare_wmt14_en_de.py", "--recipe", "imamura",
                                                "--raw-dir", "{RAW}/wmt14"), paper_train_sentences=4_500_000),
        Corpus("aspec", "aspec_ja_en", ("scripts/pipelines/prepare_aspec_ja_en.py", "--aspec-dir", "{ASPEC}"),
               share="--share-decoder-input-output-embed", paper_train_sentences=3_000_000, needs_aspec=True))
    arch = {"base": ("transformer", "reordered_transformer_base"),
            "big": ("transformer_vaswani_wmt_en_de_big", "reordered_transformer_big")}
    # kind -> (method, plain arch?, order flags for training, extra flags for decoding)
    kinds = {
        "bidir": ("Double-token bidir. (proposed)", False, "--target-order head_tail", "--double-topk"),
        "l2r": ("Single-token L2R", True, "", ""),
        "r2l": ("Single-token R2L", False, "--target-order r2l", ""),
        "dt_l2r": ("Double-token L2R", False, "--target-order l2r --tokens-per-direction 2", ""),
        "dt_r2l": ("Double-token R2L", False, "--target-order r2l --tokens-per-direction 2", ""),
    }
    models, sections, rows = [], [], []
    for size in ("base", "big"):
        for corpus in ("wmt14", "aspec"):
            sec = f"{size}_{corpus}"
            name = {"wmt14": "WMT-14 en-de (newstest2010-2016)", "aspec": "ASPEC ja-en (devtest+test)"}[corpus]
            sections.append(Section(sec, f"({'a' if size == 'base' else 'b'}) Transformer {size}, {name}", corpus, 32))
            numbers = IMAMURA_NUMBERS[(size, corpus)]
            for kind, (method, plain, order, decode) in kinds.items():
                m = f"{sec}_{kind}"
                models.append(Model(m, f"configs/papers/imamura/{size}.args", corpus,
                                    f"--arch {arch[size][0 if plain else 1]} {order}".strip(), average=("best", 10)))
                bleu, speed = numbers[kind]
                rows.append(Row(sec, method, m, f"--task fast_translation --lenpen 1.0 {order} {decode}".strip(), beam=10,
                                paper={"BLEU": bleu, "Tokens/s (Ratio)": speed}, reference=kind == "l2r",
                                baseline=kind == "l2r"))
            models.append(Model(f"{sec}_cmlm", f"configs/papers/imamura/cmlm_{size}.args", corpus, average=("best", 10)))
            for it in (10, 4):
                bleu, speed = numbers[f"mp{it}"]
                rows.append(Row(sec, f"Mask-Predict ({it} iterations)", f"{sec}_cmlm",
                                f"--task translation_lev --iter-decode-max-iter {it} --iter-decode-with-beam 5 "
                                "--iter-decode-eos-penalty 0", beam=1, paper={"BLEU": bleu, "Tokens/s (Ratio)": speed}))
    return Table(
        "imamura", "Imamura & Sumita, Table 2: translation quality and speed (beam 10, batch 32, fp16)",
        "Kenji Imamura and Eiichiro Sumita. Transformer-based Double-token Bidirectional Autoregressive "
        "Decoding in Neural Machine Translation. WAT 2020 (7th Workshop on Asian Translation)",
        corpora, models, sections, rows, ["BLEU", "Tokens/s (Ratio)"], ratio="tokens_per_s", runs=5,
        notes=["Ratio: tokens/s of the row / tokens/s of single-token L2R in the same run (the paper's 'Ratio').",
               "Mask-Predict decodes with 5 length candidates (--iter-decode-with-beam 5), the paper's beam 5."],
        gpu_hours="~1,800 V100-hours (24 models; early-stopped AR models ~50 h base / ~130 h big on WMT14)",
        disk="~15 GB data (WMT14 raw + prepared, ASPEC prepared); checkpoints ~10 GB per base and ~30 GB per big "
             "model before --prune-checkpoints (~2 GB / 6 GB after)")


# ----------------------------------------------------------------------------------------------
# Zhang, Titov & Sennrich (IBDecoder), Table 1, WMT14 En-De
# ----------------------------------------------------------------------------------------------

def ibdecoder():
    corpora = _by_key(wmt14())
    kinds = [  # name, method, train flags, (B=4 numbers), (B=1 numbers): BLEU, +KD BLEU, latency, speedup
        ("transformer", "1 Transformer (h=1, c=1)", "--arch transformer", (26.9, 27.3, 387, "1.00×"), (26.0, 26.8, 294, "1.32×")),
        ("ibdecoder", "2 IBDecoder (h=2, c=1)", "--arch reordered_transformer_base --target-order interleave",
         (26.2, 27.1, 204, "1.90×"), (25.0, 26.8, 166, "2.33×")),
        ("ibdecoder_sa", "3 IBDecoder+SA (h=2, c=2)",
         "--arch reordered_transformer_base --target-order interleave --tokens-per-direction 2",
         (23.0, 26.3, 117, "3.31×"), (21.7, 26.0, 89, "4.35×")),
        ("imdecoder", "4 IMDecoder (h=4, c=1)", "--arch reordered_transformer_base --target-order multi_segment --directions 4",
         (21.5, 24.6, 102, "3.79×"), (19.7, 24.1, 85, "4.55×")),
    ]
    models, rows = [], []
    sections = [Section("raw", "trained from scratch (BLEU column)", "wmt14", 1),
                Section("kd", "trained with knowledge distillation (+KD column; latency and speed-up)", "wmt14", 1)]
    for name, method, flags, b4, b1 in kinds:
        order = flags.split(" ", 2)[2] if flags.count(" ") >= 2 else ""
        models.append(Model(name, "configs/papers/ibdecoder/base.args", "wmt14", flags, average=("last", 5)))
        # KD teacher: the paper does not name it; ours is row 1's Transformer (beam 4 on the training set)
        models.append(Model(f"{name}_kd", "configs/papers/ibdecoder/base.args", "wmt14", flags, average=("last", 5),
                            distill_from="transformer", distill_beam=4))
        for beam, nums in ((4, b4), (1, b1)):
            args = f"--task fast_translation --lenpen 0.6 {order}".strip()
            ref = name == "transformer" and beam == 4
            rows.append(Row("raw", method, name, args, beam, {"BLEU": nums[0]}, reference=ref,
                            baseline=name == "transformer"))
            rows.append(Row("kd", method, f"{name}_kd", args, beam,
                            {"BLEU": nums[1], "Latency (ms)": nums[2], "Speedup": nums[3]}, reference=ref,
                            baseline=name == "transformer"))
    return Table(
        "ibdecoder", "Zhang, Titov & Sennrich, Table 1: WMT14 En-De (batch 1, beam 4 / 1, length penalty 0.6)",
        "Biao Zhang, Ivan Titov and Rico Sennrich. Fast Interleaved Bidirectional Sequence Generation. "
        "WMT 2020 (Fifth Conference on Machine Translation); arXiv:2010.14481",
        corpora, models, sections, rows, ["BLEU", "Latency (ms)", "Speedup"], ratio="seconds", runs=3,
        notes=["Speedup: decoding time of the Transformer at beam 4 / the row's time, same sentences, batch 1 "
               "(the paper: averaged over three runs; measured on KD models).",
               "KD teacher: row 1's Transformer (the paper does not name its teacher)."],
        gpu_hours="~200 V100-hours (8 base models of 100K updates x 25K tokens, one distillation of the training set)",
        disk="~8 GB data; ~5 GB checkpoints per model before --prune-checkpoints")


# ----------------------------------------------------------------------------------------------
# Stern, Shazeer & Uszkoreit (blockwise parallel decoding), Tables 1 and 4
# ----------------------------------------------------------------------------------------------

STERN_DEV = {  # k -> (Regular, Distillation, Fine Tuning, Both): (BLEU, mean accepted block size)
    2: ((25.81, 1.51), (26.52, 1.55), (25.74, 1.78), (26.58, 1.88)),
    4: ((25.84, 1.73), (26.31, 1.85), (25.05, 2.69), (26.36, 3.27)),
    6: ((26.08, 1.76), (26.26, 1.90), (24.69, 2.98), (26.18, 4.18)),
    8: ((25.82, 1.76), (26.25, 1.91), (24.27, 3.01), (26.11, 4.69)),
    10: ((25.69, 1.74), (26.34, 1.90), (23.51, 2.87), (25.60, 4.95)),
}
STERN_TEST = {2: (28.95, "1.72x"), 4: (28.54, "2.69x"), 6: (28.11, "3.10x"), 8: (27.88, "3.31x"), 10: (27.40, "3.04x")}


def stern():
    corpora = _by_key(wmt14(), Corpus("wmt14_dev", "wmt14_en_de_dev2013", view_of="wmt14",
                                      view_args=("--test-from", "valid")))
    models = [Model("baseline", "configs/papers/stern/base.args", "wmt14", seed=1),
              # 6.2: the distilled data come from "a separate baseline run" (another seed), beam search
              # with Vaswani et al.'s settings (beam 4)
              Model("teacher", "configs/papers/stern/base.args", "wmt14", seed=2),
              Model("baseline_kd", "configs/papers/stern/base.args", "wmt14", distill_from="teacher", distill_beam=4)]
    settings = [("regular", "Regular", True, False), ("distill", "Distillation", True, True),
                ("finetune", "Fine Tuning", False, False), ("both", "Both", False, True)]
    sections = [Section("dev", "Table 1: newstest2013 (development set), greedy, batch 1", "wmt14_dev", 1),
                Section("test", "Table 4: newstest2014, fine-tuned on distilled data, batch 1", "wmt14", 1)]
    rows = [Row("dev", "k=1 Regular (base model, greedy)", "baseline", "--task fast_translation",
                paper={"BLEU": 26.00, "Mean accepted": 1.00}, baseline=True),
            Row("dev", "k=1 Distillation (base model on distilled data, greedy)", "baseline_kd", "--task fast_translation",
                paper={"BLEU": 26.41, "Mean accepted": 1.00}, baseline=True),
            Row("test", "Transformer with distillation (greedy, k=1)", "baseline_kd", "--task fast_translation",
                paper={"BLEU": 29.11, "Speedup": "1.00x"}, reference=True, baseline=True)]
    for k in (2, 4, 6, 8, 10):
        for i, (key, label, frozen, distilled) in enumerate(settings):
            base = "baseline_kd" if distilled else "baseline"
            name = f"bw_{key}_k{k}"
            models.append(Model(name, "configs/papers/stern/blockwise.args", "wmt14",
                                f"--base-checkpoint {{CKPT}}/{base}/checkpoint_final.pt --block-heads {k}"
                                + (" --freeze-base" if frozen else ""), distill_from="teacher" if distilled else None,
                                distill_beam=4, needs=(base,), requires=BLOCKWISE))
            decode = f"--task fast_translation --drafter blockwise --block-size {k} --acceptance exact --adaptive-block-size off"
            bleu, block = STERN_DEV[k][i]
            rows.append(Row("dev", f"k={k} {label}", name, decode, paper={"BLEU": bleu, "Mean accepted": block},
                            requires=BLOCKWISE))
            if key == "both":
                rows.append(Row("test", f"Blockwise parallel decoding (k={k})", name, decode,
                                paper={"BLEU": STERN_TEST[k][0], "Speedup": STERN_TEST[k][1]}, requires=BLOCKWISE))
    return Table(
        "stern", "Stern, Shazeer & Uszkoreit, Tables 1 and 4: blockwise parallel decoding, WMT14 En-De",
        "Mitchell Stern, Noam Shazeer and Jakob Uszkoreit. Blockwise Parallel Decoding for Deep Autoregressive "
        "Models. NeurIPS 2018; arXiv:1811.03115",
        corpora, models, sections, rows, ["BLEU", "Mean accepted", "Speedup"], ratio="seconds", runs=5,
        notes=["Mean accepted: tokens per draft-and-verify iteration as the engine reports it (mean_accepted).",
               "Speedup: greedy decoding time of the distilled base model / the row's time, batch 1.",
               "Regular / Distillation keep the base model frozen (--freeze-base); Fine Tuning / Both fine-tune it; "
               "Distillation / Both train on the teacher's beam-4 output (scripts/distill.py)."],
        gpu_hours="~25,000 V100-hours at the paper's 1M steps x 8 GPUs for each of 23 models "
                  "(--train-extra '--max-update 100000' gives a tenth)",
        disk="~8 GB data + one distilled copy (~1 GB); ~2.5 GB checkpoints per model")


# ----------------------------------------------------------------------------------------------
# Xia et al. (GAD / GAD++), Tables 5 and 14
# ----------------------------------------------------------------------------------------------

GAD_NUMBERS = {  # direction -> row -> numbers (Table 14; the teacher's BLEU from Table 5)
    "en-de": {"teacher": 29.31, "b5": 28.89, "b1": 28.73, "gad": (4.9, 28.73, "3.0×"),
              "hq": ((3, 1.0), 4.0, 28.89, "3.6×"), "he": ((5, 3.0), 3.1, 28.73, "4.5×")},
    "de-en": {"teacher": 32.11, "b5": 32.53, "b1": 32.18, "gad": (4.4, 32.18, "3.0×"),
              "hq": ((3, 1.0), 3.4, 32.56, "3.9×"), "he": ((5, 3.0), 2.5, 32.19, "4.8×")},
    "en-ro": {"teacher": 34.72, "b5": 34.96, "b1": 34.83, "gad": (6.4, 34.83, "2.2×"),
              "hq": ((5, 4.0), 4.5, 35.32, "3.1×"), "he": ((5, 6.0), 4.0, 34.92, "3.3×")},
    "ro-en": {"teacher": 34.49, "b5": 34.86, "b1": 34.65, "gad": (5.9, 34.65, "2.4×"),
              "hq": ((3, 2.0), 4.6, 34.98, "2.9×"), "he": ((5, 3.0), 4.0, 34.80, "3.3×")},
}


def gad():
    corpora = _by_key(wmt14(), wmt14_de_en(), wmt16(), wmt16_ro_en())
    corpus_of = {"en-de": "wmt14", "de-en": "wmt14_de_en", "en-ro": "wmt16", "ro-en": "wmt16_ro_en"}
    models, sections, rows = [], [], []
    for d, corpus in corpus_of.items():
        n = GAD_NUMBERS[d]
        tag = d.replace("-", "")
        wmt16_pair = "ro" in d
        teacher, verifier, drafter = f"teacher_{tag}", f"verifier_{tag}", f"drafter_{tag}"
        # 4.2.1: Transformer-big teacher for WMT14, Transformer-base for WMT16
        models.append(Model(teacher, "configs/papers/gad/teacher.args", corpus,
                            "--arch transformer" if wmt16_pair else "--arch transformer_vaswani_wmt_en_de_big",
                            average=("last", 10)))
        models.append(Model(verifier, "configs/papers/gad/verifier.args", corpus,
                            "--dropout 0.3" if wmt16_pair else "", average=("last", 10), distill_from=teacher))
        models.append(Model(drafter, "configs/papers/gad/drafter.args", corpus, average=("last", 10),
                            distill_from=teacher, requires=NAR_DRAFTER))
        sections.append(Section(tag, f"WMT{'16' if wmt16_pair else '14'} {d.upper()} (batch 1)", corpus, 1))
        gad_args = (f"--task fast_translation --drafter nar --drafter-path {{CKPT}}/{drafter}/checkpoint_final.pt "
                    "--block-size 25 --adaptive-block-size off")  # the paper's k every call
        (bh, th), ith, bleuh, sh = n["hq"]
        (be, te), ite, bleue, se = n["he"]
        rows += [
            Row(tag, "Teacher (beam 5)", teacher, "--task fast_translation", 5, {"BLEU": n["teacher"]}),
            Row(tag, "AR verifier (beam 5)", verifier, "--task fast_translation", 5, {"BLEU": n["b5"], "Speed": "1.0×"},
                reference=True),
            Row(tag, "AR verifier (beam 1)", verifier, "--task fast_translation", 1,
                {"Iter.": "N", "BLEU": n["b1"], "Speed": "1.1×"}, baseline=True),
            Row(tag, "GAD (k=25)", verifier, gad_args + " --acceptance exact", 1,
                {"Iter.": n["gad"][0], "BLEU": n["gad"][1], "Speed": n["gad"][2]}, lossless=True, uses=(drafter,),
                requires=NAR_DRAFTER),
            Row(tag, f"GAD++ (k=25, high-quality, top-{bh}, tau={th})", verifier,
                gad_args + f" --acceptance gad_pp --gad-beta {bh} --gad-tau {th}", 1,
                {"Iter.": ith, "BLEU": bleuh, "Speed": sh}, uses=(drafter,), requires=NAR_DRAFTER),
            Row(tag, f"GAD++ (k=25, high-efficiency, top-{be}, tau={te})", verifier,
                gad_args + f" --acceptance gad_pp --gad-beta {be} --gad-tau {te}", 1,
                {"Iter.": ite, "BLEU": bleue, "Speed": se}, uses=(drafter,), requires=NAR_DRAFTER),
        ]
    return Table(
        "gad", "Ge et al. (GAD / GAD++), Tables 5 and 14: WMT14 EN<->DE and WMT16 EN<->RO (batch 1)",
        "Tao Ge, Heming Xia, Xin Sun, Si-Qing Chen and Furu Wei. Lossless Acceleration for Seq2seq Generation with "
        "Aggressive Decoding. arXiv:2205.10350, 2022 (GAD also appeared as Xia et al., Speculative Decoding: "
        "Exploiting Speculative Execution for Accelerating Seq2seq Generation, Findings of EMNLP 2023)",
        corpora, models, sections, rows, ["Iter.", "BLEU", "Speed"], ratio="seconds", runs=5,
        notes=["Speed: decoding time of the AR verifier at beam 5 / the row's time, batch 1 (the paper's baseline).",
               "Iter.: decoder calls per sentence (the model_calls count / sentences).",
               "The NAR drafter's own row (decoding with the drafter alone) is not reproduced: the plugin "
               "decodes with the drafter only inside the draft-and-verify engine.",
               "Drafter and verifier train on the teacher's beam-5 output (scripts/distill.py)."],
        gpu_hours="~17,000 V100-hours at Table 13's settings (per direction: big teacher ~1,100, verifier 100K x 640K "
                  "tokens ~2,100, drafter 300K x 131K tokens ~1,300)",
        disk="~10 GB data + 4 distilled copies (~1 GB each); ~1-3 GB checkpoints per model after pruning")


# ----------------------------------------------------------------------------------------------
# Santilli et al. (Jacobi decoding), Table 1, Opus rows
# ----------------------------------------------------------------------------------------------

JACOBI_NUMBERS = {  # direction -> (greedy, beam 5, PJ, PGJ b=5, PGJ b=3, HGJ b=3) speed; BLEU greedy, beam
    "en-de": ((1.00, 0.71, 0.73, 1.28, 1.34, 1.34), 28.24, 28.68),
    "de-en": ((1.00, 0.72, 0.75, 1.32, 1.37, 1.37), 33.10, 33.92),
    "en-ro": ((1.00, 0.70, 0.66, 1.33, 1.38, 1.38), 27.41, 27.61),
    "ro-en": ((1.00, 0.72, 0.66, 1.29, 1.35, 1.35), 37.01, 37.84),
}


def jacobi():
    corpora = _by_key(wmt14(), wmt14_de_en(), wmt16(), wmt16_ro_en())
    corpus_of = {"en-de": "wmt14", "de-en": "wmt14_de_en", "en-ro": "wmt16", "ro-en": "wmt16_ro_en"}
    models, sections, rows = [], [], []
    for d, corpus in corpus_of.items():
        tag = d.replace("-", "")
        speeds, bleu_greedy, bleu_beam = JACOBI_NUMBERS[d]
        m = f"base_{tag}"
        models.append(Model(m, "configs/papers/jacobi/base.args", corpus, average=("last", 5)))
        sections.append(Section(tag, f"{'WMT14' if corpus.startswith('wmt14') else 'WMT16'} {d} (batch 1)", corpus, 1))
        ft = "--task fast_translation"
        specs = [  # method, args, beam, paper speed index, lossless
            ("Greedy Autoregressive", ft, 1, 0, False),
            ("Beam Search (beam = 5)", ft + " --lenpen 1.0", 5, 1, False),
            ("PJ Decoding (greedy-oracle length, as the paper)", ft + " --drafter jacobi_pj --jacobi-length greedy_oracle",
             1, 2, True),
            ("PGJ Decoding (b = 5, greedy-oracle length)", ft + " --drafter jacobi_pgj --block-size 5 "
             "--jacobi-length greedy_oracle", 1, 3, True),
            ("PGJ Decoding (b = 3, greedy-oracle length)", ft + " --drafter jacobi_pgj --block-size 3 "
             "--jacobi-length greedy_oracle", 1, 4, True),
            ("HGJ Decoding (b = 3)", ft + " --drafter jacobi_hgj --block-size 3", 1, 5, True),
            ("PGJ Decoding (b = 3, max length: no oracle)", ft + " --drafter jacobi_pgj --block-size 3 "
             "--jacobi-length max", 1, None, True),
        ]
        for method, args, beam, idx, lossless in specs:
            paper = {} if idx is None else {"Speed": f"{speeds[idx]:.2f}", "BLEU": bleu_beam if beam == 5 else bleu_greedy}
            rows.append(Row(tag, method, m, args, beam, paper, reference=idx == 0, baseline=idx == 0, lossless=lossless))
    return Table(
        "jacobi", "Santilli et al., Table 1 (Opus rows): parallel Jacobi decoding, batch 1",
        "Andrea Santilli, Silvio Severino, Emilian Postolache, Valentino Maiorca, Michele Mancusi, Riccardo Marin "
        "and Emanuele Rodolà. Accelerating Transformer Inference for Translation via Parallel Decoding. "
        "ACL 2023; arXiv:2305.10427",
        corpora, models, sections, rows, ["Speed", "BLEU"], ratio="seconds", runs=5,
        notes=["The paper decodes public Opus-MT (Marian) models on a CPU; these are Transformer base models trained "
               "here (configs/papers/jacobi/base.args). Run with --device cpu for the paper's CPU setting.",
               "PJ / PGJ need the target length: the paper assumes it known; the 'greedy-oracle' rows take it "
               "from a greedy pre-run that is timed and counted with the row; the last row needs none.",
               "Speed: greedy decoding time / the row's time, same sentences, batch 1."],
        gpu_hours="~100 V100-hours (4 base models of 100K updates x 25K tokens)",
        disk="~10 GB data (WMT14 + WMT16); ~2.5 GB checkpoints per model before --prune-checkpoints")



# ----------------------------------------------------------------------------------------------
# the table, printed
# ----------------------------------------------------------------------------------------------


def _fmt(v, digits=2):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def render_table(table, secs, rows, results_dir, skipped):
    """Markdown: per section, the paper's numbers beside the measured ones."""
    ratio_name = "tok/s ratio" if table.ratio == "tokens_per_s" else "speed-up"
    lines = [f"# {table.title}", "", f"Paper: {table.citation}.", ""]
    meta = None
    for s in secs:
        results = {}
        path = Path(results_dir) / s.key / "results.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                r = json.loads(line)
                results[(r["method"], r["beam"])] = r
                meta = meta or r
        ref_row = next((r for r in rows if r.section == s.key and r.reference), None)
        ref = results.get((ref_row.method, ref_row.beam)) if ref_row else None
        lines += [f"## {s.title}", ""]
        head = ["method", "beam"] + [f"{c} (paper)" for c in table.paper_columns] + \
               ["BLEU", "tok/s", ratio_name, "calls/token", "ms/sentence", "decoder calls", "calls/sentence",
                "mean accepted", "identical"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in (r for r in rows if r.section == s.key):
            paper = [_fmt(row.paper.get(c)) for c in table.paper_columns]
            res = results.get((row.method, row.beam))
            if res is None:
                why = skipped.get((s.key, row.method, row.beam), "not decoded yet")
                lines.append("| " + " | ".join([row.method, str(row.beam)] + paper + [f"skipped: {why}"] + [""] * 8) + " |")
                continue
            ratio = None
            if ref is not None and res.get("seconds"):
                ratio = (res["tokens_per_s"] / ref["tokens_per_s"] if table.ratio == "tokens_per_s"
                         else ref["seconds"] / res["seconds"])
            per_sent = res["seconds"] / res["timed_sentences"] * 1000 if res.get("timed_sentences") else None
            # decoder calls per sentence (GAD's "Iter."): meaningful at batch 1 only; the calls were
            # counted over the timed sentences, so divided by their number
            calls = (res["model_calls"] / res["counts_sentences"] if res.get("model_calls")
                     and res.get("counts_sentences") and res.get("batch_size") == 1 else None)
            ident = res.get("identical_to_greedy")
            lines.append("| " + " | ".join([row.method, str(row.beam)] + paper + [
                _fmt(res.get("bleu")), _fmt(res.get("tokens_per_s"), 1), _fmt(ratio), _fmt(res.get("calls_per_token"), 3),
                _fmt(per_sent, 1),
                _fmt(res.get("model_calls")), _fmt(calls), _fmt(res.get("mean_accepted")), "–" if ident is None else f"{ident:.3f}"]) + " |")
        lines.append("")
    if meta:
        lines.append(f"Measured: device {meta['device']}, {meta['dtype']}, {meta['sentences']} test sentences for BLEU "
                     f"(sacreBLEU `{meta.get('sacrebleu_signature')}`), {meta['timed_sentences']} timed x "
                     f"{meta['runs']} runs, output length <= {meta['max_len']}.")
        lines.append("")
    lines += [f"- {n}" for n in table.notes]
    return "\n".join(lines) + "\n"


TABLES = {"imamura": imamura, "ibdecoder": ibdecoder, "stern": stern, "gad": gad, "jacobi": jacobi}
