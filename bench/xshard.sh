#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/xshard.sh — cross-shard reads through pgcat, two pgcat binaries
# compared in one interleaved run.
#
# BEFORE (default: commit 7651aff) ran each shard's part of a cross-shard
# read as an internal client on a socketpair; AFTER (default: 6e61142) has
# each part drive its shard's server directly, the replies reaching it on an
# in-process loopback. This script measures what that is worth per
# transaction.
#
# Starts a throwaway PostgreSQL 15 (data under /dev/shm) with the shard
# databases shard0, shard1 (2 shards) and shard4_0..shard4_3 (4 shards),
# each with the table t (id bigint PRIMARY KEY, v int), and two pgcat
# processes (BEFORE and AFTER, workers = 1, transaction mode, pools xs2 and
# xs4, sharded by t.id with pg_bigint_hash). The rows (XS_ROWS, default
# 1,000) are loaded through pgcat with one multi-row INSERT, which pgcat
# splits over the shards. Then, for each cell (shards x query x protocol x
# clients), pgbench -n -f runs XS_REPEATS times against each binary,
# interleaved B A B A ..., and the script reports tps and pgcat's CPU time per
# transaction (utime + stime of the supervisor and its worker from
# /proc/PID/stat, delta over the pgbench run / transactions; user and system
# also apart), the medians and the AFTER/BEFORE ratios. Last, unless
# XS_STRACE=0, strace -c -f counts one short run's system calls per
# transaction for each binary (after every timed cell, so it disturbs none).
# Everything it starts is stopped by PID on exit; nothing is left behind.
#
# Queries (pgbench custom scripts, no sharding key: every shard is asked):
#   agg  SELECT count(*), sum(v) FROM t                (aggregate merge)
#   ord  SELECT id, v FROM t ORDER BY id LIMIT 10       (ordered merge)
#
# Usage (as root: the servers run as OS user postgres):
#   bench/xshard.sh                    full run (~15 min with the defaults)
# Environment:
#   XS_BEFORE_BIN=/path/pgcat  BEFORE binary; default: clone this repository
#                              at XS_BEFORE (7651aff) into the temp dir and
#                              build it with -O2 -g
#   XS_AFTER_BIN=/path/pgcat   AFTER binary; default: build XS_AFTER (6e61142)
#   XS_BEFORE=7651aff XS_AFTER=6e61142
#   XS_SHARDS="2 4"  XS_QUERIES="agg ord"  XS_PROTOCOLS="simple extended"
#   XS_CLIENTS="1 8"  XS_SECONDS=6  XS_REPEATS=3  XS_ROWS=1000
#   XS_STRACE=1               the strace -c pass (0: skip it)
#   XS_STRACE_TXN=2000        transactions of the strace run (1 client)
#   XS_OUT=dir                results (log.txt, results.jsonl, summary.md,
#                             machine.txt, strace-*.txt); default
#                             bench/results/<UTC date>-xshard
#   XS_KEEP=1                 keep the temp dir (logs) after the run
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PY=python3

BEFORE=${XS_BEFORE:-7651aff}
AFTER=${XS_AFTER:-6e61142}
SHARDS=${XS_SHARDS:-2 4}
QUERIES=${XS_QUERIES:-agg ord}
PROTOCOLS=${XS_PROTOCOLS:-simple extended}
CLIENTS=${XS_CLIENTS:-1 8}
SECS=${XS_SECONDS:-6}
REPEATS=${XS_REPEATS:-3}
ROWS=${XS_ROWS:-1000}
STRACE=${XS_STRACE:-1}
STRACE_TXN=${XS_STRACE_TXN:-2000}
OUT=${XS_OUT:-$REPO/bench/results/$(date -u +%Y-%m-%d)-xshard}

[ "$(id -u)" = 0 ] || { echo "xshard.sh: run as root (servers are started as user postgres)" >&2; exit 1; }
for b in "$PGBIN/postgres" "$PGBIN/initdb" "$PGBIN/pg_isready" pgbench psql setpriv; do
	command -v "$b" >/dev/null || { echo "xshard.sh: missing $b (apt-get install -y postgresql-15)" >&2; exit 1; }
