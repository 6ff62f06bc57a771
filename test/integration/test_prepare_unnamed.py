# SPDX-License-Identifier: MIT
"""Plans for unnamed statements (SPEC §5, prepare_unnamed): an unnamed Parse
of a text the pool has seen before goes to the server as the pool's named
statement, so PostgreSQL plans it once per server connection. The client
sees PostgreSQL's replies for the unnamed statement; a text seen once
leaves nothing on a server; the server-side statements stay within
prepared_statements_cache_size; schema changes, errors and Describe behave
as without pgcat."""
import asyncio
import os
import re
import subprocess

import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, PG_BIN
from test_admin import admin, command, show
from test_load import bench_pool, ensure_bench_data, pgbench


def pool(pgcat, size=1, **general):
    g = {"default_pool_size": size, "pool_mode": "transaction", "prepared_statements": "true"}
    g.update(general)
    return pgcat(general=g)


def counters(inst):
    a = admin(inst)
    _, pools = show(a, "POOLS")
    a.close()
    p = [x for x in pools if x["database"] == "appdb"][0]
    return int(p["prepared_unnamed_hits"]), int(p["prepared_unnamed_misses"])


def server_statements(r):
    """The statements of the server connection behind raw client r (a
    simple query: it is never rewritten), name -> text."""
    rows, err, _ = r.simple("SELECT name, statement FROM pg_prepared_statements")
    assert err is None, err
    return dict((n, s) for n, s in rows)


def types_of(msgs):
    return [m[0] for m in msgs]


def unnamed_round(r, sql, params=(), describe_stmt=False):
    """Parse (unnamed), [Describe S], Bind, Describe P, Execute, Sync."""
    m = pgwire.parse(sql)
    if describe_stmt:
        m += pgwire.describe(b"S")
    m += pgwire.bind(params) + pgwire.describe(b"P") + pgwire.execute() + pgwire.sync()
    r.send(m)
    return r.read_until()


def rows_of(msgs):
    return [pgwire.data_row_values(p) for t, p in msgs if t == b"D"]


def direct(pg):
    """A raw session on PostgreSQL itself, to compare replies with."""
    r = pgwire.Raw("127.0.0.1", pg.port)
    r.login("app", PASSWORDS["app"], "appdb")
    return r


def test_repeated_unnamed_query_is_planned_once_per_connection(pgcat):
    inst = pool(pgcat, 1)
    c = inst.connect()   # prepare_threshold=None: every query unnamed
    h0, m0 = counters(inst)
    for i in range(20):
        assert c.execute("SELECT %s::int + 1 AS v", (i,)).fetchone()[0] == i + 1
    h1, m1 = counters(inst)
    # the first: seen once, unnamed; the second: parsed as the named
    # statement; the others: the server already holds it
    assert m1 - m0 == 2, (h1, m1)
    assert h1 - h0 == 18, (h1, m1)
    r = inst.raw_login()
    stmts = server_statements(r)
    mine = [n for n, s in stmts.items() if s == "SELECT $1::int + 1 AS v"]
    assert len(mine) == 1 and re.fullmatch(r"pgcat_[0-9a-f]+_[0-9a-f]+", mine[0]), stmts
    r.close()
    c.close()


def test_metrics_carry_the_unnamed_counters(pgcat):
    from conftest import free_port
    port = free_port()
    inst = pool(pgcat, 1, prometheus_port=port)
    c = inst.connect()
    for i in range(5):
        c.execute("SELECT %s::int * 3", (i,)).fetchone()
    c.close()
    import urllib.request
    from conftest import wait_until
    vals = {}

    def read():
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
        for line in body.splitlines():
            for k in ("pgcat_prepared_unnamed_hits_total", "pgcat_prepared_unnamed_misses_total"):
                if line.startswith(k + '{pool="appdb",user="app"}'):
                    vals[k] = float(line.rsplit(" ", 1)[1])
        # (the worker publishes its figures at its next tick)
        return vals.get("pgcat_prepared_unnamed_hits_total", 0) == 3
    wait_until(read, timeout=10, msg="unnamed counters in /metrics")
    assert vals["pgcat_prepared_unnamed_misses_total"] == 2, vals


