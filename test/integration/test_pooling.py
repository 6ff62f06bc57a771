# SPDX-License-Identifier: MIT
"""Pooling (SPEC §3): transaction mode shares few server connections among many
clients, session mode gives each client its own until it leaves (then runs
server_reset_query), pool_size and min_pool_size hold, waiting clients are
served in FIFO order, max_client_conn refuses with 53300."""
import os
import signal
import subprocess
import threading
import time

import psycopg
import pytest

import pgwire
from forward import Forwarder
from conftest import PASSWORDS, assert_pool_idle, assert_works, wait_until
from test_admin import admin, show


class MaxSampler:
    """Samples pg.count(user, db) in the background; .max is the largest seen."""

    def __init__(self, pg, user="app", db="appdb", interval=0.02):
        self.pg, self.user, self.db, self.interval = pg, user, db, interval
        self.max = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        with self.pg.connect("postgres") as c:
            while not self._stop.is_set():
                n = c.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s "
                              "AND datname = %s AND backend_type = 'client backend'",
                              (self.user, self.db)).fetchone()[0]
                self.max = max(self.max, n)
                self.samples += 1
                time.sleep(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(10)


def run_threads(n, fn):
    errors = []

    def wrap(i):
        try:
            fn(i)
        except BaseException as e:  # noqa: BLE001
            errors.append((i, repr(e)))
    ts = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, "client errors: %r" % errors[:5]


def test_transaction_mode_pool_size_respected(pgcat, pg):
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 2})
    done = []

    def client(i):
        with p.connect(autocommit=False) as c:
            for j in range(10):
                v = c.execute("SELECT %s::int * 2, pg_sleep(0.01)", (i * 100 + j,)).fetchone()[0]
                assert v == (i * 100 + j) * 2
                c.commit()
        done.append(i)

    with MaxSampler(pg) as s:
        run_threads(20, client)
    assert len(done) == 20
    assert s.samples > 5
    assert 1 <= s.max <= 2, "saw %d server connections with pool_size 2" % s.max
    assert_pool_idle(pg, max_conns=2)


def test_user_pool_size_overrides_default(pgcat, pg):
    p = pgcat(general={"default_pool_size": 10}, users={"app": {"pool_size": 3}})

    def client(i):
        with p.connect() as c:
            for _ in range(5):
                c.execute("SELECT pg_sleep(0.02)")

    with MaxSampler(pg) as s:
        run_threads(12, client)
    assert 1 <= s.max <= 3, "saw %d server connections with pool_size 3" % s.max


def test_transaction_stays_on_one_server(pgcat, pg):
    p = pgcat(general={"default_pool_size": 3})

    def client(i):
        with p.connect(autocommit=False) as c:
            for _ in range(5):
                pid1 = c.execute("SELECT pg_backend_pid()").fetchone()[0]
                c.execute("CREATE TEMP TABLE tx_local (a int) ON COMMIT DROP")
                c.execute("SELECT pg_sleep(0.01)")
                c.execute("INSERT INTO tx_local VALUES (1)")
                pid2 = c.execute("SELECT pg_backend_pid()").fetchone()[0]
                assert pid1 == pid2, "transaction moved from server %d to %d" % (pid1, pid2)
                assert c.execute("SELECT count(*) FROM tx_local").fetchone()[0] == 1
                c.commit()

    run_threads(8, client)
    assert_pool_idle(pg, max_conns=3)


def test_transaction_mode_shares_one_server_between_clients(pgcat, pg):
    p = pgcat(general={"default_pool_size": 1})
    a = p.connect()
    b = p.connect()
    pa = a.execute("SELECT pg_backend_pid()").fetchone()[0]
    pb = b.execute("SELECT pg_backend_pid()").fetchone()[0]
    assert pa == pb, "pool_size 1 in transaction mode: both clients use the one server"
    assert pg.count("app", "appdb") == 1
    a.close()
    b.close()


