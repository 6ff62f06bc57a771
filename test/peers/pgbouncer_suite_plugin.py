# SPDX-License-Identifier: MIT
"""pytest plugin for test/peers/pgbouncer_suite.py (loaded with -p).

PgBouncer's harness stops the pooler of a test in the fixture's cleanup,
which never runs when the pooler did not come up (the fixture raises before
it yields): the process stays, with its port and Unix socket, to the end of
the session. Against a pooler that cannot read the test's ini that is every
test, and hundreds of sanitizer-built processes would pile up. So after each
test's teardown this kills what is left of the processes started for that
test: those whose command line names a file below this worker's pytest
temporary directory (the test's ini or the pooler started on it), except
the session's PostgreSQL (its data directory is there too). It changes no
verdict: it runs after the test and its fixtures are done.
"""
import os
import signal

import pytest


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    try:
        base = str(item.config._tmp_path_factory.getbasetemp())
    except Exception:
        return
    me = os.getpid()
    uid = os.getuid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            if os.stat("/proc/" + d).st_uid != uid:
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not any(a.startswith(base + "/") for a in argv):
            continue
        if any("pgdata" in a for a in argv):       # the session's PostgreSQL
            continue
        try:
            os.kill(int(d), signal.SIGKILL)
            print("pgbouncer_suite_plugin: killed pid %s left by %s: %s" % (d, item.nodeid, " ".join(argv)[:200]))
        except OSError:
            pass