def test_text_seen_once_leaves_no_server_statement(pgcat):
    inst = pool(pgcat, 1)
    r = inst.raw_login()
    for i in range(50):
        msgs = unnamed_round(r, "SELECT %d AS once" % i)
        assert types_of(msgs) == [b"1", b"2", b"T", b"D", b"C", b"Z"], msgs
        assert rows_of(msgs) == [[str(i)]]
    assert not [n for n in server_statements(r) if n.startswith("pgcat_")]
    # seen a second time: now a statement of the server's
    msgs = unnamed_round(r, "SELECT 7 AS once")
    assert rows_of(msgs) == [["7"]]
    assert list(server_statements(r).values()).count("SELECT 7 AS once") == 1
    r.close()


def test_replies_match_postgresql(pgcat, pg):
    """The same messages through pgcat (second time: mapped) and directly:
    the same replies, byte for byte (Describe of the statement and the
    portal, rows), also when the statement's next use lands on another
    server connection."""
    inst = pool(pgcat, 2)
    sql = "SELECT $1::int AS n, $2::text AS t, now() IS NOT NULL AS ok"
    d = direct(pg)
    want = unnamed_round(d, sql, ["5", "x"], describe_stmt=True)
    d.close()
    assert types_of(want) == [b"1", b"t", b"T", b"2", b"T", b"D", b"C", b"Z"], want
    a = inst.raw_login()
    for _ in range(3):
        assert unnamed_round(a, sql, ["5", "x"], describe_stmt=True) == want
    # Describe and Bind of the unnamed statement in a later transaction, on
    # the other server (the first is held), without a new Parse
    hold = inst.raw_login()
    hold.simple("BEGIN")
    hold.simple("SELECT 1")
    a.send(pgwire.describe(b"S") + pgwire.sync())
    got = a.read_until()
    assert got == [want[1], want[2], want[-1]], got
    a.send(pgwire.bind(["6", "y"]) + pgwire.execute() + pgwire.sync())
    got = a.read_until()
    assert types_of(got) == [b"2", b"D", b"C", b"Z"] and rows_of(got) == [["6", "y", "t"]], got
    hold.simple("COMMIT")
    # Close of the unnamed statement: CloseComplete, and then it is gone
    # from the client's view as on PostgreSQL (the next Parse works)
    a.send(pgwire.msg(b"C", b"S" + pgwire.cstr("")) + pgwire.sync())
    assert types_of(a.read_until()) == [b"3", b"Z"]
    assert unnamed_round(a, sql, ["5", "x"], describe_stmt=True) == want
    a.close()
    hold.close()


def test_other_clients_raw_unnamed_statement_survives(pgcat):
    """A repeated unnamed Parse answered on a server that already holds its
    statement replaces the server's unnamed statement; a client that left
    its own (a text seen once) there and binds it in a later transaction
    gets it replayed."""
    inst = pool(pgcat, 1)
    a = inst.raw_login()
    b = inst.raw_login()
    for _ in range(3):
        assert rows_of(unnamed_round(b, "SELECT 'b'::text AS who")) == [["b"]]
    a.send(pgwire.parse("SELECT 'a only'::text AS who") + pgwire.sync())
    assert types_of(a.read_until()) == [b"1", b"Z"]
    assert rows_of(unnamed_round(b, "SELECT 'b'::text AS who")) == [["b"]]
    a.send(pgwire.bind() + pgwire.execute() + pgwire.sync())
    got = a.read_until()
    assert types_of(got) == [b"2", b"D", b"C", b"Z"] and rows_of(got) == [["a only"]], got
    a.close()
    b.close()


