#!/usr/bin/env bash
# The whole test set-up on a fresh machine (scripts/setup_tests.sh: the project with its `test`
# extra, perf_analyzer, Chromium, PostgreSQL), then pytest with any arguments given to this script.
# Without arguments, the server's integration tests then run again with every test server
# started with `--workers 2` (front-end processes; tests/support/server_process.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHON

bash scripts/setup_tests.sh
echo "run_tests: running the tests" >&2
"$PYTHON" -m pytest "$@"
if [[ $# -eq 0 ]]; then
    echo "run_tests: the server's tests again, with --workers 2" >&2
    AUTOTUNE_TEST_SERVE_WORKERS=2 "$PYTHON" -m pytest tests/integration/serve
fi
