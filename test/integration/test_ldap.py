# SPDX-License-Identifier: MIT
"""LDAP authentication: hba method `ldap` (PostgreSQL's options) and
auth_type = ldap with auth_ldap_options, against a real slapd on free
loopback ports (ldap:// and ldaps://; libldap gets TLS_REQCERT never from
the LDAPCONF file pgcat inherits). The LDAP users are in no pgcat config:
simple bind and search+bind, ldapurl/ldaps/StartTLS, refusals (28000),
bad options under -t, a server down or silent, the pool of the first login."""
import contextlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from conftest import free_port, port_open, tail, wait_until
from test_admin import admin, command, show
from test_cli import good_ini, run, write
from test_hba import first_auth, login_error, works

SLAPD = "/usr/sbin/slapd"
SCHEMA = Path("/etc/ldap/schema")
SUFFIX = "dc=example,dc=net"
ROOTDN = "cn=Manager," + SUFFIX
ROOTPW = "secret"
LDAP_USERS = {"ldapuser1": "secret1", "ldapuser2": "secret2"}
NOUSER, NOUSER_PW = "nouser", "nouser_pw"     # a PostgreSQL role LDAP does not know
AUTH_CLEARTEXT = 3
# The admin console and a configured user (app, md5user) keep their own lines.
BASE_RULES = ("host pgcat pgcat 127.0.0.1/32 scram-sha-256\n"
              "host appdb app,md5user 127.0.0.1/32 md5\n")
SIMPLE = 'ldapserver=127.0.0.1 ldapport=%d ldapprefix="uid=" ldapsuffix=",dc=example,dc=net"'
BIND_RE = re.compile(r'BIND dn="([^"]*)" mech=SIMPLE bind_ssf=\d+ ssf=(\d+)')
_current = {}     # the module's slapd, for the log dump of a failed test


def dn(user):
    return "uid=%s,%s" % (user, SUFFIX)


LDIF = "dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n" % SUFFIX + "".join(
    "\ndn: %s\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\nuid: %s\nsn: %s\ncn: %s\n"
    "uidNumber: %d\ngidNumber: 1000\nhomeDirectory: /home/%s\nmail: %s@example.net\n"
    % (dn(u), u, u, u, 1001 + i, u, u) for i, u in enumerate(sorted(LDAP_USERS)))


class Slapd:
    """slapd in the foreground (-d 256: its stats log, one line per BIND
    with the connection's ssf, to a file), stopped by SIGTERM to its PID."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slapd.conf"
        self.ldapconf = root / "ldap.conf"
        self.logfile = root / "slapd.log"
        self.proc = None

    def setup(self):
        (self.root / "data").mkdir()
        crt, key = self.root / "server.crt", self.root / "server.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True, timeout=60)
        self.conf.write_text("".join("include %s\n" % (SCHEMA / (s + ".schema"))
                                     for s in ("core", "cosine", "nis", "inetorgperson")) + f"""
