#!/usr/bin/env bash
# Proves that a plain `pip install .` (no extras) is enough for the product: in a clean venv,
# `autotune --help`, `autotune serve` answering /v2/health/ready, and a one-trial dry-run tuning.
# Everything happens in a temporary folder (a copy of the model repository included) that is
# removed at the end, with the server it started.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
WORK="$(mktemp -d)"
SERVER_PID=""

log() { echo "check_plain_install: $*" >&2; }
cleanup() {
    if [[ -n "$SERVER_PID" ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

log "clean venv in $WORK/venv, pip install ."
"$PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
# A copy of the sources as they would be committed (tracked and new files, not ignored ones), so
# that the build leaves nothing in the checkout.
mkdir -p "$WORK/src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done \
    | xargs -0 cp --parents -t "$WORK/src")
"$VPY" -m pip install --quiet "$WORK/src"
AUTOTUNE="$WORK/venv/bin/autotune"

log "autotune --help"
"$AUTOTUNE" --help >/dev/null

log "building the model repository with the plain install"
"$VPY" "$WORK/src/scripts/build_model_repository.py" >/dev/null

log "autotune serve, waiting for /v2/health/ready, gRPC ServerReady and /metrics"
"$AUTOTUNE" serve --model-repository "$WORK/src/model_repository" --http-port 0 \
    --grpc-port 0 --metrics-port 0 >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
"$VPY" - "$WORK/serve.log" <<'PY'
import re, sys, time, urllib.request
import tritonclient.grpc

log, deadline = sys.argv[1], time.monotonic() + 120
def address(service):
    found = re.search(rf"Started {service} at ([0-9.]+):(\d+)", open(log).read())
    return f"{found[1]}:{found[2]}" if found else None
while time.monotonic() < deadline:
    http, grpc, metrics = (address(s) for s in ("HTTPService", "GRPCInferenceService", "Metrics Service"))
    if http and grpc and metrics:
        try:
            if urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=2).status == 200:
                break
        except OSError:
            pass
    time.sleep(0.1)
else:
    sys.exit("the server did not become ready within 120 s:\n" + open(log).read())
if not tritonclient.grpc.InferenceServerClient(grpc).is_server_ready():
    sys.exit(f"gRPC at {grpc} does not say ready")
scraped = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode()
if "nv_inference_request_success" not in scraped:
    sys.exit(f"/metrics at {metrics} lacks nv_inference_request_success:\n{scraped[:2000]}")
print(f"ready: HTTP {http}, gRPC {grpc}, metrics {metrics}", file=sys.stderr)
PY
kill "$SERVER_PID"
wait "$SERVER_PID" || { log "autotune serve did not exit 0 on SIGTERM"; exit 1; }
SERVER_PID=""

log "one-trial dry-run tuning of digits, its INT8 variant built too"
"$AUTOTUNE" --latency-p95 50ms -m digits --trials 1 --precision fp32,int8 --dry-run \
    --model-repository "$WORK/src/model_repository" --report-dir "$WORK/reports" \
    2>&1 | tee "$WORK/tune.log"
# A variant that cannot be built is left out of the search rather than failing the run: here
# that would mean the plain install lacks what building it needs.
if grep -q "building it failed" "$WORK/tune.log"; then
    log "a precision variant could not be built with the plain install"
    exit 1
fi
log "ok"
