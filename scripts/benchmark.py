#!/usr/bin/env python
"""Side-by-side decoding benchmark (SPEC §4): every method, one process, one test set.

Each *row* of a rows file (JSON list) is a decoding configuration written as fairseq-generate
arguments, so the benchmark measures exactly what a user runs::

    {"method": "fairseq greedy", "model": "baseline", "args": "--task fast_translation",
     "beams": [1], "baseline": true}
    {"method": "Jacobi HGJ b=3", "model": "baseline",
     "args": "--task fast_translation --drafter jacobi_hgj --block-size 3", "lossless": true}
    {"method": "CTranslate2 greedy", "model": "baseline", "backend": "ctranslate2"}

``model`` names ``<checkpoints>/<model>/checkpoint_best.pt`` (or give ``path``); ``corpus`` replaces
the corpus for a row with another corpus of the same data root (e.g. ``"corpus": "pt_PT-pt_BR"``);
in ``args``, ``{CKPT}`` stands for the checkpoints root and ``{DATA}`` for the data root (a GAD row's
``--drafter-path {CKPT}/gad_drafter/checkpoint_best.pt``; ``--skip-missing`` skips it while untrained).  For every row x beam x batch size
the harness loads the model once (loading is never timed), decodes the whole test set once for
BLEU (sacreBLEU on detokenised output, against the raw reference file) and the
identical-to-greedy fraction, then times a warm-up and ``--runs`` passes over the sentences with
id < ``--timed-sentences`` (the split is in hash order: a random sample of every length), batched
in fairseq-generate's length-sorted order.

Speed: ``seconds`` is the mean time of one timed pass (``seconds_min`` its minimum),
``tokens_per_s`` counts generated target tokens including EOS (fairseq-generate's count),
``speed_ratio`` = baseline seconds / row seconds, where the baseline is the row marked
``"baseline": true`` on the same corpus with the same batch size and beam (or beam 1 when it has
no such beam),
measured in the same run.  ``model_calls`` are decoder invocations over the whole test set
(the generator's own count where it keeps one, else a forward hook on the decoder's first layer);
``mean_accepted`` is tokens accepted per draft-verify iteration.

Writes ``results.jsonl``, ``results.md`` and ``speed_vs_bleu.png`` into ``--out``.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_plugins"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


class BenchmarkError(RuntimeError):
    """A problem with the benchmark's inputs; the message says how to fix it."""


# ----------------------------------------------------------------------------------------------
# corpus side: raw references, detokenisation, BLEU
# ----------------------------------------------------------------------------------------------


class Corpus:
    """A corpus folder made by scripts/build_message_corpus.py (or a paper pipeline):
    ``bin/`` (fairseq-preprocess output), raw ``test.<lang>`` files and the subword model."""

    def __init__(self, folder, subset="test"):
        self.folder = Path(folder)
        self.bin = self.folder / "bin"
        if not self.bin.is_dir():
            raise BenchmarkError(f"{self.bin} does not exist: build the corpus first "
                                 f"(scripts/build_message_corpus.py --out {self.folder}) or pass --data")
        dicts = sorted(p.name[len("dict."):-len(".txt")] for p in self.bin.glob("dict.*.txt"))
        pairs = sorted({p.name.split(".")[1] for p in self.bin.glob(f"{subset}.*-*.*.bin")})
        if not pairs:
            raise BenchmarkError(f"no binarized '{subset}' split in {self.bin}")
        self.src, self.tgt = pairs[0].split("-")
        assert self.src in dicts and self.tgt in dicts, (dicts, pairs)
        self.subset = subset
        ref = self.folder / f"{subset}.{self.tgt}"
        self.references = ref.read_text(encoding="utf-8").splitlines() if ref.exists() else None
        kind = (self.folder / "subword").read_text().strip() if (self.folder / "subword").exists() else "sentencepiece"
        self.subword = kind
        if self.references is not None and not self.references:
            raise BenchmarkError(f"the test set {ref} is empty: nothing to benchmark")

    def detokenize(self, pieces):
        """Subword pieces (a string) -> plain text, undoing the corpus' own segmentation."""
        if self.subword == "sentencepiece":
            return pieces.replace(" ", "").replace("\u2581", " ").strip()
        text = pieces.replace("@@ ", "").replace("@@", "")
        from sacremoses import MosesDetokenizer  # only for subword-nmt corpora of the paper pipelines

        return MosesDetokenizer(lang=self.tgt).detokenize(text.split())

    def bleu(self, hypotheses, ids):
        import sacrebleu

        if self.references is None:
            return None, None
        refs = [self.references[i] for i in ids]
        tokenize = "ja-mecab" if self.tgt.startswith("ja") else "13a"
        metric = sacrebleu.metrics.BLEU(tokenize=tokenize)
        score = metric.corpus_score(hypotheses, [refs])
        return round(score.score, 2), str(metric.get_signature())


