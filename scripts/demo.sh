#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The demo: installs what is missing, builds pgcat (release flags, in build/),
# starts throwaway PostgreSQL 15 servers as OS user postgres in a temp dir
#   - a primary and a streaming replica of it (pg_basebackup -R),
#   - a second server holding two shard databases (shard0, shard1),
# writes a pgcat.ini with one pool over primary + replica and one sharded
# pool, starts pgcat in front, pushes pgbench traffic through it, prints the
# results and pool figures, then stops everything and removes the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

DEMO_SECONDS=${DEMO_SECONDS:-10}
PG_OS_USER=${PG_OS_USER:-postgres}

log "checking packages"
install_packages

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

free_port() {
	local p
	while :; do
		p=$(( 20000 + RANDOM % 30000 ))
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
	as_pg "$PG_BIN/pg_ctl" -D "$1" -l "$TMP/$2.log" -w -t 60 start >/dev/null
	PIDS_PG+=("$1")
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

; one pool over a primary and its replica: writes to the primary,
; reads may go to the replica
[pools.appdb]
default_role = primary
query_parser_enabled = true
primary_reads_enabled = true

[pools.appdb.shards.0]
database = appdb
servers = 127.0.0.1:$P_PRIMARY:primary, 127.0.0.1:$P_REPLICA:replica

[pools.appdb.users.app]
password = $APP_PASSWORD

; a sharded pool: two shards on the shard server
[pools.sharded]
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

log "pgbench -i -s 1 through pgcat"
"${PGB[@]}" -i -s 1 appdb

log "pgbench -c 10 -j 2 -T $DEMO_SECONDS through pgcat (TPC-B-like, transaction mode, pool_size 5)"
"${PGB[@]}" -c 10 -j 2 -T "$DEMO_SECONDS" -P 2 appdb &
BENCH=$!
sleep $(( DEMO_SECONDS / 2 ))
echo "--- mid-run: server connections of user app on the primary (10 clients share them):"
psql_pg "$P_PRIMARY" postgres -c "SELECT state, count(*) FROM pg_stat_activity WHERE usename = 'app' GROUP BY state ORDER BY state"
wait "$BENCH"

log "pgbench -S -c 10 -j 2 -T $(( DEMO_SECONDS / 2 )) (read-only) through pgcat"
"${PGB[@]}" -S -c 10 -j 2 -T "$(( DEMO_SECONDS / 2 ))" appdb

log "pool figures"
if PGPASSWORD=$ADMIN_PASSWORD "$PG_BIN/psql" -X -h 127.0.0.1 -p "$PORT" -U pgcat -d pgcat -c 'SHOW POOLS' 2>/dev/null; then
	PGPASSWORD=$ADMIN_PASSWORD "$PG_BIN/psql" -X -h 127.0.0.1 -p "$PORT" -U pgcat -d pgcat -c 'SHOW STATS' 2>/dev/null || true
	PGPASSWORD=$ADMIN_PASSWORD "$PG_BIN/psql" -X -h 127.0.0.1 -p "$PORT" -U pgcat -d pgcat -c 'SHOW SERVERS' 2>/dev/null || true
else
	echo "(admin console not available yet: last lines of pgcat's log instead)"
	tail -n 25 "$TMP/pgcat.log"
fi
echo "--- server connections per server (pg_stat_activity, user app):"
for p in "$P_PRIMARY:primary" "$P_REPLICA:replica" "$P_SHARDS:shards"; do
	printf '%-8s ' "${p#*:}"
	psql_pg "${p%%:*}" postgres -At -c "SELECT count(*) || ' connections' FROM pg_stat_activity WHERE usename = 'app'"
done

log "stopping pgcat (SIGTERM)"
kill -TERM "$PGCAT_PID"
rc=0
wait "$PGCAT_PID" || rc=$?
PGCAT_PID=
echo "pgcat exited with code $rc"
tail -n 3 "$TMP/pgcat.log"
log "done; stopping PostgreSQL and removing $TMP"
