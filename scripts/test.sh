#!/usr/bin/env bash
# Set up (.venv, pinned dependencies) and run the whole test suite.
# The differential fuzz test (tests/test_fuzz_engine.py) runs 8 fixed examples per test here; for a
# longer, randomly seeded search: FUZZ_EXAMPLES=500 bash scripts/test.sh tests/test_fuzz_engine.py
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
