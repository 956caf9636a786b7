#!/usr/bin/env bash
# The whole test set-up on a fresh machine (scripts/setup_tests.sh: the project with its `test`
# extra, perf_analyzer, Chromium, PostgreSQL), then pytest with any arguments given to this script.
# Without arguments: the whole suite in two test processes (pytest-xdist, a test module's tests
# in one process; most tests wait on servers and measurement windows, so two halve the wall time
# even on two cores), then the server's integration tests again with every test server started
# with `--workers 2` (front-end processes; tests/support/server_process.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHON

bash scripts/setup_tests.sh
echo "run_tests: running the tests" >&2
if [[ $# -gt 0 ]]; then
    exec "$PYTHON" -m pytest "$@"
fi
PARALLEL=(-n 2 --dist loadfile)
"$PYTHON" -m pytest "${PARALLEL[@]}"
echo "run_tests: the server's tests again, with --workers 2" >&2
AUTOTUNE_TEST_SERVE_WORKERS=2 "$PYTHON" -m pytest "${PARALLEL[@]}" tests/integration/serve
