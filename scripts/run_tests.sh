#!/usr/bin/env bash
# The whole test set-up on a fresh machine (scripts/setup_tests.sh: the project with its `test`
# extra, perf_analyzer, Chromium, PostgreSQL), then pytest with any arguments given to this script.
# AUTOTUNE_TESTS_SET_UP=1 skips the set-up (the caller has just run it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHON

# .ci/run has just run the set-up (beside its plain-install check) and says so: not twice.
if [[ "${AUTOTUNE_TESTS_SET_UP:-}" != 1 ]]; then
    bash scripts/setup_tests.sh
fi
echo "run_tests: running the tests" >&2
exec "$PYTHON" -m pytest "$@"
