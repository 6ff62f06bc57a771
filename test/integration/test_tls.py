# SPDX-License-Identifier: MIT
"""TLS on both sides (SPEC §2 client_tls_*, server_tls_*, §3): clients
asking with SSLRequest get 'S' and a handshake done without blocking;
require refuses plain clients (28000) but takes a plain CancelRequest;
verify-ca / verify-full check client certificates; RELOAD reads new
certificates; pgcat reaches a hostssl-only PostgreSQL with
server_tls_sslmode. Certificates come from the openssl command line, made
per test module. Bad input: garbage instead of a ClientHello, a client that
leaves mid-handshake, bytes stuffed after the SSLRequest."""
import os
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile

import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, PG_OS_USER, PgServer, _setup_roles, wait_until
from test_admin import admin, command, show

SSL_REQUEST = struct.pack("!II", 8, 80877103)


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".crt", "-days", "2", "-subj", "/CN=%s" % name, cwd=d)


def make_cert(d, ca, name, cn, san=None):
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=%s" % cn, cwd=d)
    args = ["x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2"]
    if san:
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write("subjectAltName=%s\n" % san)
        args += ["-extfile", name + ".ext"]
    openssl(*args, cwd=d)
    os.chmod(os.path.join(d, name + ".key"), 0o600)


@pytest.fixture(scope="module")
def certs():
    # not under pytest's tmp dirs: those are private to root, and the
    # PostgreSQL server (user postgres) must read its certificate
    d = tempfile.mkdtemp(prefix="pgcat-certs-")
    os.chmod(d, 0o755)
    make_ca(d, "ca")
    make_ca(d, "otherca")
    make_cert(d, "ca", "server", "localhost", "DNS:localhost,IP:127.0.0.1")
    make_cert(d, "ca", "server2", "second.localhost", "DNS:localhost,IP:127.0.0.1")
    make_cert(d, "ca", "client_app", "app")
    make_cert(d, "otherca", "client_other", "app")
    for f in os.listdir(d):      # pgcat runs as root here, PostgreSQL as postgres
        shutil.chown(os.path.join(d, f), PG_OS_USER, PG_OS_USER)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def p(certs, name):
    return os.path.join(certs, name)


def tls_general(certs, mode="require", ca=None, cert="server"):
    g = {"client_tls_sslmode": mode, "client_tls_cert_file": p(certs, cert + ".crt"),
         "client_tls_key_file": p(certs, cert + ".key")}
    if ca:
        g["client_tls_ca_file"] = p(certs, ca + ".crt")
    return g


def served_cert_der(inst):
    """The certificate pgcat presents (SSLRequest, then a handshake)."""
    s = socket.create_connection((inst.host, inst.port), timeout=10)
    try:
        s.sendall(SSL_REQUEST)
        assert s.recv(1) == b"S"
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            return t.getpeercert(binary_form=True)
    finally:
        s.close()


def der_of(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


# --- clients to pgcat ---------------------------------------------------------

def test_require_and_verify_full_with_psql_psycopg_asyncpg(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "require"))
    with inst.connect(sslmode="require") as c:
        assert c.pgconn.ssl_in_use
        assert c.execute("SELECT 1").fetchone()[0] == 1
    with inst.connect(host="localhost", sslmode="verify-full", sslrootcert=p(certs, "ca.crt")) as c:
        assert c.pgconn.ssl_in_use
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="verify-ca", PGSSLROOTCERT=p(certs, "ca.crt"))
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(inst.port), "-U", "app", "-d", "appdb",
                          "-Atc", "SELECT current_user"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "app"

    import asyncio
    import asyncpg

    async def go():
        ctx = ssl.create_default_context(cafile=p(certs, "ca.crt"))
        conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                                     database="appdb", ssl=ctx)
        try:
            return await conn.fetchval("SELECT 40 + 2")
        finally:
            await conn.close()
    assert asyncio.run(go()) == 42
    # SHOW CLIENTS names the protocol and cipher of TLS clients
    with inst.connect(sslmode="require"):
        r = admin_tls(inst)
        _, rows = show(r, "CLIENTS")
        r.close()
        assert any(x["user"] == "app" and x["tls"].startswith("TLSv1.") for x in rows), rows


def admin_tls(inst):
    """The admin console over TLS (require refuses plain TCP)."""
    r = pgwire.Raw(inst.host, inst.port)
    r.sock.sendall(SSL_REQUEST)
    assert r.sock.recv(1) == b"S"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    r.sock = ctx.wrap_socket(r.sock, server_hostname="localhost")
    from conftest import ADMIN_PASSWORD, ADMIN_USER
    r.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat")
    return r


def test_wrong_ca_refused_by_the_client(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "require"))
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(sslmode="verify-ca", sslrootcert=p(certs, "otherca.crt"))
    assert "certificate verify failed" in str(ei.value), str(ei.value)
    with inst.connect(sslmode="require") as c:          # pgcat still serves
        c.execute("SELECT 1")


def test_require_refuses_plain_clients_but_takes_plain_cancel(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "require"))
    r = inst.raw()
    with pytest.raises(pgwire.ProtocolError) as ei:
        r.login("app", PASSWORDS["app"], "appdb")
    fields = ei.value.args[0]
    assert fields.get("C") == "28000" and "SSL required" in fields.get("M", ""), fields
    r.close()
    # a plain CancelRequest is taken (and pgcat stays up)
    s = socket.create_connection((inst.host, inst.port), timeout=5)
    s.sendall(struct.pack("!IIII", 16, 80877102, 1234, 5678))
    assert s.recv(16) == b""          # closed without an error message, as PostgreSQL does
    s.close()
    with inst.connect(sslmode="require") as c:
        c.execute("SELECT 1")


