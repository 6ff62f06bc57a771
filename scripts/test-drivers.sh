#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs test/integration/test_drivers.py: node-postgres, postgres.js, pgx and
# pgjdbc through pgcat (prepared statements in transaction mode, batches,
# transactions, errors). Not part of the default test command: it needs
# Node.js (npm), Go and a JDK, and fetches the drivers from the npm registry,
# the Go module proxy and Maven Central (pinned versions; the jar is checked
# against its SHA-256). Builds pgcat with ASan+UBSan like scripts/test.sh.
#
#   bash scripts/test-drivers.sh            # all three languages
#   bash scripts/test-drivers.sh -k pgx     # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

for tool in node npm go java javac; do
	command -v "$tool" >/dev/null || die "$tool not found: test-drivers.sh needs Node.js with npm, Go and a JDK"
done
install_packages

VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
	python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-test.txt

OUT=${PGCAT_DRIVERS_DIR:-$ROOT/build-drivers}
mkdir -p "$OUT/node" "$OUT/go" "$OUT/java"

log "node-postgres and postgres.js (npm)"
cp test/drivers/node/package.json test/drivers/node/drivers.js "$OUT/node/"
(cd "$OUT/node" && npm install --no-audit --no-fund --loglevel=error >/dev/null)

log "pgx (Go module proxy)"
cp test/drivers/go/go.mod test/drivers/go/go.sum test/drivers/go/main.go "$OUT/go/"
(cd "$OUT/go" && go build -o drivers .)

log "pgjdbc (Maven Central)"
JAR_URL=https://repo1.maven.org/maven2/org/postgresql/postgresql/42.7.4/postgresql-42.7.4.jar
JAR_SHA256=188976721ead8e8627eb6d8389d500dccc0c9bebd885268a3047180274a6031e
if ! echo "$JAR_SHA256  $OUT/java/postgresql.jar" | sha256sum -c --status 2>/dev/null; then
	curl -fsSL -o "$OUT/java/postgresql.jar" "$JAR_URL"
	echo "$JAR_SHA256  $OUT/java/postgresql.jar" | sha256sum -c --status || die "postgresql.jar: checksum mismatch"
fi
javac -d "$OUT/java" -cp "$OUT/java/postgresql.jar" test/drivers/java/Drivers.java

log "building pgcat (ASan + UBSan)"
build_out_of_tree build-asan --enable-werror \
	CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
	LDFLAGS="-fsanitize=address,undefined"
export PGCAT_BIN="$BUILT_BIN" PGCAT_DRIVERS_DIR="$OUT"
export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_leaks=1:print_stacktrace=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

log "pytest test/integration/test_drivers.py"
"$VENV/bin/python" -m pytest -p no:cacheprovider -v test/integration/test_drivers.py "$@"