done
if [ "$STRACE" = 1 ] && ! command -v strace >/dev/null; then
	echo "xshard.sh: no strace, skipping the system-call count" >&2
	STRACE=0
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$OUT/results.jsonl
: >"$RES"
exec > >(tee "$OUT/log.txt") 2>&1
TMP=$(mktemp -d /dev/shm/pgcat-xs.XXXXXX)
chmod 755 "$TMP"
chown postgres: "$TMP"
PIDS=()   # started daemons, stopped in reverse order on exit
PG_PID=
STRACE_PID=

cleanup() {
	local rc=$? i pid
	trap - EXIT INT TERM
	if [ -n "$STRACE_PID" ]; then kill -INT "$STRACE_PID" 2>/dev/null || true; wait "$STRACE_PID" 2>/dev/null || true; fi
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		pid=${PIDS[i]}
		if [ "$pid" = "$PG_PID" ]; then kill -INT "$pid" 2>/dev/null || true
		else kill -TERM "$pid" 2>/dev/null || true; fi
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [ "${XS_KEEP:-0}" = 1 ] || [ $rc != 0 ]; then
		echo "xshard.sh: temp dir kept: $TMP (logs)" >&2
		[ $rc = 0 ] || rm -rf "$TMP/pgdata" "$TMP/src-before" "$TMP/src-after"
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

read -r PGPORT PORT_BEFORE PORT_AFTER <<<"$($PY "$HERE/bench.py" freeports 3)"

# ---------------------------------------------------------------- builds
build() { # name commit -> prints the binary's path
	local dir="$TMP/src-$1"
	echo "== building $1 (pgcat $2, -O2 -g)" >&2
	git clone -q "$REPO" "$dir"
	(git -C "$dir" checkout -q "$2" && cd "$dir" && ./autogen.sh && ./configure CFLAGS="-O2 -g" && make -j"$(nproc)") \
		>"$TMP/build-$1.log" 2>&1 || { tail -30 "$TMP/build-$1.log" >&2; return 1; }
	echo "$dir/pgcat"
}
if [ -z "${XS_BEFORE_BIN:-}" ]; then
	XS_BEFORE_BIN=$(build before "$BEFORE")
	BEFORE_DESC="$(git -C "$TMP/src-before" rev-parse HEAD) (built here, -O2 -g)"
else
	BEFORE_DESC="XS_BEFORE_BIN=$XS_BEFORE_BIN (said to be $BEFORE)"
fi
if [ -z "${XS_AFTER_BIN:-}" ]; then
	XS_AFTER_BIN=$(build after "$AFTER")
	AFTER_DESC="$(git -C "$TMP/src-after" rev-parse HEAD) (built here, -O2 -g)"
else
	AFTER_DESC="XS_AFTER_BIN=$XS_AFTER_BIN (said to be $AFTER)"
fi
declare -A BIN=([before]=$XS_BEFORE_BIN [after]=$XS_AFTER_BIN)
declare -A PORT=([before]=$PORT_BEFORE [after]=$PORT_AFTER)

# ---------------------------------------------------------------- machine
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "command: XS_SHARDS=\"$SHARDS\" XS_QUERIES=\"$QUERIES\" XS_PROTOCOLS=\"$PROTOCOLS\" XS_CLIENTS=\"$CLIENTS\" XS_SECONDS=$SECS XS_REPEATS=$REPEATS XS_ROWS=$ROWS XS_STRACE=$STRACE bench/xshard.sh"
	echo "script: bench/xshard.sh at $(git -C "$REPO" rev-parse --short HEAD)$(
		if ! git -C "$REPO" ls-files --error-unmatch bench/xshard.sh >/dev/null 2>&1; then echo ' (not committed yet)'
		elif ! git -C "$REPO" diff --quiet HEAD -- bench/xshard.sh; then echo ' (modified)'; fi)"
	echo "before: $BEFORE_DESC"
	echo "after: $AFTER_DESC"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel: $(uname -sr)"
	echo "os: $(. /etc/os-release; echo "$PRETTY_NAME")"
	echo "postgresql: $("$PGBIN/postgres" --version)"
	echo "pgbench: $(pgbench --version)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

