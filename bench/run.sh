#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run.sh — pgbench through pgcat vs PgBouncer 1.18 and 1.25.2 (vs
# pg_doorman, optional) vs PostgreSQL direct.
#
# Starts a throwaway PostgreSQL 15 (fsync off, data under /dev/shm,
# pgbench -i -s 10), three PgBouncer and five pgcat instances in front of it
# (transaction mode, pool size 10, pgcat workers = 1), one PgBouncer 1.25.2
# when its binary can be had, and with BENCH_DOORMAN=1 one pg_doorman
# (worker_threads = 1), then runs the same pgbench cells against
# each target, interleaved (A B C D A B C D ...), and prints medians, ratios
# and each pooler's CPU time per transaction.
# Everything it starts is stopped by PID on exit; nothing is left behind.
#
# Usage (as root: the servers run as OS user postgres):
#   bench/run.sh                       full run (~35 min with the defaults)
#   BENCH_QUICK=1 bench/run.sh         smoke run (a few minutes)
#
# Environment:
#   BENCH_SECONDS=10        pgbench -T per cell
#   BENCH_REPEATS=3         repeats per cell and target (medians over these)
#   BENCH_CLIENTS="1 10 100 1000"
#   BENCH_PROTOCOLS="simple extended prepared"
#   BENCH_CONN_SECONDS=$BENCH_SECONDS   pgbench -C cells
#   BENCH_CONN_CLIENTS=10               clients in the pgbench -C cells
#   BENCH_IDLE_CLIENTS=10000            idle logged-in clients for the RSS test
#   BENCH_QUICK=1           SECONDS=3 REPEATS=1 CLIENTS="1 100 1000" IDLE=2000
#   PGCAT_BIN=/path/pgcat   benchmark this binary; default: clone this repo's
#                           HEAD into the temp dir and build it with -O2 -g
#   PGCAT_BIN_BEFORE=/path  a second pgcat binary (an earlier commit), target
#                           pgcat-before with pgcat's config: before and after
#                           in one interleaved run (its own table)
#   BENCH_DOORMAN=1         add pg_doorman 3.10.7 as a target (threads, one
#                           worker thread); its binary is PG_DOORMAN_BIN, or
#                           built once by ../shared/anchors/build-pg-doorman
#                           (about 7 minutes on 2 cores, crates from crates.io)
#   PG_DOORMAN_BIN=/path    this pg_doorman binary (implies BENCH_DOORMAN=1)
#   BENCH_PGBOUNCER125=1    PgBouncer 1.25.2 as a target beside the PgBouncer on
#                           PATH (default on; 0 skips it); its binary is
#                           PGBOUNCER125_BIN, or built once by
#                           ../shared/anchors/build-pgbouncer (skipped with a
#                           warning when that fails)
#   PGBOUNCER125_BIN=/path  this PgBouncer 1.25.2 binary
#   BENCH_TARGETS="..."    run the pgbench -S cells only on these targets
#                           (of direct pgbouncer pgbouncer125 pgcat pgcat-epoll
#                           pgcat-parser pgcat-w2 pg_doorman pgcat-before)
#   BENCH_OUT=dir           results (results.jsonl, report.md, machine.txt);
#                           default /tmp/pgcat-bench-<timestamp>
#   BENCH_KEEP=1            keep the temp dir (logs) after the run
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PY=python3

if [ "${BENCH_QUICK:-0}" = 1 ]; then
	: "${BENCH_SECONDS:=3}" "${BENCH_REPEATS:=1}" "${BENCH_CLIENTS:=1 100 1000}"
	: "${BENCH_IDLE_CLIENTS:=2000}"
