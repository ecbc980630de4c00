#!/usr/bin/env python
"""Reference run: train a list of models side by side, two at a time, until each has converged;
record learning curves (validation loss and BLEU every ``--interval`` updates) and export the
trained models for the benchmark.  This is how docs/RESULTS.md's reference tables were made.

    python -m scripts.reference_run --models configs/reference/convergence_kd.txt --data RUNS/data \\
        --out RUNS/ref --max-update 30000 --interval 500 --parallel 2

Model list lines (shell words, ``#`` starts a comment)::

    NAME CONFIG CORPUS [KEY=VALUE ...] [extra fairseq-train args]
    head_tail configs/orders/head_tail.args en-de-distilled beam=10 generate="--double-topk" --init-from-l2r ...

with the keys ``updates=F`` (train F x ``--max-update``, as configs/demo_models.txt),
``beam=N`` (the beam of this model's curve instead of ``--curve-beam``: its paper's) and
``generate="ARGS"`` (extra fairseq-generate arguments of its curve, one quoted word) and ``curve=no``
(no BLEU curve: a GAD drafter's checkpoint does not translate by itself; it trains to
``--max-update`` and its validation loss is in train.log) and ``baseline=NAME`` (``{CKPT}/baseline/`` in its
config reads ``{CKPT}/NAME/``: a drafter trained for the run's frozen ``verifier``).  A word
``key=value`` with another key is an error.  ``{CKPT}`` and ``{DATA}`` in a config's arguments and
in the extra ones are replaced by ``OUT/checkpoints`` and the data root.

Every model trains with fairseq-train (``--fp16`` on a GPU, ``--cpu`` otherwise; its own process
group), saving a checkpoint and validating every ``--interval`` updates.  While the trainings run,
one scorer at a time decodes each new interval checkpoint's ``--curve-subset`` split with the
generator fairseq-generate would pick (the checkpoint's own order) and sacreBLEU scores it; the
point is appended to the model's curve.json at once (a checkpoint already there is never scored
again, one that cannot be loaded is skipped with a warning).  The convergence watch
(scripts/lab/evaluation/learning_curve.py) stops a training with SIGTERM once its curve meets the
rule: validation BLEU within ``--tolerance`` over the last two of at least ``--min-points`` points,
the last at no fewer than 3x the updates at which ``--flatten-reference`` (L2R) flattened (0 for the
reference itself, and for every model with ``--flatten-reference none``; with ``self``, 3x the updates
at which the model's own curve first flattened: stage 1 has no reference, and the typo verifier's
curve paused at 3,000 updates, 68.9 BLEU, on its way to 77); curve.json records it and a converged
model is not trained again when the command is re-run, unless the record was made under another rule.  Trainings that stop early
(``--stop-minutes``: fairseq's ``--stop-time-hours``) still save their last checkpoint; re-running
the command resumes every unconverged training from its last checkpoint (the newest one torch can
load).  Stopping the command stops its trainings.

Outputs: ``OUT/<name>/train.log``, ``OUT/<name>/curve.json``, ``OUT/summary.json`` (merged with the
entries of models not named this time), ``OUT/curves.png``; with ``--export DIR`` the checkpoint of
every model at which it converged (else the best by validation loss; the last one for models trained
on a distilled corpus) without optimizer state, as ``DIR/<name>/checkpoint_best.pt`` (a folder the
benchmark reads).
"""
import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

from fairseq_plugins.compat import load_checkpoint
from scripts.lab.corpora.files import AtomicWriter
from scripts.lab.evaluation import learning_curve, train_log
from scripts.lab.evaluation.reference_models import (ROLES, ReferenceModels, better, evaluation_corpus, freeze,
                                                         strip_checkpoint)
from scripts.lab.evaluation.jobs import Job, TrainingSlots, exit_on_sigterm, job_env

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_plugins"
CURVE_GENERATE = "--task fast_translation --lenpen 0.6"  # every curve; a list line's generate= adds to it
# a model packed before it finished: said so in the manifest, read long after the run that packed it ended
SNAPSHOT = " (a snapshot: a later run with --models-dir resumes its training from it)"
SELF = "self"  # --flatten-reference self: a model's floor is 3x the updates at which its own curve first flattened


def _positive(kind):
    def parse(text):
        value = kind(text)
        if not value > 0:
            raise ValueError(f"{text} is not positive")
        return value
    return parse


def _generate_args(text):
    shlex.split(text)  # a malformed quote is an error here, not in the scorer hours later
    return text


def _yes_no(text):
    if text not in ("yes", "no"):
        raise ValueError(f"{text} is neither yes nor no")
    return text == "yes"


def _folder(text):
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        raise ValueError(f"{text!r} is not a folder name of {{CKPT}}")
    return text


LIST_KEYS = {"updates": _positive(float), "beam": _positive(int), "generate": _generate_args, "curve": _yes_no,
             "baseline": _folder}


