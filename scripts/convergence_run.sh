#!/usr/bin/env bash
# The convergence run of docs/RESULTS.md ("Convergence run") in one resumable command, for the
# background of a CPU machine (two trainings at a time, one thread each) or a GPU one:
#   bash scripts/convergence_run.sh RUNS [STAGE2_MAX_UPDATE]
# CONVERGENCE_PARALLEL=N trains N models at a time (default 2; 1 leaves a core free for other work).
# 1. the en-de and typo-correction corpora (skipped when built);
# 2. stage 1, gold corpora: the en-de L2R baseline and the typo verifier, side by side, each stopped
#    once its validation BLEU is flat (within 0.3 over the last two of >= 4 points) at 3x the updates
#    at which it first was (no reference: its own curve, since two flat points can be a pause);
# 3. the baseline's distilled corpus (beam 5; resumable by shards, skipped when distill.json exists);
# 4. stage 2, distilled corpus: every order, the L2R control, blockwise heads and the GAD drafters
#    (configs/reference/convergence_kd.txt), each order stopped at the issue's rule (>= 5 points, the
#    last at >= 3x the updates at which l2r_kd flattened), at most STAGE2_MAX_UPDATE (30000) updates;
# 5. every model without optimizer state in RUNS/ref/export (the benchmark's --checkpoints).
# Run it again after an interruption: each step resumes where it stopped.  Logs: RUNS/ref/<name>/.
# The repository's models/ (MODELS_DIR) is read and written as it goes: a model converged there is not
# trained again, one that converges is packed there at once, and a model with no checkpoint in RUNS
# goes on from its snapshot there.  Before a machine goes away, snapshot what is training:
#   python -m scripts.reference_run --models configs/reference/convergence_gold.txt --data RUNS/data \
#       --out RUNS/ref --models-dir models --skip-training --snapshot   (and the same for convergence_kd.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 RUNS [STAGE2_MAX_UPDATE]" >&2; exit 2; }
mkdir -p "$1"
runs=$(cd "$1" && pwd) stage2_updates=${2:-30000} parallel=${CONVERGENCE_PARALLEL:-2} models=${MODELS_DIR:-$PWD/models}
py=python
[ -x .venv/bin/python ] && py=.venv/bin/python
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
data=$runs/data ref=$runs/ref

[ -f "$data/en-de/bin/dict.en.txt" ] || $py -m scripts.build_message_corpus --pair en-de --out "$data/en-de"
[ -f "$data/typo-en/bin/dict.typo.txt" ] || $py -m scripts.build_typo_corpus --out "$data/typo-en"

$py -m scripts.reference_run --models configs/reference/convergence_gold.txt --data "$data" --out "$ref" \
    --models-dir "$models" --max-update 12000 --interval 500 --parallel "$parallel" --min-points 4 --flatten-reference self

# the teacher and warm start: this run's baseline, else the converged one in models/
teacher=$ref/checkpoints/baseline/checkpoint_best.pt
if [ ! -f "$teacher" ] && [ -f "$models/baseline/checkpoint_best.pt" ]; then
  mkdir -p "$(dirname "$teacher")" && cp "$models/baseline/checkpoint_best.pt" "$teacher"
fi
[ -f "$data/en-de-distilled/distill.json" ] || $py -m scripts.distill --data "$data/en-de" \
    --path "$teacher" --out "$data/en-de-distilled" --beam 5 --batch-size 64

$py -m scripts.reference_run --models configs/reference/convergence_kd.txt --data "$data" --out "$ref" \
    --models-dir "$models" --max-update "$stage2_updates" --interval 500 --parallel "$parallel"

for list in convergence_gold convergence_kd; do
  $py -m scripts.reference_run --models "configs/reference/$list.txt" --data "$data" --out "$ref" \
      --skip-training --export "$ref/export"
done