fi
SECS=${BENCH_SECONDS:-10}
REPEATS=${BENCH_REPEATS:-3}
CLIENTS=${BENCH_CLIENTS:-1 10 100 1000}
PROTOCOLS=${BENCH_PROTOCOLS:-simple extended prepared}
CONN_SECS=${BENCH_CONN_SECONDS:-$SECS}
CONN_CLIENTS=${BENCH_CONN_CLIENTS:-10}
IDLE_N=${BENCH_IDLE_CLIENTS:-10000}
OUT=${BENCH_OUT:-/tmp/pgcat-bench-$(date +%Y%m%d-%H%M%S)}
DOORMAN=${BENCH_DOORMAN:-0}
[ -z "${PG_DOORMAN_BIN:-}" ] || DOORMAN=1
PGB125=${BENCH_PGBOUNCER125:-1}

[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (servers are started as user postgres)" >&2; exit 1; }
for b in "$PGBIN/postgres" "$PGBIN/initdb" pgbench psql pgbouncer setpriv; do
	command -v "$b" >/dev/null || { echo "run.sh: missing $b (apt-get install -y pgbouncer postgresql-15)" >&2; exit 1; }
done

ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge $((IDLE_N + 1100)) ] || { echo "run.sh: ulimit -n $(ulimit -n) too low for $IDLE_N idle clients" >&2; exit 1; }

mkdir -p "$OUT"
RES=$OUT/results.jsonl
: >"$RES"
TMP=$(mktemp -d /dev/shm/pgcat-bench.XXXXXX)
chown postgres: "$TMP"
PIDS=()   # started daemons, stopped in reverse order on exit

cleanup() {
	local rc=$? i pid
	trap - EXIT INT TERM
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		pid=${PIDS[i]}
		if [ "$pid" = "${PG_PID:-}" ]; then kill -INT "$pid" 2>/dev/null || true
		else kill -TERM "$pid" 2>/dev/null || true; fi
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [ "${BENCH_KEEP:-0}" = 1 ] || [ $rc != 0 ]; then
		echo "run.sh: temp dir kept: $TMP (logs)" >&2
		[ $rc = 0 ] || rm -rf "$TMP/pgdata" "$TMP/src"
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A simple command, not a function: "${AS_PG[@]}" cmd & makes $! the PID of
# the daemon itself (setpriv execs it), so the trap can stop it by PID.
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)

read -r PGPORT PGB_PORT PGB_PLAIN_PORT PGB_MD5_PORT PGCAT_PORT PGCAT_PARSER_PORT PGCAT_MD5_PORT PGCAT_W2_PORT \
	PGCAT_SECRET_PORT DOORMAN_PORT PGB125_PORT PGCAT_EPOLL_PORT PGCAT_BEFORE_PORT <<<"$($PY "$HERE/bench.py" freeports 13)"

# ---------------------------------------------------------------- pgcat build
if [ -z "${PGCAT_BIN:-}" ]; then
	echo "== building pgcat (release, -O2 -g) from $(git -C "$REPO" rev-parse --short HEAD)"
	git clone -q "$REPO" "$TMP/src"
	(cd "$TMP/src" && ./autogen.sh && ./configure CFLAGS="-O2 -g" && make -j"$(nproc)") \
		>"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log"; exit 1; }
	PGCAT_BIN=$TMP/src/pgcat
	PGCAT_COMMIT=$(git -C "$TMP/src" rev-parse HEAD)
else
	PGCAT_COMMIT="(PGCAT_BIN=$PGCAT_BIN; repo HEAD $(git -C "$REPO" rev-parse HEAD))"
fi

# ---------------------------------------------------------------- PgBouncer 1.25.2 build
. "$HERE/anchors.sh"
if [ "$PGB125" != 0 ] && ! pgbouncer125_bin; then
	# on by default: without a binary the run goes on without it, unless one was given
	[ -z "${PGBOUNCER125_BIN:-}" ] || { echo "run.sh: no PgBouncer 1.25.2" >&2; exit 1; }
	echo "run.sh: WARNING: no PgBouncer 1.25.2 binary, running without it (BENCH_PGBOUNCER125=0 silences this)" >&2
	PGB125=0
fi

# ---------------------------------------------------------------- pg_doorman build
. "$HERE/doorman.sh"
[ "$DOORMAN" = 0 ] || pg_doorman_bin || { echo "run.sh: no pg_doorman" >&2; exit 1; }

