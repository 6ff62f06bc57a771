# SPDX-License-Identifier: MIT
"""Prepared statements in pipelines (SPEC §5): a client may send several
segments (each ended by a Sync) before the first is answered, and an error
in a segment makes PostgreSQL skip the rest of that segment. pgcat sends its
own Parses and Closes of the pool's statements ahead of the replies, so what
a server holds is settled only when they are answered. Whatever the
interleaving, the client must get exactly the replies PostgreSQL itself
gives: checked message by message against a direct session, on random
pipelines, with a server-side cache small enough to evict."""
import os
import random

import pytest

import pgwire
from conftest import PASSWORDS
from test_prepare_unnamed import direct, pool

TEXTS = ["select $1::int + %d" % k for k in range(4)] + ["select 10 / ($1::int - $1::int)"]
INS = "insert into pipeline_abort values ($1)"


def login(inst):
    r = pgwire.Raw("127.0.0.1", inst.port)
    r.login("app", PASSWORDS["app"], "appdb")
    return r


def shape(msgs):
    """A reply as the client sees it: types, SQLSTATEs and row values."""
    out = []
    for t, p in msgs:
        if t == b"E":
            out.append("E:" + pgwire.parse_fields(p).get("C", "?"))
        elif t == b"D":
            out.append("D" + repr(pgwire.data_row_values(p)))
        else:
            out.append(t.decode())
    return out


def run(r, segs):
    r.send(b"".join(segs))
    return [shape(r.read_until()) for _ in segs]


def unnamed(sql, v):
    return pgwire.parse(sql) + pgwire.bind([v]) + pgwire.execute()


def random_pipeline(rng):
    """1 to 4 segments of unnamed and named statements, some failing (a
    value that is not a number, a division by zero, a name not prepared).
    A client's named Parse and Close come only in the last segment: an
    earlier one's outcome is not known when later segments are sent, and
    pgcat answers for client names at once (doc/prepared-statements.md)."""
    segs = []
    n = rng.randint(1, 4)
    for j in range(n):
        m = b""
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if j < n - 1 and (0.45 <= op < 0.6 or 0.8 <= op < 0.9):
                op = 0.7 if rng.random() < 0.5 else 0.2
            text = TEXTS[rng.randrange(len(TEXTS))]
            name = "s%d" % rng.randrange(3)
            v = str(rng.randint(0, 9))
            if op < 0.45:
                m += unnamed(text, v)
            elif op < 0.6:
                m += pgwire.parse(text, name=name)
            elif op < 0.8:
                m += pgwire.bind([v], stmt=name) + pgwire.execute()
            elif op < 0.9:
                m += pgwire.close(b"S", name)
            elif op < 0.95:
                m += unnamed(text, "x")
            else:
                m += pgwire.bind(["x"], stmt=name) + pgwire.execute()
        segs.append(m + pgwire.sync())
    return segs


@pytest.mark.parametrize("size,cache", [(1, 2), (2, 3), (1, 100)])
def test_random_pipelines_get_postgresql_replies(pgcat, pg, size, cache):
    inst = pool(pgcat, size, prepared_statements_cache_size=cache)
    for seed in range(8):
        rng = random.Random(seed)
        clients = [(login(inst), direct(pg)) for _ in range(2)]
        for i in range(120):
            via, ref = clients[rng.randrange(2)]
            segs = random_pipeline(rng)
            want = run(ref, segs)
            assert run(via, segs) == want, ("seed", seed, "pipeline", i)
        for via, ref in clients:
            via.close()
            ref.close()


def test_statement_parsed_in_a_failed_segment_is_parsed_again(pgcat):
    """The case of psycopg's test_pipeline_abort: an INSERT never seen
    before, parsed again in the segment an error aborts (pgcat sends it as
    the pool's named statement then, and the server skips it), then used in
    the next segment, sent before the first is answered."""
    inst = pool(pgcat, 1)
    r = login(inst)
    _, err, _ = r.simple("DROP TABLE IF EXISTS pipeline_abort; CREATE TABLE pipeline_abort (x int)")
    assert err is None, err
    for k in range(3):
        first = unnamed(INS, "1") + unnamed("select no_such_function($1)", "1") + unnamed(INS, "2") + pgwire.sync()
        second = unnamed(INS, "3") + pgwire.sync()
        a, b = run(r, [first, second])
        assert a == ["1", "2", "C", "E:42883", "Z"], (k, a)
        assert b == ["1", "2", "C", "Z"], (k, b)
    rows, err, _ = r.simple("SELECT x FROM pipeline_abort ORDER BY x")
    assert err is None, err
    # (the first segment is one implicit transaction: its error undoes the 1)
    assert [int(x[0]) for x in rows] == [3, 3, 3]


def test_skipped_close_keeps_the_client_name(pgcat, pg):
    """A Close of a client's statement after an error in its segment is
    skipped: the name is still there, as PostgreSQL says."""
    inst = pool(pgcat, 1)
    via, ref = login(inst), direct(pg)
    for r in (via, ref):
        seg = pgwire.parse("select $1::int", name="keep") + pgwire.sync()
        assert run(r, [seg]) == [["1", "Z"]]
    seg = unnamed("select $1::int", "x") + pgwire.close(b"S", "keep") + pgwire.sync()
    again = pgwire.bind(["7"], stmt="keep") + pgwire.execute() + pgwire.sync()
    for r in (via, ref):
        assert run(r, [seg]) == [["1", "E:22P02", "Z"]]
        assert run(r, [again]) == [["2", "D['7']", "C", "Z"]]
