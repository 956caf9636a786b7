#!/usr/bin/env bash
# A private PostgreSQL server for the tuner's study, so that several `autotune` workers can
# share one study (`--storage URL`):
#
#   scripts/postgres.sh start DIR [PORT]   create the server in DIR (first time), start it on
#                                          127.0.0.1:PORT (default: a free port; a restart keeps
#                                          the last one), print the storage URL
#   scripts/postgres.sh url DIR            print the storage URL of the server in DIR
#   scripts/postgres.sh stop DIR           stop the server in DIR (its data stays there)
#   scripts/postgres.sh install            install Debian's postgresql package when missing
#
# Debian's postgresql package is installed with apt-get when its programs are missing (sudo when
# not root). The server listens on 127.0.0.1 only (no Unix socket) and trusts connections from
# there: any local user may open the study, nobody else can reach it. PostgreSQL refuses to run as
# root, so as root it runs as the package's `postgres` user, which then owns DIR: DIR must be
# reachable by that user (not under a private folder such as /root). $PG_BIN, when set, names the
# folder of the server's programs (initdb, pg_ctl, postgres).
set -euo pipefail

DATABASE=autotune
ROLE=autotune

log() { echo "postgres.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}
usage() { die "usage: $0 start DIR [PORT] | stop DIR | url DIR | install"; }

server_bin() {
    if [[ -n "${PG_BIN:-}" ]]; then
        [[ -x "$PG_BIN/pg_ctl" ]] || die "PG_BIN=$PG_BIN holds no pg_ctl"
        echo "$PG_BIN"
        return
    fi
    local newest
    newest="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    if [[ -n "$newest" && -x "$newest/pg_ctl" ]]; then
        echo "$newest"
    elif command -v pg_ctl >/dev/null; then
        dirname "$(command -v pg_ctl)"
    fi
}

as_root() {
    if [[ "$(id -u)" == 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        die "PostgreSQL is missing: run 'apt-get install postgresql' as root, then this again"
    fi
}

install_server() {
    [[ -n "$(server_bin)" ]] && return
    log "installing Debian's postgresql package"
    as_root apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q postgresql >/dev/null
    [[ -n "$(server_bin)" ]] || die "apt-get installed postgresql, yet no pg_ctl was found"
    # The package may start a cluster of its own on port 5432; this script's servers are
    # separate, so stop what the installation just started.
    if command -v pg_lsclusters >/dev/null; then
        pg_lsclusters --no-header 2>/dev/null | while read -r version name _ status _; do
            if [[ "$status" == online* ]]; then
                as_root pg_ctlcluster "$version" "$name" stop || true
            fi
        done
    fi
}

# Runs a server program as the user that owns the data: `postgres` when we are root.
as_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        id postgres >/dev/null 2>&1 ||
            die "running as root needs the 'postgres' user (Debian's postgresql package makes it)"
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

configured_port() {
    local conf="$1/data/postgresql.conf"
    [[ -f "$conf" ]] || die "$1 holds no server made by this script (no data/postgresql.conf)"
    sed -n 's/^port = \([0-9][0-9]*\).*/\1/p' "$conf" | tail -n 1
}

print_url() {
    local port
    port="$(configured_port "$1")"
    echo "postgresql://$ROLE@127.0.0.1:$port/$DATABASE"
}

start() {
    local dir="$1" port="${2:-}" bin
    [[ -z "$port" || "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$port'"
    install_server
    bin="$(server_bin)"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if [[ "$(id -u)" == 0 ]]; then
        chown postgres: "$dir"
    fi
    chmod 700 "$dir"
    as_owner test -w "$dir" ||
        die "$dir is not writable by user '$(as_owner id -un)': a folder above it is private"
    if [[ ! -f "$dir/data/PG_VERSION" ]]; then
        log "creating a server in $dir/data"
        as_owner "$bin/initdb" --pgdata="$dir/data" --username="$ROLE" --auth=trust \
            --encoding=UTF8 --no-instructions >"$dir/initdb.log" 2>&1 ||
            die "initdb failed: see $dir/initdb.log"
        as_owner tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF
# written by scripts/postgres.sh: loopback TCP only, no Unix socket
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
EOF
        port="${port:-$(free_port)}"
    fi
    if [[ -n "$port" ]]; then
        echo "port = $port" | as_owner tee -a "$dir/data/postgresql.conf" >/dev/null
    fi
    port="$(configured_port "$dir")"
    [[ -n "$port" ]] || die "$dir/data/postgresql.conf names no port"
    if ! as_owner "$bin/pg_ctl" status --pgdata="$dir/data" >/dev/null 2>&1; then
        as_owner "$bin/pg_ctl" start --pgdata="$dir/data" --log="$dir/data/server.log" \
            --wait --timeout=60 >/dev/null ||
            die "the server did not start on 127.0.0.1:$port: see $dir/data/server.log"
    fi
    if ! as_owner "$bin/psql" --host=127.0.0.1 --port="$port" --username="$ROLE" \
        --dbname=postgres --tuples-only --no-align \
        --command="SELECT 1 FROM pg_database WHERE datname = '$DATABASE'" | grep -q 1; then
        as_owner "$bin/createdb" --host=127.0.0.1 --port="$port" --username="$ROLE" "$DATABASE"
    fi
    print_url "$dir"
}

stop() {
    local dir="$1" bin
    [[ -f "$dir/data/PG_VERSION" ]] || die "$dir holds no server made by this script"
    bin="$(server_bin)"
    [[ -n "$bin" ]] || die "PostgreSQL's programs are missing: $0 install"
    if as_owner "$bin/pg_ctl" status --pgdata="$dir/data" >/dev/null 2>&1; then
        as_owner "$bin/pg_ctl" stop --pgdata="$dir/data" --mode=fast --wait --timeout=60 >/dev/null
    fi
}

case "${1:-}" in
start) [[ $# -ge 2 && $# -le 3 ]] || usage && start "$2" "${3:-}" ;;
stop) [[ $# -eq 2 ]] || usage && stop "$2" ;;
url) [[ $# -eq 2 ]] || usage && print_url "$2" ;;
install) [[ $# -eq 1 ]] || usage && install_server ;;
*) usage ;;
esac
