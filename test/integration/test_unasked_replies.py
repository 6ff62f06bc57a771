# SPDX-License-Identifier: MIT
"""What pgcat never does (SPEC §10): hand a server's reply to a client that
did not ask for it.

A fake PostgreSQL server answers every query with one row holding the
query's own text, so an answer that reaches the wrong request shows. On a
query containing EXTRA it misbehaves: it sends, beyond the answer, a
second answer (a stale row, CommandComplete and ReadyForQuery), or one
ReadyForQuery too many, in the same write or a moment later when the
connection is idle in the pool. Through a pool of one server connection
every later client must still get its own answer: the server that sent
what nobody asked for is closed, the client it served gets pgcat's error
(08P01), and nothing of the extra reply reaches anyone.
"""
import socket
import struct
import threading
import time

import pytest

import pgwire
from conftest import PASSWORDS, assert_works, wait_until


def be_msg(typ, payload=b""):
    return typ + struct.pack("!I", len(payload) + 4) + payload


READY = be_msg(b"Z", b"I")


ROW_DESC = be_msg(b"T", struct.pack("!H", 1) + b"echo\x00" + struct.pack("!IhIhih", 0, 0, 25, -1, -1, 0))


def rows_and_complete(text):
    return be_msg(b"D", struct.pack("!Hi", 1, len(text)) + text) + be_msg(b"C", b"SELECT 1\x00")


def row_reply(text):
    return ROW_DESC + rows_and_complete(text)


STALE = row_reply(b"stale") + READY

# What the fake server sends after its answer to a query containing EXTRA,
# and whether it waits (the server idle in the pool) before sending it.
MISDEEDS = {
    "second_answer": (STALE, 0.0),
    "extra_ready": (READY, 0.0),
    "second_answer_later": (STALE, 0.3),
    "extra_ready_later": (READY, 0.3),
    "notice_then_second_answer": (be_msg(b"N", b"SNOTICE\x00Mhello\x00\x00") + STALE, 0.0),
}

# Not a misdeed: a backend that ends its session right after its answer
# (terminated, the server shutting down) sends a FATAL error unasked.
FATAL = be_msg(b"E", b"SFATAL\x00VFATAL\x00C57P01\x00Mterminating connection due to administrator command\x00\x00")


