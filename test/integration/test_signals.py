# SPDX-License-Identifier: MIT
"""Signals (SPEC §9, one process): SIGTERM and SIGINT shut down gracefully —
stop accepting, let clients finish their current transaction (up to
shutdown_timeout), exit 0; SIGQUIT exits at once. Server connections are
closed when pgcat is gone."""
import signal
import time

import psycopg
import pytest

from conftest import assert_works, port_open, wait_until


def no_app_backends(pg):
    return not pg.backends("app", "appdb")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_graceful_shutdown_lets_transaction_finish(pgcat, pg, table, sig):
    t = table("id int")
    p = pgcat(general={"shutdown_timeout": 20000})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    p.send_signal(sig)
    p.stopped_by_test = True
    # pgcat stops accepting new clients...
    wait_until(lambda: not port_open(p.host, p.port) or not p.alive(), 10,
               msg="pgcat to stop accepting")
    assert p.alive(), "pgcat exited while a client was in a transaction"
    # ...but the client in its transaction goes on and commits.
    c.execute("INSERT INTO %s VALUES (2)" % t)
    c.commit()
    rc = p.stop(timeout=15)    # no new signal needed: it exits once the transaction ended
    assert rc == 0, "exit code %r after graceful shutdown" % rc
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 2
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 1")
    c.close()
    wait_until(lambda: no_app_backends(pg), 10, msg="server connections closed after shutdown")


def test_graceful_shutdown_exits_after_transaction_without_waiting_timeout(pgcat, pg):
    p = pgcat(general={"shutdown_timeout": 60000})
    c = p.connect(autocommit=False)
    c.execute("SELECT 1")
    p.send_signal(signal.SIGTERM)
    p.stopped_by_test = True
    time.sleep(0.3)
    assert p.alive()
    c.commit()
    t0 = time.monotonic()
    rc = p.proc.wait(10)
    assert rc == 0
    assert time.monotonic() - t0 < 5, "pgcat waited long after the last transaction ended"
    c.close()


def test_shutdown_timeout_ends_a_stuck_transaction(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"shutdown_timeout": 1500})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.stopped_by_test = True
    rc = p.proc.wait(15)
    took = time.monotonic() - t0
    assert rc == 0
    assert 1.0 <= took < 8, "exited after %.1fs with shutdown_timeout 1.5s" % took
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 1")
    c.close()
    wait_until(lambda: no_app_backends(pg), 10)
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0, "uncommitted work was committed"


def test_sigterm_with_idle_clients_exits_promptly(pgcat, pg):
    p = pgcat(general={"shutdown_timeout": 60000})
    conns = [p.connect() for _ in range(3)]
    for c in conns:
        c.execute("SELECT 1")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.stopped_by_test = True
    rc = p.proc.wait(15)
    assert rc == 0
    assert time.monotonic() - t0 < 5, "idle clients held up the shutdown"
    for c in conns:
        with pytest.raises(psycopg.OperationalError):
            c.execute("SELECT 1")
        c.close()
    wait_until(lambda: no_app_backends(pg), 10)


def test_sigquit_exits_at_once(pgcat, pg):
    p = pgcat(general={"shutdown_timeout": 60000})
    c = p.connect(autocommit=False)
    c.execute("SELECT 1")
    assert_works(p)
    t0 = time.monotonic()
    p.send_signal(signal.SIGQUIT)
    p.stopped_by_test = True
    p.proc.wait(10)
    assert time.monotonic() - t0 < 3, "SIGQUIT did not exit at once"
    wait_until(lambda: not p.group_alive(), 5, msg="all pgcat processes gone")
    wait_until(lambda: no_app_backends(pg), 10)
    c.close()


def test_sigterm_while_clients_wait_for_a_server(pgcat, pg):
    """Clients queued for a server when shutdown starts get an error or their
    answer, never a hang; pgcat exits 0."""
    import threading
    p = pgcat(general={"default_pool_size": 1, "shutdown_timeout": 3000})
    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")
    results = []

    def waiter():
        try:
            with p.connect() as c:
                results.append(c.execute("SELECT 1").fetchone()[0])
        except psycopg.Error as e:
            results.append(type(e).__name__)
    ts = [threading.Thread(target=waiter) for _ in range(3)]
    for th in ts:
        th.start()
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    p.stopped_by_test = True
    holder.commit()
    rc = p.proc.wait(15)
    for th in ts:
        th.join(10)
        assert not th.is_alive(), "a waiting client hung through shutdown"
    assert rc == 0
    assert len(results) == 3
    holder.close()