def test_prefer_serves_plain_and_tls_clients(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "prefer"))
    with inst.connect(sslmode="disable") as c:
        assert not c.pgconn.ssl_in_use
    with inst.connect(sslmode="require") as c:
        assert c.pgconn.ssl_in_use


@pytest.mark.parametrize("mode", ["verify-ca", "verify-full"])
def test_client_certificates_checked(pgcat, certs, mode):
    inst = pgcat(general=tls_general(certs, mode, ca="ca"))
    with pytest.raises(psycopg.OperationalError):            # no certificate
        inst.connect(sslmode="require")
    with pytest.raises(psycopg.OperationalError):            # signed by another CA
        inst.connect(sslmode="require", sslcert=p(certs, "client_other.crt"), sslkey=p(certs, "client_other.key"))
    with inst.connect(sslmode="require", sslcert=p(certs, "client_app.crt"), sslkey=p(certs, "client_app.key")) as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "app"
    # the certificate says CN=app: under verify-full another user may not use it
    kw = dict(sslmode="require", sslcert=p(certs, "client_app.crt"), sslkey=p(certs, "client_app.key"))
    if mode == "verify-full":
        with pytest.raises(psycopg.OperationalError) as ei:
            inst.connect(user="md5user", **kw)
        assert "certificate authentication failed" in str(ei.value), str(ei.value)
    else:
        with inst.connect(user="md5user", **kw) as c:
            c.execute("SELECT 1")


def test_reload_takes_new_certificate(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "require"))
    assert served_cert_der(inst) == der_of(p(certs, "server.crt"))
    inst.general.update(tls_general(certs, "require", cert="server2"))
    inst.write()
    r = admin_tls(inst)
    assert command(r, "RELOAD") is None
    r.close()
    assert served_cert_der(inst) == der_of(p(certs, "server2.crt"))
    # a reload with a missing key is refused as a whole; the running certificate stays
    inst.general["client_tls_key_file"] = p(certs, "missing.key")
    inst.write()
    r = admin_tls(inst)
    err = command(r, "RELOAD")
    r.close()
    assert err is not None and "client_tls_key_file" in str(err), err
    assert served_cert_der(inst) == der_of(p(certs, "server2.crt"))


# --- bad input ----------------------------------------------------------------

def test_garbage_instead_of_client_hello(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "require"))
    s = socket.create_connection((inst.host, inst.port), timeout=5)
    s.sendall(SSL_REQUEST)
    assert s.recv(1) == b"S"
    s.sendall(b"GET / HTTP/1.0\r\n\r\n" + os.urandom(300))
    s.settimeout(5)
    try:
        while s.recv(4096):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    with inst.connect(sslmode="require") as c:
        c.execute("SELECT 1")
    assert "TLS handshake failed" in inst.log()


def test_client_leaves_mid_handshake_and_stuffed_bytes(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "require"))
    # half a ClientHello, then gone
    s = socket.create_connection((inst.host, inst.port), timeout=5)
    s.sendall(SSL_REQUEST)
    assert s.recv(1) == b"S"
    s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    s.close()
    # bytes sent right behind the SSLRequest (before the 'S'): refused
    s = socket.create_connection((inst.host, inst.port), timeout=5)
    s.sendall(SSL_REQUEST + b"\x16\x03\x01\x00\x05hello")
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert not data.startswith(b"S") and b"unencrypted data" in data, data
    # two SSLRequests in a row inside TLS: the second gets 'N', nothing breaks
    for _ in range(5):
        with inst.connect(sslmode="require") as c:
            c.execute("SELECT 1")


# --- pgcat to a hostssl-only PostgreSQL ---------------------------------------------

@pytest.fixture(scope="module")
def pg_ssl(pg_root, certs):
    server = PgServer(pg_root, "sslonly")
    server.initdb()
    with open(server.datadir / "postgresql.conf", "a") as f:
        f.write("ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\n"
                % (p(certs, "server.crt"), p(certs, "server.key")))
    (server.datadir / "pg_hba.conf").write_text(
        "local all all trust\n"
        "hostssl all postgres 127.0.0.1/32 trust\n"
        "hostssl all all 127.0.0.1/32 scram-sha-256\n")
    server.start()
    try:
        _setup_roles(server)
        yield server
    finally:
        server.stop()


def ssl_pool(pg_ssl):
    return {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg_ssl.port}},
            "users": {"app": {"password": PASSWORDS["app"]}}}


def test_server_tls_require_reaches_hostssl_only_server(pgcat, pg_ssl):
    inst = pgcat(general={"server_tls_sslmode": "require"}, replace_pools={"appdb": ssl_pool(pg_ssl)})
    with inst.connect() as c:
        assert c.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0] is True
    r = admin(inst)
    _, rows = show(r, "SERVERS")
    r.close()
    assert rows and all(x["tls"].startswith("TLSv1.") for x in rows), rows