def test_parse_error_as_postgresql_reports_it(pgcat, pg):
    inst = pool(pgcat, 1)
    bad = ["SELECT * FROM no_such_table_pu WHERE x = $1", "SELEC 1", "SELECT 1/$1::int FROM missing_pu"]
    d = direct(pg)
    want = {}
    for sql in bad:
        msgs = unnamed_round(d, sql, ["1"])
        assert types_of(msgs) == [b"E", b"Z"], msgs
        want[sql] = pgwire.parse_fields(msgs[0][1])
    d.close()
    r = inst.raw_login()
    for _ in range(3):   # seen once, then mapped: the same error each time
        for sql in bad:
            msgs = unnamed_round(r, sql, ["1"])
            assert types_of(msgs) == [b"E", b"Z"], (sql, msgs)
            got = pgwire.parse_fields(msgs[0][1])
            for f in "CMP":
                assert got.get(f) == want[sql].get(f), (sql, f, got, want[sql])
    # inside a transaction: the error fails it, the next Parse gets 25P02
    # as from PostgreSQL, and the session goes on after ROLLBACK
    assert r.simple("BEGIN")[2] == "T"
    msgs = unnamed_round(r, bad[0], ["1"])
    assert types_of(msgs) == [b"E", b"Z"] and msgs[-1][1] == b"E"
    for _ in range(2):
        msgs = unnamed_round(r, "SELECT $1::int AS fine", ["1"])
        assert types_of(msgs) == [b"E", b"Z"], msgs
        assert pgwire.parse_fields(msgs[0][1])["C"] == "25P02"
    assert r.simple("ROLLBACK")[2] == "I"
    for _ in range(3):
        assert rows_of(unnamed_round(r, "SELECT $1::int AS fine", ["1"])) == [["1"]]
    r.close()


def test_schema_change_then_mapped_query_works(pgcat, pg):
    inst = pool(pgcat, 2)
    pg.sql("DROP TABLE IF EXISTS pu_alter; CREATE TABLE pu_alter (id int, v int); "
           "INSERT INTO pu_alter VALUES (1, 10); ALTER TABLE pu_alter OWNER TO app")
    c = inst.connect()
    q = "SELECT v FROM pu_alter WHERE id = %s"
    for _ in range(5):
        assert c.execute(q, (1,)).fetchone()[0] == 10
    # through pgcat: the schema generation moves, the next Parse is fresh
    c.execute("ALTER TABLE pu_alter ALTER COLUMN v TYPE text USING 'ten'")
    for _ in range(5):
        assert c.execute(q, (1,)).fetchone()[0] == "ten"
    h0, _ = counters(inst)
    for _ in range(5):
        assert c.execute(q, (1,)).fetchone()[0] == "ten"
    assert counters(inst)[0] > h0
    # with a column added to the result, in a transaction
    with c.transaction():
        c.execute("ALTER TABLE pu_alter ADD COLUMN w int DEFAULT 3")
        assert c.execute("SELECT * FROM pu_alter WHERE id = %s", (1,)).fetchone() == (1, "ten", 3)
    for _ in range(3):
        assert c.execute("SELECT * FROM pu_alter WHERE id = %s", (1,)).fetchone() == (1, "ten", 3)
    c.close()
    pg.sql("DROP TABLE pu_alter")


def test_schema_change_pgcat_did_not_see(pgcat, pg):
    """DDL run on PostgreSQL directly: the first use of a mapped statement
    whose result type changed fails with PostgreSQL's 0A000 (as a named
    statement would), which starts a new schema generation; from then on
    the query works again."""
    inst = pool(pgcat, 1)
    pg.sql("DROP TABLE IF EXISTS pu_ext; CREATE TABLE pu_ext (id int, v int); "
           "INSERT INTO pu_ext VALUES (1, 10); GRANT SELECT ON pu_ext TO app")
    c = inst.connect()
    q = "SELECT v FROM pu_ext WHERE id = %s"
    for _ in range(4):
        assert c.execute(q, (1,)).fetchone()[0] == 10
    pg.sql("ALTER TABLE pu_ext ALTER COLUMN v TYPE text USING 'ten'")
    errors = 0
    for _ in range(4):
        try:
            assert c.execute(q, (1,)).fetchone()[0] == "ten"
        except psycopg.errors.FeatureNotSupported as e:
            assert e.sqlstate == "0A000"
            errors += 1
    assert errors <= 1
    c.close()
    pg.sql("DROP TABLE pu_ext")


