"""The GPU evidence of issue 32, in three deadline-aware parts (``scripts/gpu_evidence.sh``, docs/GPU.md).

    python -m scripts.lab.offline.evidence --bundle BUNDLE --out OUT --part speed|train|base [--deadline S] [--device cpu|cuda]

``speed``: the environment; the reference models of ``models/`` (or, without them, a short stage-1
training); the GPU self-check (``scripts/gpu_check.py``: fp32 and fp16 identical-to-greedy shares of
every lossless generator); the cost probe (``scripts/cost_probe.py``: an iteration verifying a draft
of width m against a plain step, random weights at tiny, base and big size, batch 1, 8 and 32); the
benchmark rows (``scripts/benchmark.py`` with configs/benchmark/*.json) in fp16 and fp32 at batch 1
and 32.  ``train``: the convergence run of ``scripts/convergence_run.sh`` on one device under the GPU
recipe (configs/gpu/recipe.json): stage 1, distillation, stage 2 with its models as concurrent
processes, each stopped by the convergence rule or by the deadline; test BLEU at greedy and at each
model's beam with the gap to L2R-KD, after the fp16 weights are packed into archives (the table can
be remade from them, the weights not).  ``base``: the Transformer-base GEC-like verifier trained on
the GPU and measured there, on the GPU and on its CPU (:mod:`.base_size`, issue 48).

Each step checks the time left first and is skipped, with the reason written down, when its least
time does not fit; a step still running at the deadline is stopped.  After every step OUT holds
``summary.md`` (every table), ``results.jsonl`` (one record per row) and, at the end, ``logs-PART.tar.gz``
and the model archives, all within ``limits`` (checked before the command ends).
"""
import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from scripts.lab.evaluation import train_log
from scripts.lab.evaluation.jobs import Job, exit_on_sigterm, job_env
from scripts.lab.evaluation.reference_models import freeze, pack_checkpoint
from scripts.lab.offline import base_size, limits
from scripts.lab.offline.bundle import TEACHER
from scripts.lab.offline.report import Report, code

REPO = Path(__file__).resolve().parents[3]
RECIPE = REPO / "configs" / "gpu" / "recipe.json"
GOLD = REPO / "configs" / "reference" / "convergence_gold.txt"
KD = REPO / "configs" / "reference" / "convergence_kd.txt"
BENCH_ROWS = ("reference.json", "orders.json", "gad.json")  # configs/benchmark/
RESERVE = 15.0  # seconds kept for the logs tarball, the summary and the limit check
MIN_SECONDS = {"environment": 0, "bootstrap": 40, "gpu_check": 40, "cost_probe": 20, "benchmark": 30, "stage1": 60,
               "distill": 20, "stage2": 60, "export": 10, "test_bleu": 15, "pack": 10}  # the least time in which a step yields anything
# scripts/cost_probe.py in the speed part: every size, batch 1, 8 and 32, widths 1 2 4 8 11, in fp16 on the GPU (45 cells
# of 5 passes of 25 iterations: ~5,600 iterations, 20-45 s at 4-8 ms each, plus ~15 s of imports, models and CUDA's
# start: about a minute, not measured on a GPU yet); on a CPU dry run the tiny model only, batch 1 and 2, widths 1 and 3
COST_PROBE = {"cuda": ["--sizes", "tiny", "base", "big", "--batches", "1", "8", "32", "--steps", "24", "--repeats", "4"],
              "cpu": ["--sizes", "tiny", "--batches", "1", "2", "--widths", "1", "3", "--steps", "4", "--repeats", "2"]}
MIN_SECONDS.update(base_size.MIN_SECONDS)  # the base part's steps (issue 48)
COST_PROBE_SECONDS = 90  # stopped after this: the sizes it finished are in its JSONL (rewritten after every size)


class Deadline:
    """Seconds left of ``seconds`` counted from ``start`` (the shell's start: the install counts too)."""

    def __init__(self, seconds, start):
        self.end = start + seconds

    def left(self):
        return self.end - time.time() - RESERVE