# ---------------------------------------------------------------- machine
PGB_VERSION=$(pgbouncer --version | head -1 | awk '{print $2}')
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "command: BENCH_QUICK=${BENCH_QUICK:-0} BENCH_SECONDS=$SECS BENCH_REPEATS=$REPEATS BENCH_CLIENTS=\"$CLIENTS\" BENCH_PROTOCOLS=\"$PROTOCOLS\" BENCH_CONN_SECONDS=$CONN_SECS BENCH_CONN_CLIENTS=$CONN_CLIENTS BENCH_IDLE_CLIENTS=$IDLE_N BENCH_DOORMAN=$DOORMAN BENCH_PGBOUNCER125=$PGB125 bench/run.sh"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel: $(uname -sr)"
	echo "os: $(. /etc/os-release; echo "$PRETTY_NAME")"
	echo "postgresql: $("$PGBIN/postgres" --version)"
	echo "pgbench: $(pgbench --version)"
	echo "pgbouncer: $(pgbouncer --version | head -1)"
	[ "$PGB125" = 0 ] || echo "pgbouncer125: $("$PGBOUNCER125_BIN" --version | head -1) ($PGBOUNCER125_BIN)"
	echo "pgcat: $("$PGCAT_BIN" --version 2>&1 | head -1)"
	echo "pgcat commit: $PGCAT_COMMIT"
	[ "$DOORMAN" = 0 ] || echo "pg_doorman: $("$PG_DOORMAN_BIN" --version 2>&1 | head -1) ($PG_DOORMAN_BIN)"
	echo "python: $($PY --version)"
} | tee "$OUT/machine.txt"

# ---------------------------------------------------------------- PostgreSQL
echo "== PostgreSQL on 127.0.0.1:$PGPORT, data in $TMP/pgdata"
echo bench >"$TMP/pwfile"
chown postgres: "$TMP/pwfile"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/pgdata" -U postgres -A scram-sha-256 --pwfile="$TMP/pwfile" \
	-E UTF8 --no-sync >"$TMP/initdb.log" 2>&1
cat >>"$TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1,127.0.0.2'
port = $PGPORT
unix_socket_directories = '$TMP'
max_connections = 1100
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
password_encryption = 'scram-sha-256'
logging_collector = off
log_min_messages = warning
EOF
echo "host all all 127.0.0.2/32 scram-sha-256" >>"$TMP/pgdata/pg_hba.conf"   # pgcat-parser's "replica"
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/pgdata" >"$TMP/postgres.log" 2>&1 &
PG_PID=$!
PIDS+=("$PG_PID")
export PGPASSWORD=bench
for _ in $(seq 100); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
	-c "CREATE ROLE bench LOGIN PASSWORD 'bench'" -c "CREATE DATABASE bench OWNER bench"
pgbench -i -q -s 10 -h 127.0.0.1 -p "$PGPORT" -U bench bench >"$TMP/pgbench-init.log" 2>&1
SECRET=$(psql -At -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres \
	-c "SELECT rolpassword FROM pg_authid WHERE rolname = 'bench'")

