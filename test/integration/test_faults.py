# SPDX-License-Identifier: MIT
"""Faults (SPEC §3): a client that vanishes mid-transaction or mid-query (its
server is cancelled, rolled back and returned to the pool, not closed); a
server lost mid-transaction (transaction mode: ERROR, the client goes on;
session mode: the client is disconnected); a server killed while idle in
the pool is replaced without the next client noticing."""
import os
import subprocess
import time

import psycopg
import pytest

from conftest import PASSWORDS, PG_BIN, assert_pool_idle, assert_works, wait_until


def app_backends(pg):
    return pg.backends("app", "appdb")


def spawn_psql(p, script):
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    proc = subprocess.Popen([str(PG_BIN / "psql"), "-X", "-q", "-h", p.host, "-p", str(p.port),
                             "-U", "app", "-d", "appdb"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write(script)
    proc.stdin.flush()
    return proc


@pytest.mark.parametrize("how", ["kill_psql", "raw_socket"])
def test_client_vanishes_mid_transaction(pgcat, pg, table, how):
    t = table("id int")
    p = pgcat(general={"default_pool_size": 1})
    assert_works(p)
    pid_before = app_backends(pg)[0][0]
    if how == "kill_psql":
        proc = spawn_psql(p, "BEGIN;\nINSERT INTO %s VALUES (1);\n" % t)
    else:
        r = p.raw_login()
        r.simple("BEGIN")
        r.simple("INSERT INTO %s VALUES (1)" % t)
    wait_until(lambda: [b for b in app_backends(pg) if b[3] == "idle in transaction"], 10,
               msg="the client's transaction to be open on the server")
    if how == "kill_psql":
        proc.kill()
        proc.wait()
    else:
        r.close()
    # The server connection is rolled back and returned, not closed.
    wait_until(lambda: [(b[0], b[3]) for b in app_backends(pg)] == [(pid_before, "idle")], 10,
               msg="server %d back to idle (got %r)" % (pid_before, app_backends(pg)))
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0, "the vanished client's insert was committed"
    with p.connect() as c:
        assert c.execute("SELECT pg_backend_pid()").fetchone()[0] == pid_before
        assert c.execute("SELECT 1").fetchone()[0] == 1


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_client_vanishes_mid_query(pgcat, pg, mode):
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 1})
    assert_works(p)
    pid_before = app_backends(pg)[0][0]
    proc = spawn_psql(p, "SELECT pg_sleep(60);\n")
    wait_until(lambda: [b for b in app_backends(pg) if b[3] == "active"], 10,
               msg="pg_sleep running")
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    # Cancelled, not left sleeping for a minute; and kept, not closed.
    wait_until(lambda: [(b[0], b[3]) for b in app_backends(pg)] == [(pid_before, "idle")], 10,
               msg="server back to idle after its client vanished mid-query")
    assert time.monotonic() - t0 < 10
    assert_works(p)


def test_client_vanishes_mid_transaction_session_mode_resets(pgcat, pg):
    p = pgcat(general={"pool_mode": "session", "default_pool_size": 1})
    r = p.raw_login()
    r.simple("SET work_mem = '5MB'")
    r.simple("BEGIN")
    r.simple("CREATE TEMP TABLE vanished_tmp (a int)")
    pid = int(r.simple("SELECT pg_backend_pid()")[0][0][0])
    r.close()
    wait_until(lambda: [(b[0], b[3]) for b in app_backends(pg)] == [(pid, "idle")], 10)
    with p.connect() as c:
        assert c.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
        assert c.execute("SHOW work_mem").fetchone()[0] != "5MB"
        assert c.execute("SELECT to_regclass('pg_temp.vanished_tmp')").fetchone()[0] is None


def test_server_lost_mid_transaction_transaction_mode(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"default_pool_size": 2})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    assert pg.terminate(pid)
    wait_until(lambda: pid not in [b[0] for b in app_backends(pg)], 10)
    with pytest.raises(psycopg.Error) as ei:
        c.execute("SELECT 1")
    e = ei.value
    assert e.sqlstate in ("57P01", "08006"), "got %r (%s)" % (e.sqlstate, e)
    assert e.diag.severity == "ERROR", "severity %r: the client must not be disconnected" % e.diag.severity
    assert not c.closed
    assert c.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    c.rollback()                  # pgcat answers the ROLLBACK itself
    assert c.execute("SELECT 1").fetchone()[0] == 1   # next transaction, another server
    c.execute("INSERT INTO %s VALUES (2)" % t)
    c.commit()
    c.close()
    assert pg.sql("SELECT array_agg(id) FROM %s" % t)[0][0] == [2]
    assert_pool_idle(pg, max_conns=2)


def test_server_lost_mid_query_transaction_mode(pgcat, pg):
    p = pgcat()
    c = p.connect()
    import threading
    box = {}

    def run():
        try:
            c.execute("SELECT pg_sleep(30)")
        except psycopg.Error as e:
            box["e"] = e
    th = threading.Thread(target=run)
    th.start()
    wait_until(lambda: [b for b in app_backends(pg) if b[3] == "active"], 10)
    pg.terminate([b for b in app_backends(pg) if b[3] == "active"][0][0])
    th.join(10)
    assert "e" in box, "no error for a query whose server was killed"
    assert box["e"].sqlstate in ("57P01", "08006"), box["e"]
    assert box["e"].diag.severity == "ERROR"
    assert not c.closed
    assert c.execute("SELECT 5").fetchone()[0] == 5
    c.close()


def test_server_lost_session_mode_disconnects_client(pgcat, pg):
    p = pgcat(general={"pool_mode": "session"})
    c = p.connect()
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    assert pg.terminate(pid)
    wait_until(lambda: pid not in [b[0] for b in app_backends(pg)], 10)
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 1")
    assert c.closed or c.broken
    assert_works(p)                # a new session works
    assert_pool_idle(pg)


def test_idle_server_killed_is_replaced(pgcat, pg):
    """The server a client used is killed while the client is idle (not in a
    transaction): its next query simply runs on another connection."""
    p = pgcat(general={"default_pool_size": 2})
    c = p.connect()
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    for b in app_backends(pg):
        pg.terminate(b[0])
    wait_until(lambda: pid not in [b[0] for b in app_backends(pg)], 10)
    for _ in range(3):
        assert c.execute("SELECT 1").fetchone()[0] == 1
    assert c.execute("SELECT pg_backend_pid()").fetchone()[0] != pid
    c.close()


def test_postgres_restart_is_survived(pgcat, pg):
    """All server connections die at once (as in a restart): clients reconnect
    through pgcat without restarting it."""
    p = pgcat(general={"default_pool_size": 3})
    conns = [p.connect() for _ in range(3)]
    for c in conns:
        c.execute("SELECT 1")
    pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'",
           dbname="postgres")
    wait_until(lambda: not app_backends(pg), 10)
    for c in conns:
        assert c.execute("SELECT 2").fetchone()[0] == 2
        c.close()
    assert_works(p)
