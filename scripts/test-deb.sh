#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the Debian package from a copy of the work tree (tracked and
# untracked, not ignored files: the work tree itself stays clean), runs
# lintian on it, installs it with dpkg -i on this machine, checks what it
# installed, and purges it again. Needs root (dpkg -i); installs what is
# missing first. Exits non-zero on any failure; can be run again at once.
#   bash scripts/test-deb.sh
# Environment: KEEP_DEB_DIR=1 keeps the temporary build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

t_start=$(date +%s)
fail() { printf 'test-deb: FAILED: %s\n' "$*" >&2; exit 1; }
ok() { printf 'test-deb: ok: %s\n' "$*"; }

# Build dependencies (as in debian/control) and the tools of the checks:
# lintian, systemd-analyze (package systemd), man (man-db). No systemd needs
# to run as PID 1 for any of them.
APT_PACKAGES="build-essential dpkg-dev debhelper fakeroot lintian systemd \
man-db adduser git tar python3 autoconf automake pkg-config libevent-dev \
libssl-dev libc-ares-dev libpg-query-dev libinih-dev liburing-dev libidn-dev check"
install_packages

# dpkg and apt hold their own locks, but two runs of this script (two test
# runs on one machine) would still install and purge under each other.
exec 9>/tmp/pgcat-test-deb.lock
flock -w 900 9 || fail "another scripts/test-deb.sh run holds /tmp/pgcat-test-deb.lock"

# --- the version, from its one place --------------------------------------------
version=$(sed -n 's/^AC_INIT(\[pgcat\], *\[\([^]]*\)\].*/\1/p' configure.ac)
[ -n "$version" ] || fail "no version in configure.ac AC_INIT"
deb_version=$(dpkg-parsechangelog -l debian/changelog -S Version)
[ "$deb_version" = "$version" ] \
	|| fail "debian/changelog says $deb_version, configure.ac AC_INIT says $version"
ok "version $version in configure.ac and debian/changelog"

# --- build in a temporary copy -----------------------------------------------------
tmp=$(mktemp -d /tmp/pgcat-deb.XXXXXX)
chmod 0755 "$tmp"   # the smoke run below runs as user pgcat
installed_by_us=0
cleanup() {
	local rc=$?
	if [ "$installed_by_us" = 1 ] && dpkg-query -W -f='${Status}' pgcat 2>/dev/null | grep -q installed; then
		echo "test-deb: purging the package after a failure"
		DEBIAN_FRONTEND=noninteractive dpkg --purge pgcat >/dev/null 2>&1 || true
	fi
	if [ "${KEEP_DEB_DIR:-0}" = 1 ]; then echo "test-deb: kept $tmp"; else rm -rf "$tmp"; fi
	exit "$rc"
}
trap cleanup EXIT

src="$tmp/pgcat-$version"
mkdir -p "$src"
# Files deleted in the work tree but still tracked are skipped.
(git ls-files -z -c -o --exclude-standard) \
	| while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
	| tar --null -T - -cf - | tar -xpf - -C "$src"

(cd "$src" && dpkg-checkbuilddeps) || fail "build dependencies of debian/control missing"

log "dpkg-buildpackage -us -uc -b (log: $tmp/build.log)"
t=$(date +%s)
if ! (cd "$src" && DEB_BUILD_OPTIONS="parallel=$(nproc)" dpkg-buildpackage -us -uc -b) > "$tmp/build.log" 2>&1; then
	tail -60 "$tmp/build.log"
	KEEP_DEB_DIR=1
	fail "dpkg-buildpackage failed (log: $tmp/build.log)"
fi
arch=$(dpkg --print-architecture)
deb="$tmp/pgcat_${version}_${arch}.deb"
changes="$tmp/pgcat_${version}_${arch}.changes"
[ -f "$deb" ] || fail "no $deb after the build"
ok "built $(basename "$deb") in $(( $(date +%s) - t ))s"

