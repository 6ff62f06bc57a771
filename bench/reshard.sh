#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/reshard.sh — how long an online reshard's cutover holds the writes
# under a keyed read-write pgbench load (doc/sharding.md, "Online
# resharding"): pool app moves from 2 shards (s0, s1) to 4 (n0..n3) with
# the console's RESHARD app while pgbench clients (16 by default) read and
# write through pgcat.
#
# Starts a throwaway PostgreSQL 15 (data under /dev/shm, wal_level =
# logical, max_replication_slots = max_wal_senders = 20, fsync = off,
# synchronous_commit = off) with a superuser resharder (REPLICATION,
# password bench, scram-sha-256) and a helper database rshelper holding
# hp (id text) PARTITION BY HASH (id): where key k belongs among N shards is
# computed there as the remainder r with satisfies_hash_partition('hp', N,
# r, k::text), PostgreSQL's own hash of the key's text, which pgcat's
# pg_text_hash reproduces (a bigint key is hashed by its decimal text).
#
# Each run (RS_REPEATS per protocol, the protocols alternating in order):
#   1. reset: pgcat stopped, leftover replication slots dropped, s0 s1 n0..n3
#      dropped and made again; s0 and s1 get items (id bigint PRIMARY KEY, v
#      int, note text) with keys 1..RS_ROWS, each on the shard of its key
#      among 2, and kinds (id int PRIMARY KEY, name text), 20 rows, the same
#      on both (a table kept whole); n0..n3 stay EMPTY (the reshard copies the
#      schema with pg_dump). The placement on s0/s1 is checked.
#   2. a fresh pgcat (the binary, run as root, pg_dump from PostgreSQL 15
#      first in its PATH; workers = 2, transaction mode, prepared_statements,
#      pool app: pg_text_hash on items.id, default_shard = all, user
#      resharder pool_size 20, [pools.app.next.shards.0..3] = n0..n3) with a
#      fresh state_dir; 20 keys read through it must each be found (routing
#      agrees with the helper's hash).
#   3. pgbench -n -c RS_CLIENTS -j 2 -T RS_SECONDS --progress=1 -l (per
#      transaction log) -M simple|extended, script load.sql:
#        UPDATE items SET v = :v WHERE id = :id;
#        SELECT v FROM items WHERE id = :id;
#        INSERT INTO items (id, v, note) VALUES (:nid, :v, 'b')
#          ON CONFLICT (id) DO UPDATE SET v = excluded.v;
#      (:nid = :id + 1000000, computed by pgbench's \set: sent as the
#      expression "k + 1000000" the key would be no constant, and pgcat
#      refuses such an INSERT into a sharded table as a cross-shard write)
#      (id random in 1..RS_ROWS; each statement its own autocommit
#      transaction, each routed by its key to one shard; a pgbench
#      "transaction" is one run of the three statements).
#   4. after RS_RESHARD_AFTER s of load: RESHARD app on the admin console,
#      then SHOW RESHARD every RS_POLL s until phase done (or failed or
#      cancelled, or RS_DONE_TIMEOUT s: the run is then reported failed); at
#      done, a snapshot of s0+s1 (count, sum(v), md5 of the ordered rows).
#   5. pgbench runs to its end; the final SHOW RESHARD row is kept (pause_ms:
#      how long the cutover held the pool's writes, as pgcat measures it);
#      20 keys read through pgcat again (now over n0..n3); pgcat stopped.
#   6. checks: phase done; every items row of n0..n3 on exactly one shard,
#      the one its key hashes to among 4; every key 1..RS_ROWS on n0..n3;
#      every id of s0+s1 on n0..n3 (no row lost, inserted keys included);
#      s0+s1 unchanged between done and the end (nothing written to the old
#      layout after the cutover); kinds whole and equal on every new shard;
#      no replication slot left. (n0..n3 cannot be compared with s0+s1
#      row for row: pgbench keeps writing to n0..n3 after the cutover; the
#      rows that differ, and the ids new since, are counted for information.)
#   7. analysis of pgbench's per-transaction log (start = end - latency):
#      the cutover window is [the log line "cutting over (pausing the pool's
#      writes)", the line "cut over ...; writes were paused N ms"] of pgcat's
#      log (millisecond timestamps, the same wall clock as pgbench's); also
#      the window the polls see (the last poll before the one that saw
#      cutover or done, to the answer of the first that saw done). Reported:
#      the longest transaction in flight during the cutover window (log and
#      poll windows), the p99 of the transactions wholly outside both windows
#      (the first second of load left out), the longest stretch without a
#      completed transaction around the cutover, tps before RESHARD, during
#      copy+replicate and after done, the time of each phase, pgbench's
#      failed transactions and aborted clients (pgbench 15 aborts a client
#      on any error that is not a serialization failure or deadlock; those
#      are reported as what pgbench printed), SHOW RESHARD's largest lag in
#      phase replicate, and whether the cutover came while pgbench still ran
#      (the cutover waits for every stream to be within 1 MB of its source:
#      when the streams catch up only once the load has stopped, that run's
#      pause was not measured under load, and the summary says so). The CPU
#      of pgcat, PostgreSQL, pgbench, this script and every other process
#      is sampled from /proc every 0.5 s during the load (other work on the
#      machine is noise the summary shows).
#   A run fails (the script then exits 1, after the summary) if the reshard
#   does not reach done, a check fails, or pgbench exits non-zero, aborts a
#   client or counts a failed transaction. Nothing is worked around.
#
# Usage (as root: PostgreSQL runs as OS user postgres):
#   bench/reshard.sh
# Environment:
#   RS_BIN=/path/pgcat     the binary (default: build-o2/pgcat of this
#                          checkout, built if missing with: bash -c '.
#                          scripts/lib.sh; build_out_of_tree build-o2
#                          CFLAGS="-O2 -g"')
#   RS_PROTOCOLS="simple extended"  RS_REPEATS=5  RS_SECONDS=60
#   RS_CLIENTS=16  RS_ROWS=200000  RS_RESHARD_AFTER=5  RS_POLL=0.2
#   RS_DONE_TIMEOUT=180    seconds after RESHARD to wait for phase done
#   RS_OUT=dir   results (log.txt, machine.txt, results.jsonl, summary.md,
#                per run: pgbench output, polls, pgcat's reshard log lines,
#                checks); default bench/results/<UTC date>-<commit>-reshard
#   RS_KEEP=1    keep the temp dir (/dev/shm/pgcat-rs.*) after the run
# A default run takes about 17 minutes (10 runs of ~100 s: reset, 60 s of
# load, checks). Everything it starts is stopped by PID on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PY=python3
PROTOCOLS=${RS_PROTOCOLS:-simple extended}
REPEATS=${RS_REPEATS:-5}
SECS=${RS_SECONDS:-60}
CLIENTS=${RS_CLIENTS:-16}
ROWS=${RS_ROWS:-200000}
RESHARD_AFTER=${RS_RESHARD_AFTER:-5}
POLL=${RS_POLL:-0.2}
DONE_TIMEOUT=${RS_DONE_TIMEOUT:-180}
COMMIT=$(git -C "$REPO" rev-parse --short HEAD)
OUT=${RS_OUT:-$REPO/bench/results/$(date -u +%Y-%m-%d)-$COMMIT-reshard}
BIN=${RS_BIN:-$REPO/build-o2/pgcat}
ADMIN_PW=admin_pw
NEW_SHARDS="n0 n1 n2 n3"
ALL_DBS="s0 s1 n0 n1 n2 n3"

