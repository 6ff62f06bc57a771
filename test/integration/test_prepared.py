# SPDX-License-Identifier: MIT
"""Named prepared statements in transaction mode (SPEC §5): drivers that
prepare (asyncpg, psycopg with prepare_threshold=0, pgbench --protocol
prepared), client-private names, Close/DEALLOCATE/DISCARD ALL, SQL-level
PREPARE/EXECUTE, eviction from the per-server cache, errors, and the
counters."""
import asyncio
import os
import subprocess

import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, PG_BIN
from test_admin import admin, show


def small_pool(pgcat, size=2, **general):
    g = {"default_pool_size": size, "pool_mode": "transaction", "prepared_statements": "true"}
    g.update(general)
    return pgcat(general=g)


def server_pids(inst):
    r = admin(inst)
    _, rows = show(r, "SERVERS")
    r.close()
    return {int(x["remote_pid"]) for x in rows}


def test_asyncpg_statement_cache_many_clients(pgcat):
    inst = small_pool(pgcat, 2)

    async def client(i):
        c = await inst.asyncpg(statement_cache_size=100)
        try:
            total = 0
            for k in range(200):
                # a handful of distinct statements, each prepared by asyncpg
                q = ["SELECT $1::int + %d" % (k % 5), "SELECT $1::int * 2", "SELECT $1::int"][k % 3]
                v = await c.fetchval(q, i)
                expect = [i + (k % 5), i * 2, i][k % 3]
                assert v == expect, (q, v, expect)
                total += 1
            return total
        finally:
            await c.close()

    async def main():
        return await asyncio.gather(*(client(i) for i in range(20)))
    assert asyncio.run(main()) == [200] * 20
    r = admin(inst)
    _, pools = show(r, "POOLS")
    p = [x for x in pools if x["database"] == "appdb"][0]
    # Far more statements executed than prepared on the two servers.
    assert int(p["prepared_hits"]) > 1000, p
    assert 1 <= int(p["prepared_misses"]) <= 2 * 7 + 4, p


def test_psycopg_prepare_threshold_zero(pgcat):
    inst = small_pool(pgcat, 2)
    conns = [inst.connect(prepare_threshold=0) for _ in range(4)]
    for k in range(30):
        for i, c in enumerate(conns):
            row = c.execute("SELECT %s::int + %s::int", (i, k)).fetchone()
            assert row[0] == i + k
            # a transaction with several statements, on whatever server
            with c.transaction():
                assert c.execute("SELECT %s::text || 'x'", (str(k),)).fetchone()[0] == "%dx" % k
    for c in conns:
        c.close()


