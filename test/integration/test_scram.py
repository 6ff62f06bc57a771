# SPDX-License-Identifier: MIT
"""SCRAM-SHA-256 beyond the plain login (test_startup_auth.py has that).

- A server's iteration count does not stall the worker: a server that asks
  pgcat for 10,000,000 PBKDF2 iterations (the most pgcat accepts) costs
  seconds of key derivation, which run off the event loop; another pool's
  client of the same worker is served all along, the login completes with
  a proof the server checks, and the next login of that role derives
  nothing (the SaltedPassword is cached). A server connection closed while
  its key is derived is not touched when the result comes; a shutdown does
  not wait for a running derivation.
- SASLprep (RFC 4013), as PostgreSQL applies it: a role whose password
  SASLprep changes (or refuses) logs in through pgcat exactly when it logs
  in directly, whichever spelling of the password pgcat.ini and the client
  use.
"""
import base64
import contextlib
import hashlib
import hmac
import os
import signal
import socket
import struct
import threading
import time

import psycopg
import pytest
from psycopg import sql

import pgwire
from conftest import PASSWORDS, assert_works, wait_until

SCRAM_MAX_ITERATIONS = 10_000_000


def be_msg(typ, payload=b""):
    return typ + struct.pack("!I", len(payload) + 4) + payload


def ready(status):
    return be_msg(b"Z", status.encode())


ONE_ROW = (be_msg(b"T", struct.pack("!H", 1) + b"?column?\x00" + struct.pack("!IhIhih", 0, 0, 25, -1, -1, 0))
           + be_msg(b"D", struct.pack("!Hi", 1, 1) + b"1") + be_msg(b"C", b"SELECT 1\x00"))