def read_models(path, names=None):
    """The models of the list at ``path`` (only ``names`` if given), as dicts: name, config, corpus,
    extra (fairseq-train words), update_scale, beam (None: ``--curve-beam``), generate and curve."""
    models = []
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        where = f"{path}:{number} ({raw.strip()!r})"
        try:
            words = shlex.split(raw, comments=True)
        except ValueError as err:
            raise SystemExit(f"error: {where}: {err}; list lines are shell words, quote generate=\"...\" once")
        if not words:
            continue
        if len(words) < 3:
            raise SystemExit(f"error: {where}: a model line is NAME CONFIG CORPUS [KEY=VALUE ...] [fairseq-train args]")
        name, config, corpus, *rest = words
        model = {"name": name, "config": config, "corpus": corpus, "extra": [], "update_scale": 1.0, "beam": None,
                 "generate": "", "curve": True, "baseline": "baseline"}
        for word in rest:
            key, eq, value = word.partition("=")
            if not (eq and re.fullmatch(r"[a-z_]+", key)):
                model["extra"].append(word)
                continue
            if key not in LIST_KEYS:
                raise SystemExit(f"error: {where}: unknown key '{key}=' (known: {', '.join(f'{k}=' for k in LIST_KEYS)}); "
                                 "fairseq-train arguments start with --")
            try:
                model["update_scale" if key == "updates" else key] = LIST_KEYS[key](value)
            except ValueError as err:
                raise SystemExit(f"error: {where}: bad {key}= value: {err}")
        if any(m["name"] == name for m in models):
            raise SystemExit(f"error: {where}: the name {name} is used twice; give every model its own name")
        models.append(model)
    if names:
        known = {m["name"] for m in models}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"error: {', '.join(unknown)} not in {path} (known: {', '.join(sorted(known))})")
        models = [m for m in models if m["name"] in names]
    return models


def config_args(config, ckpt_root, data_root, baseline="baseline"):
    """A config file's fairseq-train words; ``{CKPT}/baseline/`` in it reads ``{CKPT}/<baseline>/`` (a
    list line's ``baseline=verifier``: the frozen verifier of the convergence run)."""
    text = " ".join(line.split("#", 1)[0] for line in (REPO / config).read_text().splitlines())
    text = text.replace("{CKPT}/baseline/", f"{{CKPT}}/{baseline}/")
    text = text.replace("{CKPT}", str(ckpt_root)).replace("{DATA}", str(data_root))
    return shlex.split(text)


def cuda_available():
    import torch

    return torch.cuda.is_available()


def train_command(model, args, gpu):
    save = Path(args.out) / "checkpoints" / model["name"]
    ckpt_root, data_root = Path(args.out) / "checkpoints", Path(args.data).resolve()
    extra = [w.replace("{CKPT}", str(ckpt_root)).replace("{DATA}", str(data_root)) for w in model["extra"]]
    max_update = max_update_of(model, args)
    cmd = [sys.executable, "-m", "fairseq_cli.train", str(Path(args.data) / model["corpus"] / "bin"),
           "--user-dir", str(PLUGIN_DIR)] + config_args(model["config"], Path(args.out) / "checkpoints", args.data,
                                                                  model["baseline"])
    cmd += ["--save-dir", str(save), "--max-update", str(max_update), "--save-interval-updates", str(args.interval),
            "--validate-interval-updates", str(args.interval), "--keep-interval-updates", "-1",
            "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "100", "--num-workers", "0",
            "--seed", str(args.seed)]
    if args.stop_minutes:
        cmd += ["--stop-time-hours", f"{args.stop_minutes / 60:.4f}"]
    cmd += ["--fp16"] if gpu else ["--cpu"]
    return cmd + extra + args.train_args


def missing_inputs(cmd, ckpt_root):
    """The checkpoints under ``ckpt_root`` (``{CKPT}``) that training command ``cmd`` reads and that do not
    exist yet (a role not frozen yet: the verifier of the drafters, while stage 1 trains on)."""
    root = str(ckpt_root)
    return [w for w in map(str, cmd) if w.startswith(root) and w.endswith(".pt") and not Path(w).exists()]


def max_update_of(model, args):
    return max(1, round(args.max_update * model.get("update_scale", 1.0)))


def trained_updates(save_dir):
    """The updates of ``save_dir``'s checkpoint_last.pt (None without a readable one).  fairseq-train
    resumed at its --max-update still runs one more update and may overwrite checkpoint_best.pt, which
    other models were trained against (a drafter's verifier): such a training is not started again."""
    last = Path(save_dir) / "checkpoint_last.pt"
    if not last.exists() or not readable(last):
        return None
    state = load_checkpoint(last, mmap=True)
    return state["optimizer_history"][-1]["num_updates"]


def interval_checkpoints(folder):
    """[(updates, path)] of fairseq's interval checkpoints (checkpoint_EPOCH_UPDATES.pt) in ``folder``."""
    found = []
    for p in Path(folder).glob("checkpoint_*_*.pt"):
        m = re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def readable(checkpoint):
    """Whether torch can load ``checkpoint`` (one written by a training killed while saving cannot; a
    warning says so); memory-mapped, so the tensors are not read."""
    try:
        load_checkpoint(checkpoint, mmap=True)
        return True
    except Exception as err:  # truncated zip...: whatever torch.load raises (a refused pickle is an error: SystemExit)
        reason = (str(err).splitlines() or [""])[0][:160]
        print(f"warning: torch cannot load {checkpoint} ({type(err).__name__}: {reason}); a training killed while "
              "saving leaves such a file", flush=True)
        return False


def restore_file(save_dir):
    """Where a training resumes: None for fairseq's own checkpoint_last.pt (or a fresh start); the newest
    readable interval checkpoint if checkpoint_last.pt cannot be loaded (a training killed while copying it)."""
    last = Path(save_dir) / "checkpoint_last.pt"
    if not last.exists() or readable(last):
        return None
    for _, ckpt in reversed(interval_checkpoints(save_dir)):
        if readable(ckpt):
            print(f"warning: resuming from {ckpt}, not {last}", flush=True)
            return ckpt
    return None


