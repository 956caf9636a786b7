#!/usr/bin/env bash
# Wheels for a machine without network access (an air-gapped GPU host, say): the server's
# dependencies and the GPU tests', resolved for that machine's Python and platform, minus the
# packages it already has.
#
#   scripts/offline_wheels.sh PRESENT OUTDIR [PYTHON_VERSION]
#
# PRESENT: that machine's `python3 -m pip freeze` (or a list of names, one per line): packages
# named there are not fetched. PYTHON_VERSION: that machine's, e.g. 3.12 (default). Run on a
# machine with network; then, on the target:
#   python3 -m pip install --no-index --no-deps --target /tmp/site OUTDIR/*.whl
#   export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
present="${1:?usage: offline_wheels.sh PRESENT OUTDIR [PYTHON_VERSION]}"
out="${2:?the folder for the wheels}"
python_version="${3:-3.12}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"

mkdir -p "$out"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# What `serve`, `analyzer`, the tuner (scripts/gpu_check.sh tunes) and tests/gpu import;
# cuda-python comes with tritonclient's `cuda` extra (CUDA shared memory), when the target
# lacks it.
"$PYTHON" -m pip download --quiet --only-binary=:all: --dest "$scratch" \
    --python-version "$python_version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    "tritonclient[http,grpc,cuda]>=2.40" \
    "uvicorn[standard]>=0.29" "httptools>=0.6" "orjson>=3.9" "hpack>=4.0" \
    "optuna>=5.0" "sqlalchemy>=2.1" "plotly>=5.18" "rich>=13" "click>=8.1" \
    "pytest-timeout>=2.2"

# Copy the wheels whose project (PEP 503-normalised) the target does not have.
"$PYTHON" - "$present" "$scratch" "$out" <<'PY'
import re
import shutil
import sys
from pathlib import Path

present, scratch, out = sys.argv[1:]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


have = {
    normalise(re.split(r"[\s=<>!~;@\[]", line.strip(), maxsplit=1)[0])
    for line in Path(present).read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
kept = [w for w in sorted(Path(scratch).glob("*.whl")) if normalise(w.name.split("-")[0]) not in have]
for wheel in kept:
    shutil.copy(wheel, out)
size = sum(w.stat().st_size for w in kept) / 2**20
print(f"offline_wheels: {len(kept)} wheels, {size:.1f} MiB, in {out}; the target has the rest")
PY
