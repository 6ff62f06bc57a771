#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/query_stats.sh — what query_stats = on costs (issue 44,
# doc/monitoring.md): the pooler's CPU time per transaction with statistics
# per query shape on, against the same pgcat with them off.
#
# Starts a throwaway PostgreSQL 15 (data under /dev/shm, fsync off,
# pgbench -i -s QS_SCALE) and two pgcat processes in front of it (workers =
# 1, transaction mode, pool size 10), identical but for query_stats: off on
# one, on on the other. Then for each protocol, pgbench -S (QS_CLIENTS
# clients, QS_SECONDS) runs against each, QS_REPEATS times, interleaved
# off on off on ..., and bench.py's cell measures each pooler's CPU time
# (user + system of its processes, /proc/PID/stat) per transaction in the
# steady state. The report: per protocol, the median tps and CPU us per
# transaction of each, and the on/off ratios; with on, SHOW QUERIES is
# checked to have counted the transactions.
#
# Usage (as root: the servers run as OS user postgres):
#   bench/query_stats.sh
# Environment:
#   QS_BIN=/path/pgcat   the binary (an optimised build: default ./build/pgcat,
#                        else ./pgcat)
#   QS_PROTOCOLS="simple extended prepared"  QS_CLIENTS=10  QS_SECONDS=10
#   QS_REPEATS=5  QS_SCALE=1
#   QS_OUT=dir   results (log.txt, machine.txt, results.jsonl, report.md);
#                default bench/results/<UTC date>-<commit>-query-stats
# Everything it starts is stopped by PID on exit; nothing is left behind.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PY=python3
PROTOCOLS=${QS_PROTOCOLS:-simple extended prepared}
CLIENTS=${QS_CLIENTS:-10}
SECS=${QS_SECONDS:-10}
REPEATS=${QS_REPEATS:-5}
SCALE=${QS_SCALE:-1}
OUT=${QS_OUT:-$REPO/bench/results/$(date -u +%Y-%m-%d)-$(git -C "$REPO" rev-parse --short HEAD)-query-stats}
BIN=${QS_BIN:-}
if [ -z "$BIN" ]; then
	if [ -x "$REPO/build/pgcat" ]; then BIN=$REPO/build/pgcat; else BIN=$REPO/pgcat; fi
fi

[ "$(id -u)" = 0 ] || { echo "query_stats.sh: run as root (servers are started as user postgres)" >&2; exit 1; }
for b in "$PGBIN/postgres" "$PGBIN/initdb" "$PGBIN/pg_isready" pgbench psql setpriv "$BIN"; do
	command -v "$b" >/dev/null || { echo "query_stats.sh: missing $b" >&2; exit 1; }
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/log.txt") 2>&1
TMP=$(mktemp -d /dev/shm/pgcat-qs.XXXXXX)
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
	if [ $rc != 0 ]; then echo "query_stats.sh: logs kept in $TMP" >&2; rm -rf "$TMP/pgdata"
	else rm -rf "$TMP"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
read -r PGPORT OFF_PORT ON_PORT <<<"$($PY "$HERE/bench.py" freeports 3)"
export PGPASSWORD=bench

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "command: QS_PROTOCOLS=\"$PROTOCOLS\" QS_CLIENTS=$CLIENTS QS_SECONDS=$SECS QS_REPEATS=$REPEATS QS_SCALE=$SCALE bench/query_stats.sh"
	echo "pgcat: $BIN ($("$BIN" --version 2>&1 | head -1)) at $(git -C "$REPO" rev-parse --short HEAD)"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "postgresql: $("$PGBIN/postgres" --version)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