def test_session_mode_one_server_per_client(pgcat, pg):
    p = pgcat(general={"pool_mode": "session", "default_pool_size": 5})
    conns = [p.connect() for _ in range(3)]
    pids = []
    for c in conns:
        ps = {c.execute("SELECT pg_backend_pid()").fetchone()[0] for _ in range(5)}
        assert len(ps) == 1, "a session-mode client changed server: %r" % ps
        pids.append(ps.pop())
    assert len(set(pids)) == 3, "session clients share a server: %r" % pids
    assert pg.count("app", "appdb") == 3
    # Session state lives on: a SET stays without a transaction around it.
    conns[0].execute("SET work_mem = '3MB'")
    conns[1].execute("SELECT 1")
    assert conns[0].execute("SHOW work_mem").fetchone()[0] == "3MB"
    for c in conns:
        c.close()
    assert_pool_idle(pg, max_conns=5)


def test_session_mode_clients_wait_for_a_free_server(pgcat, pg):
    p = pgcat(general={"pool_mode": "session", "default_pool_size": 2})

    def client(i):
        with p.connect() as c:
            for _ in range(3):
                c.execute("SELECT pg_sleep(0.01)")

    with MaxSampler(pg) as s:
        run_threads(8, client)
    assert 1 <= s.max <= 2, "saw %d server connections with pool_size 2" % s.max
    assert_pool_idle(pg, max_conns=2)


def test_session_mode_server_reset_query(pgcat, pg):
    """What one session left behind (temp table, SET, prepared statement,
    advisory lock, LISTEN) is gone for the next client of the same server."""
    p = pgcat(general={"pool_mode": "session", "default_pool_size": 1})
    with p.connect() as a:
        pid_a = a.execute("SELECT pg_backend_pid()").fetchone()[0]
        a.execute("CREATE TEMP TABLE left_behind (a int)")
        a.execute("SET work_mem = '7MB'")
        a.execute("SET TimeZone = 'Asia/Tokyo'")
        a.execute("PREPARE leftover AS SELECT 1")
        a.execute("SELECT pg_advisory_lock(4242)")
        a.execute("LISTEN left_channel")
    with p.connect() as b:
        assert b.execute("SELECT pg_backend_pid()").fetchone()[0] == pid_a, \
            "pool_size 1: the next client should get the same server connection"
        assert b.execute("SELECT to_regclass('pg_temp.left_behind')").fetchone()[0] is None
        assert b.execute("SHOW work_mem").fetchone()[0] != "7MB"
        assert b.execute("SHOW TimeZone").fetchone()[0] != "Asia/Tokyo"
        assert b.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] == 0
        assert b.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                         "AND pid = pg_backend_pid()").fetchone()[0] == 0
        assert b.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0] == 0
    assert_pool_idle(pg, max_conns=1)


def test_session_mode_custom_server_reset_query(pgcat, pg, table):
    t = table("who text")
    p = pgcat(general={"pool_mode": "session", "default_pool_size": 1,
                       "server_reset_query": "INSERT INTO %s VALUES ('reset')" % t})
    with p.connect() as a:
        a.execute("SELECT 1")
    wait_until(lambda: pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 1, 10,
               msg="server_reset_query to run when the session client left")


def test_min_pool_size_opened_at_startup(pgcat, pg):
    pgcat(general={"idle_timeout": 500}, users={"app": {"min_pool_size": 3}})
    wait_until(lambda: pg.count("app", "appdb") == 3, 15,
               msg="3 warm server connections for app without any client")
    assert pg.count("md5user", "appdb") == 0
    # Kept even past idle_timeout.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert pg.count("app", "appdb") >= 3, "min_pool_size connections were closed"
        time.sleep(0.1)


def test_general_min_pool_size(pgcat, pg):
    pgcat(general={"min_pool_size": 2}, users={"md5user": None, "cleartext_user": None,
                                                "trust_user": None})
    wait_until(lambda: pg.count("app", "appdb") == 2, 15)