pidfile {self.root}/slapd.pid
argsfile {self.root}/slapd.args
TLSCACertificateFile {crt}
TLSCertificateFile {crt}
TLSCertificateKeyFile {key}
access to * by * read by anonymous auth
database ldif
directory {self.root}/data
suffix "{SUFFIX}"
rootdn "{ROOTDN}"
rootpw {ROOTPW}
""")
        self.ldapconf.write_text("TLS_REQCERT never\n")
        self.env = dict(os.environ, LDAPCONF=str(self.ldapconf))

    def start(self):
        for _ in range(3):     # a port taken between free_port() and slapd's bind: again
            self.port, self.tls_port = free_port(), free_port()
            with open(self.logfile, "ab") as log:
                self.proc = subprocess.Popen(
                    [SLAPD, "-d", "256", "-f", str(self.conf),
                     "-h", "ldap://127.0.0.1:%d ldaps://127.0.0.1:%d" % (self.port, self.tls_port)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            wait_until(lambda: self.proc.poll() is not None or
                       (port_open("127.0.0.1", self.port) and port_open("127.0.0.1", self.tls_port)),
                       15, msg="slapd listening")
            if self.proc.poll() is None:
                self.url = "ldap://127.0.0.1:%d" % self.port
                return
        raise AssertionError("slapd did not start; log:\n%s" % tail(self.logfile, 30))

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def tool(self, *args, input=None, check=True):
        r = subprocess.run(list(args), input=input, env=self.env, capture_output=True, text=True, timeout=30)
        if check and r.returncode != 0:
            raise AssertionError("%s failed (%d): %s" % (args[0], r.returncode, r.stderr))
        return r

    def log_offset(self):
        return self.logfile.stat().st_size

    def log_since(self, off):
        with open(self.logfile, "rb") as f:
            f.seek(off)
            return f.read().decode(errors="replace")

    def binds(self, off, user):
        """The ssf of each successful BIND as user's DN since off."""
        return [int(ssf) for d, ssf in BIND_RE.findall(self.log_since(off)) if d == dn(user)]


def _missing(what):
    if os.environ.get("CI"):
        pytest.fail("%s: install slapd and ldap-utils (scripts/lib.sh's APT_PACKAGES)" % what, pytrace=False)
    pytest.skip(what)


@pytest.fixture(scope="module")
def slapd():
    if not os.path.exists(SLAPD):
        _missing("%s is missing" % SLAPD)
    for t in ("ldapadd", "ldappasswd", "openssl"):
        if shutil.which(t) is None:
            _missing("%s is missing" % t)
    s = Slapd(Path(tempfile.mkdtemp(prefix="pgcat-ldap-")))
    try:
        s.setup()
        s.start()
        _current["slapd"] = s
        s.tool("ldapadd", "-x", "-D", ROOTDN, "-w", ROOTPW, "-H", s.url, input=LDIF)
        for user, pw in LDAP_USERS.items():
            s.tool("ldappasswd", "-x", "-D", ROOTDN, "-w", ROOTPW, "-H", s.url, "-s", pw, dn(user))
        yield s
    finally:
        _current.pop("slapd", None)
        s.stop()
        shutil.rmtree(s.root, ignore_errors=True)


@pytest.fixture(scope="module")
def ldap_roles(pg):
    """The LDAP users (and nouser) as PostgreSQL roles, with the same passwords."""
    roles = dict(LDAP_USERS, **{NOUSER: NOUSER_PW})
    with pg.connect("postgres") as c:
        for role, pw in roles.items():
            c.execute("DROP ROLE IF EXISTS %s" % role)
            c.execute("CREATE ROLE %s LOGIN PASSWORD '%s'" % (role, pw))
    yield roles
    with pg.connect("postgres") as c:
        for role in roles:
            with contextlib.suppress(psycopg.Error, AssertionError):
                c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
                wait_until(lambda: not pg.backends(user=role), 10)
                c.execute("DROP ROLE %s" % role)


@pytest.fixture(autouse=True)
def _slapd_log_on_failure(request):
    s = _current.get("slapd")
    off = s.log_offset() if s else 0
    yield
    if _current.get("slapd") and any(getattr(getattr(request.node, "rep_" + w, None), "failed", False)
                                     for w in ("setup", "call")):
        print("\n===== slapd log during the test (last 60 lines) =====")
        print("\n".join(_current["slapd"].log_since(off).splitlines()[-60:]))


def rules(*ldap_lines):
    """BASE_RULES, then one `host all USERS 127.0.0.1/32 ldap OPTIONS` line per (users, options)."""
    return BASE_RULES + "".join("host all %s 127.0.0.1/32 ldap %s\n" % (u, o) for u, o in ldap_lines)


def start(pgcat, slapd, tmp_path, opts, users="ldapuser1,ldapuser2", extra=()):
    hba = tmp_path / "hba.conf"
    hba.write_text(rules((users, opts), *extra))
    inst = pgcat(general={"auth_hba_file": str(hba)}, env={"LDAPCONF": str(slapd.ldapconf)})
    inst.hba = hba
    return inst