def test_prepare_unnamed_off_keeps_statements_unnamed(pgcat):
    inst = pool(pgcat, 1, prepare_unnamed="false")
    c = inst.connect()
    for i in range(10):
        assert c.execute("SELECT %s::int - 1", (i,)).fetchone()[0] == i - 1
    c.close()
    assert counters(inst) == (0, 0)
    r = inst.raw_login()
    assert not [n for n in server_statements(r) if n.startswith("pgcat_")]
    r.close()
    # switched on by reload: from the next Parse on
    inst.general["prepare_unnamed"] = "true"
    inst.write()
    a = admin(inst)
    assert command(a, "RELOAD") is None
    a.close()
    c = inst.connect()
    for i in range(10):
        assert c.execute("SELECT %s::int - 1", (i,)).fetchone()[0] == i - 1
    c.close()
    assert counters(inst)[0] >= 8


def test_asyncpg_unnamed_statements(pgcat):
    """asyncpg without a statement cache prepares every query unnamed."""
    inst = pool(pgcat, 2)

    async def client(i):
        c = await inst.asyncpg(statement_cache_size=0)
        try:
            for k in range(30):
                assert await c.fetchval("SELECT $1::int + $2::int", i, k) == i + k
                row = await c.fetchrow("SELECT $1::text AS a, $2::int AS b", str(k), i)
                assert (row["a"], row["b"]) == (str(k), i)
        finally:
            await c.close()

    async def main():
        await asyncio.gather(*(client(i) for i in range(6)))
    h0, _ = counters(inst)
    asyncio.run(main())
    h1, m1 = counters(inst)
    assert h1 - h0 > 300, (h1, m1)


def pipelined(r, sqls):
    """Each text as Parse, Bind, Execute, Sync, sent at once; the rows."""
    r.send(b"".join(pgwire.parse(s) + pgwire.bind() + pgwire.execute() + pgwire.sync() for s in sqls))
    out = []
    for _ in sqls:
        msgs = r.read_until(timeout=60)
        assert msgs[-1][0] == b"Z" and b"E" not in types_of(msgs), msgs
        out.append(rows_of(msgs))
    return out


def test_many_distinct_queries_stay_within_the_bound(pgcat):
    """100,000 one-off queries create no server statement at all; 2,000
    distinct queries each run twice (so each becomes a named statement)
    leave at most prepared_statements_cache_size of them on the server."""
    bound = 20
    inst = pool(pgcat, 1, prepared_statements_cache_size=bound)
    r = inst.raw_login()
    n = int(os.environ.get("PGCAT_UNNAMED_ONE_OFFS", "100000"))
    batch = 1000
    for start in range(0, n, batch):
        rows = pipelined(r, ["SELECT %d AS one_off" % i for i in range(start, min(n, start + batch))])
        assert rows[0] == [[str(start)]]
    assert not [k for k in server_statements(r) if k.startswith("pgcat_")]
    for start in range(0, 2000, 200):
        sqls = ["SELECT %d AS twice" % i for i in range(start, start + 200)]
        pipelined(r, sqls)
        rows = pipelined(r, sqls)
        assert rows[-1] == [[str(start + 199)]]
        mine = [k for k in server_statements(r) if k.startswith("pgcat_")]
        assert 0 < len(mine) <= bound, len(mine)
    a = admin(inst)
    _, servers = show(a, "SERVERS")
    a.close()
    assert all(int(s["prepared_statements"]) <= bound for s in servers), servers
    r.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("protocol,clients,per_client", [("prepared", 8, 150), ("extended", 8, 150),
                                                         ("prepared", 100, 12)])
def test_pgbench_tpcb_more_clients_than_servers(pgcat, pg, protocol, clients, per_client):
    """TPC-B, 8 or 100 clients on 2 threads through pool_size 4 in
    transaction mode: no failed transaction (extended: every statement
    unnamed; prepared: each client's blocking prepare while others hold
    the servers in their transactions)."""
    ensure_bench_data(pg)
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 4, "prepared_statements": "true"},
              pools=bench_pool(pg))
    r = pgbench(["-n", "-M", protocol, "-c", str(clients), "-j", "2", "-t", str(per_client)], p.host, p.port, 500)
    out = r.stdout + r.stderr
    total = clients * per_client
    assert r.returncode == 0, out[-3000:]
    assert "number of transactions actually processed: %d/%d" % (total, total) in out, out[-3000:]
    assert "number of failed transactions: 0" in out, out[-3000:]
    if protocol == "extended":
        a = admin(p)
        _, pools = show(a, "POOLS")
        a.close()
        row = [x for x in pools if x["database"] == "benchdb"][0]
        # 5 plannable statements a transaction; misses: the first of each
        # (seen once), then once per server connection
        assert int(row["prepared_unnamed_hits"]) >= 1200 * 5 - 5 - 5 * 4, row