# ----------------------------------------------------------------------------------------------
# fairseq backend: the row's arguments parsed by fairseq-generate's own parser
# ----------------------------------------------------------------------------------------------


def hypothesis_text(tgt_dict, tokens, corpus):
    """Token ids (with EOS) -> detokenised text, the same way for every backend."""
    return corpus.detokenize(tgt_dict.string([t for t in tokens if t != tgt_dict.eos()]))


class FairseqRunner:
    def __init__(self, corpus, checkpoint, row_args, beam, batch_size, device, fp16, threads, max_len=(0.0, 200),
                 timed_sentences=0):
        import torch
        from fairseq import checkpoint_utils, options, tasks, utils
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        import fairseq_plugins  # noqa: F401  (compat + registration)

        argv = [str(corpus.bin), "--path", str(checkpoint), "--user-dir", str(PLUGIN_DIR),
                "--gen-subset", corpus.subset, "--beam", str(beam), "--batch-size", str(batch_size),
                "--required-batch-size-multiple", "1", "--source-lang", corpus.src, "--target-lang", corpus.tgt,
                "--max-len-a", str(max_len[0]), "--max-len-b", str(max_len[1])]
        argv += shlex.split(row_args)
        if device == "cpu":
            argv.append("--cpu")
        if fp16:
            argv.append("--fp16")
        parser = options.get_generation_parser()
        args = options.parse_args_and_arch(parser, input_args=argv)
        cfg = convert_namespace_to_omegaconf(args)
        utils.import_user_module(cfg.common)
        torch.set_num_threads(threads)
        self.task = tasks.setup_task(cfg.task)
        overrides = {"data": str(corpus.bin)}
        models, _ = checkpoint_utils.load_model_ensemble([str(checkpoint)], arg_overrides=overrides, task=self.task)
        for m in models:
            if fp16:
                m.half()
            if device != "cpu":
                m.cuda()
            m.prepare_for_inference_(cfg)
        self.models, self.cfg, self.device = models, cfg, device
        self.generator = self.task.build_generator(models, cfg.generation)
        self.task.load_dataset(corpus.subset, task_cfg=cfg.task)
        dataset = self.task.dataset(corpus.subset)
        if len(dataset) == 0:
            raise BenchmarkError(f"the {corpus.subset} split of {corpus.bin} is empty")
        max_positions = utils.resolve_max_positions(self.task.max_positions(), *[m.max_positions() for m in models])

        def batches(data):
            itr = self.task.get_batch_iterator(
                dataset=data, max_tokens=None, max_sentences=batch_size, max_positions=max_positions,
                ignore_invalid_inputs=False, required_batch_size_multiple=1, seed=1, num_workers=0,
            ).next_epoch_itr(shuffle=False)
            return [utils.move_to_cuda(b) if device != "cpu" else b for b in itr]

        self.batches = batches(dataset)
        self.timed_batches = batches(FirstSentences(dataset, timed_sentences)) if timed_sentences else self.batches
        self.tgt_dict = self.task.target_dictionary
        self.calls = 0
        # fairseq's EnsembleModel calls decoder.forward() directly (no hooks fire), but every decoder
        # pass, of any generator, runs its first layer through __call__: count those.
        first = models[0].decoder.layers[0] if hasattr(models[0].decoder, "layers") else models[0].decoder
        self._hook = first.register_forward_hook(lambda *a: self._count())

    def _count(self):
        self.calls += 1

    def stats(self):
        return dict(getattr(self.generator, "stats", {}) or {})

    def reset_stats(self):
        self.calls = 0
        if hasattr(self.generator, "reset_stats"):
            self.generator.reset_stats()

    def decode(self, batches):
        """Run the generator over ``batches``; returns {sentence id: token id list (with EOS)}."""
        out = {}
        for sample in batches:
            hypos = self.task.inference_step(self.generator, self.models, sample)
            for i, sid in enumerate(sample["id"].tolist()):
                out[sid] = hypos[i][0]["tokens"].tolist()
        return out

    def text(self, tokens, corpus):
        return hypothesis_text(self.tgt_dict, tokens, corpus)

    def model_calls(self):
        s = self.stats()
        return int(s["model_calls"]) if "model_calls" in s else self.calls

    def sync(self):
        if self.device != "cpu":
            import torch

            torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------------
