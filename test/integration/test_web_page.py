# SPDX-License-Identifier: MIT
"""The web page (SPEC §8, doc/monitoring.md "Web page"): GET / on
prometheus_port, behind HTTP basic auth for admin_users / stats_users,
polling GET /api/state. Driven by headless Chromium while pgbench runs
through pgcat: what the test asserts is what the page SHOWS (the DOM after
its script ran), not the JSON alone. /metrics stays open as before.

Chromium is Debian's `chromium` (scripts/lib.sh installs it): missing, the
test fails under CI=true and is skipped elsewhere. The credentials go in
the page's address (http://user:password@host:port/): Chromium logs in to
the page with them and sends them again, from its HTTP auth cache, with the
page's fetch() of api/state (same origin, credentials 'same-origin').
PGCAT_WEB_SCREENSHOT=path saves the screenshot there (doc/web-page.png);
otherwise it goes to the test's tmp dir."""
import base64
import html.parser
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import psycopg
import pytest

from conftest import PASSWORDS, PG_BIN, free_port, wait_until
from test_admin import admin, command
from test_auth_file import scram_secret, write_userlist
from conftest import md5_secret

IN_CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

USERS = {                      # user: (password, how auth_file keeps it)
    "webscram": ("scram_pw", "scram"),
    "webmd5": ("md5_pw", "md5"),
    "webplain": ("plain_pw", "plain"),
}


def need_chromium():
    if CHROMIUM:
        return
    if IN_CI:
        pytest.fail("chromium is not installed (scripts/lib.sh APT_PACKAGES): the web page test cannot run")
    pytest.skip("chromium is not installed")


SLOW = ("webslow", "slow_pw")    # a SCRAM verifier of 200,000 iterations


def start(pgcat, tmp_path, workers=1, general=None, scheme="http", slow=False, pool=None):
    entries = []
    if slow:
        entries.append((SLOW[0], scram_secret(SLOW[1], os.urandom(16), 200000)))
    for u, (pw, kind) in USERS.items():
        secret = {"scram": lambda: scram_secret(pw, os.urandom(16)),
                  "md5": lambda: md5_secret(u, pw),
                  "plain": lambda: pw}[kind]()
        entries.append((u, secret))
    entries.append(("nosecret_user", ""))
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, entries)
    port = free_port()
    g = {"prometheus_port": port, "auth_file": str(ul), "workers": workers,
         "admin_users": "webscram, webslow" if slow else "webscram", "stats_users": "webmd5, webplain, nosecret_user, nobody"}
    g.update(general or {})
    inst = pgcat(general=g, pool=pool)
    if scheme == "http":
        wait_until(lambda: http(port, "/metrics")[0] == 200, 10)
    return inst, port


def basic(user, password):
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


def http(port, path, auth=None, method="GET", raw_auth=None, scheme="http", context=None):
    """(status, headers, body) of one request."""
    req = urllib.request.Request("%s://127.0.0.1:%d%s" % (scheme, port, path), method=method)
    if auth:
        req.add_header("Authorization", basic(*auth))
    if raw_auth is not None:
        req.add_header("Authorization", raw_auth)
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def state(port, user="webplain"):
    st, _, body = http(port, "/api/state", auth=(user, USERS[user][0]))
    assert st == 200, (st, body[:200])
    return json.loads(body)


class Dom(html.parser.HTMLParser):
    """The page's tables as the DOM holds them: rows of (attributes of
    the <tr>, {data-k: text}) per table id."""

    def __init__(self):
        super().__init__()
        self.tables, self.attrs, self.table, self.tr, self.td = {}, {}, None, None, None
        self.status = ""
        self.in_status = False
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "table":
            self.table = a.get("id")
            self.tables.setdefault(self.table, [])
        elif tag == "tr" and self.table:
            self.tr = (a, {})
        elif tag == "td" and self.tr is not None:
            self.td = [a.get("data-k"), ""]
        elif a.get("id") == "status":
            self.in_status = True
        elif tag == "body":
            self.attrs = a

    def handle_endtag(self, tag):
        if tag == "td" and self.td is not None:
            if self.td[0]:
                self.tr[1][self.td[0]] = self.td[1]
            self.td = None
        elif tag == "tr" and self.tr is not None:
            if self.tr[1]:
                self.tables[self.table].append(self.tr)
            self.tr = None
        elif tag == "table":
            self.table = None
        elif self.in_status:
            self.in_status = False

    def handle_data(self, data):
        if self.td is not None:
            self.td[1] += data
        if self.in_status:
            self.status += data