# --- lintian ---------------------------------------------------------------------
log "lintian"
lintian_rc=0
# Root gets a warning on stderr only; --fail-on error is the default made plain.
lintian --fail-on error --display-info "$changes" > "$tmp/lintian.out" 2>&1 || lintian_rc=$?
sed 's/^/    /' "$tmp/lintian.out"
n_err=$(grep -c '^E: ' "$tmp/lintian.out" || true)
n_warn=$(grep -c '^W: ' "$tmp/lintian.out" || true)
echo "    lintian: $n_err errors, $n_warn warnings"
[ "$lintian_rc" -eq 0 ] && [ "$n_err" -eq 0 ] || fail "lintian reports errors (exit $lintian_rc)"
ok "lintian: no errors"

# --- install ---------------------------------------------------------------------
log "dpkg -i $(basename "$deb")"
installed_by_us=1
if ! DEBIAN_FRONTEND=noninteractive dpkg -i "$deb"; then
	# Runtime libraries the build dependencies did not bring (not expected).
	DEBIAN_FRONTEND=noninteractive apt-get install -f -y -q --no-install-recommends \
		|| fail "dpkg -i failed and apt-get -f could not fix it"
fi
dpkg-query -W -f='${Status}\n' pgcat | grep -qx 'install ok installed' || fail "pgcat is not installed"

[ -x /usr/sbin/pgcat ] || fail "/usr/sbin/pgcat missing"
first=$(/usr/sbin/pgcat -V | head -1)
[ "$first" = "pgcat $version" ] || fail "pgcat -V printed '$first', expected 'pgcat $version'"
ok "pgcat -V: $first"

ini=/etc/pgcat/pgcat.ini
[ -f "$ini" ] || fail "$ini missing"
dpkg-query -W -f='${Conffiles}\n' pgcat | grep -q " $ini " || fail "$ini is not a conffile"
/usr/sbin/pgcat -t "$ini" || fail "pgcat -t $ini exits $?"
ok "pgcat -t $ini"

getent passwd pgcat >/dev/null || fail "no pgcat user"
getent group pgcat >/dev/null || fail "no pgcat group"
uid=$(id -u pgcat)
[ "$uid" -lt 1000 ] || fail "pgcat user has uid $uid: not a system user"
[ "$(stat -c '%U:%G %a' "$ini")" = "root:pgcat 640" ] \
	|| fail "$ini is $(stat -c '%U:%G %a' "$ini"), expected root:pgcat 640"
# The unit's ExecStartPre runs as the pgcat user.
runuser -u pgcat -- /usr/sbin/pgcat -t "$ini" >/dev/null || fail "pgcat -t $ini as user pgcat"
ok "pgcat system user (uid $uid) reads $ini (root:pgcat 640)"

unit=/lib/systemd/system/pgcat.service
[ -f "$unit" ] || fail "$unit missing"
# systemd-analyze verify loads the unit into a private manager: it needs no
# systemd running as PID 1 (this container has none). It checks the
# syntax, the binaries the Exec lines name, the user, and the units it
# refers to; its output must be empty.
if ! systemd-analyze verify "$unit" > "$tmp/verify.out" 2>&1 || [ -s "$tmp/verify.out" ]; then
	cat "$tmp/verify.out"
	fail "systemd-analyze verify $unit"
fi
for key in 'Type=notify' 'NotifyAccess=all' "ExecReload=/usr/sbin/pgcat -R -d $ini" "ExecStartPre=/usr/sbin/pgcat -t $ini" \
	'ProtectSystem=strict' 'PrivateTmp=yes' 'NoNewPrivileges=yes' 'ProtectHome=yes' 'User=pgcat'; do
	grep -qxF "$key" "$unit" || fail "$unit lacks '$key'"
done
ok "systemd-analyze verify $unit"

for page in /usr/share/man/man1/pgcat.1.gz /usr/share/man/man5/pgcat.ini.5.gz; do
	[ -f "$page" ] || fail "$page missing"
	MANWIDTH=80 man -l --warnings "$page" > "$tmp/man.out" 2> "$tmp/man.err" || fail "man -l $page exits $?"
	if [ -s "$tmp/man.err" ]; then cat "$tmp/man.err"; fail "man -l --warnings $page warns"; fi
	[ "$(wc -l < "$tmp/man.out")" -gt 50 ] || fail "man -l $page renders almost nothing"
