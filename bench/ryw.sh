#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/ryw.sh — what read_your_writes = lsn costs (doc/replicas.md).
#
# Starts a throwaway PostgreSQL 15 primary and a streaming replica of it
# (pg_basebackup, data under /dev/shm), one pgcat (workers = 1, transaction
# mode) with two pools over the same two servers that differ only in
# read_your_writes: ryw_off (off) and ryw_lsn (lsn). pgbench's tables
# (scale RYW_SCALE) are made on the primary. Then, for each workload, pgbench
# runs RYW_SECONDS against each pool, RYW_REPEATS times, interleaved
# off lsn off lsn ..., and the script prints the median tps of each pool and
# the lsn/off ratio:
#
#   read   SELECT abalance FROM pgbench_accounts WHERE aid = :aid
#          (reads only: the lsn pool looks at the lag monitor's figures and
#          pays nothing else)
#   write  BEGIN; UPDATE pgbench_accounts ... WHERE aid = :aid; END;
#          (each transaction writes: the lsn pool asks the primary's WAL
#          position after each, one extra round trip)
#   ryw    UPDATE ... WHERE aid = :aid; SELECT abalance ... WHERE aid = :aid;
#          (autocommit write, then the read that wants to see it: with lsn
#          the read waits for the position and goes to the primary while the
#          replica lags)
#
# Usage (as root: the servers run as OS user postgres):
#   bench/ryw.sh
# Environment:
#   RYW_BIN=/path/pgcat   the binary (default: ./pgcat of this checkout, else
#                         build-asan/pgcat; an optimised build is what to
#                         measure)
#   RYW_WORKLOADS="read write ryw"  RYW_CLIENTS=4  RYW_SECONDS=10
#   RYW_REPEATS=3  RYW_SCALE=1  RYW_PROTOCOL=simple (or extended)
#   RYW_OUT=dir   results (log.txt, results.txt); default
#                 bench/results/<UTC date>-ryw
# Everything it starts is stopped by PID on exit; nothing is left behind.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PY=python3
WORKLOADS=${RYW_WORKLOADS:-read write ryw}
CLIENTS=${RYW_CLIENTS:-4}
SECS=${RYW_SECONDS:-10}
REPEATS=${RYW_REPEATS:-3}
SCALE=${RYW_SCALE:-1}
PROTOCOL=${RYW_PROTOCOL:-simple}
OUT=${RYW_OUT:-$REPO/bench/results/$(date -u +%Y-%m-%d)-ryw}
BIN=${RYW_BIN:-}
if [ -z "$BIN" ]; then
	if [ -x "$REPO/pgcat" ]; then BIN=$REPO/pgcat; else BIN=$REPO/build-asan/pgcat; fi
fi

[ "$(id -u)" = 0 ] || { echo "ryw.sh: run as root (servers are started as user postgres)" >&2; exit 1; }
for b in "$PGBIN/postgres" "$PGBIN/initdb" "$PGBIN/pg_basebackup" "$PGBIN/pg_isready" pgbench psql setpriv "$BIN"; do
	command -v "$b" >/dev/null || { echo "ryw.sh: missing $b" >&2; exit 1; }
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/log.txt") 2>&1
TMP=$(mktemp -d /dev/shm/pgcat-ryw.XXXXXX)
chmod 755 "$TMP"
chown postgres: "$TMP"
PIDS=()   # started daemons, stopped in reverse order on exit

