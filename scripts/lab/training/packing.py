"""A model of a reference run offered to ``--models-dir`` (the repository's models/): its converged
checkpoint, or a snapshot of an unconverged one before a machine goes away, with its validation and test
BLEU; packed if it is further along than the one there."""
from pathlib import Path

from scripts.lab.evaluation import learning_curve
from scripts.lab.evaluation.reference_models import ReferenceModels, better, evaluation_corpus
from scripts.lab.training.checkpoints import (checkpoint_max_update, checkpoint_updates, exported_checkpoint,
                                              snapshot_checkpoint)
from scripts.lab.training.curve_scoring import CURVE_GENERATE, score
from scripts.lab.training.model_list import max_update_of
from scripts.lab.training.train_command import cuda_available, portable_command, train_command

# a model packed before it finished: said so in the manifest, read long after the run that packed it ended
SNAPSHOT = " (a snapshot: a later run with --models-dir resumes its training from it)"


def check_max_update(m, checkpoint, updates, max_update):
    """The manifest's command and its "of at most N updates" come from this run's --max-update: a checkpoint past
    it trained under another (a pack with the default 8000 wrote gec_tiny's 12,000-update cap as 8000)."""
    if updates > max_update:
        trained = checkpoint_max_update(checkpoint) or updates
        raise SystemExit(f"error: {checkpoint} is at {updates} updates, past this run's --max-update {max_update}: run "
                         f"this with the training's own, --max-update {round(trained / m.get('update_scale', 1.0))}")


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
    check_max_update(m, checkpoint, updates, max_update)
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
