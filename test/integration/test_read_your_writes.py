# SPDX-License-Identifier: MIT
"""read_your_writes = lsn (SPEC §4): after a client's transaction that wrote
ends on the primary, pgcat asks the primary's WAL position on that server
connection, and that client's reads go only to replicas that have replayed
it (by the lag monitor's figures), else to the primary; other clients are
unaffected, and once the replica caught up the writer's reads go back to it.

The replica applies commits 3 s late (recovery_min_apply_delay), so a read
that lands on it right after a write cannot see the write: the test with
read_your_writes off shows exactly that."""
import asyncio
import time

import pytest

import pgwire
from conftest import wait_until

DELAY = "3s"


def pool(pg, replica, mode="lsn", extra=None):
    p = {"query_parser_enabled": "true", "primary_reads_enabled": "false",
         "read_your_writes": mode,
         "shards": {0: {"database": "appdb",
                        "servers": "127.0.0.1:%d:primary, 127.0.0.1:%d:replica" % (pg.port, replica.port)}}}
    p.update(extra or {})
    return p


def start(pgcat, pg, replica, mode="lsn", general=None, extra=None):
    g = {"replica_lag_check_interval": 200}
    g.update(general or {})
    return pgcat(pool=pool(pg, replica, mode, extra), general=g)


def caught_up(pg, rep):
    lsn = pg.sql("SELECT pg_current_wal_insert_lsn()", dbname="postgres")[0][0]
    return rep.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,), dbname="postgres")[0][0]


@pytest.fixture
def delayed(pg, pg_replica):
    """The session's replica, with commits applied DELAY late for this test."""
    pg.sql("DROP TABLE IF EXISTS ryw_t; CREATE TABLE ryw_t (id serial PRIMARY KEY, v text); "
           "GRANT ALL ON ryw_t TO app; GRANT ALL ON SEQUENCE ryw_t_id_seq TO app")
    wait_until(lambda: caught_up(pg, pg_replica), 30, msg="replica has the table")
    pg_replica.sql("ALTER SYSTEM SET recovery_min_apply_delay = '%s'" % DELAY, dbname="postgres")
    pg_replica.sql("SELECT pg_reload_conf()", dbname="postgres")
    wait_until(lambda: pg_replica.sql("SHOW recovery_min_apply_delay", dbname="postgres")[0][0] == DELAY, 10)
    yield pg_replica
    pg_replica.sql("ALTER SYSTEM RESET recovery_min_apply_delay", dbname="postgres")
    pg_replica.sql("SELECT pg_reload_conf()", dbname="postgres")
    wait_until(lambda: pg_replica.sql("SHOW recovery_min_apply_delay", dbname="postgres")[0][0] == "0", 10)
    pg.sql("DROP TABLE IF EXISTS ryw_t")
    wait_until(lambda: caught_up(pg, pg_replica), 30, msg="replica caught up")


def marker(tag, i):
    return "%s-%d-%s" % (tag, i, time.monotonic_ns())


READ = "SELECT count(*), pg_is_in_recovery() FROM ryw_t WHERE v = %s"


def wait_lag_figures(inst, timeout=10):
    """The lag monitor measured the replica at least once (SHOW SHARDS)."""
    from test_admin import admin, show
    r = admin(inst)
    try:
        wait_until(lambda: any(row.get("lag_bytes") for row in show(r, "SHARDS")[1]), timeout,
                   msg="lag monitor figures")
    finally:
        r.close()


# ---- psycopg ------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["extended", "simple"])
def test_psycopg_autocommit_write_then_read(pgcat, pg, delayed, protocol):
    import psycopg
    inst = start(pgcat, pg, delayed)
    kw = {"cursor_factory": psycopg.ClientCursor} if protocol == "simple" else {}
    c = inst.connect(**kw)
    other = inst.connect(**kw)
    assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True   # reads: the replica
    for i in range(5):
        m = marker("ac-" + protocol, i)
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        # the writer sees its row at once: not on the replica 3 s behind
        assert c.execute(READ, (m,)).fetchone() == (1, False)
        # another client's read still goes to the replica, which has not
        # applied the write yet
        assert other.execute(READ, (m,)).fetchone() == (0, True)
    # once the replica replayed it, the writer's reads go back there
    wait_until(lambda: c.execute(READ, (m,)).fetchone() == (1, True), 15,
               msg="writer's reads back on the caught-up replica")
    c.close()
    other.close()


