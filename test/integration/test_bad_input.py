# SPDX-License-Identifier: MIT
"""Bad input (SPEC §10, §3 startup): every malformed input ends with a clear
error to that one peer; a client in the middle of a transaction on the same
pgcat is not disturbed, a new client still works, and no server connection
leaks (all back to idle, within pool_size)."""
import random
import socket
import struct
import threading

import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, assert_pool_idle, assert_works, free_port, wait_until

MAX_PACKET = 1048576
POOL_SIZE = 4


@pytest.fixture
def cat(pgcat):
    return pgcat(general={"max_packet_size": MAX_PACKET, "default_pool_size": POOL_SIZE})


@pytest.fixture
def bystander(cat, table):
    """A client inside a transaction while the bad input arrives; checked after."""
    t = table("a int")
    c = cat.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    c.pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    yield c
    # Still in its transaction on its own server: it can go on and commit.
    c.execute("INSERT INTO %s VALUES (2)" % t)
    c.commit()
    assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 2
    c.close()


def after_checks(cat, by=None):
    """A new client works; no server connection leaked (the bystander's own
    server, still in its transaction, aside)."""
    assert_works(cat)
    assert_pool_idle(cat.pg, max_conns=POOL_SIZE, ignore_pids=[by.pid] if by else ())


def expect_error_and_close(r, code, timeout=10):
    err, closed = r.read_error_then_eof(timeout)
    r.close()
    assert err is not None, "no ErrorResponse before the connection ended (closed=%s)" % closed
    assert err.get("C") == code, "expected SQLSTATE %s, got %r" % (code, err)
    assert closed, "pgcat did not close the connection after the error"
    return err


# --- before authentication ------------------------------------------------------

STARTUP_CASES = {
    # node-postgres's connect() then end() at once: Terminate before its startup packet
    "terminate_first": pgwire.terminate(),
    "http_request": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "random_bytes": struct.pack("!I", 300) + bytes(random.Random(7).getrandbits(8) for _ in range(296)),
    "length_below_4": struct.pack("!I", 3) + b"\x00" * 8,
    "length_zero": struct.pack("!I", 0) + b"\x00" * 8,
    "length_7": struct.pack("!I", 7) + b"\x00" * 3,
    "startup_over_10000_bytes": pgwire.startup_packet(
        {"user": "app", "database": "appdb", "application_name": "x" * 11000}),
    "protocol_0_0": struct.pack("!II", 8, 0),
    "protocol_2": pgwire.startup_packet({"user": "app", "database": "appdb"}, version=2 << 16),
    "protocol_4": pgwire.startup_packet({"user": "app", "database": "appdb"}, version=4 << 16),
    "unknown_request_code": pgwire.startup_packet({"user": "app"}, version=(1234 << 16) | 5681),
    "missing_user": pgwire.startup_packet({"database": "appdb"}),
    "unterminated_parameters": struct.pack("!II", 8 + 9, pgwire.PROTO_3_0) + b"user\x00app\x00",
}


def first_packet_answer(host, port, data):
    """What a server does with this first packet: ("silent",) when it closes
    without a byte; ("v2", text) for the old protocol's error (an 'E' and a
    text, what a client below protocol 3 can read); ("error", SQLSTATE,
    severity) for an ErrorResponse followed by the close."""
    r = pgwire.Raw(host, port)
    try:
        r.try_send(data)
        got, closed = r.read_to_eof(10)
    finally:
        r.close()
    assert closed, "the connection was not closed (got %r)" % got[:80]
    if got == b"":
        return ("silent",)
    if got[:1] == b"E" and got.endswith(b"\x00") and got[1:2].isalpha():
        # the text up to its version range, which differs (3.0 to 3.2 here)
        return ("v2", got[1:-1].decode().split(": server supports")[0])
    assert got[:1] == b"E", got[:80]
    (ln,) = struct.unpack("!I", got[1:5])
    assert len(got) == 1 + ln, "more than one ErrorResponse: %r" % got[:120]
    f = pgwire.parse_fields(got[5:])
    return ("error", f.get("C"), f.get("S"))


