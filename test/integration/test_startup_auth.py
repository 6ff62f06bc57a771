# SPDX-License-Identifier: MIT
"""Startup and authentication (SPEC §3): clients log in to pgcat with
SCRAM-SHA-256, MD5, a password in clear or trust; pgcat logs in to PostgreSQL with trust,
cleartext, MD5 or SCRAM; the exact errors for a wrong password, an unknown
user and an unknown database; SSLRequest/GSSENCRequest; listening on TCP
(IPv4, IPv6) and the unix socket."""
import asyncio
import os
import socket
import struct
import threading
import time

import asyncpg
import psycopg
import pytest

import pgwire
from conftest import (PASSWORDS, assert_pool_idle, assert_works, md5_secret, port_open,
                      wait_until)
from test_admin import admin, command
from test_auth_file import pg_secret, scram_secret

AUTH_CLEARTEXT = 3


def auth_code(pgc, user, dbname="appdb"):
    """The authentication request pgcat answers a StartupMessage with."""
    r = pgc.raw()
    try:
        r.startup(user, dbname)
        m = r.read_msg()
        assert m is not None, "pgcat closed the connection right after StartupMessage"
        typ, payload = m
        if typ == b"E":
            return "E", pgwire.parse_fields(payload)
        assert typ == b"R", "expected an Authentication message, got %r" % typ
        code = struct.unpack("!I", payload[:4])[0]
        return code, payload[4:]
    finally:
        r.close()


def raw_login_error(pgc, user, password, dbname="appdb"):
    r = pgc.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login(user, password, dbname)
        fields = ei.value.args[0]
        assert isinstance(fields, dict), "expected an ErrorResponse, got: %r" % (fields,)
        assert r.wait_closed(5), "pgcat did not close the connection after the login error"
        return fields
    finally:
        r.close()


# --- clients to pgcat ---------------------------------------------------------

def test_scram_login_with_psycopg_psql_asyncpg(pgcat):
    p = pgcat()
    with p.connect() as c:
        assert c.execute("SELECT current_user, current_database()").fetchone() == ("app", "appdb")
    assert p.psql("SELECT current_user").stdout.strip() == "app"

    async def go():
        c = await p.asyncpg()
        try:
            return await c.fetchval("SELECT current_user")
        finally:
            await c.close()
    assert asyncio.run(go()) == "app"


def test_scram_is_the_default_method(pgcat):
    p = pgcat()
    code, rest = auth_code(p, "app")
    assert code == 10, "expected AuthenticationSASL (10), got %r" % (code,)
    assert b"SCRAM-SHA-256" in rest.split(b"\x00")
    # A full exchange with our own SCRAM client, checking pgcat's server signature.
    r = p.raw_login("app")
    rows, err, status = r.simple("SELECT 1")
    assert err is None and rows == [["1"]] and status == "I"
    r.close()


def test_md5_client_auth(pgcat):
    p = pgcat(general={"auth_type": "md5"})
    code, rest = auth_code(p, "app")
    assert code == 5, "expected AuthenticationMD5Password (5), got %r" % (code,)
    assert len(rest) == 4, "MD5 request must carry a 4-byte salt"
    with p.connect() as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "app"
    assert p.psql("SELECT 7").stdout.strip() == "7"


def test_trust_client_auth(pgcat):
    p = pgcat(general={"auth_type": "trust"})
    code, _ = auth_code(p, "app")
    assert code == 0, "trust: expected AuthenticationOk at once, got %r" % (code,)
    with p.connect(password="") as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "app"


# --- the password in clear (auth_type password, PgBouncer's plain) -------------

def cleartext_challenge(pgc, user, dbname="appdb"):
    """A raw connection that has been asked for the password in clear: the
    AuthenticationCleartextPassword is checked (code 3, nothing after it)."""
    r = pgc.raw()
    r.startup(user, dbname)
    m = r.read_msg()
    assert m is not None and m[0] == b"R", m
    assert m[1] == struct.pack("!I", AUTH_CLEARTEXT), "expected AuthenticationCleartextPassword, got %r" % (m[1],)
    return r


