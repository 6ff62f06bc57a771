# SPDX-License-Identifier: MIT
"""Cross-shard reads (SPEC §6): a read without a sharding key runs on every
shard in parallel and the shards' rows come back as one result. Every answer
is compared with the same query on an unsharded database holding all the
rows (xsingle): rows, ORDER BY + LIMIT/OFFSET, count/sum/min/max/avg with
and without GROUP BY, DISTINCT, in the
simple and extended protocols, text (psycopg) and binary (asyncpg) formats.
What pgcat cannot merge exactly is refused with 0A000, and the connection
goes on."""
import asyncio
import threading
import time

import asyncpg
import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, free_port

SHARDS = ("shard0", "shard1", "shard2")
SINGLE = "xsingle"
N_ROWS = 1000

TABLE = """CREATE TABLE xs (
    id bigint PRIMARY KEY,
    v text,
    n int,
    price numeric(12, 3),
    ts timestamptz,
    d date,
    f float8,
    u uuid
)"""

# every row, with NULLs and repeats in the ordering columns
ROWS = """SELECT g::bigint, CASE WHEN g % 17 = 0 THEN NULL ELSE 'v' || lpad((g * 7919 % 1000)::text, 4, '0') END,
                 g % 100, CASE WHEN g % 13 = 0 THEN NULL ELSE (g * 37 % 1000) / 8.0 END,
                 timestamptz '2024-01-01 00:00:00+00' + (g * 7 % 500) * interval '1 hour 1 second',
                 date '1999-12-25' + (g * 3 % 400),
                 (g % 50) * 0.5,
                 ('00000000-0000-0000-0000-' || lpad(to_hex(g * 104729 % 65536), 12, '0'))::uuid
          FROM generate_series(1, N_ROWS) g""".replace("N_ROWS", str(N_ROWS))


@pytest.fixture(scope="module")
def xdbs(pg):
    with pg.connect("postgres") as c:
        for db in ("shard2", SINGLE):
            if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
                c.execute("CREATE DATABASE %s" % db)
                with pg.connect(db) as c2:
                    c2.execute("GRANT ALL ON SCHEMA public TO PUBLIC")
    for db in SHARDS + (SINGLE,):
        with pg.connect(db) as c:
            c.execute("DROP TABLE IF EXISTS xs")
            c.execute(TABLE)
            c.execute("GRANT ALL ON xs TO PUBLIC")
            c.execute("DROP TABLE IF EXISTS xs_hp")
            c.execute("CREATE TABLE xs_hp (id bigint) PARTITION BY HASH (id)")
            c.execute("GRANT SELECT ON xs_hp TO PUBLIC")   # also a table kept on every shard
    with pg.connect(SINGLE) as c:
        c.execute("INSERT INTO xs " + ROWS)
    # each shard holds the rows PostgreSQL's hash partitioning puts there
    for i, db in enumerate(SHARDS):
        with pg.connect(db) as c:
            c.execute("INSERT INTO xs SELECT * FROM (" + ROWS + ") r(id, v, n, price, ts, d, f, u) "
                      "WHERE satisfies_hash_partition('xs_hp'::regclass::oid, 3, " + str(i) + ", id)")
    counts = []
    for db in SHARDS:
        with pg.connect(db) as c:
            counts.append(c.execute("SELECT count(*) FROM xs").fetchone()[0])
    assert sum(counts) == N_ROWS and min(counts) > 0, counts
    yield pg
    for db in SHARDS + (SINGLE,):
        with pg.connect(db) as c:
            c.execute("DROP TABLE IF EXISTS xs, xs_hp")


def start(pgcat, pg, **kw):
    general = {"prepared_statements": "true"}
    general.update(kw.pop("general", {}))
    pool = {
        "query_parser_enabled": "true",
        "sharding_function": "pg_bigint_hash",
        "sharded_tables": "xs.id",
        "default_shard": "0",
        "shards": {i: {"database": db, "servers": "127.0.0.1:%d:primary" % pg.port} for i, db in enumerate(SHARDS)},
        "users": {"app": {"password": PASSWORDS["app"], "pool_size": "4"}},
    }
    pool.update(kw.pop("pool", {}))
    return pgcat(general=general, pools={"xs3": pool}, **kw)


def sqlstate(exc):
    return getattr(exc, "sqlstate", None) or getattr(getattr(exc, "diag", None), "sqlstate", None)


# ORDER BY queries: the order itself is compared
ORDERED = [
    "SELECT id, v FROM xs ORDER BY id",
    "SELECT id, v FROM xs ORDER BY id DESC LIMIT 10",
    "SELECT id, v, n FROM xs ORDER BY v, id LIMIT 25 OFFSET 10",
    "SELECT id, v FROM xs ORDER BY v DESC NULLS LAST, id LIMIT 30",
    "SELECT id, v FROM xs ORDER BY v NULLS FIRST, id DESC LIMIT 30",
    "SELECT * FROM xs ORDER BY 4 DESC, 1 LIMIT 40",
    "SELECT id, price FROM xs ORDER BY price, id OFFSET 990",
    "SELECT id, ts FROM xs ORDER BY ts DESC, id LIMIT 50",
    "SELECT id AS key, d FROM xs ORDER BY d, key FETCH FIRST 20 ROWS ONLY",
    "SELECT id, f FROM xs ORDER BY f DESC, id LIMIT 15",
    "SELECT id, u FROM xs ORDER BY u, id LIMIT 15",
    "SELECT id, n FROM xs WHERE n BETWEEN 10 AND 12 ORDER BY n DESC, id",
    "SELECT id FROM xs ORDER BY id LIMIT 0",
    "SELECT id, v FROM xs ORDER BY v COLLATE \"C\", id LIMIT 12",
    # t.col is the table's column, not an output column of that name
    "SELECT v AS id, id AS v FROM xs ORDER BY xs.id LIMIT 10",
    "SELECT id AS k, v FROM xs ORDER BY xs.v NULLS FIRST, xs.id LIMIT 10",
    "SELECT * FROM xs ORDER BY xs.n DESC, xs.id LIMIT 10",
    "SELECT id FROM xs ORDER BY id DESC FETCH FIRST ROW ONLY",
]
# no ORDER BY: compared as sets of rows
UNORDERED = [
    "SELECT * FROM xs",
    "SELECT id, v FROM xs WHERE n < 5",
    "SELECT id FROM xs WHERE v IS NULL",
    "SELECT id FROM xs WHERE false",
]
AGGREGATES = [
    "SELECT count(*) FROM xs",
    "SELECT count(*), count(v), count(price), sum(n), min(id), max(id) FROM xs",
    "SELECT sum(price), min(price), max(price), min(v), max(v) FROM xs",
    "SELECT min(ts), max(ts), min(d), max(d) FROM xs",
    "SELECT sum(price), count(price), avg(price) FROM xs",
    "SELECT avg(n), count(n), sum(n) FROM xs WHERE n > 10",
    "SELECT sum(id), count(id), avg(id) FROM xs",
    "SELECT sum(f), count(f), avg(f), min(f), max(f) FROM xs",
    "SELECT sum(n::numeric / 3), count(n::numeric / 3), avg(n::numeric / 3) FROM xs",
    "SELECT count(*), max(id) FROM xs OFFSET 1",
    "SELECT count(*), max(id) FROM xs LIMIT 1 OFFSET 0",
    # avg() alone: the shards also return sum() and count() of its argument, hidden
    "SELECT avg(price) FROM xs",
    "SELECT count(*), sum(n), min(n), max(n), avg(n), avg(f), avg(id) FROM xs WHERE d > '2000-03-01'",
    "SELECT avg(n) AS mean, count(*) FROM xs WHERE false",
    "SELECT avg((n * 3) / 2.0), max(v) from xs",
    "SELECT count(*), sum(n), avg(n), count(n) FROM xs WHERE false",
    "SELECT count(*) FILTER (WHERE n > 50), 42 AS answer FROM xs",
    # sharded tables joined on their sharding columns: each shard joins its own rows
    "SELECT count(*), sum(a.n) FROM xs a JOIN xs b ON a.id = b.id WHERE b.n < 50",
    "SELECT count(*) FROM xs a LEFT JOIN xs b USING (id)",
    # a subquery over a table kept on every shard
    "SELECT count(*) FROM xs WHERE id NOT IN (SELECT id FROM xs_hp)",
]