def ldap_ok(inst, user):
    works(inst, user, password=LDAP_USERS[user])


def refused(inst, user, password, within=None):
    t0 = time.monotonic()
    e = login_error(inst, user, password=password)
    took = time.monotonic() - t0
    assert e.get("S") == "FATAL" and e.get("C") == "28000", e
    assert e.get("M") == 'LDAP authentication failed for user "%s"' % user, e
    if within is not None:
        assert took < within, "refused after %.1fs" % took
    return e


# --- 1. simple bind ---------------------------------------------------------------

def test_simple_bind(pgcat, slapd, ldap_roles, tmp_path):
    inst = start(pgcat, slapd, tmp_path, SIMPLE % slapd.port)
    assert first_auth(inst, "ldapuser1") == AUTH_CLEARTEXT
    off = slapd.log_offset()
    ldap_ok(inst, "ldapuser1")
    ldap_ok(inst, "ldapuser2")
    # pgcat really bound as the user's DN (plain LDAP: ssf 0)
    wait_until(lambda: slapd.binds(off, "ldapuser1") == [0], 5, msg="ldapuser1's BIND in slapd's log")
    refused(inst, "ldapuser1", "wrong")
    refused(inst, "ldapuser1", "")                     # no unauthenticated bind
    refused(inst, "ldapuser2", LDAP_USERS["ldapuser1"])
    with pytest.raises(psycopg.OperationalError) as ei:
        inst.connect(user="ldapuser1", password="wrong")
    assert 'LDAP authentication failed for user "ldapuser1"' in str(ei.value), str(ei.value)
    # not on the ldap line: no entry; a configured user keeps its md5 line
    e = first_auth(inst, NOUSER)
    assert isinstance(e, dict) and e["C"] == "28000" and "no auth_hba_file entry" in e["M"], e
    works(inst, "app")
    for pw in LDAP_USERS.values():
        assert pw not in inst.ini.read_text()


# --- 2. search+bind ---------------------------------------------------------------

BASEDN = 'ldapbasedn="dc=example,dc=net"'


@pytest.mark.parametrize("opts", [
    BASEDN,
    BASEDN + ' ldapsearchfilter="(uid=$username)"',
    BASEDN + ' ldapsearchfilter="(mail=$username@example.net)"',
    BASEDN + ' ldapsearchattribute=uid ldapbinddn="%s" ldapbindpasswd=%s' % (ROOTDN, ROOTPW),
], ids=["basedn", "filter-uid", "filter-mail", "binddn"])
def test_search_bind(pgcat, slapd, ldap_roles, tmp_path, opts):
    inst = start(pgcat, slapd, tmp_path, "ldapserver=127.0.0.1 ldapport=%d %s" % (slapd.port, opts), users="all")
    ldap_ok(inst, "ldapuser1")
    ldap_ok(inst, "ldapuser2")
    refused(inst, "ldapuser1", "wrong")
    refused(inst, "ldapuser1", "")
    refused(inst, NOUSER, NOUSER_PW)                   # a role of PostgreSQL, not in LDAP
    # the user name is not a filter: "ldapuser1*" must not find ldapuser1
    refused(inst, "ldapuser1*", LDAP_USERS["ldapuser1"])
    works(inst, "app")


# --- 3. URLs, ldaps and StartTLS ------------------------------------------------------