# ---------------------------------------------------------------- PostgreSQL
echo "== PostgreSQL on 127.0.0.1:$PGPORT, data in $TMP/pgdata"
echo bench >"$TMP/pwfile"
chown postgres: "$TMP/pwfile"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/pgdata" -U postgres -A scram-sha-256 --pwfile="$TMP/pwfile" \
	-E UTF8 --no-sync >"$TMP/initdb.log" 2>&1
cat >>"$TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TMP'
max_connections = 200
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
log_min_messages = warning
EOF
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/pgdata" >"$TMP/postgres.log" 2>&1 &
PG_PID=$!
PIDS+=("$PG_PID")
export PGPASSWORD=bench
for _ in $(seq 100); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" && break; sleep 0.1; done
psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "CREATE ROLE bench LOGIN PASSWORD 'bench'"
dbs_of() { # shards -> the shard databases of that pool
	if [ "$1" = 2 ]; then echo shard0 shard1; else seq -f "shard${1}_%g" 0 $(($1 - 1)); fi
}
for n in $SHARDS; do
	for db in $(dbs_of "$n"); do
		psql -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db OWNER bench"
		psql -q -h 127.0.0.1 -p "$PGPORT" -U bench -d "$db" -v ON_ERROR_STOP=1 \
			-c "CREATE TABLE t (id bigint PRIMARY KEY, v int NOT NULL)"
	done
done

# ---------------------------------------------------------------- pgcat
start_pgcat() { # before|after
	{
		cat <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = ${PORT[$1]}
unix_socket_dir =
workers = 1
pool_mode = transaction
default_pool_size = 10
max_client_conn = 1000
log_level = warning
log_connections = false
log_disconnections = false
auth_type = md5
EOF
		for n in $SHARDS; do
			cat <<EOF
[pools.xs$n]
query_parser_enabled = true
sharding_function = pg_bigint_hash
sharded_tables = t.id
default_shard = 0
[pools.xs$n.users.bench]
password = bench
pool_size = 10
EOF
			i=0
			for db in $(dbs_of "$n"); do
				printf '[pools.xs%s.shards.%s]\ndatabase = %s\nservers = 127.0.0.1:%s:primary\n' "$n" "$i" "$db" "$PGPORT"
				i=$((i + 1))
			done
		done
	} >"$TMP/pgcat-$1.ini"
	chown postgres: "$TMP/pgcat-$1.ini"
	"${AS_PG[@]}" "${BIN[$1]}" "$TMP/pgcat-$1.ini" >"$TMP/pgcat-$1.log" 2>&1 &
	PIDS+=("$!")
	eval "PID_$1=$!"
}
start_pgcat before
start_pgcat after
declare -A PID=([before]=$PID_before [after]=$PID_after)
for b in before after; do
	ok=
	for _ in $(seq 100); do
		kill -0 "${PID[$b]}" 2>/dev/null || break
		psql -h 127.0.0.1 -p "${PORT[$b]}" -U bench -d "xs${SHARDS%% *}" -Atc 'SELECT 1' >/dev/null 2>&1 && { ok=1; break; }
		sleep 0.1
	done
	[ -n "$ok" ] || { echo "xshard.sh: pgcat $b did not come up; log:" >&2; tail -20 "$TMP/pgcat-$b.log" >&2; exit 1; }
	echo "pgcat $b: pid ${PID[$b]}, port ${PORT[$b]}, $("${BIN[$b]}" --version 2>&1 | head -1)" | tee -a "$OUT/machine.txt"
done

