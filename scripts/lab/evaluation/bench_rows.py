"""The benchmark's rows (``scripts/benchmark.py``, ``configs/benchmark/*.json``): reading rows files,
a row's family, checkpoints and arguments, the (row, beam, batch size) plan and the checks that
refuse a bad plan before anything runs, and which rows are drafting or the engine's greedy."""
import json
import re
import shlex
from pathlib import Path

from scripts.lab.evaluation import EvaluationError as BenchmarkError  # bad input; the message says how to fix it

FAMILIES = ("anchors", "orders", "draft-and-verify", "non-autoregressive")  # a row's method family: the plot's marker


def per_model(row):
    """A row with ``"models": [A, B]`` is one row per model: method ``"A: <method>"``, timed in the group of
    its own model (the same rows at two sizes on one corpus, each against its own baselines)."""
    names = row.get("models")
    if names is None:
        return [row]
    if "model" in row or "path" in row or not isinstance(names, list) or not names:
        raise BenchmarkError(f"row '{row['method']}': 'models' is a non-empty list, given instead of 'model' / 'path'")
    out = []
    for name in names:
        one = {k: v for k, v in row.items() if k != "models"}
        group = f"{row['group']}/{name}" if "group" in row else name
        one.update(method=f"{name}: {row['method']}", model=name, group=group)
        out.append(one)
    return out


def load_rows(paths):
    """The rows of several files, concatenated in order.  A row repeated verbatim in a later file (a
    baseline every family's file carries) is kept once; another row under the same method is an error.
    A row for several models (``"models"``) is expanded first (:func:`per_model`)."""
    rows, seen = [], {}
    for path in map(Path, paths):
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise BenchmarkError(f"rows file {path} not found (see configs/benchmark/)") from None
        except json.JSONDecodeError as e:
            raise BenchmarkError(f"rows file {path} is not valid JSON: {e}") from None
        if not isinstance(data, list):
            raise BenchmarkError(f"rows file {path} must hold a JSON list of rows")
        for listed in data:
            if not isinstance(listed, dict) or "method" not in listed:
                raise BenchmarkError(f"{path}: every row needs a 'method' (got {listed!r})")
            for row in per_model(listed):
                _add_row(rows, seen, path, row)
    return rows


def _add_row(rows, seen, path, row):
    first = seen.get(row["method"])
    if first is not None:
        if first[1] == row:
            return
        raise BenchmarkError(f"method '{row['method']}' is defined differently in {first[0]} and {path}: "
                             "give one of them another name")
    seen[row["method"]] = (path, row)
    rows.append(row)


def flag(args, name):
    """The value of ``name`` in an argument list (``--x v`` or ``--x=v``; True without a value), else None."""
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def family_of(row):
    """The row's method family (the plot's marker): its ``family`` field, else from its backend/args."""
    family = row.get("family")
    if family is not None:
        if family not in FAMILIES:
            raise BenchmarkError(f"row '{row['method']}': unknown family '{family}' (choose from {', '.join(FAMILIES)})")
        return family
    if row.get("backend", "fairseq") == "ctranslate2":
        return "anchors"
    args = shlex.split(row.get("args", ""))
    if flag(args, "--task") == "translation_lev" or flag(args, "--acceptance") == "all":
        return "non-autoregressive"  # Mask-Predict; a drafter decoding alone (GAD's "NAR drafter" row)
    if flag(args, "--drafter") not in (None, "none"):
        return "draft-and-verify"
    if any(flag(args, f) is not None for f in ("--target-order", "--tokens-per-direction", "--directions", "--double-topk")):
        return "orders"
    return "anchors"  # fairseq's own greedy and beam, and the engine's greedy (--drafter none): no method on top


def expand_rows(rows, batch_sizes):
    for row in rows:
        for beam in row.get("beams", [1]):
            for bs in row.get("batch_sizes", batch_sizes):
                yield row, beam, bs


def checkpoint_path(row, checkpoints):
    return Path(row["path"]) if "path" in row else Path(checkpoints) / row["model"] / "checkpoint_best.pt"


def checkpoint_of(row, checkpoints):
    path = checkpoint_path(row, checkpoints)
    if not path.exists():
        raise BenchmarkError(
            f"row '{row['method']}': checkpoint {path} not found; train it first (scripts/train.sh "
            f"{row.get('model', '<config>')}) or fix 'model'/'path' in the rows file")
    return path


class CheckpointStamps:
    """Each checkpoint's size and modification time when a row first read it.  Rows compared with
    each other (lossless against greedy, timed interleaved) must decode the same weights, and a
    training that is still running rewrites its checkpoint_best.pt between two rows' loads."""

    def __init__(self):
        self.seen = {}

    def check(self, path):
        stat = Path(path).stat()
        stamp = (stat.st_size, stat.st_mtime_ns)
        if self.seen.setdefault(str(path), stamp) != stamp:
            raise BenchmarkError(
                f"checkpoint {path} changed while the benchmark ran (a training still saving it?): the rows "
                "would compare different weights; benchmark a copy (cp the checkpoints to another folder and "
                "point --checkpoints or the row's 'path' there), or wait until the training ends")


def row_args(row, checkpoints, data):
    """The row's fairseq-generate arguments with ``{CKPT}`` -> the checkpoints root and ``{DATA}`` ->
    the data root (the folder holding the corpus folders), e.g. ``--drafter-path {CKPT}/gad_drafter/...``."""
    return row.get("args", "").replace("{CKPT}", str(checkpoints)).replace("{DATA}", str(Path(data).parent))


