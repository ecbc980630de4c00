"""The plan of a paper table's reproduction (``scripts/pipelines/table.py``): from a table of
:mod:`.paper_tables` and the driver's options, the steps in order -- prepare the corpora, distil,
train with the paper's batch (``configs/papers`` .args files, rescaled to the GPUs at hand),
average, decode every section with the benchmark, write the table -- each with its command, the
file that marks it done and, when it cannot run here, why (a licensed corpus, a method the plugin
does not register).  Running the steps is the driver's."""
import hashlib
import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

from scripts.lab.evaluation import paper_tables as T

REPO = Path(__file__).resolve().parents[3]

PY = sys.executable


class TableError(SystemExit):
    def __init__(self, message):
        super().__init__(f"error: {message}")


@dataclass
class Step:
    kind: str                      # prepare | view | distill | train | average | decode | table
    what: str
    argv: List[str] = field(default_factory=list)
    done: Optional[Path] = None    # the step is finished when this exists
    skip: Optional[str] = None     # why the step cannot run (a licensed corpus, an unregistered method...)
    run: Optional[Callable] = None  # in-process steps (symbolic link, rows file, the table)
    log: Optional[Path] = None
    mark: bool = False             # write ``done`` when the command succeeds
    details: List[str] = field(default_factory=list)  # printed under the step (a section's rows)
    corpus_key: Optional[str] = None  # training steps: the corpus whose size fills {WARMUP_5_EPOCHS}


# ----------------------------------------------------------------------------------------------
# what is available in this plugin
# ----------------------------------------------------------------------------------------------


def missing_registrations(requires):
    """The entries of ``requires`` ("arch:X", "task:X", "criterion:X") that the plugin does not register."""
    if not requires:
        return []
    import fairseq_plugins  # noqa: F401  (registers the plugin's tasks, models, criterions)
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    registries = {"arch": ARCH_MODEL_REGISTRY, "task": TASK_REGISTRY, "criterion": CRITERION_REGISTRY}
    return [r for r in requires if r.split(":", 1)[1] not in registries[r.split(":", 1)[0]]]


def registration_skip(requires):
    """Why a model or row that needs ``requires`` cannot run here, or None."""
    missing = missing_registrations(requires)
    return f"not built in this plugin yet ({', '.join(missing)} not registered)" if missing else None


# ----------------------------------------------------------------------------------------------
# configs: placeholders, directives, batch scaling
# ----------------------------------------------------------------------------------------------


def read_config(path):
    """(fairseq-train arguments, directives) of a configs/papers .args file."""
    path = REPO / path
    if not path.exists():
        raise TableError(f"config {path} not found")
    directives, words = {}, []
    for line in path.read_text().splitlines():
        if line.startswith("#@"):
            key, _, value = line[2:].strip().partition(" ")
            directives[key] = value.strip()
            continue
        words += shlex.split(line.split("#", 1)[0])
    return words, directives


def arg_value(words, flag, default=None):
    value = default
    for i, w in enumerate(words[:-1]):
        if w == flag:
            value = words[i + 1]
    return value


def batch_scaling(words, directives, gpus, max_tokens):
    """The config's words without its ``--max-tokens``/``--update-freq``, plus the values that make
    GPUs x max-tokens x update-freq the paper's tokens per update (``#@ gpus`` x the config's
    max-tokens x update-freq): update-freq first, then fewer tokens per GPU when even update-freq 1
    is too many.  ``max_tokens`` (the driver's --max-tokens) fixes the tokens per GPU.
    Returns (words, note): the note says when the paper's batch cannot be matched."""
    paper_gpus = int(directives.get("gpus", 1))
    cfg_tokens = int(arg_value(words, "--max-tokens", 4096))
    cfg_freq = int(arg_value(words, "--update-freq", 1))
    target = paper_gpus * cfg_tokens * cfg_freq
    tokens = max_tokens or cfg_tokens
    freq = max(1, round(target / (gpus * tokens)))
    if not max_tokens:
        tokens = min(cfg_tokens, round(target / (gpus * freq)))
    kept, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in ("--max-tokens", "--update-freq"):
            skip = True
        else:
            kept.append(w)
    note = None
    if gpus * tokens * freq != target:
        note = (f"{gpus} GPU(s) x {tokens} tokens x {freq} = {gpus * tokens * freq:,} tokens per update "
                f"(paper: {paper_gpus} x {cfg_tokens} x {cfg_freq} = {target:,})")
    return kept + ["--max-tokens", str(tokens), "--update-freq", str(freq)], note


