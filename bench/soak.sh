#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Soak test (not part of CI): a throwaway PostgreSQL 15 primary and a
# streaming replica, pgcat (workers = 2, transaction mode, query parser on)
# in front, mixed pgbench traffic for SOAK_MINUTES (default 30): TPC-B-like
# writes and select-only reads (extended protocol) plus select-only reads
# with --protocol prepared. Every minute: RELOAD, and the replica banned for
# 20 s through the admin console; and a line with pgcat's RSS (all its
# processes), open descriptors, server connections and the error lines
# pgbench printed so far. Flat RSS/fds and zero errors is the pass.
#
#   sudo bench/soak.sh                 # 30 minutes
#   sudo SOAK_MINUTES=5 bench/soak.sh  # a shorter run
# PGCAT_BIN: binary to use (default: build the repository's HEAD, -O2 -g).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
MINUTES=${SOAK_MINUTES:-30}
PGBIN=/usr/lib/postgresql/15/bin
[ "$(id -u)" = 0 ] || { echo "soak.sh: run as root (servers run as user postgres)" >&2; exit 1; }
TMP=$(mktemp -d /dev/shm/pgcat-soak.XXXXXX)
chmod 755 "$TMP"
chown postgres: "$TMP"
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 1
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	[ "${SOAK_KEEP:-0}" = 1 ] || rm -rf "$TMP"
}
trap cleanup EXIT
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
read -r PGPORT REPPORT CATPORT <<<"$(python3 "$HERE/bench.py" freeports 3)"

if [ -z "${PGCAT_BIN:-}" ]; then
	echo "== building pgcat (-O2 -g) from $(git -C "$REPO" rev-parse --short HEAD)"
	git clone -q "$REPO" "$TMP/src"
	(cd "$TMP/src" && ./autogen.sh && ./configure CFLAGS="-O2 -g" && make -j"$(nproc)") >"$TMP/build.log" 2>&1 ||
		{ tail -30 "$TMP/build.log"; exit 1; }
	PGCAT_BIN=$TMP/src/pgcat
fi

echo "== primary on $PGPORT, replica on $REPPORT (data in $TMP)"
echo soak >"$TMP/pwfile"
chown postgres: "$TMP/pwfile"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/primary" -U postgres -A scram-sha-256 --pwfile="$TMP/pwfile" --no-sync \
	>"$TMP/initdb.log" 2>&1
cat >>"$TMP/primary/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TMP'
max_connections = 300
fsync = off
synchronous_commit = off
wal_level = replica
EOF
echo "host replication postgres 127.0.0.1/32 scram-sha-256" >>"$TMP/primary/pg_hba.conf"
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/primary" >"$TMP/primary.log" 2>&1 &
PIDS+=("$!")
export PGPASSWORD=soak
for _ in $(seq 100); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
	-c "CREATE ROLE soak LOGIN PASSWORD 'soak'" -c "CREATE DATABASE soak OWNER soak"
pgbench -i -q -s 5 -h 127.0.0.1 -p "$PGPORT" -U soak soak >"$TMP/init.log" 2>&1
"${AS_PG[@]}" env PGPASSWORD=soak "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PGPORT" -U postgres -D "$TMP/replica" \
	-R -X stream -c fast --no-sync
cat >>"$TMP/replica/postgresql.conf" <<EOF
port = $REPPORT
EOF
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/replica" >"$TMP/replica.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$REPPORT" && break; sleep 0.1; done

cat >"$TMP/pgcat.ini" <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = $CATPORT
unix_socket_dir =
workers = 2
pool_mode = transaction
default_pool_size = 10
max_client_conn = 1000
log_level = warning
admin_username = admin
admin_password = adminpw
healthcheck_delay = 1000
ban_time = 60
[pools.soak]
query_parser_enabled = true
primary_reads_enabled = false
[pools.soak.shards.0]
database = soak
servers = 127.0.0.1:$PGPORT:primary, 127.0.0.1:$REPPORT:replica
[pools.soak.users.soak]
password = soak
EOF
chown postgres: "$TMP/pgcat.ini"
"${AS_PG[@]}" bash -c "ulimit -n 65536 2>/dev/null; exec $PGCAT_BIN $TMP/pgcat.ini" >"$TMP/pgcat.log" 2>&1 &
CAT=$!
PIDS+=("$CAT")
for _ in $(seq 100); do psql -h 127.0.0.1 -p "$CATPORT" -U soak -d soak -Atc 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done

admin() { PGPASSWORD=adminpw psql -h 127.0.0.1 -p "$CATPORT" -U admin -d pgcat -Atc "$1" 2>&1; }
tree() { # pgcat and its worker processes
	echo "$CAT"
	ps -o pid= --ppid "$CAT" 2>/dev/null | tr -d ' '
}
rss_kb() { local t=0; for p in $(tree); do t=$((t + $(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo $t; }
fds() { local t=0; for p in $(tree); do t=$((t + $(ls "/proc/$p/fd" 2>/dev/null | wc -l))); done; echo $t; }
errors() { cat "$TMP"/pgbench-*.log 2>/dev/null | grep -ci "error" || true; }

SECS=$((MINUTES * 60))
echo "== $MINUTES minutes of traffic through pgcat on $CATPORT"
pgbench -n -h 127.0.0.1 -p "$CATPORT" -U soak -c 20 -j 2 -T "$SECS" -M extended \
	-b tpcb-like@2 -b select-only@8 -P 60 soak >"$TMP/pgbench-mixed.log" 2>&1 &
B1=$!
pgbench -n -h 127.0.0.1 -p "$CATPORT" -U soak -c 10 -j 1 -T "$SECS" -M prepared -S -P 60 soak \
	>"$TMP/pgbench-prepared.log" 2>&1 &
B2=$!
printf '%-6s %10s %6s %8s %7s  %s\n' minute rss_kB fds servers errors actions
for m in $(seq 1 "$MINUTES"); do
	sleep 60
	r=$(admin "RELOAD" | tr '\n' ' ')
	b=$(admin "BAN 127.0.0.1:$REPPORT 20" | tr '\n' ' ')
	srv=$(admin "SHOW SERVERS" | wc -l)
	printf '%-6s %10s %6s %8s %7s  reload:%s ban:%s\n' "$m" "$(rss_kb)" "$(fds)" "$srv" "$(errors)" "${r:-ok}" "${b:-ok}"
done
wait "$B1" || true
wait "$B2" || true
echo "== pgbench (mixed, extended protocol)"
grep -E "processed|failed|tps =" "$TMP/pgbench-mixed.log" || true
echo "== pgbench (select-only, prepared)"
grep -E "processed|failed|tps =" "$TMP/pgbench-prepared.log" || true
echo "== pgbench error lines: $(errors)"
grep -i error "$TMP"/pgbench-*.log | head -5 || true
kill -0 "$CAT" 2>/dev/null && echo "pgcat alive at the end" || echo "pgcat DIED"
