#!/usr/bin/env bash
# The offline demo on a fresh machine.  By default it decodes the shipped test sets with every method
# whose reference model is in models/ (models/MANIFEST.json says how far each trained) and prints the
# comparison table and plot: set up .venv -> benchmark -> table.  Rows whose model is not shipped are
# skipped and named.
# DEMO_TRAIN=1 trains everything from scratch instead: build the message-catalog corpora -> train the
#   small models -> distil -> train the reordered models -> benchmark (about 2 hours at the default).
#   Its quick setting checks the pipeline (models too rough to translate, ~20 minutes):
#     DEMO_TRAIN=1 DEMO_UPDATES=60 DEMO_TIMED=20 DEMO_RUNS=2 DEMO_DISTILL_BEAM=1 bash scripts/demo.sh
# Knobs (environment): DEMO_TIMED (sentences timed per row and batch size; BLEU always covers the
# whole test set), DEMO_RUNS (timed runs), DEMO_JOBS (benchmark processes side by side, one thread each;
# default 2: the two cores the demo is sized for), DEMO_DIR (work folder, default work/demo); with DEMO_TRAIN=1
# also DEMO_UPDATES (training updates per model, default 1000), DEMO_DISTILL_BEAM (the teacher's beam
# for distillation, default 5).  Finished steps are skipped on re-runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
TRAIN=${DEMO_TRAIN:-0}
UPDATES=${DEMO_UPDATES:-1000}
DISTILL_BEAM=${DEMO_DISTILL_BEAM:-5}
DIR=${DEMO_DIR:-work/demo}
JOBS=${DEMO_JOBS:-2}
if [ "$TRAIN" = 1 ]; then TIMED=${DEMO_TIMED:-100} RUNS=${DEMO_RUNS:-5}; else TIMED=${DEMO_TIMED:-50} RUNS=${DEMO_RUNS:-3}; fi
mkdir -p "$DIR"
start=$(date +%s)
say() { echo "[demo $(( $(date +%s) - start ))s] $*"; }

if [ "$TRAIN" != 1 ]; then
  python - <<'PY'
from scripts.lab.evaluation.reference_models import ReferenceModels
store = ReferenceModels("models")
store.check_whole()
for name in store.models:
    print(f"[demo] {store.describe(name)}")
PY
  say "benchmark: every method whose model is in models/, on the shipped test sets (batch 1 and 32)"
  python -m scripts.benchmark --rows configs/benchmark/reference.json configs/benchmark/orders.json \
    --data models/data/en-de --checkpoints models --out "$DIR/results" --timed-sentences "$TIMED" --runs "$RUNS" \
    --batch-sizes 1 32 --quality-batch-size 32 --skip-missing --jobs "$JOBS" --threads 1 --save-hypotheses
  say "the orders against their L2R control and the papers"
  python -m scripts.orders_report "$DIR/results" --data models/data/en-de --checkpoints models
  say "done in $(( $(date +%s) - start ))s; table: $DIR/results/results.md, plot: $DIR/results/speed_vs_bleu.png, orders: $DIR/results/orders_report.md"
  exit 0
fi

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
  --batch-sizes 1 32 --quality-batch-size 32 --jobs "$JOBS" --threads 1
say "done in $(( $(date +%s) - start ))s; table: $DIR/results/results.md, plot: $DIR/results/speed_vs_bleu.png"
