# SPDX-License-Identifier: MIT
"""A transaction that goes on to other shards (two_phase_commit, SPEC §6;
doc/sharding.md "A transaction that goes on to other shards") has, on every
shard it touches, the isolation level, read-only and deferrable of the
transaction on the shard it began on, however the client chose them: its
BEGIN or START TRANSACTION, SET TRANSACTION before the transaction spread,
the session's default_transaction_isolation, psycopg's isolation_level and
read_only, asyncpg's transaction(isolation=..., readonly=...). Both
protocols. A SET TRANSACTION once it spread is refused (it would change one
shard's transaction only): the whole transaction rolls back. If the first
shard cannot tell (its server gone as pgcat asks), the statement that went
on gets the error and the whole transaction fails.

The shards are test_two_phase_commit's own two PostgreSQL servers (with
max_prepared_transactions > 0)."""
import asyncio
import os
import signal
import threading
import time

import asyncpg
import psycopg
import pytest
from psycopg import IsolationLevel

import test_two_phase_commit as tpc
from test_two_phase_commit import clean, shards  # noqa: F401  (fixtures: two shards of this module)

MODE = ("current_setting('transaction_isolation'), current_setting('transaction_read_only'), "
        "current_setting('transaction_deferrable'), inet_server_port()")


def mode_sql(key):
    """A statement routed by its key that tells the transaction's
    characteristics where it runs (one row, whatever the ledger holds)."""
    return "SELECT %s, count(*) FROM ledger WHERE id = %d" % (MODE, key)


def nothing_left(shards):
    """No row, nothing prepared, no lock on the ledger on any shard."""
    assert [tpc.prepared(s) for s in shards] == [[], []]
    assert [tpc.ledger(s) for s in shards] == [[], []]
    for s in shards:
        assert s.sql("SELECT count(*) FROM pg_locks l JOIN pg_class r ON r.oid = l.relation "
                     "WHERE r.relname = 'ledger'", dbname="shard0") == [(0,)]


@pytest.mark.parametrize("level,shown", [(IsolationLevel.REPEATABLE_READ, "repeatable read"),
                                         (IsolationLevel.SERIALIZABLE, "serializable")])
def test_psycopg_isolation_level_on_every_shard(pgcat, clean, tmp_path, level, shown):  # noqa: F811
    """psycopg's isolation_level (its BEGIN ISOLATION LEVEL ..., then the
    extended protocol): a write on shard 0, then shard 1 runs at the same
    level; COMMIT commits on both."""
    shards = clean
    p = tpc.start(pgcat, shards, tmp_path)
    with tpc.connect(p, autocommit=False) as c:
        c.isolation_level = level
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_A, -1))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_B, 1))
        assert c.execute(mode_sql(tpc.KEY_B)).fetchone() == (shown, "off", "off", shards[1].port, 1)
        assert c.execute(mode_sql(tpc.KEY_A)).fetchone() == (shown, "off", "off", shards[0].port, 1)
        c.commit()
    assert tpc.settled(shards, 5) == [[(tpc.KEY_A, -1)], [(tpc.KEY_B, 1)]]


