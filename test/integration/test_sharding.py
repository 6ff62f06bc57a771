# SPDX-License-Identifier: MIT
"""Sharding (SPEC §6): SET SHARDING KEY, comment hints, automatic routing by
the sharding keys the query parser finds (literals and bound parameters, text
and binary, unnamed and named prepared statements), refused cross-shard
writes and reads, SHOW SHARDS. Where each row landed is checked on the shard
databases themselves, against PostgreSQL's own hash partitioning
(satisfies_hash_partition with a partitioned table of the same key type)."""
import asyncio
import contextlib
import uuid

import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, wait_until
from test_admin import admin, show

SHARD_DBS = ("shard0", "shard1", "shard2")
# table -> (key type, pool)
TABLES = {"items2": "bigint", "items3": "bigint", "titems": "text", "uitems": "uuid"}


@pytest.fixture(scope="module")
def shard_dbs(pg):
    with pg.connect("postgres") as c:
        if not c.execute("SELECT 1 FROM pg_database WHERE datname = 'shard2'").fetchone():
            c.execute("CREATE DATABASE shard2")
            with pg.connect("shard2") as c2:
                c2.execute("GRANT ALL ON SCHEMA public TO PUBLIC")
    for db in SHARD_DBS:
        with pg.connect(db) as c:
            for t, typ in TABLES.items():
                c.execute("DROP TABLE IF EXISTS %s" % t)
                c.execute("CREATE TABLE %s (id %s PRIMARY KEY, v text)" % (t, typ))
                c.execute("GRANT ALL ON %s TO PUBLIC" % t)
                # the partitioned parent satisfies_hash_partition checks against
                c.execute("DROP TABLE IF EXISTS hp_%s" % typ)
                c.execute("CREATE TABLE hp_%s (id %s) PARTITION BY HASH (id)" % (typ, typ))
            c.execute("DROP TABLE IF EXISTS plain")
            c.execute("CREATE TABLE plain (x int)")
            c.execute("GRANT ALL ON plain TO PUBLIC")
    yield pg
    for db in SHARD_DBS:
        with pg.connect(db) as c:
            for t in TABLES:
                c.execute("DROP TABLE IF EXISTS %s" % t)


@pytest.fixture
def shards(shard_dbs):
    for db in SHARD_DBS:
        with shard_dbs.connect(db) as c:
            c.execute("TRUNCATE %s, plain" % ", ".join(TABLES))
    return shard_dbs


def sharded_pool(pg, dbs, function, tables, **extra):
    pool = {
        "query_parser_enabled": "true",
        "sharding_function": function,
        "sharded_tables": tables,
        "default_shard": "0",
        "shards": {i: {"database": db, "servers": "127.0.0.1:%d:primary" % pg.port} for i, db in enumerate(dbs)},
        "users": {"app": {"password": PASSWORDS["app"]}},
    }
    pool.update(extra)
    return pool


def start(pgcat, pg, **kw):
    general = {"prepared_statements": "true"}
    general.update(kw.pop("general", {}))
    pools = {
        "sh2": sharded_pool(pg, SHARD_DBS[:2], "pg_bigint_hash", "public.items2.id"),
        "sh3": sharded_pool(pg, SHARD_DBS, "pg_bigint_hash", "public.items3.id"),
        "sht": sharded_pool(pg, SHARD_DBS, "pg_text_hash", "titems.id"),
        "shu": sharded_pool(pg, SHARD_DBS[:2], "pg_uuid_hash", "uitems.id"),
    }
    pools.update(kw.pop("pools", {}))
    return pgcat(general=general, pools=pools, **kw)


def rows_per_shard(pg, table, n_shards):
    out = []
    for db in SHARD_DBS[:n_shards]:
        with pg.connect(db) as c:
            out.append(sorted(r[0] for r in c.execute("SELECT id FROM %s" % table).fetchall()))
    return out


def misplaced(pg, table, n_shards):
    """Rows PostgreSQL's hash partitioning would put on another shard."""
    typ = TABLES[table]
    bad = 0
    for i, db in enumerate(SHARD_DBS[:n_shards]):
        with pg.connect(db) as c:
            bad += c.execute(
                "SELECT count(*) FROM %s WHERE NOT satisfies_hash_partition('hp_%s'::regclass::oid, %d, %d, id)"
                % (table, typ, n_shards, i)).fetchone()[0]
    return bad


def shard_of(pg, table, n_shards, key):
    typ = TABLES[table]
    with pg.connect("shard0") as c:
        for i in range(n_shards):
            if c.execute("SELECT satisfies_hash_partition('hp_%s'::regclass::oid, %d, %d, %%s::%s)"
                         % (typ, n_shards, i, typ), (key,)).fetchone()[0]:
                return i
    raise AssertionError("no shard for %r" % (key,))


def where(pg, table, n_shards, key):
    """Shards holding key."""
    typ = TABLES[table]
    found = []
    for i, db in enumerate(SHARD_DBS[:n_shards]):
        with pg.connect(db) as c:
            if c.execute("SELECT count(*) FROM %s WHERE id = %%s::%s" % (table, typ), (key,)).fetchone()[0]:
                found.append(i)
    return found


def sqlstate(exc):
    return getattr(exc, "sqlstate", None)


# ---- SET SHARDING KEY, SHOW SHARD, hints ------------------------------------

def test_set_sharding_key_and_show_shard(pgcat, shards):
    inst = start(pgcat, shards)
    with inst.connect(dbname="sh3") as c:
        for key in (0, 1, 7, 1234, -5, 9223372036854775807, -9223372036854775808):
            c.execute("SET SHARDING KEY TO '%d'" % key)
            s = shard_of(shards, "items3", 3, key)
            assert c.execute("SHOW SHARD").fetchone()[0] == str(s)
            # the following transactions go there, whatever they touch
            assert c.execute("SELECT current_database()").fetchone()[0] == "shard%d" % s
        # read the way int8in reads: spaces, sign, leading zeros
        c.execute("SET SHARDING KEY TO '  +0001234 '")
        assert c.execute("SHOW SHARD").fetchone()[0] == str(shard_of(shards, "items3", 3, 1234))
        before = c.execute("SHOW SHARD").fetchone()[0]
        for bad in ("abc", "1.5", "", "9223372036854775808", "12 34"):
            with pytest.raises(psycopg.Error) as e:
                c.execute("SET SHARDING KEY TO '%s'" % bad)
            assert sqlstate(e.value) == "22023", bad
            assert c.execute("SHOW SHARD").fetchone()[0] == before
    with inst.connect(dbname="sht") as c:
        for key in ("alice", "bob", "", " spaced ", "ünïcödé", "long-" * 150):
            c.execute("SET SHARDING KEY TO %s" % psycopg.sql.quote(key))
            s = shard_of(shards, "titems", 3, key)
            assert c.execute("SHOW SHARD").fetchone()[0] == str(s), key
    with inst.connect(dbname="shu") as c:
        u = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
        c.execute("SET SHARDING KEY TO '%s'" % u.upper().replace("-", ""))
        assert c.execute("SHOW SHARD").fetchone()[0] == str(shard_of(shards, "uitems", 2, u))
        with pytest.raises(psycopg.Error) as e:
            c.execute("SET SHARDING KEY TO 'not-a-uuid'")
        assert sqlstate(e.value) == "22023"


