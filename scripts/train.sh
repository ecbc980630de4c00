#!/usr/bin/env bash
# Train one model with fairseq-train and the plugin.
#   scripts/train.sh CONFIG DATA_BIN SAVE_DIR [extra fairseq-train arguments...]
# CONFIG: an .args file of fairseq-train arguments (configs/models/*.args, configs/orders/*.args;
# '#' starts a comment).  Extra arguments come last and override the file (e.g. --max-update 800).
# Writes SAVE_DIR/checkpoint_best.pt and SAVE_DIR/train.log.  Progress goes to stdout.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 CONFIG DATA_BIN SAVE_DIR [fairseq-train args...]" >&2; exit 2
fi
config=$1 data=$2 save=$3; shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$config" ] || { echo "error: config $config not found (see configs/models/, configs/orders/)" >&2; exit 2; }
[ -d "$data" ] || { echo "error: $data is not a binarized corpus folder: run scripts/build_message_corpus.py or a paper pipeline first" >&2; exit 2; }
mkdir -p "$save"
# shellcheck disable=SC2046
read -r -a args <<< "$(sed -e 's/#.*//' "$config" | tr '\n' ' ')"
device_args=()
gpu_precision=--fp16
# a frozen base (blockwise heads, --freeze-base) must stay bit-identical to its checkpoint: --fp16 would
# halve and save it in fp16, mixed precision (--amp) keeps the fp32 weights
[[ " ${args[*]} " == *" --freeze-base "* ]] && gpu_precision=--amp
python -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && device_args+=("$gpu_precision") || device_args+=(--cpu)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
set -x
fairseq-train "$data" --user-dir "$here/fairseq_plugins" "${args[@]}" "${device_args[@]}" \
  --save-dir "$save" --no-epoch-checkpoints --log-format simple --log-interval 50 \
  --num-workers 0 --seed 1 "$@" 2>&1 | grep --line-buffered -v "tensorboardX" | tee "$save/train.log"
