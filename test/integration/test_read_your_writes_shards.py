# SPDX-License-Identifier: MIT
"""read_your_writes = lsn (SPEC §4) after writes pgcat splits across shards
itself: a multi-row INSERT, COPY FROM STDIN, psycopg's executemany batch, a
write on every shard (default_shard = all), a split write inside the
client's transaction, and, with two_phase_commit, a split INSERT and an
asyncpg transaction that goes on to a second shard. Each shard's leg asks the primary's WAL position right after
its COMMIT (or COMMIT PREPARED) and the client's next read on that shard
waits for it: the writer sees its rows at once on each shard, while another
client's read still lands on the replica, which applies commits DELAY late
(recovery_min_apply_delay) and has not got them. A cross-shard SELECT and
a rolled-back split write leave the writer's reads on the replica.
(default_shard is 0, but all where a statement without a key must run on
every shard.)

The two shards are the databases shard0 and shard1 of a PostgreSQL server
of this module's own (max_prepared_transactions > 0, for two-phase commit)
with one streaming replica: each shard is that database on the primary
and on the replica."""
import asyncio
import subprocess
import time

import psycopg
import pytest

from conftest import PASSWORDS, PG_BIN, PgServer, _setup_roles, as_pg_user, free_port, wait_until

DELAY = "3s"
ROUNDS = 5
KEYS = []   # pg_bigint_hash over 2 shards: KEYS[i] lives on shard i
READ = "SELECT count(*), pg_is_in_recovery() FROM ryw_items WHERE id = %s AND v = %s"


def _caught_up(primary, replica):
    lsn = primary.sql("SELECT pg_current_wal_insert_lsn()", dbname="postgres")[0][0]
    return replica.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,), dbname="postgres")[0][0]


def _set_delay(replica, delay):
    replica.sql("ALTER SYSTEM SET recovery_min_apply_delay = '%s'" % delay, dbname="postgres")
    replica.sql("SELECT pg_reload_conf()", dbname="postgres")
    wait_until(lambda: replica.sql("SHOW recovery_min_apply_delay", dbname="postgres")[0][0] == delay, 10)


@pytest.fixture(scope="module")
def cluster(pg_root):
    """A primary with shard0 and shard1, and a replica applying commits DELAY late."""
    name = "rywsh-%d" % free_port()
    primary = PgServer(pg_root, name)
    replica = PgServer(pg_root, name + "-replica")
    started = []
    try:
        primary.initdb()
        with open(primary.datadir / "postgresql.conf", "a") as f:
            f.write("max_prepared_transactions = 16\n")
        primary.start()
        started.append(primary)
        _setup_roles(primary)
        for i in (0, 1):
            with primary.connect("shard%d" % i) as c:
                c.execute("CREATE TABLE ryw_items (id bigint, v text)")
                c.execute("GRANT ALL ON ryw_items TO PUBLIC")
                c.execute("CREATE TABLE ryw_hp (id bigint) PARTITION BY HASH (id)")
        with primary.connect("shard0") as c:
            for i in (0, 1):
                KEYS.append(c.execute("SELECT g FROM generate_series(1, 100) g WHERE "
                                      "satisfies_hash_partition('ryw_hp'::regclass, 2, %s, g::bigint) LIMIT 1",
                                      (i,)).fetchone()[0])
        # the rows the writes on every shard update (one per shard)
        for i in (0, 1):
            primary.sql("INSERT INTO ryw_items VALUES (%s, 'bc-0')", (KEYS[i],), dbname="shard%d" % i)
        replica.sockdir.mkdir(parents=True, exist_ok=True)
        replica._chown(replica.sockdir)
        subprocess.run(as_pg_user([str(PG_BIN / "pg_basebackup"), "-h", primary.host, "-p", str(primary.port),
                                   "-U", "postgres", "-D", str(replica.datadir), "-R", "-X", "stream", "-c", "fast",
                                   "--no-sync"]), check=True, capture_output=True, text=True, timeout=120)
        replica.port = free_port()
        with open(replica.datadir / "postgresql.conf", "a") as f:
            f.write(replica._conf(replica.port))
        replica.start()
        started.append(replica)
        wait_until(lambda: replica.sql("SELECT pg_is_in_recovery()", dbname="postgres")[0][0], 30,
                   msg="replica in recovery")
        wait_until(lambda: _caught_up(primary, replica), 30, msg="replica caught up")
        _set_delay(replica, DELAY)
        yield primary, replica
    finally:
        for s in reversed(started):
            s.stop()


def start(pgcat, cluster, tmp_path, mode="lsn", two_phase=False, default_shard="0"):
    primary, replica = cluster
    g = {"replica_lag_check_interval": 200, "prepared_statements": "true"}
    if two_phase:
        g.update({"two_phase_commit": "true", "state_dir": str(tmp_path / "state"),
                  "two_phase_recovery_interval": "1000"})
    pool = {
        "query_parser_enabled": "true",
        "primary_reads_enabled": "false",
        "read_your_writes": mode,
        "sharding_function": "pg_bigint_hash",
        "sharded_tables": "ryw_items.id",
        "default_shard": default_shard,
        "shards": {i: {"database": "shard%d" % i,
                       "servers": "127.0.0.1:%d:primary, 127.0.0.1:%d:replica" % (primary.port, replica.port)}
                   for i in (0, 1)},
        "users": {"app": {"password": PASSWORDS["app"], "pool_size": "4"}},
    }
    return pgcat(general=g, pools={"rs": pool})


