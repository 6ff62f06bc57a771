# SPDX-License-Identifier: MIT
"""The Debian package's unit (debian/pgcat.service) under a real systemd:
`systemctl start`; `systemctl reload` with an error in the configuration
(refused, the running pgcat goes on); with a new binary in place and
once more (issue 43: ExecReload runs pgcat -t, then pgcat -R -d, which
takes the running one over; systemd follows the new process as the main
one); a client connected all along never notices; `systemctl stop`.

systemd runs as pid 1 of a pid and mount namespace of its own, on a
cgroup2 hierarchy of its own, with tmpfs over /run, /var/log and /var/lib
and over /tmp and /var/tmp once the test's files are copied, and only the
test's units on its unit path (SYSTEMD_UNIT_PATH): nothing of the host's
is loaded, let alone started (the targets a service's default
dependencies name are empty stubs). The unit is the
package's file as shipped, with the binary's and the configuration's paths
replaced, and one drop-in: ASAN_OPTIONS (the test binaries are ASan
builds, and LeakSanitizer's stop-the-world needs ptrace, which the unit's
system call filter refuses)."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, pgcat_binary, pgcat_next_binary, port_open, wait_until
from test_reboot import _admin_conn

BOOT = r"""#!/bin/bash
# pid 1 of new pid, mount, uts and ipc namespaces (unshare --fork ...)
set -e
mount --make-rprivate /
umount -R /sys/fs/cgroup 2>/dev/null || true
mount -t cgroup2 none /sys/fs/cgroup
for d in /run /var/log /var/lib; do mount -t tmpfs -o mode=755 tmpfs $d; done
mkdir -p /run/sdtest
cp -a "$1"/. /run/sdtest/
# (after the copy, which came from there: the host's /tmp is not this
# systemd's to touch, nor its services')
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
# Only the test's units: none of the host's is even loaded (the targets a
# service's default dependencies name are empty stubs here).
export SYSTEMD_UNIT_PATH=/run/sdtest/units
exec env container=pgcat-test /lib/systemd/systemd --system --unit=sdtest.target
"""

# The units a service's default dependencies and the package's unit name:
# empty here, so that nothing of the host's (tmpfiles, sysctl, getty,
# PostgreSQL's own service) ever runs.
STUB_UNITS = ("sysinit.target", "basic.target", "shutdown.target", "network.target", "network-online.target",
              "sockets.target", "paths.target", "timers.target", "sdtest.target")


def _have_systemd():
    return Path("/lib/systemd/systemd").exists() and shutil.which("unshare") and shutil.which("nsenter")


class Systemd:
    def __init__(self, stage):
        self.stage = stage
        boot = stage / "boot.sh"
        boot.write_text(BOOT)
        boot.chmod(0o755)
        self.unshare = subprocess.Popen(["unshare", "--fork", "--pid", "--mount", "--uts", "--ipc", "--mount-proc",
                                         str(boot),
                                         str(stage)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        self.pid = None
        wait_until(self._found, 15)
        wait_until(lambda: self.ctl("is-system-running").stdout.strip() in ("running", "degraded"), 30)

    def _found(self):
        try:
            kids = Path("/proc/%d/task/%d/children" % (self.unshare.pid, self.unshare.pid)).read_text().split()
        except OSError:
            return False
        if kids:
            self.pid = int(kids[0])
        return self.pid is not None

    def ctl(self, *args, timeout=60):
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "systemctl"] + list(args),
                              capture_output=True, text=True, timeout=timeout)

    def show(self, unit, prop):
        return self.ctl("show", "-p", prop, "--value", unit).stdout.strip()

    def diag(self, unit="pgcat.service"):
        """What to show when something went wrong: the unit's status and
        pgcat's log."""
        try:
            log = self.path("/var/log/pgcat/pgcat.log").read_text()[-4000:]
        except OSError as e:
            log = str(e)
        return "%s\n--- pgcat.log ---\n%s" % (self.ctl("status", "--no-pager", unit).stdout, log)

    def path(self, p):
        """A path of the namespace, seen from the host."""
        return Path("/proc/%d/root%s" % (self.pid, p))

    def stop(self):
        if self.pid:
            try:
                os.kill(self.pid, 9)    # pid 1 of the namespace: everything in it goes
            except ProcessLookupError:
                pass
        self.unshare.wait(30)