wait_pg() { for _ in $(seq 200); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$1" && return 0; sleep 0.1; done; return 1; }

echo bench >"$TMP/pwfile"
chown postgres: "$TMP/pwfile"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/pgdata" -U postgres -A scram-sha-256 --pwfile="$TMP/pwfile" \
	-E UTF8 --no-sync >"$TMP/initdb.log" 2>&1
cat >>"$TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TMP'
max_connections = 100
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
log_min_messages = warning
EOF
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/pgdata" >"$TMP/postgres.log" 2>&1 &
PIDS+=("$!")
wait_pg "$PGPORT"
psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
	-c "CREATE ROLE bench LOGIN PASSWORD 'bench'" -c "CREATE DATABASE bench OWNER bench"
pgbench -q -i -s "$SCALE" -h 127.0.0.1 -p "$PGPORT" -U bench bench >"$TMP/pgbench-init.log" 2>&1

declare -A PORT=([off]=$OFF_PORT [on]=$ON_PORT) PID
for mode in off on; do
	cat >"$TMP/$mode.ini" <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = ${PORT[$mode]}
unix_socket_dir =
workers = 1
pool_mode = transaction
default_pool_size = 10
max_client_conn = 1000
log_level = warning
log_connections = false
log_disconnections = false
auth_type = md5
admin_username = admin
admin_password = admin
[pools.bench]
query_stats = $mode
[pools.bench.shards.0]
database = bench
servers = 127.0.0.1:$PGPORT:primary
[pools.bench.users.bench]
password = bench
pool_size = 10
EOF
	chown postgres: "$TMP/$mode.ini"
	"${AS_PG[@]}" "$BIN" "$TMP/$mode.ini" >"$TMP/pgcat-$mode.log" 2>&1 &
	PID[$mode]=$!
	PIDS+=("$!")
	for _ in $(seq 100); do
		psql -h 127.0.0.1 -p "${PORT[$mode]}" -U bench -d bench -Atc 'SELECT 1' >/dev/null 2>&1 && break
		sleep 0.1
	done
done

RES=$OUT/results.jsonl
: >"$RES"
for p in $PROTOCOLS; do
	for r in $(seq "$REPEATS"); do
		for mode in off on; do
			$PY "$HERE/bench.py" cell --section qs --target "query_stats=$mode" --protocol "$p" --out "$RES" \
				--user bench --password bench --dbname bench --pids "${PID[$mode]}" --port "${PORT[$mode]}" \
				--clients "$CLIENTS" --seconds "$SECS" --repeat "$r"
		done
	done
done

# query_stats = on counted them, and off did not
PGPASSWORD=admin psql -h 127.0.0.1 -p "$ON_PORT" -U admin -d pgcat -c "SHOW QUERIES LIMIT 5" | tee "$OUT/show-queries.txt"
[ "$(PGPASSWORD=admin psql -h 127.0.0.1 -p "$OFF_PORT" -U admin -d pgcat -Atc "SHOW QUERIES" | wc -l)" = 0 ] ||
	{ echo "query_stats.sh: the pgcat with query_stats = off counted queries" >&2; exit 1; }

$PY - "$RES" <<'PYEOF' | tee "$OUT/report.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = [r for r in rows if r["rc"] != 0 or r["failed"] or r["aborted_clients"]]
print("| protocol | tps off | tps on | on/off tps | CPU us/txn off | CPU us/txn on | on/off CPU |")
print("|---|---|---|---|---|---|---|")
protocols = list(dict.fromkeys(r["protocol"] for r in rows))
for p in protocols:
    med = {}
    for m in ("off", "on"):
        rs = [r for r in rows if r["protocol"] == p and r["target"] == "query_stats=" + m]
        med[m] = (statistics.median(r["tps"] for r in rs), statistics.median(r["cpu_us_per_txn"] for r in rs))
    print("| %s | %.0f | %.0f | %.3f | %.2f | %.2f | %.3f |" % (
        p, med["off"][0], med["on"][0], med["on"][0] / med["off"][0], med["off"][1], med["on"][1],
        med["on"][1] / med["off"][1]))
print()
print("medians of %d interleaved runs of each; cells with errors: %d" % (len(rows) // (2 * len(protocols)), len(bad)))
PYEOF
