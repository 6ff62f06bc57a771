# SPDX-License-Identifier: MIT
"""What an operator moving off PgBouncer reaches for (SPEC §2): time
settings with PostgreSQL's units, TCP keepalive and TCP_USER_TIMEOUT on
client and server sockets, servers over Unix sockets, and a pool's
connect_query."""
import contextlib
import fcntl
import re
import socket
import struct
import subprocess
import threading
import time

import psycopg
import pytest

from forward import Forwarder
from conftest import ADMIN_PASSWORD, ADMIN_USER, own_netns, pgcat_binary, pgcat_env, wait_until


def admin_command(p, sql):
    r = p.raw()
    r.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat")
    rows, err, status = r.simple(sql)
    r.close()
    assert err is None, err
    return rows


def reload_with(p, **general):
    p.general.update(general)
    p.write()
    admin_command(p, "RELOAD")


def run_t(p):
    r = subprocess.run([pgcat_binary(), "-t", str(p.ini)], capture_output=True, text=True, timeout=30,
                       env=pgcat_env(), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def waited_for_a_server(p):
    """Seconds a client waited for the pool's only server before its
    query_wait_timeout error."""
    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")                   # the only server, in a transaction
    waiter = p.connect()
    t0 = time.monotonic()
    with pytest.raises(psycopg.Error) as ei:
        waiter.execute("SELECT 2")
    took = time.monotonic() - t0
    assert ei.value.sqlstate == "08P01" and "query_wait_timeout" in str(ei.value), ei.value
    holder.rollback()
    assert waiter.execute("SELECT 3").fetchone()[0] == 3
    holder.close()
    waiter.close()
    return took


# ---------------------------------------------------------------------------
# (1) durations with units

def test_duration_with_a_unit_acts_and_reloads(pgcat):
    """query_wait_timeout = 1s: a waiting client gets its error after about
    a second (a bare 1 would be 1 ms); `pgcat -t` shows the value with its
    unit; a reload to 2500ms takes effect."""
    p = pgcat(general={"default_pool_size": 1, "query_wait_timeout": "1s", "ban_time": "2min",
                       "tcp_keepidle": "1min"})
    took = waited_for_a_server(p)
    assert 0.8 <= took < 2.5, "query_wait_timeout = 1s fired after %.2fs" % took
    out = run_t(p).stdout
    for line in ("query_wait_timeout = 1s", "ban_time = 2min", "tcp_keepidle = 1min", "connect_timeout = 5s",
                 "stats_period = 1min", "idle_transaction_timeout = 0"):
        assert "\n%s\n" % line in out, "pgcat -t does not show %r:\n%s" % (line, out)

    reload_with(p, query_wait_timeout="2500ms")
    took = waited_for_a_server(p)
    assert 2.3 <= took < 4, "query_wait_timeout = 2500ms after RELOAD fired after %.2fs" % took
    assert "\nquery_wait_timeout = 2500ms\n" in run_t(p).stdout


def test_pgbouncer_seconds_draw_a_warning(pgcat):
    """A bare value under 1,000 for a key PgBouncer counts in seconds is
    taken as milliseconds, and the log says so naming the key; the same
    value with a unit, and keys PgBouncer also counts in ms, say nothing."""
    p = pgcat(general={"server_lifetime": 600, "client_idle_timeout": "600s", "connect_timeout": 600})
    log = p.log()
    warned = [line for line in log.splitlines() if "PgBouncer" in line]
    assert len(warned) == 1, "expected one warning, got:\n%s" % "\n".join(warned)
    assert "server_lifetime" in warned[0] and "600s" in warned[0], warned[0]
    assert "warning" in warned[0].lower(), warned[0]
    r = run_t(p)
    assert "server_lifetime: 600 is taken as 600 milliseconds" in r.stderr, r.stderr
    assert "\nclient_idle_timeout = 10min\n" in r.stdout
    # and on reload, too
    reload_with(p, query_wait_timeout=120)
    assert "query_wait_timeout: 120 is taken as 120 milliseconds" in p.log()


# ---------------------------------------------------------------------------
# (2) dead peers found in seconds: tcp_user_timeout, tcp_keepalive, tcp_keep*

def _loopback(up):
    """`ip link set lo up|down` in the calling thread's network namespace:
    down, every packet on it vanishes (no RST, no ICMP), as when a peer's
    host or a network link dies."""
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        flags = flags | IFF_UP if up else flags & ~IFF_UP
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags))