def test_pgbench_protocol_prepared_transaction_mode(pgcat):
    inst = small_pool(pgcat, 3)
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    script = inst.workdir / "bench.sql"
    script.write_text("\\set a random(1, 1000)\nSELECT :a::int + 1;\nSELECT abs(:a::int - 500);\n")
    r = subprocess.run([str(PG_BIN / "pgbench"), "-n", "-h", inst.host, "-p", str(inst.port), "-U", "app",
                        "--protocol", "prepared", "-c", "10", "-j", "2", "-t", "500", "-f", str(script), "appdb"],
                       env=env, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "number of transactions actually processed: 5000/5000" in out, out
    assert "number of failed transactions: 0" in out, out
    assert "already exists" not in out and "does not exist" not in out, out


def raw_prepare(r, name, sql, types=()):
    r.send(pgwire.parse(sql, name, types) + pgwire.sync())
    return r.read_until()


def raw_exec(r, name, params=()):
    """Bind+Describe+Execute+Sync of a named statement; (rows, error, status)."""
    r.send(pgwire.bind(params, stmt=name) + pgwire.describe(b"P") + pgwire.execute() + pgwire.sync())
    return r.collect()


def types_of(msgs):
    return [m[0] for m in msgs]


def test_names_are_private_and_replies_exact(pgcat):
    inst = small_pool(pgcat, 1)
    a = inst.raw_login()
    b = inst.raw_login()
    assert types_of(raw_prepare(a, "s1", "SELECT 'a'::text")) == [b"1", b"Z"]
    # Same name, other client, other text: its own statement.
    assert types_of(raw_prepare(b, "s1", "SELECT 'b'::text || $1", [25])) == [b"1", b"Z"]
    assert raw_exec(a, "s1")[0] == [["a"]]
    assert raw_exec(b, "s1", ["x"])[0] == [["bx"]]
    # A second client preparing a text the server already holds still gets
    # exactly one ParseComplete.
    c = inst.raw_login()
    assert types_of(raw_prepare(c, "other", "SELECT 'a'::text")) == [b"1", b"Z"]
    assert raw_exec(c, "other")[0] == [["a"]]
    # Duplicate name: PostgreSQL's 42P05, and the session goes on.
    msgs = raw_prepare(a, "s1", "SELECT 2")
    assert types_of(msgs) == [b"E", b"Z"], msgs
    err = pgwire.parse_fields(msgs[0][1])
    assert err["C"] == "42P05" and '"s1"' in err["M"], err
    assert raw_exec(a, "s1")[0] == [["a"]]
    # Close, then the name is free again (and b's s1 is untouched).
    a.send(pgwire.msg(b"C", b"S" + pgwire.cstr("s1")) + pgwire.sync())
    assert types_of(a.read_until()) == [b"3", b"Z"]
    rows, err, _ = raw_exec(a, "s1")
    assert err and err["C"] == "26000" and '"s1"' in err["M"], err
    assert types_of(raw_prepare(a, "s1", "SELECT 'again'::text")) == [b"1", b"Z"]
    assert raw_exec(a, "s1")[0] == [["again"]]
    assert raw_exec(b, "s1", ["y"])[0] == [["by"]]
    for x in (a, b, c):
        x.close()


def test_describe_statement_prepared_elsewhere(pgcat, pg):
    inst = small_pool(pgcat, 2)
    a = inst.raw_login()
    hold = inst.raw_login()
    # a prepares on one server; hold then keeps that server busy in a
    # transaction so that a's next request goes to the other one.
    assert types_of(raw_prepare(a, "q", "SELECT $1::int AS n, 'x'::text AS t")) == [b"1", b"Z"]
    hold.simple("BEGIN")
    hold.simple("SELECT 1")
    a.send(pgwire.describe(b"S", "q") + pgwire.sync())
    msgs = a.read_until()
    assert types_of(msgs) == [b"t", b"T", b"Z"], msgs
    assert b"n\x00" in msgs[1][1] and b"t\x00" in msgs[1][1]
    assert raw_exec(a, "q", ["5"])[0] == [["5", "x"]]
    hold.simple("COMMIT")
    a.close()
    hold.close()


def test_eviction_small_cache_rotating_statements(pgcat):
    inst = small_pool(pgcat, 1, prepared_statements_cache_size=2)
    r = inst.raw_login()
    for i in range(10):
        assert types_of(raw_prepare(r, "s%d" % i, "SELECT %d AS v" % i)) == [b"1", b"Z"]
    for rnd in range(3):
        for i in range(10):
            rows, err, _ = raw_exec(r, "s%d" % i)
            assert err is None and rows == [[str(i)]], (i, err)
    a = admin(inst)
    _, servers = show(a, "SERVERS")
    assert all(int(s["prepared_statements"]) <= 2 for s in servers), servers
    r.close()


def test_error_inside_prepared_transaction(pgcat):
    inst = small_pool(pgcat, 1)
    c = inst.connect(prepare_threshold=0, autocommit=False)
    c.execute("SELECT %s::int", (1,))
    with pytest.raises(psycopg.errors.DivisionByZero):
        c.execute("SELECT 1 / %s::int", (0,))
    c.rollback()
    assert c.execute("SELECT 1 / %s::int", (1,)).fetchone()[0] == 1
    with pytest.raises(psycopg.errors.DivisionByZero):
        c.execute("SELECT 1 / %s::int", (0,))
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        c.execute("SELECT %s::int", (2,))
    c.rollback()
    assert c.execute("SELECT %s::int", (3,)).fetchone()[0] == 3
    c.commit()
    c.close()


def test_pipeline_error_undoes_later_parse(pgcat):
    """A failure before a Parse in the same Sync: the server skips the
    Parse, so the name must not exist (as with PostgreSQL)."""
    inst = small_pool(pgcat, 1)
    r = inst.raw_login()
    r.send(pgwire.parse("SELECT 1/0", "bad") + pgwire.bind(stmt="bad") + pgwire.execute() +
           pgwire.parse("SELECT 7", "later") + pgwire.sync())
    msgs = r.read_until()
    assert types_of(msgs)[-2:] == [b"E", b"Z"], msgs
    assert pgwire.parse_fields(msgs[-2][1])["C"] == "22012"
    # "later" was never created: preparing it now works.
    assert types_of(raw_prepare(r, "later", "SELECT 7")) == [b"1", b"Z"]
    assert raw_exec(r, "later")[0] == [["7"]]
    r.close()


def test_sql_prepare_execute_deallocate_discard(pgcat):
    inst = small_pool(pgcat, 2)
    r = inst.raw_login()
    rows, err, _ = r.simple("PREPARE add1(int) AS SELECT $1 + 1")
    assert err is None
    rows, err, _ = r.simple("EXECUTE add1(41)")
    assert err is None and rows == [["42"]]
    rows, err, _ = r.simple("PREPARE add1(int) AS SELECT $1 + 2")
    assert err and err["C"] == "42P05", err
    # another client, same name: its own
    o = inst.raw_login()
    rows, err, _ = o.simple("EXECUTE add1(1)")
    assert err and err["C"] == "26000", err
    rows, err, _ = o.simple("PREPARE add1(int) AS SELECT $1 * 10")
    assert err is None
    assert o.simple("EXECUTE add1(2)")[0] == [["20"]]
    assert r.simple("EXECUTE add1(2)")[0] == [["3"]]
    # on every server of the pool, through a transaction
    for _ in range(4):
        assert r.simple("BEGIN")[1] is None
        assert r.simple("EXECUTE add1(9)")[0] == [["10"]]
        assert r.simple("COMMIT")[1] is None
    msgs = []
    r.send(pgwire.query("DEALLOCATE add1"))
    msgs = r.read_until()
    assert types_of(msgs) == [b"C", b"Z"] and msgs[0][1] == b"DEALLOCATE\x00", msgs
    rows, err, _ = r.simple("EXECUTE add1(1)")
    assert err and err["C"] == "26000", err
    assert o.simple("EXECUTE add1(3)")[0] == [["30"]]
    # DISCARD ALL forgets the client's statements: PostgreSQL's 26000 after
    rows, err, _ = o.simple("DISCARD ALL")
    assert err is None
    rows, err, _ = o.simple("EXECUTE add1(3)")
    assert err and err["C"] == "26000" and '"add1"' in err["M"], err
    # DEALLOCATE of an unknown name: 26000; DEALLOCATE ALL: fine
    rows, err, _ = o.simple("DEALLOCATE nothere")
    assert err and err["C"] == "26000", err
    o.send(pgwire.query("DEALLOCATE ALL"))
    msgs = o.read_until()
    assert msgs[0] == (b"C", b"DEALLOCATE ALL\x00"), msgs
    # the session is still fine
    assert o.simple("SELECT 5")[0] == [["5"]]
    r.close()
    o.close()


def test_error_in_transaction_block_marks_it_failed(pgcat):
    """pgcat's own errors (unknown statement) inside BEGIN fail the
    transaction on the server too, as PostgreSQL would."""
    inst = small_pool(pgcat, 1)
    r = inst.raw_login()
    assert r.simple("BEGIN")[2] == "T"
    rows, err, status = r.simple("EXECUTE nope")
    assert err and err["C"] == "26000" and status == "E", (err, status)
    rows, err, status = r.simple("SELECT 1")
    assert err and err["C"] == "25P02", err
    rows, err, status = r.simple("ROLLBACK")
    assert err is None and status == "I"
    rows, err, status = raw_exec(r, "nope2")
    assert err and err["C"] == "26000" and status == "I"
    r.close()


def test_unnamed_statement_bound_in_a_later_transaction(pgcat):
    """Parse of the unnamed statement in one Sync, Bind in a later one that
    lands on another server: pgcat replays the Parse there."""
    inst = small_pool(pgcat, 2)
    a = inst.raw_login()
    hold = inst.raw_login()
    a.send(pgwire.parse("SELECT 'unnamed'::text, pg_backend_pid()") + pgwire.sync())
    assert types_of(a.read_until()) == [b"1", b"Z"]
    hold.simple("BEGIN")
    hold.simple("SELECT 1")
    rows, err, _ = raw_exec(a, "")
    assert err is None and rows[0][0] == "unnamed", err
    hold.simple("COMMIT")
    a.close()
    hold.close()


def test_session_mode_passes_names_through(pgcat):
    inst = pgcat(general={"pool_mode": "session", "default_pool_size": 2})
    c = inst.connect(prepare_threshold=0)
    for i in range(5):
        assert c.execute("SELECT %s::int", (i,)).fetchone()[0] == i
    c.close()


def test_bad_prepared_messages_then_normal_client(pgcat):
    inst = small_pool(pgcat, 1)
    r = inst.raw_login()
    # Bind whose statement name has no terminator, Close without a name,
    # Describe of an unknown kind: errors from the server, never a crash.
    r.send(pgwire.msg(b"B", b"\x00unterminated") + pgwire.sync())
    msgs = r.read_until()
    assert msgs and msgs[-1][0] in (b"Z", b"E"), msgs
    r.close()
    c = inst.connect(prepare_threshold=0)
    assert c.execute("SELECT %s::int", (7,)).fetchone()[0] == 7
    c.close()


def close_stmt(r, name):
    r.send(pgwire.msg(b"C", b"S" + pgwire.cstr(name)) + pgwire.sync())
    return r.read_until()


def test_schema_change_then_statement_works_again(pgcat, pg):
    """SPEC §5: a statement prepared before a schema change gets
    PostgreSQL's 0A000 (drivers drop their description on it and prepare
    again); prepared again after it, it works."""
    inst = small_pool(pgcat, 1)
    pg.sql("DROP TABLE IF EXISTS prep_schema; CREATE TABLE prep_schema (a int); INSERT INTO prep_schema VALUES (1); GRANT SELECT ON prep_schema TO app")
    r = inst.raw_login()
    assert types_of(raw_prepare(r, "sel", "SELECT * FROM prep_schema")) == [b"1", b"Z"]
    first = raw_exec(r, "sel")
    assert first[0] == [["1"]], first
    pg.sql("ALTER TABLE prep_schema ADD COLUMN b text DEFAULT 'x'")
    rows, err, _ = raw_exec(r, "sel")
    assert err is not None and err["C"] == "0A000" and "cached plan must not change result type" in err["M"], (rows, err)
    # what pgx and asyncpg do on that error: close, prepare again
    assert types_of(close_stmt(r, "sel")) == [b"3", b"Z"]
    assert types_of(raw_prepare(r, "sel", "SELECT * FROM prep_schema")) == [b"1", b"Z"]
    rows, err, _ = raw_exec(r, "sel")
    assert err is None and rows == [["1", "x"]], (rows, err)
    r.close()
    pg.sql("DROP TABLE prep_schema")


def test_schema_change_with_several_server_connections(pgcat, pg):
    """Every connection of the pool held the old plan. Each client that
    prepared before the change sees PostgreSQL's 0A000 once, as on its own
    session; prepared again, the statement works on every server (stale
    server-side copies are not reused)."""
    inst = small_pool(pgcat, 3)
    pg.sql("DROP TABLE IF EXISTS prep_schema2; CREATE TABLE prep_schema2 (a int); "
           "INSERT INTO prep_schema2 VALUES (1); GRANT SELECT ON prep_schema2 TO app")
    clients = [inst.raw_login() for _ in range(3)]
    for r in clients:
        assert types_of(raw_prepare(r, "sel", "SELECT * FROM prep_schema2")) == [b"1", b"Z"]
    # hold all three servers at once so each prepares the statement
    for r in clients:
        r.simple("BEGIN")
    for r in clients:
        assert raw_exec(r, "sel")[0] == [["1"]]
    for r in clients:
        r.simple("COMMIT")
    pg.sql("ALTER TABLE prep_schema2 ADD COLUMN b text DEFAULT 'y'")
    for r in clients:
        rows, err, _ = raw_exec(r, "sel")
        assert err is not None and err["C"] == "0A000", (rows, err)
        assert types_of(close_stmt(r, "sel")) == [b"3", b"Z"]
        assert types_of(raw_prepare(r, "sel", "SELECT * FROM prep_schema2")) == [b"1", b"Z"]
    for _ in range(3):
        for r in clients:
            r.simple("BEGIN")   # spread over the three servers
        for r in clients:
            rows, err, _ = raw_exec(r, "sel")
            assert err is None and rows == [["1", "y"]], (rows, err)
        for r in clients:
            r.simple("COMMIT")
    for r in clients:
        r.close()
    pg.sql("DROP TABLE prep_schema2")


def test_ddl_through_pgcat_starts_a_schema_generation(pgcat, pg):
    """A client prepared a statement before a DDL statement that another
    client ran through pgcat (on another server): it gets PostgreSQL's
    0A000 where the old copy is used, and a client that prepares after the
    change gets the new result at once, on a server whose copy is stale."""
    inst = small_pool(pgcat, 2)
    pg.sql("DROP TABLE IF EXISTS prep_gen; CREATE TABLE prep_gen (a int); INSERT INTO prep_gen VALUES (1); "
           "ALTER TABLE prep_gen OWNER TO app")
    old = inst.raw_login()
    other = inst.raw_login()
    assert types_of(raw_prepare(old, "s", "SELECT * FROM prep_gen")) == [b"1", b"Z"]
    # both servers get the statement
    old.simple("BEGIN")
    other.simple("BEGIN")
    assert raw_exec(old, "s")[0] == [["1"]]
    assert types_of(raw_prepare(other, "t", "SELECT * FROM prep_gen")) == [b"1", b"Z"]
    assert raw_exec(other, "t")[0] == [["1"]]
    old.simple("COMMIT")
    other.simple("COMMIT")
    ddl = inst.raw_login()
    assert ddl.simple("ALTER TABLE prep_gen ADD COLUMN b int DEFAULT 2")[1] is None
    ddl.close()
    new = inst.raw_login()
    for _ in range(4):
        assert types_of(raw_prepare(new, "n", "SELECT * FROM prep_gen")) == [b"1", b"Z"]
        new.simple("BEGIN")
        rows, err, _ = raw_exec(new, "n")
        assert err is None and rows == [["1", "2"]], (rows, err)
        new.simple("COMMIT")
        assert types_of(close_stmt(new, "n")) == [b"3", b"Z"]
    rows, err, _ = raw_exec(old, "s")
    assert err is not None and err["C"] == "0A000", (rows, err)
    for r in (old, other, new):
        r.close()
    pg.sql("DROP TABLE prep_gen")


def test_psycopg_alter_table_in_transaction(pgcat, pg):
    """psycopg's own test_alter_table_clears_state: inside one transaction
    a prepared SELECT *, ALTER TABLE, the SELECT again (psycopg dropped its
    statements on ALTER and prepares again under the same text)."""
    inst = small_pool(pgcat, 2)
    c = inst.connect(prepare_threshold=0, autocommit=False)
    c.execute("DROP TABLE IF EXISTS testalter")
    c.execute("CREATE TABLE testalter (id serial primary key, data text)")
    c.execute("INSERT INTO testalter (data) values (%s)", ["foo"])
    assert [r[1] for r in c.execute("SELECT * from testalter ORDER BY id").fetchall()] == ["foo"]
    c.execute("ALTER TABLE testalter ADD data2 text")
    c.execute("INSERT INTO testalter (data) values (%s)", ["bar"])
    assert [r[1] for r in c.execute("SELECT * from testalter ORDER BY id").fetchall()] == ["foo", "bar"]
    c.rollback()
    c.close()


def test_psycopg_type_dropped_and_created_again(pgcat, pg):
    """psycopg's own test_change_type*: an enum type dropped and created
    again under a prepared INSERT (autocommit, so each statement may land
    on another server): no 'cache lookup failed for type'."""
    inst = small_pool(pgcat, 2)
    c = inst.connect(prepare_threshold=0, autocommit=True)
    for _ in range(4):
        c.execute("DROP TABLE IF EXISTS preptable")
        c.execute("DROP TYPE IF EXISTS prepenum")
        c.execute("CREATE TYPE prepenum AS ENUM ('foo', 'bar', 'baz')")
        c.execute("CREATE TABLE preptable(id integer, bar prepenum[])")
        c.cursor().execute("INSERT INTO preptable (bar) VALUES (%(e)s::prepenum[])", {"e": ["foo"]})
        c.cursor().executemany("INSERT INTO preptable (bar) VALUES (%(e)s::prepenum[])",
                               [{"e": ["foo"]}, {"e": ["foo", "bar"]}])
    assert c.execute("SELECT count(*) FROM preptable").fetchone()[0] == 3
    c.execute("DROP TABLE preptable")
    c.execute("DROP TYPE prepenum")
    c.close()


def test_psycopg_discard_all_through_extended_protocol(pgcat, pg):
    """psycopg's own test_discard_clears_state: DISCARD ALL arrives as an
    unnamed Parse; the server drops every statement of the session, and
    pgcat must know it."""
    inst = small_pool(pgcat, 1)
    c = inst.connect(prepare_threshold=0, autocommit=True)
    c.execute("DROP TABLE IF EXISTS testdisc")
    c.execute("CREATE TABLE testdisc (id serial primary key, data text)")
    c.execute("INSERT INTO testdisc (data) values (%s)", ["foo"])
    c.execute("DISCARD ALL")
    c.execute("INSERT INTO testdisc (data) values (%s)", ["bar"])
    assert c.execute("SELECT count(*) FROM testdisc").fetchone()[0] == 2
    c.execute("DROP TABLE testdisc")
    c.close()


def test_prepared_statements_switched_off_by_reload(pgcat):
    inst = small_pool(pgcat, 2)
    r = inst.raw_login()
    assert types_of(raw_prepare(r, "k", "SELECT 1")) == [b"1", b"Z"]
    assert raw_exec(r, "k")[0] == [["1"]]
    r.close()
    inst.general["prepared_statements"] = "false"
    inst.write()
    a = admin(inst)
    from test_admin import command
    assert command(a, "RELOAD") is None
    # Off: names go to the server as they are (PgBouncer's behaviour); a
    # session-less name then only works within one transaction.
    r = inst.raw_login()
    r.send(pgwire.query("BEGIN") + pgwire.parse("SELECT 2", "plain") + pgwire.bind(stmt="plain") +
           pgwire.execute() + pgwire.sync())
    msgs = r.read_until((b"Z",))
    msgs += r.read_until((b"Z",))
    assert b"E" not in types_of(msgs), msgs
    r.simple("ROLLBACK")
    r.close()


@pytest.mark.parametrize("workers", [2])
def test_asyncpg_with_several_workers(pgcat, workers):
    inst = small_pool(pgcat, 2, workers=workers)

    async def client(i):
        c = await inst.asyncpg(statement_cache_size=50)
        try:
            for k in range(50):
                assert await c.fetchval("SELECT $1::int + $2::int", i, k) == i + k
        finally:
            await c.close()

    async def main():
        await asyncio.gather(*(client(i) for i in range(12)))
    asyncio.run(main())


@pytest.mark.parametrize("unnamed", [False, True])
def test_statement_missing_on_the_server_fails_once(pgcat, unnamed):
    """A statement pgcat believes a server connection holds is gone there
    (here DEALLOCATEd behind pgcat's back by a function): the next
    execution gets PostgreSQL's 26000, then pgcat prepares afresh on that
    connection instead of failing there until the statement is evicted.
    unnamed: the same through prepare_unnamed (psycopg's unnamed statement
    of a text seen before)."""
    pgc = pgcat(users={"app": {"pool_size": 1}})
    prepare = None if unnamed else True
    with pgc.connect(autocommit=True, prepare_threshold=None if unnamed else 5) as c:
        for _ in range(3):
            assert c.execute("SELECT %s::int + 1", [1], prepare=prepare).fetchone()[0] == 2
        c.execute("DO $$BEGIN EXECUTE 'DEALLOCATE ' || (SELECT name FROM pg_prepared_statements"
                  " WHERE name LIKE 'pgcat%' LIMIT 1); END$$")
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            c.execute("SELECT %s::int + 1", [1], prepare=prepare)
        for _ in range(3):
            assert c.execute("SELECT %s::int + 1", [1], prepare=prepare).fetchone()[0] == 2
    assert "a statement pgcat prepared is missing on the server" in pgc.log()