def prepare_described(r, sql, name="", timeout=10.0):
    """Parse and Describe 'S' of one statement, then Sync (what asyncpg and
    libpq's PQprepare + PQdescribePrepared send)."""
    r.send(pgwire.parse(sql, name) + pgwire.describe(b"S", name) + pgwire.sync())
    return r.read_until(timeout=timeout)


@pytest.mark.parametrize("name", ["", "n1"])
def test_parse_and_describe_answered_without_a_server(pgcat, name):
    """SPEC §5: a Parse and Describe of a statement whose description pgcat
    kept from a server's reply are answered by pgcat while every server is
    held; the Bind then runs on a server as usual."""
    import socket
    inst = pool(pgcat, 1)
    sql = "SELECT $1::int AS n, 'k'::text AS t"
    a = inst.raw_login()
    first = prepare_described(a, sql, name)
    assert types_of(first) == [b"1", b"t", b"T", b"Z"], first
    if name:
        close = pgwire.msg(b"C", b"S" + pgwire.cstr(name)) + pgwire.sync()
        a.send(close)
        assert types_of(a.read_until()) == [b"3", b"Z"]
    else:
        assert prepare_described(a, sql) == first   # (the unnamed text is seen once first)
    assert prepare_described(a, sql, name) == first   # a server's Describe: kept
    hold = inst.raw_login()
    hold.simple("BEGIN")
    hold.simple("SELECT 1")
    b = inst.raw_login()
    # pgcat's answer, the server being held: the server's own bytes
    assert prepare_described(b, sql, name, timeout=5) == first
    b.send(pgwire.bind(["4"], stmt=name) + pgwire.execute() + pgwire.sync())
    with pytest.raises(socket.timeout):
        b.read_msg(timeout=0.5)   # the Bind needs the server
    hold.simple("COMMIT")
    got = b.read_until()
    assert types_of(got) == [b"2", b"D", b"C", b"Z"] and rows_of(got) == [["4", "k"]], got
    # a statement with no rows: ParameterDescription and NoData
    ins = "INSERT INTO pu_desc_t VALUES ($1::int)"
    a.simple("CREATE TABLE IF NOT EXISTS pu_desc_t (a int)")
    iname = name + "i" if name else ""
    for _ in range(3):
        want = prepare_described(a, ins, iname)
        assert types_of(want) == [b"1", b"t", b"n", b"Z"], want
        if name:
            a.send(pgwire.msg(b"C", b"S" + pgwire.cstr(iname)) + pgwire.sync())
            a.read_until()
    hold.simple("BEGIN")
    hold.simple("SELECT 1")
    assert prepare_described(b, ins, name + "x" if name else "", timeout=5) == want
    hold.simple("COMMIT")
    a.simple("DROP TABLE pu_desc_t")
    # after a schema change (the DROP) nothing kept is used: the server
    # answers, once it is free
    hold.simple("BEGIN")
    hold.simple("SELECT 1")
    b.send(pgwire.parse(sql, name + "y") + pgwire.describe(b"S", name + "y") + pgwire.sync())
    with pytest.raises(socket.timeout):
        b.read_msg(timeout=0.5)
    hold.simple("COMMIT")
    assert b.read_until() == first
    for x in (a, b, hold):
        x.close()


def test_asyncpg_prepares_while_servers_are_busy(pgcat):
    """asyncpg without a statement cache: Parse and Describe of the unnamed
    statement, then Bind and Execute; many clients on one server."""
    inst = pool(pgcat, 1)

    async def client(i):
        c = await inst.asyncpg(statement_cache_size=0)
        try:
            for k in range(40):
                assert await c.fetchval("SELECT $1::int * 10 + $2::int", i, k) == i * 10 + k
                async with c.transaction():
                    assert await c.fetchval("SELECT $1::text || 'z'", str(k)) == "%dz" % k
        finally:
            await c.close()

    async def main():
        await asyncio.gather(*(client(i) for i in range(8)))
    asyncio.run(main())
    h, m = counters(inst)
    assert h > 8 * 40, (h, m)


