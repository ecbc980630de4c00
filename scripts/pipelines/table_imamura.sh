#!/usr/bin/env bash
# Reproduce the imamura table: data, training, averaging, decoding, Markdown table (docs/REPRODUCING.md).
# Arguments go to scripts/pipelines/table.py, e.g. --dry-run, --sections, --gpus.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh >&2  # idempotent: installs or switches the torch build for this machine
exec .venv/bin/python -m scripts.pipelines.table --table imamura "$@"
