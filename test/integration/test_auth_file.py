# SPDX-License-Identifier: MIT
"""auth_file (SPEC §2): PgBouncer's userlist.txt for pools without users
sections — plaintext, md5 and SCRAM secrets, reloaded on RELOAD — and SCRAM
pass-through: a user known to pgcat only by its SCRAM verifier logs in to
PostgreSQL with the key its client proved, so no plaintext password is
stored anywhere."""
import base64
import hashlib
import hmac
import os
import signal

import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, wait_until
from test_admin import admin, command


def pg_secret(pg, role):
    with pg.connect("postgres") as c:
        return c.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()[0]


def scram_secret(password, salt, iterations=4096):
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda b: base64.b64encode(b).decode()
    return "SCRAM-SHA-256$%d:%s$%s:%s" % (iterations, b64(salt), b64(hashlib.sha256(client_key).digest()),
                                          b64(server_key))


def quote(s):
    return '"%s"' % s.replace('"', '""')


def write_userlist(path, entries, extra_lines=()):
    lines = ["; pgcat test userlist"]
    lines += ["%s %s" % (quote(u), quote(s)) for u, s in entries]
    lines += list(extra_lines)
    path.write_text("\n".join(lines) + "\n")


def start(pgcat, pg, userlist, auth_type="scram-sha-256", with_users_section=False):
    pool = {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg.port}}}
    if with_users_section:
        pool["users"] = {"app": {"password": PASSWORDS["app"]}}
    return pgcat(general={"auth_file": str(userlist), "auth_type": auth_type},
                 replace_pools={"appdb": pool})


def login_fails(p, user, password, sqlstate="28P01"):
    """The login ends with an ErrorResponse carrying sqlstate (raw protocol,
    so the SQLSTATE itself is checked)."""
    r = p.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login(user, password, "appdb")
        fields = ei.value.args[0]
        assert isinstance(fields, dict) and fields.get("C") == sqlstate, fields
    finally:
        r.close()


def test_plaintext_md5_and_scram_entries(pgcat, pg, tmp_path):
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [
        ("app", pg_secret(pg, "app")),                          # SCRAM verifier: pass-through
        ("md5user", pg_secret(pg, "md5user")),                  # md5 hash, as PostgreSQL stores it
        ("cleartext_user", PASSWORDS["cleartext_user"]),        # plaintext
    ])
    p = start(pgcat, pg, ul)
    for user in ("app", "md5user", "cleartext_user"):
        with p.connect(user=user) as c:
            assert c.execute("SELECT current_user").fetchone()[0] == user
    for user in ("app", "md5user", "cleartext_user"):
        login_fails(p, user, "wrong-password")
    login_fails(p, "not_in_the_file", "x")
    # Nothing in pgcat's configuration holds the passwords of app or md5user.
    for secret in (PASSWORDS["app"], PASSWORDS["md5user"]):
        assert secret not in p.ini.read_text() and secret not in ul.read_text()


def test_scram_passthrough_serves_many_clients_and_new_server_connections(pgcat, pg, tmp_path):
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [("app", pg_secret(pg, "app"))])
    p = start(pgcat, pg, ul)
    conns = [p.connect(autocommit=False) for _ in range(4)]   # four server connections at once
    pids = {c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in conns}
    assert len(pids) == 4
    for c in conns:
        c.rollback()
        c.close()
    with p.connect() as c:
        assert c.execute("SELECT 41 + 1").fetchone()[0] == 42


def test_scram_secret_with_another_salt_gives_a_clear_error(pgcat, pg, tmp_path):
    """The client's password matches pgcat's verifier, but PostgreSQL holds
    the same password under another salt: the key passed through does not
    match, the client gets an error, and pgcat keeps serving other users."""
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [("app", scram_secret(PASSWORDS["app"], os.urandom(16))),
                        ("md5user", pg_secret(pg, "md5user"))])
    p = start(pgcat, pg, ul)
    with pytest.raises(psycopg.Error) as ei:
        with p.connect() as c:
            c.execute("SELECT 1")
    assert "password authentication failed" in str(ei.value) or "28P01" in str(ei.value), str(ei.value)
    with p.connect(user="md5user") as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "md5user"


def test_reload_rereads_the_file(pgcat, pg, tmp_path):
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [("cleartext_user", PASSWORDS["cleartext_user"])])
    p = start(pgcat, pg, ul)
    with p.connect(user="cleartext_user") as c:
        c.execute("SELECT 1")
    login_fails(p, "md5user", PASSWORDS["md5user"])
    write_userlist(ul, [("md5user", pg_secret(pg, "md5user"))])
    r = admin(p)
    assert command(r, "RELOAD") is None
    r.close()
    with p.connect(user="md5user") as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "md5user"
    login_fails(p, "cleartext_user", PASSWORDS["cleartext_user"])
    # SIGHUP too
    write_userlist(ul, [("cleartext_user", PASSWORDS["cleartext_user"])])
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: _can_login(p, "cleartext_user"), 10, msg="cleartext_user back after SIGHUP")


def _can_login(p, user):
    try:
        with p.connect(user=user) as c:
            c.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def test_malformed_lines_are_skipped_and_logged(pgcat, pg, tmp_path):
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [("cleartext_user", PASSWORDS["cleartext_user"])], extra_lines=[
        'app "unterminated',
        'bare words here',
        '"" "empty user"',
        '# a comment',
        '',
        '"md5user" %s trailing words are ignored' % quote(pg_secret(pg, "md5user")),
    ])
    p = start(pgcat, pg, ul)
    with p.connect(user="cleartext_user") as c:
        c.execute("SELECT 1")
    with p.connect(user="md5user") as c:
        c.execute("SELECT 1")
    login_fails(p, "app", "unterminated")
    log = p.log()
    for line in (3, 4, 5):
        assert "userlist.txt:%d:" % line in log, log


def test_unreadable_auth_file_refuses_the_reload(pgcat, pg, tmp_path):
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [("cleartext_user", PASSWORDS["cleartext_user"])])
    p = start(pgcat, pg, ul)
    ul.unlink()
    r = admin(p)
    err = command(r, "RELOAD")
    r.close()
    assert err is not None and "auth_file" in str(err), err
    with p.connect(user="cleartext_user") as c:       # the old userlist still holds
        c.execute("SELECT 1")


def test_pool_with_users_section_ignores_the_file(pgcat, pg, tmp_path):
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [("cleartext_user", PASSWORDS["cleartext_user"])])
    p = start(pgcat, pg, ul, with_users_section=True)
    with p.connect(user="app") as c:
        c.execute("SELECT 1")
    login_fails(p, "cleartext_user", PASSWORDS["cleartext_user"])
