# SPDX-License-Identifier: MIT
"""A TCP proxy between the client and pgcat that dies right after the
client sent a query (psycopg's own test_waiting.py::test_wait_remote_closed
does this with a proxy process it terminates). The client must get an error,
as it does with the same proxy in front of PostgreSQL itself; what ran on
the server is what ran there with PostgreSQL alone; pgcat's server goes back
to the pool idle and pgcat serves the next client.

psycopg's test kills a proxy process and races it: when the whole round
trip (proxy, pgcat, server and back) is done before the test's next
statement runs, the client has its answer and the test fails, with
PostgreSQL directly as through a pooler (test/peers/psycopg-expected-*.txt
says why). Here the proxy is a thread of the test that stops at a chosen
point of the exchange, so each point is tested every time:

- query_unread: the query is in the proxy's socket, not read (the proxy
  dies before it runs; the kernel answers the client with a reset);
- query_forwarded: the proxy forwarded the query and died before any answer;
- answer_unrelayed: the answer reached the proxy, which died without
  relaying it (the case psycopg's test means to exercise).

The proxy's death is a close of both its sockets, as the kernel does for a
process that dies: unread bytes turn the close into a reset."""
import select
import socket
import threading

import psycopg
import pytest
from psycopg import generators, waiting

from conftest import PASSWORDS, assert_pool_idle, assert_works

STOPS = ("query_unread", "query_forwarded", "answer_unrelayed")


class CutProxy:
    """Relays one client connection to (host, port) until armed with a stop
    point, then dies there: both sockets closed, nothing more relayed."""

    def __init__(self, host, port):
        self.upstream = (host, port)
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.port = self.lsock.getsockname()[1]
        self.stop_at = None
        self.armed = threading.Event()
        self.dead = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def arm(self, stop_at):
        assert stop_at in STOPS
        self.stop_at = stop_at
        self.armed.set()

    def _run(self):
        try:
            cs, _ = self.lsock.accept()
            us = socket.create_connection(self.upstream, timeout=10)
            try:
                self._relay(cs, us)
            finally:
                cs.close()
                us.close()
                self.dead.set()
        except Exception as e:  # reported by the test
            self.error = e
            self.dead.set()

    def _relay(self, cs, us):
        while True:
            # Relay as it comes until armed; once armed, the next bytes from
            # the client are the query.
            r, _, _ = select.select([cs, us], [], [], 0.01)
            if self.armed.is_set():
                break
            for s in r:
                data = s.recv(65536)
                if not data:
                    return
                (us if s is cs else cs).sendall(data)
        r, _, _ = select.select([cs], [], [], 10)
        assert r, "the client's query did not reach the proxy"
        if self.stop_at == "query_unread":
            return
        query = cs.recv(65536)
        assert query[:1] == b"Q", query[:16]
        us.sendall(query)
        if self.stop_at == "query_forwarded":
            return
        r, _, _ = select.select([us], [], [], 10)
        assert r, "no answer to the query reached the proxy"

    def close(self):
        self.lsock.close()
        self.thread.join(10)


def send_query_through_dying_proxy(conninfo, sql, stop_at):
    """psycopg's test, with the proxy dying at stop_at: connect through it,
    send the query, wait for the proxy to be dead, then wait for the result
    the way psycopg does. The exception raised (None if the client got its
    answer) and the proxy."""
    proxy = CutProxy(conninfo["host"], conninfo["port"])
    try:
        conn = psycopg.connect(**dict(conninfo, host="127.0.0.1", port=proxy.port), autocommit=True)
        try:
            proxy.arm(stop_at)
            conn.pgconn.send_query(sql.encode())
            assert proxy.dead.wait(10), "the proxy did not stop"
            assert proxy.error is None, proxy.error
            try:
                waiting.wait(generators.execute(conn.pgconn), conn.pgconn.socket, 0.1)
            except psycopg.OperationalError as e:
                return e
            return None
        finally:
            conn.close()
    finally:
        proxy.close()


def insert_through_dying_proxy(conninfo, table, stop_at):
    return send_query_through_dying_proxy(conninfo, "INSERT INTO %s VALUES (1)" % table, stop_at)


def assert_link_error(err):
    """What the client gets at every stop point with PostgreSQL itself: the
    link dies under it (an end of file, or a reset when the proxy died with
    the query unread)."""
    assert isinstance(err, psycopg.OperationalError), "the client got its answer: %r" % (err,)
    msg = str(err).lower()
    assert "closed the connection" in msg or "reset by peer" in msg, str(err)


def assert_ran_as_postgres_does(pg, table, stop_at):
    n = pg.sql("SELECT count(*) FROM %s" % table)[0][0]
    if stop_at == "query_unread":
        assert n == 0, "a query the proxy never forwarded ran"
    elif stop_at == "answer_unrelayed":
        assert n == 1, "the INSERT the server answered is not committed"
    # query_forwarded: PostgreSQL runs the INSERT to its end; pgcat, whose
    # client vanished while its query ran, cancels it (SPEC §3). An INSERT
    # this short is nearly always done before the cancel lands, so either
    # count is right and none is asserted.


@pytest.mark.parametrize("stop_at", STOPS)
def test_postgres_itself(pg, table, stop_at):
    """The reference: the same proxy in front of PostgreSQL."""
    t = table("id int")
    ci = pg.conninfo(user="app", password=PASSWORDS["app"], sslmode="disable")
    assert_link_error(insert_through_dying_proxy(ci, t, stop_at))
    assert_ran_as_postgres_does(pg, t, stop_at)


@pytest.mark.parametrize("stop_at", STOPS)
@pytest.mark.parametrize("mode", ["session", "transaction"])
@pytest.mark.parametrize("engine", ["epoll", "auto"])
def test_proxy_dies_after_the_query_is_sent(pgcat, pg, table, engine, mode, stop_at):
    t = table("id int")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 2, "io_engine": engine})
    assert_works(p)
    assert_link_error(insert_through_dying_proxy(p.conninfo(), t, stop_at))
    # pgcat's server is back in the pool, idle (not left 'active' or in a
    # transaction), and pgcat serves the next client.
    assert_pool_idle(pg, max_conns=2)
    assert_ran_as_postgres_does(pg, t, stop_at)
    assert_works(p)