def curve_header(args):
    return {"name": args.name, "subset": args.curve_subset, "beam": args.curve_beam, "generate": args.generate}


def check_curve_header(path, curve, header):
    """Points of one curve must come from one decoding (subset, beam, generation arguments)."""
    for key in ("subset", "beam", "generate"):
        if curve.get(key, "") != header[key]:
            raise SystemExit(f"error: {path} was scored with {key} {curve.get(key, '')!r}, not {header[key]!r}: "
                             "score with the same settings, or move it away to start the curve again")


def score(corpus, checkpoint, generate, beam, gpu):
    """sacreBLEU of ``checkpoint`` on ``corpus``'s split, decoded as every curve is; (quality, sentence ids)."""
    from scripts.lab.evaluation.runners import FairseqRunner

    runner = FairseqRunner(corpus, checkpoint, f"{CURVE_GENERATE} {generate}", beam, 128,
                           "cuda" if gpu else "cpu", gpu, 1, max_len=(1.2, 10))
    tokens = runner.decode(runner.batches)
    ids = sorted(tokens)
    return corpus.bleu([runner.text(tokens[i], corpus) for i in ids], ids), ids


def curve(args):
    """Subcommand: score one model's interval checkpoints that its curve.json does not hold yet (at
    most ``--max-points``), appending each point to curve.json as soon as it is scored."""
    import torch

    from scripts.lab.evaluation.corpus import Corpus

    torch.set_num_threads(1)
    gpu = cuda_available()
    path = Path(args.out) / args.name / "curve.json"
    header = curve_header(args)
    result = learning_curve.read(path)
    if result is None:
        result = dict(header, sentences=0, sacrebleu_signature=None, points=[])
    check_curve_header(path, result, header)
    log = Path(args.out) / args.name / "train.log"
    losses = train_log.valid_losses(log)
    missing = [p for p in result["points"] if p["valid_loss"] is None and p["updates"] in losses]
    for p in missing:  # validated after the point was scored
        p["valid_loss"] = losses[p["updates"]]
    if missing or not path.exists():
        learning_curve.write(path, result)
    scored = {p["updates"] for p in result["points"]}
    corpus, n = None, 0
    for updates, ckpt in interval_checkpoints(Path(args.out) / "checkpoints" / args.name):
        if updates in scored:
            continue
        if args.max_points and n >= args.max_points:
            break
        if not readable(ckpt):
            print(f"warning: skipped {ckpt} (delete it, or let the training save it again)", flush=True)
            continue
        corpus = corpus or Corpus(Path(args.data) / args.corpus, subset=args.curve_subset)
        quality, ids = score(corpus, ckpt, args.generate, args.curve_beam, gpu)
        loss = train_log.valid_losses(log).get(updates)
        point = {"updates": updates, "valid_loss": loss, "bleu": quality["bleu"], "bp": quality["bp"]}
        result["points"] = sorted(result["points"] + [point], key=lambda p: p["updates"])
        result.update(sentences=len(ids), sacrebleu_signature=quality["signature"])
        learning_curve.write(path, result)
        scored.add(updates)
        n += 1
        print(f"{args.name} {updates} updates: valid loss {loss}  BLEU {quality['bleu']}", flush=True)