cleanup() {
	local rc=$? i pid
	trap - EXIT INT TERM
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -INT "${PIDS[i]}" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [ $rc != 0 ]; then echo "ryw.sh: logs kept in $TMP" >&2; rm -rf "$TMP/primary" "$TMP/replica"
	else rm -rf "$TMP"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# "${AS_PG[@]}" cmd & makes $! the daemon's own PID (setpriv execs it).
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
read -r P_PORT R_PORT PGCAT_PORT <<<"$($PY "$HERE/bench.py" freeports 3)"
export PGPASSWORD=bench

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "command: RYW_WORKLOADS=\"$WORKLOADS\" RYW_CLIENTS=$CLIENTS RYW_SECONDS=$SECS RYW_REPEATS=$REPEATS RYW_SCALE=$SCALE RYW_PROTOCOL=$PROTOCOL bench/ryw.sh"
	echo "pgcat: $BIN ($("$BIN" --version 2>&1 | head -1)) at $(git -C "$REPO" rev-parse --short HEAD)"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "postgresql: $("$PGBIN/postgres" --version)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

wait_pg() { for _ in $(seq 200); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$1" && return 0; sleep 0.1; done; return 1; }

echo bench >"$TMP/pwfile"
chown postgres: "$TMP/pwfile"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/primary" -U postgres -A scram-sha-256 --pwfile="$TMP/pwfile" \
	-E UTF8 --no-sync >"$TMP/initdb.log" 2>&1
cat >>"$TMP/primary/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $P_PORT
unix_socket_directories = '$TMP'
max_connections = 200
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = replica
max_wal_senders = 4
hot_standby = on
logging_collector = off
log_min_messages = warning
EOF
echo "host replication postgres 127.0.0.1/32 scram-sha-256" >>"$TMP/primary/pg_hba.conf"
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/primary" >"$TMP/primary.log" 2>&1 &
PIDS+=("$!")
wait_pg "$P_PORT"
psql -q -h 127.0.0.1 -p "$P_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
	-c "CREATE ROLE bench LOGIN PASSWORD 'bench'" -c "CREATE DATABASE bench OWNER bench"
pgbench -q -i -s "$SCALE" -h 127.0.0.1 -p "$P_PORT" -U bench bench >"$TMP/pgbench-init.log" 2>&1

"${AS_PG[@]}" env PGPASSWORD=bench "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$P_PORT" -U postgres \
	-D "$TMP/replica" -R -X stream -c fast --no-sync
sed -i "s/^port = .*/port = $R_PORT/" "$TMP/replica/postgresql.conf"
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/replica" >"$TMP/replica.log" 2>&1 &
PIDS+=("$!")
wait_pg "$R_PORT"

{
	cat <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = $PGCAT_PORT
unix_socket_dir =
workers = 1
pool_mode = transaction
default_pool_size = 10
log_level = warning
log_connections = false
log_disconnections = false
auth_type = md5
EOF
	for mode in off lsn; do
		cat <<EOF
[pools.ryw_$mode]
read_your_writes = $mode
primary_reads_enabled = false
[pools.ryw_$mode.shards.0]
database = bench
servers = 127.0.0.1:$P_PORT:primary, 127.0.0.1:$R_PORT:replica
[pools.ryw_$mode.users.bench]
password = bench
pool_size = 10
EOF
	done
} >"$TMP/pgcat.ini"
chown postgres: "$TMP/pgcat.ini"
"${AS_PG[@]}" "$BIN" "$TMP/pgcat.ini" >"$TMP/pgcat.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do
	psql -h 127.0.0.1 -p "$PGCAT_PORT" -U bench -d ryw_lsn -Atc 'SELECT 1' >/dev/null 2>&1 && break
	sleep 0.1
done
for mode in off lsn; do
	[ "$(psql -h 127.0.0.1 -p "$PGCAT_PORT" -U bench -d "ryw_$mode" -Atc 'SELECT pg_is_in_recovery()')" = t ] ||
		{ echo "ryw.sh: reads of ryw_$mode do not reach the replica" >&2; tail -20 "$TMP/pgcat.log" >&2; exit 1; }
done

cat >"$TMP/read.sql" <<'EOF'
\set aid random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
EOF
cat >"$TMP/write.sql" <<'EOF'
\set aid random(1, 100000 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
END;
EOF
cat >"$TMP/ryw.sql" <<'EOF'
\set aid random(1, 100000 * :scale)
\set delta random(-5000, 5000)
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
EOF
chmod 644 "$TMP"/*.sql

RES=$OUT/results.txt
: >"$RES"
for w in $WORKLOADS; do
	for r in $(seq "$REPEATS"); do
		for mode in off lsn; do
			tps=$(pgbench -n -f "$TMP/$w.sql" -M "$PROTOCOL" -c "$CLIENTS" -j "$(( CLIENTS < 2 ? CLIENTS : 2 ))" \
				-T "$SECS" -h 127.0.0.1 -p "$PGCAT_PORT" -U bench "ryw_$mode" 2>"$TMP/pgbench.err" |
				sed -n 's/^tps = \([0-9.]*\).*/\1/p')
			[ -n "$tps" ] || { echo "ryw.sh: pgbench failed:" >&2; cat "$TMP/pgbench.err" >&2; exit 1; }
			echo "$w $mode $r $tps load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$RES"
		done
	done
done

echo
echo "median tps ($CLIENTS clients, $PROTOCOL protocol, ${SECS}s x $REPEATS):"
$PY - "$RES" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print("| workload | off | lsn | lsn/off |")
print("|---|---|---|---|")
for w in dict.fromkeys(r[0] for r in rows):
    med = {m: statistics.median(float(r[3]) for r in rows if r[0] == w and r[1] == m) for m in ("off", "lsn")}
    print("| %s | %.0f | %.0f | %.3f |" % (w, med["off"], med["lsn"], med["lsn"] / med["off"]))
EOF
