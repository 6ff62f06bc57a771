# SPDX-License-Identifier: MIT
"""Query cancellation (SPEC §3.4) in both pool modes: psycopg's cancel (plain
CancelRequest, and libpq 17+'s SSLRequest-then-CancelRequest), asyncpg's
timeout, psql's Ctrl-C; a cancel never reaches another client's query;
unknown keys are ignored silently."""
import asyncio
import os
import signal
import socket
import subprocess
import threading
import time

import psycopg
import pytest
from psycopg import errors

import pgwire
from conftest import PASSWORDS, PG_BIN, assert_pool_idle, assert_works, wait_until

MODES = ["transaction", "session"]


def sleeping_backend(pg, pattern="pg_sleep(30)"):
    rows = [r for r in pg.backends("app", "appdb") if r[3] == "active" and pattern in (r[4] or "")]
    return rows[0][0] if rows else None


def run_in_thread(fn):
    box = {}

    def wrap():
        t0 = time.monotonic()
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
        box["elapsed"] = time.monotonic() - t0
    t = threading.Thread(target=wrap, daemon=True)
    t.start()
    return t, box


@pytest.mark.parametrize("mode", MODES)
def test_psycopg_cancel(pgcat, pg, mode):
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 2})
    c = p.connect()
    t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(30)"))
    wait_until(lambda: sleeping_backend(pg), 10, msg="pg_sleep running on the server")
    c.cancel()
    t.join(10)
    assert not t.is_alive(), "the query was not cancelled"
    assert isinstance(box.get("error"), errors.QueryCanceled), box
    assert box["error"].sqlstate == "57014"
    assert "canceling statement due to user request" in str(box["error"])
    assert c.execute("SELECT 1").fetchone()[0] == 1, "connection unusable after cancel"
    c.close()
    assert_pool_idle(pg)


@pytest.mark.parametrize("mode", MODES)
def test_libpq17_cancel_with_ssl_request_first(pgcat, pg, mode):
    """libpq 17+ with sslmode=prefer opens the cancel connection with an
    SSLRequest; pgcat answers 'N' and then takes the CancelRequest."""
    # a failure, not a skip: requirements-test.txt pins a psycopg whose libpq is 17+
    assert psycopg.pq.version() >= 170000, "libpq %d: needs 17 (cancel_safe)" % psycopg.pq.version()
    p = pgcat(general={"pool_mode": mode})
    c = p.connect(sslmode="prefer")
    t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(30)"))
    wait_until(lambda: sleeping_backend(pg), 10, msg="pg_sleep running on the server")
    c.cancel_safe(timeout=10)
    t.join(10)
    assert not t.is_alive(), "the query was not cancelled"
    assert isinstance(box.get("error"), errors.QueryCanceled), box
    assert c.execute("SELECT 2").fetchone()[0] == 2
    c.close()


@pytest.mark.parametrize("mode", MODES)
def test_asyncpg_timeout_cancels(pgcat, pg, mode):
    p = pgcat(general={"pool_mode": mode})

    async def go():
        c = await p.asyncpg()
        try:
            with pytest.raises(asyncio.TimeoutError):
                await c.fetchval("SELECT pg_sleep(30)", timeout=1)
            # asyncpg sent a CancelRequest and waited for the query to end.
            return await c.fetchval("SELECT 3", timeout=10)
        finally:
            await c.close()
    t0 = time.monotonic()
    assert asyncio.run(go()) == 3
    assert time.monotonic() - t0 < 15
    assert sleeping_backend(pg) is None
    assert_pool_idle(pg)