def _host_pid(sd, ns_pid):
    """The host's pid of the process the namespace calls ns_pid."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:"):
                ids = line.split()[1:]
                if len(ids) == 2 and int(ids[1]) == ns_pid and (d / "root").resolve() == Path("/"):
                    return int(d.name)
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="systemd in a namespace of its own needs root")
def test_systemctl_reload_upgrades_without_a_client_noticing(pgcat, pg, tmp_path):
    assert _have_systemd(), "systemd, unshare and nsenter are needed (Debian's systemd and util-linux)"
    if subprocess.run(["id", "pgcat"], capture_output=True).returncode != 0:
        # (as the package's postinst makes it)
        subprocess.run(["adduser", "--system", "--group", "--no-create-home", "--home", "/nonexistent",
                        "--quiet", "pgcat"], check=True)
    inst = pgcat(start=False, general={"unix_socket_dir": "/run/pgcat", "shutdown_timeout": 20000,
                                       "log_file": "/var/log/pgcat/pgcat.log"})
    inst.write()
    stage = tmp_path / "stage"
    (stage / "units").mkdir(parents=True)
    shutil.copy(pgcat_binary(), stage / "pgcat")
    shutil.copy(pgcat_next_binary(), stage / "pgcat-next")
    shutil.copy(inst.ini, stage / "pgcat.ini")
    unit = (REPO / "debian" / "pgcat.service").read_text()
    unit = unit.replace("/usr/sbin/pgcat", "/run/sdtest/pgcat").replace("/etc/pgcat/pgcat.ini",
                                                                         "/run/sdtest/pgcat.ini")
    assert "ExecReload=/run/sdtest/pgcat -R -d /run/sdtest/pgcat.ini" in unit
    (stage / "units" / "pgcat.service").write_text(unit)
    (stage / "units" / "pgcat.service.d").mkdir()
    (stage / "units" / "pgcat.service.d" / "asan.conf").write_text(
        "[Service]\nEnvironment=ASAN_OPTIONS=detect_leaks=0\n")
    for stub in STUB_UNITS:
        (stage / "units" / stub).write_text("[Unit]\nDescription=%s (empty here)\nDefaultDependencies=no\n" % stub)
    (stage / "units" / "system.slice").write_text("[Unit]\nDescription=system.slice\nDefaultDependencies=no\n")
    for f in [stage] + list(stage.rglob("*")):
        f.chmod(0o755 if f.is_dir() or f.name.startswith("pgcat") and not f.suffix else 0o644)
    sd = Systemd(stage)
    try:
        # what this systemd knows: the test's units and its own built-in ones
        # (units named but found nowhere show as not-found: they cannot run)
        rows = [line.split() for line in sd.ctl("list-units", "--all", "--plain", "--no-legend").stdout.split("\n")]
        loaded = {r[0] for r in rows if len(r) > 1 and r[1] == "loaded"}
        ours = set(STUB_UNITS) | {"pgcat.service", "system.slice", "-.slice"}
        assert not {n for n in loaded if not n.endswith((".mount", ".swap", ".device", ".scope"))} - ours, rows
        r = sd.ctl("start", "pgcat.service")
        assert r.returncode == 0, (r.stderr, sd.ctl("status", "pgcat.service").stdout)
        assert sd.show("pgcat.service", "ActiveState") == "active"
        wait_until(lambda: port_open(inst.host, inst.port), 15)
        with _admin_conn(inst) as adm:
            old_version = adm.execute("SHOW VERSION").fetchone()[0]
        client = inst.connect()
        client.execute("SET application_name = 'kept_over'")
        pid_before = client.info.backend_pid
        # a configuration with an error: the reload fails, says why, and the
        # running pgcat goes on as the main process
        main = int(sd.show("pgcat.service", "MainPID"))
        ini = sd.path("/run/sdtest/pgcat.ini")
        good = ini.read_text()
        ini.write_text(good + "\nno_such_setting = 1\n")
        r = sd.ctl("reload", "pgcat.service")
        assert r.returncode != 0, sd.diag()
        ini.write_text(good)
        assert sd.show("pgcat.service", "ActiveState") == "active", sd.diag()
        assert int(sd.show("pgcat.service", "MainPID")) == main
        assert client.execute("SELECT 1").fetchone()[0] == 1
        for upgrade in (True, False):
            if upgrade:
                # the package's upgrade: a new binary where the old one was
                os.replace(sd.path("/run/sdtest/pgcat-next"), sd.path("/run/sdtest/pgcat"))
            old_main = int(sd.show("pgcat.service", "MainPID"))
            host_old = _host_pid(sd, old_main)
            assert host_old, old_main
            r = sd.ctl("reload", "pgcat.service")
            assert r.returncode == 0, (r.stderr, sd.diag())
            try:
                wait_until(lambda: sd.show("pgcat.service", "MainPID") not in ("0", str(old_main)), 20)
                # the old process exits; systemd follows the new one
                wait_until(lambda: not Path("/proc/%d" % host_old).exists(), 30)
            except AssertionError:
                raise AssertionError(sd.diag())
            new_main = int(sd.show("pgcat.service", "MainPID"))
            assert sd.show("pgcat.service", "ActiveState") == "active", sd.diag()
            assert _host_pid(sd, new_main), sd.diag()
            # the client never noticed: same connection, same session
            assert client.execute("SHOW application_name").fetchone()[0] == "kept_over"
            assert client.info.backend_pid == pid_before
            with _admin_conn(inst) as adm:
                assert adm.execute("SHOW VERSION").fetchone()[0] == old_version + "+next"
        client.close()
        r = sd.ctl("stop", "pgcat.service")
        assert r.returncode == 0, r.stderr
        assert sd.show("pgcat.service", "ActiveState") == "inactive"
        assert sd.show("pgcat.service", "Result") == "success"
    finally:
        sd.stop()