@pytest.mark.parametrize("opts,tls", [
    ('ldapurl="ldap://127.0.0.1:{p}/dc=example,dc=net?uid?sub"', False),
    ('ldapurl="ldaps://127.0.0.1:{tp}/dc=example,dc=net?uid?sub"', True),
    ('ldapserver=127.0.0.1 ldapport={p} ldaptls=1 ldapprefix="uid=" ldapsuffix=",dc=example,dc=net"', True),
    ('ldapscheme=ldaps ldapserver=127.0.0.1 ldapport={tp} ldapbasedn="dc=example,dc=net"', True),
], ids=["ldapurl", "ldapurl-ldaps", "starttls", "ldapscheme-ldaps"])
def test_url_and_tls(pgcat, slapd, ldap_roles, tmp_path, opts, tls):
    inst = start(pgcat, slapd, tmp_path, opts.format(p=slapd.port, tp=slapd.tls_port))
    off = slapd.log_offset()
    ldap_ok(inst, "ldapuser1")
    wait_until(lambda: len(slapd.binds(off, "ldapuser1")) == 1, 5, msg="ldapuser1's BIND in slapd's log")
    ssf = slapd.binds(off, "ldapuser1")[0]
    assert (ssf > 0) == tls, "BIND with ssf %d (TLS expected: %s)" % (ssf, tls)
    if "ldaptls=1" in opts:
        assert " STARTTLS" in slapd.log_since(off)
    refused(inst, "ldapuser1", "wrong")


def test_ldaps_on_the_plain_port_fails(pgcat, slapd, ldap_roles, tmp_path):
    good = ("ldapuser2", 'ldapurl="ldap://127.0.0.1:%d/dc=example,dc=net?uid?sub"' % slapd.port)
    inst = start(pgcat, slapd, tmp_path, 'ldapurl="ldaps://127.0.0.1:%d/dc=example,dc=net?uid?sub"' % slapd.port,
                 users="ldapuser1", extra=[good])
    refused(inst, "ldapuser1", LDAP_USERS["ldapuser1"], within=5)
    ldap_ok(inst, "ldapuser2")
    works(inst, "app")


# --- 4. bad options: pgcat -t names the line -------------------------------------------

@pytest.mark.parametrize("opts,word", [
    ('ldapserver=127.0.0.1 ldapprefix="uid=" ldapbasedn="dc=example,dc=net"', None),
    ('ldapserver=127.0.0.1 ldapbasedn="dc=example,dc=net" ldapfoo=1', "ldapfoo"),
    ('ldapprefix="uid=" ldapsuffix=",dc=example,dc=net"', None),                       # no server
    ('ldapserver=127.0.0.1 ldapscheme=ftp ldapbasedn="dc=example,dc=net"', "ftp"),
    ('ldapserver=127.0.0.1 ldapport=abc ldapbasedn="dc=example,dc=net"', "abc"),
    ('ldapserver=127.0.0.1 ldapbasedn="dc=example,dc=net" ldapsearchattribute=uid '
     'ldapsearchfilter="(uid=$username)"', None),
], ids=["prefix-and-basedn", "unknown-option", "no-server", "bad-scheme", "bad-port", "attribute-and-filter"])
def test_bad_options_rejected_by_t(pg, tmp_path, opts, word):
    hba = write(tmp_path, "host all all 127.0.0.1/32 ldap %s\n" % opts, "hba.conf")
    path = write(tmp_path, good_ini(pg, tmp_path, auth_hba_file=str(hba)))
    r = run(["-t", str(path)])
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    lines = [l for l in out.splitlines() if "%s:1:" % hba in l]
    assert lines and (word is None or any(word in l for l in lines)), out


def test_good_options_pass_t(pg, tmp_path):
    hba = write(tmp_path, rules(("all", SIMPLE % 389), ("all", 'ldapurl="ldaps://h/dc=x?uid?sub"')), "hba.conf")
    r = run(["-t", str(write(tmp_path, good_ini(pg, tmp_path, auth_hba_file=str(hba))))])
    assert r.returncode == 0, r.stdout + r.stderr
    path = write(tmp_path, good_ini(pg, tmp_path, auth_type="ldap", auth_ldap_options="ldapserver=h ldapfoo=1"))
    r = run(["-t", str(path)])
    assert r.returncode == 1 and "auth_ldap_options" in r.stdout + r.stderr, r.stdout + r.stderr