@contextlib.contextmanager
def lossy_server(pgcat, pg, general):
    """pgcat in a network namespace of the test's own, its pool's server
    reached over that namespace's lo; clients connect over pgcat's Unix
    socket, which keeps working when lo goes down. Yields (pgcat, connect).
    On leaving, the backends served through the forwarder are ended (a
    pg_sleep would outlive the test and skew the next one's counts)."""
    try:
        with _lossy_server(pgcat, pg, general) as got:
            yield got
    finally:
        pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE usename = 'app' AND client_addr IS NULL AND backend_type = 'client backend'")


@contextlib.contextmanager
def _lossy_server(pgcat, pg, general):
    with own_netns():
        fwd = Forwarder(["%s/.s.PGSQL.%d" % (pg.sockdir, pg.port)])
        p = None
        try:
            g = {"pool_mode": "session", "listen_addr": "127.0.0.1"}
            g.update(general)
            p = pgcat(general=g, pool={"shards": {0: {"servers": "127.0.0.1:%d:primary" % fwd.port}}})
            yield p, lambda: p.connect(host=str(p.sockdir))
        finally:
            _loopback(True)
            if p is not None:
                p.stop()
            fwd.close()


def _query_in_thread(c, sql):
    box = {}

    def run():
        t0 = time.monotonic()
        try:
            box["rows"] = c.execute(sql).fetchall()
        except psycopg.Error as e:
            box["error"] = e
        box["took"] = time.monotonic() - t0
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_tcp_user_timeout_drops_a_server_that_vanished(pgcat, pg):
    """The server's packets vanish (lo down) while pgcat sends it a query:
    with tcp_user_timeout = 1s the kernel gives up on the unacknowledged
    data after about a second and the client gets an error at once, not
    after the kernel's ~15 minutes of retransmissions."""
    with lossy_server(pgcat, pg, {"tcp_user_timeout": "1s", "tcp_keepalive": False}) as (p, connect):
        c = connect()
        assert c.execute("SELECT 1").fetchone()[0] == 1      # the server connection is up
        _loopback(False)
        t, box = _query_in_thread(c, "SELECT 2")
        t.join(10)
        assert not t.is_alive(), "the query still waits 10 s after the server vanished"
        assert "error" in box, box
        assert box["took"] < 5, "error after %.1fs" % box["took"]
        assert "connection error: Connection timed out" in p.log(), p.log()[-2000:]


def test_without_tcp_user_timeout_the_query_hangs(pgcat, pg):
    """The same without tcp_user_timeout: the client is still waiting after
    4 s (what the setting is for)."""
    with lossy_server(pgcat, pg, {"tcp_keepalive": False}) as (p, connect):
        c = connect()
        assert c.execute("SELECT 1").fetchone()[0] == 1
        _loopback(False)
        t, box = _query_in_thread(c, "SELECT 2")
        t.join(4)
        assert t.is_alive(), "the query ended without tcp_user_timeout: %r" % box
        _loopback(True)
    t.join(20)


def test_tcp_keepalive_drops_a_silent_dead_server(pgcat, pg):
    """A server that vanishes while it runs a long query sends nothing and
    is sent nothing, so only keepalive probes can tell: with tcp_keepidle =
    1, tcp_keepintvl = 1, tcp_keepcnt = 2 the client gets its error within
    seconds."""
    with lossy_server(pgcat, pg, {"tcp_keepidle": "1s", "tcp_keepintvl": 1, "tcp_keepcnt": 2}) as (p, connect):
        c = connect()
        assert c.execute("SELECT 1").fetchone()[0] == 1
        t, box = _query_in_thread(c, "SELECT pg_sleep(60)")
        time.sleep(0.5)
        _loopback(False)
        t.join(15)
        assert not t.is_alive(), "the client still waits 15 s after its server vanished"
        assert "error" in box, box
        assert box["took"] < 10, "error after %.1fs" % box["took"]


def _ss_timer(port, local):
    """ss's timer column of the established TCP connection(s) whose local
    (or peer) port is port, e.g. ['keepalive,4.9sec,0']."""
    out = subprocess.run(["ss", "-tnoH", "state", "established", "( %s = :%d )" % ("sport" if local else "dport",
                                                                                    port)],
                         capture_output=True, text=True, check=True).stdout
    return re.findall(r"timer:\(([^)]*)\)", out)


