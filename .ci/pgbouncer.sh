#!/usr/bin/env bash
# PgBouncer in transaction mode on 127.0.0.1:6432, in front of the PostgreSQL on 5432,
# for the tests that run through a transaction pooler (LOVIA_TEST_PGBOUNCER_URL).
#   .ci/pgbouncer.sh start   installs pgbouncer if missing, starts it, waits until it answers
#   .ci/pgbouncer.sh stop    stops the one it started (by its pid file), removes its folder
set -euo pipefail
DIR=/tmp/lovia-store-ci-pgbouncer
PORT=${LOVIA_CI_PGBOUNCER_PORT:-6432}

case "${1:-}" in
start)
  command -v pgbouncer >/dev/null || {
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer
  }
  mkdir -p "$DIR"
  cat > "$DIR/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=5432
# One server connection: two clients of it meet each other's prepared statements (test_pooler.py).
lovia_pooler_probe = host=127.0.0.1 port=5432 dbname=lovia_pooler_probe pool_size=1
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir = $DIR
auth_type = trust
auth_file = $DIR/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 4
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
INI
  # trust still admits only the users listed here: lovia_rls_app is the role
  # tests/test_tenant_rls.py holds to one tenant by row-level security (not an owner).
  printf '"postgres" ""\n"lovia_rls_app" ""\n' > "$DIR/userlist.txt"
  chown -R postgres:postgres "$DIR"
  if [ -f "$DIR/pgbouncer.pid" ] && kill -0 "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null; then
    kill -HUP "$(cat "$DIR/pgbouncer.pid")"  # running already: reread the user list
    exit 0
  fi
  # pgbouncer refuses to run as root.
  su postgres -s /bin/sh -c "pgbouncer -d $DIR/pgbouncer.ini"
  for _ in $(seq 1 30); do
    psql -X -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1 && exit 0
    sleep 1
  done
  echo "PgBouncer did not come up on $PORT" >&2
  cat "$DIR/pgbouncer.log" >&2 || true
  exit 1
  ;;
stop)
  if [ -f "$DIR/pgbouncer.pid" ]; then
    kill "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null || true
  fi
  rm -rf "$DIR"
  ;;
*)
  echo "usage: $0 start|stop" >&2
  exit 2
  ;;
esac
