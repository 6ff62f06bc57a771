#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/syscalls.sh — system calls per transaction of the pooler, counted by
# strace -c: pgcat with io_engine = io_uring and = epoll, PgBouncer 1.18
# (Debian's) and PgBouncer 1.25.2 (when built: bench/anchors.sh). Counts, not
# timings: repeatable on a shared machine (doc/benchmarks.md).
#
# Starts a throwaway PostgreSQL 15 (data under /dev/shm, pgbench -i -s 1).
# For each target: starts the pooler (pgcat: workers = 1; the worker process
# is traced), warms it up (its server connections open), then for each
# client count runs pgbench -S twice under `strace -c -f -p PID`, with T1
# and T2 transactions per client, and reports per syscall
# (calls(T2) - calls(T1)) / (clients * (T2 - T1)): what one more transaction
# costs, without the clients' logins and ends (the same in both runs).
#
# With SC_MODE=cpu it measures instead what the same process spends on the
# CPU (user + system) per transaction, without strace: the sum over its
# threads of /proc/PID/task/*/schedstat (nanoseconds on a CPU) and utime +
# stime from /proc/PID/stat (clock ticks, coarse) around two pgbench -t
# runs, T1 and T2 transactions per client, and as above
# (cpu(T2) - cpu(T1)) / (clients * (T2 - T1)): the logins (SCRAM) and ends
# of the clients cancel out. A fixed count of transactions, not a fixed
# time: CPU per transaction, which a shared machine disturbs far less than
# throughput. The targets are interleaved: SC_ROUNDS rounds, each starting
# every target afresh; the summary gives each cell's median.
#
# Usage (as root: the servers run as OS user postgres):
#   bench/syscalls.sh [OUTDIR]       raw strace tables and the summary go to OUTDIR
# Environment:
#   SC_CLIENTS="1 100"               pgbench -c of each cell (-j 1)
#   SC_TXNS_1="2000 7000"            T1 T2 per client at 1 client
#   SC_TXNS_N="20 70"                T1 T2 per client at more clients
#   SC_TARGETS="pgcat-io_uring pgcat-epoll pgbouncer pgbouncer125"
#   SC_PROTOCOL=simple               pgbench -M of the counted runs (simple, extended, prepared;
#                                    prepared leaves out PgBouncer 1.18, which has no prepared
#                                    statements in transaction mode)
#   PGCAT_BIN=/path/pgcat            default: build this repository's HEAD (-O2 -g) in a temp dir
#   PGCAT_BIN_B=/path/pgcat          a second pgcat, targets pgcatB-io_uring, pgcatB-epoll (before/after)
#   SC_MODE=cpu                      CPU per transaction instead of strace counts (cpu.txt, summary.txt)
#   SC_CPU_TXNS_1="5000 35000"       cpu mode: T1 T2 at 1 client
#   SC_CPU_TXNS_N="50 350"           cpu mode: T1 T2 per client at more clients
#   SC_ROUNDS=5                      cpu mode: rounds over all targets
#   SC_PIN=1                         pin PostgreSQL and pgbench to CPU 0, the pooler to CPU 1
#                                    (taskset): every wake-up crosses CPUs, in every run alike,
#                                    where unpinned runs vary with where the scheduler put them;
#                                    SC_PIN=one: all of them on CPU 1 (no wake-up crosses CPUs)
#   SC_PERF=1                        cpu mode: also count sendto, recvfrom, io_uring_enter and
#                                    epoll_wait/epoll_pwait per transaction with perf's syscall tracepoints
#                                    (cheaper than strace, so timing, thus batching, is closer to
#                                    an untraced run; the counting itself costs a little CPU)
#   PGBOUNCER125_BIN=/path           default: ../shared/anchors/build-pgbouncer (bench/anchors.sh)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
CLIENTS=${SC_CLIENTS:-1 100}
read -r T1_1 T2_1 <<<"${SC_TXNS_1:-2000 7000}"
read -r T1_N T2_N <<<"${SC_TXNS_N:-20 70}"
TARGETS=${SC_TARGETS:-pgcat-io_uring pgcat-epoll pgbouncer pgbouncer125}
OUT=${1:-}
MODE=${SC_MODE:-strace}
PROTOCOL=${SC_PROTOCOL:-simple}
case "$PROTOCOL" in
simple | extended) ;;
prepared) TARGETS=$(echo " $TARGETS " | sed 's/ pgbouncer / /') ;;
*) echo "syscalls.sh: SC_PROTOCOL is simple, extended or prepared" >&2; exit 1 ;;
esac
read -r CPU_A1 CPU_B1 <<<"${SC_CPU_TXNS_1:-5000 35000}"
read -r CPU_AN CPU_BN <<<"${SC_CPU_TXNS_N:-50 350}"
ROUNDS=${SC_ROUNDS:-5}
PERF=${SC_PERF:-}
PIN_PG=() PIN_POOLER=()
case "${SC_PIN:-}" in
"") ;;
one) PIN_PG=(taskset -c 1) PIN_POOLER=(taskset -c 1) ;;
*) PIN_PG=(taskset -c 0) PIN_POOLER=(taskset -c 1) ;;
esac
# (pgcat waits with epoll_pwait, src/epoll_wait.c; PgBouncer's libevent with epoll_wait)
PERF_CALLS="sendto recvfrom io_uring_enter epoll_wait epoll_pwait"

