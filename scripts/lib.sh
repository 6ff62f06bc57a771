# SPDX-License-Identifier: MIT
# Shared by scripts/demo.sh and scripts/test.sh: install what is missing and
# build pgcat out of tree. Source it from the repository root.

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

# Debian 12 packages: the build (autotools, compiler, libraries of SPEC §1,
# Check for the unit tests), PostgreSQL 15 with psql/pgbench, python3-venv for
# the integration tests. git and tar are used to snapshot a configured tree.
APT_PACKAGES="build-essential autoconf automake libtool pkg-config \
libevent-dev libssl-dev libc-ares-dev libpg-query-dev libinih-dev check \
postgresql-15 postgresql-client-15 python3 python3-venv git tar \
prometheus-pgbouncer-exporter"

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
