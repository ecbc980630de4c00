"""The GPU evidence's ``base`` part (issue 48): the GEC-like verifier at Transformer base size, trained
and measured in one command on the lent machine, since its checkpoint (about 96 MB in fp16) cannot
come back from it (``limits``) and its run folder does not outlive the visit.

    bash scripts/gpu_evidence.sh BUNDLE OUT --part base        # about 9 minutes (default deadline 540 s)

The bundle carries ``gec-en`` (``scripts/offline_bundle.sh DIR --data ROOT --corpora gec-en``).  Steps,
each skipped with its reason when it does not fit (``Evidence.step``):

1. **train**: ``gec_base`` of configs/reference/gec.txt (configs/models/gec_base.args) under the GPU
   recipe (configs/gpu/recipe.json), fp16, until ``deadline - --bench-reserve`` (fairseq's
   ``--stop-time-hours``, :data:`TRAIN_OVERHEAD` seconds less for its start, last validation and
   save), which saves one checkpoint at the end; updates, valid loss and the command are recorded;
2. **pack**: that checkpoint as models/ keeps them (fp16, no optimizer moments), its sha256;
3. **test BLEU**: fairseq's greedy on the whole test set, sacreBLEU as the benchmark scores it;
   with 2 and 3, the manifest entry models/MANIFEST.json would get ("not shipped: too large");
4. **benchmark**: configs/benchmark/gec.json's rows in *units* (:data:`UNITS`), one
   ``scripts/benchmark.py`` process each, each with the fairseq (and engine) baselines its rows are
   timed against, so every ratio is still a pair timed interleaved in one process.  The GPU's units
   (fp16, batch 1, 8, 32) run one after another; beside them the CPU's (fp32, one thread per process,
   batch 1 and 8) run ``--base-cpu-jobs`` at a time.  ``benchmark.py --jobs`` cannot spread these
   rows: it keeps every row of one checkpoint in one process.  A unit decodes the first
   ``max(--base-sentences, 2 x batch)`` sentences of the test set (the test split is in hash order: a
   sample of every length), all of them timed and scored, so that a base-size quality pass fits; units
   start in priority order (:func:`priority`) while their least time fits and are stopped at the deadline.
   ``gec_tiny`` (models/gec_tiny, when it ships) gets the same units after the base model's.

The report (OUT/summary.md, OUT/results.jsonl) gets the training, the manifest entry and, per device,
the merged table: each row's time ratios, calls per token, mean accepted tokens, what ``auto`` chose,
identical-to-fairseq for lossless rows and, for CTranslate2's, how many outputs differ from fairseq's.

Dry run on a CPU (tests/test_offline_bundle.py): ``--device cpu --deadline S --max-update 2 --train-args
"--arch transformer_fast_tiny ..."`` trains a tiny model through the same steps; the GPU's units are
then skipped with that reason.
"""
import argparse
import importlib.util
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from scripts.lab.offline.report import code

REPO = Path(__file__).resolve().parents[3]
MODEL, TINY, CORPUS = "gec_base", "gec_tiny", "gec-en"
MODELS_LIST = REPO / "configs" / "reference" / "gec.txt"
ROWS = REPO / "configs" / "benchmark" / "gec.json"
DEADLINE = 540  # seconds for the whole command, the install included: about 300 of them train
BENCH_RESERVE = 200  # seconds kept after the training: pack, test BLEU, the benchmark units
TRAIN_OVERHEAD = 30  # fairseq-train's start (imports, data, model) and its last validation and save
MIN_SECONDS = {"base_train": 60, "base_pack": 5, "base_bleu": 10, "base_bench": 25}  # Evidence.step's least times
GENERATE = "--task fast_translation --beam-search fairseq"  # the benchmark's "fairseq greedy" row
MAX_LEN = (1.2, 10)  # the benchmark's default output length
# name: the methods of configs/benchmark/gec.json one process times, with the baselines they need
UNITS = {
    "greedy": ("fairseq greedy", "engine greedy", "engine greedy (A/A control)", "IAD k=10 q=2", "auto"),
    "beam": ("fairseq greedy", "fairseq beam 5", "lean beam 5"),
    "drafters": ("fairseq greedy", "engine greedy", "IAD k=10 q=2 (fixed width)", "Jacobi HGJ b=3"),
    "ctranslate2": ("fairseq greedy", "fairseq beam 5", "CTranslate2 greedy", "CTranslate2 greedy int8",
                    "CTranslate2 beam 5", "CTranslate2 beam 5 int8"),
}
CPU_JOBS = 6  # default CPU processes side by side: each streams ~0.1 GB of fp32 weights a step at base size;
# many more would share the memory bandwidth and make a plain step look dearer than alone