def test_keepalive_timings_on_client_and_server_sockets(pgcat, pg):
    """What a user sees with ss -o: pgcat's client socket and its server
    socket run the keepalive timer with tcp_keepidle (5 s), not the
    kernel's two hours; a reload applies to new connections; and
    tcp_keepalive = false leaves no timer."""
    p = pgcat(general={"tcp_keepidle": 5, "tcp_keepintvl": 2, "tcp_keepcnt": 3, "tcp_user_timeout": "10s",
                       "pool_mode": "session"})
    c = p.connect()
    # pgcat's server socket, by its own port (PostgreSQL sees it as the
    # client's): other connections to the same PostgreSQL (other tests',
    # libpq's own keepalives) are not pgcat's
    server_side = c.execute("SELECT inet_client_port()").fetchone()[0]

    def keepalive_within(port, local, limit):
        """ss shows a keepalive timer of at most limit seconds (the kernel's
        default, two hours, shows as "119min..."); right after a reply the
        retransmission timer ("on") may show instead for a moment."""
        timers = _ss_timer(port, local)
        if len(timers) != 1 or not timers[0].startswith("keepalive,"):
            return False
        left = timers[0].split(",")[1]
        return "min" not in left and float(re.match(r"[0-9.]+", left).group(0)) <= limit

    wait_until(lambda: keepalive_within(p.port, True, 5), 5,
               msg="client socket: keepalive timer of at most 5 s; ss shows %r" % _ss_timer(p.port, True))
    wait_until(lambda: keepalive_within(server_side, True, 5), 5,
               msg="server socket: keepalive timer of at most 5 s; ss shows %r" % _ss_timer(server_side, True))
    c.close()
    reload_with(p, tcp_keepidle="1h", tcp_keepalive=False)
    c = p.connect()
    c.execute("SELECT 1")
    wait_until(lambda: _ss_timer(p.port, True) == [], 5,
               msg="tcp_keepalive = false: no timer; ss shows %r" % _ss_timer(p.port, True))
    c.close()


# ---------------------------------------------------------------------------
# (3) servers over Unix sockets

def test_server_over_a_unix_socket(pgcat, pg):
    """servers = /socket/dir:port:primary: pgcat reaches PostgreSQL through
    <dir>/.s.PGSQL.<port> (inet_server_addr() is NULL there), queries and
    a cancel work through it, and a reload moves a pool between TCP and
    the socket."""
    p = pgcat(general={"server_tls_sslmode": "require"},     # as libpq: no TLS over a Unix socket
              pool={"shards": {0: {"servers": "%s/:%d:primary" % (pg.sockdir, pg.port)}}})
    c = p.connect()
    assert c.execute("SELECT inet_server_addr() IS NULL, current_user").fetchone() == (True, "app")
    assert c.execute("SELECT sum(x) FROM generate_series(1, 1000) x").fetchone()[0] == 500500
    assert "\nservers = %s:%d:primary\n" % (pg.sockdir, pg.port) in run_t(p).stdout

    # a cancel goes to the server over the same socket
    t, box = _query_in_thread(c, "SELECT pg_sleep(30)")
    wait_until(lambda: pg.sql("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' "
                              "AND state = 'active'")[0][0] == 1, 10)
    c.cancel()
    t.join(10)
    assert not t.is_alive() and "error" in box, box
    assert box["error"].sqlstate == "57014", box["error"]
    assert box["took"] < 10
    assert c.execute("SELECT 1").fetchone()[0] == 1
    c.close()

    # reload: TCP, then the socket again
    p.pools["appdb"]["shards"][0]["servers"] = "127.0.0.1:%d:primary" % pg.port
    p.general["server_tls_sslmode"] = "prefer"
    p.write()
    admin_command(p, "RELOAD")
    with p.connect() as c:
        assert c.execute("SELECT inet_server_addr() IS NULL").fetchone()[0] is False
    p.pools["appdb"]["shards"][0]["servers"] = "%s:%d:primary" % (pg.sockdir, pg.port)
    p.write()
    admin_command(p, "RELOAD")
    with p.connect() as c:
        assert c.execute("SELECT inet_server_addr() IS NULL").fetchone()[0] is True


def test_server_socket_directory_without_a_server(pgcat, pg, tmp_path):
    """A directory with no PostgreSQL socket in it: the client gets the
    connect error naming the socket path, other pools keep working."""
    p = pgcat(pools={"nosock": {"shards": {0: {"database": "appdb",
                                              "servers": "%s:%d:primary" % (tmp_path, pg.port)}},
                                "users": {"app": {"password": "app_pw"}}}})
    with pytest.raises(psycopg.Error) as ei:
        with p.connect(dbname="nosock") as c:
            c.execute("SELECT 1")
    assert "No such file or directory" in str(ei.value), ei.value
    assert "could not connect to server %s/.s.PGSQL.%d" % (tmp_path, pg.port) in str(ei.value), ei.value
    with p.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


# ---------------------------------------------------------------------------
# (4) connect_query

WARM = ("SELECT set_config('app.warmed', 'yes', false), generate_series(1, 3000); "
        "CREATE TEMP TABLE warm (x int); INSERT INTO warm_log VALUES (pg_backend_pid())")


