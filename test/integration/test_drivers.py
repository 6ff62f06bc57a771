# SPDX-License-Identifier: MIT
"""Other languages' drivers through pgcat (SPEC §3, §5): node-postgres and
postgres.js, pgx and pgxpool, pgjdbc — named prepared statements, pipelined
batches, transactions and errors, in transaction mode with more clients than
server connections (pool_size 3).

The programs are under test/drivers/. They need Node.js, Go and a JDK plus
packages from npm, the Go module proxy and Maven Central; scripts/test.sh and
scripts/test-drivers.sh fetch and build them (setup_drivers in
scripts/lib.sh) and set PGCAT_DRIVERS_DIR. Without it these tests skip,
except under CI=true, where a missing driver build is a failure."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import PASSWORDS, assert_pool_idle, wait_until

DRIVERS = os.environ.get("PGCAT_DRIVERS_DIR")
IN_CI = os.environ.get("CI", "").lower() == "true"
pytestmark = pytest.mark.skipif(not DRIVERS and not IN_CI,
                                reason="driver programs not built: run scripts/test-drivers.sh")


@pytest.fixture(autouse=True)
def _drivers_built():
    if not DRIVERS:
        pytest.fail("CI=true but PGCAT_DRIVERS_DIR is not set: the driver programs were not built "
                    "(scripts/test.sh builds them with setup_drivers in scripts/lib.sh)", pytrace=False)


@pytest.fixture
def small_pool(pgcat):
    return pgcat(pool={"pool_mode": "transaction"}, users={"app": {"pool_size": 3}})


def run(cmd, env=None, timeout=180):
    r = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, "%s exited with %d:\n%s" % (cmd[0], r.returncode, out[-4000:])
    return r.stdout


def test_node_postgres_and_postgres_js(small_pool, pg):
    out = run(["node", str(Path(DRIVERS) / "node" / "drivers.js")],
              env={"PGHOST": "127.0.0.1", "PGPORT": str(small_pool.port), "PGUSER": "app",
                   "PGPASSWORD": PASSWORDS["app"], "PGDATABASE": "appdb"})
    # 8 node-postgres clients and 8 postgres.js clients, 200 rounds each
    assert out.split() == ["ok", "3200"], out
    assert_pool_idle(pg, max_conns=3)


def test_postgres_js_pipelined(small_pool, pg):
    """Issue 20, item 2: postgres.js with prepare: true, 10 connections with
    25 queries in flight on each (a new statement goes as Parse, Describe,
    Flush while others queue behind it) and transactions among them,
    through 3 server connections: every answer right, none lost."""
    out = run(["node", str(Path(DRIVERS) / "node" / "pipelined.js")],
              env={"PGHOST": "127.0.0.1", "PGPORT": str(small_pool.port), "PGUSER": "app",
                   "PGPASSWORD": PASSWORDS["app"], "PGDATABASE": "appdb"}, timeout=120)
    assert out.split() == ["ok", "1000"], out
    assert_pool_idle(pg, max_conns=3)


def test_node_listen_notify(small_pool, pg):
    """SPEC §11: 8 node-postgres clients (client.on('notification')),
    postgres.js's sql.listen() and a notifier that listens too, 10
    connections on a pool of 3 in transaction mode, 200 notifications (some
    sent in transactions, some listeners in transactions meanwhile): each
    listener gets each once, in order, with the notifier's processID."""
    out = run(["node", str(Path(DRIVERS) / "node" / "notify.js")],
              env={"PGHOST": "127.0.0.1", "PGPORT": str(small_pool.port), "PGUSER": "app",
                   "PGPASSWORD": PASSWORDS["app"], "PGDATABASE": "appdb"}, timeout=120)
    assert out.split() == ["ok", str(200 * 10)], out
    assert_pool_idle(pg, max_conns=3)


def test_node_postgres_connect_then_end(small_pool, pg):
    """Issue 40, item 7: node-postgres's connect() then end() at once sends
    Terminate before its startup packet. PostgreSQL closes without a word;
    an ErrorResponse would be an unhandled rejection that ends the process
    (the program catches nothing). A normal client works afterwards."""
    out = run(["node", str(Path(DRIVERS) / "node" / "connect_end.js")],
              env={"PGHOST": "127.0.0.1", "PGPORT": str(small_pool.port), "PGUSER": "app",
                   "PGPASSWORD": PASSWORDS["app"], "PGDATABASE": "appdb"}, timeout=60)
    assert out.split() == ["ok", "42"], out
    assert_pool_idle(pg, max_conns=3)


@pytest.mark.parametrize("protocol", ["3.0", "3.2"])
def test_pgx(small_pool, pg, protocol):
    url = "postgres://app:%s@127.0.0.1:%d/appdb?max_protocol_version=%s" % (
        PASSWORDS["app"], small_pool.port, protocol)
    out = run([str(Path(DRIVERS) / "go" / "drivers"), url])
    assert out.strip() == "ok", out
    assert_pool_idle(pg, max_conns=3)


@pytest.mark.parametrize("protocol", ["3.0", "3.2"])
def test_pgx_seams(pgcat, pg, protocol):
    """Issue 28 with pgx on a pool of ONE server: context-cancelled sleeps
    never cancel another client's query, pgxpool's replacement connections
    get fresh pids, 'select 4, Sync, select 5, Flush' is answered whole, a
    statement prepared before a column was dropped gets PostgreSQL's 0A000
    and works once prepared again (test/drivers/go/seams.go)."""
    inst = pgcat(pool={"pool_mode": "transaction"}, users={"app": {"pool_size": 1}})
    url = "postgres://app:%s@127.0.0.1:%d/appdb?max_protocol_version=%s" % (PASSWORDS["app"], inst.port, protocol)
    out = run([str(Path(DRIVERS) / "go" / "drivers"), url, "seams"], timeout=240)
    assert out.strip() == "ok", out
    wait_until(lambda: not [r for r in pg.backends("app", "appdb") if r[3] == "active"], 10,
               msg="no query left running (a context-cancelled sleep survived)")
    assert_pool_idle(pg, max_conns=1)


@pytest.mark.parametrize("protocol", ["3.0", "3.2"])
def test_pgjdbc(small_pool, pg, protocol):
    with pg.connect("appdb") as c:
        c.execute("DROP TABLE IF EXISTS pgcat_drivers_jdbc")
        c.execute("CREATE TABLE pgcat_drivers_jdbc (worker int, k int)")
        c.execute("GRANT ALL ON pgcat_drivers_jdbc TO app")
    try:
        url = "jdbc:postgresql://127.0.0.1:%d/appdb?prepareThreshold=1&user=app&password=%s&protocolVersion=%s" % (
            small_pool.port, PASSWORDS["app"], protocol)
        java = Path(DRIVERS) / "java"
        out = run(["java", "-cp", "%s:%s" % (java / "postgresql.jar", java), "Drivers", url])
        assert out.split() == ["ok", "2400"], out     # 8 threads x 300
        with pg.connect("appdb") as c:
            rows = c.execute("SELECT worker, count(*) FROM pgcat_drivers_jdbc GROUP BY worker ORDER BY 1").fetchall()
        assert rows == [(w, 10) for w in range(8)]
    finally:
        with pg.connect("appdb") as c:
            c.execute("DROP TABLE IF EXISTS pgcat_drivers_jdbc")
    assert_pool_idle(pg, max_conns=3)
