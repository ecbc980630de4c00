#!/usr/bin/env python
"""Estimated PMI of the tokens a multi-token decoder predicts independently (IBDecoder Appendix B).

    PMI(model) = log ppl(model) - log ppl(base)                                     (Eq. 13)

``model`` is a reordered/SA checkpoint (e.g. c=2), ``base`` the one-token-per-step model with the
same factorisation otherwise (Table 3: L2R SA vs the L2R transformer; IBDecoder vs the interleaved
order trained with ``--vanilla-mask``).  Perplexities are computed with fairseq's own loading,
dataset and batching (each checkpoint's task reorders the test targets the way it was trained)
as the exponent of the mean per-token NLL over every scored target slot -- what fairseq-validate
reports; EOS/EOD padding slots count, as they do in training.  Table 3 reports the difference in
log10 (log10(6.95/4.04) = 0.235, log10(4.72/4.86) = -0.013), so log10 is the default.

    python -m scripts.pmi DATA --model ckpt/sa/checkpoint_best.pt \
        --base ckpt/l2r/checkpoint_best.pt --subset test --cpu
"""
import argparse
import json
import math

import torch

from scripts.lab.evaluation.generation import Generation


def mean_nll(path, data, subset, max_tokens, cpu):
    """Mean per-token NLL (nats) of a checkpoint on a split, with its own task and order."""
    loaded = Generation.from_checkpoint(path, data, "cpu" if cpu or not torch.cuda.is_available() else "cuda")
    model, pad = loaded.models[0], loaded.tgt_dict.pad()
    total, count = 0.0, 0
    with torch.no_grad():
        for sample in loaded.batches(subset, max_tokens=max_tokens, skip_too_long=True):
            lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
            target = sample["target"]
            nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            keep = target.ne(pad)
            total += float(nll[keep].sum())
            count += int(keep.sum())
    return total / count, count


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="binarized data folder")
    ap.add_argument("--model", required=True, help="checkpoint predicting several tokens per step")
    ap.add_argument("--base", required=True, help="checkpoint of the autoregressive counterpart")
    ap.add_argument("--subset", default="test")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--log-base", type=float, default=10.0, help="10 as Table 3; e for nats")
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args(argv)
    result = {}
    for name, path in (("model", args.model), ("base", args.base)):
        nll, count = mean_nll(path, args.data, args.subset, args.max_tokens, args.cpu)
        result[name] = {"path": path, "ppl": math.exp(nll), "tokens": count}
    log = math.log(args.log_base)
    result["pmi"] = (math.log(result["model"]["ppl"]) - math.log(result["base"]["ppl"])) / log  # Eq. 13
    result["log_base"] = args.log_base
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