class ScramServer:
    """A PostgreSQL look-alike on a loopback port that asks for SCRAM-SHA-256
    with the given iteration count and one salt for every session, checks
    the client's proof as PostgreSQL would, and then answers every query
    with one row (BEGIN, COMMIT and ROLLBACK with their tags and
    transaction status). hang_up: the number of first sessions it ends
    right after its server-first-message. Each session's times are kept."""

    def __init__(self, password, iterations, hang_up=0):
        self.iterations = iterations
        self.salt = os.urandom(16)
        # What PostgreSQL would hold (password_encryption = scram-sha-256).
        self.salted = hashlib.pbkdf2_hmac("sha256", password.encode(), self.salt, iterations)
        self.hang_up = hang_up
        self.lock = threading.Lock()
        self.sessions = []   # dicts: first_at, final_at, proof_ok, hung_up
        self.stop = False
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.threads = []
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def session(self, i):
        with self.lock:
            return dict(self.sessions[i]) if i < len(self.sessions) else None

    def _accept(self):
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

    def _msg(self, c):
        typ = self._recv(c, 1)
        (ln,) = struct.unpack("!I", self._recv(c, 4))
        return typ, self._recv(c, ln - 4)

    def _serve(self, c):
        c.settimeout(0.2)
        try:
            self._session(c)
        except (EOFError, OSError):
            pass
        finally:
            c.close()

    def _session(self, c):
        while True:
            (ln,) = struct.unpack("!I", self._recv(c, 4))
            code = struct.unpack("!I", self._recv(c, ln - 4)[:4])[0]
            if code in (pgwire.SSL_REQUEST_CODE, pgwire.GSSENC_REQUEST_CODE):
                c.sendall(b"N")
                continue
            break
        rec = {"first_at": None, "final_at": None, "proof_ok": None, "hung_up": False}
        with self.lock:
            self.sessions.append(rec)
            n = len(self.sessions)
        c.sendall(be_msg(b"R", struct.pack("!I", 10) + b"SCRAM-SHA-256\x00\x00"))
        typ, body = self._msg(c)
        assert typ == b"p", typ
        mech_end = body.index(b"\x00")
        assert body[:mech_end] == b"SCRAM-SHA-256", body
        (flen,) = struct.unpack("!i", body[mech_end + 1:mech_end + 5])
        client_first = body[mech_end + 5:mech_end + 5 + flen].decode()
        assert client_first.startswith("n,,"), client_first
        first_bare = client_first[3:]
        cnonce = dict(a.split("=", 1) for a in first_bare.split(","))["r"]
        nonce = cnonce + base64.b64encode(os.urandom(18)).decode()
        server_first = "r=%s,s=%s,i=%d" % (nonce, base64.b64encode(self.salt).decode(), self.iterations)
        c.sendall(be_msg(b"R", struct.pack("!I", 11) + server_first.encode()))
        with self.lock:
            rec["first_at"] = time.monotonic()
        if n <= self.hang_up:
            time.sleep(0.2)
            with self.lock:
                rec["hung_up"] = True
            return
        typ, body = self._msg(c)
        with self.lock:
            rec["final_at"] = time.monotonic()
        final = body.decode()
        wo_proof, proof = final.rsplit(",p=", 1)
        auth_message = ",".join([first_bare, server_first, wo_proof]).encode()
        client_key = hmac.new(self.salted, b"Client Key", hashlib.sha256).digest()
        stored_key = hashlib.sha256(client_key).digest()
        sig = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
        ok = wo_proof == "c=biws,r=" + nonce and \
            base64.b64decode(proof) == bytes(a ^ b for a, b in zip(client_key, sig))
        with self.lock:
            rec["proof_ok"] = ok
        if not ok:
            c.sendall(be_msg(b"E", b"SFATAL\x00C28P01\x00Mpassword authentication failed\x00\x00"))
            return
        server_key = hmac.new(self.salted, b"Server Key", hashlib.sha256).digest()
        v = base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest())
        out = be_msg(b"R", struct.pack("!I", 12) + b"v=" + v) + be_msg(b"R", struct.pack("!I", 0))
        for k, val in (("server_version", "15.99"), ("server_encoding", "UTF8"), ("client_encoding", "UTF8"),
                       ("DateStyle", "ISO, MDY"), ("TimeZone", "UTC"), ("integer_datetimes", "on"),
                       ("standard_conforming_strings", "on"), ("IntervalStyle", "postgres"),
                       ("application_name", ""), ("is_superuser", "off")):
            out += be_msg(b"S", k.encode() + b"\x00" + val.encode() + b"\x00")
        c.sendall(out + be_msg(b"K", struct.pack("!II", 4242, 1234)) + ready("I"))
        status = "I"
        while True:
            typ, body = self._msg(c)
            if typ == b"X":
                return
            if typ == b"S":
                c.sendall(ready(status))
                continue
            if typ != b"Q":
                continue
            word = body.rstrip(b"\x00").decode(errors="replace").strip().split(None, 1)
            word = word[0].upper().rstrip(";") if word else ""
            if word in ("BEGIN", "START"):
                status = "T"
                c.sendall(be_msg(b"C", b"BEGIN\x00") + ready(status))
            elif word in ("COMMIT", "ROLLBACK", "END", "ABORT"):
                status = "I"
                c.sendall(be_msg(b"C", word.encode() + b"\x00") + ready(status))
            elif word in ("SET", "RESET", "DISCARD", "DEALLOCATE"):
                c.sendall(be_msg(b"C", word.encode() + b"\x00") + ready(status))
            else:
                c.sendall(ONE_ROW + ready(status))

    def close(self):
        self.stop = True
        self.t.join(5)
        self.sock.close()
        for th in self.threads:
            th.join(5)


def slow_pool(srv):
    return {"slowscram": {"shards": {0: {"database": "slowscram", "servers": "127.0.0.1:%d:primary" % srv.port}},
                          "users": {"app": {"password": PASSWORDS["app"]}}}}


