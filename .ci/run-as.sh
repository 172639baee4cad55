#!/usr/bin/env bash
# Sourced by .ci/postgres.sh and .ci/pgbouncer-tls.sh: who their server runs as. Postgres and
# PgBouncer refuse to run as root, so as root it is `nobody` (override with AVA_PG_USER);
# otherwise the caller. Defines RUN_AS and `as_server CMD...`, which runs CMD as that user.
if [ "$(id -u)" = 0 ]; then
    RUN_AS="${AVA_PG_USER:-nobody}"
    as_server() { runuser -u "$RUN_AS" -- "$@"; }
else
    RUN_AS="$(id -un)"
    as_server() { "$@"; }
fi
