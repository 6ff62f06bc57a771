#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The demo: installs what is missing, builds pgcat (release flags, in build/),
# starts throwaway PostgreSQL 15 servers as OS user postgres in a temp dir
#   - a primary and a streaming replica of it (pg_basebackup -R),
#   - a second server holding two shard databases (shard0, shard1),
# writes a pgcat.ini with one pool over primary + replica and one sharded
# pool, starts pgcat in front, and shows, step by step, what pgcat is for:
#   1. reads go to the replica, writes to the primary (query parser);
#   2. a replica stopped under pgbench -S: banned, reads fail over, no
#      failed transaction; then restarted and unbanned;
#   3. SET SHARDING KEY and keys found in the statement (sharded pool);
#   4. a cross-shard ORDER BY ... LIMIT and count(*), merged;
#   5. a COPY split across the shards;
#   6. pgbench -M prepared, 20 clients on a pool of 5 (transaction mode);
#   7. LISTEN/NOTIFY between two clients sharing one server connection;
#   8. SHOW POOLS, SHOW SHARDS and /metrics.
# Every step checks what it shows (against the servers queried directly) and
# the demo exits non-zero at the first check that fails. Then it stops
# everything and removes the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh disable=SC1091
. scripts/lib.sh

DEMO_SECONDS=${DEMO_SECONDS:-5}   # length of each pgbench run
PG_OS_USER=${PG_OS_USER:-postgres}

log "checking packages"
install_packages curl

build_out_of_tree build CFLAGS="-O2 -g"
PGCAT="$BUILT_BIN"
"$PGCAT" -V | head -1

