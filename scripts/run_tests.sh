#!/usr/bin/env bash
# The test command of the README (and of .ci/run): set up .venv if needed, then run the suite
# (the tests marked slow are deselected; --run-slow runs them too), one worker per CPU (pytest-xdist; the tests
# of a file stay on one worker, so its module fixtures are built once; TEST_WORKERS=0: no workers).
#   bash scripts/run_tests.sh [pytest args]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup_env.sh
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 -n "${TEST_WORKERS:-auto}" --dist loadfile \
  tests "$@"
