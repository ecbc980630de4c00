"""The orchestration of a reference run: up to ``--parallel`` trainings at once in their own process groups,
one curve scorer (or packer) beside them, and the convergence watch that stops a training once its curve
meets the rule (scripts/lab/evaluation/learning_curve.py)."""
import sys
import time
from pathlib import Path

from scripts.lab.evaluation import learning_curve, train_log
from scripts.lab.evaluation.jobs import Job, TrainingSlots, job_env
from scripts.lab.evaluation.reference_models import ReferenceModels
from scripts.lab.training.checkpoints import interval_checkpoints, restore_file, trained_updates
from scripts.lab.training.model_list import REPO, max_update_of
from scripts.lab.training.train_command import counted_from, missing_inputs, train_command

SELF = "self"  # --flatten-reference self: a model's floor is 3x the updates at which its own curve first flattened


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
            save = self.out / "checkpoints" / m["name"]
            restore = restore_file(save) or self.shipped_start(m)
            last = save / "checkpoint_last.pt"
            cmd = train_command(m, counted_from(self.args, restore or (last if last.exists() else None)), self.gpu)
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
