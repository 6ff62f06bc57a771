# SPDX-License-Identifier: MIT
# Shared by scripts/demo.sh and scripts/test.sh: install what is missing and
# build pgcat out of tree. Source it from the repository root.

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

# Debian 12 packages: the build (autotools, compiler, libraries of SPEC §1,
# Check for the unit tests), PostgreSQL 15 with psql/pgbench, python3-venv for
# the integration tests. git and tar are used to snapshot a configured tree.
# socat: PgBouncer's own test suite starts it as a TCP proxy
# (test/peers/pgbouncer_suite.py). systemd, util-linux: the package's unit
# is tested under a systemd of the test's own, in namespaces
# (test/integration/test_systemd.py), not as this machine's init.
APT_PACKAGES="build-essential autoconf automake libtool pkg-config \
libevent-dev libssl-dev libc-ares-dev libpg-query-dev libinih-dev liburing-dev libidn-dev libldap-dev libpam0g-dev check \
postgresql-15 postgresql-client-15 python3 python3-venv git tar \
prometheus-pgbouncer-exporter iproute2 socat slapd ldap-utils systemd util-linux \
chromium fonts-dejavu-core"

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"
	elif command -v sudo >/dev/null 2>&1; then sudo "$@"
	else die "need root to run: $*"
	fi
}

install_packages() {
	local missing="" p
	for p in $APT_PACKAGES "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
			|| missing="$missing $p"
	done
	if [ -z "$missing" ]; then
		echo "packages: all present"
		return 0
	fi
	log "installing:$missing"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
	# shellcheck disable=SC2086
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
}