def test_min_pool_size_replaces_killed_connections(pgcat, pg):
    pgcat(users={"app": {"min_pool_size": 2}})
    wait_until(lambda: pg.count("app", "appdb") == 2, 15)
    victim = pg.backends("app", "appdb")[0][0]
    pg.terminate(victim)
    wait_until(lambda: victim not in [r[0] for r in pg.backends("app", "appdb")]
               and pg.count("app", "appdb") == 2, 15,
               msg="min_pool_size to open a replacement")


def test_waiting_clients_served_fifo(pgcat, pg):
    p = pgcat(general={"default_pool_size": 1})
    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")          # holds the only server (transaction open)
    order = []
    lock = threading.Lock()

    def waiter(i):
        with p.connect() as c:
            # The server's clock says when each query ran (thread wake-up order
            # on this side could differ).
            ts = c.execute("SELECT clock_timestamp()").fetchone()[0]
            with lock:
                order.append((ts, i))

    ts = []
    for i in range(4):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        ts.append(t)
        time.sleep(0.3)                 # let each one queue before the next
    assert order == [], "a client ran while the only server was in another's transaction"
    holder.commit()
    for t in ts:
        t.join(30)
    holder.close()
    ran = [i for _, i in sorted(order)]
    assert ran == [0, 1, 2, 3], "clients were not served in arrival order: %r" % ran


def test_max_client_conn(pgcat, pg):
    p = pgcat(general={"max_client_conn": 3})
    conns = [p.connect() for _ in range(3)]
    r = p.raw()
    with pytest.raises(pgwire.ProtocolError) as ei:
        r.login("app", PASSWORDS["app"], "appdb")
    r.close()
    fields = ei.value.args[0]
    assert isinstance(fields, dict), fields
    assert fields.get("C") == "53300"
    assert "too many clients already" in fields.get("M", "")
    with pytest.raises(psycopg.OperationalError) as ei:
        p.connect()
    assert "too many clients already" in str(ei.value)
    for c in conns:                      # existing clients unaffected
        assert c.execute("SELECT 1").fetchone()[0] == 1
    conns.pop().close()
    wait_until(lambda: p.connect().close() is None, 10, msg="a login after a client left")
    for c in conns:
        c.close()


def test_many_clients_few_servers_all_succeed(pgcat, pg):
    p = pgcat(general={"default_pool_size": 3})
    results = []

    def client(i):
        with p.connect() as c:
            for j in range(20):
                results.append(c.execute("SELECT %s::int", (i * 1000 + j,)).fetchone()[0])

    with MaxSampler(pg) as s:
        run_threads(40, client)
    assert sorted(results) == sorted(i * 1000 + j for i in range(40) for j in range(20))
    assert s.max <= 3
    assert_works(p)


