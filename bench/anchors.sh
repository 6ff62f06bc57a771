# SPDX-License-Identifier: MIT
#
# bench/anchors.sh — sourced by bench/run.sh and bench/callgrind.sh: where the
# benchmark anchors' build scripts are, and PgBouncer 1.25.2 (built by one of
# them) as a target beside the distribution's PgBouncer. Needs REPO set.

# The benchmark anchors' build scripts live in shared/anchors beside the
# repository: ../shared/anchors from a checkout, or beside the main checkout
# when this is a git worktree elsewhere. BENCH_ANCHORS=dir overrides both.
anchor() { # script name: print its path
	local d common
	common=$(git -C "$REPO" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
	for d in ${BENCH_ANCHORS:+"$BENCH_ANCHORS"} "$REPO/../shared/anchors" \
		${common:+"$(dirname "$common")/../shared/anchors"}; do
		[ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
	done
	echo "$1 not found (looked in \$BENCH_ANCHORS, $REPO/../shared/anchors${common:+, $(dirname "$common")/../shared/anchors})" >&2
	return 1
}

# Sets PGBOUNCER125_BIN: as given, or built once by the anchor's build script
# (autotools and make, about a minute on 2 cores the first time, into
# /tmp/pgbouncer-1.25.2; later calls print the existing binary's path at once).
pgbouncer125_bin() {
	local builder
	if [ -z "${PGBOUNCER125_BIN:-}" ]; then
		builder=$(anchor build-pgbouncer) || return 1
		echo "== PgBouncer 1.25.2: $builder"
		PGBOUNCER125_BIN=$("$builder") || { echo "PgBouncer 1.25.2 build failed" >&2; return 1; }
	fi
	[ -x "$PGBOUNCER125_BIN" ] || { echo "PGBOUNCER125_BIN=$PGBOUNCER125_BIN is not executable" >&2; return 1; }
	echo "== PgBouncer 1.25.2: $PGBOUNCER125_BIN ($("$PGBOUNCER125_BIN" --version 2>&1 | head -1))"
}