# ---------------------------------------------------------------- data
# One multi-row INSERT through pgcat (AFTER): pgcat splits it by t.id, so each
# shard gets the rows pg_bigint_hash gives it. Then check each shard directly
# and the merged answers through both binaries.
for n in $SHARDS; do
	$PY - "$ROWS" >"$TMP/load.sql" <<'EOF'
import sys
n = int(sys.argv[1])
print("INSERT INTO t (id, v) VALUES " + ", ".join(f"({i}, {i * 7919 % 1000})" for i in range(1, n + 1)) + ";")
EOF
	psql -q -h 127.0.0.1 -p "${PORT[after]}" -U bench -d "xs$n" -v ON_ERROR_STOP=1 -f "$TMP/load.sql"
	counts=
	for db in $(dbs_of "$n"); do
		c=$(psql -At -h 127.0.0.1 -p "$PGPORT" -U bench -d "$db" -c "SELECT count(*) FROM t")
		[ "$c" -gt 0 ] || { echo "xshard.sh: shard $db got no rows" >&2; exit 1; }
		counts="$counts $db=$c"
		psql -q -h 127.0.0.1 -p "$PGPORT" -U bench -d "$db" -c "VACUUM ANALYZE t"
	done
	echo "rows per shard ($n shards):$counts" | tee -a "$OUT/machine.txt"
	want_agg=$(psql -At -h 127.0.0.1 -p "$PGPORT" -U bench -d postgres -c \
		"SELECT count(*) || '|' || sum(g * 7919 % 1000) FROM generate_series(1, $ROWS) g")
	want_ord=$(seq -s, 1 10)
	for b in before after; do
		got_agg=$(psql -At -h 127.0.0.1 -p "${PORT[$b]}" -U bench -d "xs$n" -c "SELECT count(*), sum(v) FROM t")
		got_ord=$(psql -At -h 127.0.0.1 -p "${PORT[$b]}" -U bench -d "xs$n" -c "SELECT id, v FROM t ORDER BY id LIMIT 10" | cut -d'|' -f1 | paste -sd,)
		[ "$got_agg" = "$want_agg" ] && [ "$got_ord" = "$want_ord" ] ||
			{ echo "xshard.sh: pgcat $b, xs$n: got '$got_agg' / '$got_ord', want '$want_agg' / '$want_ord'" >&2; exit 1; }
	done
	echo "merged answers checked through both binaries ($n shards): $want_agg; ids $want_ord"
done

