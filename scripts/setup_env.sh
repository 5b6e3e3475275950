#!/usr/bin/env bash
# Create (or reuse) .venv at the repo root and install fairseq_ext with its pinned base.
# Idempotent: a second run only checks that everything imports.
# Usage: bash scripts/setup_env.sh   (also installs pytest, the [dev] extra)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
export PIP_CONSTRAINT="$ROOT/constraints.txt"   # never let pip pull another torch, also in build envs
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
VPY="$ROOT/.venv/bin/python"
if "$VPY" - <<'PYEOF' 2>/dev/null
import torch, fairseq, sacrebleu, sentencepiece, subword_nmt, pytest, matplotlib, fairseq_ext
assert torch.__version__.startswith("2.13.0"), torch.__version__
PYEOF
then
  echo "[setup] .venv already complete (torch, fairseq, fairseq_ext import)"
else
  echo "[setup] installing torch 2.13.0 (CPU) and build dependencies"
  "$VPY" -m pip install -q torch==2.13.0
  "$VPY" -m pip install -q cython numpy setuptools wheel
  echo "[setup] building fairseq-fixed 0.12.3.1 against the installed torch/numpy (~5 min the first time)"
  "$VPY" -m pip install -q --no-build-isolation fairseq-fixed==0.12.3.1
  echo "[setup] installing fairseq_ext (editable) and its pinned dependencies"
  "$VPY" -m pip install -q --no-build-isolation -e ".[dev]"
fi
"$VPY" -c "import torch, fairseq; print('[setup] torch', torch.__version__, '| fairseq', fairseq.__version__)"
