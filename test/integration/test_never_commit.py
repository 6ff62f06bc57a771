# SPDX-License-Identifier: MIT
"""What pgcat never does (SPEC §10): commit what a client did not.

A client that leaves (closes its socket, or sends Terminate) while its work
is not committed — the implicit transaction of the extended protocol before
its Sync, a pipeline without Sync, an explicit transaction, a message half
sent, a COPY FROM STDIN under way — has that work rolled back. Each shape
is run against PostgreSQL directly first, which says what must happen, and
then through pgcat in both pool modes, on a pool of one server connection
(so the next client is served by the very server the leaver used); the rows
left in the table must be the same. Cross-shard shapes (a transaction whose
legs are on two shards, a split INSERT before its Sync) run with
two_phase_commit on and off.
"""
import socket
import struct
import time

import pytest

import pgwire
from conftest import PASSWORDS, PgServer, _setup_roles, assert_pool_idle, assert_works, free_port, wait_until


def ins(t, v):
    return "INSERT INTO %s VALUES (%d)" % (t, v)


def pbe(sql):
    return pgwire.parse(sql) + pgwire.bind() + pgwire.execute()


def read_types(r, want, timeout=10):
    """Read messages until every type of `want` (in order) was seen; returns them."""
    got = []
    deadline = time.monotonic() + timeout
    for w in want:
        while True:
            m = r.read_msg(max(0.01, deadline - time.monotonic()))
            assert m is not None, "connection closed while waiting for %r (got %r)" % (w, got)
            got.append(m[0])
            if m[0] == b"E":
                raise AssertionError("unexpected error: %r" % pgwire.parse_fields(m[1]))
            if m[0] == w:
                break
    return got


def leave(r, how):
    if how == "terminate":
        r.try_send(pgwire.terminate())
    r.close()


# Each shape: (steps(r, t), how many rows the client did commit).
def shape_ext_flush(r, t):
    r.send(pbe(ins(t, 1)) + pgwire.flush())
    read_types(r, [b"1", b"2", b"C"])


def shape_pipeline_no_sync(r, t):
    r.send(pbe(ins(t, 1)) + pbe(ins(t, 2)) + pbe(ins(t, 3)) + pgwire.flush())
    read_types(r, [b"C", b"C", b"C"])


def shape_after_a_sync(r, t):
    # The first INSERT's Sync commits it (the client asked); the second has none.
    r.send(pbe(ins(t, 1)) + pgwire.sync() + pbe(ins(t, 2)) + pgwire.flush())
    read_types(r, [b"Z", b"C"])


def shape_explicit_simple(r, t):
    rows, err, status = r.simple("BEGIN; %s" % ins(t, 1))
    assert err is None and status == "T", (err, status)


def shape_explicit_extended(r, t):
    r.send(pbe("BEGIN") + pgwire.sync())
    read_types(r, [b"Z"])
    r.send(pbe(ins(t, 1)) + pgwire.sync())
    read_types(r, [b"Z"])


def shape_explicit_extended_no_sync(r, t):
    r.send(pbe("BEGIN") + pgwire.sync())
    read_types(r, [b"Z"])
    r.send(pbe(ins(t, 1)) + pgwire.flush())
    read_types(r, [b"C"])


def shape_half_sent(r, t):
    r.send(pbe(ins(t, 1)) + pgwire.flush())
    read_types(r, [b"C"])
    q = pgwire.query(ins(t, 2))
    r.send(q[:7])   # the header and two bytes of a Query


def shape_half_sent_sync(r, t):
    # Everything but the last byte of a Sync: not a Sync.
    r.send(pbe(ins(t, 1)) + pgwire.flush())
    read_types(r, [b"C"])
    r.send(pgwire.sync()[:4])


def shape_copy_simple(r, t):
    r.send(pgwire.query("COPY %s FROM STDIN" % t))
    read_types(r, [b"G"])
    r.send(pgwire.msg(b"d", b"1\n2\n3\n"))