[ "$(id -u)" = 0 ] || { echo "reshard.sh: run as root (PostgreSQL is started as user postgres)" >&2; exit 1; }
if [ ! -x "$BIN" ] && [ -z "${RS_BIN:-}" ]; then
	echo "reshard.sh: building $BIN"
	(cd "$REPO" && bash -c '. scripts/lib.sh; build_out_of_tree build-o2 CFLAGS="-O2 -g"') >/dev/null
fi
for b in "$PGBIN/postgres" "$PGBIN/initdb" "$PGBIN/pg_isready" "$PGBIN/pg_dump" pgbench psql setpriv "$BIN"; do
	command -v "$b" >/dev/null || { echo "reshard.sh: missing $b" >&2; exit 1; }
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$OUT/results.jsonl
: >"$RES"
exec > >(tee "$OUT/log.txt") 2>&1
TMP=$(mktemp -d /dev/shm/pgcat-rs.XXXXXX)
chmod 755 "$TMP"
chown postgres: "$TMP"
PG_PID=
CUR_PGCAT=     # the running pgcat and pgbench of the current run, if any
CUR_PGBENCH=
CUR_SAMPLER=   # the CPU sampler of the current run
FAILED_RUNS=0

stop_pid() { # pid signal: signal it, wait up to 10 s, then SIGKILL
	kill "-$2" "$1" 2>/dev/null || return 0
	for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$1" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[ -z "$CUR_SAMPLER" ] || stop_pid "$CUR_SAMPLER" TERM
	[ -z "$CUR_PGBENCH" ] || stop_pid "$CUR_PGBENCH" TERM
	[ -z "$CUR_PGCAT" ] || stop_pid "$CUR_PGCAT" TERM
	[ -z "$PG_PID" ] || stop_pid "$PG_PID" INT
	if [ "${RS_KEEP:-0}" = 1 ] || [ $rc != 0 ]; then
		echo "reshard.sh: temp dir kept: $TMP (logs)" >&2
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
read -r PGPORT <<<"$($PY "$HERE/bench.py" freeports 1)"
export PGPASSWORD=bench
now() { date +%s.%N; }
fs_of() { df -PT "$1" | awk 'NR == 2 {print $2 " (" $1 ", mounted on " $7 ")"}'; }

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "command: RS_BIN=$BIN RS_PROTOCOLS=\"$PROTOCOLS\" RS_REPEATS=$REPEATS RS_SECONDS=$SECS RS_CLIENTS=$CLIENTS RS_ROWS=$ROWS RS_RESHARD_AFTER=$RESHARD_AFTER RS_POLL=$POLL RS_DONE_TIMEOUT=$DONE_TIMEOUT bench/reshard.sh"
	echo "script: bench/reshard.sh at $COMMIT$(
		if ! git -C "$REPO" ls-files --error-unmatch bench/reshard.sh >/dev/null 2>&1; then echo ' (not committed yet)'
		elif ! git -C "$REPO" diff --quiet HEAD -- bench/reshard.sh; then echo ' (modified)'; fi)"
	echo "pgcat: $BIN ($("$BIN" --version 2>&1 | head -1), built $(date -u -r "$BIN" +%Y-%m-%dT%H:%M:%SZ)), source tree at $COMMIT$(
		git -C "$REPO" diff --quiet HEAD -- src || echo ' (src/ has uncommitted changes)')"
	if [ "$(stat -c %Y "$BIN")" -lt "$(git -C "$REPO" log -1 --format=%ct -- src)" ]; then
		echo "WARNING: the binary is older than the last commit to src/ ($(git -C "$REPO" log -1 --format='%h %cI' -- src))"
	fi
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel: $(uname -sr)"
	echo "os: $(. /etc/os-release; echo "$PRETTY_NAME")"
	echo "postgresql: $("$PGBIN/postgres" --version)"
	echo "pgbench: $(pgbench --version)"
	echo "PostgreSQL data: $TMP/pgdata on $(fs_of "$TMP") (fsync = off, synchronous_commit = off, wal_level = logical)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "other processes at start (by name): $(ps -eo comm= | grep -E '^(postgres|pgcat|pgbouncer|pytest|pgbench|python3?|odyssey|pg_doorman)$' | sort | uniq -c | awk '{printf "%s %s; ", $2, $1}')"
	echo "busiest processes at start (ps, %CPU over their lifetime): $(ps -eo pcpu=,comm= --sort=-pcpu | head -5 | awk '{printf "%s %s%%; ", $2, $1}')"
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
shared_buffers = 256MB
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
fsync = off
synchronous_commit = off
full_page_writes = off
password_encryption = 'scram-sha-256'
logging_collector = off
log_min_messages = warning
EOF
"${AS_PG[@]}" "$PGBIN/postgres" -D "$TMP/pgdata" >"$TMP/postgres.log" 2>&1 &
PG_PID=$!
for _ in $(seq 100); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" && break; sleep 0.1; done
pg() { PGOPTIONS='-c client_min_messages=warning' psql -X -q -At -h 127.0.0.1 -p "$PGPORT" -U postgres -v ON_ERROR_STOP=1 "$@"; }
pg -d postgres -c "CREATE ROLE resharder SUPERUSER REPLICATION LOGIN PASSWORD 'bench'"
pg -d postgres -c "CREATE DATABASE rshelper"
pg -d rshelper -c "CREATE TABLE hp (id text) PARTITION BY HASH (id)"
echo "postgresql: $(pg -d postgres -c "SELECT current_setting('server_version') || ', wal_level ' || current_setting('wal_level')")" | tee -a "$OUT/machine.txt"

# Where key k belongs among N shards (the helper's partition remainder).
shard_sql() { echo "satisfies_hash_partition('hp'::regclass, $1, $2, $3::text)"; }