class ReferenceRun:
    """The orchestration: up to ``--parallel`` trainings at once, one curve scorer beside them, and the
    convergence watch that stops a training once its curve meets the rule.  Each step is a method
    called once per ``--poll-seconds``; :meth:`run` stops every job it started when it ends, however."""

    def __init__(self, models, args, gpu):
        self.models, self.args, self.gpu, self.out = models, args, gpu, Path(args.out)
        self.env = job_env(REPO)  # the curve scorer's and the packer's: one thread beside the trainings
        self.pending = [] if args.skip_training else list(models)  # trainings not started yet
        self.trainings = {}  # name -> Job
        self._slots = None  # the training slots, shared with runs beside this one (made when a training starts)
        self.slot_wait_logged = False
        self.codes = {}  # name -> exit code of a training that ended by itself
        self.converged = set()
        self.scorer = None  # (name, Job): a curve's scorer, or the packer of a converged model into --models-dir
        self.store = ReferenceModels(args.models_dir) if getattr(args, "models_dir", None) else None
        self.to_pack = []  # models due in --models-dir: converged, finished (without a curve), or a snapshot due
        self.snapshotted = {}  # name -> the updates of its newest snapshot in --models-dir (--snapshot-every)
        self.by_name = {m["name"]: m for m in models}
        self.waiting = {}  # name -> the checkpoints of this run it trains from that do not exist yet
        self.attempted = {}  # name -> the unscored checkpoints when it was last given to the scorer
        self.turn = 0  # the scorer goes round the models
        self.reference = None if args.flatten_reference.lower() == "none" else args.flatten_reference
        self.own_floor = self.reference == SELF  # each model's floor: 3x where its own curve first flattened
        self.start, self.last_report, self.floor_reported = time.time(), 0.0, None

    def run(self):
        """Until every training has ended (or converged) and every checkpoint is scored; returns the
        names of the trainings that failed."""
        try:
            while True:
                self.collect_trainings()
                self.collect_scorer()
                self.watch()
                self.queue_snapshots()
                self.start_trainings()
                self.start_scorer()
                if not (self.pending or self.trainings or self.scorer or self.to_pack):
                    break
                self.report_progress()
                time.sleep(self.args.poll_seconds)
        finally:
            self.stop_all()
        return sorted(n for n, code in self.codes.items() if code != 0)

    @property
    def slots(self):
        if self._slots is None:
            self._slots = TrainingSlots(self.out / "slots", self.args.parallel)
        return self._slots

    # ---- the steps ----
    def collect_trainings(self):
        for name, job in list(self.trainings.items()):
            code = job.poll()
            if code is not None:
                self.codes[name] = code
                del self.trainings[name]
                self.slots.free(name)
                status = "done" if code == 0 else f"FAILED ({code}); see {job.log}"
                self.log(f"{name} {status} {progress(job.log)}")
                if code == 0:
                    self.mark_finished(self.by_name[name])

    def mark_finished(self, m):
        """A model without a curve (a drafter, blockwise heads) is done at its updates: into --models-dir."""
        if self.store and not m["curve"] and not self.finished_in_store(m) and m["name"] not in self.to_pack:
            self.to_pack.append(m["name"])

    def finished_in_store(self, m):
        """Whether --models-dir holds ``m`` converged or trained to its --max-update.  One at the cap is not
        resumed: fairseq-train would run one more update with a fresh optimizer and replace the shipped model."""
        entry = self.store and self.store.entry(m["name"])
        return bool(entry) and bool(entry.get("converged") or entry["updates"] >= max_update_of(m, self.args))

    def collect_scorer(self):
        if self.scorer and self.scorer[1].poll() is not None:
            name, job = self.scorer
            if job.poll() != 0:
                self.log(f"scoring {name} FAILED ({job.poll()}); see {job.log}")
            self.scorer = None

    def watch(self):
        """Stop and record as converged every model whose curve meets the rule (or already records it)."""
        floor = self.reference_floor()
        for m in self.models:
            name = m["name"]
            if name in self.converged or (self.scorer and self.scorer[0] == name):
                continue  # a curve being written is judged once its scorer is done
            curve = learning_curve.read(self.curve_path(name))
            if curve is None:
                continue
            record = curve.get("converged")
            if record and not self.same_rule(record):
                self.log(f"{name} was recorded converged at {record['updates']} updates under another rule "
                         f"({self.rule_of(record)}): judged again under this one")
                del curve["converged"]
                learning_curve.write(self.curve_path(name), curve)
            if not curve.get("converged"):
                min_updates = self.floor_of(name, curve["points"], floor)
                if min_updates is None or not learning_curve.converged(curve["points"], self.args.min_points,
                                                                       self.args.tolerance, min_updates):
                    continue
                curve["converged"] = {"updates": learning_curve.evaluation_points(curve["points"])[-1]["updates"],
                                      "min_points": self.args.min_points, "tolerance": self.args.tolerance,
                                      "min_updates": min_updates, "reference": self.reference}
                learning_curve.write(self.curve_path(name), curve)
            self.mark_converged(name, curve["converged"]["updates"])

    def queue_snapshots(self):
        """--snapshot-every N: a model in training goes into --models-dir again once its newest scored point (without
        a curve: its newest interval checkpoint) is N updates past its snapshot there, so that a machine lost before
        the run ends costs at most N updates."""
        if not (self.store and self.args.snapshot_every):
            return
        for name in self.trainings:
            if name in self.converged or name in self.to_pack:
                continue
            if self.by_name[name]["curve"]:  # its newest scored point
                newest = [p["updates"] for p in (learning_curve.read(self.curve_path(name)) or {}).get("points") or []]
            else:  # a drafter or blockwise heads: its newest interval checkpoint (fairseq writes them whole)
                newest = [u for u, _ in interval_checkpoints(self.out / "checkpoints" / name)]
            if name not in self.snapshotted:
                entry = self.store.entry(name)
                self.snapshotted[name] = entry["updates"] if entry else 0
            if newest and newest[-1] >= self.snapshotted[name] + self.args.snapshot_every:
                self.snapshotted[name] = newest[-1]
                self.to_pack.append(name)
                self.log(f"{name}: its snapshot at {newest[-1]} updates goes into {self.store.folder}")

    def mark_converged(self, name, updates):
        self.converged.add(name)
        entry = self.store and self.store.entry(name)
        if self.store and not (entry and entry.get("converged")):
            self.to_pack.append(name)  # each model goes into models/ as soon as it converges
        self.pending = [p for p in self.pending if p["name"] != name]
        if name in self.trainings:
            self.trainings.pop(name).stop()
            self.slots.free(name)
            self.log(f"{name} converged at {updates} updates: training stopped")
        else:
            self.log(f"{name} converged at {updates} updates")

    def start_trainings(self):
        while self.pending and len(self.trainings) < self.args.parallel:
            m = self.pending.pop(0)
            if self.finished_in_store(m):
                self.codes[m["name"]] = 0
                self.log(f"{m['name']} is in {self.store.folder}, {self.store.entry(m['name'])['stopped']}: not trained again")
                continue
            done = trained_updates(self.out / "checkpoints" / m["name"])
            if done is not None and done >= max_update_of(m, self.args):
                self.codes[m["name"]] = 0
                self.log(f"{m['name']} has {done} updates, at --max-update {max_update_of(m, self.args)}: "
                         "not trained again (raise --max-update to train it further)")
                self.mark_finished(m)
                continue
            cmd = train_command(m, self.args, self.gpu)
            needs = missing_inputs(cmd, self.out / "checkpoints")
            if needs:
                self.waiting[m["name"]] = needs
                self.log(f"{m['name']} not started: it needs {', '.join(needs)}, not there yet (a later run trains it)")
                continue
            if not self.slots.take(m["name"]):  # a run beside this one trains on the other cores
                self.pending.insert(0, m)
                if not self.slot_wait_logged:
                    self.log(f"{m['name']} waits for one of the {self.args.parallel} training slots of {self.out} "
                             "(held by a run beside this one)")
                    self.slot_wait_logged = True
                return
            self.slot_wait_logged = False
            restore = restore_file(self.out / "checkpoints" / m["name"]) or self.shipped_start(m)
            self.trainings[m["name"]] = Job(m["name"], cmd + (["--restore-file", str(restore)] if restore else []),
                                            self.out / m["name"] / "train.log", job_env(REPO, self.args.threads))
            self.log(f"started {m['name']}")

    def shipped_start(self, m):
        """The --models-dir checkpoint a training without a run folder of its own goes on from (None: none)."""
        if not self.store or (self.out / "checkpoints" / m["name"] / "checkpoint_last.pt").exists():
            return None
        shipped = self.store.resumable(m["name"], Path(self.args.data) / m["corpus"])
        if shipped:
            entry = self.store.entry(m["name"])
            self.log(f"{m['name']}: no checkpoint in {self.out}; going on from {shipped} ({entry['updates']} updates)")
            if entry.get("curve") and learning_curve.read(self.curve_path(m["name"])) is None:
                learning_curve.write(self.curve_path(m["name"]), entry["curve"])  # the rule counts its earlier points
        return shipped

    def start_scorer(self):
        """Give the scorer the next model to pack (:attr:`to_pack`), else the next model (in turn) with interval
        checkpoints its curve does not hold."""
        if self.scorer:
            return
        if self.to_pack:
            name = self.to_pack.pop(0)
            self.scorer = (name, Job(name, self.pack_command(name), self.out / name / "pack.log", self.env))
            return
        for i in range(len(self.models)):
            m = self.models[(self.turn + i) % len(self.models)]
            unscored = self.unscored(m["name"])
            if not m["curve"] or m["name"] in self.converged or not unscored or unscored == self.attempted.get(m["name"]):
                continue  # the same unscored set again: only unreadable checkpoints are left
            self.attempted[m["name"]] = unscored
            self.turn = (self.turn + i + 1) % len(self.models)
            self.scorer = (m["name"], Job(m["name"], self.curve_command(m), self.out / m["name"] / "curve.log", self.env))
            return

    def stop_all(self):
        for name, job in list(self.trainings.items()) + ([self.scorer] if self.scorer else []):
            job.stop()
            self.log(f"stopped {name}")
        for name in self.trainings:
            self.slots.free(name)
        self.trainings, self.scorer = {}, None

    # ---- helpers ----
    def curve_path(self, name):
        return self.out / name / "curve.json"

    def floor_of(self, name, points, reference_floor):
        """The updates a model's last point must reach: 3x where its own curve first flattened (``self``;
        None until then), else 0 for the reference and ``reference_floor`` for the others."""
        if self.own_floor:
            return learning_curve.min_updates(points, self.args.min_points, self.args.tolerance)
        return 0 if name == self.reference else reference_floor

    def same_rule(self, record):
        return self.rule_of(record) == self.rule_of({"min_points": self.args.min_points, "tolerance": self.args.tolerance,
                                                     "reference": self.reference})

    @staticmethod
    def rule_of(record):
        return (f"{record.get('min_points')} points, tolerance {record.get('tolerance')}, "
                f"floor {record.get('reference') or 'none'}")

    def reference_floor(self):
        """The updates the other models' last point must reach (0 without a reference; None until it flattens)."""
        if self.reference is None or self.own_floor:
            return 0
        reference = learning_curve.read(self.curve_path(self.reference)) or self.shipped_curve(self.reference) or {}
        floor = learning_curve.min_updates(reference.get("points"), self.args.min_points, self.args.tolerance)
        if floor is not None and floor != self.floor_reported:
            self.floor_reported = floor
            short = [m["name"] for m in self.models if m["name"] != self.reference and m["curve"]  # no curve: a set length
                     and floor > self.args.max_update * m["update_scale"]]
            self.log(f"{self.reference} flattened at {floor // learning_curve.REFERENCE_FACTOR} updates: the others "
                     f"converge at {floor} updates or later" + (f"; {', '.join(short)} stop at --max-update first: "
                                                                "raise it and run again" if short else ""))
        return floor

    def shipped_curve(self, name):
        """The curve ``--models-dir`` ships with ``name``: a run folder on a new machine has none of a model that
        converged on another, and without its reference's curve no order would ever meet the rule."""
        entry = self.store and self.store.entry(name)
        return entry.get("curve") if entry else None

    def unscored(self, name):
        curve = learning_curve.read(self.curve_path(name)) or {"points": []}
        scored = {p["updates"] for p in curve["points"]}
        return frozenset(u for u, _ in interval_checkpoints(self.out / "checkpoints" / name) if u not in scored)

    def curve_command(self, m):
        return [sys.executable, "-m", "scripts.reference_run", "--curve", "--name", m["name"], "--corpus", m["corpus"],
                "--data", self.args.data, "--out", self.args.out, "--curve-subset", self.args.curve_subset,
                "--curve-beam", str(m["beam"] or self.args.curve_beam), f"--generate={m['generate']}",
                "--max-points", "1"]

    def pack_command(self, name):
        a = self.args
        return [sys.executable, "-m", "scripts.reference_run", "--pack", "--name", name, "--models", a.models,
                "--data", a.data, "--out", a.out, "--models-dir", a.models_dir, "--max-update", str(a.max_update),
                "--interval", str(a.interval), "--seed", str(a.seed), "--curve-beam", str(a.curve_beam)] + \
            (["--"] + a.train_args if a.train_args else [])

    def report_progress(self):
        if self.trainings and time.time() - self.last_report >= 60:
            self.last_report = time.time()
            self.log("  ".join(f"{n}: {progress(job.log)}" for n, job in self.trainings.items()))

    def log(self, message):
        print(f"[reference {time.time() - self.start:6.0f}s] {message}", flush=True)