def connect(inst, **kw):
    return inst.connect(dbname="rs", **kw)


def marker(tag, i):
    return "%s-%d-%s" % (tag, i, time.monotonic_ns())


def read(c, key, m):
    return c.execute(READ, (key, m)).fetchone()


def writer_sees_other_does_not(c, other, m, rows=1):
    """Right after the write: the writer sees its rows on each shard, every
    time; another client's read goes to the delayed replica, which has not
    applied them yet (so the writer's reads were steered, not everyone's)."""
    for _ in range(ROUNDS):
        for key in KEYS:
            assert read(c, key, m)[0] == rows
    # a cross-shard read of the writer waits for the marks on every shard too
    assert c.execute("SELECT count(*) FROM ryw_items WHERE v = %s", (m,)).fetchone()[0] == 2 * rows
    for key in KEYS:
        assert read(other, key, m) == (0, True)
    assert other.execute("SELECT count(*) FROM ryw_items WHERE v = %s", (m,)).fetchone()[0] == 0


def two_rows(m):
    return [(KEYS[0], m), (KEYS[1], m)]


# ---- writes split across shards, committed on each (plain COMMIT) --------

@pytest.mark.parametrize("protocol", ["extended", "simple"])
def test_split_insert(pgcat, cluster, tmp_path, protocol):
    inst = start(pgcat, cluster, tmp_path)
    kw = {"cursor_factory": psycopg.ClientCursor} if protocol == "simple" else {}
    with connect(inst, **kw) as c, connect(inst) as other:
        for i in range(ROUNDS):
            m = marker("ins-" + protocol, i)
            cur = c.execute("INSERT INTO ryw_items (id, v) VALUES (%s, %s), (%s, %s)",
                            (KEYS[0], m, KEYS[1], m))
            assert cur.rowcount == 2
            writer_sees_other_does_not(c, other, m)


def test_without_read_your_writes_the_split_insert_is_not_seen(pgcat, cluster, tmp_path):
    """The same with read_your_writes off: the writer's read lands on the
    delayed replica and misses its rows (what the tests here catch)."""
    inst = start(pgcat, cluster, tmp_path, mode="off")
    with connect(inst) as c:
        m = marker("off", 0)
        c.execute("INSERT INTO ryw_items (id, v) VALUES (%s, %s), (%s, %s)", (KEYS[0], m, KEYS[1], m))
        for key in KEYS:
            assert read(c, key, m) == (0, True)


def test_split_copy(pgcat, cluster, tmp_path):
    inst = start(pgcat, cluster, tmp_path)
    with connect(inst) as c, connect(inst) as other:
        for i in range(ROUNDS):
            m = marker("copy", i)
            with c.cursor() as cur:
                with cur.copy("COPY ryw_items (id, v) FROM STDIN") as cp:
                    for row in two_rows(m) + two_rows(m):
                        cp.write_row(row)
                assert cur.rowcount == 4
            writer_sees_other_does_not(c, other, m, rows=2)


def test_executemany(pgcat, cluster, tmp_path):
    """psycopg's executemany: one statement bound many times before one
    Sync, each Bind on its key's shard (extended protocol)."""
    inst = start(pgcat, cluster, tmp_path)
    with connect(inst) as c, connect(inst) as other:
        for i in range(ROUNDS):
            m = marker("many", i)
            with c.cursor() as cur:
                cur.executemany("INSERT INTO ryw_items (id, v) VALUES (%s, %s)", two_rows(m) * 3)
                assert cur.rowcount == 6
            writer_sees_other_does_not(c, other, m, rows=3)


def test_write_on_every_shard(pgcat, cluster, tmp_path):
    """default_shard = all: an UPDATE without a key runs on every shard."""
    inst = start(pgcat, cluster, tmp_path, default_shard="all")
    with connect(inst) as c, connect(inst) as other:
        for i in range(ROUNDS):
            m = marker("bc", i)
            cur = c.execute("UPDATE ryw_items SET v = %s WHERE v LIKE 'bc-%%'", (m,))
            assert cur.rowcount == 2
            writer_sees_other_does_not(c, other, m)


def test_split_insert_in_a_transaction(pgcat, cluster, tmp_path):
    """A split write inside the client's transaction waits there until its
    COMMIT: the mark comes with that COMMIT; a ROLLBACK gives none."""
    inst = start(pgcat, cluster, tmp_path)
    with connect(inst) as c, connect(inst) as other:
        for i in range(ROUNDS):
            m = marker("parked", i)
            with c.transaction():
                c.execute("INSERT INTO ryw_items (id, v) VALUES (%s, %s), (%s, %s)", (KEYS[0], m, KEYS[1], m))
            writer_sees_other_does_not(c, other, m)
    # rolled back: nothing was written, and the reads stay on the replica
    with connect(inst) as c:
        m = marker("rolled-back", 0)
        c.execute("BEGIN")
        c.execute("INSERT INTO ryw_items (id, v) VALUES (%s, %s), (%s, %s)", (KEYS[0], m, KEYS[1], m))
        c.execute("ROLLBACK")
        for key in KEYS:
            assert read(c, key, m) == (0, True)