def add_arguments(ap):
    g = ap.add_argument_group("base part (scripts/lab/offline/base_size.py)")
    g.add_argument("--bench-reserve", type=float, default=BENCH_RESERVE,
                   help=f"seconds kept after the training for pack, test BLEU and benchmark (default {BENCH_RESERVE})")
    g.add_argument("--base-sentences", type=int, default=8,
                   help="test sentences a benchmark unit decodes and times at batch 1; at batch B max(N, 2B) (default 8)")
    g.add_argument("--base-gpu-batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    g.add_argument("--base-cpu-batch-sizes", type=int, nargs="+", default=[1, 8])
    g.add_argument("--base-cpu-jobs", type=int, default=None,
                   help=f"CPU benchmark processes side by side, one thread each (default min({CPU_JOBS}, cores - 2))")
    g.add_argument("--base-units", nargs="+", choices=list(UNITS), default=list(UNITS),
                   help="the benchmark units to run (default: all)")


class Unit:
    """One scripts/benchmark.py process: ``name``'s rows of ``model`` on ``device`` at ``batch``."""

    def __init__(self, model, name, device, batch, sentences):
        self.model, self.name, self.device, self.batch, self.sentences = model, name, device, batch, sentences
        self.label = f"{model} {name} {device} batch {batch}"
        self.status, self.reason, self.seconds, self.results = "planned", "", None, []

    def record(self):
        return {"step": "base benchmark unit", "unit": self.label, "model": self.model, "rows": self.name,
                "device": self.device, "batch_size": self.batch, "sentences": self.sentences, "status": self.status,
                "reason": self.reason or None, "seconds": self.seconds, "results": len(self.results)}


def priority(unit, batches):
    """The base model before the tiny one; then greedy at batch 1, then the beam at batch 1 before greedy
    at the next batch size, ...: the issue's targets are at batch 1, ``auto``'s at every batch size."""
    rank, step = list(UNITS).index(unit.name), batches.index(unit.batch)
    return (unit.model != MODEL, rank + step, step)


def test_subset(corpus, root, n):
    """``root``/gec-en: the first ``n`` test sentences of ``corpus`` (binarized split, raw references,
    dictionaries, segmentation files): what a unit decodes.  Returns it (made once per ``n``)."""
    from fairseq.data import Dictionary, indexed_dataset

    dest = Path(root) / CORPUS
    if (dest / "bin").is_dir():
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "bin").mkdir(parents=True)
    corpus = Path(corpus)
    pair = "gec-en"
    for lang in pair.split("-"):
        shutil.copy(corpus / "bin" / f"dict.{lang}.txt", tmp / "bin")
        data = indexed_dataset.make_dataset(str(corpus / "bin" / f"test.{pair}.{lang}"), impl="mmap")
        size = len(Dictionary.load(str(corpus / "bin" / f"dict.{lang}.txt")))
        builder = indexed_dataset.make_builder(str(tmp / "bin" / f"test.{pair}.{lang}.bin"), impl="mmap",
                                               vocab_size=size)
        for i in range(min(n, len(data))):
            builder.add_item(data[i])
        builder.finalize(str(tmp / "bin" / f"test.{pair}.{lang}.idx"))
        raw = corpus / f"test.{lang}"
        (tmp / raw.name).write_text("".join(raw.read_text(encoding="utf-8").splitlines(keepends=True)[:n]),
                                    encoding="utf-8")
    for name in ("spm.model", "subword"):
        if (corpus / name).exists():
            shutil.copy(corpus / name, tmp / name)
    tmp.rename(dest)
    return dest