def shape_copy_extended(r, t):
    r.send(pbe("COPY %s FROM STDIN" % t) + pgwire.flush())
    read_types(r, [b"G"])
    r.send(pgwire.msg(b"d", b"1\n2\n3\n"))


def shape_copy_extended_sync_first(r, t):
    # psycopg's and libpq's way: the Sync right behind Execute; PostgreSQL
    # ignores a Sync during COPY FROM STDIN, so the COPY is still open.
    r.send(pbe("COPY %s FROM STDIN" % t) + pgwire.sync())
    read_types(r, [b"G"])
    r.send(pgwire.msg(b"d", b"1\n2\n3\n"))


def shape_copy_done_no_sync(r, t):
    # CopyDone ends the COPY, but its extended request still waits for Sync.
    r.send(pbe("COPY %s FROM STDIN" % t) + pgwire.flush())
    read_types(r, [b"G"])
    r.send(pgwire.msg(b"d", b"1\n2\n3\n") + pgwire.msg(b"c") + pgwire.flush())
    read_types(r, [b"C"])


SHAPES = {
    "ext_flush": shape_ext_flush,
    "pipeline_no_sync": shape_pipeline_no_sync,
    "after_a_sync": shape_after_a_sync,
    "explicit_simple": shape_explicit_simple,
    "explicit_extended": shape_explicit_extended,
    "explicit_extended_no_sync": shape_explicit_extended_no_sync,
    "half_sent": shape_half_sent,
    "half_sent_sync": shape_half_sent_sync,
    "copy_simple": shape_copy_simple,
    "copy_extended": shape_copy_extended,
    "copy_extended_sync_first": shape_copy_extended_sync_first,
    "copy_done_no_sync": shape_copy_done_no_sync,
}


def rows_of(pg, t, db="appdb"):
    return sorted(r[0] for r in pg.sql("SELECT a FROM %s" % t, dbname=db))


def settle(pg, t, db="appdb", user="app"):
    """PostgreSQL (or pgcat's rollback) has ended the leaver's transaction:
    no backend of the role is inside one, nothing holds the table's lock."""
    def quiet():
        return not [b for b in pg.backends(user, db) if b[3] not in ("idle",)]
    wait_until(quiet, 15, msg="the leaver's transaction ended")


def direct_login(pg, db="appdb"):
    r = pgwire.Raw(pg.host, pg.port)
    r.login("app", PASSWORDS["app"], db)
    return r


@pytest.fixture(scope="module")
def postgres_says(pg):
    """What PostgreSQL itself keeps of each shape: {(shape, how): rows}."""
    out = {}
    with pg.connect() as c:
        for name, fn in SHAPES.items():
            for how in ("close", "terminate"):
                t = "nc_direct_%s_%s" % (name, how)
                c.execute("DROP TABLE IF EXISTS %s" % t)
                c.execute("CREATE TABLE %s (a int)" % t)
                c.execute("GRANT ALL ON %s TO PUBLIC" % t)
                r = direct_login(pg)
                fn(r, t)
                leave(r, how)
                wait_until(lambda: not [b for b in pg.backends("app", "appdb")], 15,
                           msg="PostgreSQL ended the backend of %s" % name)
                out[(name, how)] = rows_of(pg, t)
                c.execute("DROP TABLE %s" % t)
    return out


