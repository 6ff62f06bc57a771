#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/twophase.sh — what two_phase_commit costs (doc/sharding.md, "Atomic
# commit"): cross-shard write transactions per second with and without it.
#
# Starts a throwaway PostgreSQL 15 (data under /dev/shm, fsync = off,
# max_prepared_transactions = 100) with the shard databases shard0 and
# shard1, each with the table ledger (id bigint, amount bigint), and two
# pgcat processes of ONE binary whose configs differ only in
# two_phase_commit: "off" (false) and "on" (true); workers = 1, transaction
# mode, pool tp sharded by ledger.id with pg_bigint_hash, the same state_dir
# (a directory on a real disk, TP_STATE_PARENT, default /var/tmp: the
# decision log is fdatasync'd; only "on" writes there). At setup two keys are
# picked with PostgreSQL's own hash partitioning (satisfies_hash_partition
# on a helper table PARTITION BY HASH (id), modulus 2): KEY_A on shard 0,
# KEY_B on shard 1, and KEY_C, a second key on shard 0.
#
# Workloads (pgbench custom scripts, autocommit):
#   xshard  INSERT INTO ledger (id, amount) VALUES (KEY_A, :neg), (KEY_B, :amt)
#           one cross-shard transfer: pgcat splits the INSERT over both
#           shards; "off" commits each shard, "on" runs PREPARE TRANSACTION
#           on both, logs the decision (fdatasync), then COMMIT PREPARED
#   single  INSERT INTO ledger (id, amount) VALUES (KEY_C, :amt)
#           one shard only: both instances should cost the same
#
# For each cell (workload x protocol x clients) pgbench -n runs TP_REPEATS
# times against each instance, interleaved (off on, on off, off on, ...),
# and the script reports the median tps, the on/off ratio, the median
# latency, pgcat's CPU time per transaction (utime + stime of the
# instance's supervisor and worker from /proc/PID/stat over the run /
# transactions) and PostgreSQL's (postmaster and backends, the same way).
# Before the cells it times 2,000 appends + fdatasync of a line on
# state_dir's filesystem alone (machine.txt). After the cells it checks that no shard holds a prepared
# transaction, that every transfer left both rows (count(KEY_A) on shard 0 =
# count(KEY_B) on shard 1 = the transfers pgbench counted, amounts summing
# to 0, no row on the wrong shard), and reports the decision log of "on"
# (files 2pc-*.log in state_dir: lines, bytes; the log is rewritten to the
# decisions still needed past 1 MiB, so its line count is a floor, and the
# highest sequence number in it is the number of two-phase commits begun).
#
# Usage (as root: the servers run as OS user postgres):
#   bench/twophase.sh
# Environment:
#   TP_BIN=/path/pgcat    the binary (default: build-o2/pgcat of this
#                         checkout: bash -c '. scripts/lib.sh;
#                         build_out_of_tree build-o2 CFLAGS="-O2 -g"')
#   TP_WORKLOADS="xshard single"  TP_PROTOCOLS="simple extended"
#   TP_CLIENTS="1 8"  TP_SECONDS=5  TP_REPEATS=4
#   TP_STATE_PARENT=/var/tmp   where state_dir is made (and removed at exit)
#   TP_OUT=dir   results (log.txt, machine.txt, results.jsonl, summary.md,
#                both configs and logs); default
#                bench/results/<UTC date>-twophase
#   TP_KEEP=1    keep the temp dir after the run
# Everything it starts is stopped by PID on exit; nothing is left behind.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PY=python3
WORKLOADS=${TP_WORKLOADS:-xshard single}
PROTOCOLS=${TP_PROTOCOLS:-simple extended}
CLIENTS=${TP_CLIENTS:-1 8}
SECS=${TP_SECONDS:-5}
REPEATS=${TP_REPEATS:-4}
STATE_PARENT=${TP_STATE_PARENT:-/var/tmp}
OUT=${TP_OUT:-$REPO/bench/results/$(date -u +%Y-%m-%d)-twophase}
BIN=${TP_BIN:-$REPO/build-o2/pgcat}
WARM_TXN=200   # transactions per client of the warm-up runs