@pytest.fixture(scope="module")
def pg_certauth(pg_root, certs):
    """A server that takes TLS logins by client certificate only (hostssl
    ... cert: clientcert=verify-full, the certificate's CN is the role)."""
    server = PgServer(pg_root, "certauth")
    server.initdb()
    with open(server.datadir / "postgresql.conf", "a") as f:
        f.write("ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\nssl_ca_file = '%s'\n"
                % (p(certs, "server.crt"), p(certs, "server.key"), p(certs, "ca.crt")))
    (server.datadir / "pg_hba.conf").write_text(
        "local all all trust\n"
        "hostssl all postgres 127.0.0.1/32 trust\n"
        "hostssl all all 127.0.0.1/32 cert\n")
    server.start()
    try:
        _setup_roles(server)
        yield server
    finally:
        server.stop()


def test_server_tls_client_certificate(pgcat, pg_certauth, certs):
    pool = {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg_certauth.port}},
            "users": {"app": {"password": PASSWORDS["app"]}}}
    verify = {"server_tls_sslmode": "verify-full", "server_tls_ca_file": p(certs, "ca.crt")}
    # Without a certificate of its own, pgcat cannot log in there.
    inst = pgcat(general=dict(verify, connect_timeout=2000), replace_pools={"appdb": pool})
    with pytest.raises(psycopg.Error) as ei:
        with inst.connect() as c:
            c.execute("SELECT 1")
    assert "certificate" in str(ei.value).lower(), str(ei.value)
    # With server_tls_cert_file / server_tls_key_file: logged in by certificate.
    inst2 = pgcat(general=dict(verify, server_tls_cert_file=p(certs, "client_app.crt"),
                               server_tls_key_file=p(certs, "client_app.key")),
                  replace_pools={"appdb": pool})
    with inst2.connect() as c:
        ssl_on, dn = c.execute("SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
        assert ssl_on is True and "CN=app" in dn, dn
    # Reloadable: a certificate of another CA, and new server connections
    # are refused by the server (the open ones stay).
    inst2.general.update(server_tls_cert_file=p(certs, "client_other.crt"),
                         server_tls_key_file=p(certs, "client_other.key"), connect_timeout=2000)
    inst2.write()
    r = admin(inst2)
    assert command(r, "RELOAD") is None
    assert command(r, "RECONNECT") is None
    r.close()
    wait_until(lambda: pg_certauth.count("app", "appdb") == 0, 10, msg="old server connections to close")
    with pytest.raises(psycopg.Error):
        with inst2.connect() as c:
            c.execute("SELECT 1")
    # a key that does not match the certificate: the reload is refused whole
    inst2.general.update(server_tls_cert_file=p(certs, "client_app.crt"),
                         server_tls_key_file=p(certs, "client_other.key"))
    inst2.write()
    r = admin(inst2)
    err = command(r, "RELOAD")
    r.close()
    assert err is not None and "server_tls_key_file" in str(err), err


def test_server_tls_prefer_is_the_default(pgcat, pg_ssl):
    inst = pgcat(replace_pools={"appdb": ssl_pool(pg_ssl)})
    with inst.connect() as c:
        assert c.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0] is True


def test_server_tls_disable_gives_a_clear_error(pgcat, pg_ssl):
    inst = pgcat(general={"server_tls_sslmode": "disable"}, replace_pools={"appdb": ssl_pool(pg_ssl)})
    with pytest.raises(psycopg.Error) as ei:
        with inst.connect() as c:
            c.execute("SELECT 1")
    assert "pg_hba.conf" in str(ei.value) or "no encryption" in str(ei.value), str(ei.value)


def test_server_verify_full_checks_ca_and_host(pgcat, pg_ssl, certs):
    good = pgcat(general={"server_tls_sslmode": "verify-full", "server_tls_ca_file": p(certs, "ca.crt")},
                 replace_pools={"appdb": ssl_pool(pg_ssl)})
    with good.connect() as c:
        c.execute("SELECT 1")
    bad = pgcat(general={"server_tls_sslmode": "verify-full", "server_tls_ca_file": p(certs, "otherca.crt")},
                replace_pools={"appdb": ssl_pool(pg_ssl)})
    with pytest.raises(psycopg.Error) as ei:
        with bad.connect() as c:
            c.execute("SELECT 1")
    assert "certificate verify failed" in str(ei.value) or "TLS handshake" in str(ei.value), str(ei.value)


def test_cancel_reaches_a_hostssl_only_server(pgcat, pg_ssl, certs):
    """CancelRequest: from a TLS client to pgcat, and from pgcat to a server
    that takes only TLS logins (PostgreSQL reads a CancelRequest before
    pg_hba, so pgcat sends it in clear)."""
    import threading
    import time
    g = {"server_tls_sslmode": "require"}
    g.update(tls_general(certs, "require"))
    inst = pgcat(general=g, replace_pools={"appdb": ssl_pool(pg_ssl)})
    with inst.connect(sslmode="require") as c:
        t0 = time.monotonic()
        threading.Timer(0.5, c.cancel).start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("SELECT pg_sleep(20)")
        assert time.monotonic() - t0 < 10
        assert c.execute("SELECT 1").fetchone()[0] == 1


# --- every close of a TLS connection sends close_notify ----------------------------
# PostgreSQL ends each TLS connection with SSL_shutdown, and libpq 17 (OpenSSL
# 3) reports a close without it as "SSL error: unexpected eof while reading":
# its TLS cancel connection failed, and so could a refused login.