def progress(log):
    updates = train_log.updates(log)
    return f"{updates} updates" if updates is not None else ""


def summarize(models, out):
    """OUT/summary.json: every model's curve and training time; entries of models not in ``models``
    (an earlier run's --names) are kept."""
    path = Path(out) / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    for m in models:
        curve = learning_curve.read(Path(out) / m["name"] / "curve.json")
        if curve is not None:
            summary[m["name"]] = dict(curve, converged=curve.get("converged"),
                                      train_seconds=train_log.wall_seconds(Path(out) / m["name"] / "train.log"))
    with AtomicWriter(path) as f:
        f.write(json.dumps(summary, indent=1) + "\n")
    return summary


def exported_checkpoint(m, out, data):
    """The interval checkpoint at which the model converged; else checkpoint_best.pt, or for a model
    trained on a distilled corpus (``distill.json`` in it) checkpoint_last.pt, since the gold
    validation loss does not rank what it learns (as scripts/train_models.sh)."""
    folder = Path(out) / "checkpoints" / m["name"]
    converged = (learning_curve.read(Path(out) / m["name"] / "curve.json") or {}).get("converged")
    if converged:
        found = [c for u, c in interval_checkpoints(folder) if u == converged["updates"]]
        if found:
            return found[-1]
        print(f"warning: {m['name']} converged at {converged['updates']} updates but its checkpoint is gone; "
              "exporting by the usual rule", flush=True)
    distilled = (Path(data) / m["corpus"] / "distill.json").exists()
    return folder / ("checkpoint_last.pt" if distilled else "checkpoint_best.pt")


