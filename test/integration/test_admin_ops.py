# SPDX-License-Identifier: MIT
"""What an operator moving off PgBouncer reaches for (SPEC §7):

- several console users: admin_users and stats_users, with their secrets
  from auth_file (userlist.txt: plaintext, md5, SCRAM) or a users section;
  stats users may SHOW only and get 42501 for anything else;
- incident and switchover commands: KILL_CLIENT, WAIT_CLOSE, KILL without a
  database, SHUTDOWN WAIT_FOR_CLIENTS (with one worker and with two).

Everything goes through real clients: the raw wire client for the console,
psycopg for traffic and for the console as the Prometheus exporters use it."""
import os
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.request

import psycopg
import pytest

import pgwire
from conftest import ADMIN_PASSWORD, ADMIN_USER, PASSWORDS, free_port, wait_until
from test_admin import admin, command, show
from test_auth_file import scram_secret, write_userlist

OPS_PW = "ops_pw"          # in admin_users, SCRAM secret in auth_file
WATCHER_PW = "watcher_pw"  # in stats_users, md5 secret in auth_file
STRANGER_PW = "stranger_pw"  # in auth_file, in neither list


def md5_secret(user, password):
    import hashlib
    return "md5" + hashlib.md5((password + user).encode()).hexdigest()


def start_console_users(pgcat, tmp_path, admin_users="ops", stats_users="watcher", general=None, **kw):
    ul = tmp_path / "userlist.txt"
    write_userlist(ul, [("ops", scram_secret(OPS_PW, os.urandom(16))),
                        ("watcher", md5_secret("watcher", WATCHER_PW)),
                        ("stranger", STRANGER_PW)])
    g = {"auth_file": str(ul), "admin_users": admin_users, "stats_users": stats_users}
    g.update(general or {})
    return pgcat(general=g, **kw)


def console(inst, user, password):
    r = inst.raw()
    r.login(user, password, "pgcat")
    return r


def first_auth_code(inst, user):
    """The authentication request pgcat answers a console login with."""
    r = inst.raw()
    try:
        r.startup(user, "pgcat")
        typ, payload = r.first_auth_request()
        assert typ == b"R", (typ, payload)
        return struct.unpack("!I", payload[:4])[0]
    finally:
        r.close()


def login_error(inst, user, password):
    r = inst.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login(user, password, "pgcat")
        return ei.value.args[0]
    finally:
        r.close()


def traffic_works(inst):
    with inst.connect() as c:
        assert c.execute("SELECT 41 + 1").fetchone()[0] == 42


# ---------------------------------------------------------------------------
# admin_users and stats_users
# ---------------------------------------------------------------------------

def test_admin_user_from_auth_file_can_reload(pgcat, tmp_path):
    inst = start_console_users(pgcat, tmp_path)
    # Its SCRAM secret from userlist.txt: a SCRAM exchange (10 = SASL).
    assert first_auth_code(inst, "ops") == 10
    r = console(inst, "ops", OPS_PW)
    assert command(r, "RELOAD") is None
    assert "configuration reloaded" in inst.log()
    assert command(r, "PAUSE appdb") is None
    assert command(r, "RESUME appdb") is None
    traffic_works(inst)
    # admin_username with admin_password keeps working beside the lists.
    a = admin(inst)
    assert command(a, "RELOAD") is None