# pgcat's own tree may have been configured in place (./configure run in the
# source directory); autotools then refuses an out-of-tree build. In that case
# build from a snapshot of the work tree (tracked and untracked, not ignored
# files) so a developer's in-tree build is left alone.
# Usage: build_out_of_tree BUILD_DIR CONFIGURE_ARGS...   (sets BUILT_BIN)
build_out_of_tree() {
	local bdir="$1"; shift
	local root="$PWD" src="$PWD"
	mkdir -p "$bdir"
	if [ -f "$root/config.status" ]; then
		command -v git >/dev/null && git -C "$root" rev-parse --git-dir >/dev/null 2>&1 \
			|| die "source tree is configured in place and is not a git work tree: run 'make distclean' in $root"
		src="$root/$bdir/.srctree"
		echo "note: $root is configured in place; building from a snapshot in $src"
		mkdir -p "$src"
		# Sources a too-wide ignore pattern hides (e.g. "config.h") are taken too.
		{ (cd "$root" && git ls-files -z -c -o --exclude-standard)
		  (cd "$root" && git ls-files -z -o -i --exclude-standard -- 'src/*.[ch]' 'include/*.h' 'test/*.[ch]'); } \
			| (cd "$root" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xpf - -C "$src"
	fi
	# (Re)generate the build system when it is missing or older than its sources.
	if [ ! -x "$src/configure" ] || [ "$src/configure.ac" -nt "$src/configure" ] \
		|| [ ! -f "$src/Makefile.in" ] || [ "$src/Makefile.am" -nt "$src/Makefile.in" ]; then
		log "autogen.sh"
		(cd "$src" && ./autogen.sh)
	fi
	local stamp="$src|$*"
	if [ ! -f "$bdir/Makefile" ] || [ ! -f "$bdir/config.status" ] \
		|| [ "$src/configure" -nt "$bdir/config.status" ] \
		|| [ "$(cat "$bdir/.configure-stamp" 2>/dev/null)" != "$stamp" ]; then
		log "configure in $bdir (from scratch)"
		# Files of an older configuration (e.g. a renamed config header) must not linger.
		# A fuzzing build's corpus, failing inputs and logs are results, not build
		# products: a reconfigure (say, after configure.ac changed) keeps them.
		find "$bdir" -mindepth 1 -maxdepth 1 ! -name .srctree \
			! -name corpus ! -name artifacts ! -name logs -exec rm -rf {} +
		(cd "$bdir" && "$src/configure" "$@") > "$bdir/configure.out" 2>&1 \
			|| { tail -40 "$bdir/configure.out"; die "configure failed (see $bdir/configure.out and $bdir/config.log)"; }
		printf '%s' "$stamp" > "$bdir/.configure-stamp"
	fi
	log "make in $bdir"
	make -C "$bdir" -j"$(nproc)"
	BUILT_BIN="$root/$bdir/pgcat"
	[ -x "$BUILT_BIN" ] || die "build produced no $BUILT_BIN"
}

# The other languages' driver programs of test/integration/test_drivers.py
# (test/drivers/): node-postgres and postgres.js from npm, pgx from the Go
# module proxy, pgjdbc from Maven Central, pinned versions, built into OUT
# (default build-drivers/, ignored by git). Everything fetched stays there
# (node_modules, the Go module and build caches, the checked jar), so a
# second run fetches nothing. Node.js with npm, Go and a JDK are installed
# from Debian when the commands are missing; Go must be at least the version
# test/drivers/go/go.mod names (Debian 12's golang-go is 1.19, too old for
# pgx v5.12: install Go from go.dev into /usr/local/go, which is put on PATH).
# Usage: setup_drivers [OUT]   (sets and exports PGCAT_DRIVERS_DIR; returns
# non-zero with a message when something is missing)
setup_drivers() {
	local out="${1:-$PWD/build-drivers}" pkgs="" need have
	case ":$PATH:" in *:/usr/local/go/bin:*) ;; *) [ -x /usr/local/go/bin/go ] && PATH="/usr/local/go/bin:$PATH" ;; esac
	export PATH
	command -v node >/dev/null && command -v npm >/dev/null || {
		command -v node >/dev/null || pkgs="$pkgs nodejs"; pkgs="$pkgs npm"; }
	command -v go >/dev/null || pkgs="$pkgs golang-go"
	{ command -v java >/dev/null && command -v javac >/dev/null; } || pkgs="$pkgs default-jdk-headless"
	command -v curl >/dev/null || pkgs="$pkgs curl ca-certificates"
	if [ -n "$pkgs" ]; then
		log "installing for the driver tests:$pkgs"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
		# shellcheck disable=SC2086
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs || return 1
	fi
	need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' test/drivers/go/go.mod)
	have=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
	if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
		echo "error: Go $have is older than the $need that test/drivers/go/go.mod (pgx) needs; install Go >= $need (go.dev/dl) into /usr/local/go" >&2
		return 1
	fi
	mkdir -p "$out/node" "$out/go" "$out/java" || return 1
	out=$(cd "$out" && pwd) || return 1
	echo "drivers: node $(node --version), npm $(npm --version), $(go version | cut -d' ' -f3), $(javac -version 2>&1)"

	log "node-postgres and postgres.js (npm) in $out/node"
	cp test/drivers/node/package.json test/drivers/node/*.js "$out/node/" || return 1
	if ! cmp -s "$out/node/package.json" "$out/node/node_modules/.package.json.installed" 2>/dev/null; then
		(cd "$out/node" && npm install --no-audit --no-fund --loglevel=error --cache "$out/npm-cache" >/dev/null) || return 1
		cp "$out/node/package.json" "$out/node/node_modules/.package.json.installed"
	fi

	log "pgx (Go module proxy) in $out/go"
	cp test/drivers/go/go.mod test/drivers/go/go.sum test/drivers/go/*.go "$out/go/" || return 1
	(cd "$out/go" && GOMODCACHE="$out/go-mod" GOCACHE="$out/go-build" GOFLAGS="-modcacherw -buildvcs=false" \
		go build -o drivers .) || return 1

	log "pgjdbc (Maven Central) in $out/java"
	# 42.7.6 and later speak protocol 3.2 (protocolVersion=3.2)
	local jar_url=https://repo1.maven.org/maven2/org/postgresql/postgresql/42.7.14/postgresql-42.7.14.jar
	local jar_sha256=73914527305a40cce504b0d3d90b23caf565136912d607ae8ae7c5895512332c
	if ! echo "$jar_sha256  $out/java/postgresql.jar" | sha256sum -c --status 2>/dev/null; then
		curl -fsSL -o "$out/java/postgresql.jar.part" "$jar_url" || return 1
		echo "$jar_sha256  $out/java/postgresql.jar.part" | sha256sum -c --status \
			|| { echo "error: postgresql.jar: checksum mismatch" >&2; return 1; }
		mv "$out/java/postgresql.jar.part" "$out/java/postgresql.jar"
	fi
	javac -d "$out/java" -cp "$out/java/postgresql.jar" test/drivers/java/Drivers.java || return 1
	export PGCAT_DRIVERS_DIR="$out"
}