def ctranslate2_missing():
    """Why CTranslate2's rows cannot run here (None when they can)."""
    if importlib.util.find_spec("ctranslate2") is None:
        return "ctranslate2 is not installed for this Python (the bundle does not carry it)"
    if not (Path(sys.executable).parent / "ct2-fairseq-converter").exists():
        return f"ctranslate2's ct2-fairseq-converter is not beside {sys.executable}"
    return None


class BasePart:
    """The part's steps over an :class:`~scripts.lab.offline.evidence.Evidence` (device, deadline,
    work folder, report, step runner)."""

    def __init__(self, ev):
        self.ev, self.args = ev, ev.args
        self.root = ev.work / "base"
        self.save = self.root / "train" / MODEL
        self.checkpoint = ev.checkpoints / MODEL / "checkpoint_best.pt"
        self.facts = {}  # what the manifest entry records

    # ---- helpers ----
    def device_name(self):
        import torch

        return torch.cuda.get_device_name() if self.ev.cuda else "cpu"

    def skip(self, name, reason):
        self.ev.report.add(f"{name}: skipped", reason, [{"step": name, "status": "skipped", "reason": reason}])

    def run(self):
        ev = self.ev
        ev.step("environment", "environment", ev.environment)
        if not self.stage():
            return
        window = ev.deadline.left() - self.args.bench_reserve
        if window < MIN_SECONDS["base_train"]:
            self.skip("train gec_base", f"{ev.deadline.left():.0f} s left, less the {self.args.bench_reserve:.0f} s kept "
                      f"for the measurements (--bench-reserve), is {window:.0f} s: the training needs at least "
                      f"{MIN_SECONDS['base_train']} s")
        else:
            ev.step("train gec_base", "base_train", self.train, window)
        last = self.save / "checkpoint_last.pt"
        if last.exists():
            ev.step("pack gec_base", "base_pack", self.pack, last)
        else:
            self.skip("pack gec_base", "no gec_base checkpoint: the training above did not save one")
        if self.checkpoint.exists():
            ev.step("test BLEU gec_base", "base_bleu", self.bleu)
            self.manifest_entry()
        else:
            self.skip("test BLEU gec_base", "no packed gec_base checkpoint")
        ev.step("benchmark at base size", "base_bench", self.benchmark)

    # ---- the steps ----
    def stage(self):
        """The bundle's gec-en in the work folder; without it the part cannot run (the message says how to fix it)."""
        src, dest = Path(self.args.bundle) / "data" / CORPUS, self.ev.data / CORPUS
        if not (dest / "bin").is_dir():
            if not (src / "bin").is_dir():
                reason = (f"the bundle has no data/{CORPUS}: build it with `python -m scripts.build_gec_corpus --out "
                          f"ROOT/{CORPUS}` and carry it with `scripts/offline_bundle.sh DIR --data ROOT --corpora {CORPUS}`")
                self.ev.report.add("gec-en missing", reason, [{"step": "stage gec-en", "status": "failed", "error": reason}])
                return False
            shutil.copytree(src, dest)
        self.ev.reference_models()  # models/gec_tiny, when it ships, beside the trained base model
        return True

    def train_command(self, stop_hours):
        from scripts.lab.evaluation.generation import PLUGIN_DIR
        from scripts.lab.training.model_list import config_args

        ev = self.ev
        m = ev.read_models(ev.recipe_list(MODELS_LIST))[MODEL]  # the GPU recipe's --max-tokens and --lr in extra
        cmd = [sys.executable, "-m", "fairseq_cli.train", ev.data / CORPUS / "bin", "--user-dir", PLUGIN_DIR,
               *config_args(m["config"], ev.checkpoints, ev.data), *m["extra"],
               "--save-dir", self.save, "--max-update", self.args.max_update, "--stop-time-hours", f"{stop_hours:.5f}",
               "--save-interval", "100000", "--validate-interval", "100000",  # saved and validated once, at the stop
               "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "50", "--num-workers", "0",
               "--seed", "1", "--fp16" if ev.cuda else "--cpu", *shlex.split(self.args.train_args)]
        cmd = [str(c) for c in cmd]
        portable = shlex.join(["fairseq-train", f"DATA/{CORPUS}/bin", "--user-dir", "fairseq_plugins"] + cmd[6:])
        portable = portable.replace(str(self.save), f"RUNS/checkpoints/{MODEL}").replace(str(ev.data), "DATA")
        return cmd, m["config"], portable

    def train(self, window):
        from scripts.lab.evaluation import train_log
        from scripts.lab.training.checkpoints import trained_updates

        stop_hours = max(1.0, window - TRAIN_OVERHEAD) / 3600
        cmd, config, portable = self.train_command(stop_hours)
        start = time.time()
        rc, _ = self.ev.checked("train-gec_base", cmd, limit=window)
        seconds = round(time.time() - start)
        log = self.ev.logs / "train-gec_base.log"
        updates = trained_updates(self.save)
        losses = train_log.valid_losses(log)
        stopped = ("the end of its window, before fairseq stopped itself" if rc is None else
                   f"--max-update {self.args.max_update}" if updates is not None and updates >= self.args.max_update
                   else f"--stop-time-hours {stop_hours:.4f} ({stop_hours * 60:.1f} min)")
        self.facts.update(name=MODEL, config=config, corpus=CORPUS, updates=updates,
                          valid_loss=losses[max(losses)] if losses else None, stopped=stopped, command=portable,
                          train_seconds=seconds, device=self.device_name())
        record = dict(step="train gec_base", status="done" if rc == 0 else "stopped", **self.facts, run=shlex.join(cmd))
        self.ev.report.add("train gec_base (configs/models/gec_base.args, the GPU recipe)",
                           f"{updates} updates in {seconds} s (window {window:.0f} s, stopped by {stopped}); "
                           f"valid loss {record['valid_loss']}\n\n" + code(portable), [record])

    def pack(self, last):
        from scripts.lab.evaluation.reference_models import corpus_sha256, file_sha256, pack_checkpoint

        pack_checkpoint(last, self.checkpoint)
        size = self.checkpoint.stat().st_size
        sums = (self.ev.data / CORPUS / "corpus.sha256")
        self.facts.update(sha256=file_sha256(self.checkpoint), bytes=size,
                          corpus_sha256=sums.read_text().split()[0] if sums.exists() else None,
                          corpus_bin_sha256=corpus_sha256(self.ev.data / CORPUS),
                          shipped=f"not shipped: too large ({size / 1e6:.0f} MB in fp16)")
        self.ev.report.add("pack gec_base (fp16, no optimizer moments)",
                           f"{size / 1e6:.1f} MB, sha256 `{self.facts['sha256']}`",
                           [{"step": "pack gec_base", "bytes": size, "sha256": self.facts["sha256"]}])

    def bleu(self):
        out = self.root / "test_bleu.json"
        cmd = [sys.executable, "-m", "scripts.lab.offline.base_size", "bleu", "--checkpoint", self.checkpoint,
               "--corpus", self.ev.data / CORPUS, "--out", out, "--device", self.ev.device,
               "--batch-size", "128" if self.ev.cuda else "16"] + (["--fp16"] if self.ev.cuda else [])
        rc, _ = self.ev.checked("test-bleu-gec_base", cmd)
        if rc is None:
            raise RuntimeError("stopped at the deadline before the test set was decoded")
        score = json.loads(out.read_text())
        self.facts.update(test_bleu=score["bleu"], test_bleu_generate=f"{GENERATE} --beam 1",
                          sacrebleu_signature=score["signature"])
        self.ev.report.add("test BLEU gec_base (fairseq greedy, sacreBLEU)",
                           f"{score['bleu']} on {score['sentences']} sentences (BP {score['bp']}); `{score['signature']}`",
                           [dict(step="test BLEU gec_base", **score)])

    def manifest_entry(self):
        entry = {k: self.facts.get(k) for k in ("name", "config", "corpus", "corpus_sha256", "corpus_bin_sha256",
                                                 "updates", "stopped", "valid_loss", "test_bleu", "sha256", "bytes",
                                                 "shipped", "command", "device", "train_seconds")}
        self.ev.report.add("models/MANIFEST.json entry for gec_base (not shipped)", code(json.dumps(entry, indent=1)),
                           [dict(step="base manifest entry", **entry)])

    # ---- the benchmark ----
    def plan(self):
        """The units to run, in priority order, and those that cannot run, each with its reason."""
        ev, args = self.ev, self.args
        models, not_run = [MODEL], []
        shipped = Path(args.models_dir) / "data" / CORPUS / "bin" / "dict.en.txt"  # the corpus gec_tiny was measured on
        if not (ev.checkpoints / TINY / "checkpoint_best.pt").exists():
            not_run.append(f"{TINY}: no models/{TINY}/checkpoint_best.pt")
        elif shipped.exists() and shipped.read_bytes() != (ev.data / CORPUS / "bin" / "dict.en.txt").read_bytes():
            not_run.append(f"{TINY}: its dictionary ({shipped}) is not the bundle's gec-en's (another build of the corpus)")
        else:
            models.append(TINY)
        names = list(args.base_units)
        why = ctranslate2_missing()
        if why and "ctranslate2" in names:
            names.remove("ctranslate2")
            not_run.append(f"the CTranslate2 rows: {why}")
        devices = [("cpu", args.base_cpu_batch_sizes)]
        if ev.cuda:
            devices.insert(0, ("cuda", args.base_gpu_batch_sizes))
        else:
            not_run.append("the GPU's units (fp16): --device cpu")
        test = len((ev.data / CORPUS / "test.en").read_text(encoding="utf-8").splitlines())
        units = []
        for device, batches in devices:
            found = [Unit(m, n, device, b, min(test, max(args.base_sentences, 2 * b)))
                     for m in models for n in names for b in batches]
            units += sorted(found, key=lambda u: priority(u, batches))
        return units, not_run

    def rows_file(self, unit):
        from scripts.lab.evaluation.bench_rows import load_rows

        path = self.root / "rows" / f"{unit.model}-{unit.name}.json"
        if not path.exists():
            rows = [r for r in load_rows([ROWS]) if r["model"] == unit.model
                    and r["method"].split(": ", 1)[1] in UNITS[unit.name]]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rows, indent=1) + "\n")
        return path

    def unit_command(self, unit):
        data = test_subset(self.ev.data / CORPUS, self.root / "subsets" / f"test{unit.sentences}", unit.sentences)
        unit.out = self.root / "bench" / unit.label.replace(" ", "-")
        cmd = [sys.executable, "-m", "scripts.benchmark", "--rows", self.rows_file(unit), "--data", data,
               "--checkpoints", self.ev.checkpoints, "--out", unit.out, "--batch-sizes", unit.batch,
               "--quality-batch-size", unit.batch, "--runs", self.args.runs, "--device", unit.device,
               "--threads", "2" if unit.device == "cuda" else "1", "--skip-missing", "--save-hypotheses"]
        cmd += ["--fp16"] if unit.device == "cuda" else ["--no-memory"]  # the CPU's profiler pass would cost a pass
        env = dict(self.ev.env)
        if unit.device == "cpu":
            env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        return [str(c) for c in cmd], env

    def benchmark(self):
        from scripts.lab.evaluation.jobs import Job

        ev, args = self.ev, self.args
        if not self.checkpoint.exists():
            self.skip("benchmark gec_base", "no packed gec_base checkpoint (see the steps above)")
        units, not_run = self.plan()
        if not self.checkpoint.exists():
            units = [u for u in units if u.model != MODEL]
        cpu_jobs = args.base_cpu_jobs or min(CPU_JOBS, max(1, (os.cpu_count() or 1) - 2))
        slots = {"cuda": 1, "cpu": cpu_jobs}
        queue, running, done = list(units), [], []
        while queue or running:
            for unit in list(queue):
                if sum(u.device == unit.device for u, _ in running) >= slots[unit.device]:
                    continue
                queue.remove(unit)
                left = ev.deadline.left()
                if left < MIN_SECONDS["base_bench"]:
                    unit.status, unit.reason = "skipped", f"{left:.0f} s left, a unit needs at least {MIN_SECONDS['base_bench']} s"
                    done.append(unit)
                    continue
                cmd, env = self.unit_command(unit)
                unit.started = time.time()
                running.append((unit, Job(unit.label, cmd, ev.logs / f"bench-{unit.label.replace(' ', '-')}.log", env)))
                print(f"[evidence] base benchmark {unit.label} started ({left:.0f} s left)", flush=True)
            time.sleep(0.5)
            for unit, job in list(running):
                rc = job.poll()
                if rc is None and ev.deadline.left() > 0:
                    continue
                if rc is None:
                    job.stop(grace=5)
                    unit.status, unit.reason = "stopped", "stopped at the deadline"
                else:
                    unit.status = "done" if rc == 0 else "failed"
                    unit.reason = "" if rc == 0 else f"exit {rc}: see logs-base.tar.gz, bench-{unit.label.replace(' ', '-')}.log"
                unit.seconds = round(time.time() - unit.started)
                running.remove((unit, job))
                self.collect(unit)
                done.append(unit)
        self.report_units(done, not_run, cpu_jobs)

    def collect(self, unit):
        results = unit.out / "results.jsonl"
        if unit.status == "done" and results.exists():
            unit.results = [dict(json.loads(line), unit=unit.label) for line in results.read_text().splitlines() if line.strip()]
            differs_from_fairseq(unit.results, unit.out / "hypotheses")
            shutil.copy(unit.out / "results.md", self.ev.logs / f"results-{unit.label.replace(' ', '-')}.md")
        self.ev.report.add(f"base benchmark unit: {unit.label}",
                           f"{unit.status}{': ' + unit.reason if unit.reason else ''}"
                           + (f" ({unit.seconds} s, {len(unit.results)} rows, {unit.sentences} test sentences)"
                              if unit.seconds is not None else ""), [unit.record()])

    def report_units(self, units, not_run, cpu_jobs):
        for device in ("cuda", "cpu"):
            mine = [u for u in units if u.device == device]
            if not mine:
                continue
            rows = merged([r for u in mine for r in u.results])
            head = ("GPU, fp16, one process at a time" if device == "cuda" else
                    f"CPU, fp32, one thread per process, up to {cpu_jobs} processes side by side"
                    + (" while the GPU's units ran" if self.ev.cuda else ""))
            head += (f"; each unit decodes the first max({self.args.base_sentences}, 2 x batch) test sentences, "
                     f"every one timed ({self.args.runs} runs, interleaved with the row's reference) and scored. "
                     "× ref: the row's time ratio against the reference it was timed with in its own process "
                     "(fairseq's greedy, or its beam of the same width); × fairseq greedy, × engine greedy, × CT2 "
                     "(CTranslate2 fp32 greedy, derived) as in scripts/benchmark.py.")
            lines = [f"- {u.label}: {u.status}{': ' + u.reason if u.reason else ''}" for u in mine if u.status != "done"]
            lines += [f"- not run: {n}" for n in not_run]
            lines += [f"- {r['method']}, batch {r['batch_size']}: {r['drafter_choice']}" for r in rows if r.get("drafter_choice")]
            self.ev.report.add(f"the base-size table, {device}", head + "\n\n" + table(rows) + "\n\n" + "\n".join(lines),
                               [dict(r, step="base table", device=device) for r in rows]
                               + [u.record() for u in mine if u.status == "skipped"])  # the others were recorded as they ended