reset_dbs() {
	# Leftover slots (pgcat is stopped: none is active; a WAL sender still
	# holding one is ended first), then every database made again.
	local slot pid db r
	while IFS='|' read -r slot pid db; do
		[ -n "$slot" ] || continue
		[ -z "$pid" ] || pg -d postgres -c "SELECT pg_terminate_backend($pid, 5000)" >/dev/null
		pg -d "${db:-postgres}" -c "SELECT pg_drop_replication_slot('$slot')" >/dev/null
		echo "  dropped a leftover replication slot $slot"
	done < <(pg -d postgres -c "SELECT slot_name, coalesce(active_pid::text, ''), coalesce(database::text, '') FROM pg_replication_slots")
	for db in $ALL_DBS; do
		pg -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
		pg -d postgres -c "CREATE DATABASE $db OWNER resharder"
	done
	for r in 0 1; do
		pg -d "s$r" -c "CREATE TABLE items (id bigint PRIMARY KEY, v int, note text);
			CREATE TABLE kinds (id int PRIMARY KEY, name text);
			INSERT INTO kinds SELECT g, 'kind ' || g FROM generate_series(1, 20) g;"
		pg -d rshelper -c "COPY (SELECT g, (g * 7919) % 1000000, md5(g::text) FROM generate_series(1, $ROWS) g
			WHERE $(shard_sql 2 "$r" g)) TO STDOUT" | pg -d "s$r" -c "COPY items FROM STDIN"
		pg -d "s$r" -c "VACUUM ANALYZE items" -c "VACUUM ANALYZE kinds"
	done
}

gather() { # table prefix modulus: every items row of prefix0..prefixN-1 into rshelper.table (shard, id, v, note)
	local i
	pg -d rshelper -c "DROP TABLE IF EXISTS $1; CREATE TABLE $1 (shard int, id bigint, v int, note text)"
	for i in $(seq 0 $(($3 - 1))); do
		pg -d "$2$i" -c "COPY (SELECT $i, id, v, note FROM items) TO STDOUT" | pg -d rshelper -c "COPY $1 FROM STDIN"
	done
	pg -d rshelper -c "CREATE INDEX ON $1 (id); ANALYZE $1"
}

placement() { # table modulus -> "rows distinct_ids ids_on_several_shards misplaced keys_1..ROWS_missing"
	pg -d rshelper -F' ' -c "SELECT count(*), count(DISTINCT id),
		(SELECT count(*) FROM (SELECT id FROM $1 GROUP BY id HAVING count(*) > 1) d),
		count(*) FILTER (WHERE NOT $(shard_sql "$2" shard id)),
		(SELECT count(*) FROM generate_series(1, $ROWS) g WHERE NOT EXISTS (SELECT 1 FROM $1 WHERE id = g))
		FROM $1"
}

snapshot_old() { # count, sum(v) and md5 of the ordered rows of s0 and s1
	local r
	for r in 0 1; do
		printf 's%s:%s ' "$r" "$(pg -d "s$r" -F: -c "SELECT count(*), coalesce(sum(v), 0),
			md5(coalesce(string_agg(id || ',' || coalesce(v::text, '') || ',' || coalesce(note, ''), ';' ORDER BY id), ''))
			FROM items")"
	done
}

echo "== setup check: the data on s0/s1 as the helper places it"
reset_dbs
gather got_s s 2
read -r n d dup mis miss <<<"$(placement got_s 2)"
echo "s0+s1: $n rows, $d distinct ids, $dup on several shards, $mis misplaced, $miss of keys 1..$ROWS missing; s0 $(pg -d s0 -c 'SELECT count(*) FROM items'), s1 $(pg -d s1 -c 'SELECT count(*) FROM items')" | tee -a "$OUT/machine.txt"
[ "$n" = "$ROWS" ] && [ "$d" = "$ROWS" ] && [ "$mis" = 0 ] && [ "$miss" = 0 ] || { echo "reshard.sh: the data load is wrong" >&2; exit 1; }

# ---------------------------------------------------------------- pgcat
write_ini() { # run dir, port
	cat >"$1/pgcat.ini" <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = $2
unix_socket_dir =
workers = 2
pool_mode = transaction
admin_username = pgcat
admin_password = $ADMIN_PW
state_dir = $1/state
prepared_statements = true
log_level = info
log_connections = false
log_disconnections = false

[pools.app]
pool_mode = transaction
query_parser_enabled = true
sharding_function = pg_text_hash
sharded_tables = items.id
default_shard = all

[pools.app.shards.0]
database = s0
servers = 127.0.0.1:$PGPORT:primary

[pools.app.shards.1]
database = s1
servers = 127.0.0.1:$PGPORT:primary
EOF
	local i
	for i in 0 1 2 3; do
		printf '\n[pools.app.next.shards.%s]\ndatabase = n%s\nservers = 127.0.0.1:%s:primary\n' "$i" "$i" "$PGPORT" >>"$1/pgcat.ini"
	done
	printf '\n[pools.app.users.resharder]\npassword = bench\npool_size = 20\n' >>"$1/pgcat.ini"
}

admin() { PGPASSWORD=$ADMIN_PW psql -X -h 127.0.0.1 -p "$PORT" -U pgcat -d pgcat "$@"; }
app() { psql -X -q -At -h 127.0.0.1 -p "$PORT" -U resharder -d app -v ON_ERROR_STOP=1 "$@"; }

start_pgcat() { # run dir
	PORT=$($PY "$HERE/bench.py" freeports 1)
	mkdir -m 700 "$1/state"
	write_ini "$1" "$PORT"
	PATH="$PGBIN:$PATH" "$BIN" "$1/pgcat.ini" >"$1/pgcat.log" 2>&1 &
	CUR_PGCAT=$!
	local ok=
	for _ in $(seq 100); do
		kill -0 "$CUR_PGCAT" 2>/dev/null || break
		app -c 'SELECT 1' >/dev/null 2>&1 && { ok=1; break; }
		sleep 0.1
	done
	[ -n "$ok" ] || { echo "reshard.sh: pgcat did not come up; log:" >&2; tail -20 "$1/pgcat.log" >&2; exit 1; }
}

route_check() { # -> how many of 20 keys spread over 1..ROWS a keyed read through pgcat finds (each must be 1)
	local k args=()   # one -c each: one statement per Query, each routed by its own key
	for k in $(seq 1 $((ROWS / 20)) "$ROWS"); do args+=(-c "SELECT count(*) FROM items WHERE id = $k"); done
	app "${args[@]}" | grep -c '^1$' || true
}

cat >"$TMP/load.sql" <<EOF
\\set id random(1, $ROWS)
\\set v random(1, 1000000)
\\set nid :id + 1000000
UPDATE items SET v = :v WHERE id = :id;
SELECT v FROM items WHERE id = :id;
INSERT INTO items (id, v, note) VALUES (:nid, :v, 'b') ON CONFLICT (id) DO UPDATE SET v = excluded.v;
EOF
cp "$TMP/load.sql" "$OUT/load.sql"

# ---------------------------------------------------------------- analysis
cat >"$TMP/rs.py" <<'EOF'
import argparse, datetime, glob, json, re, statistics, subprocess, sys, time, os