[ "$(id -u)" = 0 ] || { echo "syscalls.sh: run as root (servers are started as user postgres)" >&2; exit 1; }
for b in "$PGBIN/postgres" "$PGBIN/initdb" pgbench psql pgbouncer strace setpriv; do
	command -v "$b" >/dev/null || { echo "syscalls.sh: missing $b (apt-get install -y pgbouncer strace postgresql-15)" >&2; exit 1; }
done

TMP=$(mktemp -d /dev/shm/pgcat-sc.XXXXXX)
chmod 755 "$TMP"
chown postgres: "$TMP"
PG_PID= POOLER_PID=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[ -n "$POOLER_PID" ] && kill -TERM "$POOLER_PID" 2>/dev/null
	if [ -n "$PG_PID" ]; then
		kill -INT "$PG_PID" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
	fi
	rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
if [ -z "$OUT" ]; then OUT=$TMP/out; fi
mkdir -p "$OUT"

read -r PGPORT PORT <<<"$(python3 "$HERE/bench.py" freeports 2)"

. "$HERE/anchors.sh"
case " $TARGETS " in
*" pgbouncer125 "*) pgbouncer125_bin || { echo "syscalls.sh: no PgBouncer 1.25.2: left out" >&2; TARGETS=${TARGETS/pgbouncer125/}; } ;;
esac

if [ -z "${PGCAT_BIN:-}" ]; then
	echo "== building pgcat (-O2 -g) from $(git -C "$REPO" rev-parse --short HEAD)"
	git clone -q "$REPO" "$TMP/src"
	(cd "$TMP/src" && ./autogen.sh && ./configure CFLAGS="-O2 -g" && make -j"$(nproc)") \
		>"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log"; exit 1; }
	PGCAT_BIN=$TMP/src/pgcat
fi

echo "== PostgreSQL on 127.0.0.1:$PGPORT"
echo bench >"$TMP/pwfile"
chown postgres: "$TMP/pwfile"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/pgdata" -U postgres -A scram-sha-256 --pwfile="$TMP/pwfile" \
	-E UTF8 --no-sync >"$TMP/initdb.log" 2>&1
cat >>"$TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TMP'
fsync = off
synchronous_commit = off
logging_collector = off
max_connections = 200
EOF
${PIN_PG[@]+"${PIN_PG[@]}"} "${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/pgdata" >"$TMP/postgres.log" 2>&1 &
PG_PID=$!
export PGPASSWORD=bench
for _ in $(seq 100); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
	-c "CREATE ROLE bench LOGIN PASSWORD 'bench'" -c "CREATE DATABASE bench OWNER bench"
pgbench -i -q -s 1 -h 127.0.0.1 -p "$PGPORT" -U bench bench >"$TMP/pgbench-init.log" 2>&1
SECRET=$(psql -At -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres \
	-c "SELECT rolpassword FROM pg_authid WHERE rolname = 'bench'")
echo "\"bench\" \"$SECRET\"" >"$TMP/userlist.txt"

write_config() { # target
	case "$1" in
	pgbouncer | pgbouncer125)
		cat >"$TMP/$1.ini" <<EOF
[databases]
bench = host=127.0.0.1 port=$PGPORT dbname=bench
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $TMP/userlist.txt
pool_mode = transaction
default_pool_size = 10
max_client_conn = 1000
logfile = $TMP/$1.log
EOF
		;;
	pgcat-* | pgcatB-*)
		cat >"$TMP/$1.ini" <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
workers = 1
io_engine = ${1#*-}
pool_mode = transaction
default_pool_size = 10
max_client_conn = 1000
log_level = warning
auth_type = scram-sha-256
[pools.bench]
[pools.bench.shards.0]
database = bench
servers = 127.0.0.1:$PGPORT:primary
[pools.bench.users.bench]
password = bench
pool_size = 10
EOF
		;;
	esac
	chown postgres: "$TMP/$1.ini" "$TMP/userlist.txt"
}

