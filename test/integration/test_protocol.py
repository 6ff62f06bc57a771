# SPDX-License-Identifier: MIT
"""Simple and extended protocol exactly as PostgreSQL handles it (SPEC §3):
pipelining before one Sync, Flush forwarded at once, errors that skip to
Sync, errors mid-transaction, NOTICE and LISTEN/NOTIFY passthrough, a large
result streamed with pgcat's memory flat, backpressure."""
import asyncio
import os
import socket
import threading
import time

import pytest
from psycopg import errors

import pgwire
from conftest import DEFAULT_ASAN, assert_pool_idle, assert_works, wait_until

MODES = ["transaction", "session"]


# --- extended protocol with raw bytes ---------------------------------------------

def test_pipelined_extended_batch_raw(pgcat, pg):
    p = pgcat(general={"default_pool_size": 1})
    r = p.raw_login()
    batch = b""
    for i in range(50):
        batch += pgwire.parse("SELECT $1::int + 1") + pgwire.bind([i]) + pgwire.describe() + pgwire.execute()
    r.send(batch + pgwire.sync())
    msgs = r.read_until((b"Z",))
    rows = [pgwire.data_row_values(m[1])[0] for m in msgs if m[0] == b"D"]
    assert rows == [str(i + 1) for i in range(50)]
    assert [m[0] for m in msgs].count(b"1") == 50   # ParseComplete
    assert [m[0] for m in msgs].count(b"2") == 50   # BindComplete
    assert msgs[-1] == (b"Z", b"I")
    r.close()
    assert_pool_idle(pg, max_conns=1)


def test_error_skips_to_sync_raw(pgcat, pg):
    p = pgcat()
    r = p.raw_login()
    r.send(pgwire.parse("SELECT 1") + pgwire.bind() + pgwire.execute()
           + pgwire.parse("SELECT 1 / count(*) FROM (SELECT 1 WHERE false) s")  # fails in Execute
           + pgwire.bind() + pgwire.execute()
           + pgwire.parse("SELECT 3") + pgwire.bind() + pgwire.execute()
           + pgwire.sync())
    msgs = r.read_until((b"Z",))
    types = [m[0] for m in msgs]
    # the third statement is skipped: nothing of it before ReadyForQuery
    assert types == [b"1", b"2", b"D", b"C", b"1", b"2", b"E", b"Z"], types
    assert pgwire.parse_fields(msgs[6][1])["C"] == "22012"
    assert msgs[-1] == (b"Z", b"I")
    # The connection goes on normally.
    rows, err, status = r.simple("SELECT 4")
    assert rows == [["4"]] and err is None and status == "I"
    r.close()
    assert_pool_idle(pg)


def test_flush_is_forwarded_at_once(pgcat, pg):
    p = pgcat(general={"default_pool_size": 1})
    r = p.raw_login()
    r.send(pgwire.parse("SELECT $1::text", "s_flush") + pgwire.flush())
    assert r.read_msg(5)[0] == b"1", "ParseComplete did not arrive after Flush (before Sync)"
    r.send(pgwire.bind(["hello"], stmt="s_flush") + pgwire.execute() + pgwire.flush())
    got = [r.read_msg(5)[0] for _ in range(3)]
    assert got == [b"2", b"D", b"C"], got
    # Before Sync the server is still this client's: another client waits.
    other = p.connect()
    result = []
    t = threading.Thread(target=lambda: result.append(other.execute("SELECT 5").fetchone()[0]))
    t.start()
    t.join(0.5)
    assert result == [], "another client got the server in the middle of an extended batch"
    r.send(pgwire.msg(b"C", b"Ss_flush\x00") + pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [m[0] for m in msgs] == [b"3", b"Z"]
    t.join(10)
    assert result == [5]
    other.close()
    r.close()


@pytest.mark.parametrize("prepared", [True, False])
def test_messages_after_a_sync_keep_the_server(pgcat, pg, prepared):
    """postgres.js (issue 20, item 2) and pgx (issue 28, item 3): a Sync,
    then more messages in the same write ending in Flush. PostgreSQL runs
    them as the next request and Flush sends their replies; the server
    must stay this client's until their own Sync (it went back to the pool
    at the first ReadyForQuery and the replies reached the next client)."""
    p = pgcat(general={"default_pool_size": 1, "prepared_statements": prepared})
    r = p.raw_login()
    other = p.raw_login()
    name = "s_after" if prepared else ""
    r.send(pgwire.parse("SELECT 4") + pgwire.bind() + pgwire.execute() + pgwire.sync()
           + pgwire.parse("SELECT $1::int AS five", name) + pgwire.describe(b"S", name) + pgwire.flush())
    first = r.read_until((b"Z",))
    assert [m[0] for m in first] == [b"1", b"2", b"D", b"C", b"Z"], first
    after = r.read_until((b"T",), timeout=5)
    assert [m[0] for m in after] == [b"1", b"t", b"T"], after
    # the other client waits meanwhile, and gets nothing of this one's
    other.send(pgwire.query("SELECT 6"))
    with pytest.raises(socket.timeout):
        other.read_msg(0.5)
    r.send(pgwire.bind(["5"], stmt=name) + pgwire.execute() + pgwire.sync())
    rest = r.read_until((b"Z",))
    assert [m[0] for m in rest] == [b"2", b"D", b"C", b"Z"], rest
    assert pgwire.data_row_values(rest[1][1]) == ["5"]
    rows, err, _ = other.collect()
    assert rows == [["6"]] and err is None
    r.close()
    other.close()
    assert_pool_idle(pg, max_conns=1)


def test_extended_transaction_keeps_server_across_syncs(pgcat, pg):
    p = pgcat(general={"default_pool_size": 2})
    r = p.raw_login()
    pids = []
    for sql in ("BEGIN", "SELECT pg_backend_pid()", "SELECT pg_backend_pid()", "COMMIT"):
        r.send(pgwire.parse(sql) + pgwire.bind() + pgwire.execute() + pgwire.sync())
        msgs = r.read_until((b"Z",))
        pids += [pgwire.data_row_values(m[1])[0] for m in msgs if m[0] == b"D"]
        status = msgs[-1][1]
        assert status == (b"I" if sql == "COMMIT" else b"T"), (sql, status)
    assert len(pids) == 2 and pids[0] == pids[1]
    r.close()


# --- drivers ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_psycopg_pipeline_mode(pgcat, pg, table, mode):
    t = table("id int, v text")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 2})
    with p.connect() as c:
        with c.pipeline():
            curs = [c.execute("INSERT INTO %s VALUES (%%s, %%s) RETURNING id" % t, (i, "v%d" % i))
                    for i in range(200)]
            c.execute("SELECT 1")
        assert [cur.fetchone()[0] for cur in curs] == list(range(200))
        with c.pipeline():
            c.cursor().executemany("INSERT INTO %s VALUES (%%s, %%s)" % t,
                                   [(i, "w") for i in range(1000, 1300)])
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 500
    assert_pool_idle(pg, max_conns=2)