# GROUP BY (groups merged across shards) and DISTINCT (applied after the merge)
GROUPED_ORDERED = [
    "SELECT n, count(*), sum(price), count(price), avg(price), min(v), max(ts) FROM xs GROUP BY n ORDER BY n",
    "SELECT n % 7 AS r, count(*) FROM xs GROUP BY r ORDER BY count(*) DESC, r LIMIT 3 OFFSET 1",
    "SELECT v IS NULL, count(*), sum(id) FROM xs GROUP BY 1 ORDER BY 1",
    "SELECT d, sum(n) FROM xs GROUP BY d ORDER BY sum(n) DESC, d LIMIT 10",
    "SELECT price, count(*) FROM xs GROUP BY price ORDER BY price NULLS FIRST LIMIT 20",
    "SELECT f, min(id), max(id) FROM xs GROUP BY f ORDER BY f DESC",
    "SELECT n % 4 AS k, avg(price), avg(f), count(*) FROM xs GROUP BY 1 ORDER BY 2 DESC NULLS LAST, 1",
    "SELECT v IS NULL AS missing, avg(id) FROM xs GROUP BY missing ORDER BY avg(id)",
    "SELECT DISTINCT n % 10 AS m FROM xs ORDER BY m",
    "SELECT DISTINCT v FROM xs ORDER BY v NULLS FIRST LIMIT 15",
    "SELECT DISTINCT f, n % 2 FROM xs ORDER BY f DESC, 2 OFFSET 3",
]
GROUPED_UNORDERED = [
    "SELECT n, count(*) FROM xs GROUP BY n",
    "SELECT DISTINCT n % 5, v IS NULL FROM xs",
    "SELECT f FROM xs GROUP BY f",
]


def direct(pg, sql, params=None):
    with pg.connect(SINGLE) as c:
        return c.execute(sql, params).fetchall()


def test_simple_protocol_results_equal_one_database(pgcat, xdbs):
    inst = start(pgcat, xdbs)
    with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                         dbname="xs3", autocommit=True) as c:
        for sql in ORDERED + AGGREGATES + GROUPED_ORDERED:
            assert c.execute(sql).fetchall() == direct(xdbs, sql), sql
        for sql in UNORDERED + GROUPED_UNORDERED:
            got = c.execute(sql).fetchall()
            assert sorted(got, key=repr) == sorted(direct(xdbs, sql), key=repr), sql
        # the command tag counts the merged rows
        cur = c.execute("SELECT id FROM xs ORDER BY id LIMIT 33")
        assert cur.statusmessage == "SELECT 33"
        cur = c.execute("SELECT id FROM xs")
        assert cur.statusmessage == "SELECT %d" % N_ROWS and cur.rowcount == N_ROWS
        # column names and types as PostgreSQL describes them
        cur = c.execute("SELECT id AS key, price, ts FROM xs ORDER BY key LIMIT 1")
        assert [d.name for d in cur.description] == ["key", "price", "ts"]


def test_extended_protocol_with_parameters(pgcat, xdbs):
    """psycopg sends parameters with Parse/Bind/Describe/Execute/Sync; the
    parameters go to every shard."""
    inst = start(pgcat, xdbs)
    queries = [
        ("SELECT id, v FROM xs WHERE n > %s ORDER BY v, id LIMIT 20", (90,)),
        ("SELECT count(*), sum(price), count(price), avg(price) FROM xs WHERE n < %s", (30,)),
        ("SELECT id FROM xs WHERE v LIKE %s ORDER BY id DESC", ("v00%",)),
        ("SELECT min(ts), max(d) FROM xs WHERE id > %s", (500,)),
        ("SELECT n, count(*), sum(price) FROM xs WHERE id > %s GROUP BY n ORDER BY n", (100,)),
        ("SELECT avg(price), avg(n) FROM xs WHERE id > %s", (100,)),
        ("SELECT DISTINCT n %% %s AS m FROM xs ORDER BY m", (6,)),
        # LIMIT and OFFSET parameters: applied after the merge
        ("SELECT id, v FROM xs ORDER BY v DESC, id LIMIT %s", (7,)),
        ("SELECT id FROM xs ORDER BY id LIMIT %s OFFSET %s", (5, 300)),
        ("SELECT id FROM xs ORDER BY id DESC OFFSET %s", (995,)),
        ("SELECT id FROM xs WHERE n = %s ORDER BY id LIMIT %s OFFSET 2", (4, 3)),
        ("SELECT id FROM xs ORDER BY id LIMIT 4 OFFSET %s", (10,)),
        ("SELECT id FROM xs ORDER BY id LIMIT %s", (None,)),
        ("SELECT count(*), max(id) FROM xs LIMIT %s OFFSET %s", (1, 1)),
    ]
    with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                         dbname="xs3", autocommit=True) as c:
        for sql, params in queries:
            assert c.execute(sql, params).fetchall() == direct(xdbs, sql, params), sql
        # psycopg's server-side prepared statements (named, after 5 runs)
        sql, params = queries[0]
        want = direct(xdbs, sql, params)
        for _ in range(8):
            assert c.execute(sql, params, prepare=True).fetchall() == want
        # binary results through psycopg
        with c.cursor(binary=True) as cur:
            for sql, params in queries:
                assert cur.execute(sql, params).fetchall() == direct(xdbs, sql, params), sql


def test_asyncpg_binary_results_and_prepared_statements(pgcat, xdbs):
    inst = start(pgcat, xdbs)

    async def run():
        conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                     password=PASSWORDS["app"], database="xs3", statement_cache_size=100)
        single = await asyncpg.connect(host="127.0.0.1", port=xdbs.port, user="postgres", database=SINGLE)
        try:
            for sql in ORDERED + AGGREGATES + GROUPED_ORDERED:
                got = [tuple(r) for r in await conn.fetch(sql)]
                want = [tuple(r) for r in await single.fetch(sql)]
                assert got == want, sql
            stmt = await conn.prepare("SELECT id, price FROM xs WHERE n = $1 ORDER BY price DESC NULLS LAST, id")
            for n in (3, 77, 3):
                got = [tuple(r) for r in await stmt.fetch(n)]
                want = [tuple(r) for r in await single.fetch(
                    "SELECT id, price FROM xs WHERE n = $1 ORDER BY price DESC NULLS LAST, id", n)]
                assert got == want
            assert await conn.fetchval("SELECT count(*) FROM xs WHERE id > $1", 100) == N_ROWS - 100
            # LIMIT/OFFSET parameters, binary int8 (a prepared statement run with new values)
            page = await conn.prepare("SELECT id FROM xs ORDER BY id DESC LIMIT $1 OFFSET $2")
            for lim, off in ((3, 0), (4, 17), (2, 999)):
                assert [r[0] for r in await page.fetch(lim, off)] == \
                    [N_ROWS - off - i for i in range(lim) if N_ROWS - off - i > 0]
            with pytest.raises(asyncpg.PostgresError) as e:
                await conn.fetch("SELECT id FROM xs ORDER BY id LIMIT $1", -1)
            assert e.value.sqlstate == "2201W"
        finally:
            await conn.close()
            await single.close()

    asyncio.run(run())


