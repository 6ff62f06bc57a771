# SPDX-License-Identifier: MIT
"""What pgcat never does (SPEC §10): grow without bound on what a client
declares or sends.

With prepared_statements on, pgcat reads a Parse or a Query whole to
rewrite it, up to prepared_statements_max_length. A longer one is never
held: an unnamed Parse or a Query streams through as it is (PostgreSQL
says what it thinks of it), a named Parse or a PREPARE is refused with
54000 and its bytes are discarded as they come. pgcat's memory is sampled
while a client streams a message declared far larger than the limit.
"""
import os
import socket
import struct
import threading
import time

import pytest

import pgwire
from conftest import DEFAULT_ASAN, assert_works, tree_rss_kb, wait_until

MB = 1024 * 1024


def small_quarantine_env():
    # Freed memory waits in ASan's quarantine and would count as resident.
    base = os.environ.get("ASAN_OPTIONS", DEFAULT_ASAN)
    return {"ASAN_OPTIONS": base + ":quarantine_size_mb=4:thread_local_quarantine_size_kb=64"}


class PeakRss:
    """Samples pgcat's resident memory (all its processes) in a thread."""

    def __init__(self, pid):
        self.pid = pid
        self.base = tree_rss_kb(pid)
        self.peak = self.base
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            self.peak = max(self.peak, tree_rss_kb(self.pid))
            time.sleep(0.02)

    def growth_mb(self):
        self.stop = True
        self.t.join(5)
        self.peak = max(self.peak, tree_rss_kb(self.pid))
        return (self.peak - self.base) / 1024.0


def start(pgcat, limit=None):
    g = {"prepared_statements": "true"}
    if limit:
        g["prepared_statements_max_length"] = str(limit)
    return pgcat(general=g, env=small_quarantine_env(), users={"app": {"pool_size": 1}})


def stream(r, n, chunk=b"x" * 65536):
    """Sends n bytes of filler; stops quietly when the peer closed."""
    sent = 0
    try:
        while sent < n:
            r.sock.sendall(chunk[:min(len(chunk), n - sent)])
            sent += min(len(chunk), n - sent)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_long_named_parse_is_refused_and_streamed_away(pgcat, pg):
    p = start(pgcat)
    r = p.raw_login()
    assert r.simple("SELECT 1")[0] == [["1"]]   # the server is there, warm
    rss = PeakRss(p.pid)
    declared = 200 * MB
    name = b"huge\x00"
    head = b"SELECT '"
    # Parse: name, then a query text of `declared` bytes, then no types
    body_len = len(name) + declared + 1 + 2
    r.send(b"P" + struct.pack("!I", 4 + body_len) + name + head)
    stream(r, declared - len(head) - 1)
    r.send(b"'\x00" + struct.pack("!H", 0) + pgwire.bind(stmt="huge") + pgwire.execute() + pgwire.sync())
    msgs = r.read_until(timeout=60)
    growth = rss.growth_mb()
    print("pgcat RSS growth: %.1f MB" % growth)
    errs = [pgwire.parse_fields(m) for t, m in msgs if t == b"E"]
    assert errs and errs[0]["C"] == "54000" and "prepared_statements_max_length" in errs[0]["M"], msgs
    assert msgs[-1] == (b"Z", b"I"), msgs
    # PostgreSQL skipped the Bind and Execute after the error, as for a failed Parse.
    assert [t for t, _ in msgs] == [b"E", b"Z"], msgs
    assert growth < 40, "pgcat grew by %.0f MB while a 200 MB Parse streamed through" % growth
    # The client and the server connection go on.
    assert r.simple("SELECT 2")[0] == [["2"]]
    r.close()
    assert_works(p)


def test_long_unnamed_parse_streams_through(pgcat, pg):
    p = start(pgcat, limit=64 * 1024)
    r = p.raw_login()
    # 3 MB of text: over the limit, well within PostgreSQL's own.
    text = "x" * (3 * MB)
    sql = "SELECT length('%s')" % text
    rss = PeakRss(p.pid)
    # Parsed, bound twice in the same request: the unnamed statement is the
    # client's on that server.
    r.send(pgwire.parse(sql) + pgwire.bind() + pgwire.execute() + pgwire.bind() + pgwire.execute() +
           pgwire.sync())
    msgs = r.read_until(timeout=60)
    growth = rss.growth_mb()
    print("pgcat RSS growth: %.1f MB" % growth)
    assert [t for t, _ in msgs] == [b"1", b"2", b"D", b"C", b"2", b"D", b"C", b"Z"], [t for t, _ in msgs]
    assert pgwire.data_row_values(msgs[2][1]) == [str(len(text))]
    # Not kept for a later transaction: said so, not run with another text.
    r.send(pgwire.bind() + pgwire.execute() + pgwire.sync())
    msgs = r.read_until()
    assert [t for t, _ in msgs] == [b"E", b"Z"], msgs
    err = pgwire.parse_fields(msgs[0][1])
    assert err["C"] == "26000" and "prepared_statements_max_length" in err["M"], err
    # A Query too long to hold streams through too.
    rows, err, status = r.simple(sql)
    assert err is None and rows == [[str(len(text))]], err
    # A PREPARE that long would have to be rewritten: refused.
    rows, err, status = r.simple("PREPARE big AS " + sql)
    assert err is not None and err["C"] == "54000" and status == "I", (err, status)
    assert growth < 40, "pgcat grew by %.0f MB for a 3 MB message" % growth
    r.close()
    assert_works(p)


def test_parse_declared_1gb_is_not_buffered(pgcat, pg):
    """An unnamed Parse declaring 1 GB: streamed to the server as it comes,
    which refuses it as PostgreSQL refuses one sent to it directly (a
    message over its own limit); pgcat holds none of it."""
    p = start(pgcat)
    r = p.raw_login()
    assert r.simple("SELECT 1")[0] == [["1"]]
    rss = PeakRss(p.pid)
    declared = 1 << 30
    r.send(b"P" + struct.pack("!I", declared) + b"\x00SELECT '")
    sent = stream(r, 160 * MB)
    growth = rss.growth_mb()
    print("pgcat RSS growth: %.1f MB" % growth)
    err, closed = r.read_error_then_eof(20)
    assert growth < 40, "pgcat grew by %.0f MB after %d MB streamed" % (growth, sent // MB)
    # PostgreSQL refuses a message that long when it reads its length
    # (directly, it closes the connection without a word): through pgcat
    # that server is lost, and the client is told so (08006) in its
    # transaction-mode session; the rest of its message is discarded.
    direct = pgwire.Raw(pg.host, pg.port)
    direct.login("app", "app_pw", "appdb")
    direct.send(b"P" + struct.pack("!I", declared) + b"\x00SELECT '")
    derr, dclosed = direct.read_error_then_eof(20)
    direct.close()
    assert dclosed, "PostgreSQL kept a connection that declared a 1 GB message"
    assert err is not None and err["C"] == "08006", (err, closed)
    r.close()
    assert_works(p)