def export(models, out, dest, data):
    """Every model's exported checkpoint (:func:`exported_checkpoint`) without optimizer state (what
    decoding needs), as ``dest/<name>/checkpoint_best.pt``."""
    for m in models:
        src = exported_checkpoint(m, out, data)
        if not src.exists():
            continue
        strip_checkpoint(src, Path(dest) / m["name"] / "checkpoint_best.pt")
        print(f"exported {src}", flush=True)


def portable_command(train, args):
    """The fairseq-train command of ``train`` with this machine's folders as DATA, RUNS and fairseq_plugins."""
    folders = {str(Path(args.data).resolve()): "DATA", str(Path(args.data)): "DATA", str(Path(args.out)): "RUNS",
               str(PLUGIN_DIR): "fairseq_plugins"}
    words = []
    for word in ["fairseq-train"] + train[train.index("fairseq_cli.train") + 1:]:
        for folder, name in sorted(folders.items(), key=lambda f: -len(f[0])):
            word = word.replace(folder, name)
        words.append(word)
    return shlex.join(words)


def snapshot_checkpoint(m, out, curve):
    """What a snapshot of unconverged model ``m`` packs: with a curve, its newest scored interval checkpoint
    (whole while the training saves the next one, its validation BLEU known); without one (a drafter, blockwise
    heads), checkpoint_last.pt where it is readable and no older than the newest interval checkpoint, which
    fairseq writes whole (a temporary file renamed) before it copies it to checkpoint_last.pt."""
    folder = Path(out) / "checkpoints" / m["name"]
    last, intervals = folder / "checkpoint_last.pt", interval_checkpoints(folder)
    if m["curve"]:
        scored = {p["updates"] for p in curve["points"]}
        newest = [ckpt for updates, ckpt in intervals if updates in scored]
        return newest[-1] if newest else last
    if not intervals or (last.exists() and readable(last) and checkpoint_updates(last) >= intervals[-1][0]):
        return last
    return intervals[-1][1]


def checkpoint_updates(checkpoint):
    """The updates a fairseq checkpoint was saved at (memory-mapped: the tensors are not read)."""
    return load_checkpoint(checkpoint, mmap=True)["optimizer_history"][-1]["num_updates"]