# ---------------------------------------------------------------- PgBouncer
# pgbouncer:        SCRAM, userlist holds the SCRAM secret (its fast path)
# pgbouncer-plain:  SCRAM, userlist holds the plaintext password (PBKDF2 per login)
# pgbouncer-md5:    md5 clients, plaintext userlist
# pgbouncer125:     PgBouncer 1.25.2 configured as "pgbouncer" (SCRAM secret
#                   userlist), plus max_prepared_statements = 200 (its
#                   default, written out) so that the prepared cells compare
echo "\"bench\" \"$SECRET\"" >"$TMP/userlist-secret.txt"
echo '"bench" "bench"' >"$TMP/userlist-plain.txt"
start_pgbouncer() { # name port auth_type userlist [binary [extra config line]]
	cat >"$TMP/$1.ini" <<EOF
[databases]
bench = host=127.0.0.1 port=$PGPORT dbname=bench
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $2
unix_socket_dir =
auth_type = $3
auth_file = $TMP/$4
pool_mode = transaction
default_pool_size = 10
max_client_conn = 20000
listen_backlog = 4096
logfile = $TMP/$1.log
log_connections = 0
log_disconnections = 0
stats_period = 60
EOF
	[ -z "${6:-}" ] || echo "$6" >>"$TMP/$1.ini"
	chown postgres: "$TMP/$1.ini" "$TMP/$4"
	"${AS_PG[@]}" "${5:-pgbouncer}" "$TMP/$1.ini" >"$TMP/$1.stderr" 2>&1 &
	PIDS+=("$!")
	eval "PID_${1//-/_}=$!"
}
start_pgbouncer pgbouncer "$PGB_PORT" scram-sha-256 userlist-secret.txt
start_pgbouncer pgbouncer-plain "$PGB_PLAIN_PORT" scram-sha-256 userlist-plain.txt
start_pgbouncer pgbouncer-md5 "$PGB_MD5_PORT" md5 userlist-plain.txt
[ "$PGB125" = 0 ] || start_pgbouncer pgbouncer125 "$PGB125_PORT" scram-sha-256 userlist-secret.txt \
	"$PGBOUNCER125_BIN" "max_prepared_statements = 200"

# ---------------------------------------------------------------- pgcat
# pgcat-parser's pool lists the same PostgreSQL twice, as a primary on
# 127.0.0.1 and as a replica on 127.0.0.2: with one server per shard there is
# nothing to decide and pgcat skips the router, so only a pool with a replica
# makes the parser run on every transaction. primary_reads_enabled = false
# sends every select-only transaction to the "replica" address, one pool of
# server connections as with the parser off: with primary reads on (the
# default) reads are spread at random over both addresses, and the cell
# would measure two sets of backends taking turns, not the parser.
start_pgcat() { # name port parser auth_type [workers] [password] [io_engine] [binary]
	cat >"$TMP/$1.ini" <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = $2
unix_socket_dir =
workers = ${5:-1}
io_engine = ${7:-auto}
pool_mode = transaction
default_pool_size = 10
max_client_conn = 20000
log_level = warning
log_connections = false
log_disconnections = false
auth_type = $4
[pools.bench]
query_parser_enabled = $3
primary_reads_enabled = $( [ "$3" = true ] && echo false || echo true )
[pools.bench.shards.0]
database = bench
servers = 127.0.0.1:$PGPORT:primary$( [ "$3" = true ] && echo ", 127.0.0.2:$PGPORT:replica")
[pools.bench.users.bench]
password = ${6:-bench}
pool_size = 10
EOF
	chown postgres: "$TMP/$1.ini"
	"${AS_PG[@]}" "${8:-$PGCAT_BIN}" "$TMP/$1.ini" >"$TMP/$1.log" 2>&1 &
	PIDS+=("$!")
	eval "PID_${1//-/_}=$!"
}
start_pgcat pgcat "$PGCAT_PORT" false scram-sha-256
start_pgcat pgcat-parser "$PGCAT_PARSER_PORT" true scram-sha-256
start_pgcat pgcat-md5 "$PGCAT_MD5_PORT" false md5
# The role's SCRAM verifier as pgcat's password (no plaintext anywhere): the
# client's proof is checked against it and pgcat logs in to PostgreSQL by
# SCRAM pass-through (doc/authentication.md) — only in the connection-rate test.
start_pgcat pgcat-secret "$PGCAT_SECRET_PORT" false scram-sha-256 1 "$SECRET"
# Two worker processes on this 2-core machine: they compete with pgbench and
# PostgreSQL for the same two cores, so this row shows what it can here, not
# what a larger machine gains.
start_pgcat pgcat-w2 "$PGCAT_W2_PORT" false scram-sha-256 2
# The same as pgcat with the epoll engine (pgcat itself: auto, io_uring where
# the kernel allows it; doc/io-engine.md).
start_pgcat pgcat-epoll "$PGCAT_EPOLL_PORT" false scram-sha-256 1 bench epoll
# PGCAT_BIN_BEFORE: an earlier pgcat with pgcat's own config, for "before
# and after" in one run (the same PostgreSQL, the same minutes).
BEFORE=
if [ -n "${PGCAT_BIN_BEFORE:-}" ]; then
	[ -x "$PGCAT_BIN_BEFORE" ] || { echo "run.sh: PGCAT_BIN_BEFORE=$PGCAT_BIN_BEFORE is not an executable" >&2; exit 1; }
	echo "pgcat-before: $("$PGCAT_BIN_BEFORE" --version 2>&1 | head -1) ($PGCAT_BIN_BEFORE)"
	start_pgcat pgcat-before "$PGCAT_BEFORE_PORT" false scram-sha-256 1 bench auto "$PGCAT_BIN_BEFORE"
	BEFORE=" pgcat-before"