def test_comment_hints(pgcat, shards):
    inst = start(pgcat, shards)
    with inst.connect(dbname="sh3") as c:
        for s in range(3):
            assert c.execute("/* pgcat: shard=%d */ SELECT current_database()" % s).fetchone()[0] == "shard%d" % s
        k = 4242
        s = shard_of(shards, "items3", 3, k)
        assert c.execute("/* pgcat: sharding_key=%d */ SELECT current_database()" % k).fetchone()[0] == \
            "shard%d" % s
        # a hint beats SET SHARD, for one transaction only
        c.execute("SET SHARD TO '2'")
        assert c.execute("/* pgcat: shard=1 */ SELECT current_database()").fetchone()[0] == "shard1"
        assert c.execute("SELECT current_database()").fetchone()[0] == "shard2"
        for bad in ("shard=3", "shard=x", "sharding_key=abc", "shard=-1"):
            with pytest.raises(psycopg.Error) as e:
                c.execute("/* pgcat: %s */ SELECT 1" % bad)
            assert sqlstate(e.value) == "22023", bad
        assert c.execute("SELECT current_database()").fetchone()[0] == "shard2"
    with inst.connect(dbname="sht") as c:
        s = shard_of(shards, "titems", 3, "zed")
        assert c.execute("/* pgcat: sharding_key='zed' */ SELECT current_database()").fetchone()[0] == \
            "shard%d" % s


def test_hints_beat_set_shard_and_sharding_key(pgcat, shards):
    """Every kind of shard hint routes its own transaction over every kind of
    session setting (SPEC §6), in both protocols; the setting applies again
    to the next transaction."""
    inst = start(pgcat, shards)
    k = next(k for k in range(100) if shard_of(shards, "items3", 3, k) == 1)
    set_key = next(k for k in range(100) if shard_of(shards, "items3", 3, k) == 2)
    with inst.connect(dbname="sh3") as c:
        for setting in ("SET SHARD TO '2'", "SET SHARDING KEY TO '%d'" % set_key):
            c.execute(setting)
            for hint in ("shard=1", "sharding_key=%d" % k):
                q = "/* pgcat: %s */ SELECT current_database()" % hint
                assert c.execute(q).fetchone()[0] == "shard1", (setting, hint)
                assert c.execute("SELECT current_database()").fetchone()[0] == "shard2", (setting, hint)
                assert c.execute(q + " WHERE %s", (True,)).fetchone()[0] == "shard1", (setting, hint)
                assert c.execute("SELECT current_database() WHERE %s", (True,)).fetchone()[0] == "shard2"


def test_role_hint_beats_set_server_role_in_a_shard(pgcat, shards, pg_replica):
    """A shard with a primary and a replica: SET SHARD and SET SERVER ROLE,
    then a role hint picks the replica of that shard for one transaction."""
    pool = sharded_pool(shards, SHARD_DBS[:2], "pg_bigint_hash", "items2.id", primary_reads_enabled="false")
    pool["shards"][0]["servers"] = "127.0.0.1:%d:primary, 127.0.0.1:%d:replica" % (shards.port, pg_replica.port)
    inst = start(pgcat, shards, pools={"shr": pool})
    with inst.connect(dbname="shr") as c:
        c.execute("SET SHARD TO '0'")
        c.execute("SET SERVER ROLE TO 'primary'")
        for _ in range(3):
            row = c.execute("/* pgcat: role=replica */ SELECT pg_is_in_recovery(), current_database()").fetchone()
            assert row == (True, "shard0")
            assert c.execute("SELECT pg_is_in_recovery(), current_database()").fetchone() == (False, "shard0")
        c.execute("SET SERVER ROLE TO 'replica'")
        row = c.execute("/* pgcat: shard=0, role=primary */ SELECT pg_is_in_recovery(), current_database()").fetchone()
        assert row == (False, "shard0")
        assert c.execute("SELECT pg_is_in_recovery(), current_database()").fetchone() == (True, "shard0")


# ---- automatic routing --------------------------------------------------------

KEYS = list(range(-500, 500))   # 1,000 keys, negative ones included


def test_bulk_inserts_land_where_postgres_hashes_them(pgcat, shards):
    """1,000 keys per pool through pgcat, one INSERT per key, simple and
    extended protocol: every row is on the shard PARTITION BY HASH says."""
    inst = start(pgcat, shards)
    with inst.connect(dbname="sh2") as c:
        for k in KEYS[:500]:   # simple protocol: literals in the text
            c.execute(psycopg.sql.SQL("INSERT INTO items2 (id, v) VALUES ({}, 'x')").format(k))
        for k in KEYS[500:]:   # extended protocol, unnamed statement, text parameter
            c.execute("INSERT INTO items2 (id, v) VALUES (%s, 'x')", (k,))
    with inst.connect(dbname="sh3") as c:
        for k in KEYS[:500]:   # binary parameters
            c.execute("INSERT INTO items3 (id, v) VALUES (%b, 'x')", (k,))
    with inst.connect(dbname="sh3", prepare_threshold=0) as c:   # named prepared statements
        for k in KEYS[500:]:
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'x')", (k,))
    with inst.connect(dbname="sht") as c:
        for k in KEYS:
            c.execute("INSERT INTO titems (id, v) VALUES (%s, 'x')", ("key-%d" % k,))
    for table, n in (("items2", 2), ("items3", 3), ("titems", 3)):
        per = rows_per_shard(shards, table, n)
        assert sum(len(p) for p in per) == len(KEYS), table
        assert all(len(p) > 100 for p in per), (table, [len(p) for p in per])
        assert misplaced(shards, table, n) == 0, table