UNMERGEABLE = [
    ("SELECT n, count(*) FROM xs GROUP BY n HAVING count(*) > 5", "HAVING"),
    ("SELECT count(*) FROM xs GROUP BY n", "GROUP BY must name columns"),
    ("SELECT n, count(*) FROM xs GROUP BY ROLLUP (n)", "ROLLUP"),
    ("SELECT DISTINCT ON (n) n, id FROM xs", "DISTINCT ON"),
    ("SELECT avg(price) FILTER (WHERE n > 3) FROM xs", "avg()"),
    ("SELECT count(DISTINCT n) FROM xs", "DISTINCT"),
    ("SELECT id FROM xs ORDER BY lower(v)", "expression"),
    ("SELECT id FROM xs ORDER BY v", "not an output column"),
    ("SELECT id FROM xs UNION SELECT id FROM xs", "UNION"),
    ("SELECT id, row_number() OVER () FROM xs", "window"),
    ("SELECT string_agg(v, ',') FROM xs", "aggregate"),
    ("SELECT id FROM xs LIMIT (SELECT 3)", "LIMIT"),
    ("SELECT id FROM xs ORDER BY id OFFSET 2 FETCH FIRST ROW ONLY", "FETCH FIRST 1 ROW"),
    ("SELECT v AS id FROM xs ORDER BY xs.id", "qualified column"),
    ("EXPLAIN SELECT * FROM xs ORDER BY id", "SET SHARD"),
    ("COPY (SELECT id FROM xs) TO STDOUT", "COPY"),
    ("SELECT 1 FROM xs; SELECT 2 FROM xs", "several statements"),
    # each shard would see only its own rows of the inner xs: refused, not
    # answered with one shard's average, maximum or first five rows
    ("SELECT count(*) FROM xs WHERE n > (SELECT avg(n) FROM xs)", "subquery"),
    ("SELECT id, (SELECT max(id) FROM xs) FROM xs", "subquery"),
    ("WITH t AS (SELECT id FROM xs ORDER BY id LIMIT 5) SELECT id FROM t", "CTE"),
    ("SELECT * FROM (SELECT id FROM xs ORDER BY id LIMIT 5) s", "derived table"),
    ("SELECT count(*) FROM xs a WHERE EXISTS (SELECT 1 FROM xs b WHERE b.id = a.id + 1)", "subquery"),
    ("SELECT count(*) FROM xs a JOIN xs b ON a.n = b.n", "sharding columns"),
    ("SELECT count(*) FROM xs a, xs b WHERE a.id = b.id + 1", "sharding columns"),
]


def test_unmergeable_queries_are_refused_and_the_session_goes_on(pgcat, xdbs):
    inst = start(pgcat, xdbs)
    with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                         dbname="xs3", autocommit=True) as c:
        for sql, word in UNMERGEABLE:
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
            assert sqlstate(e.value) == "0A000", sql
            assert "cross-shard read" in str(e.value) and word in str(e.value), (sql, str(e.value))
            assert c.execute("SELECT count(*) FROM xs").fetchone()[0] == N_ROWS
        # a shard's own error comes back as PostgreSQL wrote it
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT id / (n - n) FROM xs")
        assert sqlstate(e.value) == "22012"
        assert c.execute("SELECT max(id) FROM xs").fetchone()[0] == N_ROWS
        # a shard chosen by the client is not a cross-shard read
        c.execute("SET SHARD TO '1'")
        with xdbs.connect("shard1") as s1:
            assert c.execute("SELECT count(*) FROM xs").fetchone()[0] == \
                s1.execute("SELECT count(*) FROM xs").fetchone()[0]


def test_raw_wire_reply_shape(pgcat, xdbs):
    """Exactly what a driver expects: ParseComplete, ParameterDescription,
    RowDescription for Describe S; BindComplete; RowDescription for
    Describe P; the rows; CommandComplete; ReadyForQuery."""
    inst = start(pgcat, xdbs)
    r = inst.raw_login(dbname="xs3")
    r.send(pgwire.parse("SELECT id FROM xs WHERE n = $1 ORDER BY id", name="s1") +
           pgwire.describe(b"S", "s1") + pgwire.bind(params=(7,), stmt="s1") + pgwire.describe() +
           pgwire.execute() + pgwire.sync())
    msgs = r.read_until((b"Z",))
    types = [t for t, _ in msgs]
    want_rows = [[str(x[0])] for x in direct(xdbs, "SELECT id FROM xs WHERE n = 7 ORDER BY id")]
    assert types == [b"1", b"t", b"T", b"2", b"T"] + [b"D"] * len(want_rows) + [b"C", b"Z"], types
    assert [pgwire.data_row_values(p) for t, p in msgs if t == b"D"] == want_rows
    assert msgs[-2][1].rstrip(b"\0") == b"SELECT %d" % len(want_rows)
    # the named statement lives on: a Bind alone runs it again
    r.send(pgwire.bind(params=(8,), stmt="s1") + pgwire.execute() + pgwire.sync())
    msgs = r.read_until((b"Z",))
    want_rows = [[str(x[0])] for x in direct(xdbs, "SELECT id FROM xs WHERE n = 8 ORDER BY id")]
    assert [pgwire.data_row_values(p) for t, p in msgs if t == b"D"] == want_rows
    # inside a transaction pgcat holds open, the status stays 'T'
    rows, err, status = r.simple("BEGIN")
    r.send(pgwire.query("SELECT count(*) FROM xs"))
    msgs = r.read_until((b"Z",))
    assert [pgwire.data_row_values(p) for t, p in msgs if t == b"D"] == [[str(N_ROWS)]]
    assert msgs[-1][1] == b"T"
    rows, err, status = r.simple("COMMIT")
    assert err is None
    rows, err, status = r.simple("SELECT 42")
    assert rows == [["42"]]
    r.close()


def wait_no_query_running(pg, marker, timeout):
    """No backend still runs a query containing marker (the servers of a
    cancelled, abandoned or failed cross-shard read are not left busy)."""
    with pg.connect("postgres") as pc:
        deadline = time.monotonic() + timeout
        while pc.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND state = 'active' "
                         "AND pid <> pg_backend_pid()", ("%" + marker + "%",)).fetchone()[0]:
            assert time.monotonic() < deadline, "still running: " + marker
            time.sleep(0.1)


def test_cancel_reaches_every_shard(pgcat, xdbs):
    inst = start(pgcat, xdbs)
    c = psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                        dbname="xs3", autocommit=True)
    try:
        timer = threading.Timer(0.5, c.cancel)
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("SELECT id, pg_sleep(0.05) FROM xs")
        assert time.monotonic() - t0 < 10
        assert c.execute("SELECT count(*) FROM xs").fetchone()[0] == N_ROWS
    finally:
        c.close()
    # no server stays busy with the cancelled query
    wait_no_query_running(xdbs, "pg_sleep(0.05)", 10)


