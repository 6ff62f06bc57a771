# SPDX-License-Identifier: MIT
"""Replicas (SPEC §4, §6 role commands): reads to replicas, writes and
explicit transactions to the primary, SET SERVER ROLE / SHOW SERVER ROLE,
comment hints, bans of an unreachable replica shared by the workers, and
the all-banned safety valve. Uses a real streaming replica."""
import pytest

from conftest import free_port, wait_until
from test_admin import admin, show, command


def pools(pg, replicas, parser=True, primary_reads=False, extra=None):
    servers = ["127.0.0.1:%d:primary" % pg.port] + ["%s:%d:replica" % hp for hp in replicas]
    pool = {"query_parser_enabled": "true" if parser else "false",
            "primary_reads_enabled": "true" if primary_reads else "false",
            "shards": {0: {"database": "appdb", "servers": ", ".join(servers)}}}
    pool.update(extra or {})
    return {"appdb": pool}


def start(pgcat, pg, replicas, **kw):
    general = kw.pop("general", {})
    inst = pgcat(pool=pools(pg, replicas, **kw)["appdb"], general=general)
    return inst


def in_recovery(c):
    return c.execute("SELECT pg_is_in_recovery()").fetchone()[0]


@pytest.fixture
def rw_table(pg):
    pg.sql("DROP TABLE IF EXISTS route_t; CREATE TABLE route_t (id serial PRIMARY KEY, v int); "
           "GRANT ALL ON route_t TO app; GRANT ALL ON SEQUENCE route_t_id_seq TO app")
    yield "route_t"
    pg.sql("DROP TABLE IF EXISTS route_t")


def test_reads_to_replica_writes_to_primary(pgcat, pg, pg_replica, rw_table):
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)])
    c = inst.connect()
    for _ in range(20):
        assert in_recovery(c) is True
    for i in range(10):
        # a write on the replica would fail with PostgreSQL's read-only error
        c.execute("INSERT INTO route_t (v) VALUES (%s)", (i,))
    assert c.execute("SELECT nextval('route_t_id_seq') > 0").fetchone()[0] is True
    # explicit transactions go to the primary, BEGIN READ ONLY to a replica
    c.execute("BEGIN")
    assert in_recovery(c) is False
    c.execute("COMMIT")
    c.execute("BEGIN READ ONLY")
    assert in_recovery(c) is True
    c.execute("COMMIT")
    c.close()


def test_set_server_role_and_hints(pgcat, pg, pg_replica):
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)])
    r = inst.raw_login()
    rows, err, _ = r.simple("SHOW SERVER ROLE")
    assert err is None and rows == [["auto"]]
    assert r.simple("SET SERVER ROLE TO 'primary'")[1] is None
    assert r.simple("SHOW SERVER ROLE")[0] == [["primary"]]
    for _ in range(5):
        assert r.simple("SELECT pg_is_in_recovery()")[0] == [["f"]]
    assert r.simple("SET SERVER ROLE TO 'replica'")[1] is None
    for _ in range(5):
        assert r.simple("SELECT pg_is_in_recovery()")[0] == [["t"]]
    rows, err, _ = r.simple("SET SERVER ROLE TO 'nonsense'")
    assert err and err["C"] == "22023", err
    assert r.simple("SET SERVER ROLE TO 'auto'")[1] is None
    # a comment hint beats the parser
    assert r.simple("/* pgcat: role=primary */ SELECT pg_is_in_recovery()")[0] == [["f"]]
    assert r.simple("SELECT pg_is_in_recovery()")[0] == [["t"]]
    # SET SHARD on a one-shard pool: 0 is fine, 1 is not
    assert r.simple("SET SHARD TO '0'")[1] is None
    rows, err, _ = r.simple("SET SHARD TO '1'")
    assert err and err["C"] == "22023", err
    assert r.simple("SHOW SHARD")[0] == [["0"]]
    r.close()


