#!/usr/bin/env bash
# A three-node MariaDB Galera cluster on loopback, for the multi-primary tests
# (LOVIA_TEST_GALERA_URLS): SQL ports 3311-3313, group communication 4571/4581/4591,
# rsync state transfer; node 1 bootstraps, nodes 2 and 3 join it.
#   .ci/galera.sh start   installs rsync if missing, starts the nodes, waits until all are Synced
#   .ci/galera.sh stop    stops the nodes it started (by their pid files), removes their folders
set -euo pipefail
DIR=/tmp/lovia-store-ci-galera

write_cnf() {
  local n=$1 x=$((6 + $1))
  mkdir -p "$DIR/n$n"
  cat > "$DIR/n$n.cnf" <<CNF
[mysqld]
datadir=$DIR/n$n/data
socket=$DIR/n$n/mysqld.sock
pid-file=$DIR/n$n/mysqld.pid
port=331$n
bind-address=127.0.0.1
log-error=$DIR/n$n/error.log
user=mysql
skip-name-resolve
innodb_buffer_pool_size=64M
max_connections=300
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_flush_log_at_trx_commit=2
wsrep_on=ON
wsrep_provider=/usr/lib/galera/libgalera_smm.so
wsrep_cluster_name=lovia_store_ci
wsrep_cluster_address=gcomm://127.0.0.1:4571,127.0.0.1:4581,127.0.0.1:4591
wsrep_node_address=127.0.0.1:45${x}1
wsrep_node_name=n$n
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:45${x}1;ist.recv_addr=127.0.0.1:45${x}8"
wsrep_sst_receive_address=127.0.0.1:45${x}9
wsrep_sst_method=rsync
[client]
socket=$DIR/n$n/mysqld.sock
CNF
}

synced() {
  local state
  state=$(mariadb -h 127.0.0.1 -P "331$1" -u root -N -e \
    "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | awk '{print $2}') || return 1
  [ "$state" = "Synced" ]
}

start_node() {
  local n=$1; shift
  nohup mariadbd --defaults-file="$DIR/n$n.cnf" "$@" > "$DIR/n$n/stdout.log" 2>&1 &
  for _ in $(seq 1 120); do
    synced "$n" && return 0
    sleep 1
  done
  echo "Galera node $n did not come up" >&2
  tail -30 "$DIR/n$n/error.log" >&2 || true
  return 1
}

case "${1:-}" in
start)
  command -v rsync >/dev/null || {
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q rsync
  }
  if synced 1 && synced 2 && synced 3; then exit 0; fi
  for n in 1 2 3; do
    write_cnf "$n"
    if [ ! -d "$DIR/n$n/data/mysql" ]; then
      mkdir -p "$DIR/n$n/data"
      chown -R mysql:mysql "$DIR/n$n"
      mariadb-install-db --defaults-file="$DIR/n$n.cnf" --datadir="$DIR/n$n/data" \
        --user=mysql --auth-root-authentication-method=normal >/dev/null 2>&1
    fi
    chown -R mysql:mysql "$DIR/n$n"
  done
  start_node 1 --wsrep-new-cluster
  start_node 2
  start_node 3
  ;;
restart-node)
  # Bring a node a test killed back into the cluster (IST or SST from the others).
  start_node "$2"
  ;;
stop)
  for n in 3 2 1; do
    if [ -f "$DIR/n$n/mysqld.pid" ]; then
      kill "$(cat "$DIR/n$n/mysqld.pid")" 2>/dev/null || true
    fi
  done
  for n in 3 2 1; do
    for _ in $(seq 1 30); do
      [ -f "$DIR/n$n/mysqld.pid" ] && kill -0 "$(cat "$DIR/n$n/mysqld.pid")" 2>/dev/null || break
      sleep 1
    done
  done
  rm -rf "$DIR"
  ;;
*)
  echo "usage: $0 start|stop|restart-node N" >&2
  exit 2
  ;;
esac