def test_a_leg_waiting_for_its_shard_is_cancelled_or_times_out(pgcat, xdbs):
    """A shard whose only server is busy: the cross-shard read's part for it
    waits in that pool's queue like a client. A cancel then answers the
    read at once (57014, nothing ran there); query_wait_timeout fails it;
    either way the session goes on, and the read runs once the server is
    free."""
    inst = start(pgcat, xdbs, pool={"users": {"app": {"password": PASSWORDS["app"], "pool_size": "1"}}},
                 general={"query_wait_timeout": "1500"})
    holder = psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                             dbname="xs3")
    c = psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                        dbname="xs3", autocommit=True)
    try:
        # the holder's transaction keeps shard 0's only server (default_shard)
        holder.execute("SELECT 1")
        timer = threading.Timer(0.4, c.cancel)
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("SELECT count(*) FROM xs")
        assert time.monotonic() - t0 < 1.4   # before query_wait_timeout
        timer.join()
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT count(*) FROM xs")
        assert sqlstate(e.value) == "08P01" and "query_wait_timeout" in str(e.value), str(e.value)
        holder.rollback()
        assert c.execute("SELECT count(*) FROM xs").fetchone()[0] == N_ROWS
    finally:
        holder.close()
        c.close()


def test_a_clients_unnamed_statement_survives_a_fanout_on_its_server(pgcat, xdbs):
    """A client's unnamed statement, parsed in one request and bound in a
    later one, runs as the client parsed it even if a cross-shard read used
    that server meanwhile (its legs parse their own unnamed statements
    there): pgcat parses the client's again."""
    inst = start(pgcat, xdbs, pool={"users": {"app": {"password": PASSWORDS["app"], "pool_size": "1"}}})
    r = inst.raw_login(dbname="xs3")
    try:
        r.send(pgwire.parse("SELECT 'mine'::text AS a") + pgwire.sync())
        assert [t for t, _ in r.read_until()] == [b"1", b"Z"]
        with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                             dbname="xs3", autocommit=True) as c:
            # extended protocol (a parameter): each shard's part is an unnamed Parse
            assert c.execute("SELECT count(*) FROM xs WHERE n >= %s", (0,)).fetchone()[0] == N_ROWS
        r.send(pgwire.bind() + pgwire.execute() + pgwire.sync())
        msgs = r.read_until()
        assert [t for t, _ in msgs][-1:] == [b"Z"] and b"E" not in [t for t, _ in msgs], msgs
        rows = [pgwire.data_row_values(p) for t, p in msgs if t == b"D"]
        assert rows == [["mine"]], msgs
    finally:
        r.close()


def test_an_unreachable_shard_fails_the_read_and_the_session_goes_on(pgcat, xdbs):
    """A shard whose server cannot be reached: the cross-shard read fails
    with the connection error instead of hanging, and requests for the other
    shards still run."""
    shards = {i: {"database": db, "servers": "127.0.0.1:%d:primary" % xdbs.port} for i, db in enumerate(SHARDS)}
    shards[2]["servers"] = "127.0.0.1:%d:primary" % free_port()
    inst = start(pgcat, xdbs, pool={"shards": shards}, general={"connect_timeout": "1000"})
    with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                         dbname="xs3", autocommit=True) as c:
        for _ in range(2):
            t0 = time.monotonic()
            with pytest.raises(psycopg.Error) as e:
                c.execute("SELECT count(*) FROM xs")
            assert time.monotonic() - t0 < 10
            assert (sqlstate(e.value) or "").startswith("08"), (sqlstate(e.value), str(e.value))
            with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                                 dbname="xs3", autocommit=True) as c1, xdbs.connect("shard1") as s1:
                c1.execute("SET SHARD TO '1'")
                assert c1.execute("SELECT count(*) FROM xs").fetchone()[0] == \
                    s1.execute("SELECT count(*) FROM xs").fetchone()[0]


def test_a_shard_backend_killed_mid_read_fails_the_read_only(pgcat, xdbs):
    """A shard's backend terminated while the cross-shard read runs there:
    the read fails with an error (not a hang, not a closed connection),
    the other shards' servers are not left busy, and the session reads
    across shards again at once."""
    inst = start(pgcat, xdbs)
    c = psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                        dbname="xs3", autocommit=True)
    try:
        def kill_one():
            with xdbs.connect("postgres") as pc:
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    row = pc.execute("SELECT pid FROM pg_stat_activity WHERE datname = 'shard1' "
                                     "AND query LIKE '%pg_sleep(0.004)%' AND state = 'active' "
                                     "AND pid <> pg_backend_pid()").fetchone()
                    if row:
                        pc.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                        return
                    time.sleep(0.05)
        killer = threading.Thread(target=kill_one)
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT id, pg_sleep(0.004) FROM xs")
        killer.join()
        assert time.monotonic() - t0 < 10
        assert not c.closed and sqlstate(e.value) is not None, str(e.value)
        assert c.execute("SELECT count(*) FROM xs").fetchone()[0] == N_ROWS
    finally:
        c.close()
    wait_no_query_running(xdbs, "pg_sleep(0.004)", 10)


def test_client_gone_mid_fanout_and_many_clients(pgcat, xdbs):
    """A client that vanishes while every shard works leaves no server
    behind; many clients reading across shards at once all get the whole
    answer (pool_size 4 per shard: legs queue like any client)."""
    inst = start(pgcat, xdbs)
    r = inst.raw_login(dbname="xs3")
    r.send(pgwire.query("SELECT id, pg_sleep(0.01) FROM xs"))
    time.sleep(0.3)
    r.close()
    want = direct(xdbs, "SELECT count(*), sum(n) FROM xs")

    async def many():
        async def one():
            conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                         password=PASSWORDS["app"], database="xs3")
            try:
                for _ in range(5):
                    row = await conn.fetchrow("SELECT count(*), sum(n) FROM xs")
                    assert tuple(row) == tuple(want[0])
                    rows = await conn.fetch("SELECT id FROM xs ORDER BY id LIMIT 3 OFFSET 100")
                    assert [x[0] for x in rows] == [101, 102, 103]
            finally:
                await conn.close()
        await asyncio.gather(*(one() for _ in range(20)))

    asyncio.run(many())
    wait_no_query_running(xdbs, "pg_sleep(0.01)", 15)


# ---- multi-row INSERT split by shard -------------------------------------------

def on_shards(pg, sql):
    out = []
    for db in SHARDS:
        with pg.connect(db) as c:
            out.append(c.execute(sql).fetchall())
    return out


def test_multi_row_insert_is_split_by_shard(pgcat, xdbs):
    """Each row lands on the shard PostgreSQL's hash partitioning gives it;
    quoting that hides parentheses and commas is understood; RETURNING
    gives every row; a failure on one shard leaves no row anywhere."""
    inst = start(pgcat, xdbs)
    ids = list(range(5001, 5101))
    values = ", ".join("(%d, %s, %d)" % (k, ["'a''(b), c'", "$$x),($$", "E'c\\')'", "'/* ( */'"][k % 4], k % 7)
                       for k in ids)
    sql = "INSERT INTO xs (id, v, n) VALUES %s RETURNING id" % values
    with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                         dbname="xs3", autocommit=True) as c:
        cur = c.execute(sql)
        assert cur.statusmessage == "INSERT 0 %d" % len(ids)
        assert sorted(r[0] for r in cur.fetchall()) == ids
        # placement, and the values as PostgreSQL read them
        misplaced = 0
        for i, db in enumerate(SHARDS):
            with xdbs.connect(db) as d:
                misplaced += d.execute(
                    "SELECT count(*) FROM xs WHERE id > 5000 AND NOT "
                    "satisfies_hash_partition('xs_hp'::regclass::oid, 3, %d, id)" % i).fetchone()[0]
        assert misplaced == 0
        got = c.execute("SELECT id, v, n FROM xs WHERE id > 5000 ORDER BY id").fetchall()
        with xdbs.connect(SINGLE) as d:
            d.execute("CREATE TEMP TABLE t (id bigint, v text, n int)")
            d.execute("INSERT INTO t (id, v, n) VALUES %s" % values)
            assert got == d.execute("SELECT * FROM t ORDER BY id").fetchall()
        # a duplicate key on one shard: the other shards keep nothing either
        with pytest.raises(psycopg.errors.UniqueViolation):
            c.execute("INSERT INTO xs (id, v) VALUES (5001, 'dup'), (6001, 'new'), (6002, 'new'), (6003, 'new')")
        assert c.execute("SELECT count(*) FROM xs WHERE id > 6000").fetchone()[0] == 0
        # no column list: split by the table's own column order
        assert c.execute("INSERT INTO xs VALUES (5501), (5502), (5503)").statusmessage == "INSERT 0 3"
        assert c.execute("SELECT count(*) FROM xs WHERE id BETWEEN 5501 AND 5503").fetchone()[0] == 3
        # inside a transaction: split, and rolled back with it
        with c.transaction():
            assert c.execute("INSERT INTO xs (id) VALUES (7001), (7002), (7003)").statusmessage == "INSERT 0 3"
            raise psycopg.Rollback()
        assert c.execute("SELECT count(*) FROM xs WHERE id > 7000").fetchone()[0] == 0
    for db in SHARDS:
        with xdbs.connect(db) as d:
            d.execute("DELETE FROM xs WHERE id > 5000")


