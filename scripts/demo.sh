#!/usr/bin/env bash
# The offline demo, end to end on a fresh machine:
#   set up .venv -> build the message-catalog corpora -> train the small models -> decode the
#   test set with every method side by side -> print the comparison table.
# Knobs (environment): DEMO_UPDATES (training updates per model, default 1000), DEMO_TIMED (sentences
# timed per row and batch size, default 100; BLEU always covers the whole test set), DEMO_RUNS (timed
# runs, default 5), DEMO_DISTILL_BEAM (the teacher's beam for distillation, default 5), DEMO_DIR (work
# folder, default work/demo).  Finished steps are skipped on re-runs.
# Quick setting (the whole table in 21 minutes measured on one core; models too rough to translate):
#   DEMO_UPDATES=60 DEMO_TIMED=20 DEMO_RUNS=2 DEMO_DISTILL_BEAM=1 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
UPDATES=${DEMO_UPDATES:-1000}
TIMED=${DEMO_TIMED:-100}
RUNS=${DEMO_RUNS:-5}
DISTILL_BEAM=${DEMO_DISTILL_BEAM:-5}
DIR=${DEMO_DIR:-work/demo}
mkdir -p "$DIR"
start=$(date +%s)
say() { echo "[demo $(( $(date +%s) - start ))s] $*"; }

for pair in en-de pt_PT-pt_BR; do
  if [ ! -f "$DIR/data/$pair/bin/dict.${pair#*-}.txt" ]; then
    say "building the $pair corpus from /usr/share/locale"
    python -m scripts.build_message_corpus --pair "$pair" --out "$DIR/data/$pair"
  fi
done

if [ ! -f "$DIR/data/typo-en/bin/dict.en.txt" ]; then
  say "building the English typo-correction corpus (input-guided decoding's second task)"
  python -m scripts.build_typo_corpus --out "$DIR/data/typo-en"
fi

say "training stage 1 of configs/demo_models.txt (baseline, Mask-Predict, IAD models, blockwise heads; $UPDATES updates)"
scripts/train_models.sh configs/demo_models.txt "$DIR/data" "$DIR/checkpoints" "$UPDATES" \
  baseline cmlm iad_pt iad_typo blockwise_k4_frozen

if [ ! -f "$DIR/data/en-de-distilled/distill.json" ]; then
  say "sequence-level distillation: the baseline translates en-de's train split (beam $DISTILL_BEAM)"
  python -m scripts.distill --data "$DIR/data/en-de" --path "$DIR/checkpoints/baseline/checkpoint_best.pt" \
    --out "$DIR/data/en-de-distilled" --beam "$DISTILL_BEAM" --batch-size 64 --threads 2
fi

say "training stage 2 (reordered models warm-started from the baseline on the distilled corpus, GAD drafter)"
scripts/train_models.sh configs/demo_models.txt "$DIR/data" "$DIR/checkpoints" "$UPDATES"

say "benchmark: every method on the en-de test set (batch 1 and 32)"
python -m scripts.benchmark --rows configs/benchmark/demo.json --data "$DIR/data/en-de" \
  --checkpoints "$DIR/checkpoints" --out "$DIR/results" --timed-sentences "$TIMED" --runs "$RUNS" \
  --batch-sizes 1 32 --quality-batch-size 32
say "done in $(( $(date +%s) - start ))s; table: $DIR/results/results.md, plot: $DIR/results/speed_vs_bleu.png"