def train_sentences(bin_dir):
    """Number of training pairs of a binarized corpus (fairseq's index file)."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    idx = sorted(Path(bin_dir).glob("train.*-*.*.idx"))
    if not idx:
        return None
    return len(MMapIndexedDataset(str(idx[0])[: -len(".idx")]))


# ----------------------------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------------------------


class Planner:
    def __init__(self, table, opts):
        self.t, self.o = table, opts
        self.root = Path(opts.root)
        self.data = Path(opts.data_root or self.root / "data")
        self.raw = Path(opts.raw_dir or self.root / "raw")
        self.work = Path(opts.work or self.root / table.key)
        self.ckpt = self.work / "checkpoints"
        self.steps: List[Step] = []
        self.skipped_corpora, self.skipped_models, self.skipped_rows = {}, {}, {}

    # ---- selection ----
    def selected(self):
        secs = [s for s in self.t.sections if not self.o.sections or s.key in self.o.sections]
        unknown = set(self.o.sections or ()) - {s.key for s in self.t.sections}
        if unknown:
            raise TableError(f"--sections {' '.join(sorted(unknown))}: not in table {self.t.key} "
                             f"(it has {', '.join(s.key for s in self.t.sections)})")
        keys = {s.key for s in secs}
        rows = [r for r in self.t.rows if r.section in keys
                and (not self.o.only or r.reference or any(x in r.method for x in self.o.only))]
        wanted, stack = [], [m for r in rows for m in (r.model, *r.uses)]
        while stack:
            name = stack.pop()
            if name in wanted:
                continue
            wanted.append(name)
            m = self.t.model(name)
            stack += list(m.needs) + ([m.distill_from] if m.distill_from else [])
        models = [m for m in self.t.models if m.name in wanted]  # table order = dependency order
        corpora = {m.corpus for m in models} | {s.corpus for s in secs}
        corpora |= {self.t.corpora[c].view_of for c in list(corpora) if self.t.corpora[c].view_of}
        return secs, rows, models, [c for k, c in self.t.corpora.items() if k in corpora]

    # ---- paths ----
    def corpus_dir(self, key):
        return self.data / self.t.corpora[key].folder

    def kd_dir(self, model):
        return self.work / "kd" / f"{self.t.corpora[model.corpus].folder}_{model.distill_from}"

    def final(self, name):
        return self.ckpt / name / "checkpoint_final.pt"

    def fill(self, text, corpus_key=None, estimate=False):
        text = text.replace("{CKPT}", str(self.ckpt)).replace("{DATA}", str(self.data))
        if "{WARMUP_5_EPOCHS}" in text:
            text = text.replace("{WARMUP_5_EPOCHS}", str(self.warmup_5_epochs(corpus_key, estimate)))
        return text

    def warmup_5_epochs(self, corpus_key, estimate):
        """Imamura & Sumita Table 1: five epochs of ~500-sentence batches."""
        n = None if estimate else train_sentences(self.corpus_dir(corpus_key) / "bin")
        if n is None:
            n = self.t.corpora[corpus_key].paper_train_sentences
        return 5 * math.ceil(n / 500)

    # ---- steps ----
    def build(self):
        secs, rows, models, corpora = self.selected()
        for c in corpora:
            self.plan_corpus(c)
        for m in models:
            self.plan_model(m)
        for s in secs:
            self.plan_section(s, [r for r in rows if r.section == s.key])
        self.steps.append(Step("table", f"write {self.work / 'table.md'}", run=lambda: self.write_table(secs, rows)))
        return self.steps

    def plan_corpus(self, c):
        out = self.corpus_dir(c.key)
        if c.view_of:
            main = self.corpus_dir(c.view_of)
            self.steps.append(Step("view", f"corpus {c.key}: view of {c.view_of}",
                                   [PY, str(REPO / "scripts" / "pipelines" / "corpus_prep.py"), "view", str(main),
                                    str(out), *c.view_args],
                                   done=out / "DONE"))
            return
        skip = None
        if c.needs_aspec and not self.o.aspec_dir:
            skip = "ASPEC is licensed: pass --aspec-dir to your copy of ASPEC-JE"
        aspec = self.o.aspec_dir or "<ASPEC-DIR>"
        argv = [PY, str(REPO / c.prepare[0])] + [a.replace("{RAW}", str(self.raw)).replace("{ASPEC}", str(aspec))
                                                 for a in c.prepare[1:]]
        argv += ["--out", str(out), "--workers", str(self.o.workers)]
        if self.o.offline and not c.needs_aspec:
            argv.append("--offline")
        self.steps.append(Step("prepare", f"corpus {c.key}", argv, done=out / "DONE", skip=skip))
        if skip:
            self.skipped_corpora[c.key] = skip

    def model_skip(self, m):
        corpus_skip = self.skipped_corpora.get(m.corpus) or self.skipped_corpora.get(self.t.corpora[m.corpus].view_of)
        if corpus_skip:
            return corpus_skip
        unregistered = registration_skip(m.requires)
        if unregistered:
            return unregistered
        for dep in list(m.needs) + ([m.distill_from] if m.distill_from else []):
            if dep in self.skipped_models:
                return f"needs {dep}, skipped"
        return None

    def plan_model(self, m):
        skip = self.model_skip(m)
        if skip:
            self.skipped_models[m.name] = skip
        save = self.ckpt / m.name
        if m.distill_from:
            kd = self.kd_dir(m)
            if not any(s.kind == "distill" and s.done == kd / "DONE" for s in self.steps):
                self.steps.append(Step(
                    "distill", f"distil {m.corpus} with {m.distill_from} (beam {m.distill_beam})",
                    [PY, str(REPO / "scripts" / "distill.py"), "--data", str(self.corpus_dir(m.corpus)),
                     "--path", str(self.final(m.distill_from)), "--out", str(kd), "--beam", str(m.distill_beam)]
                    + (["--batch-size", str(self.o.distill_batch_size)] if self.o.distill_batch_size else []),
                    done=kd / "DONE", skip=skip, mark=True))
            data_bin = kd / "bin"
        else:
            data_bin = self.corpus_dir(m.corpus) / "bin"
        words, directives = read_config(m.config)
        words, note = batch_scaling(words, directives, self.o.gpus, self.o.max_tokens)
        device = ["--cpu"] if self.o.device == "cpu" else ([] if self.o.no_fp16 else ["--fp16"])
        argv = ([PY, "-m", "fairseq_cli.train", str(data_bin), "--user-dir", str(REPO / "fairseq_plugins")] + words
                + shlex.split(self.t.corpora[m.corpus].share) + shlex.split(m.args) + device
                + ["--seed", str(m.seed), "--save-dir", str(save), "--log-format", "simple", "--log-interval", "100"]
                + shlex.split(self.o.train_extra or ""))
        what = f"train {m.name} ({m.config}{', on distilled data' if m.distill_from else ''})"
        if note:
            what += f"; {note}"
        self.steps.append(Step("train", what, argv, done=save / "DONE", skip=skip, log=save / "train.log", mark=True,
                               corpus_key=m.corpus))
        # the model the paper evaluates: an average of checkpoints, or the last one
        final = self.final(m.name)
        if m.average:
            how, n = m.average
            n = self.o.average_count or n
            flag = {"last": "--num-update-checkpoints", "best": "--best"}[how]
            self.steps.append(Step("average", f"average {m.name} ({how} {n})",
                                   [PY, str(REPO / "scripts" / "average_checkpoints.py"), "--inputs", str(save),
                                    flag, str(n), "--output", str(final)], done=final, skip=skip))
        else:
            self.steps.append(Step("average", f"{m.name}: the last checkpoint (the paper averages none)",
                                   ["ln", "-sfn", "checkpoint_last.pt", str(final)], done=final, skip=skip))
        if self.o.prune_checkpoints:
            self.steps.append(Step("average", f"prune {m.name}'s intermediate checkpoints",
                                   ["find", str(save), "-name", "checkpoint[._]*[0-9]*.pt", "-delete"],
                                   done=save / "PRUNED", skip=skip, mark=True))

    def row_skip(self, r):
        for name in (r.model, *r.uses):
            if name in self.skipped_models:
                return f"{name}: {self.skipped_models[name]}"
        return registration_skip(r.requires)

    def plan_section(self, s, rows):
        out = self.work / "results" / s.key
        bench_rows, details = [], []
        for r in rows:
            skip = self.row_skip(r)
            if skip:
                self.skipped_rows[(s.key, r.method, r.beam)] = skip
                details.append(f"- {r.method} | beam {r.beam} | SKIPPED: {skip} | would decode: {self.fill(r.args)}")
                continue
            details.append(f"+ {r.method} | beam {r.beam} | model {r.model} | {self.fill(r.args)}")
            row = {"method": r.method, "model": r.model, "path": str(self.final(r.model)),
                   "args": self.fill(r.args), "beams": [r.beam]}
            if r.baseline:
                row["baseline"] = True
            if r.lossless:
                row["lossless"] = True
            bench_rows.append(row)
        if not bench_rows:
            self.steps.append(Step("decode", f"decode section {s.key}", skip="no row of this section can run",
                                   details=details))
            return
        text = json.dumps(bench_rows, indent=1, ensure_ascii=False)
        digest = hashlib.sha1((text + repr(self.decode_settings(s))).encode()).hexdigest()[:10]
        rows_file = out / "rows.json"

        def write_rows(path=rows_file, text=text):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")

        self.steps.append(Step("decode", f"rows of section {s.key} ({len(bench_rows)} of {len(rows)})",
                               ["write", str(rows_file)], run=write_rows, done=None, details=details))
        argv = [PY, str(REPO / "scripts" / "benchmark.py"), "--rows", str(rows_file),
                "--data", str(self.corpus_dir(s.corpus)), "--checkpoints", str(self.ckpt), "--out", str(out)]
        argv += self.decode_settings(s)
        self.steps.append(Step("decode", f"decode section {s.key}: {s.title}", argv, done=out / f"DONE-{digest}",
                               mark=True, log=out / "benchmark.log"))

    def decode_settings(self, s):
        argv = ["--batch-sizes", str(s.batch_size), "--quality-batch-size", str(s.batch_size),
                "--runs", str(self.o.runs or self.t.runs), "--timed-sentences", str(self.o.timed_sentences),
                "--device", self.o.device]
        if self.o.device != "cpu" and not self.o.no_fp16:
            argv.append("--fp16")
        return argv

    # ---- the table ----
    def write_table(self, secs, rows):
        text = T.render_table(self.t, secs, rows, self.work / "results", self.skipped_rows)
        path = self.work / "table.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(text)
        return path