# ---- COPY FROM STDIN split by shard --------------------------------------------

def copy_conn(inst):
    return psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                           dbname="xs3", autocommit=True)


def clear_copied(pg, above):
    for db in SHARDS:
        with pg.connect(db) as d:
            d.execute("DELETE FROM xs WHERE id > %d" % above)


def placement_errors(pg, above):
    bad = 0
    for i, db in enumerate(SHARDS):
        with pg.connect(db) as d:
            bad += d.execute("SELECT count(*) FROM xs WHERE id > %d AND NOT "
                             "satisfies_hash_partition('xs_hp'::regclass::oid, 3, %d, id)" % (above, i)).fetchone()[0]
    return bad


def test_copy_100k_rows_text_format(pgcat, xdbs):
    """100,000 rows in psycopg's chunks (rows cut anywhere): each lands on
    its shard, values as PostgreSQL reads them, COPY n with the total."""
    inst = start(pgcat, xdbs)
    base = 100000
    n = 100000
    try:
        with copy_conn(inst) as c, c.cursor() as cur:
            with cur.copy("COPY xs (id, v, n) FROM STDIN") as cp:
                for k in range(base + 1, base + n + 1):
                    cp.write_row((k, "row\t%d\\\n" % k if k % 1000 == 0 else "r%d" % k, k % 11))
            assert cur.statusmessage == "COPY %d" % n
            assert c.execute("SELECT count(*), sum(n), count(n) FROM xs WHERE id > %s", (base,)).fetchone() == \
                (n, sum(k % 11 for k in range(base + 1, base + n + 1)), n)
            assert c.execute("SELECT v FROM xs WHERE id = %s", (base + 5000,)).fetchone()[0] == \
                "row\t%d\\\n" % (base + 5000)
        assert placement_errors(xdbs, base) == 0
    finally:
        clear_copied(xdbs, base)


def test_copy_csv_header_options_and_no_column_list(pgcat, xdbs):
    inst = start(pgcat, xdbs)
    base = 300000
    try:
        with copy_conn(inst) as c, c.cursor() as cur:
            # no column list: pgcat asks where the key column is
            with cur.copy("COPY xs FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'nil')") as cp:
                cp.write(b"id;v;n;price;ts;d;f;u\n")
                for k in range(base + 1, base + 301):
                    cp.write(('"%d";"multi\nline; ""q"" %d";%d;nil;nil;nil;nil;nil\n' % (k, k, k % 5)).encode())
            assert cur.statusmessage == "COPY 300"
            got = c.execute("SELECT id, v, price FROM xs WHERE id > %s ORDER BY id LIMIT 2", (base,)).fetchall()
            assert got == [(base + 1, 'multi\nline; "q" %d' % (base + 1), None),
                           (base + 2, 'multi\nline; "q" %d' % (base + 2), None)]
            # the legacy syntax, the end marker, and a last line without newline
            with cur.copy("COPY xs (v, id) FROM STDIN CSV") as cp:
                cp.write(b"a,%d\nb,%d" % (base + 401, base + 402))
            assert cur.statusmessage == "COPY 2"
        assert placement_errors(xdbs, base) == 0
    finally:
        clear_copied(xdbs, base)


def test_copy_errors_leave_no_rows_anywhere(pgcat, xdbs):
    inst = start(pgcat, xdbs)
    base = 400000
    try:
        with copy_conn(inst) as c, c.cursor() as cur:
            # a NULL key
            with pytest.raises(psycopg.Error) as e:
                with cur.copy("COPY xs (id, v) FROM STDIN") as cp:
                    for k in range(base + 1, base + 50):
                        cp.write_row((k, "x"))
                    cp.write_row((None, "x"))
            assert "sharding key is NULL" in str(e.value)
            # a row one shard refuses (duplicate key): every shard rolls back
            c.execute("INSERT INTO xs (id, v) VALUES (%s, 'there')", (base + 7,))
            with pytest.raises(psycopg.errors.UniqueViolation):
                with cur.copy("COPY xs (id, v) FROM STDIN") as cp:
                    for k in range(base + 1, base + 100):
                        cp.write_row((k, "x"))
            assert c.execute("SELECT count(*) FROM xs WHERE id > %s", (base,)).fetchone()[0] == 1
            # the client gives up: CopyFail
            with pytest.raises(RuntimeError):
                with cur.copy("COPY xs (id, v) FROM STDIN") as cp:
                    cp.write_row((base + 200, "x"))
                    raise RuntimeError("client changed its mind")
            assert c.execute("SELECT count(*) FROM xs WHERE id > %s", (base,)).fetchone()[0] == 1
            # binary COPY with a NULL key
            with pytest.raises(psycopg.Error) as e:
                with cur.copy("COPY xs (id, v) FROM STDIN WITH (FORMAT binary)") as cp:
                    cp.set_types(["int8", "text"])
                    cp.write_row((base + 300, "x"))
                    cp.write_row((None, "x"))
            assert "sharding key is NULL" in str(e.value)
            # the session goes on
            assert c.execute("SELECT count(*) FROM xs WHERE id > %s", (base,)).fetchone()[0] == 1
        # a client killed in the middle of its COPY: nothing stays, no server stuck
        r = inst.raw_login(dbname="xs3")
        r.send(pgwire.query("COPY xs (id, v) FROM STDIN"))
        assert r.read_msg()[0] == b"G"
        r.send(pgwire.msg(b"d", b"".join(b"%d\tx\n" % k for k in range(base + 500, base + 600))))
        time.sleep(0.3)
        r.close()
        with copy_conn(inst) as c:
            deadline = time.monotonic() + 10
            while c.execute("SELECT count(*) FROM xs WHERE id >= %s", (base + 500,)).fetchone()[0] != 0:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert c.execute("SELECT count(*) FROM xs").fetchone()[0] == N_ROWS + 1
    finally:
        clear_copied(xdbs, base)