@pytest.mark.parametrize("case", sorted(STARTUP_CASES))
def test_bad_startup_packet(cat, pg, bystander, case):
    """pgcat answers a malformed first packet exactly as PostgreSQL 15 does:
    a length no startup packet has (a Terminate before the startup packet,
    an HTTP request, over 10,000 bytes) is closed without a byte; a protocol
    below 3 gets the old protocol's error text; the rest a FATAL with
    PostgreSQL's SQLSTATE."""
    want = first_packet_answer(pg.host, pg.port, STARTUP_CASES[case])
    got = first_packet_answer(cat.host, cat.port, STARTUP_CASES[case])
    assert got == want, "PostgreSQL: %r, pgcat: %r" % (want, got)
    after_checks(cat, bystander)


def test_terminate_before_startup_closes_silently(cat, pg):
    """node-postgres's connect() then end() at once: 'X' with length 4 where
    the startup packet belongs. PostgreSQL logs "invalid length of startup
    packet" and closes without a byte; so does pgcat (an ErrorResponse here
    is an unhandled error that kills that client's process)."""
    r = cat.raw()
    r.send(b"X\x00\x00\x00\x04")
    got, closed = r.read_to_eof(10)
    r.close()
    assert closed and got == b"", got
    wait_until(lambda: "invalid length of startup packet" in cat.log(), 5, msg="the log line")
    after_checks(cat)


def test_tls_client_hello_with_client_tls_off(cat, pg, bystander):
    """A TLS ClientHello where a startup packet belongs is direct TLS
    (PostgreSQL 17): with client TLS off it is refused as PostgreSQL
    refuses it, by closing without a word (an ErrorResponse in clear
    means nothing to a TLS client). test_tls.py has the rest."""
    r = cat.raw()
    r.try_send(bytes.fromhex("16030100f4010000f00303") + bytes(range(64)))
    r.sock.settimeout(10)
    data = b""
    try:
        while True:
            chunk = r.sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    r.close()
    assert data == b"", data
    after_checks(cat, bystander)


def test_startup_length_over_10000_is_refused_before_the_body(cat, pg):
    """Only the header of a 1 GB startup packet: closed at once (without a
    byte, as PostgreSQL does), not awaited."""
    r = cat.raw()
    r.send(struct.pack("!II", 1 << 30, pgwire.PROTO_3_0))
    got, closed = r.read_to_eof(5)
    r.close()
    assert closed and got == b"", (closed, got)
    after_checks(cat)


@pytest.mark.parametrize("cut", [2, 6, 30])
def test_truncated_startup_then_close(cat, pg, bystander, cut):
    pkt = pgwire.startup_packet({"user": "app", "database": "appdb"})
    r = cat.raw()
    r.send(pkt[:cut])
    r.close()
    after_checks(cat, bystander)


def test_garbage_password_message(cat, pg):
    r = cat.raw()
    r.startup("app", "appdb")
    assert r.read_msg()[0] == b"R"
    r.try_send(pgwire.msg(b"p", b"\xff\xfe garbage without structure"))
    err, closed = r.read_error_then_eof(10)
    r.close()
    assert err is not None and err.get("C") in ("08P01", "28P01"), err
    assert closed
    after_checks(cat)


def test_oversized_message_before_authentication(cat, pg):
    r = cat.raw()
    r.startup("app", "appdb")
    assert r.read_msg()[0] == b"R"
    r.try_send(b"p" + struct.pack("!I", 50_000_000) + b"x" * 100)
    expect_error_and_close(r, "08P01", timeout=5)
    after_checks(cat)


# --- after authentication -----------------------------------------------------------

def logged_in(cat, begin=False):
    r = cat.raw_login()
    if begin:
        rows, err, status = r.simple("BEGIN")
        assert err is None and status == "T"
        rows, err, status = r.simple("SELECT txid_current()")
        assert err is None and status == "T"
    return r


@pytest.mark.parametrize("begin", [False, True], ids=["idle", "in_transaction"])
def test_message_length_below_4(cat, pg, bystander, begin):
    r = logged_in(cat, begin)
    r.try_send(b"Q" + struct.pack("!I", 2) + b"\x00\x00")
    expect_error_and_close(r, "08P01")
    after_checks(cat, bystander)


@pytest.mark.parametrize("begin", [False, True], ids=["idle", "in_transaction"])
def test_message_over_max_packet_size(cat, pg, bystander, begin):
    r = logged_in(cat, begin)
    # Only the header: pgcat must refuse on the length, not wait for 10 MB.
    r.try_send(b"Q" + struct.pack("!I", 10 * MAX_PACKET) + b"SELECT ")
    expect_error_and_close(r, "08P01", timeout=5)
    after_checks(cat, bystander)


