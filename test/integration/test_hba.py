# SPDX-License-Identifier: MIT
"""auth_hba_file (SPEC §2, §3): PgBouncer's hba format picks the method of
each login by connection type, database, user and address. Per line type
and method, with real clients (psycopg, psql) and the raw protocol where
the SQLSTATE or the first authentication request is what is checked:
host md5 / scram-sha-256 / password / trust / reject, no matching line (28000),
hostssl against hostnossl with TLS and plain clients, cert with client
certificates, local on the Unix socket, the admin console under the same
rules, RELOAD and SIGHUP switching a method, and a malformed file: refused
at startup with the line named, refused on reload while the old rules keep
serving."""
import os
import re
import signal
import struct
import subprocess

import psycopg
import pytest

import pgwire
from conftest import ADMIN_USER, PASSWORDS, PG_BIN, md5_secret, wait_until
from test_admin import admin, command
from test_cli import good_ini, run, write
from test_tls import certs, p as cert_path, tls_general  # noqa: F401 (certs: a fixture)

AUTH_OK, AUTH_CLEARTEXT, AUTH_MD5, AUTH_SASL = 0, 3, 5, 10


def start(pgcat, tmp_path, rules, general=None, users=None):
    hba = tmp_path / "hba.conf"
    hba.write_text(rules)
    g = {"auth_hba_file": str(hba)}
    g.update(general or {})
    inst = pgcat(general=g, users=users)
    inst.hba = hba
    return inst


def first_auth(inst, user, dbname="appdb", unix=False):
    """The code of the first AuthenticationRequest pgcat sends (0 = Ok,
    5 = md5, 10 = SASL), or the fields of its ErrorResponse."""
    r = raw(inst, unix)
    try:
        r.startup(user, dbname)
        typ, payload = r.read_msg()
        if typ == b"E":
            return pgwire.parse_fields(payload)
        assert typ == b"R", typ
        return struct.unpack("!I", payload[:4])[0]
    finally:
        r.close()


def raw(inst, unix=False):
    if unix:
        return pgwire.Raw(None, None, unix_path=os.path.join(inst.sockdir, ".s.PGSQL.%d" % inst.port))
    return inst.raw()


def login_error(inst, user, password=None, dbname="appdb", unix=False):
    """The error fields of a login that must fail (raw protocol: the SQLSTATE itself)."""
    r = raw(inst, unix)
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login(user, PASSWORDS.get(user, "") if password is None else password, dbname)
        fields = ei.value.args[0]
        assert isinstance(fields, dict), fields
        return fields
    finally:
        r.close()


def works(inst, user="app", **kw):
    with inst.connect(user=user, **kw) as c:
        assert c.execute("SELECT current_user").fetchone()[0] == user


def no_entry(host, user, db="appdb", enc="no encryption"):
    return 'no auth_hba_file entry for host "%s", user "%s", database "%s", %s' % (host, user, db, enc)


# --- host lines, one method each ------------------------------------------------

def test_host_md5_line(pgcat, tmp_path):
    # auth_type says scram-sha-256; the line says md5, and md5 it is
    inst = start(pgcat, tmp_path, "host appdb all 127.0.0.1/32 md5\n")
    assert first_auth(inst, "app") == AUTH_MD5
    works(inst, "app")
    works(inst, "md5user")
    e = login_error(inst, "app", password="wrong")
    assert e["C"] == "28P01" and e["M"] == 'password authentication failed for user "app"', e
    # an unknown user: the same exchange, the same 28P01
    e = login_error(inst, "nobody", password="x")
    assert e["C"] == "28P01", e
    # the database is not on the line: no entry
    e = login_error(inst, "app", dbname="otherdb")
    assert e["C"] == "28000" and e["M"] == no_entry("127.0.0.1", "app", "otherdb"), e


def test_host_scram_line(pgcat, tmp_path):
    # auth_type says md5; the line says scram-sha-256
    inst = start(pgcat, tmp_path, "host all all 127.0.0.0/8 scram-sha-256\n", general={"auth_type": "md5"},
                 users={"md5user": {"password": md5_secret("md5user", PASSWORDS["md5user"])}})
    assert first_auth(inst, "app") == AUTH_SASL
    works(inst, "app")
    r = inst.psql("SELECT 40 + 2", user="app")
    assert r.stdout.strip() == "42"
    e = login_error(inst, "app", password="wrong")
    assert e["C"] == "28P01", e
    # a user whose only secret is an md5 hash cannot do SCRAM: refused even
    # with the right password (no falling back to md5 under this line)
    assert first_auth(inst, "md5user") == AUTH_SASL
    e = login_error(inst, "md5user")
    assert e["C"] == "28P01", e
    assert 'user "md5user" has an md5 secret only' in inst.log()


