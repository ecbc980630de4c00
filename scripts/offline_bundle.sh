#!/usr/bin/env bash
# The offline bundle for an air-gapped GPU machine (docs/GPU.md), on a machine with a package index:
#   bash scripts/offline_bundle.sh DIR [--data RUNS/data] [--corpora NAME...] [--python312 PATH] [--local-only | --with-local]
# DIR: a git-ignored folder (offline-bundle/ is); see scripts/lab/offline/bundle.py.
set -euo pipefail
cd "$(dirname "$0")/.."
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
exec "$py" -m scripts.lab.offline.bundle "$@"
