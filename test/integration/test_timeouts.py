# SPDX-License-Identifier: MIT
"""Timeouts of SPEC §2/§3: query_wait_timeout, idle_timeout, server_lifetime,
client_idle_timeout, idle_transaction_timeout, connect_timeout."""
import socket
import threading
import time

import psycopg
import pytest

from conftest import PASSWORDS, assert_pool_idle, assert_works, wait_until


def test_query_wait_timeout(pgcat, pg):
    p = pgcat(general={"default_pool_size": 1, "query_wait_timeout": 1000})
    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")                  # the only server, in a transaction
    waiter = p.connect()
    t0 = time.monotonic()
    with pytest.raises(psycopg.Error) as ei:
        waiter.execute("SELECT 2")
    took = time.monotonic() - t0
    e = ei.value
    assert e.sqlstate == "08P01", "got %r: %s" % (e.sqlstate, e)
    assert "query_wait_timeout" in str(e)
    assert e.diag.severity == "ERROR", "the waiting client must stay connected"
    assert 0.8 <= took < 5, "query_wait_timeout 1s fired after %.1fs" % took
    assert not waiter.closed
    holder.commit()
    assert waiter.execute("SELECT 3").fetchone()[0] == 3, "client unusable after query_wait_timeout"
    holder.close()
    waiter.close()
    assert_pool_idle(pg, max_conns=1)


def test_query_wait_timeout_in_explicit_transaction(pgcat, pg):
    p = pgcat(general={"default_pool_size": 1, "query_wait_timeout": 800})
    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")
    waiter = p.connect(autocommit=False)
    with pytest.raises(psycopg.Error) as ei:
        waiter.execute("SELECT 2")               # BEGIN + SELECT 2: waits for a server
    assert ei.value.sqlstate == "08P01"
    waiter.rollback()
    holder.commit()
    assert waiter.execute("SELECT 4").fetchone()[0] == 4
    waiter.commit()
    holder.close()
    waiter.close()


def test_idle_timeout_closes_idle_servers(pgcat, pg):
    p = pgcat(general={"idle_timeout": 1000, "default_pool_size": 3})
    conns = [p.connect(autocommit=False) for _ in range(3)]
    for c in conns:
        c.execute("SELECT 1")                    # three servers in use at once
    for c in conns:
        c.commit()
    assert pg.count("app", "appdb") == 3
    wait_until(lambda: pg.count("app", "appdb") == 0, 10,
               msg="idle servers to be closed after idle_timeout")
    for c in conns:                              # clients still connected and working
        assert c.execute("SELECT 1").fetchone()[0] == 1
        c.commit()
        c.close()


def test_idle_timeout_keeps_min_pool_size(pgcat, pg):
    p = pgcat(general={"idle_timeout": 500, "default_pool_size": 4},
              users={"app": {"min_pool_size": 1}})
    conns = [p.connect(autocommit=False) for _ in range(4)]
    for c in conns:
        c.execute("SELECT 1")
    for c in conns:
        c.commit()
        c.close()
    wait_until(lambda: pg.count("app", "appdb") == 1, 10)
    time.sleep(1.5)
    assert pg.count("app", "appdb") == 1


def test_server_lifetime(pgcat, pg):
    p = pgcat(general={"server_lifetime": 1000, "default_pool_size": 1})
    c = p.connect()
    first = c.execute("SELECT pg_backend_pid()").fetchone()[0]

    def replaced():
        return c.execute("SELECT pg_backend_pid()").fetchone()[0] != first
    wait_until(replaced, 10, interval=0.2, msg="a server older than server_lifetime to be replaced")
    wait_until(lambda: first not in [b[0] for b in pg.backends("app", "appdb")], 10,
               msg="the old server connection to be closed")
    c.close()


def test_server_lifetime_does_not_cut_a_transaction(pgcat, pg):
    p = pgcat(general={"server_lifetime": 500, "default_pool_size": 1})
    c = p.connect(autocommit=False)
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    for _ in range(10):
        time.sleep(0.15)
        assert c.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
    c.commit()
    c.close()