def tls_raw(inst, small_window=False):
    """A raw connection over TLS that reports an EOF without close_notify
    (SSLEOFError) instead of taking it as a clean end. small_window: small
    segments and a small receive buffer, so that the kernel buffers little of
    what pgcat sends (on loopback, 64 kB segments make its send buffer grow
    to megabytes)."""
    r = pgwire.Raw(inst.host, inst.port)
    if small_window:
        r.sock.close()
        r.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        r.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)    # before connect: in the SYN
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        r.sock.settimeout(10)
        r.sock.connect((inst.host, inst.port))
    r.sock.sendall(SSL_REQUEST)
    assert r.sock.recv(1) == b"S"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    r.sock = ctx.wrap_socket(r.sock, server_hostname="localhost", suppress_ragged_eofs=False)
    return r


def assert_closed_with_close_notify(r, timeout=10):
    """Read until pgcat ends the connection: recv returns b"" only on a
    close_notify (suppress_ragged_eofs=False); an EOF without one raises
    SSLEOFError (UNEXPECTED_EOF_WHILE_READING)."""
    if r.eof:                # Raw already read the clean end
        r.close()
        return
    r.sock.settimeout(timeout)
    try:
        while r.sock.recv(65536):
            pass
    except ssl.SSLEOFError as e:
        pytest.fail("pgcat closed the TLS connection without close_notify: %s" % e)
    finally:
        r.close()


def test_libpq17_cancel_over_tls(pgcat, pg, certs):
    """libpq 17's cancel_safe with sslmode=require: SSLRequest, handshake,
    CancelRequest inside TLS; pgcat's close must end the TLS session cleanly."""
    from psycopg import errors
    from test_cancel import run_in_thread, sleeping_backend
    assert psycopg.pq.version() >= 170000, "requirements-test.txt pins a psycopg with libpq 17+"
    inst = pgcat(general=tls_general(certs, "require"))
    c = inst.connect(sslmode="require")
    assert c.pgconn.ssl_in_use
    t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(30)"))
    wait_until(lambda: sleeping_backend(pg), 10, msg="pg_sleep running on the server")
    c.cancel_safe(timeout=10)       # raises on "SSL error: unexpected eof while reading"
    t.join(10)
    assert not t.is_alive(), "the query was not cancelled"
    assert isinstance(box.get("error"), errors.QueryCanceled), box
    assert c.execute("SELECT 2").fetchone()[0] == 2
    c.close()


def test_refused_login_over_tls_reports_the_auth_error(pgcat, certs):
    inst = pgcat(general=tls_general(certs, "require"))
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(sslmode="require", password="wrong")
    text = str(ei.value)
    assert 'password authentication failed for user "app"' in text, text
    assert "SSL" not in text and "eof" not in text.lower(), text
    with inst.connect(sslmode="require") as c:
        c.execute("SELECT 1")


def test_every_tls_close_sends_close_notify(pgcat, certs):
    g = tls_general(certs, "require")
    g["client_idle_timeout"] = 1000
    inst = pgcat(general=g)
    # a cancel connection (an unknown key: closed without a word, as PostgreSQL does)
    r = tls_raw(inst)
    r.send(pgwire.cancel_request(1234, 5678))
    assert_closed_with_close_notify(r)
    # a refused login: FATAL 28P01, then the close
    r = tls_raw(inst)
    with pytest.raises(pgwire.ProtocolError) as ei:
        r.login("app", "wrong", "appdb")
    assert ei.value.args[0].get("C") == "28P01", ei.value.args
    assert_closed_with_close_notify(r)
    # the admin console, closed after the client's Terminate
    from conftest import ADMIN_PASSWORD, ADMIN_USER
    r = tls_raw(inst)
    r.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat")
    r.send(pgwire.terminate())
    assert_closed_with_close_notify(r)
    # a client logged in, then closed by client_idle_timeout
    r = tls_raw(inst)
    r.login("app", PASSWORDS["app"], "appdb")
    assert_closed_with_close_notify(r, timeout=10)
    # a client that sends Terminate
    r = tls_raw(inst)
    r.login("app", PASSWORDS["app"], "appdb")
    r.send(pgwire.terminate())
    assert_closed_with_close_notify(r)
    with inst.connect(sslmode="require") as c:
        c.execute("SELECT 1")




def tcp_state(local_port, remote_port):
    """The state (hex, as /proc/net/tcp has it: 01 ESTABLISHED) of the
    loopback socket local_port -> remote_port, None if there is none."""
    want = (":%04X" % local_port, ":%04X" % remote_port)
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1].endswith(want[0]) and fields[2].endswith(want[1]):
                return fields[3]
    return None


def test_close_with_output_queued_sends_it_then_close_notify(pgcat, certs):
    """Clients closed (admin KILL) while a result they do not read fills
    pgcat's output and the socket: the output is written from the event loop
    after the close and ends with close_notify; a client that never reads
    again is given up after IO_TLS_CLOSE_MS (5 s)."""
    import time
    inst = pgcat(general=tls_general(certs, "require"))
    big = pgwire.query("SELECT repeat('x', 2000) FROM generate_series(1, 20000)")   # 40 MB
    # both before any large transfer: Linux seeds a new connection's
    # congestion window from the last ones to the same address, and a big
    # one lets the kernel take all of pgcat's output at once
    reader, sleeper = tls_raw(inst, small_window=True), tls_raw(inst, small_window=True)
    for r in (reader, sleeper):
        r.login("app", PASSWORDS["app"], "appdb")
        r.send(big)
    time.sleep(1)               # pgcat's output budget and both socket buffers fill up
    a = admin_tls(inst)
    assert command(a, "KILL appdb") is None
    assert command(a, "RESUME appdb") is None     # KILL leaves the pool paused
    a.close()
    # reads again after the close: what was queued, the FATAL last, close_notify
    got = b""
    reader.sock.settimeout(10)
    try:
        while True:
            chunk = reader.sock.recv(65536)
            if not chunk:
                break
            got = (got + chunk)[-4096:]
    except ssl.SSLEOFError as e:
        pytest.fail("pgcat closed the TLS connection without close_notify: %s" % e)
    reader.close()
    assert b"FATAL" in got, got[-200:]
    # never reads again: pgcat gives up within its 5 s and closes its end
    # (whether the kernel took the rest or not: its socket leaves ESTABLISHED)
    client_port = sleeper.sock.getsockname()[1]
    assert wait_until(lambda: tcp_state(inst.port, client_port) not in ("01", None), 8,
                      msg="pgcat closed a client that reads nothing"), tcp_state(inst.port, client_port)
    sleeper.sock.settimeout(10)
    try:
        while sleeper.sock.recv(65536):
            pass
    except (ssl.SSLEOFError, ConnectionResetError):
        pass                    # given up with output unsent: no close_notify then
    sleeper.close()
    with inst.connect(sslmode="require") as c:
        c.execute("SELECT 1")