@pytest.mark.parametrize("parser", [True, False])
def test_hint_beats_set_server_role(pgcat, pg, pg_replica, parser):
    """SPEC §4/§6: a comment hint routes its own transaction whatever SET
    SERVER ROLE says; the session's role applies again to the next one."""
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], parser=parser)
    c = inst.connect()
    c.execute("SET SERVER ROLE TO 'primary'")
    for _ in range(3):
        assert c.execute("/* pgcat: role=replica */ SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert in_recovery(c) is False
        # the extended protocol (a Parse carrying the hint) too
        assert c.execute("/* pgcat: role=replica */ SELECT pg_is_in_recovery() WHERE %s",
                         (True,)).fetchone()[0] is True
        assert c.execute("SELECT pg_is_in_recovery() WHERE %s", (True,)).fetchone()[0] is False
    c.execute("SET SERVER ROLE TO 'replica'")
    for _ in range(3):
        assert c.execute("/* pgcat: role=primary */ SELECT pg_is_in_recovery()").fetchone()[0] is False
        assert in_recovery(c) is True
    c.close()


def test_parser_off_default_role(pgcat, pg, pg_replica):
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], parser=False,
                 extra={"default_role": "replica"})
    c = inst.connect()
    for _ in range(5):
        assert in_recovery(c) is True
    c.close()
    inst2 = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], parser=False,
                  extra={"default_role": "primary"})
    c = inst2.connect()
    for _ in range(5):
        assert in_recovery(c) is False
    c.close()


def test_dead_replica_banned_reads_go_on(pgcat, pg, pg_replica):
    dead = free_port()   # nothing listens there
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port), ("127.0.0.1", dead)],
                 general={"workers": 2, "ban_time": 60})
    c = inst.connect()
    for i in range(200):
        assert in_recovery(c) is True, i
    c.close()
    r = admin(inst)
    _, bans = show(r, "BANS")
    assert any(int(b["port"]) == dead for b in bans), bans
    assert not any(int(b["port"]) == pg_replica.port for b in bans), bans
    # UNBAN by admin: the dead one is tried again and banned again, reads still work
    assert command(r, "UNBAN 127.0.0.1:%d" % dead) is None
    c = inst.connect()
    for _ in range(30):
        assert in_recovery(c) is True
    c.close()


def test_admin_ban_moves_reads_and_valve(pgcat, pg, pg_replica):
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], primary_reads=True)
    r = admin(inst)
    assert command(r, "BAN 127.0.0.1:%d 60" % pg_replica.port) is None
    c = inst.connect()
    # the replica is out of the rotation: reads go to the primary
    for _ in range(20):
        assert in_recovery(c) is False
    assert command(r, "UNBAN 127.0.0.1:%d" % pg_replica.port) is None
    seen = {in_recovery(c) for _ in range(60)}
    assert seen == {True, False}, seen
    c.close()


def replica_pids(rep):
    """The replica's postmaster and all its children."""
    import subprocess
    pm = int(open(rep.datadir / "postmaster.pid").readline())
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pm)], capture_output=True, text=True).stdout
    return [pm] + [int(x) for x in out.split()]


def test_frozen_replica_banned_by_health_check(pgcat, pg, pg_replica):
    import os
    import signal
    import time
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], primary_reads=True,
                 general={"healthcheck_delay": 0, "healthcheck_timeout": 500, "ban_time": 60})
    c = inst.connect()
    seen = {in_recovery(c) for _ in range(40)}
    assert True in seen   # the replica serves reads
    pids = replica_pids(pg_replica)
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = admin(inst)
        banned_after = None
        for i in range(40):
            assert in_recovery(c) is False, i   # every read answered, by the primary
            _, bans = show(r, "BANS")
            if banned_after is None and any(int(b["port"]) == pg_replica.port for b in bans):
                banned_after = time.monotonic() - t0
        # banned within healthcheck_timeout + 1 s of the first reads (+ slack for sanitizers)
        assert banned_after is not None and banned_after < 0.5 + 1 + 1, banned_after
    finally:
        for p in pids:
            os.kill(p, signal.SIGCONT)
    c.close()


def shard_xacts(inst):
    r = admin(inst)
    _, rows = show(r, "SHARDS")
    r.close()
    return {(x["host"], int(x["port"])): int(x["xact_count"]) for x in rows}


def test_random_split_between_two_replicas(pgcat, pg, pg_replica):
    # The same replica under two names: two servers as far as pgcat knows.
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port), ("localhost", pg_replica.port)])
    c = inst.connect()
    for _ in range(1000):
        c.execute("SELECT 1")
    c.close()
    x = shard_xacts(inst)
    a, b = x[("127.0.0.1", pg_replica.port)], x[("localhost", pg_replica.port)]
    assert a + b >= 1000, x
    assert 0.4 <= a / (a + b) <= 0.6, x