@pytest.mark.parametrize("mode", MODES)
def test_psql_ctrl_c(pgcat, pg, mode):
    p = pgcat(general={"pool_mode": mode})
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    proc = subprocess.Popen([str(PG_BIN / "psql"), "-X", "-h", p.host, "-p", str(p.port),
                             "-U", "app", "-d", "appdb", "-c", "SELECT pg_sleep(30)"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: sleeping_backend(pg), 10, msg="pg_sleep running on the server")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "canceling statement due to user request" in err
    assert_pool_idle(pg)


def test_cancel_never_hits_another_clients_query(pgcat, pg):
    """Transaction mode, one server. A runs a query and goes idle; B then runs a
    long query on that same server. A's cancel (A has nothing running) must be
    dropped, not cancel B's query."""
    p = pgcat(general={"default_pool_size": 1})
    a = p.connect()
    b = p.connect()
    pid_a = a.execute("SELECT pg_backend_pid()").fetchone()[0]
    t, box = run_in_thread(lambda: b.execute("SELECT pg_sleep(2), pg_backend_pid()").fetchone())
    wait_until(lambda: sleeping_backend(pg, "pg_sleep(2)"), 10, msg="B's query running")
    a.cancel()
    a.cancel()
    t.join(15)
    assert "error" not in box, "B's query was cancelled by A's key: %r" % box.get("error")
    assert box["result"][1] == pid_a, "B should have run on the one server A used before"
    assert a.execute("SELECT 1").fetchone()[0] == 1
    a.close()
    b.close()


def test_cancel_of_a_waiting_client(pgcat, pg):
    """A client waiting for a server (pool busy) can be cancelled too; the
    holder's transaction is not touched."""
    p = pgcat(general={"default_pool_size": 1})
    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")
    waiter = p.connect()
    t, box = run_in_thread(lambda: waiter.execute("SELECT 'never ran'"))
    time.sleep(0.5)
    assert t.is_alive(), "the waiter got a server that is in another client's transaction"
    waiter.cancel()
    t.join(10)
    assert not t.is_alive(), "cancelling a waiting client had no effect"
    assert "error" in box, "the waiter's query ran although it was cancelled: %r" % box
    holder.execute("SELECT 2")
    holder.commit()
    assert waiter.execute("SELECT 3").fetchone()[0] == 3
    holder.close()
    waiter.close()


def test_unknown_cancel_key_is_ignored(pgcat, pg):
    p = pgcat()
    c = p.connect()
    t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(1.5)").fetchone())
    wait_until(lambda: sleeping_backend(pg, "pg_sleep(1.5)"), 10)
    r = p.raw()
    r.send(pgwire.cancel_request(12345, 67890))
    assert r.read_bytes(1, timeout=5) == b"", "pgcat answered an unknown cancel key"
    r.close()
    # and the real pid of the server with a made-up secret does nothing either
    r = p.raw()
    r.send(pgwire.cancel_request(sleeping_backend(pg, "pg_sleep(1.5)") or 1, 1))
    r.read_bytes(1, timeout=5)
    r.close()
    t.join(10)
    assert "error" not in box, box
    c.close()
    assert_works(p)


def test_cancel_request_after_ssl_request_raw(pgcat, pg):
    p = pgcat()
    r = p.raw_login()
    pid, key = r.backend_key
    r.send(pgwire.query("SELECT pg_sleep(30)"))
    wait_until(lambda: sleeping_backend(pg), 10)
    cr = p.raw()
    cr.send(pgwire.ssl_request())
    assert cr.read_bytes(1) == b"N"
    cr.send(pgwire.cancel_request(pid, key))
    cr.wait_closed(5)
    cr.close()
    rows, err, status = r.collect(10)
    assert err is not None and err["C"] == "57014", err
    assert status == "I"
    r.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 2])
def test_cancel_then_vanish_never_cancels_the_next_client(pgcat, pg, workers):
    """Issue 28, item 1, as pgx does it: on a context timeout pgx sends a
    CancelRequest with its key and closes its own socket at once. Pool of
    one server: A runs pg_sleep, sends its cancel and disconnects in the
    same instant; B, already connected, runs a query right away. B is never
    cancelled, A's sleep never survives, nothing is left idle in a
    transaction. Also, the next client never gets the pid a closed one had
    (pgxpool opens a connection as it closes another)."""
    rounds = 1000 if workers == 1 else 300
    p = pgcat(general={"default_pool_size": 1, "workers": workers, "auth_type": "md5"})
    b = p.raw_login()
    pids = set()
    for i in range(rounds):
        a = p.raw_login()
        assert a.backend_key[0] not in pids, "a closed client's pid was given again: %r" % (a.backend_key,)
        pids.add(a.backend_key[0])
        a.send(pgwire.query("SELECT pg_sleep(30)"))
        if i % 2:
            # the cancel sometimes lands before the query reached a server
            time.sleep(0.002)
        c = socket.create_connection((p.host, p.port))
        c.sendall(pgwire.cancel_request(*a.backend_key))
        a.close()
        c.close()
        rows, err, status = b.simple("SELECT %d" % i)
        assert err is None, "round %d: B got %r" % (i, err)
        assert rows == [[str(i)]] and status == "I"
    b.close()
    wait_until(lambda: not sleeping_backend(pg, "pg_sleep(30)"), 10, msg="no pg_sleep left running")
    assert_pool_idle(pg, max_conns=1)
