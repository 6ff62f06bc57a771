# SPDX-License-Identifier: MIT
"""A cross-shard read costs pgcat a bounded amount of memory whatever the
size of its result (SPEC §10): two shards of about 50 MB each are read
through pgcat, plain, ORDER BY, ORDER BY ... LIMIT, and as a named portal
in parts, by a client that reads at once and by one that reads slowly.
Every answer is checked row by row against what the shards hold; pgcat's
resident memory is sampled while it streams, and may grow by a few MB, not
by the size of the result. What must be held whole (DISTINCT, GROUP BY)
is bounded by cross_shard_max_memory and fails with 54000 beyond it,
leaving every shard's server clean."""
import hashlib
import socket
import struct
import threading
import time

import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, assert_works, wait_until
from test_fault_injection import small_quarantine_env

SHARDS = ("xmem0", "xmem1")
ROWS = 50000          # per shard
# ~1 kB a row: 31 md5 texts of the row's id, which the reader checks
PAD_REPEAT = 31
GROWTH_MB = 6         # what pgcat's RSS may grow by while it streams 100 MB


def pad_of(i):
    return hashlib.md5(str(i).encode()).hexdigest() * PAD_REPEAT


@pytest.fixture(scope="module")
def xmem(pg):
    with pg.connect("postgres") as c:
        for db in SHARDS:
            if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
                c.execute("CREATE DATABASE %s" % db)
    for i, db in enumerate(SHARDS):
        with pg.connect(db) as c:
            c.execute("DROP TABLE IF EXISTS big")
            c.execute("CREATE TABLE big (id bigint PRIMARY KEY, pad text)")
            c.execute("GRANT SELECT ON big TO PUBLIC")
            # shard i holds the ids 2g + i: an ORDER BY id merge alternates
            c.execute("INSERT INTO big SELECT 2 * g + %d, repeat(md5((2 * g + %d)::text), %d) "
                      "FROM generate_series(0, %d) g" % (i, i, PAD_REPEAT, ROWS - 1))
            c.execute("VACUUM ANALYZE big")
    yield pg
    for db in SHARDS:
        with pg.connect(db) as c:
            c.execute("DROP TABLE IF EXISTS big")


def start(pgcat, pg, general=None):
    g = {"prepared_statements": "true"}
    g.update(general or {})
    pool = {
        "query_parser_enabled": "true",
        "sharding_function": "pg_bigint_hash",
        "sharded_tables": "big.id",
        "default_shard": "0",
        "shards": {i: {"database": db, "servers": "127.0.0.1:%d:primary" % pg.port} for i, db in enumerate(SHARDS)},
        "users": {"app": {"password": PASSWORDS["app"], "pool_size": "3"}},
    }
    return pgcat(general=g, pools={"xmem": pool}, env=small_quarantine_env())


class Sampler:
    """pgcat's resident memory, sampled every 20 ms while a read runs."""

    def __init__(self, inst):
        self.inst = inst
        self.peak = 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.inst.rss_kb())
            time.sleep(0.02)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()
        self.peak = max(self.peak, self.inst.rss_kb())


class Reader:
    """A raw protocol connection read fast (a bytearray and an offset: the
    100 MB of a read are not copied message by message)."""

    def __init__(self, raw):
        self.sock = raw.sock
        self.buf = bytearray(raw.buf)
        self.pos = 0

    def send(self, data):
        self.sock.sendall(data)

    def msg(self, timeout=60):
        while True:
            if len(self.buf) - self.pos >= 5:
                typ = self.buf[self.pos]
                (ln,) = struct.unpack_from("!I", self.buf, self.pos + 1)
                if len(self.buf) - self.pos >= 1 + ln:
                    body = bytes(memoryview(self.buf)[self.pos + 5:self.pos + 1 + ln])
                    self.pos += 1 + ln
                    return typ, body
            if self.pos > 1 << 20:
                del self.buf[:self.pos]
                self.pos = 0
            self.sock.settimeout(timeout)
            chunk = self.sock.recv(262144)
            if not chunk:
                raise EOFError("pgcat closed the connection")
            self.buf += chunk


class Rows:
    """What the rows of big read so far add up to; every pad checked."""

    def __init__(self, ordered):
        self.ordered = ordered
        self.n = 0
        self.sum = 0
        self.last = -1
        self.bytes = 0

    def row(self, body):
        (ncol,) = struct.unpack_from("!H", body, 0)
        assert ncol == 2
        (l1,) = struct.unpack_from("!i", body, 2)
        i = int(body[6:6 + l1])
        (l2,) = struct.unpack_from("!i", body, 6 + l1)
        pad = body[10 + l1:10 + l1 + l2]
        assert pad == pad_of(i).encode(), i
        if self.ordered:
            assert i > self.last, (self.last, i)
        self.last = i
        self.n += 1
        self.sum += i
        self.bytes += len(body) + 5