def test_loc_prefers_the_idle_replica(pgcat, pg, pg_replica):
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port), ("localhost", pg_replica.port)],
                 extra={"load_balancing_mode": "loc"})
    # Hold transactions open: whichever replica they land on is busy; new
    # reads must then go to the other one.
    holders = []
    for _ in range(3):   # odd: the two replicas cannot be equally busy
        h = inst.connect()
        h.execute("BEGIN READ ONLY")
        assert in_recovery(h) is True
        holders.append(h)
    before = shard_xacts(inst)
    busy = [inst.connect() for _ in range(1)]
    c = busy[0]
    for _ in range(50):
        c.execute("SELECT 1")
    after = shard_xacts(inst)
    gained = {k: after[k] - before.get(k, 0) for k in after}
    reps = [gained[("127.0.0.1", pg_replica.port)], gained[("localhost", pg_replica.port)]]
    # every one of the 50 reads went to the same (less loaded) replica
    assert sorted(reps) == [0, 50], gained
    for h in holders:
        h.execute("ROLLBACK")
        h.close()
    c.close()


@pytest.fixture
def second_replica(pg, pg_root):
    """Another streaming replica, this test's to kill."""
    import subprocess
    from conftest import PG_BIN, PgServer, as_pg_user
    rep = PgServer(pg_root, "replica-kill-%d" % free_port())
    rep.sockdir.mkdir(parents=True, exist_ok=True)
    rep._chown(rep.sockdir)
    subprocess.run(as_pg_user([str(PG_BIN / "pg_basebackup"), "-h", pg.host, "-p", str(pg.port),
                               "-U", "postgres", "-D", str(rep.datadir), "-R", "-X", "stream", "-c", "fast",
                               "--no-sync"]), check=True, capture_output=True, text=True, timeout=120)
    rep.port = free_port()
    with open(rep.datadir / "postgresql.conf", "a") as f:
        f.write(rep._conf(rep.port))
    rep.start()
    wait_until(lambda: rep.sql("SELECT pg_is_in_recovery()")[0][0], 30, msg="replica in recovery")
    yield rep
    rep.stop()


def test_replica_killed_during_reads_no_failed_read(pgcat, pg, pg_replica, second_replica):
    import subprocess
    import threading
    from conftest import PG_BIN, as_pg_user
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port), ("127.0.0.1", second_replica.port)],
                 general={"ban_time": 60})
    failures, done = [], []

    def reader():
        c = inst.connect()
        for i in range(200):
            try:
                assert c.execute("SELECT pg_is_in_recovery() FROM pg_sleep(0.005)").fetchone()[0] is True
            except Exception as e:   # counted: the test asserts there are none
                failures.append((i, repr(e)))
            done.append(i)
        c.close()
    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(done) >= 100, 30)
    subprocess.run(as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(second_replica.datadir), "-m", "immediate",
                               "-w", "stop"]), capture_output=True, timeout=30)
    for t in threads:
        t.join(60)
    assert len(done) == 800
    assert failures == [], failures[:5]
    r = admin(inst)
    _, bans = show(r, "BANS")
    assert any(int(b["port"]) == second_replica.port for b in bans), bans


def test_statement_timeout_cancels_and_bans_replica(pgcat, pg, pg_replica):
    import time
    import psycopg
    pool = pools(pg, [("127.0.0.1", pg_replica.port)])["appdb"]
    inst = pgcat(pool=pool, users={"app": {"statement_timeout": 500}}, general={"ban_time": 60})
    c = inst.connect()
    t0 = time.monotonic()
    with pytest.raises(psycopg.errors.QueryCanceled):
        c.execute("SELECT pg_is_in_recovery(), pg_sleep(5)")
    assert time.monotonic() - t0 < 3
    r = admin(inst)
    _, bans = show(r, "BANS")
    assert any(int(b["port"]) == pg_replica.port for b in bans), bans
    # reads go on (the valve: the only replica is banned, primary reads off)
    assert c.execute("SELECT 1").fetchone()[0] == 1
    c.close()


def test_lag_ban_when_replay_paused(pgcat, pg, pg_replica, rw_table):
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], primary_reads=True,
                 extra={"max_replica_lag": 1024},
                 general={"healthcheck_delay": 0, "ban_time": 60})
    c = inst.connect()
    # Reads reach the replica once it has caught up: the lag monitor may
    # find it behind at start (earlier tests' writes still replaying) and
    # ban it until its next measurement.
    wait_until(lambda: True in {in_recovery(c) for _ in range(10)}, 10, msg="a read on the replica")
    pg_replica.sql("SELECT pg_wal_replay_pause()")
    try:
        for i in range(200):   # a few hundred kB of WAL on the primary
            c.execute("INSERT INTO route_t (v) SELECT g FROM generate_series(1, 100) g")
        # the replica's check now shows the lag and bans it (waited for
        # in SHOW BANS: with primary reads on, ten reads may all land on
        # the primary by chance before the ban)
        r = admin(inst)
        wait_until(lambda: any(int(b["port"]) == pg_replica.port for b in show(r, "BANS")[1]), 20,
                   msg="the lagging replica banned")
        # then every read goes to the primary
        assert not any(in_recovery(c) for _ in range(20))
    finally:
        pg_replica.sql("SELECT pg_wal_replay_resume()")
    c.close()


