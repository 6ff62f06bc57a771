# SPDX-License-Identifier: MIT
"""Statement pooling (pool_mode = statement, PgBouncer's): a server goes back
to the pool after every statement, and a transaction block is refused: the
server that reported it is closed (PostgreSQL rolls the block back) and its
client is closed with PgBouncer's FATAL "transaction blocks not allowed in
statement pooling mode". A multi-statement Query is one implicit
transaction and runs. Everything else behaves as in transaction mode."""
import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, assert_pool_idle, assert_works, default_general, default_pools, render_pgbouncer
from test_admin import admin, show
from test_pgbouncer_ini import start_on

REFUSED = "transaction blocks not allowed in statement pooling mode"


def one_server(pgcat, **general):
    g = {"pool_mode": "statement", "default_pool_size": 1}
    g.update(general)
    return pgcat(general=g)


def rows_of(pg, table):
    return sorted(r[0] for r in pg.sql("SELECT a FROM %s" % table))


def test_clients_share_one_server_statement_by_statement(pgcat, pg):
    p = one_server(pgcat)
    conns = [p.connect() for _ in range(3)]
    try:
        pids = set()
        for _ in range(3):
            for c in conns:
                pids.add(c.execute("SELECT pg_backend_pid()").fetchone()[0])
        assert len(pids) == 1, "three clients of a one-server pool used %r" % pids
    finally:
        for c in conns:
            c.close()
    r = admin(p)
    _, pools = show(r, "POOLS")
    r.close()
    modes = {row["pool_mode"] for row in pools if row["database"] == "appdb"}
    assert modes == {"statement"}, pools


@pytest.mark.parametrize("how", ["query", "extended", "driver", "begin_and_insert"])
def test_transaction_block_refused_and_rolled_back(pgcat, pg, table, how):
    t = table("a int")
    p = one_server(pgcat)
    if how == "driver":
        # psycopg outside autocommit opens its transaction with BEGIN. Its
        # CommandComplete reaches psycopg before the FATAL, which psycopg
        # reports as two results of its BEGIN; the connection is gone.
        c = p.connect(autocommit=False)
        with pytest.raises(psycopg.Error):
            c.execute("INSERT INTO %s VALUES (1)" % t)
        assert c.closed or c.broken
        c.close()
    else:
        r = p.raw()
        r.login("app", PASSWORDS["app"], "appdb")
        if how == "query":
            r.send(pgwire.query("BEGIN"))
        elif how == "extended":
            r.send(pgwire.parse("BEGIN") + pgwire.bind() + pgwire.execute() + pgwire.sync())
        else:
            r.send(pgwire.query("BEGIN; INSERT INTO %s VALUES (1)" % t))
        msgs = r.read_until((b"Z",))
        errs = [pgwire.parse_fields(m[1]) for m in msgs if m[0] == b"E"]
        assert errs, "no error for a transaction block: %r" % msgs
        assert errs[-1]["S"] == "FATAL" and errs[-1]["C"] == "08P01" and errs[-1]["M"] == REFUSED, errs
        assert not any(m[0] == b"Z" for m in msgs), "the client was told it may go on: %r" % msgs
        assert r.read_msg(2) is None, "the refused client's connection stays open"
        r.close()
    assert rows_of(pg, t) == [], "the refused transaction block left rows"
    # The pool's one server was closed with the block; the next client is
    # served, outside any transaction.
    with p.connect() as c:
        assert c.execute("SELECT now() = statement_timestamp(), 1").fetchone() == (True, 1)
    assert_works(p)
    assert_pool_idle(pg, max_conns=1)
    assert REFUSED in p.log()


def test_one_query_of_several_statements_runs(pgcat, pg, table):
    """A Query of several statements is one implicit transaction, not a
    block: it runs, as on PgBouncer."""
    t = table("a int")
    p = one_server(pgcat)
    with p.connect() as c:
        c.execute("INSERT INTO %s VALUES (1); INSERT INTO %s VALUES (2)" % (t, t))
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 2
    assert rows_of(pg, t) == [1, 2]


def test_prepared_statements_across_clients(pgcat, pg):
    """Named prepared statements are kept per client as in transaction mode,
    while clients take turns on the same server."""
    p = one_server(pgcat)
    a, b = p.connect(), p.connect()
    try:
        for i in range(5):
            assert a.execute("SELECT %s::int + 1", (i,), prepare=True).fetchone()[0] == i + 1
            assert b.execute("SELECT %s::text || 'x'", (str(i),), prepare=True).fetchone()[0] == "%dx" % i
    finally:
        a.close()
        b.close()
    assert_works(p)


def test_pgbouncer_ini_statement_default_and_user_override(pgcat, pg):
    """PgBouncer's own test.ini shape: pool_mode = statement for all, one
    user back in session mode by [users]."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["pool_mode"] = "statement"
    text = render_pgbouncer(g, default_pools(pg), inst.workdir) + "[users]\nmd5user = pool_mode=session\n"
    start_on(inst, text)
    with inst.connect("app") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    with inst.connect("app") as c:
        with pytest.raises(psycopg.OperationalError) as ei:
            c.execute("BEGIN")
        assert REFUSED in str(ei.value)
    with inst.connect("md5user", autocommit=False) as c:
        assert c.execute("SELECT 2").fetchone()[0] == 2
        c.commit()


def test_console_set_pool_mode_reaches_the_pools(pgcat, pg):
    """SET pool_mode on the console changes the pools that set none of their
    own, as on PgBouncer (its test suite switches modes so)."""
    p = pgcat(general={"pool_mode": "transaction"}, pools={"own": {
        "pool_mode": "transaction",
        "shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg.port}},
        "users": {"app": {"password": PASSWORDS["app"]}}}})
    r = admin(p)
    assert r.simple("SET pool_mode = statement")[1] is None
    with p.connect() as c:
        with pytest.raises(psycopg.OperationalError, match=REFUSED):
            c.execute("BEGIN")
    with p.connect(dbname="own", autocommit=False) as c:    # its own mode stays
        assert c.execute("SELECT 1").fetchone()[0] == 1
        c.commit()
    assert r.simple("SET pool_mode = transaction")[1] is None
    with p.connect(autocommit=False) as c:
        assert c.execute("SELECT 2").fetchone()[0] == 2
        c.commit()
    r.close()