# --- throwaway servers ----------------------------------------------------------
TMP=$(mktemp -d /tmp/pgcat-demo.XXXXXX)
chmod 755 "$TMP"
PIDS_PG=()
PGCAT_PID=
cleanup() {
	set +e
	if [ -n "$PGCAT_PID" ] && kill -0 "$PGCAT_PID" 2>/dev/null; then
		kill -TERM "$PGCAT_PID"
		for _ in $(seq 1 100); do kill -0 "$PGCAT_PID" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$PGCAT_PID" 2>/dev/null && kill -KILL "$PGCAT_PID"
	fi
	for d in "${PIDS_PG[@]}"; do
		if [ -f "$d/postmaster.pid" ]; then
			as_pg "$PG_BIN/pg_ctl" -D "$d" -m fast -w -t 30 stop >/dev/null 2>&1
			if [ -f "$d/postmaster.pid" ]; then
				pid=$(head -1 "$d/postmaster.pid")
				[ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null
			fi
		fi
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

as_pg() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u "$PG_OS_USER" -- "$@"; else "$@"; fi
}
[ "$(id -u)" -eq 0 ] && chown "$PG_OS_USER:" "$TMP"

# A port no one listens on, below the kernel's range of ephemeral ports: a
# port in that range may be taken at any moment by an outgoing connection of
# another program, and the server started on it then fails to bind.
free_port() {
	local p lo=32768
	read -r lo _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	[ "$lo" -gt 12000 ] || lo=32768
	while :; do
		p=$(( 10000 + RANDOM % (lo - 10000) ))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

APP_PASSWORD=demo_app_pw
ADMIN_PASSWORD=demo_admin_pw

conf() { # datadir port
	cat >> "$1/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $2
unix_socket_directories = '$TMP'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = replica
hot_standby = on
EOF
}

hba() {
	cat > "$1/pg_hba.conf" <<EOF
local all all trust
host all postgres 127.0.0.1/32 trust
host replication postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
EOF
}

start_pg() { # datadir name
	PIDS_PG+=("$1")
	as_pg "$PG_BIN/pg_ctl" -D "$1" -l "$TMP/$2.log" -w -t 60 start >/dev/null \
		|| { tail -n 20 "$TMP/$2.log"; die "PostgreSQL $2 did not start"; }
	echo "PostgreSQL $2 up (pid $(head -1 "$1/postmaster.pid"))"
}

psql_pg() { # port db sql...
	local port=$1 db=$2; shift 2
	as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$TMP" -p "$port" -U postgres -d "$db" "$@"
}

log "starting PostgreSQL 15: primary, streaming replica, shard server (in $TMP)"
P_PRIMARY=$(free_port); P_REPLICA=$(free_port); P_SHARDS=$(free_port)
while [ "$P_REPLICA" = "$P_PRIMARY" ]; do P_REPLICA=$(free_port); done
while [ "$P_SHARDS" = "$P_PRIMARY" ] || [ "$P_SHARDS" = "$P_REPLICA" ]; do P_SHARDS=$(free_port); done

for s in primary shards; do
	as_pg "$PG_BIN/initdb" -D "$TMP/$s" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >/dev/null
	hba "$TMP/$s"
done
conf "$TMP/primary" "$P_PRIMARY"
conf "$TMP/shards" "$P_SHARDS"
start_pg "$TMP/primary" primary
psql_pg "$P_PRIMARY" postgres -c "CREATE ROLE app LOGIN PASSWORD '$APP_PASSWORD'" -c "CREATE DATABASE appdb OWNER app"

as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$P_PRIMARY" -U postgres -D "$TMP/replica" -R -X stream -c fast --no-sync
echo "port = $P_REPLICA" >> "$TMP/replica/postgresql.conf"
start_pg "$TMP/replica" replica

start_pg "$TMP/shards" shards
psql_pg "$P_SHARDS" postgres -c "CREATE ROLE app LOGIN PASSWORD '$APP_PASSWORD'" \
	-c "CREATE DATABASE shard0 OWNER app" -c "CREATE DATABASE shard1 OWNER app"

# --- pgcat ---------------------------------------------------------------------------
PORT=$(free_port)
while [ "$PORT" = "$P_PRIMARY" ] || [ "$PORT" = "$P_REPLICA" ] || [ "$PORT" = "$P_SHARDS" ]; do PORT=$(free_port); done
PROM_PORT=$(free_port)
while [ "$PROM_PORT" = "$PORT" ] || [ "$PROM_PORT" = "$P_PRIMARY" ] || [ "$PROM_PORT" = "$P_REPLICA" ] \
	|| [ "$PROM_PORT" = "$P_SHARDS" ]; do PROM_PORT=$(free_port); done
INI="$TMP/pgcat.ini"
cat > "$INI" <<EOF
[general]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
pool_mode = transaction
default_pool_size = 5
admin_username = pgcat
admin_password = $ADMIN_PASSWORD
log_level = info
shutdown_timeout = 5000
prometheus_port = $PROM_PORT

; one pool over a primary and its replica: writes to the primary, reads to
; the replica or the primary (the primary takes the reads while the only
; replica is banned)
[pools.appdb]
default_role = primary
query_parser_enabled = true
primary_reads_enabled = true

[pools.appdb.shards.0]
database = appdb
servers = 127.0.0.1:$P_PRIMARY:primary, 127.0.0.1:$P_REPLICA:replica

[pools.appdb.users.app]
password = $APP_PASSWORD

; the same database through one server connection (LISTEN/NOTIFY step)
[pools.chat]
[pools.chat.shards.0]
database = appdb
servers = 127.0.0.1:$P_PRIMARY:primary

[pools.chat.users.app]
password = $APP_PASSWORD
pool_size = 1

; a sharded pool: two shards on the shard server; rows of users go to the
; shard hash(id) % 2, as PostgreSQL's PARTITION BY HASH (id) would place them
[pools.sharded]
query_parser_enabled = true
sharding_function = pg_bigint_hash
sharded_tables = users.id

[pools.sharded.shards.0]
database = shard0
servers = 127.0.0.1:$P_SHARDS:primary

[pools.sharded.shards.1]
database = shard1
servers = 127.0.0.1:$P_SHARDS:primary

[pools.sharded.users.app]
password = $APP_PASSWORD
EOF

log "pgcat.ini"
sed -e "s/$APP_PASSWORD/********/; s/$ADMIN_PASSWORD/********/" "$INI"
log "pgcat -t"
"$PGCAT" -t "$INI"

"$PGCAT" "$INI" 2> "$TMP/pgcat.log" &
PGCAT_PID=$!
for _ in $(seq 1 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
	kill -0 "$PGCAT_PID" 2>/dev/null || { cat "$TMP/pgcat.log"; die "pgcat exited"; }
	sleep 0.1
done
echo "pgcat listening on 127.0.0.1:$PORT (pid $PGCAT_PID)"

export PGPASSWORD=$APP_PASSWORD PGSSLMODE=disable
PGB=("$PG_BIN/pgbench" -h 127.0.0.1 -p "$PORT" -U app)

# --- helpers for the steps -------------------------------------------------------------
export PGPASSWORD=$APP_PASSWORD PGSSLMODE=disable
PGB=("$PG_BIN/pgbench" -h 127.0.0.1 -p "$PORT" -U app)

via_pgcat() { # db psql-args...: psql through pgcat, as user app
	local db=$1; shift
	"$PG_BIN/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U app -d "$db" "$@"
}
admin() { # psql-args...: the admin console
	PGPASSWORD=$ADMIN_PASSWORD "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U pgcat -d pgcat "$@"
}
# admin_cols COMMAND COLUMN...: those columns of an admin SHOW, aligned (the
# full rows are too wide to read); fails on a column the answer lacks.
admin_cols() {
	local cmd=$1; shift
	admin -A -F '|' -P footer=off -c "$cmd" | awk -F '|' -v want="$*" '
		NR == 1 {
			n = split(want, w, " ")
			for (i = 1; i <= NF; i++) col[$i] = i
			for (j = 1; j <= n; j++) if (!(w[j] in col)) { print "no column " w[j] > "/dev/stderr"; bad = 1; exit 1 }
		}
		{ for (j = 1; j <= n; j++) { v[NR, j] = $(col[w[j]]); if (length(v[NR, j]) > wd[j]) wd[j] = length(v[NR, j]) } }
		END {
			if (bad) exit 1
			for (r = 1; r <= NR; r++) {
				line = ""
				for (j = 1; j <= n; j++) line = line sprintf("%-" wd[j] "s  ", v[r, j])
				sub(/ +$/, "", line); print "    " line
			}
		}'
}
shard_sql() { # shard-number psql-args...: a shard database directly, as postgres
	local n=$1; shift
	psql_pg "$P_SHARDS" "shard$n" -At "$@"
}

STEP=0
STEPS=8
step() { # title, what it proves
	STEP=$((STEP + 1))
	printf '\n==> step %d/%d: %s\n' "$STEP" "$STEPS" "$1"
	printf 'what it proves: %s\n' "$2" | fold -s -w 76 | sed 's/^/    /'
}
check() { # description, test command...
	local what=$1; shift
	if "$@"; then
		echo "    ok: $what"
	else
		echo "--- last lines of pgcat's log:" >&2
		tail -n 20 "$TMP/pgcat.log" >&2
		die "step $STEP: check failed: $what"
	fi
}
# pgbench_ok FILE RC: pgbench's exit code is 0, it reports no failed
# transaction, and it processed some.
pgbench_ok() {
	local n
	check "pgbench exit code 0 (it was $2)" [ "$2" -eq 0 ]
	check "pgbench: \"number of failed transactions: 0\"" grep -q '^number of failed transactions: 0 ' "$1"
	n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1")
	check "pgbench processed transactions (${n:-none})" [ "${n:-0}" -gt 0 ]
}

log "pgbench -i -s 1 through pgcat (tables for steps 1, 2 and 6)"
"${PGB[@]}" -i -s 1 -q appdb

# --- 1 --------------------------------------------------------------------------------
step "reads go to the replica, writes to the primary (the query parser)" \
	"pgcat parses each transaction's first statement: SELECTs go to the replica \
(port $P_REPLICA), an INSERT goes to the primary (port $P_PRIMARY), and a \
transaction that begins with a write stays on the primary, its later SELECT \
included. Each statement returns inet_server_port() and pg_is_in_recovery() of \
the server that ran it. (SET PRIMARY READS TO 'off' keeps this client's reads off \
the primary, which the pool also uses for reads: primary_reads_enabled.)"
via_pgcat appdb -q -c "CREATE TABLE demo_notes (id serial PRIMARY KEY, note text)"
ROUTED=$(via_pgcat appdb -qAt -c "SET PRIMARY READS TO 'off'" \
	-c "SELECT 'SELECT #1', inet_server_port(), pg_is_in_recovery()" \
	-c "SELECT 'SELECT #2', inet_server_port(), pg_is_in_recovery()" \
	-c "SELECT 'SELECT #3', inet_server_port(), pg_is_in_recovery() FROM pg_class LIMIT 1" \
	-c "INSERT INTO demo_notes (note) VALUES ('a write') RETURNING 'INSERT', inet_server_port(), pg_is_in_recovery()" \
	-c "BEGIN" \
	-c "INSERT INTO demo_notes (note) VALUES ('another') RETURNING 'BEGIN; INSERT', inet_server_port(), pg_is_in_recovery()" \
	-c "SELECT '  then SELECT', inet_server_port(), pg_is_in_recovery()" \
	-c "COMMIT")
awk -F '|' -v r="$P_REPLICA" '{ printf "    %-16s ran on port %s (%s)\n", $1, $2, ($2 == r ? "the replica" : "the primary") }' <<<"$ROUTED"
check "6 statements answered" [ "$(wc -l <<<"$ROUTED")" -eq 6 ]
check "the 3 SELECTs ran on the replica (in recovery)" \
	[ "$(grep -c "^SELECT [^|]*|$P_REPLICA|t\$" <<<"$ROUTED")" -eq 3 ]
check "the INSERTs and the SELECT after the write ran on the primary (not in recovery)" \
	[ "$(grep -c "^[^S][^|]*|$P_PRIMARY|f\$" <<<"$ROUTED")" -eq 3 ]

# --- 2 --------------------------------------------------------------------------------
step "a replica stops under load: banned, its reads fail over, nothing fails" \
	"pgbench -S (reads only) runs with 20 clients for $DEMO_SECONDS s; after 2 s \
the replica is stopped with pg_ctl stop -m immediate. pgcat bans it (SHOW BANS in \
the admin console), sends its reads to the primary again (primary_reads_enabled), \
and pgbench ends without an error and with 0 failed transactions. Then the \
replica is started again and unbanned (UNBAN) for the steps that follow."
"${PGB[@]}" -S -c 20 -j 2 -T "$DEMO_SECONDS" -P 1 appdb > "$TMP/failover.out" 2>&1 &
BENCH=$!
sleep 2
echo "    $(date -u +%T) pg_ctl stop -m immediate (the replica)"
as_pg "$PG_BIN/pg_ctl" -D "$TMP/replica" -m immediate -w stop >/dev/null
BANS=
for _ in $(seq 1 50); do
	BANS=$(admin -At -c "SHOW BANS")
	[ -n "$BANS" ] && break
	sleep 0.1
done
echo "    $(date -u +%T) SHOW BANS:"
admin_cols "SHOW BANS" pool shard host port role reason banned_at remaining_s source
check "SHOW BANS lists the replica" grep -q "^appdb|0|127.0.0.1|$P_REPLICA|replica|" <<<"$BANS"
rc=0
wait "$BENCH" || rc=$?
sed 's/^/    /' "$TMP/failover.out"
if grep -q 'immediate shutdown' "$TMP/failover.out"; then
	echo "    (the WARNINGs are the replica's goodbye to the connections it dropped, passed on"
	echo "    by pgcat; a read in flight on one of them was sent again to another server)"
fi
pgbench_ok "$TMP/failover.out" "$rc"
echo "    starting the replica again; UNBAN 127.0.0.1:$P_REPLICA"
as_pg "$PG_BIN/pg_ctl" -D "$TMP/replica" -l "$TMP/replica.log" -w -t 60 start >/dev/null
admin -c "UNBAN 127.0.0.1:$P_REPLICA"
check "SHOW BANS is empty" [ -z "$(admin -At -c "SHOW BANS")" ]
PORT_READ=$(via_pgcat appdb -qAt -c "SET PRIMARY READS TO 'off'" -c "SELECT inet_server_port()")
check "a read goes to the replica again (port $PORT_READ)" [ "$PORT_READ" = "$P_REPLICA" ]

# --- 3 --------------------------------------------------------------------------------
step "SET SHARDING KEY, and sharding keys found in the statement" \
	"the table users is sharded by id over shard0 and shard1 (sharded_tables = \
users.id, pg_bigint_hash). Rows 1-3 are inserted after SET SHARDING KEY, which \
picks the key's shard (SHOW SHARD shows it); rows 10-16 by plain INSERTs whose key \
pgcat reads in the statement, then read back by id (current_database() names the \
shard that answered). Each shard database is then queried directly: every row is \
where SHOW SHARD said, and on the shard PostgreSQL's own hash partitioning \
(satisfies_hash_partition) assigns its id to."
for n in 0 1; do
	# The schema goes to every shard; SET SHARD picks each in turn.
	via_pgcat sharded -q -c "SET SHARD TO '$n'" -c "CREATE TABLE users (id bigint PRIMARY KEY, name text)"
	# PostgreSQL's hash partitioning, to check where pgcat put each row.
	shard_sql "$n" -q -c "CREATE TABLE hash_check (id bigint) PARTITION BY HASH (id)"
done
declare -A SET_SHARD=()
for k in 1 2 3; do
	SET_SHARD[$k]=$(via_pgcat sharded -qAt -c "SET SHARDING KEY TO '$k'" -c "SHOW SHARD" \
		-c "INSERT INTO users (id, name) VALUES ($k, 'user $k')")
	echo "    SET SHARDING KEY TO '$k'; SHOW SHARD -> ${SET_SHARD[$k]}; INSERT INTO users ... ($k, 'user $k')"
done
ARGS=()
for k in 10 11 12 13 14 15 16; do ARGS+=(-c "INSERT INTO users (id, name) VALUES ($k, 'user $k')"); done
for k in 10 11 12 13 14 15 16; do ARGS+=(-c "SELECT id, current_database() FROM users WHERE id = $k"); done
AUTO=$(via_pgcat sharded -qAt "${ARGS[@]}")
echo "    INSERT INTO users (id, name) VALUES (k, 'user k'), then SELECT id, current_database() FROM users WHERE id = k:"
awk -F '|' '{ printf "      id %s -> %s\n", $1, $2 }' <<<"$AUTO"
echo "    each shard database, queried directly (SELECT id FROM users):"
for n in 0 1; do
	echo "      shard$n: $(shard_sql "$n" -c "SELECT string_agg(id::text, ', ' ORDER BY id) FROM users")"
done
for k in 1 2 3; do
	check "row $k is on shard ${SET_SHARD[$k]}, as SHOW SHARD said" \
		[ "$(shard_sql "${SET_SHARD[$k]}" -c "SELECT count(*) FROM users WHERE id = $k")" = 1 ]
done
check "the 7 automatically routed rows were found by id" [ "$(wc -l <<<"$AUTO")" -eq 7 ]
while IFS='|' read -r k db; do
	check "row $k is in $db, where pgcat's SELECT ... WHERE id = $k ran" \
		[ "$(psql_pg "$P_SHARDS" "$db" -At -c "SELECT count(*) FROM users WHERE id = $k")" = 1 ]
done <<<"$AUTO"
# misplaced N: rows of shard N that PostgreSQL's hash puts on the other shard
misplaced() { shard_sql "$1" -c "SELECT count(*) FROM users WHERE NOT satisfies_hash_partition('hash_check'::regclass, 2, $1, id)"; }
rows() { shard_sql "$1" -c "SELECT count(*) FROM users"; }
M0=$(misplaced 0); M1=$(misplaced 1); R0=$(rows 0); R1=$(rows 1)
check "every row is on its hash's shard (misplaced: $M0 on shard0, $M1 on shard1)" [ "$M0$M1" = 00 ]
check "10 rows in all ($R0 on shard0 + $R1 on shard1)" [ "$(( R0 + R1 ))" -eq 10 ]
check "both shards got rows" [ "$(( R0 > 0 && R1 > 0 ))" = 1 ]

# --- 4 --------------------------------------------------------------------------------
step "a cross-shard ORDER BY ... LIMIT and count(*), merged" \
	"a SELECT without a sharding key runs on both shards at once; pgcat merges \
their rows in order and applies the LIMIT, and adds their counts. Both results \
equal what the two shard databases, queried directly, give together."
MERGED_TOP=$(via_pgcat sharded -qAt -c "SELECT id, name FROM users ORDER BY id LIMIT 5")
MERGED_COUNT=$(via_pgcat sharded -qAt -c "SELECT count(*) FROM users")
echo "    through pgcat: SELECT id, name FROM users ORDER BY id LIMIT 5"
awk '{ print "      " $0 }' <<<"$MERGED_TOP"
echo "    through pgcat: SELECT count(*) FROM users -> $MERGED_COUNT"
R0=$(rows 0); R1=$(rows 1)
echo "    directly: shard0 has $R0 rows, shard1 $R1"
# sed, not head: head would end the pipe early (SIGPIPE under pipefail)
DIRECT_TOP=$( { shard_sql 0 -c "SELECT id, name FROM users"; shard_sql 1 -c "SELECT id, name FROM users"; } \
	| sort -t '|' -k1,1n | sed -n 1,5p)
check "the merged ORDER BY id LIMIT 5 equals the top 5 of both shards' rows" [ "$MERGED_TOP" = "$DIRECT_TOP" ]
check "the merged count(*) equals the sum over the shards ($R0 + $R1)" [ "$MERGED_COUNT" -eq "$(( R0 + R1 ))" ]
TOP_ON0=$(shard_sql 0 -c "SELECT count(*) FROM users WHERE id IN ($(cut -d '|' -f1 <<<"$MERGED_TOP" | paste -sd ,))")
check "the top 5 holds rows of both shards ($TOP_ON0 of shard0, $(( 5 - TOP_ON0 )) of shard1)" \
	[ "$(( TOP_ON0 > 0 && TOP_ON0 < 5 ))" = 1 ]

# --- 5 --------------------------------------------------------------------------------
step "a COPY split across the shards" \
	"psql's \\copy sends 1000 rows (ids 101 to 1100) through pgcat as one COPY ... \
FROM STDIN; pgcat cuts the data into rows, sends each row to its key's shard and \
commits on both shards at the end. Queried directly, the shards hold 1000 rows \
more, each on its hash's shard, and pgcat's count(*) agrees."
B0=$(rows 0); B1=$(rows 1)
COPY_OUT=$(seq 101 1100 | awk '{ printf "%d\tcopied row %d\n", $1, $1 }' \
	| via_pgcat sharded -c "\\copy users (id, name) FROM pstdin")
echo "    seq 101 1100 | psql -c '\\copy users (id, name) FROM pstdin' -> $COPY_OUT"
R0=$(rows 0); R1=$(rows 1); M0=$(misplaced 0); M1=$(misplaced 1)
MERGED_COUNT=$(via_pgcat sharded -qAt -c "SELECT count(*) FROM users")
echo "    directly: shard0 $B0 -> $R0 rows (+$(( R0 - B0 ))), shard1 $B1 -> $R1 rows (+$(( R1 - B1 )))"
echo "    through pgcat: SELECT count(*) FROM users -> $MERGED_COUNT"
check "psql reports COPY 1000" [ "$COPY_OUT" = "COPY 1000" ]
check "both shards got part of the COPY" [ "$(( R0 > B0 && R1 > B1 ))" = 1 ]
check "the shards got 1000 rows in all" [ "$(( R0 - B0 + R1 - B1 ))" -eq 1000 ]
check "every row is on its hash's shard (misplaced: $M0 on shard0, $M1 on shard1)" [ "$M0$M1" = 00 ]
check "the merged count(*) equals the sum over the shards" [ "$MERGED_COUNT" -eq "$(( R0 + R1 ))" ]

# --- 6 --------------------------------------------------------------------------------
step "pgbench -M prepared: 20 clients on a pool of 5 server connections" \
	"in transaction mode a server connection serves a client for one transaction \
only, so pgbench's 20 clients share the 5 connections the pool keeps to the \
primary (default_pool_size = 5), while each client's prepared statements (Parse \
once, then Bind/Execute) keep working on whichever connection runs its next \
transaction: pgcat prepares them there as needed. pgbench (TPC-B-like, \
$DEMO_SECONDS s) ends without an error and with 0 failed transactions."
"${PGB[@]}" -M prepared -c 20 -j 2 -T "$DEMO_SECONDS" -P 1 appdb > "$TMP/prepared.out" 2>&1 &
BENCH=$!
MAX_CONN=0
for _ in $(seq 1 $(( DEMO_SECONDS * 2 - 2 ))); do
	sleep 0.5
	n=$(psql_pg "$P_PRIMARY" postgres -At -c "SELECT count(*) FROM pg_stat_activity
		WHERE usename = 'app' AND backend_type = 'client backend' AND application_name <> 'pgcat lag monitor'")
	[ "$n" -gt "$MAX_CONN" ] && MAX_CONN=$n
done
rc=0
wait "$BENCH" || rc=$?
sed 's/^/    /' "$TMP/prepared.out"
echo "    server connections of user app on the primary during the run (pg_stat_activity, sampled): at most $MAX_CONN"
pgbench_ok "$TMP/prepared.out" "$rc"
check "20 clients used at most 5 server connections" [ "$MAX_CONN" -le 5 ]
check "pgbench ran with 20 clients" grep -q '^number of clients: 20$' "$TMP/prepared.out"

# --- 7 --------------------------------------------------------------------------------
step "LISTEN/NOTIFY in transaction mode: two clients, one server connection" \
	"pool chat has one server connection (pool_size = 1). Client A LISTENs on \
channel demo and stays connected, holding no server; client B LISTENs too and \
NOTIFYs on the same pooled connection. pgcat answers the LISTENs itself and \
listens on a connection of its own (application_name 'pgcat listener'), so \
both get the notification: B before its NOTIFY returns, A while idle. Both \
see the pid pgcat gave B, not the server's (an application skips its own \
notifications by that pid)."
NOTIFY_A="$TMP/notify_a.out"
# A: LISTEN, then idle 3 s (no server held), then one query, which prints
# what arrived meanwhile.
via_pgcat chat -qAt -c "LISTEN demo" -c '\! sleep 3' -c "SELECT 'A: done'" > "$NOTIFY_A" 2>&1 &
A_PID=$!
sleep 1
NOTIFY_B=$(via_pgcat chat -qAt -c "LISTEN demo" -c "NOTIFY demo, 'hello from B'" \
	-c "SELECT 'B: server pid ' || pg_backend_pid()" 2>&1)
# (counted while A still listens: the connection closes with the last channel)
LISTENERS=$(psql_pg "$P_PRIMARY" postgres -At -c "SELECT count(*) FROM pg_stat_activity
	WHERE usename = 'app' AND application_name = 'pgcat listener'")
rc=0
wait "$A_PID" || rc=$?
echo "    client A:"; sed 's/^/      /' "$NOTIFY_A"
echo "    client B:"; sed 's/^/      /' <<<"$NOTIFY_B"
echo "    pgcat's listening connections on the primary (pg_stat_activity): $LISTENERS"
pid_of() { sed -n 's/.*"demo" with payload "hello from B" received from server process with PID \([0-9]*\).*/\1/p' | head -1; }
PID_A=$(pid_of < "$NOTIFY_A"); PID_B=$(pid_of <<<"$NOTIFY_B")
SERVER_B=$(sed -n 's/^B: server pid //p' <<<"$NOTIFY_B")
check "client A's psql exited 0 (it was $rc)" [ "$rc" -eq 0 ]
check "A got B's notification while it held no server" [ -n "$PID_A" ]
check "B got its own notification" [ -n "$PID_B" ]
check "both name the same notifier ($PID_A, $PID_B)" [ "$PID_A" = "$PID_B" ]
check "B's server pid was read ($SERVER_B)" [ -n "$SERVER_B" ]
check "the notifier's pid is pgcat's for B, not B's server's" [ "$PID_B" != "$SERVER_B" ]
check "pgcat listened on one connection of its own ($LISTENERS)" [ "$LISTENERS" -eq 1 ]

# --- 8 --------------------------------------------------------------------------------
step "the figures: SHOW POOLS, SHOW SHARDS and /metrics" \
	"the admin console and the Prometheus endpoint (prometheus_port = $PROM_PORT) \
account for the traffic above: connections and prepared statements per pool, \
transactions per shard and server with how each was routed (the sharding keys \
of step 3 under routed_key, SET SHARD and SET SHARDING KEY under routed_set), \
the replica's lag, and the same figures as metrics."
echo "    SHOW POOLS (some columns):"
admin_cols "SHOW POOLS" database user cl_active cl_waiting sv_active sv_idle sv_used maxwait pool_mode prepared_hits prepared_misses
echo "    SHOW SHARDS (some columns):"
admin_cols "SHOW SHARDS" pool shard host port role banned xact_count routed_key routed_set routed_hint routed_default lag_bytes
METRICS=$(curl -fsS "http://127.0.0.1:$PROM_PORT/metrics")
echo "    curl http://127.0.0.1:$PROM_PORT/metrics (some lines of $(wc -l <<<"$METRICS")):"
grep -E '^pgcat_(stats_xacts_total|prepared_hits_total|pools_sv_idle|server_lag_bytes|bans|workers|client_connections)[{ ]' <<<"$METRICS" \
	| sed 's/^/      /'
# routed_key: the 7 INSERTs and 7 SELECTs of step 3 (the parser found their
# keys); routed_set: the 2 CREATE TABLEs after SET SHARD and the 3 INSERTs
# after SET SHARDING KEY.
SHARDS=$(admin_cols "SHOW SHARDS" pool shard routed_key routed_set | awk '$1 == "sharded"')
check "SHOW SHARDS: transactions routed by key on both shards" \
	[ "$(awk '$3 > 0' <<<"$SHARDS" | wc -l)" -eq 2 ]
check "SHOW SHARDS: at least the 14 routed by key ($(awk '{ n += $3 } END { print n }' <<<"$SHARDS"))" \
	[ "$(awk '{ n += $3 } END { print n }' <<<"$SHARDS")" -ge 14 ]
check "SHOW SHARDS: at least the 5 routed by SET SHARD / SET SHARDING KEY ($(awk '{ n += $4 } END { print n }' <<<"$SHARDS"))" \
	[ "$(awk '{ n += $4 } END { print n }' <<<"$SHARDS")" -ge 5 ]
metric() { # name{labels}: its value in /metrics, or nothing
	awk -v k="$1" '$1 == k { print $2 }' <<<"$METRICS"
}
XACTS=$(metric 'pgcat_stats_xacts_total{pool="appdb",user="app"}')
check "/metrics counts appdb's transactions (pgcat_stats_xacts_total = ${XACTS:-absent})" [ "${XACTS:-0}" -gt 0 ]
HITS=$(metric 'pgcat_prepared_hits_total{pool="appdb",user="app"}')
check "/metrics: step 6's prepared statements were reused (pgcat_prepared_hits_total = ${HITS:-absent})" [ "${HITS:-0}" -gt 0 ]
check "/metrics: no ban left (pgcat_bans = $(metric pgcat_bans))" [ "$(metric pgcat_bans)" = 0 ]

log "stopping pgcat (SIGTERM)"
kill -TERM "$PGCAT_PID"
rc=0
wait "$PGCAT_PID" || rc=$?
PGCAT_PID=
echo "pgcat exited with code $rc"
tail -n 3 "$TMP/pgcat.log"
[ "$rc" -eq 0 ] || die "pgcat exited with code $rc"
log "done; stopping PostgreSQL and removing $TMP"