def test_client_idle_timeout(pgcat, pg):
    p = pgcat(general={"client_idle_timeout": 1000})
    c = p.connect()
    c.execute("SELECT 1")
    r = p.raw_login()
    t0 = time.monotonic()
    assert r.wait_closed(10), "an idle client was not disconnected"
    assert 0.8 <= time.monotonic() - t0 < 6
    r.close()
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 1")
    c.close()
    # A busy client is not idle: queries spaced below the timeout keep it alive.
    busy = p.connect()
    for _ in range(6):
        busy.execute("SELECT 1")
        time.sleep(0.4)
    busy.close()
    assert_pool_idle(pg)


def test_idle_transaction_timeout(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"idle_transaction_timeout": 1000, "default_pool_size": 1})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    wait_until(lambda: c.closed or c.broken or
               pg.count("app", "appdb", state="idle in transaction") == 0, 10,
               msg="the idle transaction to be ended")
    with pytest.raises(psycopg.Error):
        c.execute("SELECT 1")
    assert c.closed or c.broken, "the client was not disconnected"
    c.close()
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0
    assert_pool_idle(pg, max_conns=1)          # server rolled back and kept
    assert_works(p)
    # A client idle outside a transaction is not affected.
    c2 = p.connect()
    c2.execute("SELECT 1")
    time.sleep(1.5)
    assert c2.execute("SELECT 2").fetchone()[0] == 2
    c2.close()