[ "$(id -u)" = 0 ] || { echo "twophase.sh: run as root (servers are started as user postgres)" >&2; exit 1; }
for b in "$PGBIN/postgres" "$PGBIN/initdb" "$PGBIN/pg_isready" pgbench psql setpriv "$BIN"; do
	command -v "$b" >/dev/null || { echo "twophase.sh: missing $b" >&2; exit 1; }
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$OUT/results.jsonl
: >"$RES"
exec > >(tee "$OUT/log.txt") 2>&1
TMP=$(mktemp -d /dev/shm/pgcat-tp.XXXXXX)
chmod 755 "$TMP"
chown postgres: "$TMP"
STATE_TOP=$(mktemp -d "$STATE_PARENT/pgcat-tp-state.XXXXXX")
chmod 755 "$STATE_TOP"
STATE=$STATE_TOP/state
mkdir "$STATE"
chown postgres: "$STATE"
chmod 700 "$STATE"
PIDS=()   # started daemons, stopped in reverse order on exit
PG_PID=

cleanup() {
	local rc=$? i pid
	trap - EXIT INT TERM
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		pid=${PIDS[i]}
		if [ "$pid" = "$PG_PID" ]; then kill -INT "$pid" 2>/dev/null || true
		else kill -TERM "$pid" 2>/dev/null || true; fi
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$STATE_TOP"
	if [ "${TP_KEEP:-0}" = 1 ] || [ $rc != 0 ]; then
		echo "twophase.sh: temp dir kept: $TMP (logs)" >&2
		[ $rc = 0 ] || rm -rf "$TMP/pgdata"
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# "${AS_PG[@]}" cmd & makes $! the daemon's own PID (setpriv execs it).
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
read -r PGPORT PORT_OFF PORT_ON <<<"$($PY "$HERE/bench.py" freeports 3)"
declare -A PORT=([off]=$PORT_OFF [on]=$PORT_ON)
export PGPASSWORD=bench
fs_of() { df -PT "$1" | awk 'NR == 2 {print $2 " (" $1 ", mounted on " $7 ")"}'; }

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "command: TP_BIN=$BIN TP_WORKLOADS=\"$WORKLOADS\" TP_PROTOCOLS=\"$PROTOCOLS\" TP_CLIENTS=\"$CLIENTS\" TP_SECONDS=$SECS TP_REPEATS=$REPEATS TP_STATE_PARENT=$STATE_PARENT bench/twophase.sh"
	echo "script: bench/twophase.sh at $(git -C "$REPO" rev-parse --short HEAD)$(
		if ! git -C "$REPO" ls-files --error-unmatch bench/twophase.sh >/dev/null 2>&1; then echo ' (not committed yet)'
		elif ! git -C "$REPO" diff --quiet HEAD -- bench/twophase.sh; then echo ' (modified)'; fi)"
	echo "pgcat: $BIN ($("$BIN" --version 2>&1 | head -1)), source tree at $(git -C "$REPO" rev-parse --short HEAD)"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel: $(uname -sr)"
	echo "os: $(. /etc/os-release; echo "$PRETTY_NAME")"
	echo "postgresql: $("$PGBIN/postgres" --version)"
	echo "pgbench: $(pgbench --version)"
	echo "PostgreSQL data: $TMP/pgdata on $(fs_of "$TMP") (fsync = off, synchronous_commit = off)"
	echo "state_dir: $STATE on $(fs_of "$STATE")"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

# ---------------------------------------------------------------- PostgreSQL
echo "== PostgreSQL on 127.0.0.1:$PGPORT"
echo bench >"$TMP/pwfile"
chown postgres: "$TMP/pwfile"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$TMP/pgdata" -U postgres -A scram-sha-256 --pwfile="$TMP/pwfile" \
	-E UTF8 --no-sync >"$TMP/initdb.log" 2>&1
cat >>"$TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TMP'
max_connections = 200
max_prepared_transactions = 100
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
for _ in $(seq 100); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" && break; sleep 0.1; done
pg() { psql -q -At -h 127.0.0.1 -p "$PGPORT" -v ON_ERROR_STOP=1 "$@"; }
pg -U postgres -d postgres -c "CREATE ROLE bench LOGIN PASSWORD 'bench'"
for db in shard0 shard1; do
	pg -U postgres -d postgres -c "CREATE DATABASE $db OWNER bench"
	# insert-only, no index; autovacuum kept off it so that it does not run during one instance's cells only
	pg -U bench -d "$db" -c "CREATE TABLE ledger (id bigint, amount bigint) WITH (autovacuum_enabled = false)"