def error_then_closed(r):
    fields, closed = r.read_error_then_eof()
    assert isinstance(fields, dict) and closed, (fields, closed)
    return fields


def cleartext_refusal(pgc, payload, dbname="appdb", user="app"):
    """The ErrorResponse fields pgcat answers a PasswordMessage payload with;
    the connection must be closed after it."""
    r = cleartext_challenge(pgc, user, dbname)
    try:
        r.send(pgwire.msg(b"p", payload))
        return error_then_closed(r)
    finally:
        r.close()


@pytest.mark.parametrize("name", ["password", "plain"])
def test_password_client_auth(pgcat, name):
    """auth_type password (PostgreSQL's name; PgBouncer's plain is taken
    too): AuthenticationCleartextPassword, then the password itself."""
    p = pgcat(general={"auth_type": name})
    code, rest = auth_code(p, "app")
    assert code == AUTH_CLEARTEXT and rest == b"", (code, rest)
    r = cleartext_challenge(p, "app")
    r.send(pgwire.msg(b"p", pgwire.cstr(PASSWORDS["app"])))
    typ, payload = r.read_msg()
    assert (typ, payload) == (b"R", struct.pack("!I", 0)), (typ, payload)
    r.read_until()
    rows, err, status = r.simple("SELECT current_user")
    assert err is None and rows == [["app"]] and status == "I"
    r.close()
    with p.connect() as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "app"
    assert p.psql("SELECT 7").stdout.strip() == "7"


def test_password_client_against_every_kind_of_secret(pgcat, pg):
    """The password in clear checked against a plaintext secret, an md5 hash
    and a SCRAM verifier; a wrong password and an unknown user refused
    alike. app holds only PostgreSQL's verifier, which asks app for SCRAM:
    pgcat logs in to it with the key the clear password gave (pass-through)."""
    p = pgcat(general={"auth_type": "password"},
              users={"app": {"password": pg_secret(pg, "app")},
                     "md5user": {"password": md5_secret("md5user", PASSWORDS["md5user"])},
                     "cleartext_user": {"password": PASSWORDS["cleartext_user"]}})
    for user in ("app", "md5user", "cleartext_user"):
        assert auth_code(p, user)[0] == AUTH_CLEARTEXT
        with p.connect(user=user, autocommit=False) as c:
            assert c.execute("SELECT current_user").fetchone()[0] == user
            # a second server connection at once: logged in by the same key
            with p.connect(user=user) as c2:
                assert c2.execute("SELECT 41 + 1").fetchone()[0] == 42
            c.rollback()
        r = p.raw_login(user)
        assert r.simple("SELECT 1")[0] == [["1"]]
        r.close()
    assert PASSWORDS["app"] not in p.ini.read_text()
    # the same challenge, the same refusal, for a wrong password and for no user
    assert auth_code(p, "nosuchuser")[0] == AUTH_CLEARTEXT
    for user in ("app", "md5user", "cleartext_user", "nosuchuser"):
        fields = raw_login_error(p, user, "not-the-password")
        assert (fields.get("S"), fields.get("C")) == ("FATAL", "28P01"), fields
        assert fields.get("M") == 'password authentication failed for user "%s"' % user, fields
        with pytest.raises(psycopg.OperationalError) as ei:
            p.connect(user=user, password="not-the-password")
        assert 'password authentication failed for user "%s"' % user in str(ei.value)
    # (the right password of another user is no better)
    assert raw_login_error(p, "md5user", PASSWORDS["cleartext_user"])["C"] == "28P01"
    assert "closing because: password authentication failed" in p.log()
    assert_works(p, user="md5user")


def test_set_auth_type_password(pgcat):
    """The console's SET auth_type switches the next logins to the clear
    password, under either name, and back."""
    p = pgcat(general={"auth_type": "md5"})
    assert auth_code(p, "app")[0] == 5
    r = admin(p)
    try:
        assert command(r, "SET auth_type = 'plain'") is None
        assert auth_code(p, "app")[0] == AUTH_CLEARTEXT
        assert_works(p)
        assert command(r, "SET auth_type = 'scram-sha-256'") is None
        assert auth_code(p, "app")[0] == 10
        assert command(r, "SET auth_type = 'password'") is None
        assert auth_code(p, "app")[0] == AUTH_CLEARTEXT
    finally:
        r.close()