def extra_checkpoints(args):
    """Checkpoints a row's arguments name besides ``--path`` (a drafter's)."""
    words = shlex.split(args)
    return [Path(words[i + 1]) for i, w in enumerate(words[:-1]) if w == "--drafter-path"]


def corpus_folder(row, data):
    # a row may decode another corpus of the same data root, e.g. "corpus": "pt_PT-pt_BR"
    return str(Path(data).parent / row["corpus"]) if "corpus" in row else str(data)


def group_of(row):
    """The row's reference group: rows are timed against the baseline of their own group (``"group"``, e.g.
    the orders against L2R-KD) on the same corpus, beam and batch size; default: the corpus's."""
    return row.get("group", "")


def checked_plan(rows, data, batch_sizes, runs, quality_batch_size, hypotheses=None):
    """The (row, beam, batch size) entries to run, the quality pass's batch size first; fails before
    anything runs."""
    if hypotheses is not None:
        names = {}
        for row in rows:
            other = names.setdefault(hypotheses_name(row["method"], 1), row["method"])
            if other != row["method"]:
                raise BenchmarkError(f"rows '{other}' and '{row['method']}' would save their translations to one "
                                     "file: rename one (the file name keeps only letters and digits)")
    if runs < 1:
        raise BenchmarkError(f"--runs must be at least 1 (got {runs})")
    if quality_batch_size is not None and quality_batch_size not in batch_sizes:
        raise BenchmarkError(f"--quality-batch-size {quality_batch_size} is not one of --batch-sizes "
                             f"{' '.join(map(str, batch_sizes))}: BLEU is computed in one of the timed passes; "
                             "add it to --batch-sizes or leave --quality-batch-size out")
    for row in rows:
        family_of(row)  # an unknown family
    plan = list(expand_rows(rows, sorted(batch_sizes, key=lambda b: b != quality_batch_size)))
    check_plan(plan, data)
    return plan


def check_plan(plan, data):
    """Fail before anything runs: one baseline per (corpus, batch size, beam, group); rows that ask for
    ratio_vs_beam5 have a fairseq beam-5 baseline on their corpus."""
    baselines = {}
    for row, beam, bs in plan:
        if row.get("baseline"):
            key = (corpus_folder(row, data), bs, beam, group_of(row))
            if key in baselines and baselines[key] != row["method"]:
                raise BenchmarkError(f"rows '{baselines[key]}' and '{row['method']}' are both baselines for "
                                     f"{Path(key[0]).name}, beam {beam}, batch {bs}: mark only one \"baseline\": true, "
                                     "or give one of them (and the rows timed against it) its own \"group\"")
            baselines[key] = row["method"]
    for row, beam, bs in plan:
        if row.get("control") and not (row.get("lossless") and drafter_of(row) == "none"):
            raise BenchmarkError(f"row '{row['method']}' is a control: it must be the engine's greedy "
                                 "(\"args\": \"... --drafter none\", \"lossless\": true)")
        if row.get("vs_beam5") and (corpus_folder(row, data), bs, 5, group_of(row)) not in baselines:
            raise BenchmarkError(f"row '{row['method']}' asks for ratio_vs_beam5 but no baseline row decodes "
                                 f"{Path(corpus_folder(row, data)).name} with beam 5 at batch {bs}: add 5 to the "
                                 "\"beams\" of the fairseq beam baseline row")


def hypotheses_name(method, beam):
    return re.sub(r"[^A-Za-z0-9]+", "_", method).strip("_") + f".beam{beam}.txt"


def drafter_of(row):
    return None if row.get("backend", "fairseq") != "fairseq" else flag(shlex.split(row.get("args", "")), "--drafter")


def is_engine_greedy(row):
    """The draft-and-verify engine without a drafter (``--drafter none``): the drafting rows' own greedy."""
    return drafter_of(row) == "none" and not row.get("baseline") and not row.get("control")


AA_TOLERANCE = 0.05  # an A/A control further than this from x1.00: the run's timings are not to be trusted


def is_control(result):
    """Whether a result row is an A/A control: the engine's greedy timed beside the engine's greedy.  Rows
    record it (``control``); older results files did not, and there it is the one ``--drafter none`` row
    with a ``ratio_vs_engine_greedy``."""
    if "control" in result:
        return bool(result["control"])
    return result.get("ratio_vs_engine_greedy") is not None and drafter_of({"args": result.get("config", "")}) == "none"


def unreliable_timing(results):
    """One line per A/A control whose ratio lies outside 1 +- :data:`AA_TOLERANCE`: two copies of the same
    decode read that far apart, so every ratio of the run carries that much noise."""
    return [f"timing unreliable on this run: the A/A control '{r['method']}' (batch {r['batch_size']}) reads "
            f"x{r['ratio_vs_engine_greedy']:.3f} against the same decode, outside +-{AA_TOLERANCE:.0%}; ratios within "
            "that of 1 say nothing (run again on an idle machine, or with more --runs)"
            for r in results if is_control(r) and r.get("ratio_vs_engine_greedy") is not None
            and abs(r["ratio_vs_engine_greedy"] - 1.0) > AA_TOLERANCE]


def is_drafting(row):
    """A lossless row with a drafter, or the A/A control: timed beside the engine's greedy too."""
    return bool(row.get("lossless")) and (drafter_of(row) not in (None, "none") or bool(row.get("control")))


def missing_checkpoints(row, checkpoints, data):
    """The checkpoints a row decodes with (its model's, a drafter's) that are not there yet."""
    return [p for p in [checkpoint_path(row, checkpoints)] + extra_checkpoints(row_args(row, checkpoints, data)) if not p.exists()]
