# SPDX-License-Identifier: MIT
"""COPY through pgcat (SPEC §3.5): FROM STDIN and TO STDOUT in text, CSV and
binary, CopyFail from the client, an error in the middle of a COPY; the
server connection stays with the client for the whole COPY and is returned
clean afterwards."""
import threading

import pytest
from psycopg import errors

import pgwire
from conftest import assert_pool_idle, assert_works

MODES = ["transaction", "session"]
ROWS = [(i, "text %d with\ttab and \\ backslash" % i, i * 1.5) for i in range(1000)]


@pytest.mark.parametrize("mode", MODES)
def test_copy_in_text_and_out_text(pgcat, pg, table, mode):
    t = table("id int, s text, f float8")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 1})
    with p.connect() as c:
        with c.cursor().copy("COPY %s (id, s, f) FROM STDIN" % t) as cp:
            for row in ROWS:
                cp.write_row(row)
        assert c.execute("SELECT count(*), sum(id) FROM %s" % t).fetchone() == (1000, sum(range(1000)))
        out = []
        with c.cursor().copy("COPY (SELECT id, s, f FROM %s ORDER BY id) TO STDOUT" % t) as cp:
            for row in cp.rows():
                out.append(row)
        assert [(int(a), b, float(f)) for a, b, f in out] == ROWS
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 1000
    assert_pool_idle(pg, max_conns=1)


def test_copy_csv_in_and_out(pgcat, pg, table):
    t = table("id int, s text")
    p = pgcat()
    data = "".join('%d,"quoted, with comma %d"\n' % (i, i) for i in range(500)).encode()
    with p.connect() as c:
        with c.cursor().copy("COPY %s FROM STDIN (FORMAT csv)" % t) as cp:
            cp.write(data[:1000])
            cp.write(data[1000:])
        buf = b""
        with c.cursor().copy("COPY (SELECT * FROM %s ORDER BY id) TO STDOUT (FORMAT csv)" % t) as cp:
            while True:
                chunk = cp.read()
                if not chunk:
                    break
                buf += bytes(chunk)
    assert buf == data
    assert_pool_idle(pg)


def test_copy_binary_in_and_out(pgcat, pg, table):
    t = table("id int8, s text, b bytea")
    p = pgcat()
    rows = [(i, "s%d" % i, bytes([i % 256]) * 100) for i in range(300)]
    with p.connect() as c:
        with c.cursor().copy("COPY %s FROM STDIN (FORMAT binary)" % t) as cp:
            cp.set_types(["int8", "text", "bytea"])
            for row in rows:
                cp.write_row(row)
        with c.cursor().copy("COPY (SELECT * FROM %s ORDER BY id) TO STDOUT (FORMAT binary)" % t) as cp:
            cp.set_types(["int8", "text", "bytea"])
            got = [(a, b, bytes(bb)) for a, b, bb in cp.rows()]
    assert got == rows
    assert_pool_idle(pg)


@pytest.mark.parametrize("mode", MODES)
def test_copy_fail_from_client(pgcat, pg, table, mode):
    t = table("id int")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 1})

    class Boom(Exception):
        pass
    with p.connect() as c:
        with pytest.raises(Boom):
            with c.cursor().copy("COPY %s FROM STDIN" % t) as cp:
                cp.write_row((1,))
                cp.write_row((2,))
                raise Boom("client gives up")   # psycopg sends CopyFail
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 0
        assert c.execute("SELECT 1").fetchone()[0] == 1
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0
    assert_pool_idle(pg, max_conns=1)


@pytest.mark.parametrize("mode", MODES)
def test_error_in_the_middle_of_copy_in(pgcat, pg, table, mode):
    t = table("id int")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 1})
    with p.connect() as c:
        with pytest.raises(errors.InvalidTextRepresentation):
            with c.cursor().copy("COPY %s FROM STDIN" % t) as cp:
                cp.write(b"1\n2\n")
                cp.write(b"not a number\n")
                cp.write(b"".join(b"%d\n" % i for i in range(10000)))
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 0
    assert_works(p)
    assert_pool_idle(pg, max_conns=1)


def test_error_in_the_middle_of_copy_out(pgcat, pg):
    p = pgcat(general={"default_pool_size": 1})
    with p.connect() as c:
        got = 0
        with pytest.raises(errors.DivisionByZero):
            with c.cursor().copy("COPY (SELECT 10 / (5000 - i) FROM generate_series(1, 10000) i) "
                                 "TO STDOUT") as cp:
                for _ in cp.rows():
                    got += 1
        assert got < 10000
        assert c.execute("SELECT 1").fetchone()[0] == 1
    assert_pool_idle(pg, max_conns=1)


def test_copy_in_a_transaction_then_rollback(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"default_pool_size": 1})
    with p.connect(autocommit=False) as c:
        with c.cursor().copy("COPY %s FROM STDIN" % t) as cp:
            cp.write(b"".join(b"%d\n" % i for i in range(100)))
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 100
        c.rollback()
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0
    assert_pool_idle(pg, max_conns=1)


