"""A paper table's plan run (``python -m scripts.pipelines.table``): each step (:mod:`.paper_plan`) skipped with
its reason, printed (``--dry-run``), skipped when its result exists, or run with its output logged."""
import os
import shlex
import subprocess
import sys

from scripts.lab.evaluation.paper_plan import REPO, TableError


def show(argv):
    return " ".join(shlex.quote(a) for a in argv)



def run_command(argv, log=None):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if log is None:
        return subprocess.run(argv, env=env).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
        return proc.wait()



def execute(planner, steps, dry_run):
    n = len(steps)
    for i, step in enumerate(steps, 1):
        tag = f"[{planner.t.key} {i}/{n}] {step.kind}"
        for line in step.details:
            print(f"    {line}", flush=True)
        if step.skip:
            print(f"{tag}: SKIPPED {step.what}: {step.skip}" + (f"\n    # would run: {show(step.argv)}" if step.argv else ""),
                  flush=True)
            continue
        if dry_run:
            argv = [planner.fill(a, step.corpus_key, estimate=True) for a in step.argv]
            print(f"{tag}: {step.what}\n    {show(argv)}" if argv else f"{tag}: {step.what}", flush=True)
            continue
        if step.done is not None and step.done.exists():
            print(f"{tag}: done already: {step.what}", flush=True)
            continue
        if step.run is not None:
            print(f"{tag}: {step.what}", flush=True)
            step.run()
            continue
        argv = [planner.fill(a, step.corpus_key) for a in step.argv]
        print(f"{tag}: {step.what}\n    $ {show(argv)}", flush=True)
        rc = run_command(argv, step.log)
        if rc != 0:
            raise TableError(f"step {i} ({step.what}) failed with exit code {rc}"
                             + (f"; see {step.log}" if step.log else ""))
        if step.mark and step.done is not None:
            step.done.parent.mkdir(parents=True, exist_ok=True)
            step.done.write_text("ok\n")