def _keepalive_timers(port):
    """Established TCP connections accepted on port (pgcat's side), and how
    many of them run a keepalive timer, from ss(8). (ss shows one timer: a
    connection with unacknowledged bytes shows its retransmission timer, so
    callers poll.)"""
    out = subprocess.run(["ss", "-tnoH", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True, check=True).stdout
    lines = [l for l in out.splitlines() if l.strip()]
    return len(lines), sum("timer:(keepalive" in l for l in lines)


def test_tcp_keepalive_on_client_connections_and_reload(pgcat, pg):
    """tcp_keepalive (SPEC §2) holds for client connections, which take it
    from the listening socket, and a reload that changes it holds for the
    connections accepted afterwards."""
    p = pgcat(general={"tcp_keepalive": True})
    c1 = p.connect()
    assert c1.execute("SELECT 1").fetchone()[0] == 1
    wait_until(lambda: _keepalive_timers(p.port) == (1, 1), 10, msg="a keepalive timer on the client connection")
    p.general["tcp_keepalive"] = False
    p.write()
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded" in p.log(), 10)
    c2 = p.connect()
    assert c2.execute("SELECT 2").fetchone()[0] == 2
    # the first keeps its timer; the one accepted after the reload has none
    wait_until(lambda: _keepalive_timers(p.port) == (2, 1), 10, msg="one keepalive timer out of two connections")
    time.sleep(0.5)
    assert _keepalive_timers(p.port) == (2, 1)
    c1.close()
    c2.close()


def test_reserve_pool(pgcat, pg):
    """A client that waited reserve_pool_timeout gets one of
    reserve_pool_size extra connections; SHOW POOLS and /metrics show it in
    use; it closes again once idle."""
    import urllib.request
    from conftest import free_port
    mport = free_port()
    p = pgcat(general={"default_pool_size": 1, "reserve_pool_size": 1, "reserve_pool_timeout": 500,
                       "query_wait_timeout": 20000, "prometheus_port": mport})

    def reserve_in_use():
        r = admin(p)
        _, rows = show(r, "POOLS")
        r.close()
        mine = [x for x in rows if x["database"] == "appdb" and x["user"] == "app"]
        return int(mine[0]["sv_reserve"])

    def metric():
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5).read().decode()
        line = [l for l in body.splitlines() if l.startswith("pgcat_pools_sv_reserve{") and 'pool="appdb"' in l
                and 'user="app"' in l]
        return int(line[0].split()[-1])

    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")                    # the pool's only server, held
    waiter = p.connect(autocommit=False)
    t0 = time.monotonic()
    assert waiter.execute("SELECT 2").fetchone()[0] == 2
    took = time.monotonic() - t0
    assert 0.4 <= took < 3, "the reserve came after %.1fs (reserve_pool_timeout 0.5s)" % took
    assert pg.count("app", "appdb") == 2
    assert reserve_in_use() == 1
    assert metric() == 1
    # a third client: the reserve (one) is used up, so it waits for a server
    third = p.connect()
    done = []
    t = threading.Thread(target=lambda: done.append(third.execute("SELECT 3").fetchone()[0]))
    t.start()
    time.sleep(1.0)
    assert not done and pg.count("app", "appdb") == 2, "more than pool_size + reserve_pool_size connections"
    holder.commit()
    t.join(10)
    assert done == [3]
    waiter.commit()
    for c in (holder, waiter, third):
        c.close()
    # the reserve's connection closes once it is no longer needed
    wait_until(lambda: pg.count("app", "appdb") == 1, 10, msg="the reserve connection to close")
    assert reserve_in_use() == 0
    assert "taking connection from reserve_pool (reserve_pool_size 1" in p.log()


# ---- max_db_connections, max_user_connections -----------------------------------

CAP_USERS = ("app", "md5user", "cleartext_user")


def _backends(pg, users):
    return pg.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = 'appdb' AND usename = ANY(%s)",
                  (list(users),))[0][0]