def psql_rows(port, sql):
    env = dict(os.environ, PGPASSWORD="admin_pw")
    p = subprocess.run(["psql", "-X", "-A", "-F", "\t", "-P", "footer=off", "-h", "127.0.0.1", "-p", str(port),
                        "-U", "pgcat", "-d", "pgcat", "-c", sql], capture_output=True, text=True, env=env)
    if p.returncode:
        return None, p.stderr.strip()
    lines = p.stdout.splitlines()
    if not lines:
        return [], ""
    head = lines[0].split("\t")
    return [dict(zip(head, l.split("\t"))) for l in lines[1:]], ""

def cmd_poll(a):
    """SHOW RESHARD every interval until phase done/failed/cancelled or timeout; one JSON line per poll."""
    t_start = time.time()
    phase = "none"
    with open(a.out, "a") as f:
        while True:
            t0 = time.time()
            rows, err = psql_rows(a.port, "SHOW RESHARD")
            t1 = time.time()
            row = next((r for r in rows or [] if r.get("pool") == "app"), None)
            phase = row["phase"] if row else ("error" if rows is None else "none")
            f.write(json.dumps({"t0": t0, "t1": t1, "row": row, "err": err or None}) + "\n")
            f.flush()
            if phase in ("done", "failed", "cancelled") or a.once:
                break
            if t1 - t_start > a.timeout:
                phase = "timeout(" + phase + ")"
                break
            time.sleep(max(0.0, a.interval - (time.time() - t0)))
    print(phase)

def proc_snapshot():
    """{(pid, starttime): [comm, utime+stime, ppid, state]} of every process, and /proc/stat's first line."""
    d = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                st = fh.read()
        except OSError:
            continue
        i = st.rindex(")")
        f = st[i + 2:].split()
        d[(int(pid), int(f[19]))] = [st[st.index("(") + 1:i], int(f[11]) + int(f[12]), int(f[1]), f[0]]
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return d, v

def cmd_cpusample(a):
    """Every interval, every process's CPU time since the last sample, added to its group: pgcat's process
    tree, PostgreSQL's, pgbench, the rest of this script's tree, everything else. Until pgbench ends
    (a zombie or gone); then the shares (% of all the machine's CPUs) as JSON. A process that lived less
    than an interval between two samples is missed; one that ended loses at most its last interval."""
    groups = {"pgcat": 0, "postgres": 0, "pgbench": 0, "script": 0, "others": 0}
    others = {}
    prev, v0 = proc_snapshot()
    t0 = time.time()
    v1 = v0
    while True:
        time.sleep(a.interval)
        cur, v1 = proc_snapshot()
        kids = {}
        for (pid, _), (_, _, ppid, _) in cur.items():
            kids.setdefault(ppid, []).append(pid)
        def tree(root):
            seen, todo = set(), [root]
            while todo:
                q = todo.pop()
                if q not in seen:
                    seen.add(q)
                    todo += kids.get(q, [])
            return seen
        tg, tp, ts_ = tree(a.pgcat), tree(a.pg), tree(a.root)
        for key, (comm, ticks, _, _) in cur.items():
            d = ticks - prev[key][1] if key in prev else ticks
            if d <= 0:
                continue
            pid = key[0]
            g = ("pgcat" if pid in tg else "postgres" if pid in tp else "pgbench" if pid == a.pgbench
                 else "script" if pid in ts_ else "others")
            groups[g] += d
            if g == "others":
                others[comm] = others.get(comm, 0) + d
        prev = cur
        pb = [x for k, x in cur.items() if k[0] == a.pgbench]
        if not pb or pb[0][3] == "Z":
            break
    sv = [b - a_ for a_, b in zip(v0, v1)]   # user nice system idle iowait irq softirq steal
    dt = max(1, sum(sv))
    r = {k: round(100 * x / dt, 1) for k, x in groups.items()}
    r["machine_busy"] = round(100 * (dt - sv[3] - sv[4]) / dt, 1)
    r["user"] = round(100 * (sv[0] + sv[1]) / dt, 1)
    r["system"] = round(100 * sv[2] / dt, 1)
    r["irq_softirq"] = round(100 * (sv[5] + sv[6]) / dt, 1)
    r["steal"] = round(100 * sv[7] / dt, 1) if len(sv) > 7 else None
    r["others_top"] = [f"{c} {100 * x / dt:.1f}" for c, x in sorted(others.items(), key=lambda kv: -kv[1])[:4]]
    r["seconds"] = round(time.time() - t0, 1)
    json.dump(r, open(a.out, "w"))

def ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()

def pct(v, q):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]