def test_psycopg_pipeline_error_aborts_rest(pgcat, pg, table):
    t = table("id int primary key")
    p = pgcat(general={"default_pool_size": 1})
    with p.connect() as c:
        with pytest.raises(errors.UniqueViolation):
            with c.pipeline():
                c.execute("INSERT INTO %s VALUES (1)" % t)
                c.execute("INSERT INTO %s VALUES (1)" % t)
                c.execute("INSERT INTO %s VALUES (2)" % t)
        assert c.execute("SELECT 42").fetchone()[0] == 42
    # autocommit pipeline: each statement its own implicit transaction until the error
    assert pg.sql("SELECT array_agg(id ORDER BY id) FROM %s" % t)[0][0] in ([1], None)
    assert_pool_idle(pg, max_conns=1)


@pytest.mark.parametrize("mode", MODES)
def test_asyncpg_executemany_and_fetch(pgcat, pg, table, mode):
    t = table("id int, v text")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 2})

    async def go():
        c = await p.asyncpg()
        try:
            await c.executemany("INSERT INTO %s VALUES ($1, $2)" % t,
                                [(i, "x" * (i % 50)) for i in range(2000)])
            n = await c.fetchval("SELECT count(*) FROM %s" % t)
            rows = await c.fetch("SELECT id FROM %s WHERE id < $1 ORDER BY id" % t, 5)
            async with c.transaction():
                await c.execute("INSERT INTO %s VALUES (-1, 'tx')" % t)
                inner = await c.fetchval("SELECT count(*) FROM %s WHERE id = -1" % t)
            return n, [r["id"] for r in rows], inner
        finally:
            await c.close()
    n, ids, inner = asyncio.run(go())
    assert n == 2000 and ids == [0, 1, 2, 3, 4] and inner == 1
    assert_pool_idle(pg, max_conns=2)


@pytest.mark.parametrize("mode", MODES)
def test_error_mid_transaction(pgcat, pg, table, mode):
    t = table("id int")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 1})
    with p.connect(autocommit=False) as c:
        c.execute("INSERT INTO %s VALUES (1)" % t)
        with pytest.raises(errors.DivisionByZero):
            c.execute("SELECT 1/0")
        with pytest.raises(errors.InFailedSqlTransaction):
            c.execute("SELECT 1")
        c.rollback()
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 0
        c.execute("INSERT INTO %s VALUES (2)" % t)
        c.commit()
    assert pg.sql("SELECT array_agg(id) FROM %s" % t)[0][0] == [2]
    assert_pool_idle(pg, max_conns=1)


def test_simple_query_multiple_statements(pgcat):
    p = pgcat()
    r = p.raw_login()
    rows, err, status = r.simple("SELECT 1; SELECT 2; SELECT 3")
    assert rows == [["1"], ["2"], ["3"]] and err is None and status == "I"
    rows, err, status = r.simple("SELECT 1; SELECT 1/0; SELECT 3")
    assert rows == [["1"]] and err["C"] == "22012" and status == "I"
    rows, err, status = r.simple("BEGIN; SELECT 1")
    assert status == "T"
    rows, err, status = r.simple("COMMIT")
    assert status == "I"
    r.close()