# --- direct TLS (PostgreSQL 17's sslnegotiation=direct) ----------------------------
# A ClientHello as the very first bytes, no SSLRequest; ALPN "postgresql"
# required. pgcat takes it whenever client TLS is on, and opens server
# connections that way with server_tls_negotiation = direct.

def direct_tls_raw(inst, alpn=None):
    """A raw connection that starts with a ClientHello (no SSLRequest)."""
    r = pgwire.Raw(inst.host, inst.port)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    r.sock = ctx.wrap_socket(r.sock, server_hostname="localhost")
    return r


def test_direct_tls_psycopg_login_query_and_cancel(pgcat, pg, certs):
    """libpq's sslnegotiation=direct (psycopg's bundled libpq 17+): login,
    a query, and cancel_safe, whose cancel connection is direct TLS too."""
    from psycopg import errors
    from test_cancel import run_in_thread, sleeping_backend
    assert psycopg.pq.version() >= 170000, "requirements-test.txt pins a psycopg with libpq 17+"
    inst = pgcat(general=tls_general(certs, "require"))
    c = inst.connect(sslmode="require", sslnegotiation="direct")
    assert c.pgconn.ssl_in_use
    assert c.execute("SELECT current_user").fetchone()[0] == "app"
    t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(30)"))
    wait_until(lambda: sleeping_backend(pg), 10, msg="pg_sleep running on the server")
    c.cancel_safe(timeout=10)
    t.join(10)
    assert not t.is_alive(), "the query was not cancelled"
    assert isinstance(box.get("error"), errors.QueryCanceled), box
    assert c.execute("SELECT 2").fetchone()[0] == 2
    c.close()
    # verify-full over direct TLS, and the SSLRequest way still works beside it
    with inst.connect(host="localhost", sslmode="verify-full", sslrootcert=p(certs, "ca.crt"),
                      sslnegotiation="direct") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    with inst.connect(sslmode="require", sslnegotiation="postgres") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_direct_tls_needs_alpn_postgresql(pgcat, certs):
    """As PostgreSQL 17: a direct ClientHello without ALPN, or with another
    protocol only, is refused; one offering "postgresql" logs in."""
    inst = pgcat(general=tls_general(certs, "prefer"))
    for alpn in (None, ["http/1.1"]):
        with pytest.raises((ssl.SSLError, ConnectionError)) as ei:
            r = direct_tls_raw(inst, alpn)
            r.login("app", PASSWORDS["app"], "appdb")     # not reached: the handshake fails
        assert "NO APPLICATION PROTOCOL" in str(ei.value).upper().replace("_", " "), (alpn, ei.value)
    r = direct_tls_raw(inst, ["http/1.1", "postgresql"])
    assert r.sock.selected_alpn_protocol() == "postgresql"
    r.login("app", PASSWORDS["app"], "appdb")
    r.close()
    # with an SSLRequest, ALPN is optional, but if offered it must name postgresql
    s = socket.create_connection((inst.host, inst.port), timeout=10)
    s.sendall(SSL_REQUEST)
    assert s.recv(1) == b"S"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    with pytest.raises(ssl.SSLError) as ei:
        ctx.wrap_socket(s, server_hostname="localhost")
    assert "NO APPLICATION PROTOCOL" in str(ei.value).upper().replace("_", " "), ei.value
    s.close()
    assert "direct TLS handshake failed" in inst.log()
    with inst.connect(sslmode="require") as c:           # pgcat still serves
        c.execute("SELECT 1")
    with inst.connect(sslmode="disable") as c:
        c.execute("SELECT 1")


def test_direct_tls_refused_with_client_tls_off(pgcat):
    """Client TLS off: a ClientHello as the first bytes is refused as
    PostgreSQL refuses it, by closing without a word (an ErrorResponse in
    clear means nothing to a TLS client); pgcat keeps serving."""
    inst = pgcat()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["postgresql"])
    # what a TLS client sends first: a ClientHello record, taken out of a
    # memory BIO so that the bytes pgcat answers with can be read raw
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16"
    s = socket.create_connection((inst.host, inst.port), timeout=10)
    s.sendall(hello)
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert data == b"", data
    assert "direct TLS connection refused: client TLS is off" in inst.log()
    with pytest.raises(psycopg.OperationalError):
        inst.connect(sslmode="require", sslnegotiation="direct")
    with inst.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1



# --- pgcat to servers with server_tls_negotiation = direct -------------------------

