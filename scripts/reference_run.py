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
(``--stop-minutes``: fairseq's ``--stop-time-hours``, counted from the training time of the checkpoint each resumes from) still save their last checkpoint; re-running
the command resumes every unconverged training from its last checkpoint (the newest one torch can
load).  Stopping the command stops its trainings.

Outputs: ``OUT/<name>/train.log``, ``OUT/<name>/curve.json``, ``OUT/summary.json`` (merged with the
entries of models not named this time), ``OUT/curves.png``; with ``--export DIR`` the checkpoint of
every model at which it converged (else the best by validation loss; the last one for models trained
on a distilled corpus) without optimizer state, as ``DIR/<name>/checkpoint_best.pt`` (a folder the
benchmark reads).
"""
import argparse

from scripts.lab.evaluation import learning_curve
from scripts.lab.evaluation.reference_models import ROLES
from scripts.lab.training.model_list import REPO
from scripts.lab.training.orchestration import SELF
from scripts.lab.training.run import reference_run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=str(REPO / "configs/reference/orders.txt"))
    ap.add_argument("--data", help="data root holding the corpora named in the list (required except with --freeze)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--names", nargs="*", help="only these models of the list")
    ap.add_argument("--max-update", type=int, default=8000, help="stop a training that has not converged here")
    ap.add_argument("--stop-minutes", type=float, default=0, help="stop every training after this much more training time (counted from the checkpoint it resumes from)")
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
    return reference_run(args, ap.error)


if __name__ == "__main__":
    main()