def test_multi_row_insert_with_parameters(pgcat, xdbs):
    """The extended protocol: each shard gets its rows with only the
    parameters they use, renumbered (text and binary values, a parameter
    outside the rows going to every shard); psycopg and asyncpg."""
    inst = start(pgcat, xdbs)
    try:
        with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                             dbname="xs3", autocommit=True) as c:
            ids = list(range(8001, 8031))
            sql = "INSERT INTO xs (id, v, n) VALUES " + ", ".join(["(%s, %s, %s)"] * len(ids)) + " RETURNING id, v"
            params = []
            for k in ids:
                params += [k, "p%d" % k, k % 3]
            cur = c.execute(sql, params)
            assert cur.statusmessage == "INSERT 0 %d" % len(ids)
            assert sorted(cur.fetchall()) == [(k, "p%d" % k) for k in ids]
            # binary parameters, one parameter shared by every row
            with c.cursor(binary=True) as bc:
                bc.execute("INSERT INTO xs (id, v) VALUES (%s, %s), (%s, %s), (%s, %s)",
                           (8101, "same", 8102, "same", 8103, "same"))
                assert bc.statusmessage == "INSERT 0 3"
            assert c.execute("SELECT count(*) FROM xs WHERE id BETWEEN 8101 AND 8103 AND v = 'same'").fetchone()[0] == 3
        assert placement_errors(xdbs, 8000) == 0

        async def run():
            conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                         password=PASSWORDS["app"], database="xs3")
            try:
                stmt = await conn.prepare("INSERT INTO xs (id, v) VALUES ($1, $3), ($2, $3)")
                for a in (8201, 8211, 8221):
                    await stmt.fetch(a, a + 1, "async")
                return await conn.fetchval("SELECT count(*) FROM xs WHERE v = 'async'")
            finally:
                await conn.close()

        assert asyncio.run(run()) == 6
        assert placement_errors(xdbs, 8000) == 0
    finally:
        clear_copied(xdbs, 8000)


def test_psycopg_pipeline_then_more_reads(pgcat, xdbs):
    """psycopg's pipeline ends with Sync then Flush: the lone Flush must not
    take a server of default_shard, which made the next cross-shard read
    count as pipelined behind it (refused as cross-shard inside a
    pipeline). Also after a pipeline pgcat refuses as a whole."""
    inst = start(pgcat, xdbs)
    with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                         dbname="xs3", autocommit=True) as c:
        with c.pipeline():
            cur = c.execute("SELECT count(*) FROM xs")
        assert cur.fetchone()[0] == N_ROWS
        assert c.execute("SELECT max(id) FROM xs").fetchone()[0] == N_ROWS
        with pytest.raises(psycopg.Error) as e:
            with c.pipeline():
                c.execute("SELECT count(*) FROM xs")
                c.execute("SELECT max(id) FROM xs")
        assert sqlstate(e.value) == "0A000"
        assert c.execute("SELECT count(*) FROM xs").fetchone()[0] == N_ROWS
        with c.pipeline():
            cur = c.execute("SELECT v FROM xs WHERE id = %s", (5,))
        assert cur.fetchone()[0] == direct(xdbs, "SELECT v FROM xs WHERE id = 5")[0][0]
        assert c.execute("SELECT min(id) FROM xs").fetchone()[0] == 1