def test_stats_user_may_show_only(pgcat, tmp_path):
    inst = start_console_users(pgcat, tmp_path)
    traffic_works(inst)
    # Its md5 secret from userlist.txt: an md5 exchange (5) even under
    # auth_type scram-sha-256, as for a pool's user.
    assert first_auth_code(inst, "watcher") == 5
    r = console(inst, "watcher", WATCHER_PW)
    _, pools = show(r, "POOLS")
    assert ("appdb", "app") in [(x["database"], x["user"]) for x in pools]
    _, stats = show(r, "STATS")
    assert int({x["database"]: x for x in stats}["appdb"]["total_xact_count"]) >= 1
    for sql in ("RELOAD", "PAUSE appdb", "PAUSE", "KILL appdb", "KILL", "KILL_CLIENT 1", "SET default_pool_size = 3",
                "RECONNECT appdb", "DISABLE appdb", "WAIT_CLOSE", "BAN 127.0.0.1:1", "SHUTDOWN",
                "SHUTDOWN WAIT_FOR_CLIENTS"):
        rows, err, status = r.simple(sql)
        assert err is not None and err["C"] == "42501", (sql, err)
        assert status == "I"
    log = inst.log()
    refused = [l for l in log.splitlines() if "admin command refused" in l and "watcher@pgcat" in l]
    assert len(refused) == 13, refused
    assert any(l.endswith(": SHUTDOWN") for l in refused)
    # Nothing of it happened: not paused, size unchanged, pgcat alive.
    _, cfg = show(r, "CONFIG")
    assert {x["key"]: x["value"] for x in cfg}["default_pool_size"] == "10"
    assert inst.alive()
    traffic_works(inst)


def test_only_listed_users_reach_the_console(pgcat, tmp_path):
    inst = start_console_users(pgcat, tmp_path, stats_users="watcher, ghost")
    # A pool's user and a user of auth_file in neither list: 28000, before
    # any password is asked (as for an unknown user).
    for user, pw in (("app", PASSWORDS["app"]), ("stranger", STRANGER_PW)):
        err = login_error(inst, user, pw)
        assert err["C"] == "28000" and "not allowed to connect to the admin console" in err["M"], err
    # Listed, wrong password: 28P01, as for a pool's user.
    assert login_error(inst, "ops", "wrong")["C"] == "28P01"
    assert login_error(inst, "watcher", "wrong")["C"] == "28P01"
    # Listed without a secret anywhere: refused like a wrong password, and
    # the log says why.
    assert login_error(inst, "ghost", "anything")["C"] == "28P01"
    assert 'user "ghost" is in admin_users or stats_users but has no password' in inst.log()
    # The database of a pool is not the console: the lists change nothing there.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(**inst.conninfo(user="ops", password=OPS_PW))


def test_console_lists_are_reloadable(pgcat, tmp_path):
    inst = start_console_users(pgcat, tmp_path)
    w = console(inst, "watcher", WATCHER_PW)
    assert command(w, "PAUSE appdb")["C"] == "42501"
    inst.general["admin_users"] = "watcher"
    inst.general["stats_users"] = ""
    inst.write()
    assert command(admin(inst), "RELOAD") is None
    # The rights follow the running configuration, on the open session too.
    assert command(w, "PAUSE appdb") is None
    assert command(w, "RESUME appdb") is None
    # ops left admin_users: no new login.
    assert login_error(inst, "ops", OPS_PW)["C"] == "28000"
    traffic_works(inst)


def test_admin_username_in_stats_users_without_admin_password_is_a_stats_user(pgcat, tmp_path):
    """admin_username gets every right through admin_password; without one,
    listed in stats_users, it logs in with its list secret and may SHOW only."""
    inst = start_console_users(pgcat, tmp_path, stats_users="watcher, stranger",
                               general={"admin_username": "stranger", "admin_password": ""})
    r = console(inst, "stranger", STRANGER_PW)
    assert show(r, "VERSION")[1][0]["version"].startswith("pgcat ")
    assert command(r, "RELOAD")["C"] == "42501"
    assert command(r, "SHUTDOWN")["C"] == "42501"
    assert inst.alive()


def test_stats_user_with_users_section_password_through_psycopg(pgcat):
    """A stats user whose plaintext password is in a users section logs in
    with SCRAM; psycopg's ClientCursor, as the Prometheus exporters use it,
    reads SHOW STATS and SHOW POOLS and gets InsufficientPrivilege for RELOAD."""
    inst = pgcat(general={"stats_users": "md5user"})
    traffic_works(inst)
    assert first_auth_code(inst, "md5user") == 10
    with psycopg.connect(**inst.conninfo(user="md5user", dbname="pgbouncer", password=PASSWORDS["md5user"]),
                         autocommit=True, cursor_factory=psycopg.ClientCursor) as a:
        cur = a.execute("SHOW STATS")
        row = [x for x in cur.fetchall() if x[0] == "appdb"][0]
        assert int(row[2]) >= 1     # total_xact_count
        cur = a.execute("SHOW POOLS")
        assert ("appdb", "app") in [(x[0], x[1]) for x in cur.fetchall()]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("RELOAD")
        assert a.execute("SHOW VERSION").fetchone()[0].startswith("pgcat ")


