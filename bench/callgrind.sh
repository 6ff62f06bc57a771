#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/callgrind.sh — user-space instructions per transaction of pgcat and
# PgBouncer (1.18; 1.25.2 optionally), counted by valgrind's callgrind:
# repeatable on a noisy machine where timings are not (see doc/benchmarks.md).
#
# Starts a throwaway PostgreSQL 15 (data under /dev/shm, pgbench -i -s 1),
# then for each target and protocol runs the pooler under callgrind twice,
# with pgbench -c CLIENTS -t T1 and -t T2 transactions per client, and
# reports (Ir(T2) - Ir(T1)) / (CLIENTS * (T2 - T1)): what one more
# transaction costs, without start-up, logins and shutdown. Server logins
# (PBKDF2 when pgcat logs in to PostgreSQL with SCRAM) may differ in number
# between the two runs, so the cost of pgcat's server logins is left out of
# both totals. Instructions in the kernel are not counted.
#
# Usage (as root: the servers run as OS user postgres):
#   bench/callgrind.sh
# Environment:
#   CG_PROTOCOLS="simple extended prepared"
#   CG_CLIENTS=1           pgbench -c (with -j 1)
#   CG_T1=1000 CG_T2=6000  transactions per client of the two runs
#   CG_TARGETS="pgbouncer pgcat pgcat-parser"   pgbouncer125 may be added, and
#                          pgcat-qstats (pgcat with query_stats = on, issue 44);
#                          PgBouncer 1.25.2, binary PGBOUNCER125_BIN or built
#                          once by ../shared/anchors/build-pgbouncer
#                          (bench/anchors.sh), config as pgbouncer's plus
#                          max_prepared_statements = 200; pg_doorman too: its
#                          binary is PG_DOORMAN_BIN or built once by
#                          ../shared/anchors/build-pg-doorman (bench/doorman.sh);
#                          its count is that of its tokio worker thread, the one
#                          that moves the messages (see run_once)
#   CG_IO_ENGINE=epoll     io_engine of the pgcat targets (default: pgcat's, auto;
#                          under valgrind io_uring may be refused: the log says)
#   PGCAT_BIN=/path/pgcat  default: build this repository's HEAD (-O2 -g) in a temp dir
#   CG_KEEP=/path/dir      keep each run's counted callgrind file there, named
#                          TARGET-PROTOCOL-TRANSACTIONS.cg, for callgrind_annotate
#                          (the difference of two files is a function's cost
#                          per transaction)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PROTOCOLS=${CG_PROTOCOLS:-simple extended prepared}
CLIENTS=${CG_CLIENTS:-1}
T1=${CG_T1:-1000}
T2=${CG_T2:-6000}
TARGETS=${CG_TARGETS:-pgbouncer pgcat pgcat-parser}

[ "$(id -u)" = 0 ] || { echo "callgrind.sh: run as root (servers are started as user postgres)" >&2; exit 1; }
for b in "$PGBIN/postgres" "$PGBIN/initdb" pgbench psql pgbouncer valgrind callgrind_annotate setpriv; do
	command -v "$b" >/dev/null || { echo "callgrind.sh: missing $b (apt-get install -y pgbouncer valgrind postgresql-15)" >&2; exit 1; }
done

TMP=$(mktemp -d /dev/shm/pgcat-cg.XXXXXX)
chmod 755 "$TMP"
chown postgres: "$TMP"
PG_PID=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
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

read -r PGPORT PORT <<<"$(python3 "$HERE/bench.py" freeports 2)"

. "$HERE/anchors.sh"
. "$HERE/doorman.sh"
case " $TARGETS " in
*" pgbouncer125 "*) pgbouncer125_bin || { echo "callgrind.sh: no PgBouncer 1.25.2" >&2; exit 1; } ;;
esac
case " $TARGETS " in
*" pg_doorman "*) pg_doorman_bin || { echo "callgrind.sh: no pg_doorman" >&2; exit 1; } ;;
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
listen_addresses = '127.0.0.1,127.0.0.2'
port = $PGPORT
unix_socket_directories = '$TMP'
fsync = off
synchronous_commit = off
logging_collector = off
EOF
echo "host all all 127.0.0.2/32 scram-sha-256" >>"$TMP/pgdata/pg_hba.conf"
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/pgdata" >"$TMP/postgres.log" 2>&1 &
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
logfile = $TMP/$1.log
EOF
		# 1.25.2: its default, written out (1.18 does not know the setting)
		[ "$1" = pgbouncer ] || echo "max_prepared_statements = 200" >>"$TMP/$1.ini"
		;;
	pg_doorman)
		pg_doorman_toml "$PORT" "$PGPORT" "$SECRET" >"$TMP/pg_doorman.toml"
		;;
	pgcat | pgcat-parser | pgcat-qstats)
		local parser=false replica= qstats=off
		if [ "$1" = pgcat-parser ]; then parser=true; replica=", 127.0.0.2:$PGPORT:replica"; fi
		if [ "$1" = pgcat-qstats ]; then qstats=on; fi
		cat >"$TMP/$1.ini" <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
