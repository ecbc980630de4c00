#!/usr/bin/env bash
# The convergence run of docs/RESULTS.md ("Convergence run") in one resumable command, for the
# background of a CPU machine (two trainings at a time, one thread each) or a GPU one:
#   bash scripts/convergence_run.sh RUNS [STAGE2_MAX_UPDATE]
# CONVERGENCE_PARALLEL=N trains N models at a time (default 2; 1 leaves a core free for other work), each with
# CONVERGENCE_THREADS threads (default 1; 2 where one model trains alone on 2 cores: about twice as fast).
# Orders first: the teacher pinned in configs/reference/teacher.txt (a baseline snapshot in this
# repository's history), or CONVERGENCE_TEACHER=CKPT, is frozen as the teacher, and stages 1 and 2 then
# run side by side, sharing the N training slots of RUNS/ref (a slot stage 1 frees goes to the next
# order at once), the drafters after the orders (they need the verifier, frozen when stage 1's baseline
# ends), then the GEC-like verifier, and last the comparisons that do not ship; a run that finds a frozen
# teacher does the same.  Without either, the teacher is stage 1's converged baseline.
# 1. the en-de and GEC-like corpora (skipped when built);
# 2. stage 1, gold corpora: the en-de L2R baseline and the GEC-like verifier, side by side, each stopped
#    once its validation BLEU is flat (within 0.3 over the last two of >= 4 points) at 3x the updates
#    at which it first was (no reference: its own curve, since two flat points can be a pause);
# 3. the baseline frozen as teacher (RUNS/ref/checkpoints/teacher/: the distillation's teacher, the orders'
#    warm start) and as verifier (verifier/: the drafters' and blockwise heads'), both the checkpoint
#    models/ ships, and the distilled corpus (beam 5; resumable by shards, skipped when distill.json
#    exists; shipped in models/data/en-de-distilled, and restored from there on another machine);
# 4. stage 2, distilled corpus: the four orders, the L2R control, the shallow GAD drafter and the
#    blockwise heads (configs/reference/convergence_kd.txt), each order stopped at the issue's rule (>= 5
#    points, the last at >= 3x the updates at which l2r_kd flattened), at most STAGE2_MAX_UPDATE
#    (30000) updates; with a teacher frozen early it runs beside stage 1, whose GEC-like verifier follows it;
# 5. the comparisons that do not ship (configs/reference/convergence_extra.txt: IBDecoder from scratch,
#    the full-size GAD drafter and two shallow variants, R2L, SA-L2R), under stage 2's rule, after
#    everything models/ ships, and never offered to models/;
# 6. every model without optimizer state in RUNS/ref/export (the benchmark's --checkpoints).
# Run it again after an interruption: each step resumes where it stopped.  Logs: RUNS/ref/<name>/.
# The repository's models/ (MODELS_DIR) is read and written as it goes: a model converged there (or at
# its --max-update) is not trained again, one that converges is packed there at once, and a model with
# no checkpoint in RUNS goes on from its snapshot there.  A model in training is packed there again
# every 2,000 updates past its snapshot (CONVERGENCE_SNAPSHOT_EVERY=N; 0: never), so a lost machine
# costs at most that much of it.
# Before a machine goes away, snapshot what is training:
#   python -m scripts.reference_run --models configs/reference/convergence_gold.txt --data RUNS/data \
#       --out RUNS/ref --models-dir models --skip-training --snapshot   (and the same for convergence_kd.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 RUNS [STAGE2_MAX_UPDATE]" >&2; exit 2; }
mkdir -p "$1"
runs=$(cd "$1" && pwd) stage2_updates=${2:-30000} parallel=${CONVERGENCE_PARALLEL:-2} threads=${CONVERGENCE_THREADS:-1} models=${MODELS_DIR:-$PWD/models}
snapshot_every=${CONVERGENCE_SNAPSHOT_EVERY:-2000}
py=python
[ -x .venv/bin/python ] && py=.venv/bin/python
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
data=$runs/data ref=$runs/ref

