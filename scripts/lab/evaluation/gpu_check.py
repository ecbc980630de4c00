"""Check an installation on a GPU in a few minutes: ``bash scripts/gpu_check.sh`` (which runs this
through pytest, so the cached tiny test corpus and model are built if missing), or directly::

    python -m scripts.gpu_check --data DATA_BIN --path CHECKPOINT [--blockwise-path BW.pt] [--drafter-path NAR.pt]

It prints

1. the device and the torch build;
2. the share of sentences identical to fairseq's own greedy (``SequenceGenerator``, beam 1, same
   model and dtype) of every lossless generator (the engine's greedy, Jacobi PJ/PGJ/HGJ, IAD's
   input copy; blockwise and GAD when their checkpoints are given), in fp32 and fp16;
3. the engine's greedy against fairseq's greedy, sentences per second at batch 1 and 32 (fp16);
4. every lossless drafter against the engine's greedy (speed ratio at batch 1, fp16);
5. the lean beam search at beam 5: its share identical to fairseq's beam 5 (2.) and its speed
   against fairseq's beam 5 at batch 1 and 32 (3.).

``--device cpu`` is a dry run of the same code on a CPU (fp32 only unless ``--fp16``), for CI.
In fp16 the shares are measured, not assumed to be 1.0 (another summation order flips near-ties).
"""
import argparse
import time
from argparse import Namespace

import torch

import fairseq_plugins  # noqa: F401  (compat repairs + registration)
from fairseq_plugins.decoding.drafters import DRAFTERS as REGISTERED
from fairseq_plugins.decoding.drafters.auto import AutoDrafter
from scripts.lab.evaluation.generation import Generation

DRAFTERS = tuple(n for n in REGISTERED.names if not issubclass(REGISTERED[n], AutoDrafter))  # auto: one of these
MAX_LEN = dict(max_len_a=1.2, max_len_b=10)
LEAN_BEAM = 5  # the lean beam search's rows: against fairseq's beam of this width


def device_lines(device):
    import fairseq

    lines = [f"torch {torch.__version__} (CUDA build {torch.version.cuda or 'none'}), fairseq {fairseq.__version__}"]
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        lines.append(f"device: {torch.cuda.get_device_name(device)} (compute capability {cap[0]}.{cap[1]}), "
                     f"arch list {' '.join(torch.cuda.get_arch_list())}")
    else:
        lines.append(f"device: {device} (dry run: no GPU timings mean anything here)")
    return lines


def load(data, path, device, half):
    loaded = Generation.from_checkpoint(path, data, device=device.type, fp16=half)
    return loaded.models, loaded.task


def batches(task, size, limit, device):
    from fairseq import utils

    task.load_dataset("test")
    ds = task.dataset("test")
    ids = list(range(min(limit, len(ds))))
    return [utils.move_to_cuda(ds.collater([ds[i] for i in ids[s : s + size]]), device=device)
            if device.type == "cuda" else ds.collater([ds[i] for i in ids[s : s + size]])
            for s in range(0, len(ids), size)]


def generator(task, models, drafter, drafter_path=None, beam=1, beam_search="fairseq"):
    """What fairseq-generate builds: fairseq's own greedy/beam (``drafter=None``), the lean beam search
    (``beam_search="lean"``) or the engine."""
    cfg = task.cfg
    cfg.drafter, cfg.acceptance, cfg.block_size, cfg.drafter_path = drafter, "exact", None, drafter_path
    cfg.beam_search = beam_search
    return task.build_generator(models, Namespace(beam=beam, min_len=1, unkpen=0.0, lenpen=1.0, unnormalized=False,
                                                  temperature=1.0, **MAX_LEN))


def decode(gen, models, data, device):
    """({sentence id: token list}, seconds)."""
    out = {}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        sync()
        start = time.perf_counter()
        for sample in data:
            hyps = gen.generate(models, sample)
            for i, sid in enumerate(sample["id"].tolist()):
                out[sid] = hyps[i][0]["tokens"].tolist()
        sync()
    return out, time.perf_counter() - start


def drafters_available(args):
    return [d for d in DRAFTERS if (d != "blockwise" or args.blockwise_path) and (d != "nar" or args.drafter_path)]