def test_asyncpg_parameters_and_prepared_statements(pgcat, shards):
    inst = start(pgcat, shards)

    async def run():
        # asyncpg binds bigint and uuid in binary, with the type left to the server
        conn = await inst.asyncpg(dbname="sh3", statement_cache_size=100)
        try:
            for k in KEYS[:300]:
                await conn.execute("INSERT INTO items3 (id, v) VALUES ($1, 'a')", k)
            stmt = await conn.prepare("INSERT INTO items3 (id, v) VALUES ($1, $2)")
            for k in KEYS[300:600]:
                await stmt.fetch(k, "p")
            # reads by key find each row on its shard
            for k in KEYS[:600:37]:
                assert await conn.fetchval("SELECT v FROM items3 WHERE id = $1", k) in ("a", "p")
            sel = await conn.prepare("SELECT count(*) FROM items3 WHERE id = $1")
            for k in KEYS[:600:41]:
                assert await sel.fetchval(k) == 1
        finally:
            await conn.close()
        conn = await inst.asyncpg(dbname="shu")
        try:
            for _ in range(200):
                await conn.execute("INSERT INTO uitems (id, v) VALUES ($1, 'u')", uuid.uuid4())
        finally:
            await conn.close()
        conn = await inst.asyncpg(dbname="sht")
        try:
            for k in KEYS[:200]:
                await conn.execute("INSERT INTO titems (id, v) VALUES ($1, 'a')", "a%d" % k)
        finally:
            await conn.close()

    asyncio.run(run())
    assert sum(len(p) for p in rows_per_shard(shards, "items3", 3)) == 600
    assert misplaced(shards, "items3", 3) == 0
    assert sum(len(p) for p in rows_per_shard(shards, "uitems", 2)) == 200
    assert misplaced(shards, "uitems", 2) == 0
    assert misplaced(shards, "titems", 3) == 0


def test_where_in_update_delete_multirow(pgcat, shards):
    inst = start(pgcat, shards)
    with inst.connect(dbname="sh3") as c:
        for k in range(60):
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'x')", (k,))
        assert misplaced(shards, "items3", 3) == 0
        by_shard = {}
        for k in range(60):
            by_shard.setdefault(shard_of(shards, "items3", 3, k), []).append(k)
        for s, ks in by_shard.items():
            a, b, d = ks[:3]
            # WHERE col = const, simple and extended
            assert c.execute("SELECT v FROM items3 WHERE id = %d" % a).fetchone()[0] == "x"
            assert c.execute("SELECT v FROM items3 WHERE id = %s", (a,)).fetchone()[0] == "x"
            # IN (...) with every key on one shard
            assert c.execute("SELECT count(*) FROM items3 WHERE id IN (%d, %d, %d)" % (a, b, d)).fetchone()[0] == 3
            assert c.execute("SELECT count(*) FROM items3 WHERE id IN (%s, %s)", (a, b)).fetchone()[0] == 2
            # UPDATE / DELETE WHERE col = const
            assert c.execute("UPDATE items3 SET v = 'u' WHERE id = %d" % a).rowcount == 1
            assert c.execute("UPDATE items3 SET v = 'w' WHERE id = %s", (b,)).rowcount == 1
            assert c.execute("DELETE FROM items3 WHERE id = %s", (d,)).rowcount == 1
            assert where(shards, "items3", 3, a) == [s]
            with shards.connect("shard%d" % s) as direct:
                assert direct.execute("SELECT v FROM items3 WHERE id = %s", (a,)).fetchone()[0] == "u"
                assert direct.execute("SELECT v FROM items3 WHERE id = %s", (b,)).fetchone()[0] == "w"
            assert where(shards, "items3", 3, d) == []
        # multi-row INSERT whose rows all hash to one shard: that shard
        new = [k for k in range(1000, 1100) if shard_of(shards, "items3", 3, k) == 1][:5]
        c.execute("INSERT INTO items3 (id, v) VALUES (%d, 'm'), (%d, 'm'), (%d, 'm')" % tuple(new[:3]))
        c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'm'), (%s, 'm')", (new[3], new[4]))
        assert all(where(shards, "items3", 3, k) == [1] for k in new)
        assert misplaced(shards, "items3", 3) == 0
        # statements on tables that are not sharded: default_shard (0)
        c.execute("INSERT INTO plain VALUES (1)")
        assert c.execute("SELECT current_database()").fetchone()[0] == "shard0"
    with shards.connect("shard0") as direct:
        assert direct.execute("SELECT count(*) FROM plain").fetchone()[0] == 1


# ---- cross-shard -------------------------------------------------------------

def two_keys_on_different_shards(pg, table, n):
    seen = {}
    for k in range(100):
        seen.setdefault(shard_of(pg, table, n, k), k)
        if len(seen) >= 2:
            return list(seen.values())[:2]
    raise AssertionError("no two shards")