def test_pgbouncer_exporter_as_stats_user(pgcat, tmp_path):
    """Debian's prometheus-pgbouncer-exporter, logged in as a stats user."""
    exe = "/usr/bin/prometheus-pgbouncer-exporter"
    assert os.path.exists(exe), "scripts/test.sh installs prometheus-pgbouncer-exporter"
    inst = start_console_users(pgcat, tmp_path)
    for _ in range(3):
        traffic_works(inst)
    port = free_port()
    env = dict(os.environ, PGPASSWORD=WATCHER_PW)
    proc = subprocess.Popen([exe, "--port", str(port), "--host", "127.0.0.1", "--pgbouncer-port", str(inst.port),
                             "--pgbouncer-user", "watcher", "--pgbouncer-host", inst.host],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def scrape():
            return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
        body = wait_until(scrape, 20)
        req = [l for l in body.splitlines() if l.startswith('pgbouncer_requests_total{database="appdb"}')]
        assert req and float(req[0].split()[-1]) >= 3, body
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode(errors="replace")
    assert "Traceback" not in out and "Error" not in out, out
    assert "admin command refused" not in inst.log()


# ---------------------------------------------------------------------------
# KILL_CLIENT, WAIT_CLOSE, KILL, SHUTDOWN WAIT_FOR_CLIENTS
# ---------------------------------------------------------------------------

def client_rows(r, app_name):
    return [x for x in show(r, "CLIENTS")[1] if x["application_name"] == app_name]


def test_kill_client_in_transaction(pgcat, pg):
    inst = pgcat()
    victim = inst.connect(autocommit=False, application_name="victim")
    pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]   # in a transaction now
    other = inst.connect(autocommit=False, application_name="bystander")
    assert other.execute("SELECT 1").fetchone()[0] == 1
    r = admin(inst)
    rows = client_rows(r, "victim")
    assert len(rows) == 1 and rows[0]["state"] == "active"
    cid = rows[0]["id"]
    assert rows[0]["ptr"] == "C-" + cid
    assert command(r, "KILL_CLIENT " + cid) is None
    with pytest.raises(psycopg.OperationalError):
        victim.execute("SELECT 2")
    # Its server connection went with it: the transaction is gone on PostgreSQL.
    wait_until(lambda: pid not in [b[0] for b in pg.backends(user="app", db="appdb")], 10)
    assert client_rows(r, "victim") == []
    # The others are untouched, inside their transaction.
    assert other.execute("SELECT 3").fetchone()[0] == 3
    other.commit()
    other.close()
    # The ptr form works too; unknown and malformed ids are errors.
    third = inst.connect(application_name="third")
    third.execute("SELECT 1")
    assert command(r, "KILL_CLIENT " + client_rows(r, "third")[0]["ptr"]) is None
    with pytest.raises(psycopg.OperationalError):
        third.execute("SELECT 2")
    assert command(r, "KILL_CLIENT " + cid)["C"] == "42704"
    assert command(r, "KILL_CLIENT C-x")["C"] == "22023"
    assert command(r, "KILL_CLIENT")["C"] == "42601"
    traffic_works(inst)


