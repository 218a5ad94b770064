#!/usr/bin/env bash
# A PostgreSQL primary (127.0.0.1:5434) with a synchronous streaming hot standby
# (127.0.0.1:5435, made with pg_basebackup -R), two more clusters beside the main one,
# for the failover and read-replica tests (LOVIA_TEST_PG_STANDBY_URLS).
#   .ci/pg-standby.sh start     creates and starts both, waits until the standby streams
#   .ci/pg-standby.sh stop      stops and drops both, removes their folder
#   .ci/pg-standby.sh restart   stop, then start (a failover test leaves the pair promoted)
set -euo pipefail
DIR=/tmp/lovia-store-ci-pgpair
VERSION=$(ls /etc/postgresql | sort -V | tail -1)
PRIMARY=lovia_primary
STANDBY=lovia_standby
PRIMARY_PORT=5434
STANDBY_PORT=5435

ask() { psql -X -h 127.0.0.1 -p "$1" -U postgres -d postgres -Atc "$2" 2>/dev/null; }

stop() {
  for cluster in $STANDBY $PRIMARY; do
    if pg_lsclusters -h | awk '{print $2}' | grep -qx $cluster; then
      pg_ctlcluster --skip-systemctl-redirect "$VERSION" $cluster stop -m immediate 2>/dev/null || true
      pg_dropcluster "$VERSION" $cluster 2>/dev/null || true
    fi
  done
  rm -rf "$DIR"
  # A postmaster killed with SIGKILL (the failover test) leaves its socket's lock file,
  # naming its PID. Until PID 1 reaps it (a second or two here) that PID is a zombie, and
  # this machine's PIDs wrap at 32768, so it may soon be another postgres process's: either
  # way a new server on the port takes the file for a live server's and refuses to start.
  # Nothing answers on the port now: the file is stale.
  local port code
  for port in $PRIMARY_PORT $STANDBY_PORT; do
    code=0
    pg_isready -h 127.0.0.1 -p "$port" -q || code=$?
    if [ "$code" = 2 ]; then
      rm -f "/var/run/postgresql/.s.PGSQL.$port" "/var/run/postgresql/.s.PGSQL.$port.lock"
    fi
  done
}

start() {
  if [ "$(ask $STANDBY_PORT 'SELECT pg_is_in_recovery()')" = t ] &&
    [ "$(ask $PRIMARY_PORT "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$STANDBY'")" = sync ]; then
    exit 0
  fi
  stop
  mkdir -p "$DIR" && chown postgres:postgres "$DIR"
  pg_createcluster "$VERSION" $PRIMARY -p $PRIMARY_PORT -d "$DIR/primary" -- --auth=trust >/dev/null
  cat >> "/etc/postgresql/$VERSION/$PRIMARY/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 10
synchronous_standby_names = '$STANDBY'
synchronous_commit = on
max_connections = 200
fsync = on
CONF
  echo "host replication all 127.0.0.1/32 trust" >> "/etc/postgresql/$VERSION/$PRIMARY/pg_hba.conf"
  pg_ctlcluster --skip-systemctl-redirect "$VERSION" $PRIMARY start
  # No standby yet to confirm it: this one commit waits only for the primary's own flush.
  PGOPTIONS='-c synchronous_commit=local' ask $PRIMARY_PORT 'CREATE DATABASE test' >/dev/null
  pg_createcluster "$VERSION" $STANDBY -p $STANDBY_PORT -d "$DIR/standby" -- --auth=trust >/dev/null
  cat >> "/etc/postgresql/$VERSION/$STANDBY/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
hot_standby = on
max_connections = 200
CONF
  echo "host replication all 127.0.0.1/32 trust" >> "/etc/postgresql/$VERSION/$STANDBY/pg_hba.conf"
  rm -rf "$DIR/standby" && install -d -o postgres -g postgres -m 700 "$DIR/standby"
  su postgres -c "pg_basebackup -d 'host=127.0.0.1 port=$PRIMARY_PORT user=postgres application_name=$STANDBY' -D $DIR/standby -R -X stream -c fast"
  pg_ctlcluster --skip-systemctl-redirect "$VERSION" $STANDBY start
  for _ in $(seq 1 60); do
    [ "$(ask $PRIMARY_PORT "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$STANDBY'")" = sync ] && exit 0
    sleep 0.5
  done
  echo "the standby on $STANDBY_PORT did not start streaming synchronously" >&2
  exit 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
restart) stop && start ;;
*)
  echo "usage: $0 start|stop|restart" >&2
  exit 2
  ;;
esac