# CTranslate2 backend (the absolute CPU-speed anchor)
# ----------------------------------------------------------------------------------------------


def convert_to_ctranslate2(checkpoint, corpus, out_dir):
    out_dir = Path(out_dir)
    if (out_dir / "model.bin").exists() and out_dir.stat().st_mtime >= Path(checkpoint).stat().st_mtime:
        return out_dir
    cmd = [str(Path(sys.executable).parent / "ct2-fairseq-converter"), "--model_path", str(checkpoint),
           "--data_dir", str(corpus.bin), "--source_lang", corpus.src, "--target_lang", corpus.tgt,
           "--user_dir", str(PLUGIN_DIR), "--output_dir", str(out_dir), "--force",
           "--unsafe_deserialization"]  # torch 2.13 refuses legacy pickles otherwise; our own checkpoint
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise BenchmarkError(f"CTranslate2 conversion failed:\n{proc.stderr[-3000:]}")
    return out_dir


class CTranslate2Runner:
    def __init__(self, corpus, checkpoint, beam, batch_size, device, threads, work_dir, max_len=(0.0, 200),
                 timed_sentences=0):
        import ctranslate2
        from fairseq.data import Dictionary, data_utils

        import fairseq_plugins  # noqa: F401

        model_dir = convert_to_ctranslate2(checkpoint, corpus, Path(work_dir) / (Path(checkpoint).parent.name + "_ct2"))
        self.translator = ctranslate2.Translator(str(model_dir), device=device, inter_threads=1, intra_threads=threads)
        self.beam, self.device, self.max_len = beam, device, max_len
        src_dict = Dictionary.load(str(corpus.bin / f"dict.{corpus.src}.txt"))
        self.tgt_dict = Dictionary.load(str(corpus.bin / f"dict.{corpus.tgt}.txt"))
        data = data_utils.load_indexed_dataset(str(corpus.bin / f"{corpus.subset}.{corpus.src}-{corpus.tgt}.{corpus.src}"), src_dict)
        if data is None or len(data) == 0:
            raise BenchmarkError(f"the {corpus.subset} split of {corpus.bin} is empty")
        sources = [(i, src_dict.string(data[i][:-1]).split()) for i in range(len(data))]
        sources.sort(key=lambda x: (len(x[1]), x[0]))  # sorted by source length, like fairseq
        self.batches = [sources[i:i + batch_size] for i in range(0, len(sources), batch_size)]
        timed = [x for x in sources if not timed_sentences or x[0] < timed_sentences]
        self.timed_batches = [timed[i:i + batch_size] for i in range(0, len(timed), batch_size)]
        self.calls = 0

    def decode(self, batches):
        out = {}
        for batch in batches:
            longest = max(len(s) for _, s in batch) + 1  # fairseq's max_len counts the source EOS
            results = self.translator.translate_batch(
                [s for _, s in batch], beam_size=self.beam, max_batch_size=len(batch),
                max_decoding_length=int(self.max_len[0] * longest + self.max_len[1]))
            for (sid, _), r in zip(batch, results):
                out[sid] = [self.tgt_dict.index(t) for t in r.hypotheses[0]] + [self.tgt_dict.eos()]
        return out

    def text(self, tokens, corpus):
        return hypothesis_text(self.tgt_dict, tokens, corpus)

    def stats(self):
        return {}

    def reset_stats(self):
        pass

    def model_calls(self):
        return None

    def sync(self):
        pass


