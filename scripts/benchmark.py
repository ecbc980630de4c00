#!/usr/bin/env python
"""Side-by-side decoding benchmark (docs/METHODS.md §4): every method, one process, one test set.

Each *row* of a rows file (JSON list; ``--rows`` takes several files, concatenated in order) is a
decoding configuration written as fairseq-generate arguments, so the benchmark measures exactly
what a user runs::

    {"method": "fairseq greedy", "model": "baseline", "args": "--task fast_translation --beam-search fairseq",
     "beams": [1], "baseline": true}
    {"method": "Jacobi HGJ b=3", "model": "baseline",
     "args": "--task fast_translation --drafter jacobi_hgj --block-size 3", "lossless": true}
    {"method": "CTranslate2 greedy", "model": "baseline", "backend": "ctranslate2"}
    {"method": "CTranslate2 greedy int8", "model": "baseline", "backend": "ctranslate2", "compute_type": "int8"}

``model`` names ``<checkpoints>/<model>/checkpoint_best.pt`` (or give ``path``; ``"models": [A, B]`` makes
the row once per model, named ``"A: <method>"`` and timed in model A's own group: configs/benchmark/gec.json's
tiny and base verifiers; ``"compute_type"``: a CTranslate2 row's, e.g. ``"int8"``); ``corpus`` replaces
the corpus for a row with another corpus of the same data root (e.g. ``"corpus": "pt_PT-pt_BR"``).
In ``args``, ``{CKPT}`` stands for the checkpoints root and ``{DATA}`` for the data root (a GAD row's
``--drafter-path {CKPT}/gad_drafter/checkpoint_best.pt``; ``--skip-missing`` skips it while untrained).
Optional: ``family`` (the plot's marker: anchors, orders, draft-and-verify, non-autoregressive;
default from the row, see :func:`family_of`), ``"vs_beam5": true`` (the row must get
``ratio_vs_beam5``: an error when no fairseq beam-5 baseline row runs), ``group`` (rows are timed
against the baseline of their own group on the same corpus, beam and batch size: orders.json's rows
against L2R-KD beside reference.json's against fairseq's greedy on the baseline).
``"lossless": true`` rows are compared with the baseline row of their own checkpoint at the same
beam (greedy for the drafters; fairseq's beam k for the lean beam search), or of ``"greedy_model"``
(frozen blockwise heads must reproduce their base model's greedy output).
``"control": true`` marks a second engine greedy row (``--drafter none``, lossless) that is timed
beside the first as a drafting row is: its ``ratio_vs_engine_greedy`` is the harness's own spread
(an A/A pair: two loaded copies of the same decode), the yardstick for reading the drafting rows'.
A control further than 5% from x1.00 is flagged "timing unreliable on this run" in the log, under
results.md's table and after the printed table (``bench_rows.unreliable_timing``).

For every row x beam x batch size the harness loads the model once (loading is never timed),
decodes the whole test set once for BLEU (sacreBLEU on detokenised output, against the raw
reference file; ``bleu_bp`` / ``bleu_ratio`` are its brevity penalty and hypothesis/reference
length ratio, so early stopping shows) and the identical-to-greedy fraction, then times a warm-up
and ``--runs`` passes over the sentences with id < ``--timed-sentences`` (the split is in hash
order: a random sample of every length), batched in fairseq-generate's length-sorted order.

Speed, interleaved: baseline rows run first and stay loaded.  Every other row is timed in one loop
with its *reference* -- the baseline row of the same corpus, batch size and beam (else beam 1) --
alternating which of the two goes first (row, ref | ref, row | row, ref ...), after a warm-up of
both, so that a job on another core that comes or goes slows both alike and a steady drift
cancels.  ``speed_ratio`` = geometric mean over the ``runs`` pairs of (reference time / row time)
(``speed_ratio_range``: min and max over the pairs; geometric so that ratios invert and chain
exactly).  ``ratio_vs_greedy`` is the ratio vs fairseq greedy of the same corpus and batch size:
measured for rows whose reference is greedy; for a row timed against a beam-k baseline it is
``speed_ratio`` times that baseline's own ``ratio_vs_greedy`` (itself timed interleaved with
greedy).  Derived from those interleaved pairs: ``ratio_vs_ct2`` = ratio_vs_greedy / the
CTranslate2 greedy row's ratio_vs_greedy (same corpus and batch size), ``ratio_vs_beam5`` =
ratio_vs_greedy / the fairseq beam-5 baseline's (for every beam-1 row when such a baseline runs,
and for rows that ask with ``vs_beam5``).  ``seconds`` is the mean time of one timed pass of the
row (``seconds_min`` its minimum), ``tokens_per_s`` counts generated target tokens including EOS
(fairseq-generate's count, ``timed_tokens``: those of the first timed pass).

Counts: ``model_calls`` (decoder invocations: the generator's own count where it keeps one, else a
forward hook on the decoder's first layer) and ``mean_accepted`` (tokens appended per row per
draft-verify iteration) are counted at *each* batch size over the timed sentences (the first timed
pass; ``counts_sentences`` says how many); ``model_calls_all`` / ``mean_accepted_all`` cover every
sentence in the quality pass (at ``bleu_batch_size``).  ``calls_per_token`` = ``model_calls`` /
``timed_tokens``, both of that first timed pass: the hardware-independent cost beside every time
ratio (fairseq's greedy and the engine's greedy: exactly 1.0 at batch 1; a drafter that pays in
accepted tokens: below 1; a PJ/PGJ length oracle's calls counted in, a GAD drafter's own calls
not: the engine counts its verifier's).  At batch size B one call serves B rows, so compare it with
the greedy rows of the same batch size (their value there is about 1/B).  None for CTranslate2
rows (no call count).  What the width policy chose, over the same pass: ``draft_width`` (draft slots a
row sent in the calls that verified a draft) and ``drafted_share`` (the share of row-calls that
verified one); None where no drafter runs (fairseq's rows, CTranslate2's).  A ``--drafter auto`` row carries ``drafter_choice``: the engine's summary of
which drafter it kept and why, as of its first timed pass (also listed under results.md's table).

Memory: ``peak_mem_mb`` = the row's weights (parameters and buffers of every model it holds, a
drafter's included) + the peak of tensor memory allocated above the level before the decode, over
the ``MEMORY_BATCHES`` timed batches with the longest sources, in an extra untimed pass: on CUDA
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; on CPU the running sum of
the CPU allocator's events recorded by ``torch.profiler`` (``profile_memory``), in time order.
``mem_vs_greedy`` = peak_mem_mb minus fairseq greedy's (MB, same corpus and batch size).  None for
CTranslate2 rows (their memory is not torch's).

``--jobs N`` runs the rows in N processes side by side, one per CPU core (``--threads`` each, by
default the cores shared out; refused on a GPU, where they would share the device): rows that are
timed against or compared with each other -- a corpus and group's baselines and every row of that
group, a checkpoint's rows -- stay in one process, so every ratio is still a pair timed interleaved
in one process, while a job on the other core slows both passes of a pair alike.  The results and
files are those of one process; each row records ``jobs``.

Writes ``results.jsonl``, ``results.md`` and ``speed_vs_bleu.png`` into ``--out``, each whole or not at all
(a temporary file renamed over the earlier one).  ``--out`` is checked writable before any decoding and
is one run's at a time (``--out/.lock`` holds the running benchmark's pid: a second run into it is
refused, naming that pid).  SIGINT or SIGTERM stops every ``--jobs`` process with the command.
"""
import argparse

