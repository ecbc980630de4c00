"""What one engine iteration that verifies a draft costs against a plain step, by the call's width,
model size and batch size, on the device at hand (issue 48, "a cost probe"): whether drafting's
premise -- a call of width m costs far less than m plain steps -- holds here.

* width ``m``: the columns the verification call scores, the last token and ``m - 1`` draft slots;
  ``m = 1`` is the plain step, the engine with ``--drafter none``;
* the models: random weights at the sizes of ``SIZES`` (tiny: the demo's ``transformer_fast_tiny``;
  base: fairseq's ``transformer``; big: ``transformer_vaswani_wmt_en_de_big``), one dictionary
  shared by both sides (``drafter_cost.random_verifier``);
* the draft: :class:`FixedWidthDraft`, ``m - 1`` PAD slots in every row at every call, with
  ``--adaptive-block-size off``'s fixed width.  PAD is never accepted (the verifier gives it
  ``-inf``), so every iteration appends one token and every width takes the same iterations; the
  drafter's own cost is left out (its draft is made once per batch), and every column is projected
  onto the vocabulary (``needs_all_columns``, as for Jacobi: the call a draft accepted to its end
  costs, not a CPU's lazy projection stopped at the first rejection).  Every row stays at the same
  step, so the rows' bookkeeping is the aligned one; rows that accept different counts go per row;
* the sentences: ``steps`` tokens and EOS each (``--min-len`` = ``--max-len-b`` = ``steps``: random
  weights would end at random), from random sources of ``SOURCE_LENGTH`` tokens;
* the time: the engine's own iteration intervals, as it times them for its width policy
  (``iteration_intervals``: from one host synchronisation to the next, the scoring, acceptance and
  bookkeeping included; the process's CPU time on a CPU, the wall clock on a GPU; a batch's first
  call, which holds the encoder, is not timed), only those of the width asked for
  (``iterations`` counts them);
* the widths are timed interleaved: one pass of each per round, the order reversed every other
  round, after one pass each as a warm-up; ``ratio`` is the median over the rounds of the width's
  median interval over the plain step's of the same round, ``seconds`` the median interval.

On a CPU the probe runs fp32 with one thread, on a GPU fp16 (``device_setup``).

    python -m scripts.cost_probe [--sizes tiny base big] [--batches 1 8 32] [--widths 1 2 4 8 11]
        [--steps 30] [--repeats 5] [--device auto|cpu|cuda] [--out FILE.jsonl]
"""
import argparse
import json
import statistics
from typing import Dict, List, Sequence

import torch

from scripts.lab.corpora.files import AtomicWriter
from fairseq_plugins.decoding.drafters import BlockDrafter, Draft, DrafterCapabilities

#: size name -> (fairseq architecture, dictionary size)
SIZES = {"tiny": ("transformer_fast_tiny", 8000), "base": ("transformer", 8000),
         "big": ("transformer_vaswani_wmt_en_de_big", 32000)}
SOURCE_LENGTH = 20  # source tokens per sentence (EOS added)


class FixedWidthDraft(BlockDrafter):
    """``block`` PAD slots for every row at every call (see the module docstring): a verification
    call of ``block + 1`` columns whose draft is never accepted."""

    name = "fixed width (cost probe)"
    # every column projected: the cost of a call, not of a lazily cut one; the fixed width
    capabilities = DrafterCapabilities(adaptive_block=False, needs_all_columns=True)

    def begin(self, ctx):
        super().begin(ctx)
        bsz = ctx.src_tokens.size(0)
        self.draft = Draft(ctx.src_tokens.new_full((bsz, self.block), ctx.pad),
                           ctx.src_tokens.new_full((bsz,), self.block), width=self.block)

    def propose(self, out, n_gen, longest=None):
        return self.draft


class ProbeRunner:
    """One generator over one batch, as ``iteration_intervals`` wants a runner."""

    def __init__(self, generator, model, sample, device):
        self.generator, self.model, self.device = generator, model, device
        self.timed_batches = [sample]

    def decode(self, batches):
        for sample in batches:
            self.generator.generate([self.model], sample)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def device_setup(device: str):
    """``(torch.device, dtype name)``: cuda in fp16, or the CPU in fp32 with one thread."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no GPU; use --device cpu (or auto)")
    if device == "cpu":
        torch.set_num_threads(1)
    return torch.device(device), ("fp16" if device == "cuda" else "fp32")


def build_model(size: str, device: torch.device):
    """``(dictionary, model, description)`` at ``size`` on ``device`` (fp16 on a GPU)."""
    from scripts.lab.evaluation.drafter_cost import random_verifier

    arch, vocab = SIZES[size]
    d, model = random_verifier(vocab, arch)
    if device.type == "cuda":
        model = model.half().to(device)
    dec = model.decoder
    desc = dict(arch=arch, d=dec.embed_dim, ffn=dec.layers[0].fc1.out_features, layers=len(dec.layers),
                heads=dec.layers[0].self_attn.num_heads, vocab=len(d))
    return d, model, desc


def random_sample(d, batch: int, device: torch.device, seed: int = 0):
    """``batch`` random sources of ``SOURCE_LENGTH`` tokens and EOS, as fairseq's batches hold them."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (batch, SOURCE_LENGTH + 1), generator=g)
    src[:, -1] = d.eos()
    return {"id": torch.arange(batch), "net_input": {"src_tokens": src.to(device),
                                                      "src_lengths": torch.full((batch,), SOURCE_LENGTH + 1, device=device)}}