@pytest.mark.parametrize("protocol", ["extended", "simple"])
def test_psycopg_explicit_transaction(pgcat, pg, delayed, protocol):
    import psycopg
    inst = start(pgcat, pg, delayed)
    kw = {"cursor_factory": psycopg.ClientCursor} if protocol == "simple" else {}
    c = inst.connect(**kw)
    for i in range(3):
        m = marker("tx-" + protocol, i)
        c.execute("BEGIN")
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        c.execute("COMMIT")
        assert c.execute(READ, (m,)).fetchone() == (1, False)
        m = marker("tx2-" + protocol, i)
        with c.transaction():
            c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        assert c.execute(READ, (m,)).fetchone() == (1, False)
    c.close()


def test_no_read_your_writes_reads_stale(pgcat, pg, delayed):
    """The same scenario with read_your_writes off: the read right after the
    write lands on the delayed replica and misses the row (what the tests
    above would see without the feature)."""
    inst = start(pgcat, pg, delayed, mode="off")
    c = inst.connect()
    for i in range(3):
        m = marker("off", i)
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        assert c.execute(READ, (m,)).fetchone() == (0, True)
    c.close()


# ---- the wire: nothing of pgcat's query reaches the client ---------------

def test_wire_write_then_read_exact_replies(pgcat, pg, delayed):
    """Query INSERT, then a Query SELECT sent the moment the ReadyForQuery
    arrives (while pgcat's position query runs): each answered exactly, with
    nothing of pgcat's own query in between, and the read sees the write."""
    inst = start(pgcat, pg, delayed)
    r = inst.raw_login()
    for i in range(10):
        m = marker("wire", i)
        r.send(pgwire.query("INSERT INTO ryw_t (v) VALUES ('%s')" % m))
        types = [t for t, _ in r.read_until((b"Z",))]
        assert types == [b"C", b"Z"], types
        r.send(pgwire.query("SELECT count(*), pg_is_in_recovery() FROM ryw_t WHERE v = '%s'" % m))
        got = list(r.read_until((b"Z",)))
        assert [t for t, _ in got] == [b"T", b"D", b"C", b"Z"], got
        assert pgwire.data_row_values(got[1][1]) == ["1", "f"]
    # a write and the read pipelined in one send: the read runs on the same
    # server after the write (still linked), and sees it
    m = marker("wire-pipe", 0)
    r.send(pgwire.query("INSERT INTO ryw_t (v) VALUES ('%s')" % m) +
           pgwire.query("SELECT count(*) FROM ryw_t WHERE v = '%s'" % m))
    got = list(r.read_until((b"Z",))) + list(r.read_until((b"Z",)))
    assert [t for t, _ in got] == [b"C", b"Z", b"T", b"D", b"C", b"Z"], got
    assert pgwire.data_row_values(got[3][1]) == ["1"]
    r.close()


# ---- asyncpg ------------------------------------------------------------

def test_asyncpg_write_then_read(pgcat, pg, delayed):
    inst = start(pgcat, pg, delayed)

    async def run():
        c = await inst.asyncpg()
        other = await inst.asyncpg()
        try:
            for i in range(3):
                # simple protocol (execute without arguments), autocommit
                m = marker("apg-simple", i)
                await c.execute("INSERT INTO ryw_t (v) VALUES ('%s')" % m)
                assert tuple(await c.fetchrow(READ.replace("%s", "$1"), m)) == (1, False)
                # extended protocol, autocommit
                m = marker("apg-ext", i)
                await c.execute("INSERT INTO ryw_t (v) VALUES ($1)", m)
                assert tuple(await c.fetchrow(READ.replace("%s", "$1"), m)) == (1, False)
                assert tuple(await other.fetchrow(READ.replace("%s", "$1"), m)) == (0, True)
                # explicit transaction
                m = marker("apg-tx", i)
                async with c.transaction():
                    await c.execute("INSERT INTO ryw_t (v) VALUES ($1)", m)
                assert tuple(await c.fetchrow(READ.replace("%s", "$1"), m)) == (1, False)
            last = m
            deadline = time.monotonic() + 15
            while tuple(await c.fetchrow(READ.replace("%s", "$1"), last)) != (1, True):
                assert time.monotonic() < deadline, "writer's reads never went back to the replica"
                await asyncio.sleep(0.1)
        finally:
            await c.close()
            await other.close()

    asyncio.run(run())