def match_rates(args, device, half):
    """[(generator, share identical to fairseq's greedy)] in one dtype."""
    models, task = load(args.data, args.path, device, half)
    data = batches(task, 16, args.sentences, device)
    ref, _ = decode(generator(task, models, None), models, data, device)
    rows = []
    for d in drafters_available(args):
        use = models
        if d == "blockwise":
            use, _ = load(args.data, args.blockwise_path, device, half)
        got, _ = decode(generator(task, use, d, args.drafter_path if d == "nar" else None), use, data, device)
        rows.append((d, sum(got[k] == ref[k] for k in ref) / len(ref)))
    ref, _ = decode(generator(task, models, None, beam=LEAN_BEAM), models, data, device)
    got, _ = decode(generator(task, models, None, beam=LEAN_BEAM, beam_search="lean"), models, data, device)
    rows.append((f"lean beam {LEAN_BEAM} (vs fairseq's beam {LEAN_BEAM})", sum(got[k] == ref[k] for k in ref) / len(ref)))
    return rows


def speeds(args, device, half):
    """[(what, batch size, sentences/s, ratio)]: the engine's greedy vs fairseq's, drafters vs the engine."""
    models, task = load(args.data, args.path, device, half)
    rows = []
    for bs in (1, 32):
        data = batches(task, bs, args.sentences, device)
        n = sum(len(b["id"]) for b in data)
        decode(generator(task, models, "none"), models, data[:2], device)  # warm (kernels, caches)
        _, fair = decode(generator(task, models, None), models, data, device)
        _, eng = decode(generator(task, models, "none"), models, data, device)
        rows.append(("fairseq greedy", bs, n / fair, 1.0))
        rows.append(("engine greedy (--drafter none)", bs, n / eng, fair / eng))
        fair_beam, lean_beam = (generator(task, models, None, beam=LEAN_BEAM, beam_search=s) for s in ("fairseq", "lean"))
        decode(lean_beam, models, data[:2], device)
        _, fb = decode(fair_beam, models, data, device)
        _, lb = decode(lean_beam, models, data, device)
        rows.append((f"lean beam {LEAN_BEAM} vs fairseq's beam {LEAN_BEAM}", bs, n / lb, fb / lb))
        if bs != 1:
            continue
        for d in drafters_available(args):
            if d == "none":
                continue
            use = load(args.data, args.blockwise_path, device, half)[0] if d == "blockwise" else models
            gen = generator(task, use, d, args.drafter_path if d == "nar" else None)
            decode(gen, use, data[:2], device)
            _, t = decode(gen, use, data, device)
            rows.append((f"--drafter {d} vs the engine's greedy", bs, n / t, eng / t))
    return rows


def main(argv=None):
    from tabulate import tabulate

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="fairseq data-bin folder with a test split")
    p.add_argument("--path", required=True, help="a left-to-right fairseq transformer checkpoint")
    p.add_argument("--blockwise-path", help="a --arch blockwise_transformer checkpoint (adds --drafter blockwise)")
    p.add_argument("--drafter-path", help="a --task nar_drafter checkpoint (adds --drafter nar, GAD)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sentences", type=int, default=200, help="test sentences decoded per row")
    p.add_argument("--fp16", action="store_true", help="on --device cpu: also the fp16 rows (slow on a CPU)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch sees no CUDA GPU: run scripts/setup.sh on the GPU machine "
                "(it picks the CUDA build), or pass --device cpu for a dry run")
    torch.manual_seed(0)
    print("\n".join(device_lines(device)))
    dtypes = [("fp32", False)] + ([("fp16", True)] if device.type == "cuda" or args.fp16 else [])
    rates = {name: dict(match_rates(args, device, half)) for name, half in dtypes}
    table = [[d] + [f"{rates[name][d]:.1%}" for name, _ in dtypes] for d in rates["fp32"]]
    print("\nidentical to fairseq's greedy (same model, same dtype)")
    print(tabulate(table, headers=["--drafter"] + [name for name, _ in dtypes]))
    half = dtypes[-1][1]
    print(f"\nspeed ({dtypes[-1][0]}, {args.sentences} test sentences)")
    print(tabulate([[w, bs, f"{s:.1f}", f"{r:.2f}x"] for w, bs, s, r in speeds(args, device, half)],
                   headers=["", "batch", "sentences/s", "ratio"]))
    return rates


if __name__ == "__main__":
    main()