def test_kill_client_on_another_worker(pgcat):
    """Ids are unique in the instance: the console kills a client that a
    different worker process serves."""
    inst = pgcat(general={"workers": 2})
    r = admin(inst)
    mine = [x for x in show(r, "CLIENTS")[1] if x["database"] == "pgcat"][0]["worker"]
    conns, target = [], None
    for i in range(40):
        c = inst.connect(application_name="c%d" % i)
        c.execute("SELECT 1")
        conns.append(c)
        row = client_rows(r, "c%d" % i)[0]
        if row["worker"] != mine:
            target = (c, row)
            break
    assert target, "all 40 connections landed on the console's worker"
    c, row = target
    assert int(row["id"]) > 1000000000000 * int(row["worker"])
    assert command(r, "KILL_CLIENT " + row["id"]) is None
    wait_until(lambda: client_rows(r, row["application_name"]) == [], 10)
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 2")
    for x in conns:
        if x is not c:
            assert x.execute("SELECT 3").fetchone()[0] == 3
            x.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_wait_close_waits_for_marked_servers(pgcat, workers):
    inst = pgcat(general={"pool_mode": "session", "workers": workers})
    holder = inst.connect(application_name="holder")
    assert holder.execute("SELECT 1").fetchone()[0] == 1   # holds its server (session mode)
    r = admin(inst)
    # Nothing marked yet: WAIT_CLOSE returns at once.
    assert command(r, "WAIT_CLOSE appdb") is None
    assert command(r, "WAIT_CLOSE nosuchdb")["C"] == "3D000"
    assert command(r, "RECONNECT appdb") is None
    # With two workers, the console that waits is served by the worker that
    # does not hold the marked server: it learns of it from the other.
    holder_worker = client_rows(r, "holder")[0]["worker"]
    for i in range(40):
        waiter = inst.raw()
        waiter.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat", params={"application_name": "waiter%d" % i})
        if workers == 1 or client_rows(r, "waiter%d" % i)[0]["worker"] != holder_worker:
            break
        waiter.close()
    else:
        raise AssertionError("all 40 console connections landed on the holder's worker")
    waiter.send(pgwire.query("WAIT_CLOSE appdb"))
    with pytest.raises(socket.timeout):
        waiter.read_msg(timeout=1.5)
    # Parked, not blocking: the console and the pool keep answering.
    _, servers = show(r, "SERVERS")
    assert [x["close_needed"] for x in servers if x["database"] == "appdb"] == ["1"]
    traffic_works(inst)   # a new server, not marked
    assert holder.execute("SELECT 2").fetchone()[0] == 2
    with pytest.raises(socket.timeout):
        waiter.read_msg(timeout=0.5)
    holder.close()   # releases the marked server: it is closed
    msgs = waiter.read_until((b"Z",), timeout=10)
    assert [m[0] for m in msgs] == [b"C", b"Z"] and msgs[0][1].rstrip(b"\0") == b"WAIT_CLOSE"
    _, servers = show(r, "SERVERS")
    assert all(x["close_needed"] == "0" for x in servers)
    # WAIT_CLOSE without a database: every pool.
    assert command(r, "WAIT_CLOSE") is None


def test_kill_without_database_kills_every_pool(pgcat, pg):
    second = {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg.port}},
              "users": {"app": {"password": PASSWORDS["app"]}}}
    inst = pgcat(pools={"second": second})
    a = inst.connect()
    b = inst.connect(dbname="second")
    assert a.execute("SELECT 1").fetchone()[0] == 1 and b.execute("SELECT 1").fetchone()[0] == 1
    r = admin(inst)
    assert command(r, "KILL") is None
    for c in (a, b):
        with pytest.raises(psycopg.OperationalError):
            c.execute("SELECT 2")
    # As with KILL db, the pools stay paused until RESUME; the console lives on.
    _, dbs = show(r, "DATABASES")
    assert {x["name"]: x["paused"] for x in dbs} == {"appdb": "1", "second": "1"}
    assert command(r, "RESUME") is None
    traffic_works(inst)
    with inst.connect(dbname="second") as c:
        assert c.execute("SELECT 4").fetchone()[0] == 4


