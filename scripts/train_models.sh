#!/usr/bin/env bash
# Train every model of a list (lines "NAME CONFIG CORPUS [updates=F] [fairseq-train args...]", e.g.
# configs/demo_models.txt) that is not trained yet:
#   scripts/train_models.sh LIST DATA_ROOT CKPT_ROOT UPDATES [NAME...]
# A model trains for UPDATES updates, or F*UPDATES with "updates=F" on its line (a fine-tuning from
# another model needs fewer); it counts as trained when CKPT_ROOT/NAME/DONE-<its updates> exists; an
# interrupted training resumes from its checkpoint_last.pt.  With NAMEs, only those lines are trained
# (in the given order).  Words after CORPUS are extra fairseq-train arguments of that model.
# Placeholders in a CONFIG's arguments and in the extra words: {CKPT} -> CKPT_ROOT, {DATA} -> DATA_ROOT
# (absolute), e.g. "--init-from-l2r {CKPT}/baseline/checkpoint_best.pt" for models built on another one
# of the list (which must come earlier in it); the substituted copy is CKPT_ROOT/NAME/train.args.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { echo "usage: $0 LIST DATA_ROOT CKPT_ROOT UPDATES [NAME...]" >&2; exit 2; }
list=$1 data=$2 ckpts=$3 updates=$4; shift 4
start=$(date +%s)
mkdir -p "$ckpts"
ckpts_abs=$(cd "$ckpts" && pwd) data_abs=$(cd "$data" && pwd)
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(awk 'NF && $1 !~ /^#/ {print $1}' "$list")
for name in "${names[@]}"; do
  read -r _ config corpus rest < <(awk -v n="$name" '$1 == n' "$list")  || config=""
  [ -n "${config:-}" ] || { echo "error: $name is not in $list" >&2; exit 2; }
  read -r -a words <<< "${rest:-}"
  n_updates=$updates extra=()
  for w in "${words[@]}"; do
    case $w in
      \#*) break ;;
      updates=*) n_updates=$(awk -v u="$updates" -v f="${w#updates=}" 'BEGIN { n = int(u * f + 0.5); print (n < 1 ? 1 : n) }') ;;
      *) w=${w//\{CKPT\}/$ckpts_abs}; extra+=("${w//\{DATA\}/$data_abs}") ;;
    esac
  done
  mark="$ckpts/$name/DONE-$n_updates"
  [ -f "$mark" ] && continue
  echo "[train $(( $(date +%s) - start ))s] $name ($config on $corpus, $n_updates updates${extra:+, ${extra[*]}})"
  args_file=$config
  if grep -q -e '{CKPT}' -e '{DATA}' "$config"; then
    mkdir -p "$ckpts/$name"
    args_file="$ckpts/$name/train.args"
    sed -e "s#{CKPT}#$ckpts_abs#g" -e "s#{DATA}#$data_abs#g" "$config" > "$args_file"
  fi
  scripts/train.sh "$args_file" "$data/$corpus/bin" "$ckpts/$name" --max-update "$n_updates" "${extra[@]}" 2>/dev/null \
    | grep --line-buffered -E "train_inner|valid on|done training" | sed -u 's/^.*| INFO | //' || true
  grep -q "done training" "$ckpts/$name/train.log" 2>/dev/null \
    || { echo "error: training $name failed: see $ckpts/$name/train.log" >&2; exit 1; }
  if [ -f "$data/$corpus/distill.json" ]; then
    # trained on a teacher's outputs but validated on the gold references: that loss ranks the
    # checkpoints by closeness to gold, not by what the model learns (it was lowest at the first
    # validation for the demo's distilled drafter), so the last checkpoint is the one to use
    cp "$ckpts/$name/checkpoint_last.pt" "$ckpts/$name/checkpoint_best.pt"
    echo "[train] $name: trained on distilled targets; checkpoint_best.pt = the last checkpoint"
  fi
  touch "$mark"
done