def run_in_thread(fn):
    box = {}

    def target():
        try:
            box["result"] = fn()
        except Exception as e:   # noqa: BLE001 - the test inspects it
            box["error"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def slow_login(p, timeout=180):
    """A raw client of the slow pool, logged in (its login waits for pgcat's
    login to the fake server, which waits for the key derivation)."""
    r = pgwire.Raw(p.host, p.port, timeout)
    r.login("app", PASSWORDS["app"], "slowscram", timeout=timeout)
    return r


@pytest.fixture
def scram_server():
    made = []

    def make(**kw):
        srv = ScramServer(PASSWORDS["app"], SCRAM_MAX_ITERATIONS, **kw)
        made.append(srv)
        return srv
    yield make
    for srv in made:
        srv.close()


def test_server_iterations_do_not_stall_the_worker(pgcat, scram_server):
    srv = scram_server()
    # One worker (the default of the tests): both pools are served by it.
    p = pgcat(general={"connect_timeout": 180000}, pools=slow_pool(srv))
    with p.connect() as a:
        assert a.execute("SELECT 1").fetchone()[0] == 1
        th, box = run_in_thread(lambda: slow_login(p))
        wait_until(lambda: (srv.session(0) or {}).get("first_at"), 30,
                   msg="pgcat to ask the fake server for its SCRAM challenge")
        # While pgcat derives the key, the client of the other pool runs
        # queries, each timed.
        latencies = []
        deadline = time.monotonic() + 180
        while srv.session(0)["final_at"] is None and time.monotonic() < deadline:
            t0 = time.monotonic()
            assert a.execute("SELECT 1").fetchone()[0] == 1
            latencies.append(time.monotonic() - t0)
        s0 = srv.session(0)
        assert s0["final_at"] is not None, "pgcat never answered the server's challenge"
        derivation = s0["final_at"] - s0["first_at"]
        print("derivation of %d iterations: %.2f s; %d queries of the other pool meanwhile, slowest %.3f s"
              % (SCRAM_MAX_ITERATIONS, derivation, len(latencies), max(latencies, default=0)))
        # (10M rounds of HMAC-SHA-256 cannot take less on this machine.)
        assert derivation > 0.5, derivation
        assert len(latencies) >= 10, latencies
        assert max(latencies) < 0.5, "the other pool's queries stalled: slowest %.3f s" % max(latencies)
        th.join(180)
        assert "error" not in box, box.get("error")
        b = box["result"]
        assert s0["proof_ok"], "the server refused pgcat's proof"
        rows, err, status = b.simple("SELECT 1")
        assert err is None and rows == [["1"]], (rows, err)

        # A second server connection of the role (b holds the first in a
        # transaction): the SaltedPassword is cached, nothing is derived.
        rows, err, status = b.simple("BEGIN")
        assert err is None and status == "T", (err, status)
        c = slow_login(p, timeout=30)
        rows, err, status = c.simple("SELECT 1")
        assert err is None and rows == [["1"]], (rows, err)
        s1 = srv.session(1)
        assert s1 is not None and s1["proof_ok"], s1
        assert s1["final_at"] - s1["first_at"] < 0.5, \
            "the second login derived again (%.2f s)" % (s1["final_at"] - s1["first_at"])
        b.simple("COMMIT")
        b.close()
        c.close()
        assert a.execute("SELECT 2").fetchone()[0] == 2
    assert_works(p)


def test_server_closed_during_derivation(pgcat, scram_server):
    """The fake server hangs up right after its challenge: the server
    connection is closed while its key is derived, and must not be touched
    when the result comes (ASan watches). A later login of the role
    completes with a correct proof."""
    srv = scram_server(hang_up=1)
    p = pgcat(general={"connect_timeout": 180000}, pools=slow_pool(srv))
    r = None
    try:
        r = slow_login(p, timeout=180)
    except (pgwire.ProtocolError, OSError, EOFError):
        pass   # the login failed with its server: what a client may see
    s0 = srv.session(0)
    assert s0 is not None and s0["hung_up"], s0

    # Logins fail fast for a moment after a failed connection (the pool's
    # back-off); then one goes through.
    def logged_in():
        nonlocal r
        if r is None:
            try:
                r = slow_login(p, timeout=180)
            except pgwire.ProtocolError:
                time.sleep(0.3)
        return r is not None
    wait_until(logged_in, 180, msg="a login of the slow pool to succeed")
    rows, err, status = r.simple("SELECT 1")
    assert err is None and rows == [["1"]], (rows, err)
    r.close()
    assert any(s["proof_ok"] for s in srv.sessions[1:]), srv.sessions
    # pgcat is whole: other clients served, no sanitizer report (the
    # fixture reads the log), alive.
    assert_works(p)
    assert p.alive()


def test_shutdown_during_derivation(pgcat, scram_server):
    """SIGTERM while a 10M-iteration derivation runs: pgcat exits cleanly
    (exit code 0, no leak report: the fixture checks both) without waiting
    for the derivation to end."""
    srv = scram_server()
    p = pgcat(general={"connect_timeout": 180000, "shutdown_timeout": 30000}, pools=slow_pool(srv))
    th, box = run_in_thread(lambda: slow_login(p))
    wait_until(lambda: (srv.session(0) or {}).get("first_at"), 30,
               msg="pgcat to ask the fake server for its SCRAM challenge")
    t0 = time.monotonic()
    rc = p.stop(signal.SIGTERM, timeout=60)
    took = time.monotonic() - t0
    assert rc == 0, rc
    th.join(10)
    assert srv.session(0)["final_at"] is None, "the derivation ended before the shutdown: the test proves nothing"
    print("pgcat exited %.2f s after SIGTERM during the derivation" % took)
    assert took < 5, took


# --- SASLprep ------------------------------------------------------------------

SASL_ROLE = "saslprep_user"

# A role's password, as created on PostgreSQL, and another spelling of it;
# whether the two log in alike is for PostgreSQL to say.
SASL_CASES = {
    "roman_numeral": ("IX-\u2168", "IX-IX"),               # NFKC: U+2168 is "IX"
    "soft_hyphen": ("pass\u00adword", "password"),         # mapped to nothing
    "prohibited_before_nfkc": ("a\u0340b", "a\u0300b"),    # U+0340 prohibited: raw bytes
    "bidi_before_nfkc": ("\u05d0\u2122\u05d0", "\u05d0TM\u05d0"),   # checked before NFKC
}


def login_ok(connect):
    try:
        with connect() as c:
            return c.execute("SELECT current_user").fetchone()[0]
    except psycopg.OperationalError as e:
        assert "password authentication failed" in str(e), e
        return None


@pytest.fixture
def sasl_role(pg):
    def make(password):
        with pg.connect("postgres") as c:
            c.execute("SET password_encryption = 'scram-sha-256'")
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(SASL_ROLE)))
            c.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(SASL_ROLE),
                                                                         sql.Literal(password)))
    yield make
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not pg.backends(SASL_ROLE), 10)
    with pg.connect("postgres") as c:
        c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(SASL_ROLE)))