def chromium(url, tmp_path, *extra, budget_ms=4000):
    """Headless Chromium on url with its own profile; its stdout."""
    need_chromium()
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
           "--disable-background-networking", "--disable-component-update", "--user-data-dir=" + profile,
           "--virtual-time-budget=%d" % budget_ms] + list(extra) + [url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def page(port, tmp_path, user="webscram"):
    url = "http://%s:%s@127.0.0.1:%d/" % (user, USERS[user][0], port)
    d = Dom()
    d.feed(chromium(url, tmp_path, "--dump-dom"))
    return d


def pool_row(d, name="appdb", user="app"):
    rows = [cells for a, cells in d.tables.get("pools", []) if a.get("data-pool") == name and a.get("data-user") == user]
    assert len(rows) == 1, d.tables.get("pools")
    return rows[0]


def num(s):
    return int(s.replace(",", ""))


def query_row(d, text="SELECT $1;"):   # (pgbench sends the script's semicolon)
    rows = [cells for a, cells in d.tables.get("queries", []) if cells.get("query") == text]
    assert len(rows) == 1, d.tables.get("queries")
    return rows[0]


def test_web_page_shows_pools_errors_bans_live(pgcat, pg, tmp_path):
    inst, port = start(pgcat, tmp_path, pool={"query_stats": "on"})
    script = tmp_path / "bench.sql"
    script.write_text("SELECT 1;\n")
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    bench = subprocess.Popen([str(PG_BIN / "pgbench"), "-h", inst.host, "-p", str(inst.port), "-U", "app", "-n",
                              "-c", "4", "-j", "2", "-T", "12", "-f", str(script), "appdb"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: any(p["name"] == "appdb" and p["xacts"] > 0 for p in state(port)["pools"]), 10)
        first = page(port, tmp_path)
        assert first.attrs.get("data-loaded"), "the page's script never rendered a state: %r" % first.status
        row1 = pool_row(first)
        assert row1["name"] == "appdb" and row1["user"] == "app" and row1["mode"] == "transaction", row1
        x1 = num(row1["xacts"])
        assert x1 > 0, row1
        q1 = query_row(first)                  # pgbench's SELECT 1, as its shape
        assert q1["pool"] == "appdb" and q1["user"] == "app" and num(q1["calls"]) > 0, q1
        assert first.tables["errors"] == [] or all(a.get("data-sqlstate") != "22012" for a, _ in first.tables["errors"])
        assert not [a for a, _ in first.tables["bans"] if a.get("data-host")], first.tables["bans"]

        # a client provokes 22012; the console bans a server
        with inst.connect() as c:
            with pytest.raises(psycopg.errors.DivisionByZero):
                c.execute("SELECT 1/0")
        r = admin(inst)
        try:
            assert command(r, "BAN 192.0.2.1:5999 300") is None
        finally:
            r.close()

        # a name a client chose is shown as text, never as markup
        xss = '<img id="xss" src=x onerror="document.body.id=1">&amp;'
        hostile = inst.connect(application_name=xss)
        hostile.execute("SELECT 1")
        try:
            second = page(port, tmp_path)
        finally:
            hostile.close()
        assert "xss" not in second.ids, second.ids
        assert [c for _, c in second.tables["clients"] if c.get("application_name") == xss], second.tables["clients"]
        row2 = pool_row(second)
        assert num(row2["xacts"]) > x1, (x1, row2)
        errs = [cells for a, cells in second.tables["errors"] if a.get("data-sqlstate") == "22012"]
        assert errs and errs[0]["pool"] == "appdb" and errs[0]["user"] == "app" and num(errs[0]["count"]) >= 1, \
            second.tables["errors"]
        bans = [cells for a, cells in second.tables["bans"] if a.get("data-host") == "192.0.2.1"]
        assert bans and bans[0]["server"] == "192.0.2.1:5999" and bans[0]["source"] == "admin", second.tables["bans"]
        assert second.status.startswith("updated"), second.status
        # the shard of the pool, its server and role
        shards = [cells for _, cells in second.tables["shards"] if cells.get("pool") == "appdb"]
        assert shards and shards[0]["server"] == "127.0.0.1:%d" % pg.port and shards[0]["role"] == "primary", shards
        # pgbench's clients, listed; its query's count going up
        clients = [cells for _, cells in second.tables["clients"] if cells.get("pool") == "appdb"]
        assert clients, second.tables["clients"]
        q2 = query_row(second)
        assert num(q2["calls"]) > num(q1["calls"]), (q1, q2)
        err_shape = query_row(second, "SELECT $1/$2")
        assert num(err_shape["errors"]) == 1, err_shape

        shot = os.environ.get("PGCAT_WEB_SCREENSHOT") or str(tmp_path / "web-page.png")
        url = "http://webscram:%s@127.0.0.1:%d/" % (USERS["webscram"][0], port)
        chromium(url, tmp_path, "--screenshot=" + shot, "--window-size=1400,1250", "--hide-scrollbars")
        with open(shot, "rb") as f:
            png = f.read()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, len(png)
    finally:
        out = bench.communicate(timeout=60)[0]
    assert bench.returncode == 0, out


def test_web_page_auth_and_methods(pgcat, tmp_path):
    inst, port = start(pgcat, tmp_path)
    for path in ("/", "/api/state"):
        st, h, _ = http(port, path)
        assert st == 401 and h["WWW-Authenticate"].startswith('Basic realm="pgcat"'), (path, st, dict(h))
        for user in USERS:
            assert http(port, path, auth=(user, "wrong"))[0] == 401, (path, user)
        assert http(port, path, auth=("app", PASSWORDS["app"]))[0] == 401        # not a console user
        assert http(port, path, auth=("nosecret_user", ""))[0] == 401           # no secret: never
        assert http(port, path, auth=("nobody", "x"))[0] == 401                 # listed, unknown
    for user in USERS:                          # plaintext, md5 and SCRAM secrets, twice (cached)
        for _ in range(2):
            s = state(port, user)
            assert s["queries"] == [] and isinstance(s["pools"], list), s
    st, h, body = http(port, "/", auth=("webplain", USERS["webplain"][0]))
    assert st == 200 and h["Content-Type"].startswith("text/html"), (st, dict(h))
    assert b"Top queries" in body and b"api/state" in body and b"http://" not in body and b"https://" not in body
    assert "script-src" in h["Content-Security-Policy"]
    st, h, body = http(port, "/", auth=("webplain", USERS["webplain"][0]), method="HEAD")
    assert st == 200 and body == b"", (st, body[:50])
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        assert http(port, "/api/state", auth=("webplain", USERS["webplain"][0]), method=method)[0] == 405, method
    # /metrics: as before, no credentials needed
    st, _, body = http(port, "/metrics")
    assert st == 200 and b"pgcat_pools_cl_active" in body
    assert http(port, "/no/such/page")[0] == 404
    log = inst.log()
    assert "web page: GET / on the metrics port, plain HTTP" in log
    for pw, _ in USERS.values():
        assert pw not in log


def test_web_page_hostile_authorization(pgcat, tmp_path):
    inst, port = start(pgcat, tmp_path, slow=True)
    nasty = [
        "Basic " + "A" * 40000,                              # huge
        "Basic " + "!@#$%^&*()" * 20,                        # not base64
        "Basic " + base64.b64encode(b"webplain" + b"plain_pw").decode(),   # no colon
        "Basic " + base64.b64encode(b"webplain:plain_pw\x00junk").decode(),  # a NUL inside
        "Basic " + base64.b64encode(b":plain_pw").decode(),  # no user
        "Basic",
        "Bearer " + "x" * 100,
        "basic " + base64.b64encode(("webscram:" + "p" * 5000).encode()).decode()[:1000],
        "Basic " + base64.b64encode(b"webplain:plain_pw").decode() + "=====",
    ]
    for v in nasty:
        st, _, _ = http(port, "/api/state", raw_auth=v)
        assert st == 401, (v[:40], st)
    # a SCRAM user's wrong guesses, many at once, then the right one
    for _ in range(20):
        assert http(port, "/api/state", auth=("webscram", "guess"))[0] in (401, 503)
    assert state(port, "webscram")["pools"] is not None
    with inst.connect() as c:
        assert c.execute("SELECT 42").fetchone()[0] == 42
    r = inst.psql("SELECT 43")
    assert r.stdout.strip() == "43"
    assert http(port, "/metrics")[0] == 200
    # clients that leave while their password's PBKDF2 runs (off the loop)
    guess = ("GET /api/state HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n\r\n" % basic(SLOW[0], "guess")).encode()
    for _ in range(6):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(guess)
        s.close()
    t0 = time.monotonic()
    assert http(port, "/metrics")[0] == 200 and time.monotonic() - t0 < 2   # the loop is not held
    # (one check at a time: 503 while a left guess still derives)
    wait_until(lambda: http(port, "/api/state", auth=SLOW)[0] == 200, 20)
    assert http(port, "/api/state", auth=(SLOW[0], "wrong"))[0] == 401
    # and one still deriving when pgcat stops (the fixture's SIGTERM)
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(guess)
    assert inst.stop() == 0
    inst.stopped_by_test = True
    s.close()


def test_web_state_lists_every_workers_connections(pgcat, tmp_path):
    """Clients and servers of both workers are listed (SHM_ADMIN_DUMP): the
    page's poll reads the answer to the request posted by the poll before,
    so two polls a second apart show them."""
    inst, port = start(pgcat, tmp_path, workers=2)
    conns = [inst.connect() for _ in range(8)]
    try:
        for c in conns:
            c.execute("SELECT 1")

        def listed():
            s = state(port)
            workers = {x["worker"] for x in s["clients"] if x["database"] == "appdb"}
            return s if workers == {0, 1} and s["clients_partial"]["workers_missing"] == 0 else None
        s = wait_until(listed, 10, interval=0.6)
        assert sum(1 for x in s["clients"] if x["database"] == "appdb") >= 8, s["clients"]
        assert all(x["user"] == "app" for x in s["clients"] if x["database"] == "appdb")
        servers = [x for x in s["servers"] if x["database"] == "appdb"]
        assert servers and all(x["host"] == "127.0.0.1" for x in servers), servers
    finally:
        for c in conns:
            c.close()


def test_web_page_over_tls(pgcat, tmp_path):
    """client_tls_sslmode = require: the listener speaks HTTPS with the
    clients' certificate and key (and /metrics with it); plain HTTP gets
    no answer."""
    import ssl
    from test_tls import make_ca, make_cert
    d = str(tmp_path)
    make_ca(d, "ca")
    make_cert(d, "ca", "server", "localhost", "DNS:localhost,IP:127.0.0.1")
    tls = {"client_tls_sslmode": "require", "client_tls_cert_file": os.path.join(d, "server.crt"),
           "client_tls_key_file": os.path.join(d, "server.key")}
    inst, port = start(pgcat, tmp_path, general=tls, scheme="https")
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
    ctx.set_alpn_protocols(["h2", "http/1.1"])       # as a browser offers them
    wait_until(lambda: http(port, "/metrics", scheme="https", context=ctx)[0] == 200, 10)
    assert http(port, "/api/state", scheme="https", context=ctx)[0] == 401
    st, _, body = http(port, "/api/state", auth=("webscram", USERS["webscram"][0]), scheme="https", context=ctx)
    assert st == 200 and json.loads(body)["pools"], body[:200]
    with pytest.raises(Exception):
        http(port, "/metrics")
    # a browser: over TLS (its ALPN offers h2 first), certificate from our own CA
    url = "https://webplain:%s@127.0.0.1:%d/" % (USERS["webplain"][0], port)
    d = Dom()
    d.feed(chromium(url, tmp_path, "--ignore-certificate-errors", "--dump-dom"))
    assert d.attrs.get("data-loaded") and pool_row(d)["name"] == "appdb", d.status
    with inst.connect(sslmode="require") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_web_page_tls_follows_a_reload(pgcat, tmp_path):
    """A RELOAD that turns client TLS on makes the page HTTPS (no password
    over plain HTTP from then on), one that turns it off makes it plain
    again; the port and /metrics stay."""
    import ssl
    from test_tls import make_ca, make_cert
    d = str(tmp_path)
    make_ca(d, "ca")
    make_cert(d, "ca", "server", "localhost", "DNS:localhost,IP:127.0.0.1")
    inst, port = start(pgcat, tmp_path)
    assert http(port, "/api/state", auth=("webplain", USERS["webplain"][0]))[0] == 200
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
    inst.general.update({"client_tls_sslmode": "require", "client_tls_cert_file": os.path.join(d, "server.crt"),
                         "client_tls_key_file": os.path.join(d, "server.key")})
    inst.write()
    r = admin(inst)
    try:
        assert command(r, "RELOAD") is None
    finally:
        r.close()
    st, _, body = http(port, "/api/state", auth=("webplain", USERS["webplain"][0]), scheme="https", context=ctx)
    assert st == 200 and json.loads(body)["pools"], body[:200]
    with pytest.raises(Exception):
        http(port, "/api/state", auth=("webplain", USERS["webplain"][0]))
    inst.general["client_tls_sslmode"] = "disable"
    inst.write()
    os.kill(inst.proc.pid, signal.SIGHUP)                 # (a plain console login is refused now)
    wait_until(lambda: http(port, "/api/state", auth=("webplain", USERS["webplain"][0]))[0] == 200, 10)
    assert http(port, "/metrics")[0] == 200
    with inst.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_web_state_shows_replica_lag(pgcat, pg, pg_replica, tmp_path):
    """The shards of a pool with their replication lag, as the lag monitor
    measures it: a figure for the replica, none for the primary."""
    from test_replicas import pools
    pool = pools(pg, [("127.0.0.1", pg_replica.port)])["appdb"]
    inst, port = start(pgcat, tmp_path, pool=pool, general={"replica_lag_check_interval": 200})

    def measured():
        rows = {x["port"]: x for x in state(port)["shards"] if x["pool"] == "appdb"}
        r = rows.get(pg_replica.port)
        return rows if r and r["lag_bytes"] is not None and r["lag_ms"] is not None else None
    rows = wait_until(measured, 10)
    assert rows[pg_replica.port]["role"] == "replica" and rows[pg_replica.port]["lag_bytes"] >= 0, rows
    assert rows[pg.port]["role"] == "primary" and rows[pg.port]["lag_bytes"] is None, rows