# ---- the position cannot be learnt --------------------------------------

@pytest.fixture
def no_insert_lsn(pg, delayed):
    """pgcat's position query fails (permission denied) for the app role."""
    pg.sql("REVOKE EXECUTE ON FUNCTION pg_current_wal_insert_lsn() FROM PUBLIC", dbname="appdb")
    yield
    pg.sql("GRANT EXECUTE ON FUNCTION pg_current_wal_insert_lsn() TO PUBLIC", dbname="appdb")


def test_position_query_fails(pgcat, pg, delayed, no_insert_lsn):
    """The client is not hurt (it never sees the error), its reads go to
    the primary, and, once the lag monitor measured the primary after the
    write and the replica replayed that, back to the replica. The primary's
    log shows what pgcat asked: one position query per transaction that
    wrote, none for reads."""
    denied = "permission denied for function pg_current_wal_insert_lsn"
    inst = start(pgcat, pg, delayed)
    c = inst.connect()
    wait_lag_figures(inst)
    off = pg.log_offset()
    for _ in range(10):
        assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
    c.execute("BEGIN READ ONLY")
    c.execute("SELECT 1")
    c.execute("COMMIT")
    for i in range(3):
        m = marker("fail", i)
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        assert c.execute(READ, (m,)).fetchone() == (1, False)
    wait_until(lambda: c.execute(READ, (m,)).fetchone() == (1, True), 15,
               msg="reads back on the replica")
    wait_until(lambda: pg.log_since(off, 10000).count(denied) == 3, 5,
               msg="three position queries, one per write")
    c.close()


def test_two_workers(pgcat, pg, delayed):
    """The lag monitor runs in worker 0; clients of every worker route by
    its figures in the shared segment."""
    inst = start(pgcat, pg, delayed, general={"workers": 2})
    conns = [inst.connect() for _ in range(6)]
    wait_lag_figures(inst)
    for i, c in enumerate(conns):
        m = marker("w2", i)
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        assert c.execute(READ, (m,)).fetchone() == (1, False)
    for c in conns:
        wait_until(lambda: c.execute(READ, (m,)).fetchone() == (1, True), 15,
                   msg="reads back on the replica")
        c.close()


def test_session_mode_asks_nothing(pgcat, pg, delayed, no_insert_lsn):
    """Session mode: the client stays on the server its first transaction
    went to (the primary, for a write), so it reads its writes there and
    pgcat asks no position (the primary's log has no denied query)."""
    denied = "permission denied for function pg_current_wal_insert_lsn"
    inst = start(pgcat, pg, delayed, general={"pool_mode": "session"})
    off = pg.log_offset()
    c = inst.connect()
    for i in range(3):
        m = marker("session", i)
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        assert c.execute(READ, (m,)).fetchone() == (1, False)
    c.close()
    # (a position query would have run before the read that followed its
    # write, on the same server: its error would be logged by now)
    assert denied not in pg.log_since(off, 10000)


@pytest.fixture(params=["lost", "hangs"])
def hostile_insert_lsn(request, pg, delayed):
    """For the app role, pgcat's position query finds a function of the same
    name first (search_path public, pg_catalog) that ends its own backend
    (the server is lost while pgcat asks) or does not answer in time."""
    body = ("PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5);"
            if request.param == "lost" else "PERFORM pg_sleep(5);")
    pg.sql("CREATE OR REPLACE FUNCTION public.pg_current_wal_insert_lsn() RETURNS pg_lsn "
           "LANGUAGE plpgsql AS $$BEGIN %s RETURN '0/0'; END$$" % body)
    pg.sql("ALTER ROLE app IN DATABASE appdb SET search_path = public, pg_catalog")
    yield request.param
    pg.sql("ALTER ROLE app IN DATABASE appdb RESET search_path")
    pg.sql("DROP FUNCTION public.pg_current_wal_insert_lsn()")