# --- 5. auth_type = ldap ----------------------------------------------------------

def test_auth_type_ldap(pgcat, slapd, ldap_roles):
    opts = 'ldapurl="ldap://127.0.0.1:%d/dc=example,dc=net?uid?sub"' % slapd.port
    inst = pgcat(general={"auth_type": "ldap", "auth_ldap_options": opts}, env={"LDAPCONF": str(slapd.ldapconf)})
    assert first_auth(inst, "ldapuser1") == AUTH_CLEARTEXT
    ldap_ok(inst, "ldapuser1")
    refused(inst, "ldapuser1", "wrong")
    refused(inst, "ldapuser1", "")
    refused(inst, NOUSER, NOUSER_PW)


# --- 6, 7. a server down or silent; many logins at once ------------------------------

def test_server_down_refuses_fast_and_reload_recovers(pgcat, slapd, ldap_roles, tmp_path):
    dead = free_port()                                  # nothing listens there
    inst = start(pgcat, slapd, tmp_path, SIMPLE % dead)
    refused(inst, "ldapuser1", LDAP_USERS["ldapuser1"], within=5)
    works(inst, "app")
    works(inst, "md5user")
    inst.hba.write_text(rules(("ldapuser1,ldapuser2", SIMPLE % slapd.port)))
    r = admin(inst)
    assert command(r, "RELOAD") is None
    r.close()
    ldap_ok(inst, "ldapuser1")
    refused(inst, "ldapuser1", "wrong")


def test_silent_server_stops_no_other_client(pgcat, slapd, ldap_roles, tmp_path):
    # a server that accepts TCP connections and never answers
    lsock = socket.create_server(("127.0.0.1", 0))
    lsock.settimeout(0.1)
    held, accepted, done = [], threading.Event(), threading.Event()

    def accept():
        while not done.is_set():
            with contextlib.suppress(socket.timeout):
                held.append(lsock.accept()[0])
                accepted.set()
    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    inst = start(pgcat, slapd, tmp_path, SIMPLE % lsock.getsockname()[1], users="ldapuser1",
                 extra=[("ldapuser2", SIMPLE % slapd.port)])
    result = {}

    def slow_login():
        try:
            result["e"] = login_error(inst, "ldapuser1", password=LDAP_USERS["ldapuser1"])
        except BaseException as e:  # noqa: BLE001 - reported below
            result["x"] = e
    t = threading.Thread(target=slow_login)
    t.start()
    try:
        assert accepted.wait(5), "pgcat never connected to the silent LDAP server"
        t0 = time.monotonic()
        works(inst, "app")
        ldap_ok(inst, "ldapuser2")
        assert time.monotonic() - t0 < 3, "other logins waited for the silent LDAP server"
        assert t.is_alive(), "the login was not waiting for the silent LDAP server"
    finally:
        done.set()
        acceptor.join(5)
        lsock.close()
        for s in held:
            s.close()
        t.join(15)
    assert not t.is_alive() and "x" not in result, result
    e = result["e"]
    assert e.get("C") == "28000" and e.get("M") == 'LDAP authentication failed for user "ldapuser1"', e
    ldap_ok(inst, "ldapuser2")


def test_client_gone_while_its_bind_waits(pgcat, slapd, ldap_roles, tmp_path):
    """A client that hangs up while the LDAP server has not answered: its
    bind is cancelled (its result, when it comes, reaches no login), and
    pgcat goes on serving (under the sanitizers: no use after free)."""
    lsock = socket.create_server(("127.0.0.1", 0))
    inst = start(pgcat, slapd, tmp_path, SIMPLE % lsock.getsockname()[1], users="ldapuser1",
                 extra=[("ldapuser2", SIMPLE % slapd.port)])
    held = []
    try:
        for _ in range(3):
            r = inst.raw()
            r.startup("ldapuser1", "appdb")
            typ, payload = r.read_msg()
            assert typ == b"R" and struct.unpack("!I", payload[:4])[0] == AUTH_CLEARTEXT, (typ, payload)
            pw = LDAP_USERS["ldapuser1"].encode() + b"\0"
            r.send(b"p" + struct.pack("!I", 4 + len(pw)) + pw)
            lsock.settimeout(5)
            held.append(lsock.accept()[0])   # pgcat's bind is under way
            r.close()                        # and its client goes
        time.sleep(0.5)
        ldap_ok(inst, "ldapuser2")
    finally:
        lsock.close()
        for c in held:
            c.close()   # the binds end now, for no login
    time.sleep(0.5)
    ldap_ok(inst, "ldapuser2")
    works(inst, "app")