def cmd_analyze(a):
    r = {"protocol": a.protocol, "repeat": a.repeat, "clients": a.clients, "seconds": a.seconds}
    # pgcat's log: the reshard's events, millisecond timestamps (UTC wall clock)
    ev = []
    for line in open(a.pgcat_log, errors="replace"):
        m = re.match(r"^(\S+Z) \[\d+\] (\S+) (.*)$", line.rstrip("\n"))
        if m and "reshard" in m.group(3):
            ev.append((ts(m.group(1)), m.group(2), m.group(3)))
    def first(pat, after=0):
        return next((t for t, _, msg in ev if re.search(pat, msg) and t >= after), None)
    t_started = first(r"reshard app: started")
    t_end = first(r"writes were paused \d+ ms")
    m = next((re.search(r"writes were paused (\d+) ms", msg) for _, _, msg in ev if "writes were paused" in msg), None)
    r["pause_ms_log"] = int(m.group(1)) if m else None
    starts = [t for t, _, msg in ev if "cutting over (pausing" in msg and (t_end is None or t <= t_end)]
    t_pause = starts[-1] if starts else None
    r["cutover_attempts"] = len(starts)
    r["cutovers_given_up"] = sum(1 for _, _, msg in ev if "cutover given up" in msg)
    r["log_warnings"] = [msg for _, lvl, msg in ev if lvl.lower().startswith(("warn", "err"))][:5]
    # the polls
    polls = [json.loads(l) for l in open(a.polls)]
    phases = [(p["t0"], p["t1"], (p["row"] or {}).get("phase")) for p in polls]
    final = (polls[-1]["row"] or {}) if polls else {}
    r["final"] = final
    r["phase"] = final.get("phase")
    # (a reshard that did not cut over has no pause: its 0 would pull a median down)
    r["pause_ms"] = int(final["pause_ms"]) if final.get("pause_ms") not in (None, "") and r["phase"] == "done" else None
    r["polls"] = len(polls)
    i_done = next((i for i, p in enumerate(phases) if p[2] == "done"), None)
    i_cut = next((i for i, p in enumerate(phases) if p[2] in ("cutover", "done")), None)
    i_repl = next((i for i, p in enumerate(phases) if p[2] in ("replicate", "cutover", "done")), None)
    r["polls_saw_cutover"] = any(p[2] == "cutover" for p in phases)
    rep_ = [p for p in polls if (p["row"] or {}).get("phase") == "replicate"]
    lag = [int(p["row"]["lag_bytes"]) for p in rep_ if p["row"].get("lag_bytes", "").isdigit()]
    r["lag_max_mb"] = round(max(lag) / 1048576, 1) if lag else None
    r["lag_last_mb"] = round(lag[-1] / 1048576, 1) if lag else None
    r["changes_applied"] = int(final["changes_applied"]) if str(final.get("changes_applied", "")).isdigit() else None
    r["rows_copied"] = int(final["rows_copied"]) if str(final.get("rows_copied", "")).isdigit() else None
    if len(rep_) >= 2 and rep_[-1]["t1"] - rep_[0]["t1"] >= 1:
        d = int(rep_[-1]["row"]["changes_applied"]) - int(rep_[0]["row"]["changes_applied"])
        r["apply_per_s_replicate"] = round(d / max(1e-3, rep_[-1]["t1"] - rep_[0]["t1"]))
    wp = None
    if i_done is not None and i_cut:
        wp = (phases[i_cut - 1][0], phases[i_done][1])
    r["poll_window_s"] = [round(wp[0] - a.sent, 3), round(wp[1] - a.sent, 3)] if wp else None
    wl = (t_pause, t_end) if t_pause and t_end else None
    r["log_window_s"] = [round(wl[0] - a.sent, 3), round(wl[1] - a.sent, 3)] if wl else None
    # phase times (s since RESHARD was sent)
    r["copy_replicate_s_log"] = round(t_pause - t_started, 3) if t_pause and t_started else None
    r["copy_s_polls"] = round(phases[i_repl][1] - a.sent, 3) if i_repl is not None else None
    r["done_after_s_polls"] = round(phases[i_done][1] - a.sent, 3) if i_done is not None else None
    # pgbench: its summary and per-transaction log
    out = open(a.pgbench_out).read()
    err = open(a.pgbench_err).read()
    g = lambda rx, conv=float: (lambda m: conv(m.group(1)) if m else None)(re.search(rx, out, re.M))
    r["pgbench_rc"] = a.pgbench_rc
    r["txn"] = g(r"^number of transactions actually processed: (\d+)", int)
    r["failed"] = g(r"^number of failed transactions: (\d+)", int)
    r["tps"] = g(r"^tps = ([\d.]+)")
    r["lat_avg_ms"] = g(r"^latency average = ([\d.]+) ms")
    ab = [l for l in err.splitlines() if re.search(r"client \d+ .*aborted", l)]
    r["aborted_clients"] = len(ab)
    msgs = []
    for l in err.splitlines():
        if "error" in l.lower() or "aborted" in l:
            l = re.sub(r"client \d+", "client N", l)
            if l not in msgs:
                msgs.append(l)
    r["pgbench_errors"] = msgs[:5]
    for kv in open(a.checks).read().split("\n"):
        if "=" in kv:
            k, v = kv.split("=", 1)
            r["check_" + k] = v
    tx = []   # (start, end, latency ms)
    bad = 0
    for fn in glob.glob(a.txlog + ".*"):
        for l in open(fn):
            f = l.split()
            if len(f) < 6:
                continue
            if not f[2].isdigit():
                bad += 1
                continue
            end = int(f[4]) + int(f[5]) / 1e6
            lat = int(f[2]) / 1e6
            tx.append((end - lat, end, lat * 1000))
    tx.sort(key=lambda x: x[1])
    r["txlog_txn"] = len(tx)
    r["txlog_not_ok"] = bad
    if not tx:
        print(json.dumps(r)); return
    load0 = min(t[0] for t in tx)
    load1 = tx[-1][1]
    def tps(lo, hi):
        if lo is None or hi is None or hi - lo < 0.5:
            return None
        return round(sum(1 for t in tx if lo <= t[1] < hi) / (hi - lo), 1)
    W = wl or wp
    r["window_from"] = "log" if wl else ("polls" if wp else None)
    Wwide = (min(wl[0], wp[0]), max(wl[1], wp[1])) if wl and wp else W
    def inflight(w):
        return [t for t in tx if t[0] < w[1] and t[1] > w[0]] if w else []
    if W:
        inf = inflight(W)
        r["max_lat_window_ms"] = round(max(t[2] for t in inf), 1) if inf else None
        r["txn_in_window"] = len(inf)
        r["txn_over_1s_in_window"] = sum(1 for t in inf if t[2] > 1000)
        r["completed_in_window"] = sum(1 for t in tx if W[0] <= t[1] < W[1])
        infp = inflight(wp)
        r["max_lat_poll_window_ms"] = round(max(t[2] for t in infp), 1) if infp else None
        ends = [W[0] - 1] + [t[1] for t in tx if W[0] - 1 <= t[1] <= W[1] + 1] + [W[1] + 1]
        r["longest_gap_ms"] = round(max(b - a_ for a_, b in zip(ends, ends[1:])) * 1000, 1)
        lo = W[0] - 1
        buckets = [0] * (int((W[1] + 1 - lo) / 0.1) + 1)
        for t in tx:
            if lo <= t[1] <= W[1] + 1:
                buckets[int((t[1] - lo) / 0.1)] += 1
        r["timeline_100ms_from_window_start_minus_1s"] = buckets
        outside = [t[2] for t in tx if t[0] >= load0 + 1 and (t[1] <= Wwide[0] or t[0] >= Wwide[1])]
        r["cutover_during_load"] = W[1] < load1 - 0.5
    else:
        outside = [t[2] for t in tx if t[0] >= load0 + 1]
        r["cutover_during_load"] = False
    r["p50_outside_ms"] = round(pct(outside, 0.50), 2) if outside else None
    r["p99_outside_ms"] = round(pct(outside, 0.99), 2) if outside else None
    r["max_outside_ms"] = round(max(outside), 1) if outside else None
    before = [t[2] for t in tx if t[0] >= load0 + 1 and t[1] < a.sent]
    during = [t[2] for t in tx if t[0] >= a.sent and W and t[1] <= Wwide[0]]
    after = [t[2] for t in tx if W and t[0] >= Wwide[1]]
    r["p99_before_ms"] = round(pct(before, 0.99), 2) if before else None
    r["p99_copy_replicate_ms"] = round(pct(during, 0.99), 2) if during else None
    r["p99_after_ms"] = round(pct(after, 0.99), 2) if after else None
    r["tps_before"] = tps(load0 + 1, a.sent)
    r["tps_copy_replicate"] = tps(a.sent, Wwide[0]) if W else tps(a.sent, load1)
    r["tps_after"] = tps(Wwide[1], load1 - 0.5) if W else None
    r["load_s"] = round(load1 - load0, 2)
    r["reshard_sent_at_s"] = round(a.sent - load0, 2)
    # the load's writes per second in phase replicate (each script: an UPDATE and an upsert, one change each,
    # on a row that exists for the UPDATE) against the changes the streams applied per second meanwhile
    if len(rep_) >= 2 and rep_[-1]["t1"] - rep_[0]["t1"] >= 1:
        rt = tps(rep_[0]["t1"], min(rep_[-1]["t1"], load1))
        r["writes_per_s_replicate"] = round(2 * rt) if rt is not None else None
    try:
        r["cpu_pct"] = json.load(open(a.cpu))
    except Exception as e:
        r["cpu_pct"] = {"error": str(e)}
    print(json.dumps(r))