# (statements before the transaction spreads, what every shard's shows)
OPENINGS = [
    (["BEGIN ISOLATION LEVEL REPEATABLE READ"], ("repeatable read", "off", "off")),
    (["BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE"], ("serializable", "off", "off")),
    (["START TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE"], ("serializable", "on", "on")),
    (["BEGIN", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"], ("serializable", "off", "off")),
    (["BEGIN READ ONLY", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"], ("repeatable read", "on", "off")),
    (["SET default_transaction_isolation = 'repeatable read'", "BEGIN"], ("repeatable read", "off", "off")),
    (["SET default_transaction_read_only = on", "BEGIN ISOLATION LEVEL SERIALIZABLE"], ("serializable", "on", "off")),
    (["BEGIN"], ("read committed", "off", "off")),
]


@pytest.mark.parametrize("opening,mode", OPENINGS, ids=[" ; ".join(o) for o, _ in OPENINGS])
def test_simple_protocol_every_shard_has_the_transactions_mode(pgcat, clean, tmp_path, opening, mode):  # noqa: F811
    """Simple protocol: a read on shard 0, then a read on shard 1 by its
    key and SHOW there (SET SHARD) give the characteristics of shard 0's
    transaction; COMMIT ends it on both."""
    shards = clean
    p = tpc.start(pgcat, shards, tmp_path)
    with tpc.connect(p) as c:
        cur = psycopg.ClientCursor(c)
        for sql in opening:
            cur.execute(sql)
        cur.execute(mode_sql(tpc.KEY_A))
        assert cur.fetchone() == mode + (shards[0].port, 0)
        cur.execute(mode_sql(tpc.KEY_B))
        assert cur.fetchone() == mode + (shards[1].port, 0)
        # spread: SET SHARD routes what follows (pgcat's own command)
        cur.execute("SET SHARD TO '1'")
        cur.execute("SHOW transaction_isolation")
        assert cur.fetchone() == (mode[0],)
        cur.execute("SHOW transaction_read_only")
        assert cur.fetchone() == (mode[1],)
        cur.execute("SELECT inet_server_port()")
        assert cur.fetchone() == (shards[1].port,)
        cur.execute("SET SHARD TO '0'")
        cur.execute("SELECT inet_server_port()")
        assert cur.fetchone() == (shards[0].port,)
        cur.execute("COMMIT")
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    nothing_left(shards)


def test_read_only_refuses_a_write_on_the_next_shard(pgcat, clean, tmp_path):  # noqa: F811
    """BEGIN READ ONLY (psycopg's read_only, extended protocol; then the
    simple protocol): a read on shard 0, then a write on shard 1 fails with
    25006 and the whole transaction rolls back; the client goes on."""
    shards = clean
    p = tpc.start(pgcat, shards, tmp_path)
    with tpc.connect(p, autocommit=False) as c:
        c.read_only = True
        assert c.execute(mode_sql(tpc.KEY_A)).fetchone() == ("read committed", "on", "off", shards[0].port, 0)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_B, 1))
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute(mode_sql(tpc.KEY_A))
        c.rollback()
        nothing_left(shards)
        # reads on both shards commit
        assert c.execute(mode_sql(tpc.KEY_A)).fetchone()[3:] == (shards[0].port, 0)
        assert c.execute(mode_sql(tpc.KEY_B)).fetchone() == ("read committed", "on", "off", shards[1].port, 0)
        c.commit()
        # and the client goes on as usual
        c.read_only = False
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_A, -2))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_B, 2))
        c.commit()
    assert tpc.settled(shards, 5) == [[(tpc.KEY_A, -2)], [(tpc.KEY_B, 2)]]
    with tpc.connect(p) as c:
        cur = psycopg.ClientCursor(c)
        cur.execute("BEGIN READ ONLY")
        cur.execute("SELECT count(*) FROM ledger WHERE id = %d" % tpc.KEY_A)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            cur.execute("UPDATE ledger SET amount = amount + 1 WHERE id = %d" % tpc.KEY_B)
        cur.execute("ROLLBACK")
        cur.execute("SELECT amount FROM ledger WHERE id = %d" % tpc.KEY_B)
        assert cur.fetchall() == [(2,)]
    assert tpc.settled(shards, 5) == [[(tpc.KEY_A, -2)], [(tpc.KEY_B, 2)]]


def test_asyncpg_transaction_options_on_every_shard(pgcat, clean, tmp_path):  # noqa: F811
    """asyncpg's transaction(isolation=..., readonly=..., deferrable=...)
    (prepare, then bind)."""
    shards = clean
    p = tpc.start(pgcat, shards, tmp_path)
    q = "SELECT %s, count(*) FROM ledger WHERE id = $1" % MODE

    async def run():
        conn = await p.asyncpg(dbname="tpc")
        try:
            out = []
            async with conn.transaction(isolation="serializable", readonly=True, deferrable=True):
                await conn.fetchval("SELECT count(*) FROM ledger WHERE id = $1", tpc.KEY_A)
                out.append(tuple(await conn.fetchrow(q, tpc.KEY_B)))
            async with conn.transaction(isolation="repeatable_read"):
                await conn.execute("INSERT INTO ledger (id, amount) VALUES ($1, $2)", tpc.KEY_A, -3)
                await conn.execute("INSERT INTO ledger (id, amount) VALUES ($1, $2)", tpc.KEY_B, 3)
                out.append(tuple(await conn.fetchrow(q, tpc.KEY_B)))
                out.append(tuple(await conn.fetchrow(q, tpc.KEY_A)))
            with pytest.raises(asyncpg.exceptions.ReadOnlySQLTransactionError):
                async with conn.transaction(isolation="serializable", readonly=True):
                    await conn.fetchval("SELECT count(*) FROM ledger WHERE id = $1", tpc.KEY_A)
                    await conn.execute("INSERT INTO ledger (id, amount) VALUES ($1, $2)", tpc.KEY_B, 4)
            out.append(await conn.fetchval("SELECT count(*) FROM ledger WHERE id = $1", tpc.KEY_B))
            return out
        finally:
            await conn.close()
    assert asyncio.run(run()) == [("serializable", "on", "on", shards[1].port, 0),
                                  ("repeatable read", "off", "off", shards[1].port, 1),
                                  ("repeatable read", "off", "off", shards[0].port, 1),
                                  1]
    assert tpc.settled(shards, 5) == [[(tpc.KEY_A, -3)], [(tpc.KEY_B, 3)]]