def offer(m, args):
    """Offer model ``m`` to ``--models-dir``: its converged checkpoint, else (a snapshot before a machine goes
    away) its newest one (:func:`snapshot_checkpoint`), with validation and test BLEU as its curve is
    decoded; packed if better than the one there (reference_models.better)."""
    import torch

    from scripts.lab.evaluation.corpus import Corpus

    torch.set_num_threads(1)
    gpu = cuda_available()
    curve = learning_curve.read(Path(args.out) / m["name"] / "curve.json") or {"points": []}
    converged = curve.get("converged")
    checkpoint = exported_checkpoint(m, args.out, args.data) if converged else snapshot_checkpoint(m, args.out, curve)
    if not checkpoint.exists():
        return False
    updates = checkpoint_updates(checkpoint)
    max_update = max_update_of(m, args)
    if converged:
        floor = f", the last at >= {converged['min_updates']} updates" if converged["min_updates"] else ""
        stopped = (f"converged at {updates} updates (validation BLEU within {converged['tolerance']} over the last "
                   f"two of >= {converged['min_points']} points{floor})")
    elif not m["curve"] and updates >= max_update:  # a drafter or blockwise heads: a fixed budget, no BLEU of its own
        stopped = f"trained its {max_update} updates (no BLEU curve: judged by the rows that decode with it)"
    elif not m["curve"]:
        stopped = f"not finished: {updates} of its {max_update} updates when packed{SNAPSHOT}"
    else:
        stopped = (f"not converged: {updates} of at most {max_update} updates when packed"
                   + (" (the cap)" if updates >= max_update else SNAPSHOT))
    corpus = Path(args.data) / m["corpus"]
    train = train_command(m, args, gpu)
    entry = {"name": m["name"], "config": m["config"], "corpus": m["corpus"], "updates": updates, "converged": converged,
             "stopped": stopped, "beam": m["beam"] or args.curve_beam, "generate": f"{CURVE_GENERATE} {m['generate']}".strip(),
             "command": portable_command(train, args),
             "valid_bleu": None, "test_bleu": None, "curve": curve if curve["points"] else None}
    store = ReferenceModels(args.models_dir)
    if not better(dict(entry, valid_bleu=float("inf")), store.entry(m["name"])):
        print(f"{m['name']}: {store.folder} holds a model at least as far along; kept", flush=True)
        return False
    if m["curve"]:  # a GAD drafter does not translate by itself
        point = [p for p in curve["points"] if p["updates"] == updates and p["bleu"] is not None]
        evaluation = evaluation_corpus(corpus)
        entry["valid_bleu"] = point[0]["bleu"] if point else \
            score(Corpus(evaluation, subset="valid"), checkpoint, m["generate"], entry["beam"], gpu)[0]["bleu"]
        entry["test_bleu"] = score(Corpus(evaluation, subset="test"), checkpoint, m["generate"], entry["beam"], gpu)[0]["bleu"]
    taken = store.offer(entry, checkpoint, corpus)
    print(f"{m['name']}: {'packed into' if taken else 'not better than the model in'} {store.folder} ({stopped}; "
          f"valid BLEU {entry['valid_bleu']}, test BLEU {entry['test_bleu']})", flush=True)
    return taken


def plot(summary, path):
    from scripts.lab.viz.pyplot import pyplot

    plt = pyplot()

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, c in summary.items():
        pts = [p for p in c["points"] if p["bleu"] is not None]
        a.plot([p["updates"] for p in pts], [p["bleu"] for p in pts], marker="o", ms=3, label=name)
        pts = [p for p in c["points"] if p["valid_loss"] is not None]
        b.plot([p["updates"] for p in pts], [p["valid_loss"] for p in pts], marker="o", ms=3, label=name)
    a.set(xlabel="updates", ylabel="sacreBLEU (validation set)", title="BLEU during training")
    b.set(xlabel="updates", ylabel="validation loss (label-smoothed, base 2)", title="validation loss")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pinned_checkpoint(pin, dest, repo=REPO):
    """A checkpoint of this repository's history named by a pin file (``COMMIT PATH SHA256``, ``#`` comments;
    configs/reference/teacher.txt), written to ``dest`` once its sha256 is checked."""
    import hashlib
    import subprocess

    words = shlex.split(pin.read_text(), comments=True)
    if len(words) != 3:
        raise SystemExit(f"error: {pin}: one line COMMIT PATH SHA256 expected")
    commit, path, sha = words
    proc = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: {pin}: git cannot read {path} at {commit} ({proc.stderr.decode().strip()}); "
                         "a shallow clone lacks it: git fetch --unshallow")
    if hashlib.sha256(proc.stdout).hexdigest() != sha:
        raise SystemExit(f"error: {pin}: {path} at {commit} does not have the sha256 the pin names")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(proc.stdout)
    return dest