done
pg -U bench -d shard0 -c "CREATE TABLE hp (id bigint) PARTITION BY HASH (id)"
key_of() { # remainder [skip] -> the first key >= 1 in that hash partition (after skipping some)
	pg -U bench -d shard0 -c "SELECT g FROM generate_series(1, 1000) g WHERE
		satisfies_hash_partition('hp'::regclass, 2, $1, g::bigint) ORDER BY g OFFSET ${2:-0} LIMIT 1"
}
KEY_A=$(key_of 0)
KEY_B=$(key_of 1)
KEY_C=$(key_of 0 1)
echo "keys: KEY_A=$KEY_A (shard 0), KEY_B=$KEY_B (shard 1), KEY_C=$KEY_C (shard 0)" | tee -a "$OUT/machine.txt"

# ---------------------------------------------------------------- pgcat
start_pgcat() { # off|on
	cat >"$TMP/pgcat-$1.ini" <<EOF
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
two_phase_commit = $([ "$1" = on ] && echo true || echo false)
state_dir = $STATE
[pools.tp]
query_parser_enabled = true
sharding_function = pg_bigint_hash
sharded_tables = ledger.id
default_shard = 0
[pools.tp.users.bench]
password = bench
pool_size = 10
[pools.tp.shards.0]
database = shard0
servers = 127.0.0.1:$PGPORT:primary
[pools.tp.shards.1]
database = shard1
servers = 127.0.0.1:$PGPORT:primary
EOF
	chown postgres: "$TMP/pgcat-$1.ini"
	"${AS_PG[@]}" "$BIN" "$TMP/pgcat-$1.ini" >"$TMP/pgcat-$1.log" 2>&1 &
	PIDS+=("$!")
	eval "PID_$1=$!"
}
start_pgcat off
start_pgcat on
declare -A PID=([off]=$PID_off [on]=$PID_on)
for b in off on; do
	ok=
	for _ in $(seq 100); do
		kill -0 "${PID[$b]}" 2>/dev/null || break
		psql -h 127.0.0.1 -p "${PORT[$b]}" -U bench -d tp -Atc 'SELECT 1' >/dev/null 2>&1 && { ok=1; break; }
		sleep 0.1
	done
	[ -n "$ok" ] || { echo "twophase.sh: pgcat $b did not come up; log:" >&2; tail -20 "$TMP/pgcat-$b.log" >&2; exit 1; }
	echo "pgcat $b: pid ${PID[$b]}, port ${PORT[$b]}" | tee -a "$OUT/machine.txt"
done
diff "$TMP/pgcat-off.ini" "$TMP/pgcat-on.ini" | grep '^[<>]' | sed 's/^/config diff: /' | tee -a "$OUT/machine.txt" || true

