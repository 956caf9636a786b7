#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one run (a few minutes): what the machine has, then
# tests/gpu (each test skips, saying why, where a runtime it needs is missing), with the
# outcome summarised at the end, then a short tuning of resnet18 under a 50 ms p95 budget with
# every precision (those this machine cannot run are reported with the reason and left out;
# nothing is written back: the report goes to ${OUT:-/tmp}/gpu_tune). Run from the repository
# root on the GPU machine:
#
#   bash scripts/gpu_check.sh [WHEELS]
#
# WHEELS: a folder of wheels to install first, for a machine without network access
# (scripts/offline_wheels.sh makes it). Writes its log to ${OUT:-/tmp}/gpu_check.log.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3)}"
log="${OUT:-/tmp}/gpu_check.log"
export PYTHONUNBUFFERED=1

if [[ -n "${1:-}" ]]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$1"/*.whl \
        || exit 1
    export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

{
    echo "== $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | head -4)"
    "$PYTHON" - <<'PY'
import logging
logging.basicConfig(level=logging.INFO, format="%(message)s")
from serve.platform import detect_platform
here = detect_platform()
print("platform:", here.describe())
print("onnxruntime packages:", ", ".join(here.onnxruntime_packages) or "none")
print("onnxruntime providers:", ", ".join(here.onnxruntime_providers))
PY
    echo "== the models tests/gpu serves"
    "$PYTHON" scripts/build_model_repository.py --models simple,digits
    echo "== tests/gpu"
    "$PYTHON" -m pytest tests/gpu -ra -s -p no:cacheprovider --timeout 300
    tests=$?
    echo "== a short tuning of resnet18, every precision"
    "$PYTHON" scripts/build_model_repository.py --models resnet18
    "$PYTHON" -m tuner --latency-p95 50ms -m resnet18 --time-budget 4m --dry-run \
        --precision fp32,fp16,int8,trt_fp16,trt_int8,plan_fp16,plan_int8 \
        --report-dir "${OUT:-/tmp}/gpu_tune"
    exit "$tests"
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