@pytest.mark.parametrize("case", sorted(SASL_CASES))
def test_saslprep_passwords_as_postgresql(pgcat, pg, sasl_role, case):
    password, other = SASL_CASES[case]
    sasl_role(password)
    spellings = (password, other)
    direct = {s: login_ok(lambda: psycopg.connect(**pg.conninfo("appdb", SASL_ROLE, password=s),
                                                  connect_timeout=10)) for s in spellings}
    assert direct[password] == SASL_ROLE, "the role cannot log in to PostgreSQL with its own password"
    # pgcat.ini with each spelling PostgreSQL accepts: its own login to the
    # server uses it; a client's login to pgcat is checked against it.
    for configured in [s for s in spellings if direct[s]]:
        p = pgcat(users={SASL_ROLE: {"password": configured}})
        for s in spellings:
            through = login_ok(lambda: p.connect(user=SASL_ROLE, password=s))
            assert through == direct[s], \
                "pgcat.ini %r, client password %r: PostgreSQL says %s, through pgcat %s" % (
                    configured, s, direct[s] and "ok", through and "ok")
        # (The login that worked reached the server: pgcat logged in there too.)
        assert pg.count(SASL_ROLE, "appdb") >= 1
        r = p.psql("SELECT current_user", user=SASL_ROLE, password=password)
        assert r.stdout.strip() == SASL_ROLE
        assert p.stop() == 0