def differs_from_fairseq(results, hypotheses):
    """CTranslate2 rows: how many of their outputs (detokenised text) differ from fairseq's at the same
    beam in the same unit (``differs_from_fairseq``, of ``sentences``)."""
    fairseq = {r["beam"]: r for r in results if r["baseline"] and r["backend"] == "fairseq"}
    for r in results:
        ref = fairseq.get(r["beam"])
        if r["backend"] != "ctranslate2" or ref is None or not r.get("hypotheses") or not ref.get("hypotheses"):
            continue
        mine = (Path(hypotheses) / r["hypotheses"]).read_text(encoding="utf-8").splitlines()
        theirs = (Path(hypotheses) / ref["hypotheses"]).read_text(encoding="utf-8").splitlines()
        r["differs_from_fairseq"] = sum(a != b for a, b in zip(mine, theirs))


def merged(results):
    """The units' rows as one table in configs/benchmark/gec.json's order (the base model first, by batch
    size): a baseline several units ran is kept once (the first finished unit's); every other row keeps
    the ratios of its own unit; the derived ratios (× CT2, × beam 5) are taken again over the table."""
    from scripts.lab.evaluation.bench_rows import load_rows
    from scripts.lab.evaluation.bench_results import add_derived_ratios

    order = {r["method"]: i for i, r in enumerate(load_rows([ROWS]))}
    seen, out = set(), []
    for r in sorted(results, key=lambda r: (r["model"] != MODEL, r["batch_size"], order.get(r["method"], len(order)))):
        key = (r["method"], r["batch_size"], r["beam"])
        if r["baseline"] and key in seen:
            continue
        seen.add(key)
        out.append(dict(r))
    add_derived_ratios(out)
    return out