def test_position_query_server_lost_or_silent(pgcat, pg, delayed, hostile_insert_lsn):
    """The server is lost while pgcat asks the position, or does not answer
    within healthcheck_timeout: the client, which already has its answer,
    sees nothing of it; its next request is served (on the primary, the
    position being unknown), and its connection goes on working."""
    inst = start(pgcat, pg, delayed, general={"healthcheck_timeout": 500})
    c = inst.connect()
    for i in range(2):
        m = marker("hostile-" + hostile_insert_lsn, i)
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        t0 = time.monotonic()
        assert c.execute(READ, (m,)).fetchone() == (1, False)
        took = time.monotonic() - t0
        assert took < 4, "the read waited for more than the timeout"
        if hostile_insert_lsn == "hangs":
            # sent while pgcat's query ran: it waited for the position
            # (here: for the timeout), it was not routed without it
            assert took >= 0.4, took
    wait_until(lambda: c.execute(READ, (m,)).fetchone() == (1, True), 15,
               msg="reads back on the replica")
    # pgcat closed that server while it asked (the client was not told)
    assert "(wal_position, age=" in inst.log()
    if hostile_insert_lsn == "hangs":
        assert "no answer to the WAL position query" in inst.log()
    c.close()


@pytest.fixture
def monitor_locked_out(pg, delayed):
    """The lag monitor logs in as the pool's first user: md5user here, which
    may not log in for this test, so that no figure is ever fresh."""
    pg.sql("ALTER ROLE md5user NOLOGIN")
    wait_until(lambda: not delayed.sql("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'md5user'",
                                       dbname="postgres")[0][0], 30, msg="replica has NOLOGIN")
    yield
    pg.sql("ALTER ROLE md5user LOGIN")


def test_replica_asked_when_figures_are_too_old(pgcat, pg, delayed, monitor_locked_out):
    """Without fresh lag monitor figures, the writer's read goes to the
    replica only after asking it whether it replayed the write: right after
    the write it has not (3 s delay): the read goes to the primary; once it
    has, the read is served there."""
    from conftest import PASSWORDS
    from test_admin import admin, show
    servers = "127.0.0.1:%d:primary, 127.0.0.1:%d:replica" % (pg.port, delayed.port)
    pools = {"appdb": {"query_parser_enabled": "true", "primary_reads_enabled": "false",
                       "read_your_writes": "lsn",
                       "shards": {0: {"database": "appdb", "servers": servers}},
                       "users": {"md5user": {"password": PASSWORDS["md5user"]},
                                 "app": {"password": PASSWORDS["app"]}}}}
    inst = pgcat(replace_pools=pools, general={"replica_lag_check_interval": 200})
    c = inst.connect()
    other = inst.connect()
    # the monitor knows nothing
    r = admin(inst)
    time.sleep(1)
    assert not any(row.get("lag_bytes") for row in show(r, "SHARDS")[1])
    r.close()
    for i in range(3):
        m = marker("ask", i)
        c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
        assert c.execute(READ, (m,)).fetchone() == (1, False)
        assert other.execute(READ, (m,)).fetchone() == (0, True)
    wait_until(lambda: c.execute(READ, (m,)).fetchone() == (1, True), 15,
               msg="read on the replica once it says it replayed the write")
    c.close()
    other.close()
    # a replica that had not replayed yet is not a failed one
    assert "banning" not in inst.log() and "ban " not in inst.log(), inst.log()


def test_marks_move_with_the_client_in_a_takeover(pgcat, pg, delayed, tmp_path):
    """-R: a client that wrote moves to the new process with the WAL
    position its reads wait for (it used to stay and drain): right after
    the takeover, within the replica's 3 s delay, its read still goes to
    the primary and sees its row, while a client that did not write reads
    from the replica."""
    import re
    from conftest import pgcat_process
    inst = start(pgcat, pg, delayed, general={"shutdown_timeout": 15000})
    c = inst.connect()
    other = inst.connect()
    wait_lag_figures(inst)
    m = marker("takeover", 0)
    c.execute("INSERT INTO ryw_t (v) VALUES (%s)", (m,))
    assert c.execute(READ, (m,)).fetchone() == (1, False)
    with pgcat_process(["-R", inst.ini], tmp_path / "b.log") as b:
        assert inst.proc.wait(10) == 0
        inst.stopped_by_test = True
        assert re.search(r"handover: 2 clients moved to the new process", inst.log()), inst.log()[-2000:]
        assert "left to drain" not in inst.log()
        assert c.execute(READ, (m,)).fetchone() == (1, False)
        assert other.execute(READ, (m,)).fetchone() == (0, True)
        assert b.poll() is None
        c.close()
        other.close()