# ----------------------------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------------------------


def expand_rows(rows, batch_sizes):
    for row in rows:
        for beam in row.get("beams", [1]):
            for bs in row.get("batch_sizes", batch_sizes):
                yield row, beam, bs


def checkpoint_of(row, checkpoints):
    path = Path(row["path"]) if "path" in row else Path(checkpoints) / row["model"] / "checkpoint_best.pt"
    if not path.exists():
        raise BenchmarkError(
            f"row '{row['method']}': checkpoint {path} not found; train it first (scripts/train.sh "
            f"{row.get('model', '<config>')}) or fix 'model'/'path' in the rows file")
    return path


def row_args(row, checkpoints, data):
    """The row's fairseq-generate arguments with ``{CKPT}`` -> the checkpoints root and ``{DATA}`` ->
    the data root (the folder holding the corpus folders), e.g. ``--drafter-path {CKPT}/gad_drafter/...``."""
    return row.get("args", "").replace("{CKPT}", str(checkpoints)).replace("{DATA}", str(Path(data).parent))


def _extra_checkpoints(args):
    """Checkpoints a row's arguments name besides ``--path`` (a drafter's)."""
    words = shlex.split(args)
    return [Path(words[i + 1]) for i, w in enumerate(words[:-1]) if w == "--drafter-path"]


def time_runs(runner, batches, runs, warmup=1):
    """Warm-up then ``runs`` timed passes over ``batches``; returns the list of pass times."""
    for _ in range(warmup):
        runner.decode(batches[: max(1, min(len(batches), 4))])
    times = []
    for _ in range(runs):
        runner.sync()
        t0 = time.perf_counter()
        runner.decode(batches)
        runner.sync()
        times.append(time.perf_counter() - t0)
    return times


class FirstSentences:
    """A dataset view holding the sentences with id < n (the corpus split is in hash order, so a
    random sample of every length), batched in fairseq's length-sorted order: the timed set."""

    def __new__(cls, dataset, n):
        from fairseq.data import BaseWrapperDataset

        class _First(BaseWrapperDataset):
            def ordered_indices(self):
                order = self.dataset.ordered_indices()
                return order[order < n]

        return _First(dataset)


def _n_sentences(batches):
    return sum(len(b["id"]) if isinstance(b, dict) else len(b) for b in batches)