workers = 1
${CG_IO_ENGINE:+io_engine = $CG_IO_ENGINE}
pool_mode = transaction
default_pool_size = 10
max_client_conn = 1000
log_level = warning
auth_type = scram-sha-256
[pools.bench]
query_parser_enabled = $parser
query_stats = $qstats
primary_reads_enabled = $( [ "$parser" = true ] && echo false || echo true )
[pools.bench.shards.0]
database = bench
servers = 127.0.0.1:$PGPORT:primary$replica
[pools.bench.users.bench]
password = bench
pool_size = 10
EOF
		;;
	esac
	find "$TMP" -maxdepth 1 \( -name '*.ini' -o -name '*.toml' -o -name userlist.txt \) -exec chown postgres: {} +
}

# One run under callgrind: prints the worker's instruction count (pgcat's
# server logins, pg_doorman's clock calibration left out) after pgbench -t $3.
run_once() { # target protocol transactions
	local dir="$TMP/cg-$1-$2-$3" cmd vpid best=0 f ir login vg=()
	mkdir -p "$dir"
	chown postgres: "$dir"
	case "$1" in
	pgbouncer) cmd=(pgbouncer "$TMP/pgbouncer.ini") ;;
	pgbouncer125) cmd=("$PGBOUNCER125_BIN" "$TMP/pgbouncer125.ini") ;;
	pg_doorman)
		# A file per thread; counted is the tokio worker (worker_threads = 1)
		# that serves the clients, found below. Left out: a second thread
		# that polls statistics on a timer (it reads /proc/net/tcp, so its
		# count follows the run's length and the machine's sockets, not the
		# transactions: 13 to 54 million instructions in runs alike, more
		# than the worker's in a short run), the main thread (start-up) and
		# short-lived blocking-pool threads.
		cmd=("$PG_DOORMAN_BIN" "$TMP/pg_doorman.toml" -l warn --no-color)
		vg=(--separate-threads=yes) ;;
	*) cmd=("$PGCAT_BIN" "$TMP/$1.ini") ;;
	esac
	"${AS_PG[@]}" valgrind --tool=callgrind --vgdb=no --trace-children=yes ${vg[@]+"${vg[@]}"} \
		--callgrind-out-file="$dir/cg.%p" "${cmd[@]}" >"$dir/stderr" 2>&1 &
	vpid=$!
	for _ in $(seq 200); do
		psql -h 127.0.0.1 -p "$PORT" -U bench -d bench -Atc 'SELECT 1' >/dev/null 2>&1 && break
		sleep 0.2
	done
	pgbench -n -S -M "$2" -c "$CLIENTS" -j 1 -t "$3" -h 127.0.0.1 -p "$PORT" -U bench bench >"$dir/pgbench.log" 2>&1 ||
		{ echo "callgrind.sh: pgbench failed against $1" >&2; tail -5 "$dir/pgbench.log" >&2; kill -TERM "$vpid"; return 1; }
	case "$1" in pgbouncer*) kill -INT "$vpid" ;; *) kill -TERM "$vpid" ;; esac
	for _ in $(seq 300); do kill -0 "$vpid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$vpid" 2>/dev/null || true
	wait "$vpid" 2>/dev/null || true
	# pgcat: the supervisor and the worker write a file each; the worker's is the big one
	if [ "$1" = pg_doorman ]; then
		# the thread that spent the most in pg_doorman::client (the worker)
		local score top=-1
		for f in "$dir"/cg.*-*; do
			score=$(callgrind_annotate "$f" 2>/dev/null |
				awk '/pg_doorman::client::/ {gsub(",", "", $1); s += $1} END {print s + 0}')
			if [ "$score" -gt "$top" ]; then top=$score; FILE=$f; fi
		done
		best=$(awk '/^summary:/ {print $2; exit}' "$FILE")
	else
		for f in "$dir"/cg.*; do
			ir=$(awk '/^summary:/ {print $2; exit}' "$f")
			if [ "${ir:-0}" -gt "$best" ]; then best=$ir; FILE=$f; fi
		done
	fi
	# Left out as one-off costs whose size varies from run to run: pgcat's
	# server logins; pg_doorman's calibration of its clock (quanta), done on
	# first use in the worker, 9-13 million instructions depending on timing.
	local oneoff=':(process_login|pool_derive_scram) [[]'
	if [ "$1" = pg_doorman ]; then oneoff=':quanta::Clock::new [[]'; fi
	if [ -n "${CG_KEEP:-}" ]; then mkdir -p "$CG_KEEP" && cp "$FILE" "$CG_KEEP/$1-$2-$3.cg"; fi
	login=$(callgrind_annotate --inclusive=yes "$FILE" 2>/dev/null |
		awk -v re="$oneoff" '$0 ~ re {gsub(",", "", $1); s += $1} END {print s + 0}')
	echo $((best - login))
}

printf '\n%-14s %-9s %8s  %s\n' target protocol "Ir/txn" "(clients $CLIENTS, T1 $T1, T2 $T2)"
for p in $PROTOCOLS; do
	for t in $TARGETS; do
		if [ "$t" = pgbouncer ] && [ "$p" = prepared ] && ! pgbouncer --version | head -1 | grep -qE ' 1\.(2[1-9]|[3-9][0-9])'; then
			continue   # PgBouncer < 1.21: no prepared statements in transaction mode
		fi
		write_config "$t"
		a=$(run_once "$t" "$p" "$T1")
		b=$(run_once "$t" "$p" "$T2")
		printf '%-14s %-9s %8d\n' "$t" "$p" $(((b - a) / (CLIENTS * (T2 - T1))))
	done
done