def fake_tls_server(certs, alpn):
    """A TLS server on a free port that takes one connection and records
    what pgcat sent: its first byte (before any TLS), the ALPN agreed on and
    the startup packet inside TLS; it then answers with a FATAL. alpn: what
    the server accepts (None: no ALPN callback, as PostgreSQL 16)."""
    import threading
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    seen = {}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(p(certs, "server.crt"), p(certs, "server.key"))
    if alpn:
        ctx.set_alpn_protocols(alpn)

    def serve():
        try:
            conn, _ = ls.accept()
            conn.settimeout(10)
            seen["first"] = conn.recv(1, socket.MSG_PEEK)
            if seen["first"] != b"\x16":
                conn.close()
                return
            t = ctx.wrap_socket(conn, server_side=True)
            seen["alpn"] = t.selected_alpn_protocol()
            head = t.recv(8)
            if len(head) < 8:           # pgcat went away after the handshake
                t.close()
                return
            n = struct.unpack("!I", head[:4])[0]
            body = head[4:]
            while len(body) < n - 4:
                chunk = t.recv(n - 4 - len(body))
                if not chunk:
                    break
                body += chunk
            seen["startup"] = body
            msg = b"SFATAL\0C28000\0Mfake server says no\0\0"
            t.sendall(b"E" + struct.pack("!I", 4 + len(msg)) + msg)
            t.close()
        except (OSError, ssl.SSLError) as e:
            seen["error"] = repr(e)
        finally:
            ls.close()
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return ls.getsockname()[1], seen, th


def one_server_pool(port):
    return {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % port}},
            "users": {"app": {"password": PASSWORDS["app"]}}}


def test_server_direct_tls_sends_client_hello_with_alpn_first(pgcat, certs):
    """server_tls_negotiation = direct: the first byte pgcat sends a server
    is a TLS handshake record (no SSLRequest), it offers ALPN postgresql,
    and the startup packet follows inside TLS."""
    port, seen, th = fake_tls_server(certs, ["postgresql"])
    inst = pgcat(general={"server_tls_sslmode": "require", "server_tls_negotiation": "direct"},
                 replace_pools={"appdb": one_server_pool(port)})
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect()
    th.join(10)
    assert seen.get("first") == b"\x16", seen
    assert seen.get("alpn") == "postgresql", seen
    assert struct.unpack("!I", seen["startup"][:4])[0] >> 16 == 3, seen
    assert b"user\0app\0" in seen["startup"], seen
    assert "fake server says no" in str(ei.value), str(ei.value)


def test_server_direct_tls_refuses_a_server_without_alpn(pgcat, certs):
    """As libpq 17: a server that agreed on no ALPN in a direct handshake
    is not PostgreSQL 17; the login fails with a message saying so."""
    port, seen, th = fake_tls_server(certs, None)
    inst = pgcat(general={"server_tls_sslmode": "require", "server_tls_negotiation": "direct"},
                 replace_pools={"appdb": one_server_pool(port)})
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect()
    th.join(10)
    assert seen.get("first") == b"\x16", seen
    assert "ALPN" in str(ei.value), str(ei.value)
    assert "startup" not in seen, seen


def pg17_bin():
    """A PostgreSQL 17+ bin directory from PGCAT_PG_MAJORS ("17:/path/bin,18:..."),
    or None."""
    for item in os.environ.get("PGCAT_PG_MAJORS", "").split(","):
        major, _, path = item.strip().partition(":")
        if major.isdigit() and int(major) >= 17 and path and os.path.exists(os.path.join(path, "postgres")):
            return path
    return None


@pytest.fixture(scope="module")
def pg17_ssl(pg_root, certs):
    """A hostssl-only PostgreSQL 17 or later (the first with direct TLS),
    logging how each connection negotiated TLS."""
    import conftest
    from pathlib import Path
    bindir = pg17_bin()
    if not bindir:
        msg = "no PostgreSQL 17+ in PGCAT_PG_MAJORS: direct TLS to a real server not tested"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)

    class Pg17(PgServer):
        """PgServer with another bin directory (conftest reads PG_BIN at each call)."""
        def _with_bin(self, fn):
            old = conftest.PG_BIN
            conftest.PG_BIN = Path(bindir)
            try:
                return fn()
            finally:
                conftest.PG_BIN = old

        def initdb(self):
            return self._with_bin(super().initdb)

        def start(self):
            return self._with_bin(super().start)

        def stop(self):
            return self._with_bin(super().stop)

    server = Pg17(pg_root, "direct17")
    server.initdb()
    with open(server.datadir / "postgresql.conf", "a") as f:
        f.write("ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\ntrace_connection_negotiation = on\n"
                % (p(certs, "server.crt"), p(certs, "server.key")))
    (server.datadir / "pg_hba.conf").write_text(
        "local all all trust\n"
        "hostssl all postgres 127.0.0.1/32 trust\n"
        "hostssl all all 127.0.0.1/32 scram-sha-256\n")
    server.start()
    try:
        _setup_roles(server)
        yield server
    finally:
        server.stop()


