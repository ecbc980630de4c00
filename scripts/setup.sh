#!/usr/bin/env bash
# Create .venv with the pinned, working dependency set (idempotent; about 4 minutes the first time).
#   torch==2.13.0 CPU wheel (an unpinned torch pulls a multi-GB CUDA build);
#   fairseq-fixed==0.12.3.1 (PyPI fairseq 0.12.2 cannot import on Python 3.11). It is built from
#   source without build isolation, so its build uses the torch pinned here instead of fetching
#   the newest CUDA torch into a throw-away build environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
if python -c 'import fairseq, torch, sentencepiece, sacrebleu, ctranslate2, matplotlib, subword_nmt, pytest' 2>/dev/null \
   && [ "$(python -c 'import torch; print(torch.__version__.split("+")[0])')" = "2.13.0" ]; then
  echo "[setup] .venv is ready"; exit 0
fi
echo "[setup] installing pinned dependencies into .venv"
python -m pip install -q --upgrade pip wheel "setuptools<81"
python -m pip install -q torch==2.13.0 numpy cython
python -m pip install -q --no-build-isolation fairseq-fixed==0.12.3.1
python -m pip install -q sentencepiece subword-nmt "sacrebleu>=2.0" matplotlib ctranslate2 pytest
python -c 'import fairseq_plugins' 2>/dev/null || true
echo "[setup] done: $(python -c 'import fairseq, torch; print("fairseq", fairseq.__version__, "torch", torch.__version__)')"