def test_many_logins_at_once(pgcat, slapd, ldap_roles, tmp_path):
    inst = start(pgcat, slapd, tmp_path, SIMPLE % slapd.port)

    def one(i):
        user = "ldapuser%d" % (1 + i % 2)
        with inst.connect(user=user, password=LDAP_USERS[user]) as c:
            return user, c.execute("SELECT current_user").fetchone()[0]
    with ThreadPoolExecutor(20) as ex:
        got = list(ex.map(one, range(20)))
    assert len(got) == 20 and all(want == have for want, have in got), got


# --- 8. the pool made by the first login -----------------------------------------------

def test_pool_made_on_first_login_and_reused(pgcat, pg, slapd, ldap_roles, tmp_path):
    wait_until(lambda: not pg.backends(user="ldapuser1"), 10, msg="no ldapuser1 backend of earlier tests")
    inst = start(pgcat, slapd, tmp_path, SIMPLE % slapd.port)
    r = admin(inst)
    try:
        def pools():
            return [x for x in show(r, "POOLS")[1] if (x["database"], x["user"]) == ("appdb", "ldapuser1")]
        assert pools() == []
        off = slapd.log_offset()
        with inst.connect(user="ldapuser1", password=LDAP_USERS["ldapuser1"]) as c:
            pid1 = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert len(pools()) == 1
        with inst.connect(user="ldapuser1", password=LDAP_USERS["ldapuser1"]) as c:
            assert c.execute("SELECT current_user").fetchone()[0] == "ldapuser1"
            assert c.execute("SELECT pg_backend_pid()").fetchone()[0] == pid1   # the pool's server connection
        assert len(pools()) == 1
        assert [b[0] for b in pg.backends(user="ldapuser1")] == [pid1]
        # every login asks LDAP: an existing pool lets no wrong password in
        wait_until(lambda: len(slapd.binds(off, "ldapuser1")) == 2, 5, msg="two BINDs of ldapuser1")
        refused(inst, "ldapuser1", "wrong")
        refused(inst, "ldapuser1", "")
    finally:
        r.close()


def test_ldap_pool_is_not_another_methods(pgcat, slapd, ldap_roles, tmp_path):
    """The pool an LDAP login made holds the password the LDAP server took:
    a login of the same user by another method (md5 on the Unix socket
    here) is of an unknown user, and does not retire or rewrite that
    pool; LDAP logins go on through it."""
    inst = start(pgcat, slapd, tmp_path, SIMPLE % slapd.port)
    inst.hba.write_text("local all ldapuser1 md5\n" + inst.hba.read_text())
    r = admin(inst)
    try:
        assert command(r, "RELOAD") is None
    finally:
        r.close()
    ldap_ok(inst, "ldapuser1")
    e = login_error(inst, "ldapuser1", password=LDAP_USERS["ldapuser1"], unix=True)
    assert e.get("C") == "28P01", e
    ldap_ok(inst, "ldapuser1")
    r = admin(inst)
    try:
        rows = [x for x in show(r, "POOLS")[1] if (x["database"], x["user"]) == ("appdb", "ldapuser1")]
    finally:
        r.close()
    assert len(rows) == 1, rows
    assert "auth_query no longer finds the user" not in inst.log()