fi

# ---------------------------------------------------------------- pg_doorman
# Its config and why: pg_doorman_toml in bench/doorman.sh. Log in the temp dir.
if [ "$DOORMAN" = 1 ]; then
	pg_doorman_toml "$DOORMAN_PORT" "$PGPORT" "$SECRET" >"$TMP/pg_doorman.toml"
	chown postgres: "$TMP/pg_doorman.toml"
	"${AS_PG[@]}" "$PG_DOORMAN_BIN" "$TMP/pg_doorman.toml" -l warn --no-color >"$TMP/pg_doorman.log" 2>&1 &
	PIDS+=("$!")
	PID_pg_doorman=$!
fi

declare -A PORT=([direct]=$PGPORT [pgbouncer]=$PGB_PORT [pgbouncer-plain]=$PGB_PLAIN_PORT
	[pgbouncer-md5]=$PGB_MD5_PORT [pgcat]=$PGCAT_PORT [pgcat-parser]=$PGCAT_PARSER_PORT
	[pgcat-md5]=$PGCAT_MD5_PORT [pgcat-w2]=$PGCAT_W2_PORT [pgcat-secret]=$PGCAT_SECRET_PORT
	[pgcat-epoll]=$PGCAT_EPOLL_PORT)
declare -A PID=([direct]="" [pgbouncer]=$PID_pgbouncer [pgbouncer-plain]=$PID_pgbouncer_plain
	[pgbouncer-md5]=$PID_pgbouncer_md5 [pgcat]=$PID_pgcat [pgcat-parser]=$PID_pgcat_parser
	[pgcat-md5]=$PID_pgcat_md5 [pgcat-w2]=$PID_pgcat_w2 [pgcat-secret]=$PID_pgcat_secret
	[pgcat-epoll]=$PID_pgcat_epoll)
POOLERS="pgbouncer pgbouncer-plain pgbouncer-md5 pgcat pgcat-parser pgcat-md5 pgcat-w2 pgcat-secret pgcat-epoll"
if [ -n "$BEFORE" ]; then
	PORT[pgcat-before]=$PGCAT_BEFORE_PORT
	PID[pgcat-before]=$PID_pgcat_before
	POOLERS="$POOLERS pgcat-before"
fi
DM=   # " pg_doorman" when it is a target: appended to each section's list
if [ "$DOORMAN" = 1 ]; then
	PORT[pg_doorman]=$DOORMAN_PORT
	PID[pg_doorman]=$PID_pg_doorman
	DM=" pg_doorman"
fi
B125=  # " pgbouncer125" when it is a target, placed after pgbouncer in each list
if [ "$PGB125" != 0 ]; then
	PORT[pgbouncer125]=$PGB125_PORT
	PID[pgbouncer125]=$PID_pgbouncer125
	B125=" pgbouncer125"
fi
POOLERS+=$B125$DM

for t in $POOLERS; do
	ok=
	for _ in $(seq 100); do
		kill -0 "${PID[$t]}" 2>/dev/null || break
		psql -h 127.0.0.1 -p "${PORT[$t]}" -U bench -d bench -Atc 'SELECT 1' >/dev/null 2>&1 && { ok=1; break; }
		sleep 0.1
	done
	[ -n "$ok" ] || { echo "run.sh: $t did not come up; log:" >&2; cat "$TMP/$t"*.log "$TMP/$t.stderr" 2>/dev/null | tail -20 >&2; exit 1; }
