#!/usr/bin/env bash
# Install NVIDIA's perf_analyzer (the C++ binary) under .cache/perf_analyzer and print the path
# of a wrapper that runs it.
#
# - venv/: a dedicated virtual environment with tritonclient[all]==2.51.0 (its wheel ships
#   bin/perf_analyzer; newer wheels need glibc >= 2.38) and nvidia-cuda-runtime-cu12
#   (libcudart.so.12, which the binary links even when no GPU is used).
# - libb64/: Debian's libb64-0d package (libb64.so.0d), fetched with `apt-get download` and
#   unpacked with `dpkg-deb -x`; no root needed.
# - debs/: any other shared library the binary needs that this machine lacks (zlib, OpenSSL,
#   libstdc++, libgcc), from Debian packages in the same way.
# - bin/perf_analyzer: sets LD_LIBRARY_PATH and execs the real binary with "$@".
#
# Idempotent: a second run only checks that the wrapper resolves every library and exits.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.cache/perf_analyzer"
VENV="$DEST/venv"
WRAPPER="$DEST/bin/perf_analyzer"
STAMP="$DEST/.installed"
TRITONCLIENT="tritonclient[all]==2.51.0"
CUDART="nvidia-cuda-runtime-cu12==12.9.79"
STAMP_TEXT="$TRITONCLIENT $CUDART libb64-0d wrapper-v1"
PYTHON="${PYTHON:-python3}"

log() { echo "install_perf_analyzer: $*" >&2; }

# Libraries the wrapper's environment cannot resolve ("not found" lines of ldd).
missing_libraries() {
    LD_LIBRARY_PATH="$(library_path)" ldd "$VENV/bin/perf_analyzer" \
        | awk '/not found/ {print $1}'
}

library_path() {
    local dirs=()
    local d
    for d in "$DEST"/libb64/usr/lib/x86_64-linux-gnu "$DEST"/debs/usr/lib/x86_64-linux-gnu \
        "$DEST"/debs/lib/x86_64-linux-gnu "$VENV"/lib/python3*/site-packages/nvidia/cuda_runtime/lib
    do
        [[ -d "$d" ]] && dirs+=("$d")
    done
    local IFS=:
    echo "${dirs[*]}"
}

if [[ -x "$WRAPPER" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" \
    && -x "$VENV/bin/perf_analyzer" && -z "$(missing_libraries)" ]]; then
    echo "$WRAPPER"
    exit 0
fi

mkdir -p "$DEST/bin"
rm -f "$STAMP"

# 1. The venv with tritonclient (perf_analyzer) and the CUDA runtime library.
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
log "installing $TRITONCLIENT $CUDART"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$TRITONCLIENT" "$CUDART"
if [[ ! -x "$VENV/bin/perf_analyzer" ]]; then
    log "the tritonclient wheel did not provide bin/perf_analyzer"
    exit 1
fi

# Download a Debian package (apt-get update first only if the download fails) and unpack it.
fetch_deb() {
    local package="$1" target="$2"
    local work
    work="$(mktemp -d)"
    log "fetching Debian package $package"
    if ! (cd "$work" && apt-get download -q -o APT::Sandbox::User=root "$package" >&2); then
        log "apt-get download $package failed; running apt-get update and retrying"
        apt-get update -q >&2
        (cd "$work" && apt-get download -q -o APT::Sandbox::User=root "$package" >&2)
    fi
    mkdir -p "$target"
    dpkg-deb -x "$work"/"$package"_*.deb "$target"
    rm -rf "$work"
}

# 2. libb64 from Debian.
if [[ ! -e "$DEST/libb64/usr/lib/x86_64-linux-gnu/libb64.so.0d" ]]; then
    rm -rf "$DEST/libb64"
    fetch_deb libb64-0d "$DEST/libb64"
fi

# 3. Whatever else the binary needs and this machine lacks, from the Debian package that ships it.
debian_package_of() {
    case "$1" in
        libz.so.1) echo zlib1g ;;
        libssl.so.3 | libcrypto.so.3) echo libssl3 ;;
        libstdc++.so.6) echo libstdc++6 ;;
        libgcc_s.so.1) echo libgcc-s1 ;;
        libb64.so.0d) echo libb64-0d ;;
        *) return 1 ;;
    esac
}

declare -A fetched=()
for library in $(missing_libraries); do
    if ! package="$(debian_package_of "$library")"; then
        log "perf_analyzer needs $library and no package is known to provide it"
        exit 1
    fi
    if [[ -z "${fetched[$package]:-}" ]]; then
        fetch_deb "$package" "$DEST/debs"
        fetched[$package]=1
    fi
done
still_missing="$(missing_libraries)"
if [[ -n "$still_missing" ]]; then
    log "still missing after installation: $still_missing"
    exit 1
fi

# 4. The wrapper: relocatable (finds everything relative to itself).
cat >"$WRAPPER" <<'EOF'
#!/usr/bin/env bash
# Runs NVIDIA's perf_analyzer from .cache/perf_analyzer (scripts/install_perf_analyzer.sh).
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
dirs=""
for d in "$here"/libb64/usr/lib/x86_64-linux-gnu "$here"/debs/usr/lib/x86_64-linux-gnu \
    "$here"/debs/lib/x86_64-linux-gnu "$here"/venv/lib/python3*/site-packages/nvidia/cuda_runtime/lib
do
    [[ -d "$d" ]] && dirs="$dirs${dirs:+:}$d"
done
export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$here/venv/bin/perf_analyzer" "$@"
EOF
chmod +x "$WRAPPER"

if ! version="$("$WRAPPER" --version 2>&1)"; then
    log "the wrapper does not run: $version"
    exit 1
fi
log "$version"
echo "$STAMP_TEXT" >"$STAMP"
log "installed"
echo "$WRAPPER"