def test_answered_batch_keeps_what_it_names(pgcat):
    """A batch pgcat answers: the client's old unnamed statement, let go by
    the batch's unnamed Parse, may be the last hold on a statement the same
    batch names and describes (a server-side LRU of one made sure no
    server holds it)."""
    inst = pool(pgcat, 1, prepared_statements_cache_size=1)
    y = "SELECT $1::int AS y"
    z = "SELECT 'z'::text AS z"
    a = inst.raw_login()
    b = inst.raw_login()
    prepare_described(a, y)
    want = prepare_described(a, y)   # now a's unnamed statement names the pool's
    assert types_of(want) == [b"1", b"t", b"T", b"Z"], want
    for _ in range(3):
        assert types_of(prepare_described(b, z)) == [b"1", b"t", b"T", b"Z"]   # evicts y
    a.send(pgwire.parse(z) + pgwire.parse(y, "n") + pgwire.describe(b"S", "n") + pgwire.sync())
    got = a.read_until()
    assert types_of(got) == [b"1", b"1", b"t", b"T", b"Z"], got
    assert got[2:4] == want[1:3]
    a.send(pgwire.bind(["3"], stmt="n") + pgwire.execute() + pgwire.bind() + pgwire.execute() + pgwire.sync())
    got = a.read_until()
    assert rows_of(got) == [["3"], ["z"]], got
    a.close()
    b.close()


def test_clients_with_other_search_paths_do_not_share(pgcat, pg):
    """PostgreSQL resolves a statement's names by search_path when it
    parses it: clients with different settings on one server connection
    each get their own statement (no 0A000, each its own table)."""
    inst = pool(pgcat, 1)
    pg.sql("DROP SCHEMA IF EXISTS pu_s1 CASCADE; DROP SCHEMA IF EXISTS pu_s2 CASCADE; "
           "CREATE SCHEMA pu_s1; CREATE SCHEMA pu_s2; "
           "CREATE TABLE pu_s1.t (a int); INSERT INTO pu_s1.t VALUES (1); "
           "CREATE TABLE pu_s2.t (b text, c text); INSERT INTO pu_s2.t VALUES ('two', 'x'); "
           "GRANT USAGE ON SCHEMA pu_s1, pu_s2 TO app; GRANT SELECT ON pu_s1.t, pu_s2.t TO app")
    one, two, plain = inst.connect(), inst.connect(), inst.connect()
    one.execute("SET search_path TO pu_s1")
    two.execute("SET search_path TO pu_s2")
    h0, _ = counters(inst)
    for _ in range(6):
        assert one.execute("SELECT * FROM t WHERE %s::int > 0", (1,)).fetchall() == [(1,)]
        assert two.execute("SELECT * FROM t WHERE %s::int > 0", (1,)).fetchall() == [("two", "x")]
        assert plain.execute("SELECT * FROM pu_s1.t WHERE %s::int > 0", (1,)).fetchall() == [(1,)]
    assert counters(inst)[0] - h0 >= 3 * 4, counters(inst)
    for c in (one, two, plain):
        c.close()
    pg.sql("DROP SCHEMA pu_s1 CASCADE; DROP SCHEMA pu_s2 CASCADE")


