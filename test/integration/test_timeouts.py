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