start_pooler() { # target: sets POOLER_PID and TRACE_PID (the process that serves clients)
	local cmd
	case "$1" in
	pgbouncer) cmd=(pgbouncer "$TMP/pgbouncer.ini") ;;
	pgbouncer125) cmd=("$PGBOUNCER125_BIN" "$TMP/pgbouncer125.ini") ;;
	pgcatB-*) cmd=("$PGCAT_BIN_B" "$TMP/$1.ini") ;;
	*) cmd=("$PGCAT_BIN" "$TMP/$1.ini") ;;
	esac
	${PIN_POOLER[@]+"${PIN_POOLER[@]}"} "${AS_PG[@]}" "${cmd[@]}" >"$TMP/$1.stderr" 2>&1 &
	POOLER_PID=$!
	for _ in $(seq 100); do
		psql -h 127.0.0.1 -p "$PORT" -U bench -d bench -Atc 'SELECT 1' >/dev/null 2>&1 && break
		sleep 0.1
	done
	TRACE_PID=$POOLER_PID
	case "$1" in pgcat-* | pgcatB-*)
		TRACE_PID=$(pgrep -P "$POOLER_PID" | head -1)
		[ -n "$TRACE_PID" ] || { echo "syscalls.sh: no pgcat worker" >&2; return 1; } ;;
	esac
	# the server connections open now, not in the counted runs
	pgbench -n -S -c 100 -j 1 -t 20 -h 127.0.0.1 -p "$PORT" -U bench bench >/dev/null 2>&1
}

stop_pooler() {
	kill -TERM "$POOLER_PID" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$POOLER_PID" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$POOLER_PID" 2>/dev/null || true
	wait "$POOLER_PID" 2>/dev/null || true
	POOLER_PID=
}

traced_run() { # target clients transactions: the strace -c table in $OUT
	local f="$OUT/strace-$1-c$2-t$3.txt" spid
	strace -c -f -p "$TRACE_PID" -o "$f" &
	spid=$!
	sleep 0.5   # attached
	pgbench -n -S -M "$PROTOCOL" -c "$2" -j 1 -t "$3" -h 127.0.0.1 -p "$PORT" -U bench bench >"$OUT/pgbench-$1-c$2-t$3.log" 2>&1 ||
		{ echo "syscalls.sh: pgbench failed against $1" >&2; tail -5 "$OUT/pgbench-$1-c$2-t$3.log" >&2; }
	sleep 0.3
	kill -INT "$spid"
	wait "$spid" 2>/dev/null || true
	echo "$f"
}

# calls per syscall name in an strace -c table
calls() { awk '$NF ~ /^[a-z_0-9]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { print $NF, $4 }' "$1"; }

