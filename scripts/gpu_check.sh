#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one run (about 7 minutes on a 16-core H200): what the
# machine has; tests/gpu (each test skips, saying why, where a runtime it needs is missing);
# a short tuning (3 minutes) of a TorchScript resnet18 written as one CPU instance, whose space
# has KIND_GPU instances and the fp16 / bf16 modules, with its speed-up over the config as
# written; tritonclient's CUDA shared-memory flow (scripts/cuda_shm_client.py, HTTP and gRPC)
# and `autotune perf --shared-memory cuda` against our server. Nothing is written back. Run
# from the repository root on the GPU machine:
#
#   bash scripts/gpu_check.sh [WHEELS]
#
# WHEELS: a folder of wheels to install first, for a machine without network access
# (scripts/offline_wheels.sh makes it). Logs go to ${OUT:-/tmp}: gpu_check.log (everything),
# gpu_tune/ (the tuning's report and summary.json), cuda_shm_server.log.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3)}"
OUT="${OUT:-/tmp}"
log="$OUT/gpu_check.log"
scratch="$(mktemp -d)"
export PYTHONUNBUFFERED=1

if [[ -n "${1:-}" ]]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$1"/*.whl \
        || exit 1
    export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

server_pid=""
cleanup() {
    [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

{
    failed=0
    echo "== $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | head -4)"
    "$PYTHON" - <<'PY'
import logging
logging.basicConfig(level=logging.INFO, format="%(message)s")
from serve.platform import detect_platform
from tuner.space import Platform
here = detect_platform()
print("platform:", here.describe())
print("onnxruntime packages:", ", ".join(here.onnxruntime_packages) or "none")
print("onnxruntime providers:", ", ".join(here.onnxruntime_providers))
print("backends the tuner may put on a GPU:", ", ".join(sorted(Platform.detect().gpu_backends)))
PY

    echo "== the models tests/gpu serves"
    "$PYTHON" scripts/build_model_repository.py --models simple,digits
    echo "== tests/gpu"
    timeout 240 "$PYTHON" -m pytest tests/gpu -ra -s -p no:cacheprovider --timeout 120 || failed=1

    echo "== a short tuning of a TorchScript resnet18 (written as 1 CPU instance, fp32)"
    repository="$scratch/repository"
    "$PYTHON" scripts/build_torchscript_resnet18.py "$repository"
    cp -r model_repository/simple "$repository/simple"
    # Random weights leave close logits, which reduced precisions reorder more often than
    # trained ones do: the accuracy limit is loose (0.1) for this check.
    timeout 240 "$PYTHON" -m tuner --latency-p95 50ms -m resnet18_pt \
        --model-repository "$repository" --time-budget 3m --dry-run \
        --max-accuracy-drop 0.1 --report-dir "$OUT/gpu_tune" || failed=1
    "$PYTHON" - "$OUT/gpu_tune/resnet18_pt/summary.json" <<'PY' || failed=1
import json, sys
summary = json.load(open(sys.argv[1]))
written, best = summary["as_written"], summary["best"]
print("platform:", summary["platform"])
for variant in summary["variants"]:
    print("variant:", variant.get("verdict") or variant)
def rate(trial):
    return (trial or {}).get("outcome", {}).get("throughput") or 0.0
if best is None:
    sys.exit("no configuration met the budget")
kind = (best["candidate"] or {}).get("instance_kind", "the kind as written")
precision = (best["candidate"] or {}).get("precision", "fp32")
print(f"as written: {rate(written):.1f} infer/s; best (trial {best['number']}, {best['key']}): "
      f"{rate(best):.1f} infer/s on {kind}, {precision}; "
      f"speed-up {rate(best) / max(rate(written), 1e-9):.2f}x")
if not summary["platform"]["gpu"]:
    sys.exit("GPU instances were not part of the search")
PY

    echo "== CUDA shared memory: tritonclient's flow and autotune perf against our server"
    "$PYTHON" -m serve --model-repository "$repository" --http-port 18000 --grpc-port 18001 \
        --metrics-port 18002 >"$OUT/cuda_shm_server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 60); do
        "$PYTHON" -c "import tritonclient.http as h; import sys; \
sys.exit(0 if h.InferenceServerClient('localhost:18000').is_model_ready('simple') else 1)" \
            2>/dev/null && break
        sleep 1
    done
    timeout 60 "$PYTHON" scripts/cuda_shm_client.py -i http -u localhost:18000 || failed=1
    timeout 60 "$PYTHON" scripts/cuda_shm_client.py -i grpc -u localhost:18001 || failed=1
    for protocol in http grpc; do
        port=$([[ $protocol == http ]] && echo 18000 || echo 18001)
        timeout 60 "$PYTHON" -m tuner perf -m simple -u "localhost:$port" -i "$protocol" \
            --shared-memory cuda --concurrency-range 4 -p 1000 || failed=1
    done
    kill "$server_pid" && wait "$server_pid" 2>/dev/null
    server_pid=""
    echo "== outcome: $([[ $failed == 0 ]] && echo PASS || echo FAIL) ($(date -u +%FT%TZ))"
    exit "$failed"
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