def test_message_just_under_max_packet_size_works(cat, pg):
    lit = "x" * (MAX_PACKET - 1000)
    r = logged_in(cat)
    rows, err, status = r.simple("SELECT length('%s')" % lit)
    assert err is None, err
    assert rows == [[str(len(lit))]] and status == "I"
    r.close()
    after_checks(cat)


@pytest.mark.parametrize("typ", [b"!", b"\x00", b"p", b"Z"])
def test_invalid_message_type(cat, pg, bystander, typ):
    r = logged_in(cat)
    r.try_send(pgwire.msg(typ, b"\x00\x00\x00\x00"))
    expect_error_and_close(r, "08P01")
    after_checks(cat, bystander)


@pytest.mark.parametrize("begin", [False, True], ids=["idle", "in_transaction"])
def test_garbage_after_login(cat, pg, bystander, begin):
    r = logged_in(cat, begin)
    r.try_send(bytes(random.Random(3).getrandbits(8) for _ in range(4096)))
    err, closed = r.read_error_then_eof(10)
    r.close()
    assert closed, "pgcat kept a connection that sent garbage"
    assert err is not None and err.get("C") == "08P01", err
    after_checks(cat, bystander)


@pytest.mark.parametrize("begin", [False, True], ids=["idle", "in_transaction"])
def test_truncated_message_then_close(cat, pg, bystander, begin):
    r = logged_in(cat, begin)
    r.send(b"Q" + struct.pack("!I", 100) + b"SELECT 1")  # 92 bytes promised, 8 sent
    r.close()
    after_checks(cat, bystander)


def test_truncated_extended_batch_then_close(cat, pg, bystander):
    r = logged_in(cat)
    batch = pgwire.parse("SELECT $1::int") + pgwire.bind([1]) + pgwire.execute()
    r.send(batch + pgwire.sync()[:3])
    r.close()
    after_checks(cat, bystander)


def test_empty_query_and_empty_batch_are_fine(cat, pg):
    r = logged_in(cat)
    r.send(pgwire.query(""))
    msgs = r.read_until((b"Z",))
    assert [m[0] for m in msgs] == [b"I", b"Z"], msgs
    r.send(pgwire.sync())
    assert r.read_until((b"Z",))[-1] == (b"Z", b"I")
    r.close()
    after_checks(cat)


# --- a server that sends garbage ------------------------------------------------------

class GarbageServer:
    """Listens on a loopback port; answers every connection with junk bytes."""

    def __init__(self, junk):
        self.junk = junk
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.conns = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns += 1
            try:
                c.settimeout(2)
                c.recv(4096)
                c.sendall(self.junk)
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.stop = True
        self.t.join(5)
        self.sock.close()


@pytest.mark.parametrize("junk", [b"HTTP/1.0 400 Bad Request\r\n\r\n",
                                  b"R" + struct.pack("!I", 2),
                                  b"R" + struct.pack("!I", 0x7fffffff) + b"\x00" * 16,
                                  b"R\x00\x00\x00\x08\x00\x00\x00\x63"],
                         ids=["http", "short_length", "huge_length", "unknown_auth_code"])
def test_server_sends_garbage(pgcat, pg, junk):
    srv = GarbageServer(junk)
    try:
        p = pgcat(general={"connect_timeout": 2000}, pools={
            "junkdb": {"shards": {0: {"database": "appdb",
                                      "servers": "127.0.0.1:%d:primary" % srv.port}},
                       "users": {"app": {"password": PASSWORDS["app"]}}}})
        with pytest.raises(psycopg.Error):
            with p.connect(dbname="junkdb", connect_timeout=15) as c:
                c.execute("SELECT 1")
        assert srv.conns >= 1, "pgcat never tried the server"
        assert p.alive()
        assert_works(p)
    finally:
        srv.close()


def test_unused_port_server(pgcat, pg):
    """A server nobody listens on: the client gets an error, pgcat goes on."""
    port = free_port()
    p = pgcat(general={"connect_timeout": 2000}, pools={
        "deaddb": {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % port}},
                   "users": {"app": {"password": PASSWORDS["app"]}}}})
    with pytest.raises(psycopg.Error):
        with p.connect(dbname="deaddb", connect_timeout=15) as c:
            c.execute("SELECT 1")
    assert_works(p)
    wait_until(lambda: p.alive(), 1)
