# SPDX-License-Identifier: MIT
"""Logs (SPEC §8): one line per event with a timestamp and a level,
connection and disconnection lines naming the client's address (switchable),
log_file, and never a password."""
import os
import re
import signal

import psycopg
import pytest

from conftest import PASSWORDS, port_open, proc_children, wait_until

TS = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}")
LEVEL = re.compile(r"\b(ERROR|WARNING|WARN|INFO|LOG|DEBUG|TRACE|error|warning|info|debug|trace)\b")


def new_lines(p, start):
    return p.log()[start:].splitlines()


def test_connection_lines_and_no_passwords(pgcat):
    p = pgcat(general={"log_connections": True, "log_disconnections": True})
    start = len(p.log())
    with p.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    with pytest.raises(psycopg.OperationalError):
        p.connect(password="WrongSecret_9f3a")
    with pytest.raises(psycopg.OperationalError):
        p.connect(user="nobody_here", password="AnotherSecret_77")
    wait_until(lambda: len(new_lines(p, start)) >= 2, 5, msg="log lines for the connections")
    lines = new_lines(p, start)
    text = "\n".join(lines)
    for secret in (PASSWORDS["app"], "WrongSecret_9f3a", "AnotherSecret_77", "admin_pw"):
        assert secret not in p.log(), "a password appears in pgcat's log"
    assert any("127.0.0.1" in l for l in lines), "no log line names the client address:\n" + text
    assert any("app" in l for l in lines), "no log line names the user:\n" + text
    for l in lines:
        if l.strip():
            assert TS.search(l), "log line without a timestamp: %r" % l
            assert LEVEL.search(l), "log line without a level: %r" % l
    assert any("nobody_here" in l for l in lines), "failed login not logged:\n" + text


def test_log_connections_off(pgcat):
    p = pgcat(general={"log_connections": False, "log_disconnections": False})
    start = len(p.log())
    for _ in range(3):
        with p.connect() as c:
            c.execute("SELECT 1")
    # Compare with the same activity when the switches are on.
    q = pgcat(general={"log_connections": True, "log_disconnections": True})
    qstart = len(q.log())
    for _ in range(3):
        with q.connect() as c:
            c.execute("SELECT 1")
    wait_until(lambda: len(new_lines(q, qstart)) >= 3, 5)
    assert len(new_lines(p, start)) < len(new_lines(q, qstart))


def test_log_file(pgcat, tmp_path):
    path = tmp_path / "pgcat-file.log"
    p = pgcat(general={"log_file": str(path)})
    with p.connect() as c:
        c.execute("SELECT 1")
    wait_until(lambda: path.exists() and path.read_text().strip(), 5, msg="log lines in log_file")
    assert PASSWORDS["app"] not in path.read_text()


def test_log_level_error_is_quiet(pgcat):
    p = pgcat(general={"log_level": "error"})
    start = len(p.log())
    for _ in range(3):
        with p.connect() as c:
            c.execute("SELECT 1")
    lines = [l for l in new_lines(p, start) if l.strip()]
    assert not [l for l in lines if re.search(r"\b(INFO|info|LOG)\b", l)], lines


def test_log_file_reopened_on_sighup(pgcat, tmp_path):
    """logrotate without copytruncate: the file is renamed, SIGHUP, and both
    the worker and the supervisor (which logs worker deaths) write to a new
    file at the old path."""
    path = tmp_path / "pgcat.log"
    p = pgcat(general={"log_file": str(path), "log_level": "info"})
    wait_until(lambda: path.exists() and path.read_text().strip(), 5, msg="log lines in log_file")
    rotated = tmp_path / "pgcat.log.1"
    path.rename(rotated)
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: path.exists() and "reloading" in path.read_text(), 10,
               msg="the worker's SIGHUP line in the new log file")
    workers = proc_children(p.pid)
    assert workers, "no worker process under the supervisor"
    os.kill(workers[0], signal.SIGKILL)
    wait_until(lambda: "restarted" in path.read_text(), 15,
               msg="the supervisor's worker-restart line in the new log file")
    assert "restarted" not in rotated.read_text()
    wait_until(lambda: port_open(p.host, p.port), 15, msg="the restarted worker listening")

    def works():
        try:
            with p.connect() as c:
                return c.execute("SELECT 1").fetchone()[0] == 1
        except psycopg.OperationalError:
            return False      # the new worker may not be listening yet
    wait_until(works, 15, msg="pgcat serving again after the worker restart")
