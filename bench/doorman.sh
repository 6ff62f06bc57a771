# SPDX-License-Identifier: MIT
#
# bench/doorman.sh — sourced by bench/run.sh and bench/callgrind.sh: pg_doorman
# 3.10.7 as an optional benchmark target beside PgBouncer. Needs REPO set and
# bench/anchors.sh (anchor) sourced first.

# Sets PG_DOORMAN_BIN: as given, or built once by the anchor's build script
# (a Rust release build: about 7 minutes on 2 cores the first time; crates
# from crates.io; later calls print the existing binary's path at once).
pg_doorman_bin() {
	local builder
	if [ -z "${PG_DOORMAN_BIN:-}" ]; then
		builder=$(anchor build-pg-doorman) || return 1
		echo "== pg_doorman: $builder"
		PG_DOORMAN_BIN=$("$builder") || { echo "pg_doorman build failed" >&2; return 1; }
	fi
	[ -x "$PG_DOORMAN_BIN" ] || { echo "PG_DOORMAN_BIN=$PG_DOORMAN_BIN is not executable" >&2; return 1; }
	echo "== pg_doorman: $PG_DOORMAN_BIN ($("$PG_DOORMAN_BIN" --version 2>&1 | head -1))"
}

# pg_doorman's TOML config. One worker thread (as pgcat's workers = 1 and
# PgBouncer's single thread), the same pool (10 server connections of user
# bench on database bench, transaction mode), its prepared-statement cache on.
# Its password is the role's SCRAM secret, as in PgBouncer's userlist:
# pg_doorman checks the client's proof against it and logs in to PostgreSQL
# with the client's key (passthrough), no plaintext anywhere.
# query_wait_timeout and server_lifetime are PgBouncer's defaults (120 s, 1 h),
# so that neither a 1,000-client cell nor a long run trips over pg_doorman's
# shorter ones (5 s, 20 min). Its admin console (required keys) gets a random
# password nobody uses. It logs to stderr (run with -l warn).
pg_doorman_toml() { # port pgport secret
	cat <<EOF
[general]
host = "127.0.0.1"
port = $1
backlog = 4096
worker_threads = 1
max_connections = 20000
query_wait_timeout = 120000
server_lifetime = 3600000
server_tls_mode = "disable"
log_client_connections = false
log_client_disconnections = false
admin_username = "admin"
admin_password = "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
prepared_statements = true
prepared_statements_cache_size = 8192

[pools.bench]
server_host = "127.0.0.1"
server_port = $2
server_database = "bench"
pool_mode = "transaction"

[pools.bench.users.0]
username = "bench"
password = "$3"
pool_size = 10
EOF
}