def test_password_client_bad_messages(pgcat):
    """PasswordMessages that are not one string: refused (08P01), as is an
    empty password (28P01) and a message longer than any password may be;
    each closes its connection, and the next client is served."""
    p = pgcat(general={"auth_type": "password"})
    for payload in (b"app_pw",                 # no terminating NUL
                    b"app_pw\x00extra",        # bytes after it
                    b"app_pw\x00\x00",         # two strings
                    b""):                      # nothing at all
        fields = cleartext_refusal(p, payload)
        assert (fields.get("C"), fields.get("M")) == ("08P01", "invalid authentication message"), (payload, fields)
    fields = cleartext_refusal(p, b"\x00")
    assert fields.get("C") == "28P01", fields
    # longer than an authentication message may be: refused on its header
    r = cleartext_challenge(p, "app")
    try:
        r.send(b"p" + struct.pack("!I", 100004) + b"a" * 1000)
        fields = error_then_closed(r)
        assert fields.get("C") == "08P01", fields
    finally:
        r.close()
    # another message than a PasswordMessage
    r = cleartext_challenge(p, "app")
    try:
        r.send(pgwire.query("SELECT 1"))
        fields = error_then_closed(r)
        assert fields.get("C") == "08P01", fields
    finally:
        r.close()
    # the longest password that fits is only a wrong one
    fields = cleartext_refusal(p, b"x" * 8000 + b"\x00")
    assert fields.get("C") == "28P01", fields
    assert_works(p)


def test_password_client_derivation_off_the_loop(pgcat, pg):
    """A SCRAM verifier of many iterations makes the clear password's check
    slow: it is derived off the worker's loop, which serves other clients
    meanwhile; a client that leaves during it harms nothing."""
    iterations = 3000000
    slow = scram_secret("slow_pw", os.urandom(16), iterations)
    p = pgcat(general={"auth_type": "password"},
              users={"slowuser": {"password": slow, "server_username": "app",
                                  "server_password": PASSWORDS["app"]}})
    # Leaves as soon as its password is sent.
    r = cleartext_challenge(p, "slowuser")
    r.send(pgwire.msg(b"p", pgwire.cstr("slow_pw")))
    r.close()
    done = {}

    def slow_login():
        t0 = time.monotonic()
        with p.connect(user="slowuser", password="slow_pw", connect_timeout=120) as c:
            done["user"] = c.execute("SELECT current_user").fetchone()[0]
        done["took"] = time.monotonic() - t0
    t = threading.Thread(target=slow_login)
    t.start()
    try:
        # Asked and answered (its derivation under way), as far as we can tell.
        time.sleep(0.3)
        t0 = time.monotonic()
        with p.connect(user="md5user") as c:
            assert c.execute("SELECT current_user").fetchone()[0] == "md5user"
        fast = time.monotonic() - t0
        assert t.is_alive(), "the slow login ended before the other client was served (%.2fs)" % fast
    finally:
        t.join(180)
    assert done.get("user") == "app", done
    assert fast < done["took"], (fast, done)
    fields = raw_login_error(p, "slowuser", "wrong")
    assert fields.get("C") == "28P01", fields
    assert_works(p)


@pytest.mark.parametrize("auth_type", ["scram-sha-256", "md5"])
def test_wrong_password(pgcat, pg, auth_type):
    p = pgcat(general={"auth_type": auth_type})
    fields = raw_login_error(p, "app", "not-the-password")
    assert fields.get("S") == "FATAL"
    assert fields.get("C") == "28P01"
    assert fields.get("M") == 'password authentication failed for user "app"'
    with pytest.raises(psycopg.OperationalError) as ei:
        p.connect(password="not-the-password")
    assert 'password authentication failed for user "app"' in str(ei.value)

    async def go():
        with pytest.raises(asyncpg.InvalidPasswordError) as ei:
            await p.asyncpg(password="not-the-password")
        return ei.value.sqlstate
    assert asyncio.run(go()) == "28P01"
    assert_works(p)
    assert_pool_idle(pg)