def test_concurrent_copies_share_one_server(pgcat, pg, table):
    """Transaction mode, pool_size 1: each COPY keeps the server to itself."""
    t = table("who int, id int")
    p = pgcat(general={"default_pool_size": 1})
    errs = []

    def writer(w):
        try:
            with p.connect() as c:
                for _ in range(5):
                    with c.cursor().copy("COPY %s FROM STDIN" % t) as cp:
                        for i in range(0, 2000, 100):
                            cp.write(b"".join(b"%d\t%d\n" % (w, j) for j in range(i, i + 100)))
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))
    ts = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(120)
    assert not errs, errs
    counts = dict(pg.sql("SELECT who, count(*) FROM %s GROUP BY who" % t))
    assert counts == {0: 10000, 1: 10000, 2: 10000, 3: 10000}
    assert_pool_idle(pg, max_conns=1)


def test_psql_copy(pgcat, pg, table, tmp_path):
    t = table("id int, s text")
    p = pgcat()
    src = tmp_path / "in.csv"
    src.write_text("".join("%d,row %d\n" % (i, i) for i in range(250)))
    p.psql(r"\copy %s FROM '%s' WITH (FORMAT csv)" % (t, src))
    out = p.psql(r"\copy (SELECT * FROM %s ORDER BY id) TO STDOUT WITH (FORMAT csv)" % t).stdout
    assert out == src.read_text()
    assert_pool_idle(pg)


def test_large_copy_in(pgcat, pg, table):
    t = table("s text")
    p = pgcat()
    line = b"x" * 4000 + b"\n"
    with p.connect() as c:
        with c.cursor().copy("COPY %s FROM STDIN" % t) as cp:
            for _ in range(50):
                cp.write(line * 100)       # 20 MB in 400 kB pieces
    assert pg.sql("SELECT count(*), sum(length(s)) FROM %s" % t)[0] == (5000, 5000 * 4000)
    assert_pool_idle(pg)


@pytest.mark.parametrize("mode", MODES)
def test_copy_fail_raw(pgcat, pg, table, mode):
    """CopyFail answered as PostgreSQL does: ErrorResponse 57014, then ReadyForQuery."""
    t = table("id int")
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 1})
    r = p.raw_login()
    r.send(pgwire.query("COPY %s FROM STDIN" % t))
    assert r.read_msg()[0] == b"G"                       # CopyInResponse
    r.send(pgwire.msg(b"d", b"1\n2\n") + pgwire.msg(b"f", pgwire.cstr("client gives up")))
    rows, err, status = r.collect()
    assert err is not None and err["C"] == "57014", err
    assert "client gives up" in err["M"]
    assert status == "I"
    assert r.simple("SELECT 1")[0] == [["1"]]
    r.close()
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 0
    assert_pool_idle(pg, max_conns=1)


def _pbe(sql):
    return pgwire.parse(sql) + pgwire.bind() + pgwire.execute()


@pytest.mark.parametrize("prepared", [False, True], ids=["plain", "prepared_statements"])
@pytest.mark.parametrize("shape", ["sync_first", "flush_first", "one_write"])
def test_copy_in_by_execute_then_pool_reuse(pgcat, pg, table, prepared, shape):
    """COPY FROM STDIN by the extended protocol, as libpq's PQexecParams
    sends it: Parse/Bind/Execute and a Sync right behind, which PostgreSQL
    ignores while it reads the data; the request ends at the Sync after
    CopyDone. The server goes back to the pool at that ReadyForQuery (a
    second client of the one server connection is served at once), and the
    statements that follow on the same client are answered in order."""
    t = table("a int")
    p = pgcat(general={"prepared_statements": "true" if prepared else "false"},
              users={"app": {"pool_size": 1}})
    r = p.raw_login()
    data = pgwire.msg(b"d", b"1\n2\n3\n") + pgwire.msg(b"c") + pgwire.sync()
    if shape == "sync_first":
        r.send(_pbe("COPY %s FROM STDIN" % t) + pgwire.sync())
        assert [m[0] for m in r.read_until((b"G",))] == [b"1", b"2", b"G"]
        r.send(data)
    elif shape == "flush_first":
        r.send(_pbe("COPY %s FROM STDIN" % t) + pgwire.flush())
        assert [m[0] for m in r.read_until((b"G",))] == [b"1", b"2", b"G"]
        r.send(data)
    else:
        # everything in one write, before the server said it is a COPY
        r.send(_pbe("COPY %s FROM STDIN" % t) + pgwire.sync() + data)
        assert [m[0] for m in r.read_until((b"G",))] == [b"1", b"2", b"G"]
    msgs = r.read_until()
    assert [m[0] for m in msgs] == [b"C", b"Z"], msgs
    assert msgs[0][1] == b"COPY 3\x00" and msgs[1][1] == b"I"
    # The one server connection is free: another client gets it now.
    with p.connect(connect_timeout=5) as c:
        c.execute("SET statement_timeout = '3s'")
        assert c.execute("SELECT count(*) FROM %s" % t).fetchone()[0] == 3
    # The first client goes on: a named statement and a query, in order.
    r.send(pgwire.parse("SELECT count(*) FROM %s" % t, name="cnt") + pgwire.bind(stmt="cnt") +
           pgwire.execute() + pgwire.sync())
    msgs = r.read_until()
    assert [m[0] for m in msgs] == [b"1", b"2", b"D", b"C", b"Z"], msgs
    assert pgwire.data_row_values(msgs[2][1]) == ["3"]
    rows, err, status = r.simple("SELECT 42")
    assert err is None and rows == [["42"]] and status == "I"
    r.close()
    assert_pool_idle(pg, max_conns=1)
    assert_works(p)