def _load_and_watch(p, pg, users, per_user, n, watch_users):
    """Transactions of every user at once; the most backends seen."""
    errors, done, seen = [], [], [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen[0] = max(seen[0], _backends(pg, watch_users))
            time.sleep(0.01)

    def run(u):
        try:
            with p.connect(user=u) as c:
                for _ in range(n):
                    with c.transaction():
                        c.execute("SELECT pg_sleep(0.02)")
                    done.append(u)
        except Exception as e:   # noqa: BLE001 (reported below)
            errors.append("%s: %r" % (u, e))

    w = threading.Thread(target=watch)
    w.start()
    ts = [threading.Thread(target=run, args=(u,)) for u in users for _ in range(per_user)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    stop.set()
    w.join(10)
    return errors, len(done), seen[0]


def test_max_db_connections_caps_every_user_of_a_database(pgcat, pg):
    p = pgcat(general={"max_db_connections": 4, "default_pool_size": 10, "query_wait_timeout": 30000})
    errors, done, seen = _load_and_watch(p, pg, CAP_USERS, 4, 15, CAP_USERS)
    assert not errors, errors
    assert done == 3 * 4 * 15, "every transaction completes"
    assert 1 <= seen <= 4, "%d backends for appdb with max_db_connections = 4" % seen
    r = admin(p)
    _, rows = show(r, "DATABASES")
    r.close()
    assert {int(x["max_connections"]) for x in rows if x["name"] == "appdb"} == {4}


def test_max_user_connections_caps_a_role(pgcat, pg):
    p = pgcat(general={"default_pool_size": 10, "query_wait_timeout": 30000},
              users={"app": {"max_user_connections": 2}})
    errors, done, seen = _load_and_watch(p, pg, ("app",), 6, 10, ("app",))
    assert not errors, errors
    assert done == 60
    assert 1 <= seen <= 2, "%d backends of role app with max_user_connections = 2" % seen
    r = admin(p)
    _, rows = show(r, "USERS")
    r.close()
    assert {int(x["max_user_connections"]) for x in rows if x["name"] == "app"} == {2}


def test_max_db_connections_closes_another_pools_idle_server(pgcat, pg):
    """At the cap, an idle server connection of another user's pool on the
    same database is closed to make room, instead of making the client
    wait for idle_timeout."""
    p = pgcat(general={"max_db_connections": 3, "default_pool_size": 5, "query_wait_timeout": 3000})
    holders = [p.connect(autocommit=False) for _ in range(3)]
    for c in holders:
        c.execute("SELECT 1")                     # three servers of app's pool
    for c in holders:
        c.commit()                                # ... now idle
    assert _backends(pg, CAP_USERS) == 3
    t0 = time.monotonic()
    with p.connect(user="md5user") as c:
        assert c.execute("SELECT 42").fetchone()[0] == 42
    assert time.monotonic() - t0 < 2.5
    assert _backends(pg, CAP_USERS) <= 3
    assert "closed to make room under max_db_connections" in p.log()
    for c in holders:
        c.close()


def test_server_password_changed_waiters_told_at_once(pgcat, pg):
    """A server login refused for its password, while the pool's other
    connection is busy in a transaction: the clients waiting for a server
    get PostgreSQL's error at once (not at query_wait_timeout), and pgcat
    does not try again at every janitor tick while they wait."""
    role = "pwchange_%s" % os.urandom(3).hex()
    pg.sql("CREATE ROLE %s LOGIN PASSWORD 'first_pw'" % role)
    try:
        p = pgcat(general={"default_pool_size": 2, "query_wait_timeout": 60000},
                  users={role: {"password": "first_pw", "pool_size": 2}})
        holder = p.connect(user=role, password="first_pw", autocommit=False)
        holder.execute("SELECT 1")   # its server, in a transaction now
        pg.sql("ALTER ROLE %s PASSWORD 'second_pw'" % role)
        offset = pg.log_offset()
        results = [None] * 3

        def run(i):
            t0 = time.monotonic()
            try:
                with p.connect(user=role, password="first_pw") as c:
                    c.execute("SELECT 1")
                results[i] = ("ok", time.monotonic() - t0)
            except psycopg.Error as e:
                results[i] = (str(e), time.monotonic() - t0)
        errors = run_threads(3, run)
        assert not errors, errors
        for msg, took in results:
            assert "password authentication failed" in msg, results
            assert took < 5, results
        time.sleep(1.5)   # a janitor retrying at each tick would log ~15 more
        fails = pg.log_since(offset, 1000).count('password authentication failed for user "%s"' % role)
        assert 1 <= fails <= 3, "server logins refused: %d" % fails
        holder.rollback()
        holder.close()
        assert_works(p)
    finally:
        pg.sql("DROP ROLE IF EXISTS %s" % role)


def test_server_login_retry_spaces_failed_logins(pgcat, pg):
    """server_login_retry: after a refused server login, clients asking for
    that server within it get the failure at once and no new login is
    tried; after it, one is."""
    role = "retry_%s" % os.urandom(3).hex()
    pg.sql("CREATE ROLE %s LOGIN PASSWORD 'right_pw'" % role)
    try:
        p = pgcat(general={"server_login_retry": "3s"},
                  users={role: {"password": "wrong_pw"}})
        offset = pg.log_offset()
        t0 = time.monotonic()
        for _ in range(8):
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                psycopg.connect(p.dsn(role, password="wrong_pw"))
            time.sleep(0.2)
        assert time.monotonic() - t0 < 3
        refused = lambda: pg.log_since(offset, 1000).count('password authentication failed for user "%s"' % role)
        assert refused() == 1, "server logins within server_login_retry: %d" % refused()
        time.sleep(3.2)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(p.dsn(role, password="wrong_pw"))
        wait_until(lambda: refused() == 2, 5, msg="one new server login once server_login_retry passed")
    finally:
        pg.sql("DROP ROLE IF EXISTS %s" % role)


def test_query_wait_notify(pgcat, pg):
    """query_wait_notify: a client that waits that long for a server gets
    PgBouncer's notice, once per wait, and then its answer."""
    p = pgcat(general={"default_pool_size": 1, "query_wait_notify": "1s"})
    holder = p.connect(autocommit=False)
    waiter = p.connect()
    notices = []
    waiter.add_notice_handler(lambda d: notices.append(d.message_primary))
    try:
        for n in (1, 2):
            holder.execute("SELECT 1")          # holds the only server
            result = []
            t = threading.Thread(target=lambda: result.append(waiter.execute("SELECT 42").fetchone()[0]))
            t.start()
            time.sleep(1.6)
            assert result == [], "the waiter was served while the only server was held"
            holder.commit()
            t.join(10)
            assert result == [42]
            assert notices == ["No server connection available in postgres backend, client being queued"] * n, notices
        with p.connect() as c:                  # no wait, no notice
            c.execute("SELECT 1")
        assert len(notices) == 2
    finally:
        holder.close()
        waiter.close()


# unreachable_server = wait (PgBouncer's; a pgbouncer.ini has it): clients
# wait for a server that cannot be connected to, pgcat tries again every
# server_login_retry, query_wait_timeout bounds the wait.

def late_pool(pg, port):
    return {"late": {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % port}},
                     "users": {"app": {"password": PASSWORDS["app"]}}}}


