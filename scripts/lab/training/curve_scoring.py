"""One model's learning curve scored incrementally (the ``--curve`` subprocess of a reference run): each
interval checkpoint its curve.json does not hold yet is decoded as every curve is and scored with
sacreBLEU, and the point is appended to curve.json at once."""
from pathlib import Path

from scripts.lab.evaluation import learning_curve, train_log
from scripts.lab.training.checkpoints import interval_checkpoints, readable
from scripts.lab.training.train_command import cuda_available

CURVE_GENERATE = "--task fast_translation --lenpen 0.6"  # every curve; a list line's generate= adds to it


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


def score_curve(args):
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