done
# Every [general] key of the packaged file is described in pgcat.ini(5).
# The page is unpacked once: "zcat | grep -q" under pipefail fails at
# random when grep stops reading before zcat has written everything.
zcat /usr/share/man/man5/pgcat.ini.5.gz > "$tmp/pgcat.ini.5"
for key in $(sed -n '/^\[general\]/,/^\[/s/^\([a-z_]*\) *=.*/\1/p' "$ini"); do
	grep -qx "\.B $key" "$tmp/pgcat.ini.5" || fail "pgcat.ini(5) does not describe $key"
done
ok "man pages pgcat(1) and pgcat.ini(5) render without warnings"

[ -f /etc/logrotate.d/pgcat ] || fail "/etc/logrotate.d/pgcat missing"
[ -f /usr/share/doc/pgcat/README.Debian ] || fail "README.Debian missing"

# --- the installed daemon talks to systemd as the unit expects --------------------
# No systemd runs here, so play its part: start the installed binary as user
# pgcat with NOTIFY_SOCKET on a copy of the packaged file (on a free port,
# socket directory in $tmp), expect READY=1, RELOADING=1 + READY=1 on
# SIGHUP, STOPPING=1 and exit 0 on SIGTERM.
log "sd_notify smoke run as user pgcat"
run_dir="$tmp/run"
install -d -o pgcat -g pgcat -m 0755 "$run_dir"
python3 - "$ini" "$run_dir" <<'EOF' || fail "sd_notify smoke run"
import os, re, signal, socket, subprocess, sys, time
ini, run_dir = sys.argv[1], sys.argv[2]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
text = open(ini).read()
text = re.sub(r"(?m)^listen_port = .*$", "listen_port = %d" % port, text)
text = re.sub(r"(?m)^unix_socket_dir = .*$", "unix_socket_dir = %s" % run_dir, text)
conf = os.path.join(run_dir, "pgcat.ini")
open(conf, "w").write(text)
os.chmod(conf, 0o644)
sock_path = os.path.join(run_dir, "notify")
ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
ns.bind(sock_path)
os.chmod(sock_path, 0o666)
env = dict(os.environ, NOTIFY_SOCKET=sock_path)
p = subprocess.Popen(["/usr/sbin/pgcat", conf], env=env, user="pgcat", group="pgcat",
                     extra_groups=[], start_new_session=True)

def expect(word, timeout=15):
    ns.settimeout(0.2)
    end = time.time() + timeout
    while time.time() < end:
        try:
            msg = ns.recv(4096).decode()
        except socket.timeout:
            if p.poll() is not None:
                sys.exit("pgcat exited (%s) before sending %s" % (p.returncode, word))
            continue
        if word in msg.split("\n"):
            return
    sys.exit("no %s within %ss" % (word, timeout))

try:
    expect("READY=1")
    pid = p.pid
    if not os.path.exists(os.path.join(run_dir, ".s.PGSQL.%d" % port)):
        sys.exit("no unix socket in %s" % run_dir)
    os.kill(pid, signal.SIGHUP)
    expect("RELOADING=1")
    expect("READY=1")
    os.kill(pid, signal.SIGTERM)
    expect("STOPPING=1")
    rc = p.wait(timeout=30)
    if rc != 0:
        sys.exit("pgcat exited %d on SIGTERM" % rc)
finally:
    if p.poll() is None:
        # Our own process group: the supervisor and its workers.
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
print("READY=1, RELOADING=1, READY=1, STOPPING=1, exit 0")
EOF
ok "sd_notify: READY, RELOADING, STOPPING, exit 0"

# --- purge -----------------------------------------------------------------------
log "dpkg --purge pgcat"
DEBIAN_FRONTEND=noninteractive dpkg --purge pgcat
installed_by_us=0
[ ! -e /usr/sbin/pgcat ] || fail "/usr/sbin/pgcat still there after purge"
[ ! -e "$ini" ] || fail "$ini still there after purge"
[ ! -e "$unit" ] || fail "$unit still there after purge"
# Debian keeps system users on purge (files elsewhere may still be theirs).
getent passwd pgcat >/dev/null || fail "purge removed the pgcat user"
ok "purged: /usr/sbin/pgcat and /etc/pgcat gone, pgcat user kept"

echo "test-deb: all checks passed in $(( $(date +%s) - t_start ))s"