def test_cross_shard_writes_refused_unless_a_shard_is_chosen(pgcat, shards):
    inst = start(pgcat, shards)
    a, b = two_keys_on_different_shards(shards, "items3", 3)
    writes = [
        "UPDATE items3 SET v = 'y'",                                           # no key
        "DELETE FROM items3 WHERE v = 'x'",
        "UPDATE items3 SET v = 'y' WHERE id IN (%d, %d)" % (a, b),
        "INSERT INTO items3 SELECT 5, 'x'",
        "DELETE FROM items3 WHERE id = %d OR id = %d" % (a, b),
        "UPDATE items3 SET id = %d WHERE id = %d" % (b, a),                   # moves a row's key
    ]
    with inst.connect(dbname="sh3") as c:
        for sql in writes:
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
            assert sqlstate(e.value) == "0A000", sql
            assert "cross-shard write" in str(e.value), sql
        # the same through the extended protocol, keys as parameters
        with pytest.raises(psycopg.Error) as e:
            c.execute("UPDATE items3 SET v = 'y' WHERE id IN (%s, %s)", (a, b))
        assert sqlstate(e.value) == "0A000"
        # the connection still works, and nothing was written anywhere
        assert c.execute("SELECT 1").fetchone()[0] == 1
        assert rows_per_shard(shards, "items3", 3) == [[], [], []]
        # a client that chose a shard writes there
        c.execute("SET SHARD TO '2'")
        c.execute("INSERT INTO items3 (id, v) VALUES (%d, 'x'), (%d, 'x')" % (a, b))
        c.execute("/* pgcat: shard=1 */ UPDATE items3 SET v = 'y'")
    assert rows_per_shard(shards, "items3", 3)[2] == sorted([a, b])
    # raw wire: the refused write in a pipeline of the extended protocol
    # answers ErrorResponse then ReadyForQuery, and the next query works
    r = inst.raw_login(dbname="sh3")
    r.send(pgwire.parse("UPDATE items3 SET v = 'z'") + pgwire.bind() + pgwire.execute() +
           pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [t for t, _ in msgs] == [b"E", b"Z"], msgs
    rows, err, status = r.simple("SELECT 42")
    assert rows == [["42"]] and err is None
    r.close()


def test_cross_shard_read_goes_to_the_cross_shard_path(pgcat, shards):
    """Reads with no key (or keys on several shards) read every shard
    (test_cross_shard.py checks the merge itself)."""
    inst = start(pgcat, shards)
    a, b = two_keys_on_different_shards(shards, "items3", 3)
    with inst.connect(dbname="sh3") as c:
        c.execute("INSERT INTO items3 (id, v) VALUES (%d, 'x'), (%d, 'x')" % (a, b))
        assert rows_per_shard(shards, "items3", 3) == [sorted(x) for x in (
            [k for k in (a, b) if shard_of(shards, "items3", 3, k) == i] for i in range(3))]
        assert sorted(r[0] for r in c.execute("SELECT * FROM items3").fetchall()) == sorted([a, b])
        assert sorted(r[0] for r in c.execute(
            "SELECT * FROM items3 WHERE id IN (%d, %d)" % (a, b)).fetchall()) == sorted([a, b])
        assert c.execute("SELECT count(*) FROM items3 WHERE v = 'x'").fetchone()[0] == 2
        c.execute("DELETE FROM items3 WHERE id = %d" % a)
        c.execute("DELETE FROM items3 WHERE id = %d" % b)
        # unsharded tables and SELECT 1 go to default_shard
        assert c.execute("SELECT current_database()").fetchone()[0] == "shard0"
        assert c.execute("SELECT count(*) FROM plain").fetchone()[0] == 0
        c.execute("SET SHARD TO '1'")
        assert c.execute("SELECT count(*) FROM items3").fetchone()[0] == 0


# ---- SHOW SHARDS ---------------------------------------------------------------

def test_show_shards_columns_and_counters(pgcat, shards):
    """Counters are for the whole instance: two workers, clients spread over
    them by the kernel, the figures still add up."""
    inst = start(pgcat, shards, general={"workers": 2})
    expected_key = [0, 0]
    for conn_no in range(6):
        with inst.connect(dbname="sh2") as c:
            for k in range(conn_no * 10, conn_no * 10 + 10):
                c.execute("INSERT INTO items2 (id, v) VALUES (%s, 'x')", (k,))
                expected_key[shard_of(shards, "items2", 2, k)] += 1
    with inst.connect(dbname="sh2") as c:
        c.execute("SET SHARD TO '1'")
        for _ in range(3):
            c.execute("SELECT 1")
    with inst.connect(dbname="sh2") as c:
        for _ in range(2):
            c.execute("/* pgcat: shard=0 */ SELECT 1")
        for _ in range(4):
            c.execute("SELECT 1")   # default_shard
    with inst.connect(dbname="sh2") as c:
        for _ in range(2):
            # cross-shard: each shard's part counts once, as pinned by SET SHARD
            assert c.execute("SELECT count(*) FROM items2").fetchone()[0] >= 60
    r = admin(inst)
    cols, rows = show(r, "SHARDS")
    r.close()
    assert cols[:12] == ["pool", "shard", "host", "port", "role", "banned", "ban_reason", "ban_remaining_s",
                         "cl_active", "sv_active", "sv_idle", "xact_count"]
    assert cols[12:] == ["routed_key", "routed_set", "routed_hint", "routed_default", "lag_bytes", "lag_ms"]
    mine = {int(row["shard"]): row for row in rows if row["pool"] == "sh2"}
    assert sorted(mine) == [0, 1]
    for s in (0, 1):
        assert int(mine[s]["port"]) == shards.port and mine[s]["role"] == "primary"
        assert mine[s]["banned"] == "0"
        assert int(mine[s]["routed_key"]) == expected_key[s]
    assert [int(mine[s]["routed_set"]) for s in (0, 1)] == [2, 5]
    assert [int(mine[s]["routed_hint"]) for s in (0, 1)] == [2, 0]
    assert [int(mine[s]["routed_default"]) for s in (0, 1)] == [4, 0]
    assert int(mine[0]["xact_count"]) >= expected_key[0] + 6
    assert int(mine[1]["xact_count"]) >= expected_key[1] + 3


# ---- replicas inside a shard ------------------------------------------------------

def test_shard_with_replicas_and_failover(pgcat, shards, pg_replica):
    """Shard 0 has the primary, a streaming replica and a dead replica;
    shard 1 only its primary. Keyed writes go to each shard's primary, keyed
    reads of shard 0 to its live replica (the dead one is banned, the reads
    go on), keyed reads of shard 1 to its primary."""
    from conftest import free_port
    dead = free_port()
    pool = sharded_pool(shards, SHARD_DBS[:2], "pg_bigint_hash", "items2.id", primary_reads_enabled="false")
    pool["shards"][0]["servers"] = "127.0.0.1:%d:primary, 127.0.0.1:%d:replica, 127.0.0.1:%d:replica" % (
        shards.port, pg_replica.port, dead)
    inst = start(pgcat, shards, pools={"shr": pool})
    keys = {0: [], 1: []}
    for k in range(40):
        keys[shard_of(shards, "items2", 2, k)].append(k)
    with inst.connect(dbname="shr") as c:
        for k in range(40):
            c.execute("INSERT INTO items2 (id, v) VALUES (%s, 'x')", (k,))
    assert misplaced(shards, "items2", 2) == 0
    wait_until(lambda: pg_replica.sql("SELECT count(*) FROM items2", dbname="shard0")[0][0] == len(keys[0]),
               10, msg="replica caught up")
    with inst.connect(dbname="shr") as c:
        for k in keys[0]:
            row = c.execute("SELECT pg_is_in_recovery(), current_database(), count(*) FROM items2 WHERE id = %s",
                            (k,)).fetchone()
            assert row == (True, "shard0", 1), (k, row)
        for k in keys[1]:
            row = c.execute("SELECT pg_is_in_recovery(), current_database(), count(*) FROM items2 WHERE id = %s",
                            (k,)).fetchone()
            assert row == (False, "shard1", 1), (k, row)
        # a keyed write of shard 0 goes to its primary
        assert c.execute("UPDATE items2 SET v = 'y' WHERE id = %s RETURNING pg_is_in_recovery()",
                         (keys[0][0],)).fetchone()[0] is False
    r = admin(inst)
    _, rows = show(r, "SHARDS")
    r.close()
    mine = [row for row in rows if row["pool"] == "shr"]
    assert [(int(x["shard"]), x["role"]) for x in mine] == [(0, "primary"), (0, "replica"), (0, "replica"), (1, "primary")]
    banned = {int(x["port"]): x["banned"] for x in mine}
    assert banned[dead] == "1" and banned[pg_replica.port] == "0"
    by_port = {int(x["port"]): int(x["routed_key"]) for x in mine if x["shard"] == "0"}
    assert by_port[pg_replica.port] >= len(keys[0])


# ---- transactions and pipelines -------------------------------------------------

def keys_by_shard(pg, table, n, count=4):
    out = {}
    for k in range(200):
        out.setdefault(shard_of(pg, table, n, k), [])
        if len(out[shard_of(pg, table, n, k)]) < count:
            out[shard_of(pg, table, n, k)].append(k)
    return out


def test_statements_after_the_first_must_stay_on_its_shard(pgcat, shards):
    """Once a transaction runs on a shard, a later statement whose keys are
    on another one is refused by that shard's server (the transaction fails
    as in PostgreSQL), never run on the wrong shard."""
    inst = start(pgcat, shards)
    ks = keys_by_shard(shards, "items3", 3)
    r = inst.raw_login(dbname="sh3")
    # simple protocol: the first statement routes, the second is refused
    rows, err, status = r.simple("BEGIN; INSERT INTO items3 (id, v) VALUES (%d, 'a')" % ks[1][0])
    assert err is None and status == "T"
    rows, err, status = r.simple("INSERT INTO items3 (id, v) VALUES (%d, 'b')" % ks[2][0])
    assert err["C"] == "0A000" and "cross-shard transaction" in err["M"], err
    assert status == "E"
    rows, err, status = r.simple("ROLLBACK")
    assert err is None and status == "I"
    # the same through the extended protocol (a Bind with the other key)
    rows, err, status = r.simple("BEGIN; INSERT INTO items3 (id, v) VALUES (%d, 'a')" % ks[1][0])
    assert status == "T"
    r.send(pgwire.parse("INSERT INTO items3 (id, v) VALUES ($1, 'b')") + pgwire.bind([ks[2][1]]) +
           pgwire.execute() + pgwire.sync())
    msgs = r.read_until((b"Z",))
    types = [t for t, _ in msgs]
    assert types == [b"1", b"E", b"Z"], msgs
    err = pgwire.parse_fields(msgs[1][1])
    assert err["C"] == "0A000" and "cross-shard transaction" in err["M"], err
    assert msgs[-1][1] == b"E"
    rows, err, status = r.simple("ROLLBACK")
    assert status == "I"
    # a key of the same shard is fine; so is a table that is not sharded
    rows, err, status = r.simple("BEGIN; INSERT INTO items3 (id, v) VALUES (%d, 'a')" % ks[1][0])
    r.send(pgwire.parse("INSERT INTO items3 (id, v) VALUES ($1, 'b')") + pgwire.bind([ks[1][1]]) +
           pgwire.execute() + pgwire.sync())
    assert [t for t, _ in r.read_until((b"Z",))] == [b"1", b"2", b"C", b"Z"]
    rows, err, status = r.simple("INSERT INTO plain VALUES (7)")
    assert err is None
    rows, err, status = r.simple("COMMIT")
    assert err is None and status == "I"
    r.close()
    assert where(shards, "items3", 3, ks[1][0]) == [1] and where(shards, "items3", 3, ks[1][1]) == [1]
    assert where(shards, "items3", 3, ks[2][0]) == [] and where(shards, "items3", 3, ks[2][1]) == []
    assert misplaced(shards, "items3", 3) == 0


def test_pipelined_requests_for_other_shards_are_refused(pgcat, shards):
    """Requests pipelined behind one another share the first one's server:
    one for another shard is refused rather than run there."""
    inst = start(pgcat, shards)
    ks = keys_by_shard(shards, "items3", 3)
    r = inst.raw_login(dbname="sh3")
    q = "INSERT INTO items3 (id, v) VALUES ($1, 'p')"
    r.send(pgwire.parse(q) + pgwire.bind([ks[0][0]]) + pgwire.execute() + pgwire.sync() +
           pgwire.parse(q) + pgwire.bind([ks[0][1]]) + pgwire.execute() + pgwire.sync() +
           pgwire.parse(q) + pgwire.bind([ks[2][0]]) + pgwire.execute() + pgwire.sync())
    seen = []
    for _ in range(3):
        seen.append([t for t, _ in r.read_until((b"Z",))])
    assert seen[0] == [b"1", b"2", b"C", b"Z"] and seen[1] == [b"1", b"2", b"C", b"Z"], seen
    assert seen[2] == [b"1", b"E", b"Z"], seen
    rows, err, status = r.simple("SELECT 1")
    assert rows == [["1"]]
    r.close()
    assert where(shards, "items3", 3, ks[0][0]) == [0] and where(shards, "items3", 3, ks[0][1]) == [0]
    assert where(shards, "items3", 3, ks[2][0]) == []


def test_explicit_transactions_are_routed_by_their_first_statement(pgcat, shards):
    """A BEGIN alone does not say where the transaction goes: pgcat answers
    it and opens it on the shard of the first statement."""
    inst = start(pgcat, shards)
    ks = keys_by_shard(shards, "items3", 3)
    # psycopg outside autocommit: BEGIN, then the statements, then COMMIT
    with inst.connect(dbname="sh3", autocommit=False) as c:
        for s in (2, 1):
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, 't')", (ks[s][0],))
            c.execute("UPDATE items3 SET v = 'u' WHERE id = %s", (ks[s][0],))
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, 't')", (ks[s][1],))
            assert c.execute("SELECT current_database()").fetchone()[0] == "shard%d" % s
            c.commit()
        # a statement for another shard fails the transaction; nothing of it stays
        c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'r')", (ks[0][2],))
        with pytest.raises(psycopg.Error) as e:
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'r')", (ks[1][2],))
        assert sqlstate(e.value) == "0A000"
        c.rollback()
        # a cross-shard write as the first statement: refused, transaction failed
        with pytest.raises(psycopg.Error) as e:
            c.execute("UPDATE items3 SET v = 'all'")
        assert sqlstate(e.value) == "0A000"
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT 1")
        assert sqlstate(e.value) == "25P02"
        c.rollback()
        assert c.execute("SELECT 1").fetchone()[0] == 1
        c.rollback()
    assert where(shards, "items3", 3, ks[2][0]) == [2] and where(shards, "items3", 3, ks[1][1]) == [1]
    assert where(shards, "items3", 3, ks[0][2]) == [] and where(shards, "items3", 3, ks[1][2]) == []
    assert misplaced(shards, "items3", 3) == 0
    # raw: the answers pgcat gives itself look like PostgreSQL's
    r = inst.raw_login(dbname="sh3")
    for begin, tag in (("BEGIN", "BEGIN"), ("start transaction isolation level serializable", "START TRANSACTION")):
        r.send(pgwire.query(begin))
        msgs = r.read_until((b"Z",))
        assert [(t, p) for t, p in msgs] == [(b"C", tag.encode() + b"\0"), (b"Z", b"T")], msgs
        rows, err, status = r.simple("SHOW SHARD")
        assert status == "T"
        r.send(pgwire.query("commit;"))
        assert [(t, p) for t, p in r.read_until((b"Z",))] == [(b"C", b"COMMIT\0"), (b"Z", b"I")]
    # a hint on the BEGIN routes the transaction at once
    rows, err, status = r.simple("/* pgcat: shard=2 */ BEGIN")
    rows, err, status = r.simple("SELECT current_database(), txid_current_if_assigned() IS NULL")
    assert rows == [["shard2", "t"]] and status == "T"
    assert r.simple("COMMIT")[2] == "I"
    # SET SHARD inside a held transaction chooses its shard
    assert r.simple("BEGIN")[2] == "T"
    rows, err, status = r.simple("SET SHARD TO '1'")
    assert err is None and status == "T"
    rows, err, status = r.simple("SELECT current_database()")
    assert rows == [["shard1"]] and status == "T"
    assert r.simple("ROLLBACK")[2] == "I"
    r.close()
    r = inst.raw_login(dbname="sh3")   # (a SET SHARD lasts for the session)
    # the isolation level given with the BEGIN reaches the server
    rows, err, status = r.simple("START TRANSACTION ISOLATION LEVEL SERIALIZABLE")
    rows, err, status = r.simple("SELECT current_setting('transaction_isolation'), count(*) FROM items3 "
                                 "WHERE id = %d" % ks[2][0])
    assert rows == [["serializable", "1"]] and status == "T", (rows, err)
    rows, err, status = r.simple("ROLLBACK")
    assert status == "I"
    r.close()

    async def run():
        conn = await inst.asyncpg(dbname="sh3")
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO items3 (id, v) VALUES ($1, 'async')", ks[1][3])
                await conn.execute("INSERT INTO items3 (id, v) VALUES ($1, 'async')", ks[1][2])
        finally:
            await conn.close()
    asyncio.run(run())
    assert where(shards, "items3", 3, ks[1][3]) == [1] and where(shards, "items3", 3, ks[1][2]) == [1]