def test_host_password_line(pgcat, tmp_path):
    # auth_type says scram-sha-256; the line says password (PostgreSQL's
    # method of the password in clear): asked for in clear, checked against
    # a plaintext secret and an md5 hash alike
    inst = start(pgcat, tmp_path, "host appdb app,md5user,nobody 127.0.0.1/32 password\n"
                                  "host all all 127.0.0.1/32 md5\n",
                 users={"md5user": {"password": md5_secret("md5user", PASSWORDS["md5user"])}})
    assert first_auth(inst, "app") == AUTH_CLEARTEXT
    assert first_auth(inst, "md5user") == AUTH_CLEARTEXT
    works(inst, "app")
    works(inst, "md5user")
    assert inst.psql("SELECT 40 + 2", user="md5user").stdout.strip() == "42"
    e = login_error(inst, "app", password="wrong")
    assert e["C"] == "28P01" and e["M"] == 'password authentication failed for user "app"', e
    e = login_error(inst, "nobody", password="x")
    assert e["C"] == "28P01" and e["M"] == 'password authentication failed for user "nobody"', e
    assert first_auth(inst, "nobody") == AUTH_CLEARTEXT
    # another user: the next line, md5
    assert first_auth(inst, "cleartext_user") == AUTH_MD5
    works(inst, "cleartext_user")


def test_host_trust_line_and_no_match(pgcat, tmp_path):
    inst = start(pgcat, tmp_path, "# who may come in without a password\n"
                                  "host appdb app 127.0.0.1/32 trust\n")
    assert first_auth(inst, "app") == AUTH_OK
    works(inst, "app", password="not the password")
    # no line for md5user: refused before any password is asked
    e = first_auth(inst, "md5user")
    assert e["C"] == "28000" and e["S"] == "FATAL", e
    assert e["M"] == no_entry("127.0.0.1", "md5user"), e
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(user="md5user")
    assert no_entry("127.0.0.1", "md5user") in str(ei.value)
    assert "refused: no auth_hba_file line matches" in inst.log()


def test_reject_line(pgcat, tmp_path):
    inst = start(pgcat, tmp_path, "host all md5user 127.0.0.1/32 reject\n"
                                  "host all all     127.0.0.1/32 md5\n")
    e = first_auth(inst, "md5user")
    assert e["C"] == "28000", e
    assert e["M"] == ('auth_hba_file rejects connection for host "127.0.0.1", user "md5user", '
                      'database "appdb", no encryption'), e
    r = inst.psql("SELECT 1", user="md5user", check=False)
    assert r.returncode != 0 and "auth_hba_file rejects connection" in r.stderr, r.stderr
    assert "refused by auth_hba_file line 1 (reject)" in inst.log()
    works(inst, "app")


def test_address_decides(pgcat, tmp_path):
    # pgcat sees the test's clients as 127.0.0.1: a line for another
    # network does not match, a netmask column does
    inst = start(pgcat, tmp_path, "host all all 10.0.0.0/8 trust\n"
                                  "host all app 127.0.0.0 255.0.0.0 md5\n"
                                  "host all all ::1/128 trust\n")
    assert first_auth(inst, "app") == AUTH_MD5
    works(inst, "app")
    assert first_auth(inst, "md5user")["C"] == "28000"


# --- TLS: hostssl, hostnossl, cert ----------------------------------------------

def test_hostssl_and_hostnossl(pgcat, tmp_path, certs):  # noqa: F811
    g = tls_general(certs, "prefer")
    inst = start(pgcat, tmp_path, "hostssl   all app     all md5\n"
                                  "hostnossl all app     all reject\n"
                                  "hostssl   all md5user all reject\n"
                                  "hostnossl all md5user all md5\n", general=g)
    with inst.connect(user="app", sslmode="require") as c:
        assert c.pgconn.ssl_in_use
        assert c.execute("SELECT current_user").fetchone()[0] == "app"
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(user="app", sslmode="disable")
    assert "auth_hba_file rejects connection" in str(ei.value) and "no encryption" in str(ei.value)
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(user="md5user", sslmode="require")
    assert 'user "md5user", database "appdb", SSL encryption' in str(ei.value), str(ei.value)
    works(inst, "md5user", sslmode="disable")
    # the raw client (never TLS): the hostnossl lines
    assert first_auth(inst, "md5user") == AUTH_MD5
    assert first_auth(inst, "app")["C"] == "28000"