def cmd_report(a):
    rows = [json.loads(l) for l in open(a.results)]
    med = lambda v: statistics.median(v) if v else None
    def f(x, d=0):
        return "-" if x is None else (f"{x:.{d}f}" if isinstance(x, (int, float)) else str(x))
    print("# Online reshard: how long the cutover holds the writes under a keyed pgbench load\n")
    print(open(a.machine).read().strip().replace("\n", "  \n"))
    print()
    print(f"Each run: 2 shards (s0, s1, {rows[0]['check_rows_per_run'] if rows and 'check_rows_per_run' in rows[0] else '?'} items rows) "
          "to 4 (n0..n3) with `RESHARD app` while pgbench drives "
          f"{rows[0]['clients'] if rows else '?'} clients for {rows[0]['seconds'] if rows else '?'} s through pgcat "
          "(load.sql: a keyed UPDATE, SELECT and upsert, each its own autocommit transaction; a pgbench "
          "\"transaction\" is one run of the three). All on one 2-core machine: pgbench, pgcat (2 workers) and "
          "one PostgreSQL serving both layouts compete for the CPUs.\n")
    print("Columns: pause_ms = SHOW RESHARD's pause_ms (how long pgcat held the pool's writes); "
          "failed / aborted = pgbench's failed transactions and aborted clients; max in window = the longest "
          "pgbench transaction in flight during the cutover window (pgcat's log: \"cutting over\" to \"writes were "
          "paused\"); max in poll window = the same over the wider window the 0.2 s polls of SHOW RESHARD see; p99 "
          "outside = p99 latency of the transactions wholly outside both windows (first second left out); gap = "
          "longest stretch around the cutover with no pgbench transaction completing; tps before RESHARD / during "
          "copy+replicate / after done (from pgbench's per-transaction log); copy s = RESHARD sent to the first poll "
          "that saw phase replicate; RESHARD to cutover = pgcat's log, \"started\" to \"cutting over\" (copy + "
          "replicate); max lag = the largest lag_bytes SHOW RESHARD gave in phase replicate (the cutover starts once every "
          "stream is within 1 MB); load writes/s = 2 x pgbench's tps in phase replicate (an UPDATE and an upsert per "
          "script) against changes applied/s = SHOW RESHARD's changes_applied over the same polls; cutover under load = the cutover window ended while pgbench still ran (if not, the "
          "streams caught up only once the load stopped, and that run's pause says nothing about the load); checks = "
          "the post-run checks below (OK = all passed).\n")
    protos = []
    for r in rows:
        if r["protocol"] not in protos:
            protos.append(r["protocol"])
    cols = [("pause_ms", 0), ("failed", 0), ("aborted_clients", 0), ("max_lat_window_ms", 1), ("max_lat_poll_window_ms", 1),
            ("p99_outside_ms", 2), ("longest_gap_ms", 0), ("tps_before", 0), ("tps_copy_replicate", 0), ("tps_after", 0),
            ("copy_s_polls", 1), ("copy_replicate_s_log", 2), ("lag_max_mb", 1), ("writes_per_s_replicate", 0),
            ("apply_per_s_replicate", 0)]
    allpause, allmax = [], []
    for p in protos:
        rs = [r for r in rows if r["protocol"] == p]
        print(f"## -M {p}\n")
        print("| run | phase | pause_ms | failed txns | aborted clients | max in window ms | max in poll window ms | p99 outside ms | gap ms | tps before | tps copy+repl | tps after | copy s (polls) | RESHARD to cutover s (log) | max lag MB | load writes/s (replicate) | changes applied/s (replicate) | cutover attempts | cutover under load | checks |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
        for r in rs:
            print(f"| {r['repeat']} | {r.get('phase')} | " + " | ".join(f(r.get(k), d) for k, d in cols)
                  + f" | {r.get('cutover_attempts')} | {'yes' if r.get('cutover_during_load') else 'NO' if r.get('phase') == 'done' else 'no cutover'} | {r.get('check_verdict', '-')} |")
        def medrow(label, sel):
            meds = []
            for k, d in cols:
                v = [r[k] for r in sel if isinstance(r.get(k), (int, float))]
                meds.append(f(med(v), d))
            print(f"| **{label}** | | " + " | ".join(f"**{m}**" for m in meds) + " | | | |")
        medrow("median", rs)
        ul = [r for r in rs if r.get("cutover_during_load")]
        if len(ul) != len(rs):
            medrow(f"median of the {len(ul)} runs cut over under load", ul)
        print()
        allpause += [(p, r.get("pause_ms")) for r in rs]
        allmax += [(p, r.get("max_lat_window_ms")) for r in rs]
    print("## Verdict (what was measured, nothing more)\n")
    n = len(rows)
    pv = [v for _, v in allpause if v is not None]
    mv = [v for _, v in allmax if v is not None]
    for p in protos:
        rs = [r for r in rows if r["protocol"] == p]
        ul = [r for r in rs if r.get("cutover_during_load")]
        pv_ = [r["pause_ms"] for r in ul if r.get("pause_ms") is not None]
        mv_ = [r["max_lat_window_ms"] for r in ul if r.get("max_lat_window_ms") is not None]
        print(f"- -M {p}: the cutover came while the load ran in {len(ul)} of {len(rs)} runs. Of those, "
              f"pause_ms < 1000 in {sum(1 for v in pv_ if v < 1000)} of {len(ul)} "
              f"(median {f(med(pv_))}, max {f(max(pv_) if pv_ else None)} ms); the longest transaction in flight "
              f"during the cutover took < 1000 ms in {sum(1 for v in mv_ if v < 1000)} of {len(ul)} "
              f"(median {f(med(mv_), 1)}, max {f(max(mv_) if mv_ else None, 1)} ms); failed transactions "
              f"{sum(r.get('failed') or 0 for r in rs)}, aborted clients {sum(r.get('aborted_clients') or 0 for r in rs)}, "
              f"reshards not done {sum(1 for r in rs if r.get('phase') != 'done')}; pause_ms of every run: "
              f"{', '.join(f(r.get('pause_ms')) + ('' if r.get('cutover_during_load') else ' (after the load)') for r in rs)}.")
    ok = sum(1 for r in rows if r.get("check_verdict") == "OK")
    print(f"- All {n} runs: writes held < 1 s (pause_ms) in {sum(1 for v in pv if v < 1000)} of {n}; "
          f"post-run checks passed in {ok} of {n}.")
    print()
    print("## Checks per run\n")
    print("| protocol | run | phase | n0..n3 rows | ids on several shards | misplaced (mod 4) | keys 1..N missing | "
          "s0+s1 ids missing on n0..n3 | s0+s1 unchanged after done | kinds equal | slots left | keys found via pgcat before/after | "
          "rows changed since cutover | ids new since cutover |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|")
    for r in rows:
        c = lambda k: r.get("check_" + k, "-")
        print(f"| {r['protocol']} | {r['repeat']} | {r.get('phase')} | {c('n_rows')} | {c('n_dup')} | {c('n_misplaced')} | "
              f"{c('n_missing_base')} | {c('s_ids_missing_on_n')} | {c('old_unchanged')} | {c('kinds_equal')} | "
              f"{c('slots_left')} | {c('route_before')}/{c('route_after')} | {c('rows_changed')} | {c('ids_new')} |")
    print()
    print("## CPU during the load (% of the machine's 2 CPUs)\n")
    print("From /proc, sampled every 0.5 s over pgbench's run: machine busy (/proc/stat: user, system, irq+softirq, "
          "steal = time the hypervisor gave the CPUs to others); per process group (utime+stime): pgcat (supervisor + "
          "workers, the reshard and its pg_dump included); PostgreSQL (postmaster and backends); pgbench; this script's "
          "own processes (SHOW RESHARD polls by psql, the sampler); every other process of the machine (a process that "
          "lived less than 0.5 s between two samples is missed: \"others\" is a floor). The groups do not add up to "
          "busy: interrupt time is nobody's.\n")
    print("| protocol | run | busy | user | system | irq+softirq | steal | pgcat | PostgreSQL | pgbench | script | others | busiest others |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        c = r.get("cpu_pct") or {}
        print(f"| {r['protocol']} | {r['repeat']} | {f(c.get('machine_busy'), 1)} | {f(c.get('user'), 1)} | "
              f"{f(c.get('system'), 1)} | {f(c.get('irq_softirq'), 1)} | {f(c.get('steal'), 1)} | {f(c.get('pgcat'), 1)} | "
              f"{f(c.get('postgres'), 1)} | {f(c.get('pgbench'), 1)} | {f(c.get('script'), 1)} | {f(c.get('others'), 1)} | "
              f"{', '.join(c.get('others_top') or []) or '-'} |")
    print()
    odd = [r for r in rows if r.get("pgbench_errors") or r.get("log_warnings") or r.get("cutovers_given_up")
           or r.get("phase") != "done"]
    if odd:
        print("## Errors and warnings\n")
        print("Each run's pgcat lines about the reshard are in run-PROTOCOL-N/pgcat-reshard.log.\n")
        for r in odd:
            print(f"- {r['protocol']} run {r['repeat']}: pgbench: {r.get('pgbench_errors')}; pgcat warnings: {r.get('log_warnings')}; "
                  f"last_error: {r.get('final', {}).get('last_error')!r}")
        print()

p = argparse.ArgumentParser()
sp = p.add_subparsers(dest="cmd", required=True)
q = sp.add_parser("poll")
q.add_argument("--port", required=True); q.add_argument("--interval", type=float, default=0.2)
q.add_argument("--timeout", type=float, default=180); q.add_argument("--out", required=True)
q.add_argument("--once", action="store_true")
q = sp.add_parser("analyze")
for k in ("protocol", "pgcat_log", "polls", "pgbench_out", "pgbench_err", "txlog", "checks"):
    q.add_argument("--" + k.replace("_", "-"), dest=k, required=True)
q.add_argument("--repeat", type=int, required=True); q.add_argument("--clients", type=int, required=True)
q.add_argument("--seconds", type=int, required=True); q.add_argument("--sent", type=float, required=True)
q.add_argument("--pgbench-rc", dest="pgbench_rc", type=int, required=True)
q.add_argument("--cpu", required=True)
q = sp.add_parser("cpusample")
q.add_argument("out"); q.add_argument("--interval", type=float, default=0.5)
for k in ("root", "pgcat", "pg", "pgbench"):
    q.add_argument("--" + k, type=int, required=True)
q = sp.add_parser("report")
q.add_argument("results"); q.add_argument("machine")
a = p.parse_args()
{"poll": cmd_poll, "analyze": cmd_analyze, "report": cmd_report, "cpusample": cmd_cpusample}[a.cmd](a)
EOF

# ---------------------------------------------------------------- one run
run_one() { # protocol repeat
	local proto=$1 rep=$2 R="$TMP/run-$1-$2" phase sent rc snap_done snap_end
	mkdir -p "$R"
	echo "== run $rep, -M $proto (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	reset_dbs
	start_pgcat "$R"
	local route_before
	route_before=$(route_check)
	# the load
	pgbench -n -f "$TMP/load.sql" -M "$proto" -c "$CLIENTS" -j 2 -T "$SECS" --progress=1 \
		-l --log-prefix="$R/txn" -h 127.0.0.1 -p "$PORT" -U resharder app >"$R/pgbench.out" 2>"$R/pgbench.err" &
	CUR_PGBENCH=$!
	$PY "$TMP/rs.py" cpusample "$R/cpu.json" --root $$ --pgcat "$CUR_PGCAT" --pg "$PG_PID" --pgbench "$CUR_PGBENCH" &
	CUR_SAMPLER=$!
	sleep "$RESHARD_AFTER"
	sent=$(now)
	admin -At -c "RESHARD app" >"$R/reshard-answer.txt" 2>&1 || true
	echo "  RESHARD app: $(tr '\n' ' ' <"$R/reshard-answer.txt")"
	phase=$($PY "$TMP/rs.py" poll --port "$PORT" --interval "$POLL" --timeout "$DONE_TIMEOUT" --out "$R/polls.jsonl")
	echo "  phase $phase after $(awk -v a="$sent" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}') s"
	snap_done=
	[ "$phase" != done ] || snap_done=$(snapshot_old)
	rc=0
	wait "$CUR_PGBENCH" || rc=$?
	CUR_PGBENCH=
	wait "$CUR_SAMPLER" || true
	CUR_SAMPLER=
	$PY "$TMP/rs.py" poll --port "$PORT" --once --out "$R/polls.jsonl" >/dev/null
	local route_after
	route_after=$(route_check)
	stop_pid "$CUR_PGCAT" TERM
	CUR_PGCAT=
	# checks
	snap_end=$(snapshot_old)
	gather got_n n 4
	gather got_s s 2
	local n d dup mis miss sn sd sdup smis smiss lost changed new kinds_ok=yes slots
	read -r n d dup mis miss <<<"$(placement got_n 4)"
	read -r sn sd sdup smis smiss <<<"$(placement got_s 2)"
	read -r lost changed new <<<"$(pg -d rshelper -F' ' -c "SELECT
		(SELECT count(*) FROM got_s s WHERE NOT EXISTS (SELECT 1 FROM got_n n WHERE n.id = s.id)),
		(SELECT count(*) FROM got_s s JOIN got_n n USING (id) WHERE (s.v, s.note) IS DISTINCT FROM (n.v, n.note)),
		(SELECT count(*) FROM got_n n WHERE NOT EXISTS (SELECT 1 FROM got_s s WHERE s.id = n.id))")"
	local kinds0 db
	kinds0=$(pg -d s0 -c "SELECT count(*) || ' ' || md5(string_agg(id || ',' || name, ';' ORDER BY id)) FROM kinds")
	for db in s1 $NEW_SHARDS; do
		[ "$(pg -d "$db" -c "SELECT count(*) || ' ' || md5(string_agg(id || ',' || name, ';' ORDER BY id)) FROM kinds" 2>/dev/null)" = "$kinds0" ] || kinds_ok=no
	done
	slots=$(pg -d postgres -c "SELECT count(*) FROM pg_replication_slots")
	local old_same=no
	[ -n "$snap_done" ] && [ "$snap_done" = "$snap_end" ] && old_same=yes
	local verdict=OK
	{ [ "$phase" = done ] && [ "$n" = "$d" ] && [ "$dup" = 0 ] && [ "$mis" = 0 ] && [ "$miss" = 0 ] && [ "$lost" = 0 ] &&
		[ "$old_same" = yes ] && [ "$kinds_ok" = yes ] && [ "$smis" = 0 ] && [ "$sdup" = 0 ] &&
		[ "$route_before" = 20 ] && [ "$route_after" = 20 ]; } || verdict=FAILED
	cat >"$R/checks.txt" <<EOF
verdict=$verdict
rows_per_run=$ROWS
n_rows=$n
n_distinct=$d
n_dup=$dup
n_misplaced=$mis
n_missing_base=$miss
s_rows=$sn
s_dup=$sdup
s_misplaced=$smis
s_ids_missing_on_n=$lost
rows_changed=$changed
ids_new=$new
old_unchanged=$old_same
old_at_done=$snap_done
old_at_end=$snap_end
kinds_equal=$kinds_ok
slots_left=$slots
route_before=$route_before
route_after=$route_after
EOF
	$PY "$TMP/rs.py" analyze --protocol "$proto" --repeat "$rep" --clients "$CLIENTS" --seconds "$SECS" --sent "$sent" \
		--pgcat-log "$R/pgcat.log" --polls "$R/polls.jsonl" --pgbench-out "$R/pgbench.out" --pgbench-err "$R/pgbench.err" \
		--pgbench-rc "$rc" --txlog "$R/txn" --checks "$R/checks.txt" --cpu "$R/cpu.json" >>"$RES"
	# keep the run's small files
	local o="$OUT/run-$proto-$rep"
	mkdir -p "$o"
	cp "$R/pgcat.ini" "$R/polls.jsonl" "$R/checks.txt" "$R/reshard-answer.txt" "$o/"
	cat "$R/pgbench.out" "$R/pgbench.err" >"$o/pgbench.txt"
	grep -i 'reshard' "$R/pgcat.log" >"$o/pgcat-reshard.log" || true
	grep -ci 'warn\|error' "$R/pgcat.log" >/dev/null && grep -i 'warn\|error' "$R/pgcat.log" | head -50 >"$o/pgcat-warnings.log" || true
	rm -f "$R"/txn.*
	$PY - "$RES" <<'PYEOF'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
print(f"  phase {r.get('phase')} pause_ms={r.get('pause_ms')} (log {r.get('pause_ms_log')}) attempts={r.get('cutover_attempts')} "
      f"failed={r.get('failed')} aborted={r.get('aborted_clients')} rc={r.get('pgbench_rc')} max_in_window={r.get('max_lat_window_ms')}ms "
      f"(poll window {r.get('max_lat_poll_window_ms')}ms) p99_outside={r.get('p99_outside_ms')}ms gap={r.get('longest_gap_ms')}ms "
      f"tps {r.get('tps_before')}/{r.get('tps_copy_replicate')}/{r.get('tps_after')} copy={r.get('copy_s_polls')}s "
      f"to_cutover={r.get('copy_replicate_s_log')}s window={r.get('log_window_s')} polls={r.get('poll_window_s')} "
      f"checks {r.get('check_verdict')} cpu% {r.get('cpu_pct')}", flush=True)
for e in r.get("pgbench_errors") or []:
    print("  pgbench:", e)
PYEOF
	local bench_ok=yes
	{ [ "$rc" = 0 ] && ! grep -q 'aborted' "$R/pgbench.err" && grep -q '^number of failed transactions: 0 ' "$R/pgbench.out"; } || bench_ok=no
	if [ "$bench_ok" != yes ]; then
		echo "  RUN FAILED: pgbench exited $rc, or a client aborted, or it counted failed transactions:"
		grep -i 'error\|aborted\|failed' "$R/pgbench.err" "$R/pgbench.out" | sort | uniq -c | sort -rn | head -5 | sed 's/^/    /'
	fi
	if [ "$verdict" != OK ] || [ "$bench_ok" != yes ]; then
		FAILED_RUNS=$((FAILED_RUNS + 1))
		echo "  RUN FAILED: phase $phase; checks:"; sed 's/^/    /' "$R/checks.txt"
		echo "  pgcat's reshard log lines:"; grep -i reshard "$R/pgcat.log" | tail -30 | sed 's/^/    /'
	fi
}

echo "== $REPEATS runs per protocol ($PROTOCOLS), pgbench -c $CLIENTS -j 2 -T $SECS, RESHARD after $RESHARD_AFTER s"
for r in $(seq "$REPEATS"); do
	if [ $((r % 2)) = 1 ]; then order=$PROTOCOLS; else order=$(echo "$PROTOCOLS" | tr ' ' '\n' | tac | tr '\n' ' '); fi
	for p in $order; do run_one "$p" "$r"; done
done

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
$PY "$TMP/rs.py" report "$RES" "$OUT/machine.txt" >"$OUT/summary.md"
cat "$OUT/summary.md"
echo
echo "results: $OUT (log.txt, machine.txt, results.jsonl, summary.md, load.sql, run-*/)"
[ "$FAILED_RUNS" = 0 ] || { echo "reshard.sh: $FAILED_RUNS run(s) failed" >&2; exit 1; }