@pytest.mark.parametrize("statement", ["SET TRANSACTION READ ONLY", "SET LOCAL transaction_read_only = on",
                                       "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"])
@pytest.mark.parametrize("simple", [False, True], ids=["extended", "simple"])
def test_set_transaction_once_spread_is_refused(pgcat, clean, tmp_path, statement, simple):  # noqa: F811
    """Once the transaction is on two shards, SET TRANSACTION would change
    one shard's transaction only: refused, the whole transaction rolled
    back, as a failed transaction until the client ends it; then the
    client goes on."""
    shards = clean
    p = tpc.start(pgcat, shards, tmp_path)
    with tpc.connect(p, autocommit=False) as c:
        cur = psycopg.ClientCursor(c) if simple else c.cursor()
        cur.execute("INSERT INTO ledger (id, amount) VALUES (%d, -5)" % tpc.KEY_A)
        cur.execute("INSERT INTO ledger (id, amount) VALUES (%d, 5)" % tpc.KEY_B)
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="SET TRANSACTION"):
            cur.execute(statement)
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            cur.execute("SELECT 1")
        c.rollback()
        nothing_left(shards)
        cur = psycopg.ClientCursor(c) if simple else c.cursor()
        cur.execute("INSERT INTO ledger (id, amount) VALUES (%d, -6)" % tpc.KEY_A)
        cur.execute("INSERT INTO ledger (id, amount) VALUES (%d, 6)" % tpc.KEY_B)
        c.commit()
    assert tpc.settled(shards, 5) == [[(tpc.KEY_A, -6)], [(tpc.KEY_B, 6)]]


def test_first_shard_lost_as_the_transaction_spreads(pgcat, clean, tmp_path):  # noqa: F811
    """The shard the transaction began on cannot tell its characteristics:
    its backend, frozen, is terminated while pgcat asks. The statement for
    the second shard gets the error and runs nowhere, the transaction is
    failed until ROLLBACK, and then the client goes on."""
    shards = clean
    p = tpc.start(pgcat, shards, tmp_path)
    with tpc.connect(p, autocommit=False) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_A, -8))
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]   # (no key: shard 0's)
        box = {}

        def spread():
            try:
                c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_B, 8))
                box["ok"] = True
            except psycopg.Error as e:
                box["error"] = e
        os.kill(pid, signal.SIGSTOP)
        try:
            th = threading.Thread(target=spread, daemon=True)
            th.start()
            time.sleep(0.5)   # pgcat's question waits in the frozen backend's socket
            assert shards[0].sql("SELECT pg_terminate_backend(%d)" % pid, dbname="postgres") == [(True,)]
        finally:
            os.kill(pid, signal.SIGCONT)
        th.join(15)
        assert not th.is_alive()
        assert "ok" not in box, "the statement ran on shard 1"
        assert box["error"].sqlstate in ("57P01", "08006"), box["error"]
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("SELECT 1 FROM ledger WHERE id = %s", (tpc.KEY_B,))
        c.rollback()
        nothing_left(shards)
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_A, -9))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_B, 9))
        c.commit()
    assert tpc.settled(shards, 5) == [[(tpc.KEY_A, -9)], [(tpc.KEY_B, 9)]]


def test_large_reply_on_the_next_shard_is_bounded(pgcat, clean, tmp_path):  # noqa: F811
    """A statement of a transaction gone on to another shard is answered
    whole once its shard replied: what pgcat holds of that reply is bounded
    by cross_shard_max_memory. Past it the statement fails with 54000
    naming the setting, the transaction is failed and rolled back on every
    shard, and pgcat's memory stays where it was."""
    from test_memory_bounds import PeakRss, small_quarantine_env
    shards = clean
    p = tpc.start(pgcat, shards, tmp_path, env=small_quarantine_env(),
                  general={"cross_shard_max_memory": "1MB"})
    with tpc.connect(p, autocommit=False) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_A, -1))
        rss = PeakRss(p.pid)
        # 16 MB of rows from shard B, inside the transaction begun on shard A
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT id, repeat('x', 1024) FROM ledger, generate_series(1, 16384) "
                      "WHERE id = %s UNION ALL SELECT %s, repeat('y', 1024) FROM generate_series(1, 16384)",
                      (tpc.KEY_B, tpc.KEY_B)).fetchall()
        growth = rss.growth_mb()
        assert e.value.sqlstate == "54000" and "cross_shard_max_memory" in str(e.value), e.value
        assert growth < 8, "pgcat grew by %.0f MB for a 16 MB reply over a 1 MB bound" % growth
        c.rollback()
    nothing_left(shards)
    with tpc.connect(p) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (tpc.KEY_B, 2))
    assert tpc.settled(shards, 5) == [[], [(tpc.KEY_B, 2)]]
