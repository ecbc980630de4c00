#!/usr/bin/env bash
# Train every model of a list (lines "NAME CONFIG CORPUS", e.g. configs/demo_models.txt) that is not
# trained yet:  scripts/train_models.sh LIST DATA_ROOT CKPT_ROOT UPDATES [NAME...]
# A model counts as trained when CKPT_ROOT/NAME/DONE-UPDATES exists; an interrupted training resumes
# from its checkpoint_last.pt.  With NAMEs, only those lines are trained (in the given order).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { echo "usage: $0 LIST DATA_ROOT CKPT_ROOT UPDATES [NAME...]" >&2; exit 2; }
list=$1 data=$2 ckpts=$3 updates=$4; shift 4
start=$(date +%s)
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(awk 'NF {print $1}' "$list")
for name in "${names[@]}"; do
  read -r _ config corpus < <(awk -v n="$name" '$1 == n' "$list")  || config=""
  [ -n "${config:-}" ] || { echo "error: $name is not in $list" >&2; exit 2; }
  mark="$ckpts/$name/DONE-$updates"
  [ -f "$mark" ] && continue
  echo "[train $(( $(date +%s) - start ))s] $name ($config on $corpus, $updates updates)"
  scripts/train.sh "$config" "$data/$corpus/bin" "$ckpts/$name" --max-update "$updates" 2>/dev/null \
    | grep --line-buffered -E "train_inner|valid on|done training" | sed -u 's/^.*| INFO | //' || true
  grep -q "done training" "$ckpts/$name/train.log" 2>/dev/null \
    || { echo "error: training $name failed: see $ckpts/$name/train.log" >&2; exit 1; }
  touch "$mark"
done
