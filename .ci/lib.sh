#!/usr/bin/env bash
# Sourced by .ci/postgres.sh and .ci/pgbouncer-tls.sh. `log MESSAGE` writes a line to stderr
# naming the script. Postgres and PgBouncer refuse to run as root, so as root their servers run
# as `nobody` (override with AVA_PG_USER), otherwise as the caller: RUN_AS is that user and
# `as_server CMD...` runs CMD as them.
log() { printf '%s\n' "$(basename "$0"): $*" >&2; }

if [ "$(id -u)" = 0 ]; then
    RUN_AS="${AVA_PG_USER:-nobody}"
    as_server() { runuser -u "$RUN_AS" -- "$@"; }
else
    RUN_AS="$(id -un)"
    as_server() { "$@"; }
fi
