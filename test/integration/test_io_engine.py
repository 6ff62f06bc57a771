# SPDX-License-Identifier: MIT
"""The I/O engine (SPEC §12, doc/io-engine.md): io_engine = auto | epoll |
io_uring. SHOW CONFIG names the engine in use; epoll works when asked for;
a kernel that refuses io_uring (simulated with PGCAT_TEST_DENY_IO_URING,
read once when a worker starts) costs one log line and pgcat serves on
epoll; big results and COPY go through the ring with partial sends and
backpressure; a thousand idle clients hold no receive buffer; a client
that vanishes while a result is being sent to it (its send in flight is
cancelled) leaves pgcat and the pool sound."""
import hashlib
import os
import socket
import struct
import subprocess
import time

import psycopg
import pytest

import pgwire
from conftest import (ADMIN_PASSWORD, ADMIN_USER, PASSWORDS, PG_BIN, assert_pool_idle, assert_works, pgcat_binary,
                      proc_children, wait_until)

FALLBACK = "io_uring is not available"


def admin_rows(p, sql):
    out = p.psql(sql, user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD).stdout
    return [line.split("|") for line in out.splitlines() if line]


def engine(p):
    rows = {r[0]: r for r in admin_rows(p, "SHOW CONFIG")}
    assert rows["io_engine"][2] == "auto", "the default of io_engine is auto"
    assert rows["io_engine"][3] == "no", "io_engine needs a restart"
    return rows["io_engine"][1]


def ring_buffers(p):
    """(count, held) of the io_uring provided buffers in SHOW MEM; None on epoll."""
    for r in admin_rows(p, "SHOW MEM"):
        if r[0] == "io_uring_buffer":
            return int(r[4]) // int(r[1]), int(r[2])
    return None


def kernel_allows_io_uring(p):
    """auto picked io_uring unless the log says why not (one line)."""
    return FALLBACK not in p.log()


def test_auto_uses_io_uring_where_the_kernel_allows_it(pgcat):
    p = pgcat(general={"io_engine": "auto"})
    assert_works(p)
    lines = [l for l in p.log().splitlines() if FALLBACK in l]
    if lines:
        # A kernel (or a container's seccomp policy) that refuses io_uring:
        # said once, and served on epoll.
        assert len(lines) == 1, lines
        assert engine(p) == "epoll"
    else:
        assert engine(p) == "io_uring"
        count, held = ring_buffers(p)
        assert count > 0 and held == 0


def test_epoll_engine(pgcat, pg):
    p = pgcat(general={"io_engine": "epoll"})
    assert_works(p)
    assert engine(p) == "epoll"
    assert ring_buffers(p) is None
    assert FALLBACK not in p.log()
    with p.connect() as c:
        rows = c.execute("SELECT g, repeat('e', 100) FROM generate_series(1, 20000) g").fetchall()
    assert len(rows) == 20000 and rows[-1][0] == 20000


@pytest.mark.parametrize("asked", ["auto", "io_uring"])
def test_refused_io_uring_falls_back_to_epoll_with_one_line(pgcat, pg, asked):
    p = pgcat(general={"io_engine": asked, "workers": 2}, env={"PGCAT_TEST_DENY_IO_URING": "1"})
    assert_works(p)
    with p.connect() as c:
        assert c.execute("SELECT count(*) FROM generate_series(1, 1000)").fetchone()[0] == 1000
    lines = [l for l in p.log().splitlines() if FALLBACK in l]
    assert len(lines) == 1, "one log line for the fallback, got %r" % lines
    assert "io_engine = %s" % asked in lines[0] and "using epoll" in lines[0]
    assert "PGCAT_TEST_DENY_IO_URING" in lines[0], "the line says why"
    assert engine(p) == "epoll"


def io_uring_pgcat(pgcat, **kw):
    general = dict(kw.pop("general", {}))
    general["io_engine"] = "io_uring"
    p = pgcat(general=general, **kw)
    assert_works(p)
    if not kernel_allows_io_uring(p):
        pytest.fail("this kernel refuses io_uring: %s" % [l for l in p.log().splitlines() if FALLBACK in l])
    assert engine(p) == "io_uring"
    return p


