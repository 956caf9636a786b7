#!/usr/bin/env bash
# Install NVIDIA Triton Model Analyzer 1.58 under .cache/model-analyzer and print the path of its
# `model-analyzer` command.
#
# - venv/: a dedicated virtual environment with triton-model-analyzer==1.58.0 from PyPI. Model
#   Analyzer pins its own optuna, numpy, protobuf and tritonclient versions; in a venv of its own
#   they never touch the project's environment.
#
# It drives a tritonserver and a perf_analyzer it is given paths to: scripts/install_triton_peer.sh
# and scripts/install_perf_analyzer.sh install those (benchmarks/model_analyzer_side.py runs all
# three). Idempotent: a second run only checks that the command still runs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.cache/model-analyzer"
VENV="$DEST/venv"
COMMAND="$VENV/bin/model-analyzer"
STAMP="$DEST/.installed"
PACKAGE="triton-model-analyzer==1.58.0"
STAMP_TEXT="$PACKAGE venv-v1"
PYTHON="${PYTHON:-python3}"

log() { echo "install_model_analyzer: $*" >&2; }

runs() { "$COMMAND" --help >/dev/null 2>&1; }

if [[ -x "$COMMAND" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]] && runs; then
    echo "$COMMAND"
    exit 0
fi

mkdir -p "$DEST"
rm -f "$STAMP"
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
log "installing $PACKAGE"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PACKAGE"
if [[ ! -x "$COMMAND" ]]; then
    log "the $PACKAGE wheel did not provide bin/model-analyzer"
    exit 1
fi
if ! output="$("$COMMAND" --help 2>&1)"; then
    log "model-analyzer does not run: $output"
    exit 1
fi
log "installed $("$VENV/bin/python" -m pip show triton-model-analyzer 2>/dev/null \
    | sed -n 's/^Version: /triton-model-analyzer /p')"
echo "$STAMP_TEXT" >"$STAMP"
echo "$COMMAND"