@pytest.mark.parametrize("auth_type,code", [("scram-sha-256", 10), ("md5", 5)])
def test_unknown_user_looks_like_wrong_password(pgcat, auth_type, code):
    p = pgcat(general={"auth_type": auth_type})
    # The same challenge as for a user that exists: nothing reveals which users exist.
    assert auth_code(p, "nosuchuser")[0] == code
    fields = raw_login_error(p, "nosuchuser", "whatever")
    assert fields.get("S") == "FATAL"
    assert fields.get("C") == "28P01"
    assert fields.get("M") == 'password authentication failed for user "nosuchuser"'

    async def go():
        with pytest.raises(asyncpg.InvalidPasswordError):
            await p.asyncpg(user="nosuchuser", password="whatever")
    asyncio.run(go())
    assert_works(p)


def test_unknown_database(pgcat):
    p = pgcat()
    r = p.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login("app", PASSWORDS["app"], "nosuchdb")
        fields = ei.value.args[0]
        assert isinstance(fields, dict), fields
        assert fields.get("S") == "FATAL"
        assert fields.get("C") == "3D000"
        assert "nosuchdb" in fields.get("M", "")
    finally:
        r.close()

    async def go():
        with pytest.raises(asyncpg.InvalidCatalogNameError):
            await p.asyncpg(dbname="nosuchdb")
    asyncio.run(go())
    assert_works(p)


def test_login_result_looks_like_postgresql(pgcat):
    """AuthenticationOk, a real server's ParameterStatus set, BackendKeyData, ReadyForQuery 'I'."""
    p = pgcat()
    r = p.raw()
    after = r.login("app", PASSWORDS["app"], "appdb")
    types = [m[0] for m in after]
    assert types[-1] == b"Z" and after[-1][1] == b"I"
    assert b"K" in types, "no BackendKeyData"
    for key in ("server_version", "client_encoding", "DateStyle", "TimeZone",
                "integer_datetimes", "standard_conforming_strings"):
        assert key in r.params, "ParameterStatus %s missing (got %s)" % (key, sorted(r.params))
    assert r.params["server_version"].startswith("15")
    assert r.params["integer_datetimes"] == "on"
    assert r.params["standard_conforming_strings"] == "on"
    # The key pgcat hands out is its own, not the server backend's.
    rows, err, _ = r.simple("SELECT pg_backend_pid()")
    assert err is None
    assert r.backend_key is not None
    assert r.backend_key[0] != int(rows[0][0]), "BackendKeyData is the server backend's"
    r.close()
    with p.connect() as c:
        assert c.info.parameter_status("server_version").startswith("15")
        assert c.info.backend_pid != 0


# --- pgcat to the servers -------------------------------------------------------

@pytest.mark.parametrize("user,method", [
    ("app", "scram-sha-256"), ("md5user", "md5"),
    ("cleartext_user", "password"), ("trust_user", "trust")])
def test_pgcat_logs_in_to_server(pgcat, pg, user, method):
    """Each role's pg_hba method is different (see conftest): pgcat must speak each."""
    p = pgcat()
    with p.connect(user=user) as c:
        assert c.execute("SELECT current_user").fetchone()[0] == user
        assert pg.count(user, "appdb") >= 1


def test_md5_hash_in_config_logs_in_both_ways(pgcat):
    """A password given only as an md5 hash authenticates MD5 clients and logs in
    to an md5 server."""
    secret = md5_secret("md5user", PASSWORDS["md5user"])
    p = pgcat(general={"auth_type": "md5"}, users={"md5user": {"password": secret}})
    with p.connect(user="md5user") as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "md5user"
    with pytest.raises(psycopg.OperationalError):
        p.connect(user="md5user", password="wrong")


def test_server_username_and_password(pgcat):
    p = pgcat(users={"alias": {"password": "alias_pw", "server_username": "app",
                               "server_password": PASSWORDS["app"]}})
    with p.connect(user="alias", password="alias_pw") as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "app"


