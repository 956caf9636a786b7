#!/usr/bin/env bash
# The whole test set-up on a fresh machine (scripts/setup_tests.sh: the project with its `test`
# extra, perf_analyzer, Chromium, PostgreSQL), then pytest with any arguments given to this script.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHON

bash scripts/setup_tests.sh
echo "run_tests: running the tests" >&2
exec "$PYTHON" -m pytest "$@"
