#!/usr/bin/env bash
# Run this first on a GPU machine: the device and torch build, the fp16 (and fp32) share of every
# lossless generator identical to fairseq's greedy, the engine's greedy against fairseq's at batch
# 1 and 32, every lossless drafter against the engine's greedy (scripts/lab/evaluation/gpu_check.py), then the
# GPU tests (fp16 training and decoding, tests/test_cuda.py).  The tiny test corpus and model are
# built on first use (a couple of minutes) and cached.  Where torch sees no CUDA device it says so and
# exits 1: skipped tests are not a passed check.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no GPU: nothing to check (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)') sees no CUDA device; run this on a GPU machine)" >&2
  exit 1
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider -m cuda -s -rA tests/test_gpu_check.py tests/test_cuda.py "$@"