@pytest.mark.parametrize("mode", MODES)
def test_notice_passthrough(pgcat, mode):
    p = pgcat(general={"pool_mode": mode})
    notices = []
    with p.connect() as c:
        c.add_notice_handler(lambda d: notices.append((d.severity, d.sqlstate, d.message_primary)))
        c.execute("DO $$ BEGIN RAISE NOTICE 'hello %', 42; END $$")
        c.execute("DO $$ BEGIN RAISE WARNING 'careful'; END $$")
    assert ("NOTICE", "00000", "hello 42") in notices
    assert ("WARNING", "01000", "careful") in notices


def test_listen_notify_session_mode(pgcat, pg):
    p = pgcat(general={"pool_mode": "session"})
    listener = p.connect()
    listener.execute("LISTEN pgcat_test_channel")
    with p.connect() as sender:
        sender.execute("NOTIFY pgcat_test_channel, 'through pgcat'")
    pg.sql("NOTIFY pgcat_test_channel, 'from a direct connection'")
    got = []
    for n in listener.notifies(timeout=10, stop_after=2):
        got.append((n.channel, n.payload))
    assert got == [("pgcat_test_channel", "through pgcat"),
                   ("pgcat_test_channel", "from a direct connection")]
    listener.close()


def test_notify_arrives_with_next_query_result(pgcat, pg):
    """Asynchronous messages arriving while a session client is idle reach it."""
    p = pgcat(general={"pool_mode": "session"})
    c = p.connect()
    c.execute("LISTEN ch2")
    pg.sql("NOTIFY ch2, 'x'")
    got = list(c.notifies(timeout=10, stop_after=1))
    assert [(n.channel, n.payload) for n in got] == [("ch2", "x")]
    c.close()


# --- big results, memory, backpressure ------------------------------------------------

def rss_env():
    # A small ASan quarantine, so freed buffers are not counted as resident.
    base = os.environ.get("ASAN_OPTIONS", DEFAULT_ASAN)
    return {"ASAN_OPTIONS": base + ":quarantine_size_mb=8:thread_local_quarantine_size_kb=64"}


class PeakRss:
    def __init__(self, p):
        self.p = p
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.p.rss_kb())
            time.sleep(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(5)


@pytest.mark.parametrize("mode", MODES)
def test_100mb_result_streams_with_flat_memory(pgcat, pg, mode):
    p = pgcat(general={"pool_mode": mode}, env=rss_env())
    assert_works(p)
    base = p.rss_kb()
    total = 0
    with PeakRss(p) as m:
        with p.connect() as c:
            cur = c.cursor()
            for row in cur.stream("SELECT repeat('x', 1000) FROM generate_series(1, 100000)"):
                total += len(row[0])
    assert total == 100_000_000
    grew_mb = (m.peak - base) / 1024
    assert grew_mb < 40, "pgcat's RSS grew by %.0f MB while streaming 100 MB" % grew_mb
    assert_pool_idle(pg)


@pytest.mark.slow
def test_1gb_copy_out_streams_with_flat_memory(pgcat, pg):
    p = pgcat(env=rss_env())
    assert_works(p)
    base = p.rss_kb()
    total = 0
    with PeakRss(p) as m:
        with p.connect() as c:
            with c.cursor().copy("COPY (SELECT repeat('y', 10000) FROM generate_series(1, 100000)) "
                                 "TO STDOUT") as cp:
                while True:
                    data = cp.read()
                    if not data:
                        break
                    total += len(data)
    assert total == 100000 * 10001
    grew_mb = (m.peak - base) / 1024
    assert grew_mb < 40, "pgcat's RSS grew by %.0f MB while streaming 1 GB" % grew_mb


def test_client_that_stops_reading(pgcat, pg):
    """Backpressure: the client asks for 500 MB and reads nothing. pgcat stops
    reading the server (which ends up waiting on ClientWrite), its memory
    stays bounded, and when the client goes away the server is returned."""
    p = pgcat(general={"default_pool_size": 1}, env=rss_env())
    assert_works(p)
    base = p.rss_kb()
    r = p.raw_login()
    r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    r.send(pgwire.query("SELECT repeat('z', 1000) FROM generate_series(1, 500000)"))

    def server_blocked():
        rows = pg.sql("SELECT wait_event FROM pg_stat_activity WHERE usename = 'app' "
                      "AND state = 'active' AND query LIKE 'SELECT repeat%%'", dbname="postgres")
        return rows and rows[0][0] == "ClientWrite"
    wait_until(server_blocked, 20, msg="the server to block writing (pgcat stopped reading it)")
    grew_mb = (p.rss_kb() - base) / 1024
    assert grew_mb < 40, "pgcat buffered %.0f MB for a client that does not read" % grew_mb
    r.close()
    assert_pool_idle(pg, max_conns=1, timeout=15)
    assert_works(p)
