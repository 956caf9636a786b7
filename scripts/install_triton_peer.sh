#!/usr/bin/env bash
# Install NVIDIA Triton Inference Server 2.51 (CPU, python backend) under .cache/triton-peer, from
# PyPI only, as a local peer to measure against, and print the path of a wrapper that runs it.
#
# tritonserver 2.51.0 and its python backend ship inside the `nvidia-pytriton==0.7.0` wheel under
# pytriton/tritonserver/. The wheel is downloaded (not installed: the project's environment stays
# untouched) and unpacked:
# - server/bin/tritonserver, server/backends/, server/caches/: copied from the wheel;
#   server/backends/python/triton_python_backend_stub: the stub built for this Python.
# - lib/: the wheel's bundled shared libraries (nvidia_pytriton.libs).
# - stub-site/: numpy 1.26. That build of the python backend hands numpy 2 arrays over as 0-byte
#   outputs; the stub ignores PYTHONPATH and imports numpy before any model.py runs, but puts its
#   working directory first on sys.path, so the server runs in stub-site/.
# - bin/tritonserver: sets LD_LIBRARY_PATH (the wheel's libraries, then the folder holding this
#   Python's libpython, which the stub embeds; a system libpython of another patch level fails),
#   changes to stub-site/ (so give it absolute paths) and execs the server with
#   --backend-directory and --cache-directory set, then "$@".
#
# Idempotent: a second run only checks that every shared library still resolves.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.cache/triton-peer"
WRAPPER="$DEST/bin/tritonserver"
STAMP="$DEST/.installed"
PYTRITON="nvidia-pytriton==0.7.0"
NUMPY="numpy==1.26.4"
STAMP_TEXT="$PYTRITON $NUMPY wrapper-v2"
PYTHON="${PYTHON:-python3}"

log() { echo "install_triton_peer: $*" >&2; }

# Libraries the server, its python backend or the stub cannot resolve with the wrapper's
# LD_LIBRARY_PATH ("not found" lines of ldd; "missing" when a file itself is absent).
missing_libraries() {
    local library_path
    library_path="$(sed -n 's/^# library path: //p' "$WRAPPER" 2>/dev/null)"
    local file
    for file in server/bin/tritonserver server/backends/python/libtriton_python.so \
        server/backends/python/triton_python_backend_stub server/caches/local/libtritoncache_local.so
    do
        if [[ ! -f "$DEST/$file" ]]; then
            echo "missing:$file"
        else
            LD_LIBRARY_PATH="$library_path" ldd "$DEST/$file" | awk '/not found/ {print $1}'
        fi
    done
}

if [[ -x "$WRAPPER" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" \
    && -z "$(missing_libraries)" ]]; then
    echo "$WRAPPER"
    exit 0
fi

PY_VERSION="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
PY_LIBDIR="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
if [[ ! -e "$PY_LIBDIR/libpython$PY_VERSION.so.1.0" ]]; then
    log "the python backend stub embeds libpython$PY_VERSION.so.1.0; $PY_LIBDIR has none"
    log "(use a Python built with --enable-shared, e.g. PYTHON=/path/to/python3.11)"
    exit 1
fi

rm -f "$STAMP"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 1. The wheel, downloaded and unpacked (not installed).
log "downloading $PYTRITON"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps "$PYTRITON" -d "$work"
mkdir -p "$work/wheel"
"$PYTHON" -m zipfile -e "$work"/nvidia_pytriton-*.whl "$work/wheel"
source_dir="$work/wheel/pytriton/tritonserver"
stub="$source_dir/python_backend_stubs/$PY_VERSION/triton_python_backend_stub"
if [[ ! -f "$stub" ]]; then
    log "the wheel has no python backend stub for Python $PY_VERSION"
    exit 1
fi

# 2. Server, backends, caches and libraries into place.
rm -rf "$DEST/server" "$DEST/lib" "$DEST/stub-site"
mkdir -p "$DEST/server" "$DEST/bin"
cp -r "$source_dir/bin" "$source_dir/backends" "$source_dir/caches" "$DEST/server/"
cp "$stub" "$DEST/server/backends/python/"
cp -r "$work/wheel/nvidia_pytriton.libs" "$DEST/lib"
chmod +x "$DEST/server/bin/tritonserver" "$DEST/server/backends/python/triton_python_backend_stub"

# 3. numpy 1.26 in the server's working directory (first on the stub's sys.path).
log "installing $NUMPY for the python backend stub"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
    --target "$DEST/stub-site" "$NUMPY"

# 4. The wrapper: relocatable except for this Python's LIBDIR, recorded at install time.
cat >"$WRAPPER" <<WRAPPER_EOF
#!/usr/bin/env bash
# Runs tritonserver 2.51 from .cache/triton-peer (scripts/install_triton_peer.sh).
# library path: $DEST/lib:$PY_LIBDIR
set -euo pipefail
here="\$(cd "\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")/.." && pwd)"
export LD_LIBRARY_PATH="\$here/lib:$PY_LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
# The python backend stub puts its working directory first on sys.path: numpy 1.26 is there.
cd "\$here/stub-site"
exec "\$here/server/bin/tritonserver" --backend-directory "\$here/server/backends" \\
    --cache-directory "\$here/server/caches" "\$@"
WRAPPER_EOF
chmod +x "$WRAPPER"

still_missing="$(missing_libraries)"
if [[ -n "$still_missing" ]]; then
    log "unresolved with the wrapper's LD_LIBRARY_PATH: $still_missing"
    exit 1
fi
# --help exits 1; what matters is that it runs and prints its usage.
usage="$("$WRAPPER" --help 2>&1 || true)"
if [[ "$usage" != *"--model-repository"* ]]; then
    log "the wrapper does not run: $usage"
    exit 1
fi
log "installed tritonserver from $PYTRITON"
echo "$STAMP_TEXT" >"$STAMP"
echo "$WRAPPER"
