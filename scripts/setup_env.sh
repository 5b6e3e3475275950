#!/usr/bin/env bash
# Create (or reuse) .venv at the repo root and install fairseq_ext with its pinned base.
# Idempotent: a second run only checks that everything imports.
# Usage: bash scripts/setup_env.sh   (also installs pytest, the [dev] extra)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
# One set-up at a time: recipes started side by side each call this script, and two concurrent pip
# installs into the same .venv break each other (measured: "No such file ... .venv/bin/fairseq-ext-data").
exec 9>"$ROOT/.setup_env.lock"
flock 9
export PIP_CONSTRAINT="$ROOT/constraints.txt"   # never let pip pull another torch, also in build envs
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
VPY="$ROOT/.venv/bin/python"
if "$VPY" -c "import torch, fairseq; assert torch.__version__.startswith('2.13.0')" 2>/dev/null; then
  echo "[setup] torch 2.13.0 and fairseq already in .venv"
else
  echo "[setup] installing torch 2.13.0 (CPU) and build dependencies"
  "$VPY" -m pip install -q torch==2.13.0
  "$VPY" -m pip install -q cython numpy setuptools wheel
  echo "[setup] building fairseq-fixed 0.12.3.1 against the installed torch/numpy (~5 min the first time)"
  "$VPY" -m pip install -q --no-build-isolation fairseq-fixed==0.12.3.1
fi
# The plugin and its pinned dependencies from setup.py, re-installed whenever setup.py or the
# constraints change (a stamp in .venv keeps their hash), so a .venv made before a dependency was
# added gets it; otherwise skipped.
STAMP=.venv/.fairseq_ext_setup
HASH=$(cat setup.py constraints.txt | sha256sum | cut -c1-16)
if [ "$(cat "$STAMP" 2>/dev/null)" = "$HASH" ] && "$VPY" -c "import fairseq_ext" 2>/dev/null; then
  echo "[setup] fairseq_ext and its pinned dependencies already installed (setup.py unchanged)"
else
  echo "[setup] installing fairseq_ext (editable) and its pinned dependencies"
  "$VPY" -m pip install -q --no-build-isolation -e ".[dev]"
  echo "$HASH" > "$STAMP"
fi
"$VPY" -c "import fairseq_ext, torch, fairseq; print('[setup] torch', torch.__version__, '| fairseq', fairseq.__version__, '| fairseq_ext', fairseq_ext.__version__)"