def test_copy_binary_format_psycopg_and_asyncpg(pgcat, xdbs):
    """Binary COPY is split too: psycopg's binary copy and asyncpg's
    copy_records_to_table (which prepares a SELECT of the table first, and
    sends its rows without waiting for CopyInResponse)."""
    inst = start(pgcat, xdbs)
    base = 500000
    try:
        with copy_conn(inst) as c, c.cursor() as cur:
            with cur.copy("COPY xs (id, v, n) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["int8", "text", "int4"])
                for k in range(base + 1, base + 3001):
                    cp.write_row((k, "b%d" % k if k % 7 else None, k % 13))
            assert cur.statusmessage == "COPY 3000"
            assert c.execute("SELECT count(*), count(v), sum(n) FROM xs WHERE id > %s", (base,)).fetchone() == \
                (3000, 3000 - len([k for k in range(base + 1, base + 3001) if k % 7 == 0]),
                 sum(k % 13 for k in range(base + 1, base + 3001)))
            # no column list: the key's position is asked of shard 0
            with cur.copy("COPY xs FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["int8", "text", "int4", "numeric", "timestamptz", "date", "float8", "uuid"])
                cp.write_row((base + 5001, "whole", 1, None, None, None, 2.5, None))
            assert c.execute("SELECT v, f FROM xs WHERE id = %s", (base + 5001,)).fetchone() == ("whole", 2.5)

        async def run():
            conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                         password=PASSWORDS["app"], database="xs3")
            try:
                res = await conn.copy_records_to_table(
                    "xs", records=[(base + 6000 + i, "rec%d" % i) for i in range(1, 201)], columns=["id", "v"])
                assert res == "COPY 200"
                return await conn.fetchval("SELECT count(*) FROM xs WHERE v LIKE 'rec%'")
            finally:
                await conn.close()

        assert asyncio.run(run()) == 200
        assert placement_errors(xdbs, base) == 0
    finally:
        clear_copied(xdbs, base)


def test_jdbc_style_begin_close_and_fetch_size(pgcat, xdbs):
    """pgjdbc with autocommit off: BEGIN as Parse/Bind/Execute in the same
    request as the first statement (held by pgcat like a BEGIN sent alone,
    so the statement may still fan out or go to its key's shard); Close of
    a statement without Sync before the next request; a fetch size reads a
    named portal in parts (Execute with a row limit, PortalSuspended, more
    Executes later in the transaction)."""
    inst = start(pgcat, xdbs)
    r = inst.raw_login(dbname="xs3")

    def stmt(sql, name="", portal="", params=(), describe=True, max_rows=0):
        return (pgwire.parse(sql, name=name) + pgwire.bind(params=params, portal=portal, stmt=name) +
                (pgwire.describe(b"P", portal) if describe else b"") + pgwire.execute(portal, max_rows))

    def begin(name=""):
        return pgwire.parse("BEGIN", name=name) + pgwire.bind(stmt=name) + pgwire.execute()

    # an unnamed BEGIN, then a cross-shard read
    r.send(begin() + stmt("SELECT count(*) FROM xs") + pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [t for t, _ in msgs] == [b"1", b"2", b"C", b"1", b"2", b"T", b"D", b"C", b"Z"], msgs
    assert msgs[2][1].rstrip(b"\0") == b"BEGIN" and msgs[-1][1] == b"T"
    assert pgwire.data_row_values(msgs[6][1]) == [str(N_ROWS)]
    r.send(pgwire.parse("COMMIT") + pgwire.bind() + pgwire.execute() + pgwire.sync())
    assert r.read_until((b"Z",))[-1][1] == b"I"
    # a named BEGIN, then a keyed read: on the key's shard, in a transaction there
    r.send(begin("S_5") + stmt("SELECT v FROM xs WHERE id = $1", params=(5,)) + pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [pgwire.data_row_values(p) for t, p in msgs if t == b"D"] == \
        [[direct(xdbs, "SELECT v FROM xs WHERE id = 5")[0][0]]]
    assert msgs[-1][1] == b"T"
    r.send(pgwire.parse("ROLLBACK") + pgwire.bind() + pgwire.execute() + pgwire.sync())
    assert r.read_until((b"Z",))[-1][1] == b"I"
    # the BEGIN prepared before: a Bind of S_5 alone, then a cross-shard read in parts
    want = [str(x[0]) for x in direct(xdbs, "SELECT id FROM xs ORDER BY id")]
    r.send(pgwire.bind(stmt="S_5") + pgwire.execute() +
           stmt("SELECT id FROM xs ORDER BY id", portal="C_1", max_rows=300) + pgwire.sync())
    msgs = r.read_until((b"Z",))
    types = [t for t, _ in msgs]
    assert types[:6] == [b"2", b"C", b"1", b"2", b"T", b"D"] and types[-2:] == [b"s", b"Z"], types
    got = [pgwire.data_row_values(p)[0] for t, p in msgs if t == b"D"]
    assert len(got) == 300
    while True:
        r.send(pgwire.execute("C_1", 300) + pgwire.sync())
        msgs = r.read_until((b"Z",))
        got += [pgwire.data_row_values(p)[0] for t, p in msgs if t == b"D"]
        assert msgs[-1][1] == b"T"
        if msgs[-2][0] == b"C":
            break
        assert msgs[-2][0] == b"s"
    assert got == want
    r.send(pgwire.msg(b"C", b"PC_1\0") + pgwire.sync())
    assert [t for t, _ in r.read_until((b"Z",))] == [b"3", b"Z"]
    r.send(pgwire.parse("COMMIT") + pgwire.bind() + pgwire.execute() + pgwire.sync())
    assert r.read_until((b"Z",))[-1][1] == b"I"
    # a Close of a statement before the next request (no Sync between)
    r.send(pgwire.parse("SELECT 1", name="S_9") + pgwire.sync())
    r.read_until((b"Z",))
    r.send(pgwire.msg(b"C", b"SS_9\0") + stmt("SELECT max(id) FROM xs") + pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [t for t, _ in msgs] == [b"3", b"1", b"2", b"T", b"D", b"C", b"Z"], msgs
    assert pgwire.data_row_values(msgs[4][1]) == [str(N_ROWS)]
    r.close()


def test_asyncpg_cursor_across_shards(pgcat, xdbs):
    inst = start(pgcat, xdbs)
    want = direct(xdbs, "SELECT id, v FROM xs WHERE n < 50 ORDER BY v NULLS LAST, id")

    async def run():
        conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                     password=PASSWORDS["app"], database="xs3")
        try:
            async with conn.transaction():
                got = [tuple(rec) async for rec in conn.cursor(
                    "SELECT id, v FROM xs WHERE n < $1 ORDER BY v NULLS LAST, id", 50, prefetch=64)]
                # the same transaction goes on: a keyed read on its shard
                one = await conn.fetchval("SELECT v FROM xs WHERE id = $1", 5)
            # a cursor bound alone (Bind, Sync) would be read on one shard: refused
            async with conn.transaction():
                with pytest.raises(asyncpg.FeatureNotSupportedError) as e:
                    await conn.cursor("SELECT id FROM xs ORDER BY id")
                assert "without Execute" in str(e.value)
            return got, one
        finally:
            await conn.close()

    got, one = asyncio.run(run())
    assert got == [tuple(x) for x in want]
    assert one == direct(xdbs, "SELECT v FROM xs WHERE id = 5")[0][0]


def test_asyncpg_small_batch_whose_first_key_is_on_the_default_shard(pgcat, xdbs):
    """asyncpg's executemany prepares (Parse, Describe, Flush) and then
    sends its Binds and one Sync. When the first row's key is on the shard
    the prepare went to (default_shard), the batch is still split by shard
    as a whole, for two rows as for many: every row on its shard, and a
    failing row leaves none of the batch anywhere."""
    inst = start(pgcat, xdbs)
    base = 650000
    # ids above base: the first few of shard 0, shard 1 and shard 2
    on = {i: [r[0] for r in direct(xdbs, "SELECT g FROM generate_series(%d, %d) g WHERE "
                                         "satisfies_hash_partition('xs_hp'::regclass::oid, 3, %d, g::bigint) "
                                         "ORDER BY g LIMIT 6" % (base + 1, base + 200, i))]
          for i in range(3)}
    batches = [
        [on[0][0], on[1][0]],
        [on[0][1], on[2][0], on[1][1]],
        [on[0][2], on[0][3], on[1][2], on[2][1], on[2][2], on[1][3]],
    ]

    async def run():
        conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                     password=PASSWORDS["app"], database="xs3")
        try:
            for b in batches:
                await conn.executemany("INSERT INTO xs (id, v) VALUES ($1, $2)", [(k, "small") for k in b])
            # the second row is already there (shard 1): nothing of this batch stays
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.executemany("INSERT INTO xs (id, v) VALUES ($1, $2)",
                                       [(on[0][4], "smalldup"), (on[1][0], "smalldup"), (on[2][3], "smalldup")])
            return await conn.fetchval("SELECT count(*) FROM xs WHERE v = 'small'")
        finally:
            await conn.close()

    try:
        assert asyncio.run(run()) == sum(len(b) for b in batches)
        assert placement_errors(xdbs, base) == 0
        per_shard = []
        for db in SHARDS:
            with xdbs.connect(db) as d:
                per_shard.append(d.execute("SELECT count(*) FILTER (WHERE v = 'small'), "
                                           "count(*) FILTER (WHERE v = 'smalldup') FROM xs").fetchone())
        assert per_shard == [(4, 0), (4, 0), (3, 0)]
    finally:
        clear_copied(xdbs, base)


def test_executemany_batches_split_by_shard(pgcat, xdbs):
    """psycopg's and asyncpg's executemany (and pgjdbc's executeBatch) send
    one statement bound many times before one Sync: each Bind runs on its
    key's shard, all shards commit together or not at all, and the replies
    come back in the client's order."""
    inst = start(pgcat, xdbs)
    base = 600000
    try:
        with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                             dbname="xs3", autocommit=True) as c:
            with c.cursor() as cur:
                rows = [(base + k, "m%d" % k, k % 9) for k in range(1, 301)]
                cur.executemany("INSERT INTO xs (id, v, n) VALUES (%s, %s, %s)", rows)
                assert cur.rowcount == 300
                # psycopg waits for RETURNING's rows before its Sync: refused
                # (soon), not left waiting for a Sync that does not come
                more = [(base + 1000 + k, "r%d" % k) for k in (7, 3, 11, 1, 5, 2, 9)]
                t0 = time.monotonic()
                with pytest.raises(psycopg.Error) as e:
                    cur.executemany("INSERT INTO xs (id, v) VALUES (%s, %s) RETURNING id, v", more, returning=True)
                assert sqlstate(e.value) == "0A000" and "returning" in str(e.value)
                assert time.monotonic() - t0 < 5
                # (psycopg sends a RETURNING batch with its Sync when not asked for the rows)
                cur.executemany("INSERT INTO xs (id, v) VALUES (%s, %s) RETURNING id, v", more)
                cur.executemany("UPDATE xs SET n = n + 100 WHERE id = %s", [(base + k,) for k in (1, 2, 3, 4, 5)])
                assert cur.rowcount == 5
                # a duplicate key on one shard: no row of the batch anywhere
                with pytest.raises(psycopg.errors.UniqueViolation):
                    cur.executemany("INSERT INTO xs (id, v) VALUES (%s, %s)",
                                    [(base + 2000 + k, "dup") for k in range(20)] + [(base + 7, "dup")])
                # the statement lives on for the next batch
                cur.executemany("INSERT INTO xs (id, v) VALUES (%s, %s)", [(base + 2100 + k, "again") for k in range(9)])
            assert c.execute("SELECT count(*) FROM xs WHERE v = 'dup'").fetchone()[0] == 0
            assert c.execute("SELECT count(*) FROM xs WHERE v = 'again'").fetchone()[0] == 9
            assert c.execute("SELECT count(*), sum(n) FROM xs WHERE id > %s", (base,)).fetchone() == \
                (316, sum(k % 9 for k in range(1, 301)) + 500)

        async def run():
            conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                         password=PASSWORDS["app"], database="xs3")
            try:
                await conn.executemany("INSERT INTO xs (id, v) VALUES ($1, $2)",
                                       [(base + 3000 + k, "apg") for k in range(100)])
                return await conn.fetchval("SELECT count(*) FROM xs WHERE v = 'apg'")
            finally:
                await conn.close()

        assert asyncio.run(run()) == 100
        assert placement_errors(xdbs, base) == 0

        # psycopg without prepared statements (prepare_threshold = None, as
        # with other poolers) parses the unnamed statement again before
        # every Bind: the same batch, the same answers as one PostgreSQL
        with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                             dbname="xs3", autocommit=True, prepare_threshold=None) as c, \
                xdbs.connect(SINGLE) as direct:
            direct.execute("CREATE TEMP TABLE xs_one (LIKE xs INCLUDING ALL)")
            for conn, table in ((c, "xs"), (direct, "xs_one")):
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO %s (id, v) VALUES (%%s, %%s)" % table,
                                    [(base + 4000 + k, "np") for k in range(40)])
                    assert cur.rowcount == 40
                    with pytest.raises(psycopg.errors.UniqueViolation):
                        cur.executemany("INSERT INTO %s (id, v) VALUES (%%s, %%s)" % table,
                                        [(base + 4100 + k, "npdup") for k in range(10)] + [(base + 4001, "npdup")])
                    # the statement lives on after the failed batch
                    cur.executemany("INSERT INTO %s (id, v) VALUES (%%s, %%s)" % table,
                                    [(base + 4200 + k, "npr") for k in (3, 1, 2)])
                    assert cur.rowcount == 3
            assert c.execute("SELECT count(*) FROM xs WHERE v IN ('np', 'npr')").fetchone()[0] == 43
            assert c.execute("SELECT count(*) FROM xs WHERE v = 'npdup'").fetchone()[0] == 0
        assert placement_errors(xdbs, base) == 0
    finally:
        clear_copied(xdbs, base)