def test_bad_bind_messages_in_a_sharded_pool(pgcat, shards):
    """Malformed Bind bodies and unknown statements, sent raw: refused with an
    error, pgcat keeps serving."""
    import struct
    inst = start(pgcat, shards)
    q = "INSERT INTO items3 (id, v) VALUES ($1, 'bad')"
    bad_binds = [
        # declares one parameter of 1000 bytes, has 3
        pgwire.msg(b"B", b"\0\0" + struct.pack("!HH", 0, 1) + struct.pack("!i", 1000) + b"123"),
        # a length of -2
        pgwire.msg(b"B", b"\0\0" + struct.pack("!HH", 0, 1) + struct.pack("!i", -2) + struct.pack("!H", 0)),
        # format count that fits no parameter count
        pgwire.msg(b"B", b"\0\0" + struct.pack("!HHHHH", 3, 1, 1, 1, 1) + struct.pack("!i", 1) + b"7"
                   + struct.pack("!H", 0)),
        # binary key of a length no integer has
        pgwire.msg(b"B", b"\0\0" + struct.pack("!HHH", 1, 1, 1) + struct.pack("!i", 3) + b"\1\2\3"
                   + struct.pack("!H", 0)),
        # no terminator on the names
        pgwire.msg(b"B", b"\0abc"),
    ]
    # no usable key: a cross-shard write for pgcat; unreadable names: the
    # statement is only prepared (default shard), PostgreSQL refuses the Bind
    expected = ["0A000", "0A000", "0A000", "0A000", "08P01"]
    for b, code in zip(bad_binds, expected):
        r = inst.raw_login(dbname="sh3")
        r.send(pgwire.parse(q) + b + pgwire.execute() + pgwire.sync())
        msgs = r.read_until((b"Z",))
        errs = [pgwire.parse_fields(p) for t, p in msgs if t == b"E"]
        assert errs and errs[0]["C"] == code, msgs
        rows, err, status = r.simple("SELECT 1")
        assert rows == [["1"]], (rows, err)
        r.close()
    # a Bind of a statement this client never prepared
    r = inst.raw_login(dbname="sh3")
    r.send(pgwire.bind(["5"], stmt="never_prepared") + pgwire.execute() + pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [pgwire.parse_fields(p)["C"] for t, p in msgs if t == b"E"] == ["26000"], msgs
    r.close()
    assert rows_per_shard(shards, "items3", 3) == [[], [], []]
    with inst.connect(dbname="sh3") as c:
        assert c.execute("SELECT 41 + 1").fetchone()[0] == 42


def test_large_values_are_routed_by_their_key(pgcat, shards):
    """A Bind carrying a value larger than the usual read buffer is let in
    whole and routed by its key, wherever the key sits among the values."""
    inst = start(pgcat, shards)
    big = "x" * 300_000
    with inst.connect(dbname="sh3") as c:
        for k in range(6):
            c.execute("INSERT INTO items3 (v, id) VALUES (%s, %s)", (big, k))
        for k in range(6, 9):
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, %s)", (k, big))
        assert c.execute("SELECT length(v) FROM items3 WHERE id = %s", (4,)).fetchone()[0] == len(big)
    assert sum(len(p) for p in rows_per_shard(shards, "items3", 3)) == 9
    assert misplaced(shards, "items3", 3) == 0