def test_cert_line(pgcat, tmp_path, certs):  # noqa: F811
    g = tls_general(certs, "verify-ca", ca="ca")
    inst = start(pgcat, tmp_path, "hostssl all app     all cert\n"
                                  "hostssl all md5user all cert\n", general=g)
    kw = dict(sslmode="require", sslcert=cert_path(certs, "client_app.crt"),
              sslkey=cert_path(certs, "client_app.key"))
    # the certificate (CN=app) is the login: no password asked
    works(inst, "app", password="not the password", **kw)
    r = subprocess.run([str(PG_BIN / "psql"), "-X", "-At", "-c", "SELECT current_user",
                        "host=127.0.0.1 port=%d dbname=appdb user=app sslmode=require sslcert=%s sslkey=%s"
                        % (inst.port, kw["sslcert"], kw["sslkey"])],
                       env=dict(os.environ, PGPASSWORD="wrong"), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "app", r.stderr
    # CN=app does not vouch for md5user, whatever its password
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(user="md5user", **kw)
    assert 'certificate authentication failed for user "md5user"' in str(ei.value), str(ei.value)


def test_cert_needs_verified_certificates(pg, tmp_path, certs):  # noqa: F811
    hba = write(tmp_path, "hostssl all all all cert\n", "hba.conf")
    path = write(tmp_path, good_ini(pg, tmp_path, auth_hba_file=str(hba), **tls_general(certs, "require")))
    r = run(["-t", str(path)])
    assert r.returncode == 1
    assert "%s:1: method cert needs client_tls_sslmode verify-ca or verify-full" % hba in r.stdout + r.stderr


# --- local: the Unix socket -----------------------------------------------------

def test_local_line(pgcat, tmp_path):
    inst = start(pgcat, tmp_path, "local all app trust\n"
                                  "local all md5user md5\n"
                                  "host  all all 127.0.0.1/32 reject\n")
    wait_until(lambda: os.path.exists(os.path.join(inst.sockdir, ".s.PGSQL.%d" % inst.port)), 5)
    assert first_auth(inst, "app", unix=True) == AUTH_OK
    r = inst.psql("SELECT current_user", user="app", password="wrong", host=inst.sockdir)
    assert r.stdout.strip() == "app"
    assert first_auth(inst, "md5user", unix=True) == AUTH_MD5
    assert inst.psql("SELECT 1", user="md5user", host=inst.sockdir).stdout.strip() == "1"
    e = first_auth(inst, "cleartext_user", unix=True)
    assert e["C"] == "28000" and e["M"] == no_entry("[local]", "cleartext_user"), e
    # TCP: the host line
    assert first_auth(inst, "app")["C"] == "28000"


# --- the admin console ----------------------------------------------------------

def test_admin_console_follows_the_file(pgcat, tmp_path):
    inst = start(pgcat, tmp_path, "host pgcat pgcat 127.0.0.1/32 scram-sha-256\n"
                                  "host appdb all  127.0.0.1/32 md5\n")
    r = admin(inst)
    # SET cannot point it elsewhere: the rules are read with the file
    err = command(r, "SET auth_hba_file = '/nowhere'")
    assert err is not None and err["C"] == "22023" and "RELOAD" in err["M"], err
    r.close()
    inst.hba.write_text("host appdb all 127.0.0.1/32 md5\n")
    r = admin(inst)
    assert command(r, "RELOAD") is None
    r.close()
    e = first_auth(inst, ADMIN_USER, dbname="pgcat")
    assert e["C"] == "28000" and e["M"] == no_entry("127.0.0.1", ADMIN_USER, "pgcat"), e
    works(inst, "app")


# --- reload ---------------------------------------------------------------------

def test_reload_switches_the_method(pgcat, tmp_path):
    inst = start(pgcat, tmp_path, "host all pgcat 127.0.0.1/32 md5\n"
                                  "host all all   127.0.0.1/32 md5\n")
    assert first_auth(inst, "app") == AUTH_MD5
    held = inst.connect(user="app")
    inst.hba.write_text("host all pgcat 127.0.0.1/32 md5\n"
                        "host all all   127.0.0.1/32 scram-sha-256\n")
    r = admin(inst)
    assert command(r, "RELOAD") is None
    r.close()
    assert first_auth(inst, "app") == AUTH_SASL
    works(inst, "app")
    # SIGHUP too: now app is rejected; a session already open stays
    inst.hba.write_text("host all app 127.0.0.1/32 reject\n"
                        "host all all 127.0.0.1/32 md5\n")
    inst.send_signal(signal.SIGHUP)
    wait_until(lambda: isinstance(first_auth(inst, "app"), dict), 10, msg="app rejected after SIGHUP")
    assert first_auth(inst, "app")["C"] == "28000"
    assert held.execute("SELECT 1").fetchone()[0] == 1
    held.close()


# --- a malformed file -----------------------------------------------------------

def test_malformed_file_at_startup(pg, tmp_path):
    hba = write(tmp_path, "# ok so far\nhost all all 127.0.0.1/32 md5\nhost all all 127.0.0.1 md5\n", "hba.conf")
    path = write(tmp_path, good_ini(pg, tmp_path, auth_hba_file="hba.conf"))
    r = run([str(path)], timeout=20)
    assert r.returncode == 1, r.stderr
    want = "%s: [general] auth_hba_file: %s:3: address \"127.0.0.1\" needs a mask" % (path, hba)
    assert want in r.stderr, r.stderr
    # -t says the same; a file that is not there too
    r = run(["-t", str(path)])
    assert r.returncode == 1 and want in r.stdout + r.stderr
    hba.unlink()
    r = run([str(path)], timeout=20)
    assert r.returncode == 1 and re.search(r"auth_hba_file: .*hba.conf: cannot open", r.stderr), r.stderr


def test_malformed_file_on_reload_keeps_the_old_rules(pgcat, tmp_path):
    inst = start(pgcat, tmp_path, "host all all 127.0.0.1/32 md5\n")
    inst.hba.write_text("host all all 127.0.0.1/32 md5\n"
                        "host all all 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n")
    r = admin(inst)
    err = command(r, "RELOAD")
    r.close()
    assert err is not None, "RELOAD took a malformed hba file"
    assert "%s:2: option \"clientcert=verify-full\" is not supported" % inst.hba in err["M"], err
    assert first_auth(inst, "app") == AUTH_MD5        # the old rules
    works(inst, "app")
    inst.send_signal(signal.SIGHUP)
    wait_until(lambda: inst.log().count("reload rejected") >= 2, 10, msg="the SIGHUP reload refused")
    assert first_auth(inst, "app") == AUTH_MD5
    works(inst, "md5user")
    # fixed: taken
    inst.hba.write_text("host all all 127.0.0.1/32 scram-sha-256\n")
    r = admin(inst)
    assert command(r, "RELOAD") is None
    r.close()
    assert first_auth(inst, "app") == AUTH_SASL


def test_reload_reaches_every_worker(pgcat, tmp_path):
    # each worker reads the file on its own: after SIGHUP, every new login
    # (whichever worker the kernel hands it to) follows the new rules
    inst = start(pgcat, tmp_path, "host all all 127.0.0.1/32 md5\n", general={"workers": 2})
    assert all(first_auth(inst, "app") == AUTH_MD5 for _ in range(10))
    inst.hba.write_text("host all all 127.0.0.1/32 scram-sha-256\n")
    inst.send_signal(signal.SIGHUP)
    wait_until(lambda: all(first_auth(inst, "app") == AUTH_SASL for _ in range(20)), 10,
               msg="every worker on the new rules")
    works(inst, "app")


# --- peer, map= and auth_ident_file ----------------------------------------------
# The tests run as root and so does the client here: over the Unix socket
# pgcat sees OS user "root" (SO_PEERCRED). "root" is made a pgcat user so
# that a peer login with its own name has someone to be.

ROOT_USER = {"root": {"password": "root_pw", "server_username": "app", "server_password": PASSWORDS["app"]}}


def start_ident(pgcat, tmp_path, rules, ident, general=None):
    (tmp_path / "ident.conf").write_text(ident)
    g = {"auth_ident_file": str(tmp_path / "ident.conf")}
    g.update(general or {})
    inst = start(pgcat, tmp_path, rules, general=g, users=ROOT_USER)
    wait_until(lambda: os.path.exists(os.path.join(inst.sockdir, ".s.PGSQL.%d" % inst.port)), 5)
    return inst


def peer_refused(e, user):
    # the same words whether or not pgcat knows the user
    assert e["C"] == "28000" and e["M"] == 'peer authentication failed for user "%s"' % user, e


def test_peer_line(pgcat, tmp_path):
    inst = start(pgcat, tmp_path, "local all all peer\n"
                                  "host  all all 127.0.0.1/32 md5\n", users=ROOT_USER)
    wait_until(lambda: os.path.exists(os.path.join(inst.sockdir, ".s.PGSQL.%d" % inst.port)), 5)
    # the OS user's own name: in, without a password
    assert first_auth(inst, "root", unix=True) == AUTH_OK
    # another name: refused, as for a name pgcat does not know
    peer_refused(first_auth(inst, "app", unix=True), "app")
    peer_refused(first_auth(inst, "nosuchuser", unix=True), "nosuchuser")
    # TCP takes the host line
    assert first_auth(inst, "app") == AUTH_MD5
    assert "peer authentication failed" in inst.log() and '"root" is not the user name' in inst.log()


def test_peer_with_map_and_reload(pgcat, tmp_path):
    inst = start_ident(pgcat, tmp_path, "local all all peer map=os\n"
                                        "host pgcat pgcat 127.0.0.1/32 scram-sha-256\n",
                       "os root app\nos  root  \"md5user\"\n")
    assert first_auth(inst, "app", unix=True) == AUTH_OK
    r = inst.psql("SELECT current_user", user="app", password="wrong", host=inst.sockdir)
    assert r.stdout.strip() == "app"
    assert first_auth(inst, "md5user", unix=True) == AUTH_OK
    # a map line for others only: not the name itself either
    peer_refused(first_auth(inst, "root", unix=True), "root")
    peer_refused(first_auth(inst, "cleartext_user", unix=True), "cleartext_user")
    assert "ident map os cannot be matched" in inst.log()
    # RELOAD reads the maps again
    (tmp_path / "ident.conf").write_text("os root all\n")
    r = admin(inst)
    assert command(r, "RELOAD") is None
    r.close()
    assert first_auth(inst, "cleartext_user", unix=True) == AUTH_OK
    assert first_auth(inst, "root", unix=True) == AUTH_OK
    # a map line pgcat cannot read: the reload is refused, the old maps serve
    (tmp_path / "ident.conf").write_text("os root all\nos /(root all\n")
    r = admin(inst)
    err = command(r, "RELOAD")
    r.close()
    assert err is not None and "ident.conf:2: invalid regular expression" in err["M"], err
    assert first_auth(inst, "cleartext_user", unix=True) == AUTH_OK


def test_ident_regex_and_backreference(pgcat, tmp_path):
    inst = start_ident(pgcat, tmp_path, "local all all peer map=rx\n",
                       "# MAPNAME SYSTEM-USERNAME PG-USERNAME\n"
                       "rx  /^r(o+)t$         r\\1t\n"
                       "rx  /^roo?t$          /^(app|md5user)$\n")
    assert first_auth(inst, "root", unix=True) == AUTH_OK       # \1 = "oo"
    assert first_auth(inst, "app", unix=True) == AUTH_OK        # the PG-side regex
    assert first_auth(inst, "md5user", unix=True) == AUTH_OK
    peer_refused(first_auth(inst, "cleartext_user", unix=True), "cleartext_user")


def test_peer_and_map_errors_at_startup(pg, tmp_path):
    hba = write(tmp_path, "local all all peer\nhost all all 0.0.0.0/0 peer\n", "hba.conf")
    path = write(tmp_path, good_ini(pg, tmp_path, auth_hba_file=str(hba)))
    r = run(["-t", str(path)])
    assert r.returncode == 1
    assert "%s:2: method peer is only for local lines" % hba in r.stdout + r.stderr
    hba = write(tmp_path, "local all all peer map=nomap\n", "hba.conf")
    ident = write(tmp_path, "other root app\nbad\n", "ident.conf")
    path = write(tmp_path, good_ini(pg, tmp_path, auth_hba_file=str(hba), auth_ident_file=str(ident)))
    r = run(["-t", str(path)])
    assert r.returncode == 1
    assert "auth_ident_file: %s:2: missing the system user name" % ident in r.stdout + r.stderr
    write(tmp_path, "other root app\n", "ident.conf")
    r = run(["-t", str(path)])
    assert r.returncode == 1
    assert '%s:1: map "nomap" is not in auth_ident_file' % hba in r.stdout + r.stderr


def test_cert_line_with_map(pgcat, tmp_path, certs):  # noqa: F811
    g = tls_general(certs, "verify-ca", ca="ca")
    inst = start_ident(pgcat, tmp_path, "hostssl all all all cert map=certs\n",
                       "certs  app  md5user\ncerts /^a(p+)$ a\\1\n", general=g)
    kw = dict(sslmode="require", sslcert=cert_path(certs, "client_app.crt"),
              sslkey=cert_path(certs, "client_app.key"))
    # CN=app maps to md5user and (regex) to app: no password asked
    works(inst, "md5user", password="not the password", **kw)
    works(inst, "app", password="not the password", **kw)
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(user="cleartext_user", **kw)
    assert 'certificate authentication failed for user "cleartext_user"' in str(ei.value), str(ei.value)
    assert "ident map certs cannot be matched" in inst.log()