def shard_row(r, port):
    _, rows = show(r, "SHARDS")
    return next(x for x in rows if int(x["port"]) == port)


@pytest.fixture
def lag_table(pg):
    pg.sql("DROP TABLE IF EXISTS lag_t")
    yield "lag_t"
    pg.sql("DROP TABLE IF EXISTS lag_t")


def test_lag_monitor_bans_paused_replica_without_traffic(pgcat, pg, pg_replica, lag_table):
    """SPEC §4: the lag monitor measures on its own, so a replica whose
    replay is paused is banned even when every write bypasses pgcat and no
    client uses a pooled connection; it is unbanned once it caught up."""
    import time
    import urllib.request
    metrics_port = free_port()
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], parser=False, primary_reads=True,
                 extra={"max_replica_lag": 1000},
                 general={"replica_lag_check_interval": 200, "ban_time": 60, "prometheus_port": metrics_port})
    r = admin(inst)
    # measured from the start: the replica is caught up, the primary has no lag figure
    row = wait_until(lambda: (lambda x: x if x["lag_bytes"] is not None and int(x["lag_bytes"]) <= 1000
                              and x["banned"] == "0" else None)(shard_row(r, pg_replica.port)), 10)
    assert int(row["lag_ms"]) >= 0, row
    prim = shard_row(r, pg.port)
    assert prim["lag_bytes"] is None and prim["lag_ms"] is None, prim
    pg_replica.sql("SELECT pg_wal_replay_pause()")
    try:
        wait_until(lambda: pg_replica.sql("SELECT pg_get_wal_replay_pause_state()")[0][0] == "paused", 5)
        # tens of kB of WAL, written on the primary directly, not through pgcat
        pg.sql("CREATE TABLE lag_t AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 1000) g")
        t0 = time.monotonic()
        row = wait_until(lambda: (lambda x: x if x["banned"] == "1" else None)(shard_row(r, pg_replica.port)),
                         5, interval=0.02)
        elapsed = time.monotonic() - t0
        assert elapsed < 2 * 0.2 + 0.6, elapsed   # two intervals, plus a margin
        assert "replica lag" in row["ban_reason"], row
        assert int(row["lag_bytes"]) > 1000, row
        # reads go to the primary while the replica is banned
        with inst.connect() as c:
            for _ in range(20):
                assert in_recovery(c) is False
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=5).read().decode()
        lines = [ln for ln in body.splitlines()
                 if ln.startswith("pgcat_server_lag_bytes{") and 'port="%d"' % pg_replica.port in ln]
        assert lines and int(lines[0].rsplit(" ", 1)[1]) > 1000, lines
        # lag_ms is the age of the last replayed transaction: NULL until the
        # replica replayed one since it started, so only the gauge is sure
        assert "# TYPE pgcat_server_lag_ms gauge" in body
        # the ban is renewed at every measurement while the lag lasts
        time.sleep(0.6)
        assert shard_row(r, pg_replica.port)["banned"] == "1"
    finally:
        pg_replica.sql("SELECT pg_wal_replay_resume()")
    row = wait_until(lambda: (lambda x: x if x["banned"] == "0" else None)(shard_row(r, pg_replica.port)), 5)
    assert row["lag_bytes"] is not None and int(row["lag_bytes"]) <= 1000, row
    _, bans = show(r, "BANS")
    assert not any(int(b["port"]) == pg_replica.port for b in bans), bans
    with inst.connect() as c:
        assert True in {in_recovery(c) for _ in range(30)}


def test_lag_monitor_one_connection_per_server(pgcat, pg, pg_replica):
    """One monitor per instance, not per worker: with two workers each
    server has a single monitor connection, named in pg_stat_activity."""
    import time
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)],
                 general={"workers": 2, "replica_lag_check_interval": 100})
    q = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgcat lag monitor'"
    wait_until(lambda: pg.sql(q)[0][0] == 1 and pg_replica.sql(q)[0][0] == 1, 10)
    r = admin(inst)
    wait_until(lambda: shard_row(r, pg_replica.port)["lag_bytes"] is not None, 5)
    for _ in range(5):   # several intervals later, still one each
        time.sleep(0.1)
        assert pg.sql(q)[0][0] == 1
        assert pg_replica.sql(q)[0][0] == 1


