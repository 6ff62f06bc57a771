# SPDX-License-Identifier: MIT
"""Out of file descriptors (SPEC §10): a worker that cannot accept pauses
accepting instead of spinning on the error, keeps serving the clients it
has, and accepts again once descriptors are free."""
import socket
import subprocess
import time

from conftest import wait_until
from test_workers import worker_pids


def test_emfile_pauses_accepting_and_recovers(pgcat):
    inst = pgcat(general={"workers": 1})
    wait_until(lambda: len(worker_pids(inst)) == 1)
    (wpid,) = worker_pids(inst)
    held = inst.connect()
    assert held.execute("SELECT 1").fetchone()[0] == 1
    open_fds = len(list(__import__("pathlib").Path("/proc/%d/fd" % wpid).iterdir()))
    # Leave room for a handful of connections only.
    limit = open_fds + 6
    soft = subprocess.run(["prlimit", "--pid", str(wpid), "--nofile", "--raw", "--noheadings", "--output=SOFT"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Only the soft limit moves: lowering the hard one could not be undone.
    subprocess.run(["prlimit", "--pid", str(wpid), "--nofile=%d:" % limit], check=True)
    log_before = inst.logfile.stat().st_size
    socks = []
    try:
        for _ in range(40):
            s = socket.create_connection((inst.host, inst.port), timeout=2)
            socks.append(s)
        time.sleep(1.5)
        log = inst.logfile.read_bytes()[log_before:].decode(errors="replace")
        failures = log.count("accept failed")
        # Paused for 200 ms at a time: a few lines per second, not a flood.
        assert 1 <= failures <= 30, failures
        # The client that was already connected is served all along.
        assert held.execute("SELECT 2").fetchone()[0] == 2
    finally:
        for s in socks:
            s.close()
    subprocess.run(["prlimit", "--pid", str(wpid), "--nofile=%s:" % soft], check=True)
    # Descriptors free again: new clients get in.
    def fresh_ok():
        try:
            c = inst.connect()
        except Exception:
            return False
        ok = c.execute("SELECT 3").fetchone()[0] == 3
        c.close()
        return ok
    wait_until(fresh_ok, timeout=10)
    held.close()
