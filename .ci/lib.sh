#!/usr/bin/env bash
# Sourced by .ci/postgres.sh and .ci/pgbouncer-tls.sh. `log MESSAGE` writes a line to stderr
# naming the script; `main "$@"` runs the script's `start` or `stop` as its argument says. Postgres and PgBouncer refuse to run as root, so as root their servers run
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

main() {
    case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *)
        echo "usage: $0 start|stop" >&2
        exit 2
        ;;
    esac
}