def test_split_writes_inside_a_transaction(pgcat, xdbs):
    """psycopg without autocommit sends BEGIN first: a COPY, a multi-row
    INSERT or an executemany split across shards then keeps every shard's
    transaction open until the client's COMMIT (all commit) or ROLLBACK
    (none keeps a row); anything else in between fails the transaction and
    rolls the shards back."""
    inst = start(pgcat, xdbs)
    base = 700000
    try:
        with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                             dbname="xs3") as c:
            with c.cursor() as cur:
                with cur.copy("COPY xs (id, v) FROM STDIN") as cp:
                    for k in range(base + 1, base + 201):
                        cp.write_row((k, "tx"))
                assert cur.statusmessage == "COPY 200"
                assert c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            with xdbs.connect("shard0") as d:   # not visible before COMMIT
                assert d.execute("SELECT count(*) FROM xs WHERE id > %s", (base,)).fetchone()[0] == 0
            c.commit()
            assert c.execute("SELECT count(*) FROM xs WHERE id > %s", (base,)).fetchone()[0] == 200
            c.commit()
            # executemany, then ROLLBACK: nothing kept
            with c.cursor() as cur:
                cur.executemany("INSERT INTO xs (id, v) VALUES (%s, %s)", [(base + 1000 + k, "rb") for k in range(30)])
            c.rollback()
            # a multi-row INSERT, then COMMIT
            c.execute("INSERT INTO xs (id, v) VALUES (%s, 'm'), (%s, 'm'), (%s, 'm')" % (base + 2001, base + 2002, base + 2003))
            c.commit()
            # something else after the split write: refused, the transaction fails
            c.execute("INSERT INTO xs (id, v) VALUES (%s, 'x'), (%s, 'x'), (%s, 'x')" % (base + 3001, base + 3002, base + 3003))
            with pytest.raises(psycopg.Error) as e:
                c.execute("SELECT count(*) FROM xs")
            assert sqlstate(e.value) == "0A000" and "only COMMIT or ROLLBACK" in str(e.value)
            with pytest.raises(psycopg.errors.InFailedSqlTransaction):
                c.execute("SELECT 1")
            c.rollback()
            assert c.execute("SELECT count(*) FROM xs WHERE id > %s", (base,)).fetchone()[0] == 203
            c.commit()
        # a client gone with its shards' transactions open: they roll back, no server stays in one
        r = inst.raw_login(dbname="xs3")
        r.simple("BEGIN")
        r.send(pgwire.query("INSERT INTO xs (id, v) VALUES (%d, 'gone'), (%d, 'gone'), (%d, 'gone')"
                            % (base + 4001, base + 4002, base + 4003)))
        msgs = r.read_until((b"Z",))
        assert msgs[-1][1] == b"T" and msgs[-2][1].rstrip(b"\0") == b"INSERT 0 3"
        r.close()
        with xdbs.connect("postgres") as pc:
            deadline = time.monotonic() + 10
            while pc.execute("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' "
                             "AND usename = 'app'").fetchone()[0]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert sum(n[0][0] for n in on_shards(xdbs, "SELECT count(*) FROM xs WHERE v = 'gone'")) == 0
        assert placement_errors(xdbs, base) == 0
    finally:
        clear_copied(xdbs, base)


def test_insert_without_column_list(pgcat, xdbs):
    """INSERT INTO t VALUES (...) names no columns: pgcat asks shard 0 where
    the sharding column sits in the table (as for COPY), then routes or
    splits the rows by it; a dropped column before it does not confuse it."""
    for db in SHARDS:
        with xdbs.connect(db) as d:
            d.execute("DROP TABLE IF EXISTS xk")
            d.execute("CREATE TABLE xk (gone int, v text, id bigint PRIMARY KEY, n int)")
            d.execute("ALTER TABLE xk DROP COLUMN gone")
            d.execute("GRANT ALL ON xk TO PUBLIC")
    inst = start(pgcat, xdbs, pool={"sharded_tables": "xs.id, xk.id"})
    try:
        with psycopg.connect(host="127.0.0.1", port=inst.port, user="app", password=PASSWORDS["app"],
                             dbname="xs3", autocommit=True) as c:
            assert c.execute("INSERT INTO xk VALUES ('one', 11, 1)").statusmessage == "INSERT 0 1"
            assert c.execute("INSERT INTO xk VALUES (%s, %s, %s)", ("two", 12, 2)).statusmessage == "INSERT 0 1"
            cur = c.execute("INSERT INTO xk VALUES ('a', 21, 3), ('b', 22, 3), ('c', 23, 3), ('d', 24, 3) RETURNING id")
            assert cur.statusmessage == "INSERT 0 4" and sorted(r[0] for r in cur.fetchall()) == [21, 22, 23, 24]
            with c.transaction():
                c.execute("INSERT INTO xk VALUES (%s, %s, 4), (%s, %s, 4)", ("e", 31, "f", 32))
            with pytest.raises(psycopg.Error) as e:
                c.execute("INSERT INTO xk VALUES ('short')")
            assert c.execute("SELECT count(*), sum(n) FROM xk").fetchone() == (8, 1 + 2 + 12 + 8)

        async def run():
            conn = await asyncpg.connect(host="127.0.0.1", port=inst.port, user="app",
                                         password=PASSWORDS["app"], database="xs3")
            try:
                await conn.execute("INSERT INTO xk VALUES ($1, $2, $3)", "apg", 41, 5)
                return await conn.fetchval("SELECT v FROM xk WHERE id = $1", 41)
            finally:
                await conn.close()

        assert asyncio.run(run()) == "apg"
        misplaced = 0
        for i, db in enumerate(SHARDS):
            with xdbs.connect(db) as d:
                misplaced += d.execute("SELECT count(*) FROM xk WHERE NOT "
                                       "satisfies_hash_partition('xs_hp'::regclass::oid, 3, %d, id)" % i).fetchone()[0]
        assert misplaced == 0
    finally:
        for db in SHARDS:
            with xdbs.connect(db) as d:
                d.execute("DROP TABLE IF EXISTS xk")