def test_server_refuses_pgcat(pgcat):
    """pgcat knows the client but PostgreSQL refuses pgcat's login: the client
    gets PostgreSQL's error instead of hanging, and pgcat keeps serving others."""
    p = pgcat(users={"app": {"password": "pgcat_and_client_agree_but_server_does_not"}})
    with pytest.raises(psycopg.Error) as ei:
        with p.connect(password="pgcat_and_client_agree_but_server_does_not", connect_timeout=15) as c:
            c.execute("SELECT 1")
    assert "password authentication failed" in str(ei.value)
    assert_works(p, user="md5user")


# --- startup packets ---------------------------------------------------------------

def test_ssl_request_answered_n(pgcat):
    p = pgcat()
    r = p.raw()
    r.send(pgwire.ssl_request())
    assert r.read_bytes(1) == b"N"
    r.login("app", PASSWORDS["app"], "appdb")
    assert r.simple("SELECT 1")[0] == [["1"]]
    r.close()
    with p.connect(sslmode="prefer") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    with pytest.raises(psycopg.OperationalError):
        p.connect(sslmode="require")


def test_gssenc_request_answered_n(pgcat):
    p = pgcat()
    r = p.raw()
    r.send(pgwire.gssenc_request())
    assert r.read_bytes(1) == b"N"
    r.login("app", PASSWORDS["app"], "appdb")
    assert r.simple("SELECT 1")[0] == [["1"]]
    r.close()


@pytest.mark.parametrize("value", ["database", "true"])
def test_replication_needs_the_servers_consent(pgcat, pg, value):
    """A replication connection gets a server connection of its own
    (test_replication.py); app may not replicate (no REPLICATION
    attribute, no pg_hba.conf replication line): PostgreSQL refuses it,
    the client gets "login failed" and nothing is left open."""
    p = pgcat()
    r = p.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login("app", PASSWORDS["app"], "appdb", params={"replication": value})
    finally:
        r.close()
    err = ei.value.args[0]
    assert isinstance(err, dict) and err.get("C") == "08P01" and err.get("M") == "login failed", err
    assert_works(p)
    assert_pool_idle(pg)


def test_authentication_must_finish_within_connect_timeout(pgcat):
    p = pgcat(general={"connect_timeout": 1000})
    silent = p.raw()
    half = p.raw()
    half.startup("app", "appdb")
    assert half.read_msg()[0] == b"R"   # SASL request, then we say nothing
    assert silent.wait_closed(8), "a client that sends nothing was not dropped"
    assert half.wait_closed(8), "a client that stops mid-authentication was not dropped"
    silent.close()
    half.close()
    assert_works(p)


# --- listeners ----------------------------------------------------------------------

def test_unix_socket(pgcat):
    p = pgcat()
    sock = os.path.join(p.sockdir, ".s.PGSQL.%d" % p.port)
    wait_until(lambda: os.path.exists(sock), 5, msg="unix socket %s" % sock)
    assert p.psql("SELECT current_user", host=p.sockdir).stdout.strip() == "app"
    with psycopg.connect(host=p.sockdir, port=p.port, user="app", password=PASSWORDS["app"],
                         dbname="appdb", autocommit=True) as c:
        assert c.execute("SELECT 2").fetchone()[0] == 2


def test_no_unix_socket_when_empty(pgcat):
    p = pgcat(general={"unix_socket_dir": ""})
    assert not os.path.exists(os.path.join(str(p.workdir), ".s.PGSQL.%d" % p.port))
    assert_works(p)


def _have_ipv6():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _have_ipv6(), reason="no IPv6 loopback")
def test_ipv4_and_ipv6_listen_list(pgcat):
    p = pgcat(general={"listen_addr": "127.0.0.1, ::1"})
    wait_until(lambda: port_open("::1", p.port), 5, msg="[::1]:%d" % p.port)
    with psycopg.connect(host="::1", port=p.port, user="app", password=PASSWORDS["app"],
                         dbname="appdb", autocommit=True, sslmode="disable") as c:
        assert c.execute("SELECT 3").fetchone()[0] == 3
    assert_works(p)