def engine(model, d, width: int, steps: int):
    """The engine at draft width ``width`` (1: ``--drafter none``), every sentence ``steps`` tokens and EOS."""
    from fairseq_plugins.decoding.acceptance import Exact
    from fairseq_plugins.decoding.drafters import NoDraft
    from fairseq_plugins.decoding.engine import DraftVerifyGenerator
    from fairseq_plugins.decoding.options import GenerationOptions

    drafter = NoDraft() if width == 1 else FixedWidthDraft(width - 1)
    options = GenerationOptions(max_len_a=0.0, max_len_b=steps, min_len=steps)
    return DraftVerifyGenerator([model], d, drafter, Exact(), options=options, adaptive_block_size="off")


def at_width(seen, width: int) -> List[float]:
    """The intervals of ``iteration_intervals`` whose call scored ``width`` columns (``width - 1`` draft
    slots; a drafter proposing or not: ``--drafter none`` is asked too, for an empty draft)."""
    return [t for (slots, _), times in seen.items() if slots == width - 1 for t in times]


def check_widths(widths: Sequence[int]):
    if 1 not in widths or min(widths) < 1:
        raise ValueError("--widths must be >= 1 and include 1: the plain step every ratio is taken to")


def probe(model, d, device, batch: int, widths: Sequence[int], steps: int, repeats: int) -> Dict[int, dict]:
    """Per width: ``seconds`` (median interval), ``ratio`` (to the plain step, interleaved rounds),
    ``ratio_range`` (the rounds' least and greatest) and ``iterations`` (intervals timed at the width)."""
    from scripts.lab.evaluation.iteration_intervals import iteration_intervals

    check_widths(widths)
    sample = random_sample(d, batch, device)
    runners = {w: ProbeRunner(engine(model, d, w, steps), model, sample, device) for w in widths}
    for runner in runners.values():  # the warm-up: kernels chosen and built, caches filled
        runner.decode(runner.timed_batches)
    times: Dict[int, List[float]] = {w: [] for w in widths}
    rounds: List[Dict[int, float]] = []
    for r in range(repeats):
        medians = {}
        for w in (widths if r % 2 == 0 else list(reversed(widths))):
            mine = at_width(iteration_intervals(runners[w], passes=1), w)
            if mine:
                times[w] += mine
                medians[w] = statistics.median(mine)
        rounds.append(medians)
    out = {}
    for w in widths:
        ratios = [m[w] / m[1] for m in rounds if w in m and 1 in m]
        out[w] = dict(seconds=statistics.median(times[w]) if times[w] else None,
                      ratio=statistics.median(ratios) if ratios else None,
                      ratio_range=[min(ratios), max(ratios)] if ratios else None, iterations=len(times[w]))
    return out


def markdown(records: List[dict]) -> str:
    """One size's records as a table: a row per batch size, the plain step's ms and every width's ratio to it."""
    r0 = records[0]
    head = (f"### {r0['size']}: {r0['arch']} (d={r0['d']}, ffn {r0['ffn']}, {r0['layers']}+{r0['layers']} layers, "
            f"{r0['heads']} heads, {r0['vocab']} vocabulary), {r0['device']} {r0['dtype']}\n\n")
    widths = sorted({r["width"] for r in records})
    cell = {(r["batch"], r["width"]): r for r in records}
    cols = ["batch", "plain step ms"] + [f"m={w}" for w in widths]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for batch in sorted({r["batch"] for r in records}):
        plain = cell[batch, 1]["median_seconds"]
        cells = [str(batch), "-" if plain is None else f"{plain * 1e3:.3f}"]
        cells += ["-" if cell[batch, w]["ratio"] is None else f"{cell[batch, w]['ratio']:.2f}x" for w in widths]
        lines.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8, 11],
                    help="columns a verification call scores (1: the plain step, which every ratio is taken to)")
    ap.add_argument("--steps", type=int, default=30, help="tokens every sentence decodes (then EOS)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds: one pass of every width each")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="auto: cuda (fp16) if torch sees a GPU, else the CPU (fp32, one thread)")
    ap.add_argument("--out", help="a JSONL file: one record per size, batch and width (rewritten after every size)")
    a = ap.parse_args(argv)
    widths = sorted(set(a.widths))
    if min(a.batches) < 1 or a.repeats < 1:
        ap.error("--batches and --repeats must be >= 1")
    if not 2 <= a.steps <= 900:
        ap.error("--steps must be between 2 and 900 (the models' 1,024 positions hold the draft too)")
    try:
        check_widths(widths)
        device, dtype = device_setup(a.device)
    except ValueError as err:
        ap.error(str(err))
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    torch.manual_seed(0)
    records = []
    for size in a.sizes:
        d, model, desc = build_model(size, device)
        results = {}
        with torch.inference_mode():
            for batch in a.batches:
                print(f"[cost probe] {size} batch {batch}", flush=True)
                results[batch] = probe(model, d, device, batch, widths, a.steps, a.repeats)
        mine = [dict(size=size, **desc, batch=batch, width=w, draft_slots=w - 1, median_seconds=r["seconds"],
                     ratio=r["ratio"], ratio_range=r["ratio_range"], iterations=r["iterations"], steps=a.steps,
                     repeats=a.repeats, source_length=SOURCE_LENGTH, device=device_name, dtype=dtype,
                     threads=torch.get_num_threads(), torch=torch.__version__)
                for batch, per_width in results.items() for w, r in per_width.items()]
        print("\n" + markdown(mine), flush=True)
        records += mine
        if a.out:  # after every size: a run stopped later keeps the sizes it finished
            with AtomicWriter(a.out) as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
        del model
    if a.out:
        print(f"cost probe: {a.out}")