[ -f "$data/en-de/bin/dict.en.txt" ] || $py -m scripts.build_message_corpus --pair en-de --out "$data/en-de"
[ -f "$data/gec-en/bin/dict.gec.txt" ] || $py -m scripts.build_gec_corpus --out "$data/gec-en"

stage1() {  # PARALLEL [NAME...]: the models of the list to train (default: all)
  local parallel=$1 names=()
  shift
  [ $# -eq 0 ] || names=(--names "$@")
  $py -m scripts.reference_run --models configs/reference/convergence_gold.txt --data "$data" --out "$ref" \
      --models-dir "$models" --snapshot-every "$snapshot_every" --max-update 12000 --interval 500 \
      --parallel "$parallel" --threads "$threads" --min-points 4 --flatten-reference self --snapshot "${names[@]}"  # a model stopped at the cap goes into models/ too: the verifier is the one shipped
}
stage2() {  # PARALLEL [LIST]: the distilled corpus (restored from models/ where it ships, else distilled and
            # shipped there), then LIST's models (default convergence_kd: what models/ ships; another list's
            # models are comparisons, never offered to models/)
  local ship=(--models-dir "$models" --snapshot-every "$snapshot_every")
  [ "${2:-convergence_kd}" = convergence_kd ] || ship=()
  if [ ! -f "$data/en-de-distilled/distill.json" ]; then
    if [ -f "$models/data/en-de-distilled/distill.json" ]; then
      $py -m scripts.distill --data "$data/en-de" --restore "$models/data/en-de-distilled" --out "$data/en-de-distilled"
    else
      $py -m scripts.distill --data "$data/en-de" --path "$teacher" --out "$data/en-de-distilled" --beam 5 \
          --batch-size 64 --ship "$models/data/en-de-distilled"
    fi
  fi
  $py -m scripts.reference_run --models "configs/reference/${2:-convergence_kd}.txt" --data "$data" --out "$ref" \
      "${ship[@]}" --max-update "$stage2_updates" --interval 500 --parallel "$1" --threads "$threads"
}
# the baseline's roles in stage 2 ({CKPT}/teacher/, {CKPT}/verifier/ in convergence_kd.txt), each copied
# once and never replaced: the distilled corpus, the warm starts and the drafters see the same weights
teacher=$ref/checkpoints/teacher/checkpoint_best.pt
freeze() { $py -m scripts.reference_run --out "$ref" --freeze "$1" "$2"; }  # ROLE CHECKPOINT-or-PIN
shipped=$models/baseline/checkpoint_best.pt  # stage 1's baseline as models/ ships it (fp16), once stage 1 ends
[ -z "${CONVERGENCE_TEACHER:-}" ] || freeze teacher "$CONVERGENCE_TEACHER"
[ -f "$teacher" ] || [ ! -f configs/reference/teacher.txt ] || freeze teacher configs/reference/teacher.txt

if [ -f "$teacher" ] && [ "$parallel" -ge 2 ]; then
  # the two stages share the training slots of $ref (reference_run --parallel): stage 1 trains only the
  # baseline (the drafters' verifier), the orders take every other slot, the GEC-like verifier comes last
  stage1 "$parallel" baseline & gold=$!
  stage2 "$parallel" & kd=$!  # the orders; the drafters wait for the verifier
  wait "$gold"
  freeze verifier "$shipped"
  wait "$kd"
  stage2 "$parallel"  # the drafters
  stage1 "$parallel"  # the GEC-like verifier
else
  stage1 "$parallel"
  freeze teacher "$shipped"
  freeze verifier "$shipped"
  stage2 "$parallel"
fi
stage2 "$parallel" convergence_extra  # what does not ship, once the set is trained

for list in convergence_gold convergence_kd convergence_extra; do
  $py -m scripts.reference_run --models "configs/reference/$list.txt" --data "$data" --out "$ref" \
      --skip-training --export "$ref/export"
done