def test_server_direct_tls_to_postgresql_17(pgcat, pg17_ssl, pg_ssl, certs):
    """server_tls_negotiation = direct against a real PostgreSQL 17: the
    login, a query, and PostgreSQL's own log says the connection was direct
    TLS. Against PostgreSQL 15 (no direct TLS) the login fails with a
    message that says why."""
    off = pg17_ssl.log_offset()
    inst = pgcat(general={"server_tls_sslmode": "verify-full", "server_tls_ca_file": p(certs, "ca.crt"),
                          "server_tls_negotiation": "direct"},
                 replace_pools={"appdb": ssl_pool(pg17_ssl)})
    with inst.connect() as c:
        row = c.execute("SELECT ssl, current_setting('server_version_num')::int "
                        "FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
        assert row[0] is True and row[1] >= 170000, row
    log = pg17_ssl.log_since(off)
    assert "direct SSL connection accepted" in log, log
    # the replica lag monitor (a client of its own) connects the same way
    pool = ssl_pool(pg17_ssl)
    pool["shards"][0]["servers"] = "127.0.0.1:%d:primary, localhost:%d:replica" % (pg17_ssl.port, pg17_ssl.port)
    pgcat(general={"server_tls_sslmode": "require", "server_tls_negotiation": "direct",
                   "replica_lag_check_interval": 200},
          replace_pools={"appdb": pool})
    q = ("SELECT a.pid FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
         "WHERE a.application_name = 'pgcat lag monitor' AND s.ssl")
    wait_until(lambda: len(pg17_ssl.sql(q, dbname="postgres")) >= 2, 10, msg="lag monitor over TLS")
    lines = pg17_ssl.log_since(off, limit=100000).splitlines()
    for (pid,) in pg17_ssl.sql(q, dbname="postgres"):     # log_line_prefix has the pid
        assert any("[%d]" % pid in ln and "direct SSL connection accepted" in ln for ln in lines), pid
    # the same pgcat setting towards PostgreSQL 15
    old = pgcat(general={"server_tls_sslmode": "require", "server_tls_negotiation": "direct"},
                replace_pools={"appdb": ssl_pool(pg_ssl)})
    with pytest.raises(psycopg.OperationalError) as ei:
        old.connect()
    assert "PostgreSQL 17" in str(ei.value), str(ei.value)


def test_console_set_of_tls_keys_applies_at_once(pgcat, pg_ssl, certs):
    """SET of client_tls_* and server_tls_* on the console is used by the
    next handshake, one key at a time as PgBouncer's console takes them;
    while the settings cannot be used together (a file that cannot be
    read, a key of another certificate) the running TLS stays, and the
    reply warns."""
    inst = pgcat(replace_pools={"appdb": ssl_pool(pg_ssl)})
    r = admin(inst)
    assert command(r, "SET client_tls_key_file = '%s'" % p(certs, "server.key")) is None
    assert command(r, "SET client_tls_cert_file = '%s'" % p(certs, "server.crt")) is None
    assert command(r, "SET client_tls_sslmode = require") is None
    with inst.connect(sslmode="require") as c:
        assert c.pgconn.ssl_in_use
    r.send(pgwire.query("SET client_tls_cert_file = '%s'" % p(certs, "no-such.crt")))
    msgs = r.read_until((b"Z",))
    notices = [pgwire.parse_fields(m[1]) for m in msgs if m[0] == b"N"]
    assert not any(m[0] == b"E" for m in msgs), msgs
    assert notices and "client_tls_cert_file" in notices[0]["M"] and "stay" in notices[0]["M"], msgs
    with inst.connect(host="localhost", sslmode="verify-full", sslrootcert=p(certs, "ca.crt")) as c:
        assert c.pgconn.ssl_in_use   # the running TLS stayed
    # a key, then its certificate, one at a time: the new pair serves
    assert command(r, "SET client_tls_key_file = '%s'" % p(certs, "server2.key")) is None
    assert command(r, "SET client_tls_cert_file = '%s'" % p(certs, "server2.crt")) is None
    assert served_cert_der(inst) == der_of(p(certs, "server2.crt"))
    r.close()
    r = admin_tls(inst)
    # Server side: verify-full with no CA file (the system's store, which
    # does not know this CA), then a wrong CA, make new server logins fail...
    assert command(r, "SET server_tls_sslmode = verify-full") is None
    assert command(r, "RECONNECT") is None
    with pytest.raises(psycopg.Error):
        with inst.connect(sslmode="require") as c:
            c.execute("SELECT 1")
    assert command(r, "SET server_tls_ca_file = '%s'" % p(certs, "otherca.crt")) is None
    with pytest.raises(psycopg.Error):
        with inst.connect(sslmode="require") as c:
            c.execute("SELECT 1")
    # ... the right one makes them work; disable (a hostssl-only server)
    # makes them fail again.
    assert command(r, "SET server_tls_ca_file = '%s'" % p(certs, "ca.crt")) is None
    wait_until(lambda: _works(inst), 10, msg="a login once server_tls_ca_file is right")
    assert command(r, "SET server_tls_sslmode = disable") is None
    assert command(r, "RECONNECT") is None
    with pytest.raises(psycopg.Error):
        with inst.connect(sslmode="require") as c:
            c.execute("SELECT 1")
    r.close()


def _works(inst):
    try:
        with inst.connect(sslmode="require") as c:
            return c.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0] is True
    except psycopg.Error:
        return False