def test_pipeline_of_unnamed_statements_byte_for_byte(pgcat, pg):
    """Several unnamed Parse/Bind/Execute in one Sync, texts seen once and
    mapped ones, an error in the middle (PostgreSQL skips the rest): the
    same replies as PostgreSQL's, each round."""
    inst = pool(pgcat, 2)
    texts = ["SELECT $1::int + 1 AS a", "SELECT $1::text || 'q' AS b", "SELECT 1/($1::int - 5) AS c",
             "SELECT $1::int * 2 AS d"]

    def pipeline(r, v):
        m = b""
        for t in texts:
            m += pgwire.parse(t) + pgwire.bind([v]) + pgwire.describe(b"P") + pgwire.execute()
        r.send(m + pgwire.sync())
        return r.read_until()

    d = direct(pg)
    want = {v: pipeline(d, v) for v in ("3", "5")}
    d.close()
    assert types_of(want["5"])[-2:] == [b"E", b"Z"], want["5"]
    r = inst.raw_login()
    hold = inst.raw_login()
    for k in range(6):
        if k == 3:   # the other server, where nothing is prepared yet
            hold.simple("BEGIN")
            hold.simple("SELECT 1")
        for v in ("3", "5"):
            assert pipeline(r, v) == want[v], (k, v)
    hold.simple("COMMIT")
    r.close()
    hold.close()


def test_bind_error_after_a_mapped_parse_as_postgresql(pgcat, pg):
    """A mapped unnamed Parse that is the first message of its request is
    not sent at all (the server holds the statement): pgcat's ParseComplete
    goes before the Bind's reply. When that Bind fails (a bad parameter, a
    wrong count), the client gets ParseComplete then the error, as from
    PostgreSQL; the same inside a transaction, and the next round works."""
    inst = pool(pgcat, 1)
    sql = "SELECT $1::int AS n"
    cases = [["abc"], ["1", "2"], ["7"]]
    d = direct(pg)
    want = [unnamed_round(d, sql, ps) for ps in cases]
    d.send(pgwire.parse(sql) + pgwire.bind(["x"]) + pgwire.execute() + pgwire.parse(sql) + pgwire.bind(["8"]) +
           pgwire.execute() + pgwire.sync())
    want_pipeline = d.read_until()
    d.close()
    assert types_of(want[0]) == [b"1", b"E", b"Z"] and types_of(want[1]) == [b"1", b"E", b"Z"], want
    assert types_of(want_pipeline) == [b"1", b"E", b"Z"], want_pipeline
    r = inst.raw_login()
    for _ in range(3):   # seen once, then mapped
        for ps, w in zip(cases, want):
            got = unnamed_round(r, sql, ps)
            assert types_of(got) == types_of(w), (ps, got)
            if got[1][0] == b"E":
                assert pgwire.parse_fields(got[1][1])["C"] == pgwire.parse_fields(w[1][1])["C"], got
            else:
                assert got == w
        # the second mapped Parse follows a failed Bind in the same segment:
        # PostgreSQL skips it, so no ParseComplete for it
        r.send(pgwire.parse(sql) + pgwire.bind(["x"]) + pgwire.execute() + pgwire.parse(sql) + pgwire.bind(["8"]) +
               pgwire.execute() + pgwire.sync())
        assert types_of(r.read_until()) == types_of(want_pipeline)
    assert r.simple("BEGIN")[2] == "T"
    got = unnamed_round(r, sql, ["abc"])
    assert types_of(got) == [b"1", b"E", b"Z"] and got[-1][1] == b"E", got
    assert r.simple("ROLLBACK")[2] == "I"
    assert rows_of(unnamed_round(r, sql, ["9"])) == [["9"]]
    hits, _ = counters(inst)
    assert hits >= 6, hits
    r.close()


def test_unnamed_statement_after_pgcat_own_query(pgcat):
    """A simple Query of pgcat's own on the server (here the health check
    before a hand-out, healthcheck_delay = 0) drops the server's unnamed
    statement, as any simple Query does: a client that binds its unnamed
    statement in a later transaction gets it replayed, not the server's
    'does not exist'."""
    inst = pgcat(general={"prepared_statements": "true", "healthcheck_delay": "0"},
                 users={"app": {"pool_size": 1}})
    a = inst.raw_login()
    a.send(pgwire.parse("SELECT 'kept'::text AS who") + pgwire.bind() + pgwire.execute() + pgwire.sync())
    assert rows_of(a.read_until()) == [["kept"]]
    for _ in range(2):
        a.send(pgwire.bind() + pgwire.execute() + pgwire.sync())
        got = a.read_until()
        assert types_of(got) == [b"2", b"D", b"C", b"Z"] and rows_of(got) == [["kept"]], got
    a.close()