def test_default_shard_all(pgcat, shards):
    """default_shard = all: statements without a shard choice run on every
    shard: reads one row from each, writes (DDL, unsharded tables, UPDATE
    and DELETE without a key) on every shard with the counts summed; what
    would put rows on the wrong shard is refused."""
    pool = sharded_pool(shards, SHARD_DBS[:2], "pg_bigint_hash", "items2.id", default_shard="all")
    inst = start(pgcat, shards, pools={"shall": pool})

    def on_shards(sql):
        out = []
        for db in SHARD_DBS[:2]:
            with shards.connect(db) as d:
                out.append(d.execute(sql).fetchall())
        return out

    with inst.connect(dbname="shall") as c:
        # DDL and a table kept whole on every shard
        cur = c.execute("CREATE TABLE bcast (x int)")
        assert cur.statusmessage == "CREATE TABLE"
        try:
            cur = c.execute("INSERT INTO bcast VALUES (1), (2)")
            assert cur.statusmessage == "INSERT 0 4" and cur.rowcount == 4
            assert on_shards("SELECT x FROM bcast ORDER BY x") == [[(1,), (2,)], [(1,), (2,)]]
            cur = c.execute("UPDATE bcast SET x = x + %s WHERE x = 2", (10,))
            assert cur.statusmessage == "UPDATE 2"
            assert on_shards("SELECT x FROM bcast ORDER BY x") == [[(1,), (12,)], [(1,), (12,)]]
            # outside a transaction block where PostgreSQL wants it so
            c.execute("CREATE INDEX CONCURRENTLY bcast_x ON bcast (x)")
            assert on_shards("SELECT count(*) FROM pg_indexes WHERE indexname = 'bcast_x'") == [[(1,)], [(1,)]]
            # several statements: refused, and rolled back on every shard
            with pytest.raises(psycopg.Error) as e:
                c.execute("UPDATE bcast SET x = 0; DELETE FROM bcast")
            assert sqlstate(e.value) == "0A000" and "one statement" in str(e.value)
            assert on_shards("SELECT x FROM bcast ORDER BY x") == [[(1,), (12,)], [(1,), (12,)]]
            # one shard's error: every shard rolls back
            with shards.connect(SHARD_DBS[1]) as d:
                d.execute("ALTER TABLE bcast ADD CONSTRAINT small CHECK (x < 100)")
            with pytest.raises(psycopg.Error) as e:
                c.execute("UPDATE bcast SET x = x + 100 WHERE x = 12")
            assert sqlstate(e.value) == "23514"
            assert on_shards("SELECT x FROM bcast ORDER BY x") == [[(1,), (12,)], [(1,), (12,)]]
        finally:
            c.execute("DROP TABLE bcast")
        assert on_shards("SELECT count(*) FROM pg_tables WHERE tablename = 'bcast'") == [[(0,)], [(0,)]]
        # a sharded table: UPDATE and DELETE without a key change each shard's rows
        for k in (1, 2, 3, 4):
            c.execute("INSERT INTO items2 (id, v) VALUES (%s, 'a')", (k,))
        cur = c.execute("UPDATE items2 SET v = 'b' WHERE id <= 4")
        assert cur.statusmessage == "UPDATE 4"
        assert sorted(sum(on_shards("SELECT id, v FROM items2 WHERE id <= 4"), [])) == [(k, "b") for k in (1, 2, 3, 4)]
        refused = [
            ("UPDATE items2 SET id = id + 100", "sharding column"),
            ("INSERT INTO items2 (id, v) SELECT 9, 'x'", "INSERT"),
            ("SELECT id FROM items2 FOR UPDATE", "cross-shard"),
            # each shard would run the subquery over its own rows only
            ("DELETE FROM items2 WHERE id IN (SELECT max(id) FROM items2)", "subquery"),
            ("UPDATE items2 SET v = (SELECT min(v) FROM items2)", "subquery"),
            ("UPDATE items2 SET v = 'j' FROM items2 o WHERE o.v = items2.v", "sharding columns"),
            # a table kept on every shard must change alike on each
            ("INSERT INTO plain SELECT count(*) FROM items2", "kept on every shard"),
            ("DELETE FROM plain WHERE x IN (SELECT id FROM items2)", "kept on every shard"),
        ]
        for sql, word in refused:
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
            assert sqlstate(e.value) == "0A000" and word in str(e.value), (sql, str(e.value))
        # inside a transaction: refused
        c.execute("BEGIN")
        with pytest.raises(psycopg.Error) as e:
            c.execute("DELETE FROM items2 WHERE v = 'b'")
        assert sqlstate(e.value) == "0A000" and "inside a transaction" in str(e.value)
        c.execute("ROLLBACK")
        cur = c.execute("DELETE FROM items2 WHERE id <= 4")
        assert cur.statusmessage == "DELETE 4"
        assert on_shards("SELECT count(*) FROM items2 WHERE id <= 4") == [[(0,)], [(0,)]]
        # a read runs on every shard: one row from each
        assert c.execute("SELECT 1").fetchall() == [(1,), (1,)]
        # statements other than SELECT that touch no sharded table go to one shard
        c.execute("SET application_name = 'everywhere'")
        assert c.execute("SHOW application_name").fetchone()[0] == "everywhere"
        assert c.execute("SELECT current_setting('application_name')").fetchall() == [("everywhere",)] * 2
        # keyed statements and a chosen shard work as usual
        c.execute("INSERT INTO items2 (id, v) VALUES (%s, 'k')", (11,))
        assert where(shards, "items2", 2, 11) == [shard_of(shards, "items2", 2, 11)]
        c.execute("SET SHARD TO '1'")
        c.execute("INSERT INTO plain VALUES (2)")
        assert c.execute("SHOW SHARD").fetchone()[0] == "1"
    with shards.connect("shard1") as direct:
        assert direct.execute("SELECT count(*) FROM plain WHERE x = 2").fetchone()[0] == 1