@pytest.mark.parametrize("workers", [1, 2])
def test_shutdown_wait_for_clients(pgcat, pg, workers):
    # A short shutdown_timeout: WAIT_FOR_CLIENTS waits however long it takes.
    inst = pgcat(general={"workers": workers, "shutdown_timeout": 500})
    clients = [inst.connect(application_name="stay%d" % i) for i in range(4)]
    for c in clients:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    sock = os.path.join(inst.sockdir, ".s.PGSQL.%d" % inst.port)
    assert os.path.exists(sock)
    r = admin(inst)
    assert command(r, "SHUTDOWN WAIT_FOR_CLIENTS") is None
    r.close()
    # New logins are refused (nothing listens on TCP any more), on every
    # worker; the Unix socket stays for the console only (as PgBouncer's).
    for _ in range(6):
        with pytest.raises(psycopg.OperationalError):
            inst.connect()
    for _ in range(4):
        with pytest.raises(psycopg.OperationalError, match="pooler is shutting down"):
            psycopg.connect(host=inst.sockdir, port=inst.port, user="app", password=PASSWORDS["app"],
                            dbname="appdb", connect_timeout=3)
    with psycopg.connect(host=inst.sockdir, port=inst.port, user=ADMIN_USER, password=ADMIN_PASSWORD,
                         dbname="pgcat", autocommit=True, connect_timeout=3) as con:
        assert con.execute("SHOW VERSION").fetchone()[0].startswith("pgcat")
    time.sleep(1.5)
    assert inst.alive()
    for i, c in enumerate(clients):
        assert c.execute("SELECT %s::int", (i,)).fetchone()[0] == i
    for c in clients[:-1]:
        c.close()
    time.sleep(0.5)
    assert inst.alive()
    clients[-1].close()
    wait_until(lambda: not inst.alive(), 15)
    assert inst.proc.returncode == 0
    inst.stopped_by_test = True
    assert not os.path.exists(sock), "the Unix socket outlived pgcat"
    log = inst.log()
    assert "SHUTDOWN WAIT_FOR_CLIENTS: the last client has gone" in log
    assert "shutdown_timeout reached" not in log
    wait_until(lambda: pg.backends(user="app", db="appdb") == [], 10)


@pytest.mark.parametrize("workers", [1, 2])
def test_shutdown_wait_for_servers(pgcat, pg, workers):
    """PgBouncer's SHUTDOWN WAIT_FOR_SERVERS: no new logins (the console
    still over the Unix socket); a transaction under way finishes; a client
    that wants a server after the command, or was waiting for one, is
    closed with "server shutting down"; RESUME is refused; pgcat exits
    once no client holds a server."""
    inst = pgcat(general={"workers": workers, "default_pool_size": 1, "shutdown_timeout": 500})
    holder = inst.connect(autocommit=False)
    holder.execute("SELECT 1")                       # holds the only server
    idle = inst.connect()                            # between transactions
    waiting = inst.connect()
    outcome = []

    def wait_for_a_server():
        try:
            waiting.execute("SELECT 2")
            outcome.append("served")
        except psycopg.Error as e:
            outcome.append(str(e))
    t = threading.Thread(target=wait_for_a_server)
    t.start()
    wait_until(lambda: any(p.get("cl_waiting", "0") != "0" for p in show(admin(inst), "POOLS")[1])
               if workers == 1 else True, 10)
    time.sleep(0.3)
    sock = os.path.join(inst.sockdir, ".s.PGSQL.%d" % inst.port)
    r = admin(inst)
    assert command(r, "SHUTDOWN WAIT_FOR_SERVERS") is None
    if workers == 1:
        # (With two, the console's worker may hold no server and be gone.)
        rows, err, _ = r.simple("RESUME")
        assert err is not None and "pooler is shutting down" in err["M"], err
    r.close()
    t.join(10)
    assert len(outcome) == 1 and "server shutting down" in outcome[0], outcome
    # The transaction under way goes on, and commits.
    assert holder.execute("SELECT 3").fetchone()[0] == 3
    with pytest.raises(psycopg.OperationalError):
        inst.connect()
    with pytest.raises(psycopg.OperationalError, match="pooler is shutting down"):
        psycopg.connect(host=inst.sockdir, port=inst.port, user="app", password=PASSWORDS["app"],
                        dbname="appdb", connect_timeout=3)
    with pytest.raises(psycopg.OperationalError, match="server shutting down"):
        idle.execute("SELECT 4")
    assert inst.alive()
    holder.commit()
    wait_until(lambda: not inst.alive(), 15)
    assert inst.proc.returncode == 0
    inst.stopped_by_test = True
    assert not os.path.exists(sock)
    assert "SHUTDOWN WAIT_FOR_SERVERS: no client holds a server, exiting" in inst.log()
    wait_until(lambda: pg.backends(user="app", db="appdb") == [], 10)