class Evidence:
    """One part's steps over a state: the device, the deadline, the work folder and the report."""

    def __init__(self, args):
        self.args, self.device = args, args.device
        self.cuda = args.device == "cuda"
        self.deadline = Deadline(args.deadline, args.start)
        self.work = Path(args.work)
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.report = Report(args.out, args.part)
        self.env = job_env(REPO)
        if not self.cuda:
            self.env["CUDA_VISIBLE_DEVICES"] = ""  # the dry run's subprocesses see no GPU either
        self.data = self.work / "data"
        self.measured = self.data  # the corpora the speed rows decode (models/data with the reference models)
        self.checkpoints = self.work / "checkpoints"

    # ---- running steps ----
    def step(self, name, kind, fn, *a):
        """Run ``fn`` if its least time (MIN_SECONDS[kind]) fits in what is left; record what happened."""
        left = self.deadline.left()
        if left < MIN_SECONDS[kind]:
            self.report.add(f"{name}: skipped", f"{left:.0f} s left, the step needs at least {MIN_SECONDS[kind]} s.",
                            [{"step": name, "status": "skipped", "seconds_left": round(left)}])
            return None
        start = time.time()
        print(f"[evidence] {name} ({left:.0f} s left)", flush=True)
        try:
            return fn(*a)
        except Exception as err:  # one step's failure must not lose the others' results
            self.report.add(f"{name}: FAILED", code(f"{type(err).__name__}: {err}"[-3000:]),
                            [{"step": name, "status": "failed", "error": str(err)[-500:]}])
            return None
        finally:
            print(f"[evidence] {name} took {time.time() - start:.0f} s", flush=True)

    def command(self, name, cmd, limit=None):
        """Run ``cmd`` (a job in its own process group) until it ends or the deadline (or ``limit`` s)
        comes; its output goes to logs/<name>.log.  Returns (exit code or None if stopped, log text)."""
        log = self.logs / f"{name}.log"
        job = Job(name, [str(c) for c in cmd], log, self.env)
        end = time.time() + min(self.deadline.left(), limit or math.inf)
        while job.poll() is None and time.time() < end:
            time.sleep(0.5)
        code_ = job.poll()
        if code_ is None:
            job.stop(grace=10)
            with open(log, "a") as f:
                f.write("\n[evidence] stopped at the deadline\n")
        return code_, log.read_text(errors="replace")

    def checked(self, name, cmd, limit=None):
        rc, text = self.command(name, cmd, limit)
        if rc not in (0, None):
            raise RuntimeError(f"{' '.join(map(str, cmd))} exited {rc}:\n{text[-2500:]}")
        return rc, text

    # ---- the steps ----
    def environment(self):
        import importlib.metadata

        import torch

        import fairseq

        lines = [f"python {sys.version.split()[0]} ({sys.executable})",
                 f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}, cuDNN "
                 f"{torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 'none'}",
                 f"fairseq {fairseq.__version__} from {Path(fairseq.__file__).parent}"]
        for name in ("hydra-core", "omegaconf", "numpy", "sacrebleu", "sentencepiece", "bitarray"):
            try:
                lines.append(f"{name} {importlib.metadata.version(name)}")
            except importlib.metadata.PackageNotFoundError:
                lines.append(f"{name} not installed")
        record = {"step": "environment", "device": self.device, "torch": torch.__version__,
                  "cuda_build": torch.version.cuda, "fairseq": fairseq.__version__}
        if self.cuda:
            if not torch.cuda.is_available():
                raise SystemExit("error: --device cuda, but torch sees no GPU (driver loaded? CUDA_VISIBLE_DEVICES?); "
                                 "--device cpu runs the dry run")
            cap = torch.cuda.get_device_capability()
            record.update(gpu=torch.cuda.get_device_name(), capability=f"{cap[0]}.{cap[1]}", driver=driver_version(),
                          memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
            lines.insert(0, f"device: {record['gpu']} (compute capability {record['capability']}, "
                            f"{record['memory_gib']} GiB), driver {record['driver']}")
        else:
            lines.insert(0, "device: cpu (a dry run: its timings mean nothing for a GPU)")
        print("\n".join(lines), flush=True)
        self.report.add("environment", code("\n".join(lines)), [record])

    def stage_data(self):
        """The bundle's corpora, copied to the work folder (distillation writes a corpus beside them)."""
        src = Path(self.args.bundle) / "data"
        if not self.data.exists():
            shutil.copytree(src, self.data) if src.is_dir() else self.data.mkdir(parents=True)
        missing = [c for c in sorted({m["corpus"] for m in self.read_models(GOLD).values()})  # stage 1's corpora
                   if not (self.data / c / "bin").is_dir()]
        if missing:
            manifest = json.loads((Path(self.args.bundle) / "MANIFEST.json").read_text())
            self.report.add("corpora missing", "\n".join(f"- {c}: build with `{manifest['corpora'][c]['command']}`"
                                                        for c in missing))

    def reference_models(self):
        """CHECKPOINTS/<name>/checkpoint_best.pt for every model of models/ (<name>/checkpoint_best.pt or <name>.pt)."""
        found = {}
        models = Path(self.args.models_dir)
        for p in sorted(models.glob("*/checkpoint_best.pt")) + sorted(models.glob("*.pt")):
            found[p.parent.name if p.name == "checkpoint_best.pt" else p.stem] = p
        for name, p in found.items():
            link = self.checkpoints / name / "checkpoint_best.pt"
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(p)
        return sorted(found)

    def reference_run(self, name, models, stop_fraction, parallel, extra=()):
        """scripts/reference_run.py over ``models`` (a list file under the GPU recipe), stopped by
        fairseq's --stop-time-hours at ``stop_fraction`` of the time left (and by the deadline)."""
        stop_minutes = max(0.2, stop_fraction * self.deadline.left() / 60)
        cmd = [sys.executable, "-m", "scripts.reference_run", "--models", models, "--data", self.data,
               "--out", self.work / "ref", "--max-update", self.args.max_update, "--interval", self.args.interval,
               "--parallel", parallel, "--stop-minutes", f"{stop_minutes:.2f}", "--poll-seconds", "1", *extra]
        if self.args.names:
            names = [n for n in self.args.names if n in self.read_models(models)]
            if not names:
                self.report.add(f"{name}: skipped", f"none of --names {' '.join(self.args.names)} is in {models}")
                return
            cmd += ["--names", *names]
        if self.args.train_args:
            cmd += ["--", *shlex.split(self.args.train_args)]
        rc, text = self.checked(name, cmd, limit=stop_minutes * 60 + 60)  # its scorer's backlog ends here
        summary = json.loads((self.work / "ref" / "summary.json").read_text()) if (self.work / "ref" / "summary.json").exists() else {}
        rows = [{"step": name, "model": m, "updates": (c["points"] or [{}])[-1].get("updates"),
                 "valid_bleu": (c["points"] or [{}])[-1].get("bleu"), "converged": c.get("converged"),
                 "train_seconds": c.get("train_seconds")} for m, c in summary.items() if m in self.read_models(models)]
        table = "\n".join(f"| {r['model']} | {r['updates']} | {r['valid_bleu']} | "
                          f"{'at ' + str(r['converged']['updates']) if r['converged'] else 'no'} | {r['train_seconds']} |"
                          for r in rows)
        note = "" if rc == 0 else "\n\nStopped at the deadline; the points above are what it finished."
        self.report.add(name, f"stopped after {stop_minutes:.1f} min of training at most (--stop-minutes)\n\n"
                        "| model | updates | valid BLEU (last point) | converged | training s |\n|---|---|---|---|---|\n"
                        + table + note, rows)

    def read_models(self, path):
        from scripts.lab.training.model_list import read_models

        return {m["name"]: m for m in read_models(path)}

    def recipe_list(self, source):
        """``source`` (a model list) with the GPU recipe in every line: its config's --max-tokens x
        batch_scale and --lr x lr_scale (configs/gpu/recipe.json), written to the work folder."""
        from scripts.lab.training.model_list import config_args

        recipe = json.loads(RECIPE.read_text())
        lines = []
        for m in self.read_models(source).values():
            words = config_args(m["config"], "{CKPT}", "{DATA}")
            added = []
            for flag, scale, kind in (("--max-tokens", recipe["batch_scale"], int), ("--lr", recipe["lr_scale"], float)):
                if flag in words:
                    added += [flag, f"{kind(float(words[words.index(flag) + 1]) * scale):g}"]
            keys = ([f"updates={m['update_scale']:g}"] if m["update_scale"] != 1 else []) + \
                   ([f"beam={m['beam']}"] if m["beam"] else []) + \
                   ([f"generate={m['generate']}"] if m["generate"] else []) + ([] if m["curve"] else ["curve=no"]) + \
                   ([f"baseline={m['baseline']}"] if m["baseline"] != "baseline" else [])
            lines.append(shlex.join([m["name"], m["config"], m["corpus"], *keys, *m["extra"], *added]))
        path = self.work / f"gpu_{Path(source).name}"
        path.write_text("\n".join(lines) + "\n")
        return path

    def bootstrap(self, shipped):
        """Stage 1's models (configs/reference/convergence_gold.txt, under the GPU recipe) that models/
        lacks (``shipped``: the names it has), trained side by side for half the time left (no curves), so that the speed rows have
        models to decode."""
        from scripts.lab.training.train_command import train_command

        models = {n: m for n, m in self.read_models(self.recipe_list(GOLD)).items() if n not in shipped}
        minutes = 0.5 * self.deadline.left() / 60
        ns = argparse.Namespace(out=self.work / "ref", data=self.data, interval=self.args.max_update, seed=1,
                                max_update=self.args.max_update, stop_minutes=minutes,
                                train_args=shlex.split(self.args.train_args))
        jobs = {n: Job(n, [str(c) for c in train_command(m, ns, self.cuda)], self.logs / f"bootstrap-{n}.log", self.env)
                for n, m in models.items() if (self.data / m["corpus"] / "bin").is_dir()}
        end = time.time() + minutes * 60 + 60  # fairseq stops itself at --stop-time-hours; this is the backstop
        while any(j.poll() is None for j in jobs.values()) and time.time() < end:
            time.sleep(0.5)
        rows = []
        for n, job in jobs.items():
            code_ = job.stop(grace=10)
            last = self.work / "ref" / "checkpoints" / n / "checkpoint_last.pt"
            if last.exists():
                pack_checkpoint(last, self.checkpoints / n / "checkpoint_best.pt")
            rows.append({"step": "bootstrap", "model": n, "exit": code_, "updates": train_log.updates(job.log),
                         "checkpoint": last.exists()})
        self.report.add(f"bootstrap: stage 1 trained for at most {minutes:.1f} min",
                        "\n".join(f"- {r['model']}: {r['updates']} updates, exit {r['exit']}" for r in rows), rows)

    def gpu_check(self):
        cmd = [sys.executable, "-m", "scripts.gpu_check", "--data", self.measured / "en-de" / "bin",
               "--path", self.checkpoints / "baseline" / "checkpoint_best.pt", "--device", self.device,
               "--sentences", self.args.check_sentences]
        for flag, model in (("--blockwise-path", "blockwise_k4_frozen"), ("--drafter-path", "gad_drafter")):
            if (self.checkpoints / model / "checkpoint_best.pt").exists():
                cmd += [flag, self.checkpoints / model / "checkpoint_best.pt"]
        rc, text = self.checked("gpu_check", cmd)
        body = text[text.find("torch "):] if "torch " in text else text
        self.report.add("GPU self-check (scripts/gpu_check.py)" + (" -- stopped at the deadline" if rc is None else ""),
                        code(body[-6000:]), [{"step": "gpu_check", "output": body[-6000:], "finished": rc == 0}])

    def cost_probe(self):
        """scripts/cost_probe.py (``COST_PROBE``): one engine iteration verifying a draft of width m against
        a plain step, on random weights at the papers' sizes.  Its JSONL goes into the logs tarball (an
        OUT file would take a model archive's slot), its records into results.jsonl, its tables into summary.md."""
        from scripts.lab.evaluation.verification_cost import markdown

        jsonl = self.logs / "cost_probe.jsonl"
        cmd = [sys.executable, "-m", "scripts.cost_probe", *COST_PROBE["cuda" if self.cuda else "cpu"],
               "--device", self.device, "--out", jsonl]
        rc, _ = self.checked("cost_probe", cmd, limit=COST_PROBE_SECONDS)
        records = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.exists() else []
        if not records:
            raise RuntimeError(f"stopped (after {COST_PROBE_SECONDS} s or at the deadline) before the first size was measured")
        sizes = dict.fromkeys(r["size"] for r in records)
        tables = "\n".join(markdown([r for r in records if r["size"] == size]) for size in sizes)
        note = "" if rc == 0 else (f"\n\nStopped (after {COST_PROBE_SECONDS} s or at the deadline); the sizes above "
                                   "are what it finished.")
        self.report.add("cost probe (scripts/cost_probe.py): an iteration of width m in plain steps",
                        tables.replace("### ", "#### ") + note, [dict(r, step="cost probe") for r in records])

    def benchmark(self, rows, fp16):
        """One rows file of configs/benchmark/ through scripts/benchmark.py (interleaved timing, CUDA
        synchronised, peak memory) in one dtype; its table and records go into the report."""
        dtype = "fp16" if fp16 else "fp32"
        out = self.work / f"bench-{Path(rows).stem}-{dtype}"
        cmd = [sys.executable, "-m", "scripts.benchmark", "--rows", REPO / "configs" / "benchmark" / rows,
               "--data", self.measured / "en-de", "--checkpoints", self.checkpoints, "--out", out,
               "--batch-sizes", *map(str, self.args.batch_sizes), "--runs", self.args.runs, "--timed-sentences", self.args.sentences,
               "--device", self.device, "--skip-missing", "--quality-batch-size", str(max(self.args.batch_sizes)),
               "--save-hypotheses"]  # in the work folder: the orders' report reads them, OUT gets its table
        cmd += ["--fp16"] if fp16 else []
        if self.args.bench_only:
            cmd += ["--only", *self.args.bench_only]
        rc, _ = self.checked(f"benchmark-{Path(rows).stem}-{dtype}", cmd)
        if rc is None:
            raise RuntimeError(f"stopped at the deadline before the rows of {rows} ({dtype}) were written")
        results = [dict(json.loads(line), step=f"benchmark {rows}", dtype=dtype)
                   for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
        self.report.add(f"benchmark {rows}, {dtype}, batch 1 and 32", (out / "results.md").read_text(), results)
        if any(r.get("group") == "orders" for r in results):  # each order beside its L2R control and the papers
            self.checked(f"orders-report-{Path(rows).stem}-{dtype}",
                         [sys.executable, "-m", "scripts.orders_report", out, "--data", self.measured / "en-de",
                          "--manifest", Path(self.args.models_dir) / "MANIFEST.json", "--checkpoints", self.checkpoints])
            self.report.add(f"the orders beside the papers, {dtype}", (out / "orders_report.md").read_text(),
                            [dict(r, step=f"orders report {rows}", dtype=dtype)
                             for r in json.loads((out / "orders_report.json").read_text())])

    def freeze_baseline(self):
        """Stage 1's baseline (its exported checkpoint, the one packed) as every role of stage 2's list:
        teacher, warm start, the drafters' verifier; the teacher is the bundled corpus's own when the
        bundle carries the distilled corpus.  Returns the teacher."""
        from scripts.lab.training.checkpoints import exported_checkpoint

        checkpoints = self.work / "ref" / "checkpoints"
        baseline = exported_checkpoint(self.read_models(GOLD)["baseline"], self.work / "ref", self.data)
        carried = self.data / "en-de-distilled" / TEACHER
        freeze(checkpoints, "verifier", baseline)
        return freeze(checkpoints, "teacher", carried if carried.exists() else baseline)

    def distill(self):
        teacher = self.freeze_baseline()
        if (self.data / "en-de-distilled" / "distill.json").exists():
            self.report.add("distillation", "skipped: the bundle carries en-de-distilled (distill.json).")
            return
        cmd = [sys.executable, "-m", "scripts.distill", "--data", self.data / "en-de", "--path", teacher,
               "--out", self.data / "en-de-distilled", "--beam", "5", "--batch-size", "256" if self.cuda else "64"]
        cmd += ["--fp16"] if self.cuda else ["--cpu"]
        rc, text = self.checked("distill", cmd)
        if rc is None:
            raise RuntimeError("distillation stopped at the deadline: stage 2 has no corpus")
        info = json.loads((self.data / "en-de-distilled" / "distill.json").read_text())
        self.report.add("distillation (beam 5, the stage-1 baseline)", code(json.dumps(info, indent=1)[:3000]),
                        [dict(step="distill", **{k: v for k, v in info.items() if not isinstance(v, (dict, list))})])

    def export(self):
        """Every trained model's checkpoint (reference_run's choice: where it converged, else its best or
        last) as CHECKPOINTS/<name>/checkpoint_best.pt packed as models/ keeps them (fp16, tied embeddings
        once, no optimizer moments, resumable: reference_models.pack_checkpoint)."""
        from scripts.lab.training.checkpoints import exported_checkpoint

        done = []
        for source in (GOLD, KD):
            for m in self.read_models(source).values():
                src = exported_checkpoint(m, self.work / "ref", self.data)
                if src.exists():
                    pack_checkpoint(src, self.checkpoints / m["name"] / "checkpoint_best.pt")
                    done.append({"step": "export", "model": m["name"], "from": src.name})
        self.report.add("export (fp16, no optimizer state)",
                        "\n".join(f"- {r['model']}: {r['from']}" for r in done) or "nothing trained", done)

    def test_bleu(self):
        """Test BLEU of every order (and the L2R control) at greedy and at its beam, gap to L2R-KD."""
        from scripts.lab.evaluation.corpus import Corpus
        from scripts.lab.evaluation.runners import FairseqRunner
        from scripts.lab.training.curve_scoring import CURVE_GENERATE

        models = {n: m for n, m in self.read_models(KD).items() if m["curve"]
                  and (self.checkpoints / n / "checkpoint_best.pt").exists()}
        corpus, rows = Corpus(self.data / "en-de", subset="test"), []
        for name, m in models.items():
            for beam in sorted({1, m["beam"] or 4}):
                if self.deadline.left() < 5:
                    rows.append({"step": "test_bleu", "model": name, "beam": beam, "bleu": None, "skipped": "deadline"})
                    continue
                runner = FairseqRunner(corpus, self.checkpoints / name / "checkpoint_best.pt",
                                       f"{CURVE_GENERATE} {m['generate']}", beam, 64, self.device, self.cuda, 1,
                                       max_len=(1.2, 10))
                tokens = runner.decode(runner.batches)
                ids = sorted(tokens)
                bleu = corpus.bleu([runner.text(tokens[i], corpus) for i in ids], ids)["bleu"]
                rows.append({"step": "test_bleu", "model": name, "beam": beam, "bleu": bleu, "sentences": len(ids)})
        ref = {r["beam"]: r["bleu"] for r in rows if r["model"] == "l2r_kd" and r["bleu"] is not None}
        for r in rows:
            r["gap_to_l2r_kd"] = (round(r["bleu"] - ref[r["beam"]], 2) if r["bleu"] is not None and r["beam"] in ref
                                  else None)
        self.report.add("test BLEU (sacreBLEU, en-de test) at greedy and at each model's beam",
                        "| model | beam | BLEU | gap to L2R-KD (same beam) |\n|---|---|---|---|\n"
                        + "\n".join(f"| {r['model']} | {r['beam']} | {r['bleu']} | {r['gap_to_l2r_kd']} |" for r in rows),
                        rows)

    def pack(self):
        """The exported fp16 checkpoints (not the symlinked ones of models/: those are in the repository)
        as <name>.pt in archives (:meth:`archives`)."""
        folder = self.work / "fp16"
        folder.mkdir(exist_ok=True)
        for ckpt in sorted(self.checkpoints.glob("*/checkpoint_best.pt")):
            if not ckpt.is_symlink():
                shutil.copy(ckpt, folder / f"{ckpt.parent.name}.pt")
        self.archives(sorted(folder.glob("*.pt")))

    def archives(self, files):
        used = [p for p in Path(self.args.out).iterdir() if p.is_file()]
        slots = min(limits.MODEL_ARCHIVES, limits.OUT_FILES - len(used) - 1)  # one slot for the logs tarball
        room = limits.OUT_TOTAL_MIB * limits.MIB - sum(p.stat().st_size for p in used) - 4 * limits.MIB
        cap = min(limits.OUT_FILE_MIB * limits.MIB * 0.95, room / max(1, slots))
        groups, left_out = [], []
        for f in files:  # first fit in name order; fp16 weights hardly compress, so raw sizes bound the archives
            size = f.stat().st_size
            if size <= cap and groups and sum(g.stat().st_size for g in groups[-1]) + size <= cap:
                groups[-1].append(f)
            elif size <= cap and len(groups) < slots:
                groups.append([f])
            else:
                left_out.append(f.stem)
        made = []
        for i, group in enumerate(groups):
            path = Path(self.args.out) / f"models-{self.args.part}-{i + 1}.tar.gz"
            with tarfile.open(path, "w:gz") as tar:
                for f in group:
                    tar.add(f, arcname=f.name)
            made.append((path.name, [f.stem for f in group]))
        self.report.add("model archives (fp16 weights, no optimizer state)",
                        "\n".join(f"- {name}: {', '.join(names)}" for name, names in made)
                        + (f"\n- left out (over the return limits): {', '.join(left_out)}" if left_out else ""),
                        [{"step": "pack", "archive": n, "models": m} for n, m in made])

    def finish(self):
        """The logs tarball, then the limit check of everything under OUT."""
        out = Path(self.args.out)
        with tarfile.open(out / f"logs-{self.args.part}.tar.gz", "w:gz") as tar:
            tar.add(self.logs, arcname="logs")
            ref = self.work / "ref"
            for p in sorted(ref.glob("*/*.log")) + sorted(ref.glob("*/curve.json")) + sorted(ref.glob("*.json")):
                tar.add(p, arcname=f"ref/{p.relative_to(ref)}")
        problems = limits.output_problems(out)
        if problems:
            self.report.add("OUTPUT OVER THE RETURN LIMITS", "\n".join(f"- {p}" for p in problems))
            raise SystemExit("error: " + "; ".join(problems))

    # ---- the parts ----
    def speed(self):
        self.step("environment", "environment", self.environment)
        self.stage_data()
        found = self.reference_models()
        missing = [n for n in self.read_models(GOLD) if n not in found]
        self.report.add("reference models", f"from {self.args.models_dir}: {', '.join(found) or 'none'}" +
                        (f"; {', '.join(missing)} trained briefly first (their rows decode those)" if missing else ""))
        if missing:
            self.step("bootstrap", "bootstrap", self.bootstrap, found)
        self.measured = self.work / "measured"  # per corpus: the set the shipped models are measured on, else the bundle's
        for corpus in sorted(p.name for p in self.data.iterdir() if p.is_dir()):
            shipped = Path(self.args.models_dir) / "data" / corpus
            link = self.measured / corpus
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to((shipped if (shipped / "bin").is_dir() else self.data / corpus).resolve())
        self.step("gpu_check", "gpu_check", self.gpu_check)
        self.step("cost probe", "cost_probe", self.cost_probe)
        if not self.cuda:
            self.report.add("fp16 rows", "skipped: --device cpu (fp16 is timed on the GPU only).")
        # the reference rows in both dtypes first, then the orders' and GAD's rows
        rows_files = self.args.bench_rows or BENCH_ROWS
        order = ([(rows_files[0], True), (rows_files[0], False)] + [(r, True) for r in rows_files[1:]]
                 + [(r, False) for r in rows_files[1:]] if self.cuda else [(r, False) for r in rows_files])
        for rows, fp16 in order:
            self.step(f"benchmark {rows} {'fp16' if fp16 else 'fp32'}", "benchmark", self.benchmark, rows, fp16)

    def train(self):
        self.step("environment", "environment", self.environment)
        self.stage_data()
        self.step("stage 1 (gold corpora)", "stage1",
                  lambda: self.reference_run("stage 1 (gold corpora)", self.recipe_list(GOLD), 0.35, 2,
                                             ["--min-points", "4", "--flatten-reference", "self"]))
        self.step("distillation", "distill", self.distill)
        if (self.data / "en-de-distilled" / "bin").is_dir():
            kd = self.recipe_list(KD)
            parallel = min(16, len(self.read_models(kd))) if self.cuda else 1
            self.step("stage 2 (distilled corpus, concurrent)", "stage2",
                      lambda: self.reference_run("stage 2 (distilled corpus, concurrent)", kd, 0.7, parallel))
        else:
            self.report.add("stage 2: skipped", "no distilled corpus (see distillation above).")
        self.step("export", "export", self.export)
        self.step("pack", "pack", self.pack)  # the weights before the BLEU table: they cannot be remade later
        self.step("test BLEU", "test_bleu", self.test_bleu)

    def base(self):
        base_size.BasePart(self).run()


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no nvidia-smi)"


PART_DEFAULTS = {"speed": 230, "train": 470, "base": base_size.DEADLINE}  # seconds: the 4 and 8 minutes, less the install


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True, help="what comes back (checked against scripts/lab/offline/limits.py)")
    ap.add_argument("--part", required=True, choices=sorted(PART_DEFAULTS))
    ap.add_argument("--deadline", type=float, help="seconds for the whole command (default: speed 230, train 470, base 540)")
    ap.add_argument("--start", type=float, default=None, help="epoch seconds the command started (the shell's)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None)
    ap.add_argument("--work", help="scratch folder (default: a new one in the system's temp folder)")
    ap.add_argument("--max-update", type=int, default=None, help="per training (default: cuda 12000, cpu 4)")
    ap.add_argument("--interval", type=int, default=None, help="checkpoint and curve point every N updates (cuda 500)")
    ap.add_argument("--sentences", type=int, default=None, help="timed test sentences per row (cuda 32, cpu 8)")
    ap.add_argument("--check-sentences", type=int, default=None, help="test sentences of the self-check (cuda 200, cpu 4)")
    ap.add_argument("--runs", type=int, default=None, help="timed passes per benchmark row (cuda 2, cpu 1)")
    ap.add_argument("--models-dir", default=str(REPO / "models"), help="the reference models (default: the repository's)")
    ap.add_argument("--names", nargs="*", help="train only these models of the lists (a dry run's subset)")
    ap.add_argument("--bench-only", nargs="*", help="benchmark only rows whose method contains one of these")
    ap.add_argument("--bench-rows", nargs="*", choices=BENCH_ROWS, help="these rows files only (default: all)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--train-args", default="", help="fairseq-train arguments added last to every training")
    base_size.add_arguments(ap)
    args = ap.parse_args(argv)
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = args.device == "cuda"
    for key, gpu, cpu in (("max_update", 12000, 4), ("interval", 500, 2), ("sentences", 32, 8), ("check_sentences", 200, 4), ("runs", 2, 1)):
        if getattr(args, key) is None:
            setattr(args, key, gpu if cuda else cpu)
    args.deadline = args.deadline or PART_DEFAULTS[args.part]
    args.start = args.start or time.time()
    import tempfile

    args.work = args.work or tempfile.mkdtemp(prefix=f"evidence-{args.part}-")
    exit_on_sigterm()
    evidence = Evidence(args)
    try:
        getattr(evidence, args.part)()
    finally:
        evidence.finish()
    print(f"[evidence] {args.part} done: {args.out} ({len(list(Path(args.out).iterdir()))} files)", flush=True)


if __name__ == "__main__":
    main()