def read_result(rd, rows, until=(ord("Z"),), timeout=60):
    """Messages up to one of until: DataRows counted into rows; the others returned."""
    other = []
    while True:
        typ, body = rd.msg(timeout)
        if typ == ord("D"):
            rows.row(body)
            continue
        other.append((typ, body))
        if typ in until:
            return other


def total_ids():
    n = ROWS * len(SHARDS)
    return n, n * (n - 1) // 2


def wait_shards_idle(pg, timeout=20):
    """No backend of the shard databases still runs a query (early ends are
    finished or cancelled, and their servers are back in the pool)."""
    def idle():
        return pg.sql("SELECT count(*) FROM pg_stat_activity WHERE datname IN %s AND state = 'active' "
                      "AND pid <> pg_backend_pid()" % str(SHARDS), dbname="postgres") == [(0,)]
    wait_until(idle, timeout, msg="the shards' servers to be idle")


def check_idle_in_pool(inst, pg):
    wait_shards_idle(pg)
    # every server of the pool is usable by the next client
    with psycopg.connect(**inst.conninfo(dbname="xmem"), autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM big").fetchone()[0] == ROWS * len(SHARDS)


def report(what, base, peak):
    grew = (peak - base) / 1024
    print("\n%s: pgcat RSS %.1f MB before, peak %.1f MB, grew %.1f MB" % (what, base / 1024, peak / 1024, grew))
    return grew


@pytest.mark.parametrize("sql,ordered,want_n", [
    ("SELECT id, pad FROM big", False, None),
    ("SELECT id, pad FROM big ORDER BY id", True, None),
    ("SELECT id, pad FROM big ORDER BY id LIMIT 10", True, 10),
])
def test_a_large_cross_shard_read_streams(pgcat, xmem, sql, ordered, want_n):
    inst = start(pgcat, xmem)
    r = inst.raw_login(dbname="xmem")
    rd = Reader(r)
    # warm up: the pools' servers, the buffers of a first read
    rd.send(pgwire.query("SELECT id, pad FROM big ORDER BY id LIMIT 3000"))
    read_result(rd, Rows(True))
    time.sleep(0.3)
    base = inst.rss_kb()
    rows = Rows(ordered)
    with Sampler(inst) as s:
        rd.send(pgwire.query(sql))
        tail = read_result(rd, rows)
    assert [t for t, _ in tail] == [ord("T"), ord("C"), ord("Z")], tail
    n, total = total_ids()
    if want_n is None:
        assert (rows.n, rows.sum) == (n, total)
        assert rows.bytes > 90 * 1024 * 1024
    else:
        assert rows.n == want_n and rows.sum == sum(range(want_n))
    assert tail[1][1].rstrip(b"\0") == b"SELECT %d" % rows.n
    grew = report(sql, base, s.peak)
    assert grew < GROWTH_MB, "pgcat's RSS grew by %.1f MB for a %.0f MB read" % (grew, rows.bytes / 2**20)
    r.close()
    check_idle_in_pool(inst, xmem)


def test_extended_protocol_and_psycopg_stream(pgcat, xmem):
    """psycopg's stream() (Parse/Bind/Describe/Execute/Sync, rows as they
    come) reads the whole result in bounded memory too."""
    inst = start(pgcat, xmem)
    with psycopg.connect(**inst.conninfo(dbname="xmem"), autocommit=True) as c:
        c.execute("SELECT id, pad FROM big ORDER BY id LIMIT 3000").fetchall()
        time.sleep(0.3)
        base = inst.rss_kb()
        n = s_ids = 0
        last = -1
        with Sampler(inst) as s:
            for i, pad in c.cursor().stream("SELECT id, pad FROM big WHERE id >= %s ORDER BY id", (0,)):
                assert i > last and pad == pad_of(i)
                last = i
                n += 1
                s_ids += i
        assert (n, s_ids) == total_ids()
        grew = report("psycopg stream ORDER BY", base, s.peak)
        assert grew < GROWTH_MB
    check_idle_in_pool(inst, xmem)


def test_a_portal_read_in_parts_holds_no_more_than_its_windows(pgcat, xmem):
    """A named portal read in parts (a fetch size: Execute with a row limit,
    then more Executes in the transaction) is a suspended merge: the rows not
    fetched yet stay on the shards, not in pgcat."""
    inst = start(pgcat, xmem)
    r = inst.raw_login(dbname="xmem")
    rd = Reader(r)
    rd.send(pgwire.query("SELECT id, pad FROM big ORDER BY id LIMIT 3000"))
    read_result(rd, Rows(True))
    time.sleep(0.3)
    base = inst.rss_kb()
    rows = Rows(True)
    with Sampler(inst) as s:
        rd.send(pgwire.query("BEGIN"))
        read_result(rd, rows)
        rd.send(pgwire.parse("SELECT id, pad FROM big ORDER BY id") + pgwire.bind(portal="c1") +
                pgwire.describe(b"P", "c1") + pgwire.execute("c1", 5000) + pgwire.sync())
        tail = read_result(rd, rows)
        assert [t for t, _ in tail] == [ord("1"), ord("2"), ord("T"), ord("s"), ord("Z")], tail
        assert rows.n == 5000
        # while the client thinks, the shards wait: pgcat holds only its windows
        time.sleep(1)
        parts = 1
        while True:
            rd.send(pgwire.execute("c1", 5000) + pgwire.sync())
            tail = read_result(rd, rows)
            parts += 1
            assert tail[-1] == (ord("Z"), b"T")
            if tail[0][0] == ord("C"):
                break
            assert tail[0][0] == ord("s")
        rd.send(pgwire.close(b"P", "c1") + pgwire.sync())
        assert [t for t, _ in read_result(rd, rows)] == [ord("3"), ord("Z")]
        rd.send(pgwire.query("COMMIT"))
        read_result(rd, rows)
    assert (rows.n, rows.sum) == total_ids() and parts == 20
    grew = report("portal read in parts", base, s.peak)
    assert grew < GROWTH_MB

    # a portal left after its first part: closed, its shards' servers
    # cancel and come back clean
    rd.send(pgwire.query("BEGIN"))
    read_result(rd, Rows(True))
    rows = Rows(True)
    rd.send(pgwire.parse("SELECT id, pad FROM big ORDER BY id") + pgwire.bind(portal="c2") +
            pgwire.execute("c2", 100) + pgwire.sync())
    assert read_result(rd, rows)[-2:] == [(ord("s"), b""), (ord("Z"), b"T")]
    assert rows.n == 100 and rows.sum == sum(range(100))
    rd.send(pgwire.close(b"P", "c2") + pgwire.sync())
    assert [t for t, _ in read_result(rd, rows)] == [ord("3"), ord("Z")]
    rd.send(pgwire.query("COMMIT"))
    read_result(rd, rows)
    wait_shards_idle(xmem)
    # a portal still open when its transaction ends ends with it
    rd.send(pgwire.query("BEGIN"))
    read_result(rd, Rows(True))
    rd.send(pgwire.parse("SELECT id, pad FROM big") + pgwire.bind(portal="c3") + pgwire.execute("c3", 10) +
            pgwire.sync())
    assert read_result(rd, Rows(False))[-2:] == [(ord("s"), b""), (ord("Z"), b"T")]
    rd.send(pgwire.query("COMMIT"))
    assert read_result(rd, Rows(False))[-1] == (ord("Z"), b"I")
    wait_shards_idle(xmem)
    # a shard's backend killed while the portal waits: its next Execute gets
    # the rows pgcat had, then the error; the transaction has failed, as
    # after any error in it, until its ROLLBACK
    rd.send(pgwire.query("BEGIN"))
    read_result(rd, Rows(True))
    rows = Rows(True)
    rd.send(pgwire.parse("SELECT id, pad FROM big ORDER BY id") + pgwire.bind(portal="c5") +
            pgwire.execute("c5", 10) + pgwire.sync())
    assert read_result(rd, rows)[-2:] == [(ord("s"), b""), (ord("Z"), b"T")]
    victim = xmem.sql("SELECT pid FROM pg_stat_activity WHERE datname = 'xmem1' AND state = 'active' "
                      "AND query LIKE 'SELECT id, pad FROM big ORDER BY id%%'", dbname="postgres")
    assert len(victim) == 1, victim
    xmem.sql("SELECT pg_terminate_backend(%d)" % victim[0][0], dbname="postgres")
    rd.send(pgwire.execute("c5", 0) + pgwire.sync())
    tail = read_result(rd, rows)
    assert [t for t, _ in tail] == [ord("E"), ord("Z")] and tail[-1][1] == b"E", tail
    assert b"C08006" in tail[0][1] and b"shard 1" in tail[0][1], tail
    assert 10 < rows.n < ROWS * 2
    rd.send(pgwire.query("ROLLBACK"))
    assert read_result(rd, Rows(True))[-1] == (ord("Z"), b"I")
    wait_shards_idle(xmem)
    rows = Rows(False)
    rd.send(pgwire.query("SELECT id, pad FROM big WHERE id < 100"))
    read_result(rd, rows)
    assert rows.n == 100
    # and one whose client goes away
    gone = Reader(inst.raw_login(dbname="xmem"))
    gone.send(pgwire.query("BEGIN"))
    read_result(gone, Rows(True))
    gone.send(pgwire.parse("SELECT id, pad FROM big ORDER BY id") + pgwire.bind(portal="c4") +
              pgwire.execute("c4", 10) + pgwire.sync())
    assert read_result(gone, Rows(True))[-2:] == [(ord("s"), b""), (ord("Z"), b"T")]
    gone.sock.close()
    wait_shards_idle(xmem)
    # an unnamed portal with a row limit (asyncpg's fetchrow): its rest is
    # dropped at Sync
    rows = Rows(True)
    rd.send(pgwire.parse("SELECT id, pad FROM big ORDER BY id") + pgwire.bind() + pgwire.execute("", 7) +
            pgwire.sync())
    assert [t for t, _ in read_result(rd, rows)] == [ord("1"), ord("2"), ord("s"), ord("Z")]
    assert rows.n == 7 and rows.sum == sum(range(7))
    r.close()
    check_idle_in_pool(inst, xmem)


def test_a_slow_client_pins_a_bounded_amount(pgcat, xmem):
    """A client that stops reading a cross-shard result: pgcat stops
    reading the shards (their backends wait to write), its memory stays
    bounded, other clients are served, and the read completes exactly once
    the client reads again."""
    inst = start(pgcat, xmem)
    r = inst.raw_login(dbname="xmem")
    r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
    rd = Reader(r)
    rd.send(pgwire.query("SELECT id, pad FROM big ORDER BY id LIMIT 3000"))
    read_result(rd, Rows(True))
    time.sleep(0.3)
    base = inst.rss_kb()
    rows = Rows(True)
    with Sampler(inst) as s:
        rd.send(pgwire.query("SELECT id, pad FROM big ORDER BY id"))
        # the first rows, slowly
        for _ in range(2000):
            typ, body = rd.msg()
            if typ == ord("D"):
                rows.row(body)
            if rows.n % 200 == 0:
                time.sleep(0.02)

        def shards_blocked():
            got = xmem.sql("SELECT count(*) FROM pg_stat_activity WHERE datname IN %s AND state = 'active' "
                           "AND wait_event = 'ClientWrite'" % str(SHARDS), dbname="postgres")
            return got == [(2,)]
        wait_until(shards_blocked, 20, msg="both shards to wait for pgcat to read")
        with psycopg.connect(**inst.conninfo(dbname="xmem"), autocommit=True) as other:
            for i in range(50):
                assert other.execute("SELECT %s::int * 2", (i,)).fetchone()[0] == 2 * i
        time.sleep(1)
        stalled_peak = inst.rss_kb()
        tail = read_result(rd, rows)
    assert [t for t, _ in tail] == [ord("C"), ord("Z")]
    assert (rows.n, rows.sum) == total_ids()
    report("stalled client (while stalled)", base, stalled_peak)
    grew = report("slow client ORDER BY", base, s.peak)
    assert grew < GROWTH_MB
    r.close()
    check_idle_in_pool(inst, xmem)


def test_what_must_be_held_is_bounded_by_cross_shard_max_memory(pgcat, xmem):
    """DISTINCT and GROUP BY need every row before the first goes out: they
    hold at most cross_shard_max_memory, then fail with 54000 naming it, and
    every shard's server comes back clean."""
    inst = start(pgcat, xmem, general={"cross_shard_max_memory": "4MB"})
    with psycopg.connect(**inst.conninfo(dbname="xmem"), autocommit=True) as c:
        base = inst.rss_kb()
        with Sampler(inst) as s:
            with pytest.raises(psycopg.Error) as e:
                c.execute("SELECT DISTINCT pad FROM big").fetchall()
        assert e.value.sqlstate == "54000", str(e.value)
        assert "cross_shard_max_memory" in str(e.value), str(e.value)
        # (4 MB held, then freed: ASan's quarantine keeps some of it resident)
        assert report("DISTINCT over the limit", base, s.peak) < 24
        # under the limit, the same kind of read works
        got = c.execute("SELECT DISTINCT id % 3 AS m FROM big ORDER BY m").fetchall()
        assert got == [(0,), (1,), (2,)]
        assert c.execute("SELECT count(*), sum(id) FROM big").fetchone() == total_ids()
    check_idle_in_pool(inst, xmem)
    assert_works(inst)