cat >"$TMP/xshard.sql" <<EOF
\set amt random(1, 1000)
\set neg -1 * :amt
INSERT INTO ledger (id, amount) VALUES ($KEY_A, :neg), ($KEY_B, :amt);
EOF
cat >"$TMP/single.sql" <<EOF
\set amt random(1, 1000)
INSERT INTO ledger (id, amount) VALUES ($KEY_C, :amt);
EOF
chmod 644 "$TMP"/*.sql

# One transfer through each instance, seen on both shards; then the
# warm-up (fills the pools), counted for the final check.
for b in off on; do
	psql -q -h 127.0.0.1 -p "${PORT[$b]}" -U bench -d tp -v ON_ERROR_STOP=1 \
		-c "INSERT INTO ledger (id, amount) VALUES ($KEY_A, -1), ($KEY_B, 1)"
done
got="$(pg -U bench -d shard0 -c "SELECT count(*) FROM ledger WHERE id = $KEY_A") $(pg -U bench -d shard1 -c "SELECT count(*) FROM ledger WHERE id = $KEY_B")"
[ "$got" = "2 2" ] || { echo "twophase.sh: a transfer through each instance left '$got' rows on shard 0 / shard 1, want '2 2'" >&2; exit 1; }
echo "one transfer through each instance: both rows on their shards"
WARM=0
echo "== warm-up: pgbench -c 8 -t $WARM_TXN, every workload and protocol, both instances"
for w in $WORKLOADS; do
	for p in $PROTOCOLS; do
		for b in off on; do
			pgbench -n -f "$TMP/$w.sql" -M "$p" -c 8 -j 2 -t "$WARM_TXN" -h 127.0.0.1 -p "${PORT[$b]}" -U bench tp \
				>"$TMP/warm.log" 2>&1 || { echo "twophase.sh: warm-up $w $p against $b failed:" >&2; tail -5 "$TMP/warm.log" >&2; exit 1; }
			if [ "$w" = xshard ]; then WARM=$((WARM + 8 * WARM_TXN)); fi
		done
	done
done

# What one decision's fdatasync costs on state_dir's filesystem, alone (a
# line appended and synced, as twophase.c does), for the report.
$PY - "$STATE_TOP" 2000 <<'EOF' | tee -a "$OUT/machine.txt"
import os, statistics, sys, time
p = os.path.join(sys.argv[1], "fdatasync-probe")
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
lat = []
try:
    for i in range(1, int(sys.argv[2]) + 1):
        t = time.perf_counter()
        os.write(fd, b"commit %d\n" % i)
        os.fdatasync(fd)
        lat.append((time.perf_counter() - t) * 1e6)
finally:
    os.close(fd); os.unlink(p)
lat.sort()
print(f"fdatasync probe on state_dir's filesystem: {len(lat)} appends of a line + fdatasync: median "
      f"{statistics.median(lat):.0f} µs, p10 {lat[len(lat) // 10]:.0f}, p90 {lat[len(lat) * 9 // 10]:.0f}, "
      f"p99 {lat[len(lat) * 99 // 100]:.0f}, max {lat[-1]:.0f} µs")
EOF

# ---------------------------------------------------------------- cells
cat >"$TMP/tp.py" <<'EOF'
import json, re, subprocess, sys, time
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

(_, inst, pid, pg_pid, port, work, proto, clients, rep, secs, script, out) = sys.argv[1:]
clients = int(clients)
cmd = ["pgbench", "-n", "-f", script, "-M", proto, "-c", str(clients), "-j", str(min(2, clients)),
       "-T", secs, "-h", "127.0.0.1", "-p", port, "-U", "bench", "tp"]
m0 = sys_cpu(); t0 = time.monotonic(); u0, s0 = ticks([int(pid)]); pu0, ps0 = ticks([int(pg_pid)])
p = subprocess.run(cmd, capture_output=True, text=True)
u1, s1 = ticks([int(pid)]); pu1, ps1 = ticks([int(pg_pid)]); wall = time.monotonic() - t0; m1 = sys_cpu()
g = lambda rx, conv=float: (lambda m: conv(m.group(1)) if m else None)(re.search(rx, p.stdout, re.M))
r = {"instance": inst, "workload": work, "protocol": proto, "clients": clients,
     "repeat": int(rep), "seconds": int(secs), "rc": p.returncode, "wall": round(wall, 2),
     "tps": g(r"^tps = ([\d.]+)"), "txn": g(r"^number of transactions actually processed: (\d+)", int),
     "failed": g(r"^number of failed transactions: (\d+)", int),
     "lat_ms": g(r"^latency average = ([\d.]+) ms"),
     "cpu_ticks_user": u1 - u0, "cpu_ticks_sys": s1 - s0, "pg_cpu_ticks": pu1 - pu0 + ps1 - ps0,
     "machine_busy_pct": round((m1[0] - m0[0]) * 100 / max(1, m1[1] - m0[1]), 1),
     "load1": float(open("/proc/loadavg").read().split()[0]),
     "errors": [l for l in p.stderr.splitlines() if l.strip()][:3]}
if r["txn"]:
    k = 1e6 / CLK_TCK / r["txn"]
    r["cpu_us_per_txn"] = (r["cpu_ticks_user"] + r["cpu_ticks_sys"]) * k
    r["user_us_per_txn"] = r["cpu_ticks_user"] * k
    r["sys_us_per_txn"] = r["cpu_ticks_sys"] * k
    r["pg_cpu_us_per_txn"] = r["pg_cpu_ticks"] * k
with open(out, "a") as f:
    f.write(json.dumps(r) + "\n")
bad = "" if p.returncode == 0 and not r["failed"] else f"  rc={p.returncode} failed={r['failed']} {r['errors'][:1]}"
print(f"  {work:6} {proto:8} c={clients} {inst:3} r{rep} tps={r['tps'] or 0:7.0f} lat={r['lat_ms'] or 0:6.2f}ms "
      f"cpu_us/txn={r.get('cpu_us_per_txn', 0):6.1f} (usr {r.get('user_us_per_txn', 0):5.1f} "
      f"sys {r.get('sys_us_per_txn', 0):5.1f}) pg_us/txn={r.get('pg_cpu_us_per_txn', 0):6.1f} busy={r['machine_busy_pct']}% load={r['load1']}{bad}", flush=True)
EOF

cell() { # instance workload protocol clients repeat
	$PY "$TMP/tp.py" "$HERE" "$1" "${PID[$1]}" "$PG_PID" "${PORT[$1]}" "$2" "$3" "$4" "$5" "$SECS" "$TMP/$2.sql" "$RES"
}

echo "== cells: ${SECS}s x $REPEATS repeats, off/on interleaved (order alternating); workloads: $WORKLOADS, protocols: $PROTOCOLS, clients: $CLIENTS"
for w in $WORKLOADS; do
	for p in $PROTOCOLS; do
		for c in $CLIENTS; do
			for r in $(seq "$REPEATS"); do
				if [ $((r % 2)) = 1 ]; then order="off on"; else order="on off"; fi
				for b in $order; do cell "$b" "$w" "$p" "$c" "$r"; done
			done
		done
	done
done

for b in off on; do
	kill -0 "${PID[$b]}" 2>/dev/null || { echo "twophase.sh: WARNING: pgcat $b (pid ${PID[$b]}) died during the run" | tee -a "$OUT/machine.txt" >&2; }
done

# ---------------------------------------------------------------- checks
echo "== checks after the run"
sleep 1
{
	prep=$(pg -U postgres -d postgres -c "SELECT count(*) FROM pg_prepared_xacts")
	echo "pg_prepared_xacts on the server: $prep rows$( [ "$prep" = 0 ] || echo " (NOT EMPTY: $(pg -U postgres -d postgres -c "SELECT string_agg(gid || '@' || database, ' ') FROM pg_prepared_xacts"))")"
	counted=$($PY - "$RES" <<'PYEOF'
import json, sys
print(sum(r["txn"] or 0 for r in map(json.loads, open(sys.argv[1])) if r["workload"] == "xshard"))
PYEOF
)
	want=$((counted + WARM + 2))
	a=$(pg -U bench -d shard0 -c "SELECT count(*) || ' ' || coalesce(sum(amount), 0) FROM ledger WHERE id = $KEY_A")
	b=$(pg -U bench -d shard1 -c "SELECT count(*) || ' ' || coalesce(sum(amount), 0) FROM ledger WHERE id = $KEY_B")
	wrong=$(( $(pg -U bench -d shard0 -c "SELECT count(*) FROM ledger WHERE id <> $KEY_A AND id <> $KEY_C") +
		$(pg -U bench -d shard1 -c "SELECT count(*) FROM ledger WHERE id <> $KEY_B") ))
	c=$(pg -U bench -d shard0 -c "SELECT count(*) FROM ledger WHERE id = $KEY_C")
	echo "transfer rows: shard 0 (KEY_A) ${a% *} rows, sum ${a#* }; shard 1 (KEY_B) ${b% *} rows, sum ${b#* }; transfers counted by pgbench (timed + warm-up + 2 at setup): $want"
	echo "single-shard rows (KEY_C, shard 0): $c; rows on a wrong shard: $wrong"
	if [ "${a% *}" = "${b% *}" ] && [ "${a% *}" = "$want" ] && [ $(( ${a#* } + ${b#* } )) = 0 ] && [ "$wrong" = 0 ]; then
		echo "transfers check: OK (equal row counts on both shards, = pgbench's count, amounts sum to 0)"
	else
		echo "transfers check: MISMATCH"
	fi
	shopt -s nullglob
	logs=("$STATE"/2pc-*.log)
	echo "decision logs in state_dir: ${#logs[@]} file(s)"
	for f in "${logs[@]}"; do
		echo "  $(basename "$f"): $(wc -l <"$f") lines, $(stat -c %s "$f") bytes, highest sequence number $(awk '{print $2}' "$f" | sort -n | tail -1)"
	done
	others=("$STATE"/*)
	[ ${#others[@]} = ${#logs[@]} ] || echo "  other files in state_dir: $(cd "$STATE" && ls -A | grep -v '^2pc-.*\.log$' | tr '\n' ' ')"
	on_xshard=$($PY - "$RES" <<'PYEOF'
import json, sys
print(sum(r["txn"] or 0 for r in map(json.loads, open(sys.argv[1])) if r["workload"] == "xshard" and r["instance"] == "on"))
PYEOF
)
	echo "cross-shard transactions through \"on\": $((on_xshard + WARM / 2 + 1)) (timed $on_xshard + warm-up $((WARM / 2)) + 1 at setup)"
	for b in off on; do
		n=$(grep -c . "$TMP/pgcat-$b.log" || true)
		echo "pgcat $b log: $n lines$( [ "$n" = 0 ] || echo "; last: $(tail -1 "$TMP/pgcat-$b.log")")"
	done
} | tee "$OUT/checks.txt"

# ---------------------------------------------------------------- report
for b in off on; do cp "$TMP/pgcat-$b.log" "$OUT/pgcat-$b.log"; cp "$TMP/pgcat-$b.ini" "$OUT/pgcat-$b.ini"; done
cp "$TMP/xshard.sql" "$TMP/single.sql" "$OUT/"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
$PY - "$RES" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for r in rows:
    cells.setdefault((r["workload"], r["protocol"], r["clients"]), {}).setdefault(r["instance"], []).append(r)
def med(rs, k):
    v = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(v) if v else float("nan")
def rng(rs, k):
    v = [r[k] for r in rs if r.get(k) is not None]
    return f"{min(v):.0f}–{max(v):.0f}" if v else "-"
print("Medians over repeats; ratio = on / off (tps: < 1 is slower with two_phase_commit; CPU: > 1 is more).")
print("CPU = pgcat's utime+stime (supervisor + worker) over the pgbench run / transactions, in µs;")
print("PG CPU = the same for PostgreSQL (postmaster and every backend, both shards: one server).\n")
print("| workload | protocol | clients | tps off | tps on | tps on/off | tps range off | tps range on | lat ms off | lat ms on | CPU/txn off | CPU/txn on | CPU on/off | PG CPU/txn off | PG CPU/txn on | busy % |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
order = {"xshard": 0, "single": 1}
ratios = {}
for key in sorted(cells, key=lambda k: (order.get(k[0], 9), k[1], k[2])):
    F, N = cells[key].get("off", []), cells[key].get("on", [])
    tf, tn, cf, cn = med(F, "tps"), med(N, "tps"), med(F, "cpu_us_per_txn"), med(N, "cpu_us_per_txn")
    busy = statistics.median([r["machine_busy_pct"] for r in F + N])
    ratios.setdefault(key[0], []).append((tn / tf, cn / cf))
    bad = sum(1 for r in F + N if r["rc"] or r["failed"])
    print(f"| {key[0]} | {key[1]} | {key[2]} | {tf:.0f} | {tn:.0f} | {tn / tf:.2f} | {rng(F, 'tps')} | {rng(N, 'tps')} | "
          f"{med(F, 'lat_ms'):.2f} | {med(N, 'lat_ms'):.2f} | {cf:.1f} | {cn:.1f} | {cn / cf:.2f} | "
          f"{med(F, 'pg_cpu_us_per_txn'):.1f} | {med(N, 'pg_cpu_us_per_txn'):.1f} | {busy:.0f}"
          f"{' (%d failed runs)' % bad if bad else ''} |")
print()
for w, rs in ratios.items():
    t = [a for a, _ in rs]; c = [b for _, b in rs]
    print(f"{w}: median of the cells' ratios: tps on/off {statistics.median(t):.2f} ({min(t):.2f}–{max(t):.2f}), "
          f"CPU/txn on/off {statistics.median(c):.2f} ({min(c):.2f}–{max(c):.2f}).")
EOF
echo
echo "results: $OUT (log.txt, machine.txt, checks.txt, results.jsonl, summary.md, configs and logs)"