class EchoServer:
    """Trust login; a simple Query or an extended request answered with
    one row holding the statement's text."""

    def __init__(self, misdeed, extra=None):
        self.extra, self.delay = MISDEEDS[misdeed] if extra is None else (extra, 0.0)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.lock = threading.Lock()
        self.sessions = 0
        self.misdeeds = 0
        self.threads = []
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            th = threading.Thread(target=self._serve, args=(c,), daemon=True)
            self.threads.append(th)
            th.start()

    def _recv(self, c, n):
        buf = b""
        while len(buf) < n:
            if self.stop:
                raise EOFError
            try:
                chunk = c.recv(n - len(buf))
            except socket.timeout:
                continue
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def _serve(self, c):
        c.settimeout(0.2)
        try:
            self._session(c)
        except (EOFError, OSError):
            pass
        finally:
            c.close()

    def _answer(self, c, answer, sql):
        """The answer; on EXTRA the misdeed too, in the same write or later."""
        if b"EXTRA" not in sql:
            c.sendall(answer)
            return
        with self.lock:
            self.misdeeds += 1
        if not self.delay:
            c.sendall(answer + self.extra)
            return
        c.sendall(answer)
        time.sleep(self.delay)
        c.sendall(self.extra)

    def _session(self, c):
        while True:
            (ln,) = struct.unpack("!I", self._recv(c, 4))
            body = self._recv(c, ln - 4)
            code = struct.unpack("!I", body[:4])[0]
            if code in (pgwire.SSL_REQUEST_CODE, pgwire.GSSENC_REQUEST_CODE):
                c.sendall(b"N")
                continue
            if code == pgwire.CANCEL_REQUEST_CODE:
                return
            break
        with self.lock:
            self.sessions += 1
        out = be_msg(b"R", struct.pack("!I", 0))
        for k, v in (("server_version", "15.99"), ("server_encoding", "UTF8"), ("client_encoding", "UTF8"),
                     ("DateStyle", "ISO, MDY"), ("TimeZone", "UTC"), ("integer_datetimes", "on"),
                     ("standard_conforming_strings", "on"), ("IntervalStyle", "postgres"),
                     ("application_name", ""), ("is_superuser", "off")):
            out += be_msg(b"S", k.encode() + b"\x00" + v.encode() + b"\x00")
        c.sendall(out + be_msg(b"K", struct.pack("!II", 4242, 99)) + READY)
        stmt = b""
        pending = b""
        while True:
            typ = self._recv(c, 1)
            (ln,) = struct.unpack("!I", self._recv(c, 4))
            body = self._recv(c, ln - 4)
            if typ == b"X":
                return
            if typ == b"Q":
                sql = body.rstrip(b"\x00").strip()
                word = sql.split(None, 1)[0].upper() if sql else b""
                if not sql or sql == b";":
                    reply = be_msg(b"I")
                elif word in (b"SET", b"RESET", b"DISCARD", b"DEALLOCATE", b"ROLLBACK"):
                    reply = be_msg(b"C", word + b"\x00")
                else:
                    reply = row_reply(sql)
                self._answer(c, reply + READY, sql)
            elif typ == b"P":
                name_end = body.index(b"\x00")
                stmt = body[name_end + 1:body.index(b"\x00", name_end + 1)]
                pending += be_msg(b"1")
            elif typ == b"B":
                pending += be_msg(b"2")
            elif typ == b"E":
                pending += rows_and_complete(stmt)
            elif typ == b"D":
                pending += ROW_DESC
            elif typ == b"H":
                c.sendall(pending)
                pending = b""
            elif typ == b"S":
                self._answer(c, pending + READY, stmt)
                pending = b""

    def close(self):
        self.stop = True
        self.t.join(5)
        self.sock.close()
        for th in self.threads:
            th.join(5)


def start(pgcat, srv, mode):
    return pgcat(general={"pool_mode": mode, "connect_timeout": 3000}, pools={
        "fakedb": {"shards": {0: {"database": "fakedb", "servers": "127.0.0.1:%d:primary" % srv.port}},
                   "users": {"app": {"password": PASSWORDS["app"], "pool_size": 1}}}})


def echo(r, sql):
    rows, err, status = r.simple(sql)
    return rows, err, status


