#!/usr/bin/env bash
# Everything the tests need, on a fresh machine (each step does nothing when it is done already):
#   1. the project with its `test` extra (torch pinned so pip takes the CPU wheel);
#   2. NVIDIA's perf_analyzer 2.51 under .cache/perf_analyzer (scripts/install_perf_analyzer.sh);
#   2b. tritonserver 2.51 (CPU, python backend) under .cache/triton-peer
#      (scripts/install_triton_peer.sh): the tuner's tests on Triton tune python models there;
#   3. Debian's chromium and chromium-driver for the HTML report tests, when they are missing;
#   4. Debian's postgresql for the several-workers test (scripts/postgres.sh), when it is missing.
# Installs into the Python that runs it (`python3`, or $PYTHON); needs root (or sudo) only when
# Chromium or PostgreSQL must be installed. scripts/run_tests.sh runs it before the tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { echo "setup_tests: $*" >&2; }

log "installing the project with its test extra"
"$PYTHON" -m pip install --quiet "torch==2.13.0" -e ".[test]"

log "installing perf_analyzer"
PYTHON="$PYTHON" bash scripts/install_perf_analyzer.sh >/dev/null

log "installing tritonserver 2.51"
PYTHON="$PYTHON" bash scripts/install_triton_peer.sh >/dev/null

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    as_root=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || {
            log "the report tests need Debian's chromium and chromium-driver:"
            log "run 'apt-get install chromium chromium-driver' as root, then this script again"
            exit 1
        }
        as_root=(sudo)
    fi
    log "installing Debian's chromium and chromium-driver"
    "${as_root[@]}" apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q \
        chromium chromium-driver >/dev/null
fi

log "installing Debian's postgresql when it is missing"
bash scripts/postgres.sh install

