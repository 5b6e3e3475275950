#!/usr/bin/env bash
# The test command of the README (and of .ci/run): set up .venv if needed, then run the suite
# (the tests marked slow are deselected; --run-slow runs them too).
#   bash scripts/run_tests.sh [pytest args]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup_env.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 tests "$@"