def test_unreachable_server_wait_keeps_clients_until_it_comes_up(pgcat, pg):
    from conftest import free_port
    port = free_port()
    fwd = Forwarder([("127.0.0.1", pg.port)], port, start=False)
    p = pgcat(general={"unreachable_server": "wait", "server_login_retry": 300, "query_wait_timeout": 20000},
              pools=late_pool(pg, port))
    threading.Timer(1.5, fwd.start).start()
    try:
        t0 = time.monotonic()
        with p.connect(dbname="late") as c:            # waits for the server's parameters
            assert c.execute("SELECT current_database()").fetchone()[0] == "appdb"
        took = time.monotonic() - t0
        assert 1.2 < took < 10, "the login took %.1fs" % took
        assert "connect failed: Connection refused" in p.log()
    finally:
        fwd.stop()
    assert_works(p)


def test_unreachable_server_wait_ends_at_query_wait_timeout(pgcat, pg):
    from conftest import free_port
    port = free_port()
    p = pgcat(general={"unreachable_server": "wait", "server_login_retry": 300, "query_wait_timeout": 1500},
              pools=late_pool(pg, port))
    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match="query_wait_timeout"):
        p.connect(dbname="late")
    took = time.monotonic() - t0
    assert 1.2 < took < 6, "failed after %.1fs" % took
    assert_works(p)