COLUMNS = [("model", "model"), ("method", "method"), ("batch_size", "batch"), ("sentences", "sentences"),
           ("bleu", "BLEU"), ("speed_ratio", "× ref"), ("ratio_vs_greedy", "× fairseq greedy"),
           ("ratio_vs_engine_greedy", "× engine greedy"), ("ratio_vs_ct2", "× CT2"), ("tokens_per_s", "tok/s"),
           ("calls_per_token", "calls/token"), ("mean_accepted", "mean accepted"),
           ("draft_width", "draft width"), ("drafted_share", "drafted"),
           ("identical_to_greedy", "identical to fairseq"), ("differs_from_fairseq", "differ from fairseq")]


def table(rows):
    """The base-size table in Markdown (one line per row and batch size; '–' where a value does not apply)."""
    head = "| " + " | ".join(h for _, h in COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    lines = []
    for r in rows:
        cells = dict(r, method=r["method"].split(": ", 1)[-1])
        lines.append("| " + " | ".join("–" if cells.get(k) is None else str(cells[k]) for k, _ in COLUMNS) + " |")
    return head + "\n".join(lines) if lines else "(no rows finished)"


def test_bleu(checkpoint, corpus, device, batch_size, fp16):
    """fairseq's greedy on ``corpus``'s whole test set, scored as the benchmark scores its rows."""
    from scripts.lab.evaluation.corpus import Corpus
    from scripts.lab.evaluation.runners import FairseqRunner

    corpus = Corpus(corpus)
    runner = FairseqRunner(corpus, checkpoint, GENERATE, 1, batch_size, device, fp16, 1 if device == "cpu" else 4,
                           max_len=MAX_LEN)
    tokens = runner.decode(runner.batches)
    ids = sorted(tokens)
    score = corpus.bleu([runner.text(tokens[i], corpus) for i in ids], ids)
    return dict(score, sentences=len(ids), checkpoint=str(checkpoint), device=device, fp16=fp16)


def main(argv=None):
    ap = argparse.ArgumentParser(description="the base part's test BLEU, as a process the deadline can stop")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bleu")
    b.add_argument("--checkpoint", required=True)
    b.add_argument("--corpus", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--device", default="cpu")
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--fp16", action="store_true")
    args = ap.parse_args(argv)
    score = test_bleu(args.checkpoint, args.corpus, args.device, args.batch_size, args.fp16)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(score, indent=1) + "\n")
    tmp.replace(args.out)
    print(json.dumps(score), flush=True)


if __name__ == "__main__":
    main()