def run_benchmark(rows, data, checkpoints, out, batch_sizes=(1, 32), runs=5, timed_sentences=0,
                  device="cpu", fp16=False, threads=None, log=print, max_len=(0.0, 200),
                  quality_batch_size=None):
    """Run every row; returns the list of result dicts (also written to ``out``).

    Quality (BLEU over every sentence, model calls, mean accepted) comes from one full pass per
    row x beam x batch size, or, with ``quality_batch_size``, from one full pass at that batch size
    reported for every batch size (``bleu_batch_size`` says which); the other batch sizes then decode
    the timed sentences only, and lossless rows are compared with greedy on those sentences."""
    import torch

    threads = threads or torch.get_num_threads()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    corpora = {}
    results, greedy_tokens, quality = [], {}, {}
    order = sorted(batch_sizes, key=lambda b: b != quality_batch_size)  # the quality pass first
    plan = list(expand_rows(rows, order))
    for n, (row, beam, bs) in enumerate(plan, 1):
        # a row may decode another corpus of the same data root, e.g. "corpus": "pt_PT-pt_BR"
        folder = str(Path(data).parent / row["corpus"]) if "corpus" in row else str(data)
        corpus = corpora.get(folder) or corpora.setdefault(folder, Corpus(folder))
        ckpt = checkpoint_of(row, checkpoints)
        backend = row.get("backend", "fairseq")
        log(f"[bench {n}/{len(plan)}] {row['method']} | beam {beam} | batch {bs}", flush=True)
        if backend == "ctranslate2":
            runner = CTranslate2Runner(corpus, ckpt, beam, bs, device, threads, out, max_len, timed_sentences)
        else:
            runner = FairseqRunner(corpus, ckpt, row_args(row, checkpoints, data), beam, bs, device, fp16, threads,
                                   max_len, timed_sentences)
        timed = runner.timed_batches
        full = quality_batch_size is None or bs == quality_batch_size
        # the quality pass: all sentences (none dropped), or the timed ones when reused from qbs
        runner.reset_stats()
        tokens = runner.decode(runner.batches if full else timed)
        ids = sorted(tokens)
        qkey = (row["method"], beam)
        if full:
            if corpus.references is not None and len(ids) != len(corpus.references):
                raise BenchmarkError(f"row '{row['method']}' translated {len(ids)} of {len(corpus.references)} sentences")
            bleu, signature = corpus.bleu([runner.text(tokens[i], corpus) for i in ids], ids)
            stats = runner.stats()
            quality[qkey] = dict(bleu=bleu, signature=signature, calls=runner.model_calls(), stats=stats,
                                 sentences=len(ids), bleu_batch_size=bs)
        q = quality[qkey]
        key = (str(ckpt), bs)  # lossless = identical to fairseq greedy at the same batch size
        if row.get("baseline") and beam == 1:
            greedy_tokens[key] = tokens
        identical = None
        if row.get("lossless"):
            ref = greedy_tokens.get(key)
            if ref is None:
                raise BenchmarkError(f"row '{row['method']}' is lossless but no greedy baseline row "
                                     "(\"baseline\": true, beam 1) ran before it on the same model and batch size")
            identical = sum(tokens[i] == ref[i] for i in ids) / len(ids)
        # timing
        times = time_runs(runner, timed, runs)
        produced = sum(len(tokens[i]) for b in timed for i in (b["id"].tolist() if isinstance(b, dict) else [s for s, _ in b]))
        mean = statistics.mean(times)
        stats = q["stats"]
        result = {
            "method": row["method"], "config": row.get("args", backend).strip() or backend,
            "model": row.get("model", str(ckpt)), "corpus": corpus.folder.name, "batch_size": bs, "beam": beam,
            "bleu": q["bleu"], "sacrebleu_signature": q["signature"], "sentences": q["sentences"],
            "bleu_batch_size": q["bleu_batch_size"], "timed_sentences": _n_sentences(timed), "runs": runs,
            "seconds": round(mean, 4), "seconds_min": round(min(times), 4),
            "tokens_per_s": round(produced / mean, 1), "sentences_per_s": round(_n_sentences(timed) / mean, 2),
            "speed_ratio": None, "model_calls": q["calls"],
            "mean_accepted": round(stats["accepted_tokens"] / stats["iterations"], 3)
            if stats.get("iterations") else None,
            "identical_to_greedy": identical, "identical_sentences": len(ids) if identical is not None else None,
            "device": device, "dtype": "fp16" if fp16 else "fp32",
            "threads": threads, "backend": backend, "baseline": bool(row.get("baseline")),
            "max_len": f"{max_len[0]}*src+{max_len[1]}",
        }
        for k in ("length_oracle", "oracle_model_calls"):
            if k in stats:
                result[k] = stats[k]
        results.append(result)
        log(f"    BLEU {q['bleu']}  {result['tokens_per_s']} tok/s  {mean:.3f}s/pass  calls {q['calls']}"
            + (f"  identical {identical:.3f} of {len(ids)}" if identical is not None else ""), flush=True)
        del runner
    add_speed_ratios(results)
    write_outputs(results, out)
    return results


def add_speed_ratios(results):
    base = {(r["corpus"], r["batch_size"], r["beam"]): r for r in results if r["baseline"]}
    for r in results:
        b = base.get((r["corpus"], r["batch_size"], r["beam"])) or base.get((r["corpus"], r["batch_size"], 1))
        if b and b["timed_sentences"] == r["timed_sentences"]:
            r["speed_ratio"] = round(b["seconds"] / r["seconds"], 3)
            r["ratio_vs"] = f"{b['method']} (beam {b['beam']}, batch {b['batch_size']})"