def test_big_result_with_a_slow_reader(pgcat, pg):
    """25 MB to a client that reads slowly: the socket fills, sends are
    partial, the server is paused and resumed; every byte arrives in order."""
    p = io_uring_pgcat(pgcat)
    n, digest = 0, hashlib.sha256()
    expect = hashlib.sha256()
    with p.connect() as c:
        for g, h, pad in c.cursor().stream("SELECT g, md5(g::text), repeat('z', 40) FROM generate_series(1, 250000) g"):
            n += 1
            assert g == n, "row %d arrived as row %d" % (g, n)
            digest.update(h.encode())
            expect.update(hashlib.md5(str(n).encode()).hexdigest().encode())
            if n % 20000 == 0:
                time.sleep(0.2)   # the client falls behind
    assert n == 250000
    assert digest.hexdigest() == expect.hexdigest(), "rows arrived damaged"
    assert_pool_idle(pg)
    wait_until(lambda: ring_buffers(p)[1] == 0, 5, msg="no buffer held once idle")


def test_big_copy_in_and_out(pgcat, pg, table):
    t = table("id int, body text")
    p = io_uring_pgcat(pgcat)
    body = "b" * 2000
    rows = 20000   # ~40 MB each way
    with p.connect() as c:
        with c.cursor().copy("COPY %s FROM STDIN" % t) as cp:
            for i in range(rows):
                cp.write("%d\t%s\n" % (i, body))
        assert c.execute("SELECT count(*), sum(id), sum(length(body)) FROM %s" % t).fetchone() == \
            (rows, rows * (rows - 1) // 2, rows * 2000)
        got = bytearray()
        with c.cursor().copy("COPY (SELECT * FROM %s ORDER BY id) TO STDOUT" % t) as cp:
            for data in cp:
                got += data
    want = b"".join(b"%d\t%s\n" % (i, body.encode()) for i in range(rows))
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(want).hexdigest()
    assert_pool_idle(pg)


def asan_build():
    out = subprocess.run(["ldd", str(pgcat_binary())], capture_output=True, text=True).stdout
    return "libasan" in out


def idle_clients(pgcat, engine_name, n):
    """pgcat's RSS per idle logged-in client (bytes), with n clients open
    on the given engine; each answers a query."""
    general = {"io_engine": engine_name, "max_client_conn": 2000, "auth_type": "md5"}
    p = io_uring_pgcat(pgcat, general=general) if engine_name == "io_uring" else pgcat(general=general)
    for _ in range(20):   # warm: the pool, the buffers, the allocator
        p.raw_login().close()
    time.sleep(0.5)
    before = p.rss_kb()
    conns = [p.raw_login(user="md5user") for _ in range(n)]
    time.sleep(1.0)
    after = p.rss_kb()
    if engine_name == "io_uring":
        assert ring_buffers(p)[1] == 0, "idle clients hold provided buffers"
    for r in conns[::50]:
        r.send(pgwire.query("SELECT 41 + 1"))
        got = [pgwire.data_row_values(pl)[0] for typ, pl in r.read_until((b"Z",)) if typ == b"D"]
        assert got == ["42"]
    for r in conns:
        r.close()
    return (after - before) * 1024 / n


def test_thousand_idle_clients(pgcat, pg):
    """1,000 logged-in idle clients on the ring: every one answers, none
    holds a provided buffer, and (without the sanitizers' own allocator) an
    idle client costs no more than on epoll: its receive is armed in the
    kernel, not in pgcat (doc/benchmarks.md measures the absolute figure,
    at 10,000 clients)."""
    on_ring = idle_clients(pgcat, "io_uring", 1000)
    on_epoll = idle_clients(pgcat, "epoll", 1000)
    if not asan_build():
        assert on_ring <= on_epoll + 32, "an idle client costs %.0f bytes on io_uring, %.0f on epoll" % (
            on_ring, on_epoll)
    assert_pool_idle(pg)


def vanish(r):
    """Close with a reset: the peer's next send fails at once."""
    r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    r.close()


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_client_vanishes_mid_result(pgcat, pg, mode):
    """A client that goes while a big result is being sent to it, its send
    in flight and its receive armed: both are cancelled, nothing touches
    the freed connection (the sanitizers would say), the server is cleaned
    and reused, and the others go on."""
    p = io_uring_pgcat(pgcat, general={"pool_mode": mode, "default_pool_size": 2})
    other = p.connect()
    for i in range(10):
        r = p.raw_login()
        r.send(pgwire.query("SELECT repeat('v', 1000) FROM generate_series(1, 200000)"))
        # read a little, so that the result is streaming when it goes
        r.read_bytes(50000 + i * 7000, timeout=30)
        vanish(r)
        assert other.execute("SELECT %s::int", (i,)).fetchone()[0] == i
    other.close()
    assert_pool_idle(pg, timeout=30)
    assert_works(p)
    wait_until(lambda: ring_buffers(p)[1] == 0, 5, msg="no buffer held once idle")


@pytest.mark.parametrize("engine_name", ["io_uring", "epoll"])
def test_one_client_pipeline_of_big_and_small_results_to_a_slow_reader(pgcat, pg, engine_name):
    """One client, the only one sending: on io_uring its replies go to the
    socket with a plain send while the ring has nothing else to carry, and
    through the ring once the socket is full (doc/io-engine.md). A pipeline
    of small and big results, read slowly while a second client comes and
    goes, arrives whole and in order; quick round trips work after it."""
    general = {"default_pool_size": 2}
    if engine_name == "io_uring":
        p = io_uring_pgcat(pgcat, general=general)
    else:
        p = pgcat(general=dict(general, io_engine="epoll"))
        assert engine(p) == "epoll"
    rows = 120000
    big = "SELECT g, md5(g::text) FROM generate_series(1, %d) g" % rows
    plan = [("small", 1), ("big", None), ("small", 2), ("small", 3), ("big", None), ("small", 4)]
    r = p.raw_login()
    r.send(b"".join(pgwire.query("SELECT %d" % v if kind == "small" else big) for kind, v in plan))
    other = p.connect()
    seen = 0
    for i, (kind, v) in enumerate(plan):
        got, n, digest = [], 0, hashlib.sha256()
        while True:
            m = r.read_msg(timeout=60)
            assert m is not None, "pgcat closed the connection in result %d" % i
            typ, payload = m
            seen += 5 + len(payload) - 1
            if typ == b"Z":
                break
            assert typ in (b"T", b"D", b"C"), (i, typ, payload[:200])
            if typ != b"D":
                continue
            vals = pgwire.data_row_values(payload)
            if kind == "small":
                got.append(vals[0])
                continue
            n += 1
            assert vals[0] == str(n), "result %d: row %s arrived as row %d" % (i, vals[0], n)
            digest.update(vals[1].encode())
            if n % 15000 == 0:
                time.sleep(0.15)   # the reader falls behind: the socket fills
                # meanwhile another client's round trip shares the turns
                assert other.execute("SELECT %s::int", (n,)).fetchone()[0] == n
        if kind == "small":
            assert got == [str(v)], "result %d: %r" % (i, got)
        else:
            want = hashlib.sha256()
            for k in range(1, rows + 1):
                want.update(hashlib.md5(str(k).encode()).hexdigest().encode())
            assert n == rows and digest.hexdigest() == want.hexdigest(), "result %d damaged (%d rows)" % (i, n)
    assert seen > 2 * rows * 40, "the big results were not big"
    other.close()
    # back to one small reply per turn
    for k in range(200):
        r.send(pgwire.query("SELECT %d" % k))
        vals = [pgwire.data_row_values(pl)[0] for typ, pl in r.read_until((b"Z",)) if typ == b"D"]
        assert vals == [str(k)]
    r.close()
    assert_pool_idle(pg)
    if engine_name == "io_uring":
        wait_until(lambda: ring_buffers(p)[1] == 0, 5, msg="no buffer held once idle")


@pytest.mark.parametrize("engine_name", ["io_uring", "epoll"])
def test_one_client_then_several_then_one_again(pgcat, pg, engine_name):
    """On io_uring a client and its server alone leave the ring for epoll's
    recv and send, and go back to it when more clients come
    (doc/io-engine.md): every round trip is answered across those moves,
    also while a big result waits for a slow reader."""
    general = {"default_pool_size": 3}
    if engine_name == "io_uring":
        p = io_uring_pgcat(pgcat, general=general)
    else:
        p = pgcat(general=dict(general, io_engine="epoll"))
        assert engine(p) == "epoll"

    def round_trip(r, k):
        r.send(pgwire.query("SELECT %d" % k))
        vals = [pgwire.data_row_values(pl)[0] for typ, pl in r.read_until((b"Z",)) if typ == b"D"]
        assert vals == [str(k)]

    a = p.raw_login()
    for k in range(40):   # alone
        round_trip(a, k)
    others = [p.raw_login() for _ in range(3)]
    for k in range(40):   # several at once: the pipelines overlap in pgcat
        for r in [a] + others:
            r.send(pgwire.query("SELECT %d" % k))
        for r in [a] + others:
            vals = [pgwire.data_row_values(pl)[0] for typ, pl in r.read_until((b"Z",)) if typ == b"D"]
            assert vals == [str(k)]
    for r in others:
        r.close()
    for k in range(40):   # alone again
        round_trip(a, k)
    # alone, then a big result the reader takes slowly while another
    # client comes: the output waits on the socket meanwhile
    rows = 60000
    a.send(pgwire.query("SELECT g, repeat('w', 100) FROM generate_series(1, %d) g" % rows))
    b = p.raw_login()
    n = 0
    while True:
        typ, payload = a.read_msg(timeout=60)
        if typ == b"Z":
            break
        if typ == b"D":
            n += 1
            vals = pgwire.data_row_values(payload)
            assert vals == [str(n), "w" * 100]
            if n % 10000 == 0:
                time.sleep(0.2)
                round_trip(b, n)
    assert n == rows
    for k in range(20):
        round_trip(a, k)
        round_trip(b, k)
    a.close()
    b.close()
    assert_pool_idle(pg)
    if engine_name == "io_uring":
        wait_until(lambda: ring_buffers(p)[1] == 0, 5, msg="no buffer held once idle")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("stale_flag", [False, True], ids=["kernel", "stale-flag"])
def test_connection_churn_leaves_the_worker_idle(pgcat, pg, tmp_path, stale_flag):
    """pgbench -C (a new connection per transaction, ten at a time) on
    io_uring, then nothing: the worker sleeps, and it still accepts and
    serves clients. The kernel can leave its task-work flag
    (IORING_SQ_TASKRUN) set with nothing to run, when work queued during a
    run was run by it; pgcat once took that flag for work forever and spun
    without serving anyone (seen in bench/run.sh's connection cell).
    stale-flag: PGCAT_TEST_STALE_TASKRUN leaves the flag set after every
    pass, as the kernel may."""
    env = {"PGCAT_TEST_STALE_TASKRUN": "1"} if stale_flag else None
    # md5: logins cheap enough for thousands of connections a second
    p = io_uring_pgcat(pgcat, general={"default_pool_size": 4, "workers": 1, "auth_type": "md5"}, env=env)
    (worker,) = proc_children(p.pid)
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    script = tmp_path / "one.sql"
    script.write_text("SELECT 1;\n")
    for _ in range(3):
        r = subprocess.run([str(PG_BIN / "pgbench"), "-n", "-C", "-c", "10", "-j", "2", "-T", "3",
                            "-h", p.host, "-p", str(p.port), "-U", "app", "-f", str(script), "appdb"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "number of failed transactions: 0" in r.stdout, r.stdout
        time.sleep(0.5)
        t0 = cpu_seconds(worker)
        time.sleep(2)
        used = cpu_seconds(worker) - t0
        assert used < 0.3, "the worker used %.2f s of CPU in 2 s with no client" % used
        assert_works(p)
