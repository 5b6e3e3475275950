#!/usr/bin/env bash
# The quickstart (recipes/quickstart.sh: train BUDGET_MIN minutes, translate, score) as an AVX2-only CPU runs it,
# emulated on a wider x86 CPU: torch's kernels at AVX2 (ATEN_CPU_CAPABILITY), oneDNN at AVX2 (ONEDNN_MAX_CPU_ISA)
# and MKL's GEMMs at AVX2 (MKL_ENABLE_INSTRUCTIONS: the float32 linear layers run in MKL, which the other two
# leave at AVX-512); bench_configs then drops --cpu-bf16 (float32, as on such a CPU). THREADS threads (2).
# Writes $OUT/quickstart_avx2.json: updates, training target tokens/s, BLEU, chrF, the CPU's flags, the emulation
# settings as torch and MKL report them, the load average before and after.
#
#   bash recipes/bench/quickstart_avx2.sh                  # 15 min on an otherwise idle 2-core machine
#   BUDGET_MIN=1 bash recipes/bench/quickstart_avx2.sh     # end-to-end check (BLEU ~0)
#   CONFIG=transformer bash recipes/bench/quickstart_avx2.sh   # the d 256 baseline instead
#   EMULATE=0 bash recipes/bench/quickstart_avx2.sh        # on a real AVX2-only CPU: no emulation variables
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export BUDGET_MIN=${BUDGET_MIN:-15} THREADS=${THREADS:-2} CONFIG=${CONFIG:-quickstart} DEVICE=cpu
export OUT=${OUT:-runs/quickstart_avx2/${CONFIG}_${BUDGET_MIN}min}
if [ "${EMULATE:-1}" = 1 ]; then
  export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
fi
PY=.venv/bin/python
rm -rf "$OUT"   # this script's own run folder: bench.py would reuse an earlier result.json
mkdir -p "$OUT"
# what torch and MKL actually use (refuse to run a silent non-emulation)
$PY - "$OUT/emulation.json" <<'EOF'
import json, os, subprocess, sys
import torch
mkl = subprocess.run([sys.executable, "-c", "import torch; a = torch.ones(8, 8); a @ a"], capture_output=True,
                     text=True, env=dict(os.environ, MKL_VERBOSE="1")).stdout.splitlines()
info = {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl": next((ln.split("for Intel(R) 64 architecture")[-1].strip() for ln in mkl if "oneMKL" in ln), None),
        **{k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")}}
print("   emulation:", info)
if os.environ.get("ATEN_CPU_CAPABILITY") and (info["torch_cpu_capability"] != "AVX2" or "AVX-512" in (info["mkl"] or "")):
    sys.exit(f"error: the AVX2 emulation did not take effect: {info}")
json.dump(info, open(sys.argv[1], "w"), indent=1)
EOF
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
bash recipes/quickstart.sh 2>&1 | tee "$OUT/quickstart.log"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
LOAD_BEFORE=$LOAD_BEFORE LOAD_AFTER=$LOAD_AFTER $PY - <<'EOF'
import json, os, platform
from datetime import datetime, timezone
from pathlib import Path
out, config = Path(os.environ["OUT"]), os.environ["CONFIG"]
r = json.loads((out / config / "result.json").read_text())
cpu = Path("/proc/cpuinfo").read_text()
flags = next(ln for ln in cpu.splitlines() if ln.startswith("flags")).split(":", 1)[1].split()
res = {"date": datetime.now(timezone.utc).isoformat(timespec="minutes"), "config": config,
       "budget_min": float(os.environ["BUDGET_MIN"]), "threads": int(os.environ["THREADS"]),
       "cpu": next(ln for ln in cpu.splitlines() if ln.startswith("model name")).split(":", 1)[1].strip(),
       "cores": os.cpu_count(), "machine": platform.machine(),
       "cpu_flags": {f: f in flags for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")},
       "emulation": json.loads((out / "emulation.json").read_text()),
       "load_before": os.environ["LOAD_BEFORE"], "load_after": os.environ["LOAD_AFTER"],
       "params": r.get("params"), "updates": r.get("updates"), "epochs": r.get("epochs"),
       "train_tokens_per_s": r.get("train_tokens_per_s"), "train_wall_s": r.get("train_wall_s"),
       "bleu": r.get("bleu"), "chrf": r.get("chrf"), "bleu_2refs": r.get("bleu_2refs"),
       "bleu_signature": r.get("bleu_signature"), "chrf_signature": r.get("chrf_signature"),
       "generate_wall_s": r.get("generate_wall_s")}
(out / "quickstart_avx2.json").write_text(json.dumps(res, indent=1))
print(json.dumps(res, indent=1))
print(f"written {out / 'quickstart_avx2.json'}")
EOF