def test_guard_without_prepared_statement_rewriting(pgcat, shards):
    """With prepared_statements off, pgcat judges the request when its Parse
    goes by, and the Bind for another shard is refused by the server (as a
    Bind of the statement pgcat_cross_shard_statement_refused)."""
    inst = start(pgcat, shards, general={"prepared_statements": "false"})
    ks = keys_by_shard(shards, "items3", 3)
    r = inst.raw_login(dbname="sh3")
    rows, err, status = r.simple("BEGIN; INSERT INTO items3 (id, v) VALUES (%d, 'a')" % ks[1][0])
    assert status == "T"
    q = "INSERT INTO items3 (id, v) VALUES ($1, 'b')"
    r.send(pgwire.parse(q) + pgwire.bind([ks[1][1]]) + pgwire.execute() + pgwire.sync())
    assert [t for t, _ in r.read_until((b"Z",))] == [b"1", b"2", b"C", b"Z"]
    r.send(pgwire.parse(q) + pgwire.bind([ks[2][0]]) + pgwire.execute() + pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [t for t, _ in msgs] == [b"1", b"E", b"Z"], msgs
    err = pgwire.parse_fields(msgs[1][1])
    assert err["C"] == "26000" and "pgcat_cross_shard_statement_refused" in err["M"], err
    rows, err, status = r.simple("ROLLBACK")
    assert status == "I"
    r.close()
    assert rows_per_shard(shards, "items3", 3) == [[], [], []]


def test_psycopg_pipeline(pgcat, shards):
    """psycopg's pipeline mode: statements of one shard go through; a
    pipeline that mixes shards is refused or checked statement by statement,
    never written to the wrong shard."""
    inst = start(pgcat, shards)
    ks = keys_by_shard(shards, "items3", 3, count=6)
    with inst.connect(dbname="sh3") as c:
        with c.pipeline():
            for k in ks[2][:5]:
                c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'pl')", (k,))
        assert all(where(shards, "items3", 3, k) == [2] for k in ks[2][:5])
        # two statements for two shards in one pipeline: refused, nothing written
        with pytest.raises(psycopg.Error) as e:
            with c.pipeline():
                c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'pl')", (ks[0][0],))
                c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'pl2')", (ks[1][0],))
        assert sqlstate(e.value) == "0A000"
        assert where(shards, "items3", 3, ks[1][0]) == []
        assert where(shards, "items3", 3, ks[0][0]) == []
        # the same statement twice (a Parse before each Bind, as executemany
        # without prepared statements): a batch, each row on its shard
        with c.pipeline():
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'pl')", (ks[0][0],))
            c.execute("INSERT INTO items3 (id, v) VALUES (%s, 'pl')", (ks[1][0],))
        assert where(shards, "items3", 3, ks[0][0]) == [0]
        assert where(shards, "items3", 3, ks[1][0]) == [1]
    assert misplaced(shards, "items3", 3) == 0


