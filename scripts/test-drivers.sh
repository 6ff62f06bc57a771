#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs only test/integration/test_drivers.py: node-postgres, postgres.js, pgx
# and pgjdbc through pgcat (prepared statements in transaction mode, batches,
# transactions, errors). scripts/test.sh runs them too, within the whole
# integration suite. setup_drivers (scripts/lib.sh) installs Node.js, Go and
# a JDK from Debian when missing and fetches the drivers from the npm
# registry, the Go module proxy and Maven Central (pinned versions; the jar
# is checked against its SHA-256) into build-drivers/. Builds pgcat with
# ASan+UBSan like scripts/test.sh.
#
#   bash scripts/test-drivers.sh            # all three languages
#   bash scripts/test-drivers.sh -k pgx     # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

install_packages

VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
	python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-test.txt

setup_drivers "${PGCAT_DRIVERS_DIR:-$ROOT/build-drivers}" || die "driver programs not built (see above)"

log "building pgcat (ASan + UBSan)"
build_out_of_tree build-asan --enable-werror \
	CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
	LDFLAGS="-fsanitize=address,undefined"
export PGCAT_BIN="$BUILT_BIN"
export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_leaks=1:print_stacktrace=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

log "pytest test/integration/test_drivers.py"
"$VENV/bin/python" -m pytest -p no:cacheprovider -v test/integration/test_drivers.py "$@"