# nanoseconds on a CPU of every thread of process $1, its utime + stime in
# ticks, and its context switches (voluntary: it waited; involuntary: preempted)
cpu_of() {
	local ns=0 t
	for t in /proc/"$1"/task/*/schedstat; do ns=$((ns + $(cut -d' ' -f1 "$t"))); done
	echo "$ns $(awk '{ print $14 + $15 }' /proc/"$1"/stat) $(awk '/^voluntary_ctxt_switches/ { v = $2 }
		/^nonvoluntary_ctxt_switches/ { n = $2 } END { print v, n }' /proc/"$1"/status)"
}

cpu_pgbench() { # target clients transactions-per-client round: prints "ns ticks [calls...]" the run cost
	local a b ppid= pf="$OUT/perf-$1-c$2-t$3-r$4.txt" ev=
	if [ -n "$PERF" ]; then
		for c in $PERF_CALLS; do ev=$ev${ev:+,}syscalls:sys_enter_$c; done
		perf stat -x, -e "$ev" -p "$TRACE_PID" -o "$pf" &
		ppid=$!
		sleep 0.5   # attached
	fi
	a=$(cpu_of "$TRACE_PID")
	${PIN_PG[@]+"${PIN_PG[@]}"} pgbench -n -S -M "$PROTOCOL" -c "$2" -j 1 -t "$3" -h 127.0.0.1 -p "$PORT" -U bench bench >"$OUT/pgbench-$1-c$2-t$3-r$4.log" 2>&1 ||
		{ echo "syscalls.sh: pgbench failed against $1" >&2; tail -5 "$OUT/pgbench-$1-c$2-t$3-r$4.log" >&2; }
	b=$(cpu_of "$TRACE_PID")
	read -r ans atk avc anv <<<"$a"
	read -r bns btk bvc bnv <<<"$b"
	local calls=
	if [ -n "$ppid" ]; then
		kill -INT "$ppid"
		wait "$ppid" 2>/dev/null || true
		for c in $PERF_CALLS; do calls="$calls $(awk -F, -v e="syscalls:sys_enter_$c" '$3 == e { print $1 + 0 }' "$pf")"; done
	fi
	echo "$((bns - ans)) $((btk - atk)) $((bvc - avc)) $((bnv - anv))$calls"
}

cpu_run() { # target clients T1 T2 round: one line in cpu.txt
	local x y
	x=$(cpu_pgbench "$1" "$2" "$3" "$5")
	y=$(cpu_pgbench "$1" "$2" "$4" "$5")
	awk -v t="$1" -v c="$2" -v r="$5" -v x="$x" -v y="$y" -v d="$(($2 * ($4 - $3)))" -v hz="$(getconf CLK_TCK)" \
		-v names="$PERF_CALLS" \
		'BEGIN { n = split(x, a, " "); split(y, b, " "); split(names, nm, " ");
			printf "%s clients=%s round=%s ns_per_txn=%.0f ticks_us_per_txn=%.2f waits=%.3f preempted=%.3f", t, c, r,
				(b[1] - a[1]) / d, (b[2] - a[2]) * 1e6 / hz / d, (b[3] - a[3]) / d, (b[4] - a[4]) / d;
			for (i = 5; i <= n; i++) printf " %s=%.3f", nm[i - 4], (b[i] - a[i]) / d;
			printf "\n" }' |
		tee -a "$OUT/cpu.txt"
}

summary=$OUT/summary.txt
: >"$summary"
if [ "$MODE" = cpu ]; then
	: >"$OUT/cpu.txt"
	for r in $(seq "$ROUNDS"); do
		for t in $TARGETS; do
			write_config "$t"
			start_pooler "$t"
			for c in $CLIENTS; do
				if [ "$c" = 1 ]; then a=$CPU_A1 b=$CPU_B1; else a=$CPU_AN b=$CPU_BN; fi
				cpu_run "$t" "$c" "$a" "$b" "$r"
			done
			stop_pooler
		done
	done
	# per target and clients: the median of the rounds
	awk '{ split($4, v, "="); k = $1 " " $2; x[k] = x[k] " " v[2] }
		END { for (k in x) print k, x[k] }' "$OUT/cpu.txt" | sort |
		while read -r t c vals; do
			echo "$t $c ns_per_txn median $(tr ' ' '\n' <<<"$vals" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }') of:$vals"
		done | tee -a "$summary"
	{
		echo
		echo "machine: $(uname -r), $(nproc) CPUs; pgcat $("$PGCAT_BIN" -V 2>&1 | head -1)"
		echo "command: SC_MODE=cpu bench/syscalls.sh (SC_CLIENTS=\"$CLIENTS\" SC_CPU_TXNS_1=\"$CPU_A1 $CPU_B1\" SC_CPU_TXNS_N=\"$CPU_AN $CPU_BN\" SC_ROUNDS=$ROUNDS SC_PROTOCOL=$PROTOCOL${PERF:+ SC_PERF=$PERF}${SC_PIN:+ SC_PIN=$SC_PIN} SC_TARGETS=\"$TARGETS\")"
	} | tee -a "$summary"
	exit 0
fi
for t in $TARGETS; do
	write_config "$t"
	start_pooler "$t"
	case "$t" in pgcat-*) echo "== $t: $(PGPASSWORD=bench psql -h 127.0.0.1 -p "$PORT" -U bench -d bench -Atc 'SELECT 1' >/dev/null && echo up)" ;; esac
	for c in $CLIENTS; do
		if [ "$c" = 1 ]; then a=$T1_1 b=$T2_1; else a=$T1_N b=$T2_N; fi
		fa=$(traced_run "$t" "$c" "$a")
		fb=$(traced_run "$t" "$c" "$b")
		# per syscall: (calls(T2) - calls(T1)) / (clients * (T2 - T1))
		join -a1 -a2 -e 0 -o 0,1.2,2.2 <(calls "$fa" | sort) <(calls "$fb" | sort) |
			awk -v t="$t" -v c="$c" -v d="$((c * (b - a)))" '
				{ x = ($3 - $2) / d; if (x >= 0.005 || x <= -0.005) { printf "%s clients=%s %s %.3f\n", t, c, $1, x; tot += x } }
				END { printf "%s clients=%s TOTAL %.3f\n", t, c, tot }' | tee -a "$summary"
	done
	stop_pooler
done
{
	echo
	echo "machine: $(uname -r), $(nproc) CPUs; pgcat $("$PGCAT_BIN" -V 2>&1 | head -1); $(pgbouncer --version 2>&1 | head -1)${PGBOUNCER125_BIN:+; $("$PGBOUNCER125_BIN" --version 2>&1 | head -1)}"
	echo "command: bench/syscalls.sh (SC_PROTOCOL=$PROTOCOL SC_CLIENTS=\"$CLIENTS\" SC_TXNS_1=\"$T1_1 $T2_1\" SC_TXNS_N=\"$T1_N $T2_N\")"
} | tee -a "$summary"