def test_unnamed_statement_answers_on_every_shard(pgcat, shards):
    """One text, an unnamed Parse each time (what psycopg, pgx and JDBC
    send), keys on every shard: its Parse goes where the router has not
    decided yet, and its Bind moves the request to the key's shard. Every
    round gets PostgreSQL's replies in order, ParseComplete first, also once
    the text is the pool's named statement (prepare_unnamed) on the servers
    involved."""
    inst = start(pgcat, shards)
    r = inst.raw_login(dbname="sh3")
    for k in range(40):
        r.send(pgwire.parse("INSERT INTO items3 (id, v) VALUES ($1, 'u')") + pgwire.bind([str(k)]) +
               pgwire.describe(b"P") + pgwire.execute() + pgwire.sync())
        got = r.read_until()
        assert [t for t, _ in got] == [b"1", b"2", b"n", b"C", b"Z"], (k, got)
    for k in range(40):
        r.send(pgwire.parse("SELECT v FROM items3 WHERE id = $1") + pgwire.bind([str(k)]) + pgwire.describe(b"P") +
               pgwire.execute() + pgwire.sync())
        got = r.read_until()
        assert [t for t, _ in got] == [b"1", b"2", b"T", b"D", b"C", b"Z"], (k, got)
    r.close()
    assert misplaced(shards, "items3", 3) == 0


@pytest.mark.parametrize("protocol", ["simple", "extended"])
def test_insert_without_column_list_in_a_transaction_is_keyed(pgcat, shards, protocol):
    """An INSERT without a column list has its key where the table's
    sharding column sits (pgcat asks shard 0 where that is). One whose rows
    are all on one shard is a keyed write like any other: as a
    transaction's first statement it takes the transaction to that shard,
    and the statements after it run there; COMMIT keeps the row there,
    ROLLBACK takes it back."""
    inst = start(pgcat, shards)
    ks = keys_by_shard(shards, "items3", 3)
    a, b = ks[1][0], ks[1][1]
    r = inst.raw_login(dbname="sh3")

    def run(sql, params=()):
        if protocol == "simple":
            for i, p in enumerate(params):
                sql = sql.replace("$%d" % (i + 1), str(p), 1)
            return r.simple(sql)
        r.send(pgwire.parse(sql) + pgwire.bind(list(params)) + pgwire.describe() + pgwire.execute() +
               pgwire.sync())
        msgs = r.read_until((b"Z",))
        err = next((pgwire.parse_fields(m) for t, m in msgs if t == b"E"), None)
        rows = [pgwire.data_row_values(m) for t, m in msgs if t == b"D"]
        return rows, err, msgs[-1][1].decode()

    rows, err, status = r.simple("BEGIN")
    assert err is None and status == "T"
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'one row')", (a,))
    assert err is None and status == "T", err
    rows, err, status = run("SELECT count(*) FROM items3 WHERE id = $1", (a,))
    assert err is None and rows == [["1"]] and status == "T", (rows, err)
    rows, err, status = run("INSERT INTO items3 (id, v) VALUES ($1, 'same shard')", (b,))
    assert err is None and status == "T", err
    rows, err, status = run("SELECT count(*) FROM items3 WHERE id IN ($1, $2)", (a, b))
    assert err is None and rows == [["2"]] and status == "T", (rows, err)
    rows, err, status = r.simple("COMMIT")
    assert err is None and status == "I", err
    assert where(shards, "items3", 3, a) == [1] and where(shards, "items3", 3, b) == [1]
    # ROLLBACK takes it back, as on one server
    c = ks[2][0]
    rows, err, status = r.simple("BEGIN")
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'gone')", (c,))
    assert err is None and status == "T", err
    rows, err, status = run("SELECT v FROM items3 WHERE id = $1", (c,))
    assert rows == [["gone"]], (rows, err)
    rows, err, status = r.simple("ROLLBACK")
    assert err is None and status == "I"
    assert where(shards, "items3", 3, c) == []
    # outside a transaction too; and several rows of one shard at once
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'autocommit')", (c,))
    assert err is None and status == "I", err
    d, e = ks[2][1], ks[2][2]
    rows, err, status = r.simple("BEGIN")
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'x'), ($2, 'y')", (d, e))
    assert err is None and status == "T", err
    rows, err, status = run("SELECT count(*) FROM items3 WHERE id = $1", (d,))
    assert rows == [["1"]] and status == "T", (rows, err)
    rows, err, status = r.simple("COMMIT")
    assert err is None and status == "I", err
    assert [where(shards, "items3", 3, k) for k in (c, d, e)] == [[2], [2], [2]]
    assert misplaced(shards, "items3", 3) == 0
    r.close()


@pytest.mark.parametrize("protocol", ["simple", "extended"])
def test_insert_without_column_list_later_in_a_transaction(pgcat, shards, protocol):
    """Once a transaction runs on a shard, an INSERT without a column list
    is judged by where its key sits: pgcat asks the transaction's own
    server where the table's sharding column is (as the transaction sees
    the table), then runs it there when its row belongs there, and refuses
    it (0A000) when it belongs elsewhere, as it does an INSERT that names
    its columns."""
    inst = start(pgcat, shards)
    ks = keys_by_shard(shards, "items3", 3)
    a, b, other = ks[1][0], ks[1][1], ks[2][0]
    r = inst.raw_login(dbname="sh3")

    def run(sql, params=()):
        if protocol == "simple":
            for i, p in enumerate(params):
                sql = sql.replace("$%d" % (i + 1), str(p), 1)
            return r.simple(sql)
        r.send(pgwire.parse(sql) + pgwire.bind(list(params)) + pgwire.execute() + pgwire.sync())
        msgs = r.read_until((b"Z",))
        err = next((pgwire.parse_fields(m) for t, m in msgs if t == b"E"), None)
        rows = [pgwire.data_row_values(m) for t, m in msgs if t == b"D"]
        return rows, err, msgs[-1][1].decode()

    rows, err, status = r.simple("BEGIN")
    rows, err, status = run("SELECT count(*) FROM items3 WHERE id = $1", (a,))
    assert err is None and rows == [["0"]] and status == "T", (rows, err)
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'later')", (a,))
    assert err is None and status == "T", err
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'again')", (b,))
    assert err is None and status == "T", err
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'elsewhere')", (other,))
    assert err is not None and err["C"] == "0A000" and status == "E", (err, status)
    rows, err, status = r.simple("ROLLBACK")
    assert err is None and status == "I"
    assert where(shards, "items3", 3, a) == [] and where(shards, "items3", 3, other) == []
    rows, err, status = r.simple("BEGIN")
    run("SELECT count(*) FROM items3 WHERE id = $1", (a,))
    rows, err, status = run("INSERT INTO items3 VALUES ($1, 'kept')", (a,))
    assert err is None and status == "T", err
    rows, err, status = run("SELECT v FROM items3 WHERE id = $1", (a,))
    assert rows == [["kept"]], (rows, err)
    rows, err, status = r.simple("COMMIT")
    assert err is None and status == "I"
    assert where(shards, "items3", 3, a) == [1] and misplaced(shards, "items3", 3) == 0
    r.close()