from scripts.lab.evaluation.bench_harness import RUNS, default_device
from scripts.lab.evaluation.bench_run import benchmark


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", required=True, nargs="+",
                    help="JSON lists of rows (see configs/benchmark/), concatenated in order")
    ap.add_argument("--data", required=True, help="corpus folder (with bin/ and raw test files)")
    ap.add_argument("--checkpoints", default="checkpoints", help="folder of <model>/checkpoint_best.pt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--runs", type=int, default=RUNS, help="timed passes per row (each paired with one of its reference)")
    ap.add_argument("--timed-sentences", type=int, default=0, help="time only the sentences with id < N, a random sample (0: all)")
    ap.add_argument("--only", nargs="*", help="run only rows whose method contains one of these strings")
    ap.add_argument("--quality-batch-size", type=int, default=None,
                    help="compute BLEU once per row at this batch size, one of --batch-sizes (default: at every one)")
    ap.add_argument("--skip-missing", action="store_true",
                    help="skip rows whose checkpoint (or drafter's) is not there, naming them under the table")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass (peak_mem_mb = null)")
    ap.add_argument("--save-hypotheses", action="store_true",
                    help="write each row x beam's translations of the quality pass to OUT/hypotheses/ (orders_report)")
    ap.add_argument("--device", default=default_device())
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch and CTranslate2 threads per process (default: torch's; with --jobs, the cores shared out)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes side by side, one per CPU core (rows timed against each other stay in one)")
    ap.add_argument("--max-len-a", type=float, default=1.2, help="every row: output length <= a*src_len + b")
    ap.add_argument("--max-len-b", type=int, default=10)
    args = ap.parse_args(argv)
    benchmark(args)


if __name__ == "__main__":
    main()