def test_connect_query_runs_once_per_server_connection(pgcat, pg):
    """connect_query runs on each new server connection before its first
    client, once: what it sets (a custom setting, a temp table) is there
    for every client, its result (3000 rows here) reaches none, and it runs
    once per server connection, not per client or transaction. A reload
    changes it for server connections opened afterwards."""
    pg.sql("DROP TABLE IF EXISTS warm_log; CREATE TABLE warm_log (pid int); GRANT ALL ON warm_log TO app")
    p = pgcat(general={"default_pool_size": 2}, pool={"connect_query": WARM})
    conns = [p.connect() for _ in range(4)]
    pids = set()
    for i in range(20):
        c = conns[i % 4]
        with c.transaction():
            row = c.execute("SELECT current_setting('app.warmed', true), to_regclass('pg_temp.warm') IS NOT NULL, "
                            "pg_backend_pid()").fetchone()
        assert row[:2] == ("yes", True), row
        pids.add(row[2])
    logged = [r[0] for r in pg.sql("SELECT pid FROM warm_log")]
    assert sorted(logged) == sorted(pids), "connect_query ran on %r, clients used %r" % (logged, pids)
    assert 1 <= len(pids) <= 2
    for c in conns:
        c.close()

    p.pools["appdb"]["connect_query"] = "SELECT set_config('app.warmed', 'again', false)"
    p.write()
    admin_command(p, "RELOAD")
    for pid in pids:
        pg.terminate(pid)
    wait_until(lambda: pg.count("app", "appdb") == 0, 10)

    def fresh_value():
        try:
            with p.connect() as c:
                return c.execute("SELECT current_setting('app.warmed', true)").fetchone()[0]
        except psycopg.Error:
            return None
    wait_until(lambda: fresh_value() == "again", 10, msg="connect_query after RELOAD")


def test_failing_connect_query_fails_the_login(pgcat, pg):
    """A connect_query that fails (a syntax error here) fails that server
    login: the waiting client gets the error, saying connect_query and the
    server's reason, the log names it, and other pools keep working."""
    p = pgcat(pools={"coldb": {"connect_query": "SELEC 1",
                               "shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg.port}},
                               "users": {"app": {"password": "app_pw"}}}})
    # (the first server connection is made at the client's login, as for
    # any failed server login the client's login fails with it)
    with pytest.raises(psycopg.Error) as ei:
        with p.connect(dbname="coldb") as c:
            c.execute("SELECT 1")
    e = ei.value
    assert "connect_query failed: syntax error at or near \"SELEC\"" in str(e), e
    assert "login failed: connect_query failed: syntax error" in p.log(), p.log()[-2000:]
    with p.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    assert "\nconnect_query = SELEC 1\n" in run_t(p).stdout


def test_tcp_keepalive_drops_a_vanished_client(pgcat, pg):
    """A client that vanishes (lo down) while idle inside a transaction
    holds its server connection until pgcat notices: with tcp_keepidle = 1,
    tcp_keepintvl = 1, tcp_keepcnt = 2 on client sockets that takes
    seconds; the transaction is rolled back and the server given back.
    (The server is reached over its Unix socket, which lo down leaves alone.)"""
    sock = "%s:%d:primary" % (pg.sockdir, pg.port)

    def in_transaction():
        with psycopg.connect(host=str(pg.sockdir), port=pg.port, user="postgres", dbname="appdb",
                             autocommit=True) as d:
            return d.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' "
                             "AND state = 'idle in transaction'").fetchone()[0]
    try:
        with own_netns():
            p = pgcat(general={"tcp_keepidle": 1, "tcp_keepintvl": 1, "tcp_keepcnt": 2, "listen_addr": "127.0.0.1"},
                      pool={"shards": {0: {"servers": sock}}})
            try:
                c = p.connect(autocommit=False)
                c.execute("SELECT 1")                       # BEGIN; SELECT 1: holds a server
                assert in_transaction() == 1
                # Keepalive is for a silent connection: once the client has
                # acknowledged all pgcat sent (else retransmissions run, and
                # only tcp_user_timeout ends them), ss shows its timer.
                wait_until(lambda: [t[:10] for t in _ss_timer(p.port, True)] == ["keepalive,"], 10,
                           msg="keepalive timer on pgcat's client socket")
                _loopback(False)
                t0 = time.monotonic()
                wait_until(lambda: in_transaction() == 0, 15,
                           msg="the vanished client's transaction to be rolled back; log:\n" + p.log()[-3000:])
                assert time.monotonic() - t0 < 10
                wait_until(lambda: "C-" in p.log() and "closing" in p.log(), 5)
            finally:
                _loopback(True)
                p.stop()
    finally:
        pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE usename = 'app' AND backend_type = 'client backend'")
