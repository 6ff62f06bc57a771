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