def test_auto_roles_find_the_primary(pgcat, pg, pg_replica, rw_table):
    pool = {"query_parser_enabled": "true",
            "shards": {0: {"database": "appdb",
                           "servers": "127.0.0.1:%d:auto, 127.0.0.1:%d:auto" % (pg_replica.port, pg.port)}}}
    inst = pgcat(pool=pool)
    c = inst.connect()
    # the first transactions may meet a server of unknown role; every write
    # after that goes to the server found not in recovery
    for _ in range(6):
        in_recovery(c)
    for i in range(20):
        c.execute("INSERT INTO route_t (v) VALUES (%s)", (i,))
    assert True in {in_recovery(c) for _ in range(30)}
    c.close()


def test_configured_primary_in_recovery_gets_no_writes(pgcat, pg, pg_replica):
    """pgcat itself refuses a write meant for a configured primary that is in
    recovery: its own message, and the write never reaches the server
    (PostgreSQL would answer the same SQLSTATE 25006 itself)."""
    import os
    import psycopg
    # The replica listed as the primary (a demoted primary after a failover).
    pool = {"query_parser_enabled": "true",
            "shards": {0: {"database": "appdb",
                           "servers": "127.0.0.1:%d:primary, localhost:%d:replica" % (pg_replica.port,
                                                                                       pg_replica.port)}}}
    inst = pgcat(pool=pool, general={"healthcheck_delay": 0})
    c = inst.connect()
    for _ in range(10):
        c.execute("SELECT 1")
    try:
        c.execute("/* pgcat: role=primary */ SELECT 1")   # the primary gets checked
    except psycopg.errors.ReadOnlySqlTransaction:
        pass   # (already known to be in recovery)
    # A write that reaches the replica is logged there with its statement
    # (log_min_error_statement = error): shown with one sent directly.
    probe = "refused_probe_%s" % os.urandom(4).hex()
    offset = pg_replica.log_offset()
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        pg_replica.sql("CREATE TEMP TABLE %s (a int)" % probe)
    wait_until(lambda: probe in pg_replica.log_since(offset, 10000), 10, msg="the direct write in the log")
    marker = "refused_write_%s" % os.urandom(4).hex()
    offset = pg_replica.log_offset()
    with pytest.raises(psycopg.Error) as e:
        c.execute("CREATE TEMP TABLE %s (a int)" % marker)
    assert e.value.sqlstate == "25006", e.value
    assert e.value.diag.message_primary == "cannot execute a write: the configured primary is in recovery", \
        e.value.diag.message_primary
    # the client can go on: reads still work
    assert c.execute("SELECT 1").fetchone()[0] == 1
    c.close()
    # anything the server logs for a statement it ran is in its log by the
    # time the client has the answer; the SELECT above came after the write
    assert marker not in pg_replica.log_since(offset, 10000), pg_replica.log_since(offset, 50)


def test_sticky_primary_after_write(pgcat, pg, pg_replica, rw_table):
    import time
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], extra={"sticky_primary_after_write": 1500})
    c = inst.connect()
    assert in_recovery(c) is True
    c.execute("INSERT INTO route_t (v) VALUES (1)")
    # read-your-writes: the next reads see the primary
    assert in_recovery(c) is False
    assert c.execute("SELECT count(*) FROM route_t").fetchone()[0] == 1
    time.sleep(2)
    assert in_recovery(c) is True
    c.close()


def test_banned_replica_serves_again_after_ban_time(pgcat, pg, pg_replica):
    import time
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], primary_reads=True)
    r = admin(inst)
    assert command(r, "BAN 127.0.0.1:%d 2" % pg_replica.port) is None
    c = inst.connect()
    assert set(in_recovery(c) for _ in range(20)) == {False}
    time.sleep(2.5)
    assert True in {in_recovery(c) for _ in range(40)}
    c.close()


def test_writing_functions_go_to_the_primary(pgcat, pg, pg_replica):
    pg.sql("CREATE OR REPLACE FUNCTION app_bump() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    wait_until(lambda: pg_replica.sql("SELECT count(*) FROM pg_proc WHERE proname = 'app_bump'")[0][0] == 1, 20)
    q = "SELECT app_bump(), pg_is_in_recovery()"
    inst = start(pgcat, pg, [("127.0.0.1", pg_replica.port)])
    c = inst.connect()
    assert {c.execute(q).fetchone()[1] for _ in range(10)} == {True}   # a read as far as pgcat knows
    c.close()
    inst2 = start(pgcat, pg, [("127.0.0.1", pg_replica.port)], extra={"writing_functions": "app_*, other.fn"})
    c = inst2.connect()
    assert {c.execute(q).fetchone()[1] for _ in range(10)} == {False}
    c.close()
