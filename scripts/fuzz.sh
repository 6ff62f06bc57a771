#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds pgcat's libFuzzer targets (test/fuzz/, `make fuzz`) with clang in
# build-fuzz/ and runs each for FUZZ_SECONDS, FUZZ_JOBS at a time. Exits
# non-zero if any target crashes, leaks, times out or runs out of memory;
# the input that did it is left in build-fuzz/artifacts/<target>/ and the
# command that replays it is printed. doc/fuzzing.md has the long runs.
#   bash scripts/fuzz.sh                 # every target
#   bash scripts/fuzz.sh router params   # some of them
# Environment: FUZZ_SECONDS (per target, default 20), FUZZ_JOBS (targets run
# at once, default the number of CPUs), FUZZ_TIMEOUT (seconds one input may
# take, default 10), FUZZ_BUILD (build directory, default build-fuzz),
# FUZZ_ARGS (more libFuzzer options, e.g. "-use_value_profile=1").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
ALL_TARGETS="proto_startup proto_message scram_server scram_client config router params sharding client_sm server_sm auth_file hba shardkey copysplit merge pgoutput"

# Longest input worth trying per target: a little past each parser's limit.
max_len() {
	case "$1" in
	proto_startup) echo 10240 ;;   # startup packets stop at 10,000 bytes
	proto_message | config) echo 8192 ;;
	scram_server | scram_client) echo 2200 ;;   # two messages of at most 1,024
	router | params) echo 4096 ;;
	sharding) echo 128 ;;
	client_sm | server_sm) echo 16384 ;;   # a session's worth of messages
	auth_file | hba) echo 4096 ;;
	shardkey) echo 512 ;;
	copysplit) echo 8192 ;;
	merge) echo 4096 ;;
	pgoutput) echo 2048 ;;
	*) echo 4096 ;;
	esac
}

targets=${*:-$ALL_TARGETS}
for t in $targets; do
	case " $ALL_TARGETS " in *" $t "*) ;; *) die "unknown fuzz target: $t (known: $ALL_TARGETS)" ;; esac
done

# --- clang with its sanitizer and libFuzzer runtimes ---------------------------
if ! command -v clang >/dev/null 2>&1; then
	install_packages clang
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' > "$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>/dev/null; then
	# Debian ships the runtimes apart from the compiler.
	install_packages "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
	clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" \
		|| die "clang cannot link a libFuzzer program"
fi

# --- build ---------------------------------------------------------------------
build_out_of_tree "$FUZZ_BUILD"
log "make fuzz in $FUZZ_BUILD"
make -C "$FUZZ_BUILD" fuzz

# --- run -----------------------------------------------------------------------
export ASAN_OPTIONS="${FUZZ_ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:print_stacktrace=1}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mkdir -p "$FUZZ_BUILD/logs"

run_one() {
	local t="$1" bin="$ROOT/$FUZZ_BUILD/test/fuzz/fuzz_$1"
	local work="$FUZZ_BUILD/corpus/$t" art="$FUZZ_BUILD/artifacts/$t/"
	mkdir -p "$work" "$art"
	local args=(-max_total_time="$FUZZ_SECONDS" -max_len="$(max_len "$t")" -timeout="$FUZZ_TIMEOUT"
		-rss_limit_mb=2048 -artifact_prefix="$art" -print_final_stats=1)
	[ -f "test/fuzz/dict/$t.dict" ] && args+=(-dict="test/fuzz/dict/$t.dict")
	# New inputs go to the build's corpus; the checked-in seeds are only read.
	# shellcheck disable=SC2086
	"$bin" "${args[@]}" ${FUZZ_ARGS:-} "$work" "test/fuzz/corpus/$t" > "$FUZZ_BUILD/logs/$t.log" 2>&1
}

log "fuzzing: $(echo $targets | wc -w) targets, ${FUZZ_SECONDS}s each, $FUZZ_JOBS at a time"
declare -A pid_of rc_of
running=0
for t in $targets; do
	if [ "$running" -ge "$FUZZ_JOBS" ]; then
		wait -n || true
		running=$((running - 1))
	fi
	run_one "$t" &
	pid_of[$t]=$!
	running=$((running + 1))
done
failed=0
for t in $targets; do
	rc=0
	wait "${pid_of[$t]}" || rc=$?
	rc_of[$t]=$rc
	[ "$rc" -eq 0 ] || failed=1
done

# --- report ----------------------------------------------------------------------
for t in $targets; do
	logf="$FUZZ_BUILD/logs/$t.log"
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logf" | tail -1 || true)
	cov=$(grep -o 'cov: [0-9]*' "$logf" | tail -1 | cut -d' ' -f2 || true)
	if [ "${rc_of[$t]}" -eq 0 ]; then
		printf '  %-14s ok      %9s runs, coverage %s\n' "$t" "${runs:-?}" "${cov:-?}"
	else
		printf '  %-14s FAILED  (exit %s)\n' "$t" "${rc_of[$t]}"
	fi
done
if [ "$failed" -ne 0 ]; then
	for t in $targets; do
		[ "${rc_of[$t]}" -ne 0 ] || continue
		logf="$FUZZ_BUILD/logs/$t.log"
		echo
		echo "===== fuzz_$t: last 60 lines of $logf ====="
		tail -60 "$logf"
		for a in "$FUZZ_BUILD/artifacts/$t/"*; do
			[ -f "$a" ] || continue
			echo "replay: $FUZZ_BUILD/test/fuzz/fuzz_$t $a"
		done
	done
	echo
	echo "fuzzing FAILED: see doc/fuzzing.md (fix, then add the input to test/fuzz/corpus/<target>/regress-*)"
	exit 1
fi
echo "fuzzing: all targets ok"