def test_unreachable_server_fail_is_at_once(pgcat, pg):
    from conftest import free_port
    port = free_port()
    p = pgcat(general={"server_login_retry": 300, "query_wait_timeout": 20000}, pools=late_pool(pg, port))
    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match="Connection refused"):
        p.connect(dbname="late")
    assert time.monotonic() - t0 < 3
    assert_works(p)


def test_unreachable_server_wait_holds_a_logged_in_clients_query(pgcat, pg):
    from conftest import free_port
    from test_admin import admin, command
    port = free_port()
    fwd = Forwarder([("127.0.0.1", pg.port)], port, start=False)
    fwd.start()
    p = pgcat(general={"unreachable_server": "wait", "server_login_retry": 300, "query_wait_timeout": 20000},
              pools=late_pool(pg, port))
    c = p.connect(dbname="late")
    assert c.execute("SELECT 1").fetchone()[0] == 1
    fwd.stop()                                         # the server goes away ...
    r = admin(p)
    assert command(r, "RECONNECT late") is None        # ... and its connection with it
    r.close()
    wait_until(lambda: "closing because" in p.log(), 5)
    fwd2 = Forwarder([("127.0.0.1", pg.port)], port, start=False)
    threading.Timer(1.5, fwd2.start).start()           # ... and comes back
    try:
        t0 = time.monotonic()
        assert c.execute("SELECT 2").fetchone()[0] == 2
        assert time.monotonic() - t0 > 1.0, "served before the server was back?"
    finally:
        fwd2.stop()
        c.close()


def test_healthcheck_query_runs_before_a_reused_server_is_handed_out(pgcat, pg):
    """healthcheck_query (PgBouncer's server_check_query) is what the health
    check sends: here one that counts its runs in a session setting, which
    the client then reads on the same server."""
    count = ("SELECT set_config('pgcat.checks', (coalesce(nullif(current_setting('pgcat.checks', true), ''), '0')"
             "::int + 1)::text, false)")
    p = pgcat(general={"healthcheck_delay": 0, "healthcheck_query": count, "pool_mode": "transaction"},
              users={"app": {"pool_size": 1}})
    with p.connect(autocommit=True) as c:
        first = c.execute("SELECT current_setting('pgcat.checks', true)").fetchone()[0]
        time.sleep(0.01)
        second = c.execute("SELECT current_setting('pgcat.checks', true)").fetchone()[0]
        time.sleep(0.01)
        third = c.execute("SELECT current_setting('pgcat.checks', true)").fetchone()[0]
    # (The first query's server had served the login already: checked too.)
    assert first is not None and (int(second), int(third)) == (int(first) + 1, int(first) + 2), (first, second, third)
    assert_works(p)


def test_max_db_connections_does_not_take_min_pool_size_connections(pgcat, pg):
    """At the cap, the idle connections another pool keeps for its
    min_pool_size, a pool the cap does not hold back, are not closed to
    make room: that pool would open them again at once and the two pools
    would take turns forever. The client waits (here until
    query_wait_timeout), and nothing churns."""
    capped = {"max_db_connections": 2, "shards": {0: {"database": "appdb",
                                                      "servers": "127.0.0.1:%d:primary" % pg.port}},
              "users": {"md5user": {"password": PASSWORDS["md5user"]}}}
    p = pgcat(general={"default_pool_size": 5, "query_wait_timeout": 1500},
              users={"app": {"min_pool_size": 2}}, pools={"capped": capped})
    wait_until(lambda: _backends(pg, CAP_USERS) == 2, 10, msg="app's min_pool_size connections")
    with pytest.raises(psycopg.OperationalError, match="query_wait_timeout"):
        with p.connect(user="md5user", dbname="capped") as c:
            c.execute("SELECT 1")
    time.sleep(0.5)
    assert p.log().count("closed to make room under max_db_connections") == 0
    assert _backends(pg, CAP_USERS) == 2