def test_server_fast_close_ends_sessions_at_their_transaction_end(pgcat, pg):
    """server_fast_close (PgBouncer's): in session mode RECONNECT closes a
    server between its client's transactions at once, and one inside a
    transaction when that transaction ends; the client goes with it
    (08P01 "database configuration changed"). Without it the sessions go on."""
    p = pgcat(general={"pool_mode": "session"})
    idle, busy, keeps = p.connect(), p.connect(autocommit=False), p.connect()
    for c in (idle, busy, keeps):
        c.execute("SELECT 1")
    r = admin(p)
    assert command(r, "RECONNECT appdb") is None          # fast close off: nobody notices
    time.sleep(0.3)
    assert keeps.execute("SELECT 2").fetchone()[0] == 2
    keeps.close()
    assert command(r, "SET server_fast_close = true") is None
    busy.execute("SELECT 1")                               # a transaction open (not autocommit)
    assert command(r, "RECONNECT appdb") is None
    time.sleep(0.3)
    with pytest.raises(psycopg.OperationalError, match="database configuration changed"):
        idle.execute("SELECT 3")
    assert busy.execute("SELECT 4").fetchone()[0] == 4     # its transaction goes on
    busy.commit()                                          # ... to its end
    with pytest.raises(psycopg.OperationalError):
        busy.execute("SELECT 5")
    r.close()
    wait_until(lambda: p.log().count("closing because: database configuration changed") >= 2, 5)
    with p.connect() as c:                                 # new sessions are served
        assert c.execute("SELECT 6").fetchone()[0] == 6


@pytest.mark.parametrize("workers", [1, 2])
def test_suspend_resume(pgcat, workers):
    """SUSPEND (PgBouncer's): no client's input is read until RESUME, on
    every worker; the answer to a query under way still arrives; a client
    that logs in meanwhile waits too; the console goes on; SHOW STATE
    says so; RESUME (or SIGUSR2) lets them all go on, nothing lost."""
    inst = pgcat(general={"workers": workers})
    clients = [inst.connect(autocommit=True) for _ in range(4)]
    for c in clients:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    slow = inst.connect(autocommit=True)
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("v", slow.execute("SELECT pg_sleep(1), 7").fetchone()[1]))
    t.start()
    time.sleep(0.3)
    r = admin(inst)
    try:
        assert command(r, "SUSPEND") is None
        err = command(r, "SUSPEND")
        assert err is not None and err.get("M") == "already suspended/paused", err
        t.join(5)
        assert done.get("v") == 7, "the answer under way did not arrive during SUSPEND"
        results = {}

        def query(i, c):
            results[i] = c.execute("SELECT %s::int", (i,)).fetchone()[0]
        threads = [threading.Thread(target=query, args=(i, c)) for i, c in enumerate(clients)]
        late = {}
        threads.append(threading.Thread(target=lambda: late.setdefault(
            "v", inst.connect(autocommit=True).execute("SELECT 42").fetchone()[0])))
        for th in threads:
            th.start()
        time.sleep(1.0)
        assert results == {} and late == {}, (results, late)
        rows = dict((x["key"], x["value"]) for x in show(r, "STATE")[1])
        assert rows["suspended"] == "yes", rows
        assert command(r, "RESUME") is None
        for th in threads:
            th.join(10)
        assert results == {i: i for i in range(len(clients))} and late == {"v": 42}, (results, late)
        rows = dict((x["key"], x["value"]) for x in show(r, "STATE")[1])
        assert rows["suspended"] == "no", rows
        # SIGUSR2 resumes as RESUME does
        assert command(r, "SUSPEND") is None
        got = {}
        th = threading.Thread(target=lambda: got.setdefault("v", clients[0].execute("SELECT 5").fetchone()[0]))
        th.start()
        time.sleep(0.5)
        assert got == {}
        os.kill(inst.proc.pid, signal.SIGUSR2)
        th.join(10)
        assert got == {"v": 5}
    finally:
        r.close()
        for c in clients + [slow]:
            c.close()