@pytest.mark.parametrize("mode", ["transaction", "session"])
@pytest.mark.parametrize("how", ["close", "terminate"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_leaver_work_not_committed(pgcat, pg, table, postgres_says, name, how, mode):
    expected = postgres_says[(name, how)]
    # PostgreSQL commits only what the client ended with its own Sync.
    assert expected == ([1] if name == "after_a_sync" else []), expected
    t = table("a int")
    p = pgcat(general={"pool_mode": mode}, users={"app": {"pool_size": 1}})
    r = p.raw_login()
    SHAPES[name](r, t)
    leave(r, how)
    # The next client of that one server connection sees exactly what
    # PostgreSQL kept, and the server went back to the pool usable.
    with p.connect() as c:
        got = sorted(x[0] for x in c.execute("SELECT a FROM %s" % t).fetchall())
        assert c.execute("SELECT pg_catalog.txid_current_if_assigned() IS NULL").fetchone()[0]
    assert got == expected, "through pgcat %r, PostgreSQL itself keeps %r" % (got, expected)
    # Later too: nothing of the leaver commits behind the next client's back.
    time.sleep(0.3)
    assert rows_of(pg, t) == expected
    assert_pool_idle(pg, max_conns=1)
    assert_works(p)


# --- cross-shard: every leg rolled back -------------------------------------------

@pytest.fixture(scope="module")
def tpc_server(pg_root):
    """A server of this module's own with max_prepared_transactions > 0 and
    two shard databases holding table ledger (id bigint, amount bigint)."""
    s = PgServer(pg_root, "nc2pc-%d" % free_port())
    s.initdb()
    with open(s.datadir / "postgresql.conf", "a") as f:
        f.write("max_prepared_transactions = 16\n")
    s.start()
    try:
        _setup_roles(s)
        for db in ("shard0", "shard1"):
            with s.connect(db) as c:
                c.execute("CREATE TABLE ledger (id bigint, amount bigint)")
                c.execute("GRANT ALL ON ledger TO PUBLIC")
                c.execute("CREATE TABLE hp (id bigint) PARTITION BY HASH (id)")
        with s.connect("shard0") as c:
            keys = [c.execute("SELECT g FROM generate_series(1, 100) g WHERE "
                              "satisfies_hash_partition('hp'::regclass, 2, %d, g::bigint) LIMIT 1" % i).fetchone()[0]
                    for i in (0, 1)]
        s.keys = keys
        yield s
    finally:
        s.stop()


def sharded(pgcat, s, tmp_path, two_phase, mode="transaction"):
    g = {"two_phase_commit": "true" if two_phase else "false", "state_dir": str(tmp_path / "state"),
         "pool_mode": mode, "prepared_statements": "true"}
    pool = {
        "query_parser_enabled": "true",
        "sharding_function": "pg_bigint_hash",
        "sharded_tables": "ledger.id",
        "default_shard": "0",
        "shards": {i: {"database": "shard%d" % i, "servers": "127.0.0.1:%d:primary" % s.port} for i in (0, 1)},
        "users": {"app": {"password": PASSWORDS["app"], "pool_size": "2"}},
    }
    return pgcat(general=g, pools={"sh": pool})


def ledger_rows(s):
    return {db: s.sql("SELECT id, amount FROM ledger ORDER BY id", dbname=db) for db in ("shard0", "shard1")}


def ledger_empty(s):
    for db in ("shard0", "shard1"):
        s.sql("TRUNCATE ledger", dbname=db)
        for (gid,) in s.sql("SELECT gid FROM pg_prepared_xacts", dbname=db) or []:
            s.sql("ROLLBACK PREPARED '%s'" % gid, dbname=db)


def xshard_split_in_transaction(r, s):
    a, b = s.keys
    rows, err, status = r.simple("BEGIN")
    assert err is None and status == "T", (err, status)
    rows, err, status = r.simple("INSERT INTO ledger (id, amount) VALUES (%d, 1), (%d, 2)" % (a, b))
    assert err is None and status == "T", (err, status)


def xshard_two_statements(r, s):
    # Only with two_phase_commit: the transaction goes on to the second shard.
    a, b = s.keys
    for sql in ("BEGIN", "INSERT INTO ledger (id, amount) VALUES (%d, 1)" % a,
                "INSERT INTO ledger (id, amount) VALUES (%d, 2)" % b):
        rows, err, status = r.simple(sql)
        assert err is None and status == "T", (sql, err, status)


def xshard_split_no_sync(r, s):
    a, b = s.keys
    r.send(pbe("INSERT INTO ledger (id, amount) VALUES (%d, 1), (%d, 2)" % (a, b)) + pgwire.flush())
    # The split write may answer only at its Sync; give it time to reach the shards.
    time.sleep(0.5)


def xshard_keyed_no_sync(r, s):
    a, _ = s.keys
    r.send(pbe("INSERT INTO ledger (id, amount) VALUES (%d, 1)" % a) + pgwire.flush())
    read_types(r, [b"C"])


XSHAPES = {
    "split_in_transaction": xshard_split_in_transaction,
    "two_statements": xshard_two_statements,
    "split_no_sync": xshard_split_no_sync,
    "keyed_no_sync": xshard_keyed_no_sync,
}


# A transaction goes on to a second shard statement by statement only with
# two_phase_commit (without it the second statement is refused).
XCASES = [(n, tp) for n in sorted(XSHAPES) for tp in (True, False) if tp or n != "two_statements"]


@pytest.mark.parametrize("how", ["close", "terminate"])
@pytest.mark.parametrize("name,two_phase", XCASES, ids=["%s-%s" % (n, "2pc" if tp else "no2pc") for n, tp in XCASES])
def test_leaver_cross_shard_not_committed(pgcat, tpc_server, tmp_path, name, how, two_phase):
    s = tpc_server
    ledger_empty(s)
    p = sharded(pgcat, s, tmp_path, two_phase)
    r = p.raw_login(dbname="sh")
    XSHAPES[name](r, s)
    leave(r, how)

    def ended():
        return not [b for b in s.backends("app") if b[3] != "idle"]
    wait_until(ended, 15, msg="every leg's transaction ended")
    time.sleep(0.3)
    assert ledger_rows(s) == {"shard0": [], "shard1": []}
    assert s.sql("SELECT gid FROM pg_prepared_xacts", dbname="postgres") == []
    # The pool still serves, on every shard.
    with p.connect(dbname="sh") as c:
        a, b = s.keys
        c.execute("INSERT INTO ledger (id, amount) VALUES (%d, 5)" % a)
        c.execute("INSERT INTO ledger (id, amount) VALUES (%d, 6)" % b)
    assert ledger_rows(s) == {"shard0": [(a, 5)], "shard1": [(b, 6)]}


# The single-server shapes once more on a sharded pool, where the client's
# work runs on default_shard, with two_phase_commit on and off: the same
# drain, whatever the pool.
@pytest.mark.parametrize("two_phase", [True, False], ids=["2pc", "no2pc"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_leaver_on_a_sharded_pool_not_committed(pgcat, tpc_server, tmp_path, postgres_says, name, two_phase):
    s = tpc_server
    t = "nc_%s" % name
    for db in ("shard0", "shard1"):
        s.sql("DROP TABLE IF EXISTS %s; CREATE TABLE %s (a int); GRANT ALL ON %s TO PUBLIC" % (t, t, t), dbname=db)
    p = sharded(pgcat, s, tmp_path, two_phase)
    r = p.raw_login(dbname="sh")
    SHAPES[name](r, t)
    leave(r, "close")

    def ended():
        return not [b for b in s.backends("app") if b[3] != "idle"]
    wait_until(ended, 15, msg="the leaver's transaction ended")
    time.sleep(0.3)
    got = {db: sorted(x[0] for x in s.sql("SELECT a FROM %s" % t, dbname=db)) for db in ("shard0", "shard1")}
    assert got == {"shard0": postgres_says[(name, "close")], "shard1": []}, got
    assert s.sql("SELECT gid FROM pg_prepared_xacts", dbname="postgres") == []
    with p.connect(dbname="sh") as c:
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == len(postgres_says[(name, "close")])