def freeze_role(args, role, source):
    """``--freeze ROLE SOURCE``: SOURCE is a checkpoint file, or a pin file (``.txt``: a checkpoint of this
    repository's history, :func:`pinned_checkpoint`)."""
    checkpoint = Path(source)
    pinned = checkpoint.suffix == ".txt" and checkpoint.is_file()
    if pinned:
        checkpoint = pinned_checkpoint(checkpoint, Path(args.out) / "checkpoints" / f".{role}.pinned.pt")
    frozen = freeze(Path(args.out) / "checkpoints", role, checkpoint)
    if pinned:
        checkpoint.unlink()
    state = load_checkpoint(frozen, mmap=True)
    print(f"{role}: {frozen} ({state['optimizer_history'][-1]['num_updates']} updates)", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=str(REPO / "configs/reference/orders.txt"))
    ap.add_argument("--data", help="data root holding the corpora named in the list (required except with --freeze)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--names", nargs="*", help="only these models of the list")
    ap.add_argument("--max-update", type=int, default=8000, help="stop a training that has not converged here")
    ap.add_argument("--stop-minutes", type=float, default=0, help="stop every training after this wall time")
    ap.add_argument("--interval", type=int, default=500, help="save, validate and score every N updates")
    ap.add_argument("--parallel", type=int, default=2, help="trainings at once (2 on a 2-core CPU machine), "
                    "between this run and any run beside it with the same --out")
    ap.add_argument("--threads", type=int, default=1, help="threads of each training (--parallel x --threads at most "
                    "the cores: 2 for a training that has a 2-core machine to itself, about twice as fast)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--curve-subset", default="valid")
    ap.add_argument("--curve-beam", type=int, default=4, help="the curves' beam (a list line's beam= overrides it)")
    ap.add_argument("--min-points", type=int, default=learning_curve.MIN_POINTS,
                    help="converged: at least this many evaluation points ...")
    ap.add_argument("--tolerance", type=float, default=learning_curve.TOLERANCE,
                    help="... the last two within this much BLEU ...")
    ap.add_argument("--flatten-reference", default="l2r_kd",
                    help=f"... the last at 3x the updates at which this model (L2R) flattened; '{SELF}': at which "
                         "the model's own curve first did (models without a reference); 'none': no such floor")
    ap.add_argument("--skip-training", action="store_true", help="only score (and watch) the checkpoints there are")
    ap.add_argument("--export", help="write every model's converged (else best) checkpoint, without optimizer state, here")
    ap.add_argument("--models-dir", help="the reference models' folder (the repository's models/): a model converged "
                    "there (or at --max-update) is not trained again, one that is not goes on from there when OUT has no "
                    "checkpoint of it, and a model that converges is packed there at once")
    ap.add_argument("--snapshot", action="store_true", help="at the end, also pack every unconverged model's newest "
                    "checkpoint into --models-dir when it is further along than the one there (before a machine goes away)")
    ap.add_argument("--snapshot-every", type=int, default=0, metavar="N",
                    help="while a model trains, pack it into --models-dir each time it is N updates past its snapshot "
                    "there (0: only at the end, with --snapshot)")
    ap.add_argument("--freeze", nargs=2, metavar=("ROLE", "SOURCE"),
                    help="only copy SOURCE (a checkpoint, or a pin file COMMIT PATH SHA256 of this repository's history) "
                         f"to OUT/checkpoints/ROLE/ unless one is there already; ROLE: {', '.join(ROLES)}")
    ap.add_argument("--poll-seconds", type=float, default=5.0, help=argparse.SUPPRESS)
    ap.add_argument("--curve", action="store_true", help=argparse.SUPPRESS)  # internal: one model's curve
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--generate", default="", help=argparse.SUPPRESS)
    ap.add_argument("--max-points", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--pack", action="store_true", help=argparse.SUPPRESS)  # internal: pack one converged model
    ap.add_argument("train_args", nargs="*", help="extra fairseq-train arguments for every model (after --)")
    args = ap.parse_args(argv)
    if args.freeze:
        return freeze_role(args, *args.freeze)
    if not args.data:
        ap.error("--data is required: the data root holding the corpora named in --models")
    if args.curve:
        return curve(args)
    if (args.snapshot or args.snapshot_every) and not args.models_dir:
        ap.error("--snapshot and --snapshot-every pack into --models-dir: give it")
    if args.threads < 1:
        ap.error(f"--threads must be at least 1, not {args.threads}")
    if args.parallel * args.threads > (os.cpu_count() or 1):
        print(f"warning: --parallel {args.parallel} x --threads {args.threads} is more threads than the {os.cpu_count()} "
              "cores: trainings side by side slow each other down (give --threads 1)", flush=True)
    if args.pack:
        return offer(read_models(args.models, [args.name])[0], args)
    models = read_models(args.models, args.names)
    out = Path(args.out)
    gpu = cuda_available()
    print(f"[reference] {len(models)} models on {'GPU (fp16)' if gpu else 'CPU (fp32)'}, up to {args.max_update} "
          f"updates, curves every {args.interval}; converged: BLEU within {args.tolerance} over the last two of "
          f">= {args.min_points} points" + ("" if args.flatten_reference.lower() == "none" else
                                            f", the last at >= 3x where {args.flatten_reference} flattened"), flush=True)
    if args.flatten_reference.lower() not in ("none", SELF) and not (out / args.flatten_reference / "curve.json").exists() and \
            args.flatten_reference not in {m["name"] for m in models}:
        print(f"warning: no curve of the reference {args.flatten_reference} in {out} and it is not trained here: "
              "the other models train to --max-update unless it flattens (--flatten-reference none: no floor)",
              flush=True)
    exit_on_sigterm()
    reference = ReferenceRun(models, args, gpu)
    failed = reference.run()
    summary = summarize(models, out)
    plot(summary, out / "curves.png")
    if args.export:
        export(models, out, args.export, args.data)
    if args.snapshot:
        for m in models:
            offer(m, args)
    for name, c in summary.items():
        best = max((p for p in c["points"] if p["bleu"] is not None), key=lambda p: p["bleu"], default=None)
        last = c["points"][-1] if c["points"] else None
        conv = c.get("converged")
        print(f"{name:20s} last {last and last['updates']} updates BLEU {last and last['bleu']}  best BLEU "
              f"{best and best['bleu']} at {best and best['updates']}  "
              f"{'converged at ' + str(conv['updates']) if conv else 'not converged'}  ({c.get('train_seconds')} s training)")
    for name, needs in reference.waiting.items():
        print(f"{name:20s} not trained: it needs {', '.join(needs)} (run the command again once it exists)")
    if failed:
        raise SystemExit(f"error: training failed for {', '.join(failed)} (see OUT/<name>/train.log)")


if __name__ == "__main__":
    main()