def markdown_table(results):
    cols = ["method", "corpus", "beam", "batch_size", "bleu", "tokens_per_s", "speed_ratio", "model_calls",
            "mean_accepted", "identical_to_greedy"]
    head = ["method", "corpus", "beam", "batch", "BLEU", "tok/s", "speed ×", "model calls", "mean accepted", "identical"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append("–" if v is None else (f"{v:.3f}" if isinstance(v, float) and c == "identical_to_greedy" else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_outputs(results, out):
    out = Path(out)
    with open(out / "results.jsonl", "w") as f:
        for r in results:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    meta = results[0] if results else {}
    header = (f"Device {meta.get('device')}, {meta.get('dtype')}, {meta.get('threads')} threads; "
              f"{meta.get('sentences')} test sentences for BLEU, {meta.get('timed_sentences')} timed x "
              f"{meta.get('runs')} runs (batches sorted by source length). speed × = baseline seconds / "
              "row seconds, same run.\n\n")
    sigs = sorted({r["sacrebleu_signature"] for r in results if r.get("sacrebleu_signature")})
    (out / "results.md").write_text(header + markdown_table(results) + "\n\n" + "\n".join(f"sacreBLEU: `{s}`" for s in sigs) + "\n")
    plot(results, out / "speed_vs_bleu.png")


def plot(results, path):
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's logging setup leaves DEBUG on
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, bs in zip(axes, sorted({r["batch_size"] for r in results})[:2]):
        for r in (r for r in results if r["batch_size"] == bs and r["bleu"] is not None):
            ax.scatter(r["tokens_per_s"], r["bleu"], s=30)
            ax.annotate(f"{r['method']} b{r['beam']}", (r["tokens_per_s"], r["bleu"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("target tokens / s (log)")
        ax.set_title(f"batch size {bs}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("sacreBLEU")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", required=True, help="JSON list of rows (see configs/benchmark/)")
    ap.add_argument("--data", required=True, help="corpus folder (with bin/ and raw test files)")
    ap.add_argument("--checkpoints", default="checkpoints", help="folder of <model>/checkpoint_best.pt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timed-sentences", type=int, default=0, help="time only the sentences with id < N, a random sample (0: all)")
    ap.add_argument("--only", nargs="*", help="run only rows whose method contains one of these strings")
    ap.add_argument("--quality-batch-size", type=int, default=None,
                    help="compute BLEU/calls/acceptance once per row at this batch size (default: at every one)")
    ap.add_argument("--skip-missing", action="store_true", help="skip rows whose checkpoint is not trained yet")
    ap.add_argument("--device", default="cuda" if _cuda() else "cpu")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch and CTranslate2 threads (default: torch's)")
    ap.add_argument("--max-len-a", type=float, default=1.2, help="every row: output length <= a*src_len + b")
    ap.add_argument("--max-len-b", type=int, default=10)
    args = ap.parse_args(argv)
    rows = json.loads(Path(args.rows).read_text())
    if args.skip_missing:
        missing = [r for r in rows if not _checkpoint_exists(r, args.checkpoints, args.data)]
        for r in missing:
            print(f"[bench] skipping '{r['method']}': checkpoint of '{r.get('model', r.get('path'))}' not trained")
        rows = [r for r in rows if r not in missing]
    if args.only:
        rows = [r for r in rows if r.get("baseline") or any(s in r["method"] for s in args.only)]
    try:
        results = run_benchmark(rows, args.data, args.checkpoints, args.out, args.batch_sizes, args.runs,
                                args.timed_sentences, args.device, args.fp16, args.threads,
                                max_len=(args.max_len_a, args.max_len_b), quality_batch_size=args.quality_batch_size)
    except BenchmarkError as e:
        raise SystemExit(f"error: {e}")
    print(markdown_table(results))
    print(f"\nresults: {Path(args.out) / 'results.jsonl'}, {Path(args.out) / 'results.md'}, "
          f"{Path(args.out) / 'speed_vs_bleu.png'}")


def _checkpoint_exists(row, checkpoints, data):
    try:
        checkpoint_of(row, checkpoints)
    except BenchmarkError:
        return False
    return all(p.exists() for p in _extra_checkpoints(row_args(row, checkpoints, data)))


def _cuda():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    main()
