#!/usr/bin/env bash
# Set up (.venv, pinned dependencies) and run the whole test suite.
# The differential fuzz test (tests/test_fuzz_engine.py) runs 8 fixed examples per test here; for a
# longer, randomly seeded search: FUZZ_EXAMPLES=500 bash scripts/test.sh tests/test_fuzz_engine.py
# The tests run in one pytest-xdist worker per core (TEST_WORKERS=N to choose, 0 for none), each test
# file in one worker (its fixtures built once), one thread per worker (the workers share the cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-auto}" --dist loadfile tests "$@"