echo 'SELECT count(*), sum(v) FROM t;' >"$TMP/agg.sql"
echo 'SELECT id, v FROM t ORDER BY id LIMIT 10;' >"$TMP/ord.sql"
chmod 644 "$TMP"/*.sql

# ---------------------------------------------------------------- cells
cat >"$TMP/xs.py" <<'EOF'
import json, os, re, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from bench import proc_tree, sys_cpu, CLK_TCK

def ticks(pids):
    """(utime, stime) clock ticks summed over the process trees of pids."""
    u = s = 0
    for p in proc_tree(pids):
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        u += int(fields[11]); s += int(fields[12])
    return u, s

(_, binary, pid, port, shards, query, proto, clients, rep, secs, script, out) = sys.argv[1:]
clients = int(clients)
cmd = ["pgbench", "-n", "-f", script, "-M", proto, "-c", str(clients), "-j", str(min(2, clients)),
       "-T", secs, "-h", "127.0.0.1", "-p", port, "-U", "bench", "xs" + shards]
m0 = sys_cpu(); t0 = time.monotonic(); u0, s0 = ticks([int(pid)])
p = subprocess.run(cmd, capture_output=True, text=True)
u1, s1 = ticks([int(pid)]); wall = time.monotonic() - t0; m1 = sys_cpu()
g = lambda rx, conv=float: (lambda m: conv(m.group(1)) if m else None)(re.search(rx, p.stdout, re.M))
r = {"binary": binary, "shards": int(shards), "query": query, "protocol": proto, "clients": clients,
     "repeat": int(rep), "seconds": int(secs), "rc": p.returncode, "wall": round(wall, 2),
     "tps": g(r"^tps = ([\d.]+)"), "txn": g(r"^number of transactions actually processed: (\d+)", int),
     "failed": g(r"^number of failed transactions: (\d+)", int),
     "lat_ms": g(r"^latency average = ([\d.]+) ms"),
     "cpu_ticks_user": u1 - u0, "cpu_ticks_sys": s1 - s0,
     "machine_busy_pct": round((m1[0] - m0[0]) * 100 / max(1, m1[1] - m0[1]), 1),
     "load1": float(open("/proc/loadavg").read().split()[0]),
     "errors": [l for l in p.stderr.splitlines() if l.strip()][:3]}
if r["txn"]:
    k = 1e6 / CLK_TCK / r["txn"]
    r["cpu_us_per_txn"] = (r["cpu_ticks_user"] + r["cpu_ticks_sys"]) * k
    r["user_us_per_txn"] = r["cpu_ticks_user"] * k
    r["sys_us_per_txn"] = r["cpu_ticks_sys"] * k
with open(out, "a") as f:
    f.write(json.dumps(r) + "\n")
bad = "" if p.returncode == 0 and not r["failed"] else f"  rc={p.returncode} failed={r['failed']} {r['errors'][:1]}"
print(f"  {shards}sh {query} {proto:8} c={clients} {binary:6} r{rep} tps={r['tps'] or 0:8.0f} "
      f"cpu_us/txn={r.get('cpu_us_per_txn', 0):6.1f} (usr {r.get('user_us_per_txn', 0):5.1f} "
      f"sys {r.get('sys_us_per_txn', 0):5.1f}) busy={r['machine_busy_pct']}%{bad}", flush=True)
EOF

cell() { # binary shards query protocol clients repeat seconds
	$PY "$TMP/xs.py" "$HERE" "$1" "${PID[$1]}" "${PORT[$1]}" "$2" "$3" "$4" "$5" "$6" "$7" "$TMP/$3.sql" "$RES"
}

echo "== warm-up (fill every pool, both binaries)"
for n in $SHARDS; do
	for b in before after; do
		pgbench -n -f "$TMP/agg.sql" -c 8 -j 2 -T 2 -h 127.0.0.1 -p "${PORT[$b]}" -U bench "xs$n" >/dev/null 2>&1 ||
			echo "   warm-up against $b xs$n failed" >&2
	done
done

echo "== cells: ${SECS}s x $REPEATS repeats, B A interleaved; shards: $SHARDS, queries: $QUERIES, protocols: $PROTOCOLS, clients: $CLIENTS"
for n in $SHARDS; do
	for q in $QUERIES; do
		for p in $PROTOCOLS; do
			for c in $CLIENTS; do
				for r in $(seq "$REPEATS"); do
					cell before "$n" "$q" "$p" "$c" "$r" "$SECS"
					cell after "$n" "$q" "$p" "$c" "$r" "$SECS"
				done
			done
		done
	done
done

for b in before after; do
	kill -0 "${PID[$b]}" 2>/dev/null || { echo "xshard.sh: WARNING: pgcat $b (pid ${PID[$b]}) died during the run" | tee -a "$OUT/machine.txt" >&2; }
done

# ---------------------------------------------------------------- strace
# After every timed cell: strace slows the traced worker many times over.
# Attached to the worker (the supervisor's child), -f for any thread, one
# client, a fixed number of transactions of the first shard count's first
# query, simple protocol.
if [ "$STRACE" = 1 ]; then
	n=${SHARDS%% *}
	q=${QUERIES%% *}
	echo "== strace -c: ${n} shards, $q, simple, 1 client, $STRACE_TXN transactions"
	for b in before after; do
		w=$(cat /proc/"${PID[$b]}"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . | head -1)
		[ -n "$w" ] || { echo "   no worker process under pgcat $b (pid ${PID[$b]})" >&2; continue; }
		strace -c -f -p "$w" -o "$OUT/strace-$b.txt" &
		STRACE_PID=$!
		sleep 1
		pgbench -n -f "$TMP/$q.sql" -M simple -c 1 -t "$STRACE_TXN" -h 127.0.0.1 -p "${PORT[$b]}" -U bench "xs$n" \
			>"$TMP/strace-pgbench-$b.log" 2>&1 || echo "   pgbench under strace failed ($b)" >&2
		kill -INT "$STRACE_PID" 2>/dev/null || true
		wait "$STRACE_PID" 2>/dev/null || true
		STRACE_PID=
		calls=$(awk '$NF == "total" {print $4}' "$OUT/strace-$b.txt")
		printf '   %-6s worker pid %s: %s system calls / %s transactions = %.1f per transaction\n' \
			"$b" "$w" "$calls" "$STRACE_TXN" "$(awk -v c="${calls:-0}" -v t="$STRACE_TXN" 'BEGIN {print c / t}')" | tee -a "$OUT/strace-summary.txt"
	done
fi

# ---------------------------------------------------------------- report
for b in before after; do cp "$TMP/pgcat-$b.log" "$OUT/pgcat-$b.log"; cp "$TMP/pgcat-$b.ini" "$OUT/pgcat-$b.ini"; done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
$PY - "$RES" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for r in rows:
    cells.setdefault((r["shards"], r["query"], r["protocol"], r["clients"]), {}).setdefault(r["binary"], []).append(r)
med = lambda rs, k: statistics.median([r[k] for r in rs if r.get(k) is not None]) if any(r.get(k) is not None for r in rs) else float("nan")
print("Medians over repeats; ratio = AFTER / BEFORE (tps: > 1 is better; CPU: < 1 is better).")
print("CPU = pgcat's utime+stime (supervisor + worker) over the pgbench run / transactions, in µs.\n")
print("| shards | query | protocol | clients | tps B | tps A | tps A/B | CPU/txn B | CPU/txn A | CPU A/B | usr B | usr A | sys B | sys A | sys A/B | busy % |")
print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
ratios = {"tps": [], "cpu": []}
for key in sorted(cells, key=lambda k: (k[0], k[1], k[2], k[3])):
    B, A = cells[key].get("before", []), cells[key].get("after", [])
    tb, ta, cb, ca = med(B, "tps"), med(A, "tps"), med(B, "cpu_us_per_txn"), med(A, "cpu_us_per_txn")
    ub, ua, sb, sa = med(B, "user_us_per_txn"), med(A, "user_us_per_txn"), med(B, "sys_us_per_txn"), med(A, "sys_us_per_txn")
    busy = statistics.median([r["machine_busy_pct"] for r in A + B])
    ratios["tps"].append(ta / tb); ratios["cpu"].append(ca / cb)
    bad = sum(1 for r in A + B if r["rc"] or r["failed"])
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {tb:.0f} | {ta:.0f} | {ta / tb:.2f} | {cb:.1f} | {ca:.1f} | "
          f"{ca / cb:.2f} | {ub:.1f} | {ua:.1f} | {sb:.1f} | {sa:.1f} | {sa / sb:.2f} | {busy:.0f}{' (%d failed runs)' % bad if bad else ''} |")
print(f"\nMedian of the cells' ratios: tps A/B {statistics.median(ratios['tps']):.2f} "
      f"(range {min(ratios['tps']):.2f}–{max(ratios['tps']):.2f}), "
      f"CPU/txn A/B {statistics.median(ratios['cpu']):.2f} "
      f"(range {min(ratios['cpu']):.2f}–{max(ratios['cpu']):.2f}).")
EOF
if [ -s "$OUT/strace-summary.txt" ]; then
	{ echo; echo "strace -c (one short run each, after the timed cells):"; cat "$OUT/strace-summary.txt"; } | tee -a "$OUT/summary.md"
fi
echo
echo "results: $OUT (log.txt, machine.txt, results.jsonl, summary.md, strace-*.txt)"