done
echo "== warm-up (fill every pool)"
for t in direct $POOLERS; do
	pgbench -n -S -c 10 -j 2 -T 2 -h 127.0.0.1 -p "${PORT[$t]}" -U bench bench >/dev/null 2>&1 ||
		echo "   warm-up against $t failed" >&2
done

cell() { # section target protocol clients repeat seconds [--connect]
	$PY "$HERE/bench.py" cell --section "$1" --target "$2" --protocol "$3" --clients "$4" \
		--repeat "$5" --seconds "$6" ${7:+"$7"} --port "${PORT[$2]}" --pids "${PID[$2]}" \
		--out "$RES" --user bench --password bench --dbname bench
}

# ---------------------------------------------------------------- idle memory
# First, on fresh poolers, so the baseline is not inflated by earlier cells.
echo "== RSS per idle logged-in client ($IDLE_N clients, SCRAM)"
for t in pgbouncer$B125 pgcat$DM; do
	$PY "$HERE/bench.py" idle --target "$t" --port "${PORT[$t]}" --pids "${PID[$t]}" \
		--n "$IDLE_N" --out "$RES" --user bench --password bench --dbname bench
	sleep 2
done

# ---------------------------------------------------------------- cells
pgb_has_prepared() { # PgBouncer >= 1.21 supports prepared statements in transaction mode
	local maj min
	IFS=. read -r maj min _ <<<"$PGB_VERSION"
	[ "$maj" -gt 1 ] || { [ "$maj" = 1 ] && [ "$min" -ge 21 ]; }
}
echo "== pgbench -S cells: ${SECS}s x $REPEATS repeats, clients: $CLIENTS, protocols: $PROTOCOLS"
for c in $CLIENTS; do
	for p in $PROTOCOLS; do
		targets="direct pgbouncer$B125 pgcat pgcat-epoll pgcat-parser pgcat-w2$DM$BEFORE"
		if [ "$p" = prepared ] && ! pgb_has_prepared; then targets="direct$B125 pgcat pgcat-epoll pgcat-parser pgcat-w2$DM$BEFORE"; fi
		# BENCH_TARGETS: only these of them (e.g. to leave out the parser and w2 rows)
		if [ -n "${BENCH_TARGETS:-}" ]; then
			targets=$(for t in $targets; do case " $BENCH_TARGETS " in *" $t "*) echo "$t";; esac; done | tr '\n' ' ')
		fi
		for r in $(seq "$REPEATS"); do
			for t in $targets; do
				cell cell "$t" "$p" "$c" "$r" "$SECS"
			done
		done
	done
done

# ---------------------------------------------------------------- connection rate
echo "== connection rate: pgbench -S -C -c $CONN_CLIENTS, ${CONN_SECS}s x $REPEATS"
for r in $(seq "$REPEATS"); do
	for t in direct pgbouncer pgbouncer-plain pgbouncer-md5$B125 pgcat pgcat-secret pgcat-md5$DM; do
		cell conn "$t" simple "$CONN_CLIENTS" "$r" "$CONN_SECS" --connect
	done
done

# ---------------------------------------------------------------- report
for t in pgbouncer$B125 pgcat pgcat-parser pgcat-md5 pgcat-w2 pgcat-secret pgcat-epoll$DM$BEFORE; do
	kill -0 "${PID[$t]}" 2>/dev/null || echo "run.sh: WARNING: $t (pid ${PID[$t]}) died during the run" | tee -a "$OUT/machine.txt" >&2
done
for t in pgcat pgcat-parser pgcat-md5 pgcat-w2 pgcat-secret pgcat-epoll$DM$BEFORE; do cp "$TMP/$t.log" "$OUT/$t.log"; done
$PY "$HERE/bench.py" report "$RES" | tee "$OUT/report.md"
echo
echo "results: $OUT (machine.txt, results.jsonl, report.md)"