def test_cross_shard_read_sets_no_mark(pgcat, cluster, tmp_path):
    inst = start(pgcat, cluster, tmp_path, default_shard="all")
    with connect(inst) as c:
        assert c.execute("SELECT count(*) FROM ryw_items").fetchone()[0] >= 2   # every shard's rows
        for key in KEYS:
            assert read(c, key, "none") == (0, True)


# ---- two_phase_commit: COMMIT PREPARED on each shard ----------------------

def test_two_phase_split_insert(pgcat, cluster, tmp_path):
    inst = start(pgcat, cluster, tmp_path, two_phase=True)
    with connect(inst) as c, connect(inst) as other:
        for i in range(ROUNDS):
            m = marker("2pc-ins", i)
            c.execute("INSERT INTO ryw_items (id, v) VALUES (%s, %s), (%s, %s)", (KEYS[0], m, KEYS[1], m))
            writer_sees_other_does_not(c, other, m)
    primary, _ = cluster
    assert primary.sql("SELECT count(*) FROM pg_prepared_xacts", dbname="postgres")[0][0] == 0


def test_two_phase_spread_transaction_asyncpg(pgcat, cluster, tmp_path):
    """asyncpg (extended protocol, named statements): a transaction that goes
    on to the second shard statement by statement, committed in two phases."""
    inst = start(pgcat, cluster, tmp_path, two_phase=True)
    with connect(inst) as other:
        async def run():
            conn = await inst.asyncpg(dbname="rs")
            try:
                seen, ms = [], []
                for i in range(ROUNDS):
                    m = marker("2pc-txn", i)
                    ms.append(m)
                    async with conn.transaction():
                        for key in KEYS:
                            await conn.execute("INSERT INTO ryw_items (id, v) VALUES ($1, $2)", key, m)
                    for _ in range(ROUNDS):
                        for key in KEYS:
                            seen.append(await conn.fetchval(
                                "SELECT count(*) FROM ryw_items WHERE id = $1 AND v = $2", key, m))
                return seen, ms
            finally:
                await conn.close()
        seen, ms = asyncio.run(run())
        assert seen == [1] * (ROUNDS * ROUNDS * 2)
        for key in KEYS:
            assert read(other, key, ms[-1]) == (0, True)
    primary, _ = cluster
    assert primary.sql("SELECT count(*) FROM pg_prepared_xacts", dbname="postgres")[0][0] == 0


def test_read_only_transaction_spread_over_replicas_commits(pgcat, cluster, tmp_path):
    """With two_phase_commit, a READ ONLY transaction read on the replica of
    one shard that goes on to the other shard commits: it wrote nothing, so
    there is nothing to prepare (a replica could not PREPARE TRANSACTION)."""
    inst = start(pgcat, cluster, tmp_path, two_phase=True)
    with connect(inst, autocommit=True) as c:
        for begin in ("BEGIN READ ONLY", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"):
            c.execute(begin)
            q = "SELECT count(*) > 0, pg_is_in_recovery() FROM ryw_items WHERE id = %s"
            first = c.execute(q, (KEYS[0],)).fetchone()
            second = c.execute(q, (KEYS[1],)).fetchone()
            c.execute("COMMIT")
            # (the first shard's part ran on its replica)
            assert first == (True, True) and second[0] is True, (begin, first, second)
        assert c.execute("SELECT 1").fetchone() == (1,)
    primary, _ = cluster
    for i in (0, 1):
        assert primary.sql("SELECT count(*) FROM pg_prepared_xacts", dbname="shard%d" % i)[0][0] == 0


def test_write_then_read_only_spread_keeps_its_mark(pgcat, cluster, tmp_path):
    """A transaction that wrote on its first shard, then turned READ ONLY
    (SET TRANSACTION READ ONLY) and went on to the other shard, commits
    without two phases, and its write on the first shard still steers the
    writer's reads there."""
    inst = start(pgcat, cluster, tmp_path, two_phase=True)
    with connect(inst, autocommit=True) as c, connect(inst, autocommit=True) as other:
        m = marker("ro", 0)
        c.execute("BEGIN")
        c.execute("INSERT INTO ryw_items (id, v) VALUES (%s, %s)", (KEYS[0], m))
        c.execute("SET TRANSACTION READ ONLY")
        c.execute("SELECT count(*) FROM ryw_items WHERE id = %s", (KEYS[1],))   # goes on to shard 1
        c.execute("COMMIT")
        for _ in range(ROUNDS):
            assert read(c, KEYS[0], m)[0] == 1
        assert read(other, KEYS[0], m) == (0, True)