def test_a_server_tls_change_closes_the_servers_opened_before(pgcat, pg_ssl):
    """As PgBouncer: a reload that changes the server TLS settings closes
    the server connections made with the old ones (idle at once, in use once
    idle); one that changes nothing of them keeps them."""
    inst = pgcat(general={"default_pool_size": 2}, replace_pools={"appdb": ssl_pool(pg_ssl)})
    busy = inst.connect(autocommit=False)
    busy_pid = busy.execute("SELECT pg_backend_pid()").fetchone()[0]     # in a transaction
    with inst.connect() as c:
        idle_pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    assert idle_pid != busy_pid

    def alive(pid):
        return pg_ssl.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,),
                          dbname="postgres")[0][0] == 1
    r = admin(inst)
    assert command(r, "RELOAD") is None                 # nothing changed: both stay
    assert alive(idle_pid) and alive(busy_pid)
    assert "obsolete connection" not in inst.log()
    inst.general["server_tls_sslmode"] = "require"
    inst.write()
    assert command(r, "RELOAD") is None
    wait_until(lambda: not alive(idle_pid), 10, msg="the idle server to be closed")
    assert alive(busy_pid), "a server in use was closed under its client"
    assert busy.execute("SELECT 1").fetchone()[0] == 1
    busy.commit()
    wait_until(lambda: not alive(busy_pid), 10, msg="the server to be closed once idle")
    assert "pool appdb: server TLS settings changed" in inst.log()
    with inst.connect() as c:
        assert c.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0] is True
    busy.close()
    r.close()


def test_tls_versions_and_cipher_lists(pgcat, certs):
    """client_tls_protocols bounds the versions a client may negotiate,
    client_tls13_ciphers the TLS 1.3 suites (PgBouncer's keys), SET too;
    a suite OpenSSL does not know is refused and the running ones stay."""
    g = tls_general(certs)
    g.update({"client_tls_protocols": "tlsv1.3", "client_tls13_ciphers": "TLS_CHACHA20_POLY1305_SHA256",
              "log_connections": "true"})
    inst = pgcat(general=g)

    def client_tls():
        with inst.connect(sslmode="require", application_name="tls_probe"):
            r = admin_tls(inst)
            _, rows = show(r, "CLIENTS")
            r.close()
        return [x["tls"] for x in rows if x["application_name"] == "tls_probe"][0]
    assert client_tls() == "TLSv1.3/TLS_CHACHA20_POLY1305_SHA256"
    assert "tls=TLSv1.3/TLS_CHACHA20_POLY1305_SHA256" in inst.log()
    r = admin_tls(inst)
    assert command(r, "SET client_tls13_ciphers = 'TLS_AES_256_GCM_SHA384'") is None
    assert client_tls() == "TLSv1.3/TLS_AES_256_GCM_SHA384"
    r.send(pgwire.query("SET client_tls13_ciphers = 'unknown'"))
    notices = [pgwire.parse_fields(m) for t, m in r.read_until() if t == b"N"]
    assert any("failed to set the TLSv1.3 cipher suites" in n.get("M", "") for n in notices), notices
    assert client_tls() == "TLSv1.3/TLS_AES_256_GCM_SHA384"     # the running settings stay
    # TLS 1.2 only: a client that can do 1.3 settles for 1.2.
    assert command(r, "SET client_tls13_ciphers = ''") is None
    assert command(r, "SET client_tls_protocols = 'tlsv1.2'") is None
    assert client_tls().startswith("TLSv1.2/")
    r.close()


def test_reboot_a_tls_listener_keeps_its_listening_group_draining(pgcat, pg, certs, tmp_path):
    """-R in transaction mode: clients that LISTEN move as one group with
    their pool's listening connection (doc/operations.md); a TLS client
    cannot move, so its group stays whole on the old process and drains.
    SHOW CLIENTS on the old process says why for each; both keep receiving
    notifications there until they leave."""
    import re
    import time
    from conftest import pgcat_process
    general = dict(tls_general(certs, "prefer"), shutdown_timeout=20000)
    inst = pgcat(general=general)
    secure = inst.connect(sslmode="require")
    secure.execute("SET application_name = 'secure'")
    secure.execute("LISTEN tls_group")
    plain = inst.connect(sslmode="disable")
    plain.execute("SET application_name = 'plain'")
    plain.execute("LISTEN tls_group")
    other = inst.connect(sslmode="disable", autocommit=False)   # no LISTEN: it moves
    other.execute("SET application_name = 'other'")             # (in a transaction: it holds
    console = admin(inst)                                         # the handover open meanwhile)
    with pgcat_process(["-R", inst.ini], tmp_path / "b.log") as b:
        wait_until(lambda: re.search(r"moving \d+ clients", inst.log()), 15)
        _, rows = show(console, "CLIENTS")
        by_app = {x["application_name"]: x["upgrade"] for x in rows if x["user"] == "app"}
        assert by_app == {"secure": "draining: tls", "plain": "draining: listens with a client that stays",
                          "other": "moving"}, rows
        other.commit()
        wait_until(lambda: "left to drain" in inst.log(), 15)
        _, rows = show(console, "CLIENTS")
        by_app = {x["application_name"]: x["upgrade"] for x in rows if x["user"] == "app"}
        assert by_app == {"secure": "draining", "plain": "draining"}, rows
        assert re.search(r"1 clients moved to the new process, 3 left to drain", inst.log()), inst.log()[-2000:]
        assert "listening clients moved" not in inst.log()
        with pg.connect(autocommit=True) as direct:
            direct.execute("NOTIFY tls_group, 'still here'")
        for c in (secure, plain):
            got = next(c.notifies(timeout=10), None)
            assert got is not None and got.payload == "still here"
        assert other.execute("SHOW application_name").fetchone()[0] == "other"
        for c in (secure, plain, console):
            c.close()
        assert inst.proc.wait(20) == 0
        inst.stopped_by_test = True
        assert b.poll() is None
        other.close()