@pytest.fixture(params=sorted(MISDEEDS))
def misdeed(request):
    srv = EchoServer(request.param)
    yield request.param, srv
    srv.close()


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_unasked_reply_reaches_nobody(pgcat, misdeed, mode):
    name, srv = misdeed
    p = start(pgcat, srv, mode)
    a = p.raw_login(dbname="fakedb")
    rows, err, status = echo(a, "SELECT 'first'")
    assert (rows, err, status) == ([["SELECT 'first'"]], None, "I")
    if mode == "session" and MISDEEDS[name][1] == 0.0:
        # The session dies with its server (SPEC §3): FATAL, then closed.
        a.send(pgwire.query("SELECT 'EXTRA'"))
        msgs = a.read_until()
        assert not [m for m in msgs if m[0] == b"D" and b"stale" in m[1]], msgs
        errs = [pgwire.parse_fields(m[1]) for m in msgs if m[0] == b"E"]
        assert errs and errs[-1].get("C") == "08P01" and errs[-1].get("S") == "FATAL", msgs
        assert a.wait_closed(10)
        rows, err, status = None, errs[-1], None
    else:
        rows, err, status = echo(a, "SELECT 'EXTRA'")
    assert srv.misdeeds == 1
    if MISDEEDS[name][1] == 0.0:
        # The extra reply came with the answer: the server is closed before
        # the client is told it is done, and the client gets the error.
        assert err is not None and err.get("C") == "08P01", (rows, err, status)
        assert rows != [["stale"]]
    else:
        # The answer came whole; the extra reply later, to nobody.
        assert (rows, err, status) == ([["SELECT 'EXTRA'"]], None, "I")
    if mode == "session" and err is not None:
        # The client's session died with its server (SPEC §3).
        a.close()
        a = p.raw_login(dbname="fakedb")
    else:
        # Wait for the late extra reply to reach pgcat (and close the server).
        wait_until(lambda: "nobody asked for" in p.log(), 10, msg="pgcat to log the unasked reply")
        if mode == "session":
            # in session mode the client's server is gone with its session
            assert a.wait_closed(10)
            a = p.raw_login(dbname="fakedb")
    # Every answer from now on is the asker's own, for this client and others.
    for i in range(3):
        rows, err, status = echo(a, "SELECT 'a%d'" % i)
        assert (rows, err, status) == ([["SELECT 'a%d'" % i]], None, "I")
    a.close()
    for i in range(3):
        b = p.raw_login(dbname="fakedb")
        rows, err, status = echo(b, "SELECT 'b%d'" % i)
        assert (rows, err, status) == ([["SELECT 'b%d'" % i]], None, "I")
        b.close()
    assert "nobody asked for" in p.log()
    assert_works(p)


def test_unasked_reply_to_an_extended_request(pgcat):
    srv = EchoServer("second_answer")
    try:
        p = start(pgcat, srv, "transaction")
        a = p.raw_login(dbname="fakedb")
        a.send(pgwire.parse("SELECT 'EXTRA'") + pgwire.bind() + pgwire.execute() + pgwire.sync())
        msgs = a.read_until()
        types = [m[0] for m in msgs]
        errs = [pgwire.parse_fields(m[1]) for m in msgs if m[0] == b"E"]
        assert errs and errs[0].get("C") == "08P01", msgs
        assert not [m for m in msgs if m[0] == b"D" and b"stale" in m[1]], msgs
        assert types[-1] == b"Z"
        for i in range(3):
            b = p.raw_login(dbname="fakedb")
            b.send(pgwire.parse("SELECT %d" % i) + pgwire.bind() + pgwire.execute() + pgwire.sync())
            msgs = b.read_until()
            rows = [pgwire.data_row_values(m[1]) for m in msgs if m[0] == b"D"]
            assert rows == [["SELECT %d" % i]], msgs
            b.close()
    finally:
        srv.close()


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_fatal_right_after_the_answer_is_not_unasked(pgcat, mode):
    """A FATAL error that comes in the same read as the answer (PostgreSQL
    shutting down): the client gets its answer as it was; in transaction
    mode the server is not handed to anyone, and the next request runs on
    a new server connection without an error."""
    srv = EchoServer("second_answer", extra=FATAL)
    try:
        p = start(pgcat, srv, mode)
        a = p.raw_login(dbname="fakedb")
        a.send(pgwire.query("SELECT 'EXTRA'"))
        msgs = a.read_until()
        assert [t for t, _ in msgs][-1:] == [b"Z"], msgs
        assert not [m for t, m in msgs if t == b"E"], msgs
        assert pgwire.data_row_values(msgs[1][1]) == ["SELECT 'EXTRA'"]
        if mode == "session":
            # its session died with the server (SPEC §3): said at its next message
            assert a.wait_closed(10) or a.simple("SELECT 1")[1] is not None
            a.close()
            a = p.raw_login(dbname="fakedb")
        rows, err, status = echo(a, "SELECT 'after'")
        assert (rows, err, status) == ([["SELECT 'after'"]], None, "I")
        assert srv.sessions == 2
        assert "nobody asked for" not in p.log()
        a.close()
    finally:
        srv.close()