class Blackhole:
    """Accepts TCP connections and never answers (a server that hangs)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.held.append(c)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.t.join(5)
        for c in self.held:
            c.close()
        self.sock.close()


def test_connect_timeout_to_a_hanging_server(pgcat, pg):
    bh = Blackhole()
    try:
        p = pgcat(general={"connect_timeout": 1000, "query_wait_timeout": 5000}, pools={
            "hangdb": {"shards": {0: {"database": "appdb",
                                      "servers": "127.0.0.1:%d:primary" % bh.port}},
                       "users": {"app": {"password": PASSWORDS["app"]}}}})
        t0 = time.monotonic()
        with pytest.raises(psycopg.Error):
            with p.connect(dbname="hangdb", connect_timeout=30) as c:
                c.execute("SELECT 1")
        took = time.monotonic() - t0
        assert took < 10, "client waited %.1fs with connect_timeout 1s" % took
        assert bh.held, "pgcat never connected to the server"
        assert_works(p)
    finally:
        bh.close()


# ---- query_timeout and transaction_timeout (pgcat ends them, the server stays)

def backend_pid(c):
    return c.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_query_timeout_cancels_and_keeps_the_server(pgcat, pg):
    p = pgcat(general={"query_timeout": 500, "default_pool_size": 1})
    c = p.connect()
    pid = backend_pid(c)
    t0 = time.monotonic()
    with pytest.raises(psycopg.Error) as ei:
        c.execute("SELECT pg_sleep(10)")
    took = time.monotonic() - t0
    assert ei.value.sqlstate == "57014", "got %r: %s" % (ei.value.sqlstate, ei.value)
    assert 0.4 <= took < 3, "query_timeout 0.5s fired after %.1fs" % took
    assert backend_pid(c) == pid, "the server was not kept"
    # A query shorter than the limit runs; so does a transaction longer than it.
    c.autocommit = False
    c.execute("SELECT pg_sleep(0.2)")
    c.execute("SELECT pg_sleep(0.2)")
    c.execute("SELECT pg_sleep(0.2)")
    c.commit()
    c.close()
    assert_pool_idle(pg, max_conns=1)
    log = p.log()
    assert "query_timeout (500 ms): cancelling" in log


def test_transaction_timeout_idle_in_transaction(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"transaction_timeout": 600, "default_pool_size": 1})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    pid = backend_pid(c)
    # pgcat ends the transaction on the server: rolled back, the server idle again
    wait_until(lambda: pg.sql("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)) == [("idle",)], 10,
               msg="the server's transaction to be rolled back")
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0
    # the client learns it with its next statement, and stays connected
    with pytest.raises(psycopg.Error) as ei:
        c.execute("SELECT 1")
    assert ei.value.sqlstate == "25P04", "got %r: %s" % (ei.value.sqlstate, ei.value)
    assert ei.value.diag.severity == "ERROR"
    assert "transaction_timeout" in str(ei.value)
    assert not c.closed
    c.rollback()
    assert backend_pid(c) == pid, "the server was not kept"
    c.commit()
    c.close()
    assert_pool_idle(pg, max_conns=1)


def test_transaction_timeout_running_query(pgcat, pg):
    p = pgcat(general={"transaction_timeout": 800, "default_pool_size": 1})
    c = p.connect(autocommit=False)
    pid = backend_pid(c)
    t0 = time.monotonic()
    with pytest.raises(psycopg.Error) as ei:
        c.execute("SELECT pg_sleep(10)")
    took = time.monotonic() - t0
    assert ei.value.sqlstate == "25P04", "got %r: %s" % (ei.value.sqlstate, ei.value)
    assert 0.7 <= took < 3, "transaction_timeout 0.8s fired after %.1fs" % took
    c.rollback()                                  # answered by pgcat
    assert backend_pid(c) == pid, "the server was not kept"
    c.commit()
    c.close()
    wait_until(lambda: pg.sql("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)) == [("idle",)], 10)


def test_transaction_timeout_per_user_and_autocommit(pgcat, pg):
    # The user's own value wins over [general]'s: 0 turns it off.
    p = pgcat(general={"transaction_timeout": 300}, users={"app": {"transaction_timeout": 0}})
    c = p.connect(autocommit=False)
    c.execute("SELECT 1")
    time.sleep(0.8)
    assert c.execute("SELECT 2").fetchone()[0] == 2
    c.commit()
    c.close()
    # Outside a transaction an idle client is not timed.
    p2 = pgcat(general={"transaction_timeout": 300})
    c2 = p2.connect()
    c2.execute("SELECT 1")
    time.sleep(0.8)
    assert c2.execute("SELECT 3").fetchone()[0] == 3
    c2.close()


def test_transaction_timeout_session_mode_ends_the_connection(pgcat, pg):
    p = pgcat(general={"transaction_timeout": 500, "pool_mode": "session", "default_pool_size": 1})
    c = p.connect(autocommit=False)
    pid = backend_pid(c)
    wait_until(lambda: c.closed or c.broken or
               pg.sql("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)) == [("idle",)], 10,
               msg="the session's transaction to be ended")
    with pytest.raises(psycopg.Error):
        c.execute("SELECT 1")
    assert c.closed or c.broken, "the client was not disconnected"
    c.close()
    assert "transaction_timeout (500 ms)" in p.log()
    # the server was cleaned and kept for the next session
    c2 = p.connect()
    assert backend_pid(c2) == pid
    c2.close()


# timeout_action = disconnect: PgBouncer's timeouts (a pgbouncer.ini has it).

def gone(pg, pid):
    return pg.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))[0][0] == 0


def test_timeout_action_disconnect_query_timeout(pgcat, pg):
    p = pgcat(general={"query_timeout": 500, "timeout_action": "disconnect", "default_pool_size": 1})
    c = p.connect()
    pid = backend_pid(c)
    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError) as ei:
        c.execute("SELECT pg_sleep(10)")
    took = time.monotonic() - t0
    assert ei.value.sqlstate == "08P01", "got %r: %s" % (ei.value.sqlstate, ei.value)
    assert "query timeout" in str(ei.value)
    assert ei.value.diag.severity == "FATAL"
    assert 0.4 <= took < 3, "query_timeout 0.5s fired after %.1fs" % took
    assert c.closed or c.broken, "the client was not disconnected"
    wait_until(lambda: gone(pg, pid), 10, msg="the server to be closed")
    assert "closing because: query timeout" in p.log()
    # The pool serves the next client on a new server.
    c2 = p.connect()
    assert backend_pid(c2) != pid
    c2.close()


def test_timeout_action_disconnect_transaction_timeout(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"transaction_timeout": 600, "timeout_action": "disconnect", "default_pool_size": 1})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    pid = backend_pid(c)
    wait_until(lambda: gone(pg, pid), 10, msg="the server to be closed")
    with pytest.raises(psycopg.OperationalError) as ei:
        c.execute("SELECT 1")
    assert "transaction timeout" in str(ei.value), str(ei.value)
    assert c.closed or c.broken
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0, "the transaction's insert was committed"
    assert "closing because: transaction timeout" in p.log()
    assert_works(p)


def test_timeout_action_disconnect_idle_transaction_timeout(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"idle_transaction_timeout": 500, "timeout_action": "disconnect", "default_pool_size": 1})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    time.sleep(1.2)
    with pytest.raises(psycopg.OperationalError) as ei:
        c.execute("SELECT 1")
    assert "idle transaction timeout" in str(ei.value), str(ei.value)
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0, "the transaction's insert was committed"
    assert "closing because: idle transaction timeout" in p.log()
    assert_works(p)
