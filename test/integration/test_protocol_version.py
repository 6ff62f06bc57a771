# SPDX-License-Identifier: MIT
"""Protocol versions (SPEC §3 "Startup", "Protocol 3.2 on both sides", §3.4;
issue 26 items 1-3): negotiation as PostgreSQL 18 does it (a newer 3.x minor
or unknown `_pq_.` options get a NegotiateProtocolVersion and the login goes
on; a request served as asked gets none; only another major is refused),
32-byte cancel keys for 3.2 clients (raw wire and libpq 18 through psycopg),
keys of lengths pgcat never issues ignored, and pgcat asking PostgreSQL 15
for 3.2 and taking its downgrade to 3.0."""
import struct
import threading
import time

import psycopg
import pytest
from psycopg import errors

import pgwire
from conftest import PASSWORDS, assert_works, wait_until

PROTO_3_1 = (3 << 16) | 1
GREASE = (3 << 16) | 9999   # libpq 19 betas' "grease" version


def sleeping_backend(pg, pattern):
    rows = [r for r in pg.backends("app", "appdb") if r[3] == "active" and pattern in (r[4] or "")]
    return rows[0][0] if rows else None


def login(p, version, params=None):
    r = p.raw()
    r.login("app", PASSWORDS["app"], "appdb", params, version=version)
    return r


def select_one(r, sql):
    rows, err, status = r.simple(sql)
    assert err is None, err
    assert status == "I"
    return rows[0][0]


# --- negotiation ----------------------------------------------------------------

def test_32_is_served_as_asked_with_a_32_byte_key(pgcat):
    p = pgcat()
    r = login(p, pgwire.PROTO_3_2)
    try:
        assert r.negotiate is None, "a NegotiateProtocolVersion that changes nothing (libpq 18 refuses it)"
        assert len(r.backend_key_bytes) == 32, r.backend_key_bytes
        assert select_one(r, "SELECT 1") == "1"
    finally:
        r.close()


@pytest.mark.parametrize("version", [pgwire.PROTO_3_0, PROTO_3_1])
def test_30_and_31_get_no_negotiation_and_4_byte_keys(pgcat, version):
    """3.1 never existed; PostgreSQL 18 serves a client asking for it as 3.1
    with a 4-byte key, without negotiating, and so does pgcat."""
    p = pgcat()
    r = login(p, version)
    try:
        assert r.negotiate is None, r.negotiate
        assert len(r.backend_key_bytes) == 4
        assert select_one(r, "SELECT 2") == "2"
    finally:
        r.close()


def test_grease_version_is_negotiated_down_to_32(pgcat):
    p = pgcat()
    r = login(p, GREASE, {"_pq_.test_protocol_negotiation": ""})
    try:
        assert r.negotiate == (pgwire.PROTO_3_2, ["_pq_.test_protocol_negotiation"]), r.negotiate
        assert len(r.backend_key_bytes) == 32
        assert select_one(r, "SELECT 3") == "3"
    finally:
        r.close()
    r = login(p, (3 << 16) | 3)
    try:
        assert r.negotiate == (pgwire.PROTO_3_2, []), r.negotiate
        assert len(r.backend_key_bytes) == 32
    finally:
        r.close()


def test_unknown_protocol_options_are_named_and_never_reach_servers(pgcat, pg):
    p = pgcat()
    opts = {"_pq_.test_protocol_negotiation": "", "_pq_.made_up": "on", "application_name": "npv"}
    r = login(p, pgwire.PROTO_3_0, opts)
    try:
        # never above what the client asked for: 3.0 stays 3.0
        assert r.negotiate == (pgwire.PROTO_3_0, ["_pq_.test_protocol_negotiation", "_pq_.made_up"]), r.negotiate
        assert len(r.backend_key_bytes) == 4
        # not session parameters: nothing was SET on the server
        assert select_one(r, "SELECT current_setting('_pq_.made_up', true) IS NULL") == "t"
        assert select_one(r, "SELECT current_setting('application_name')") == "npv"
    finally:
        r.close()


def test_major_4_refused_and_pgcat_keeps_serving(pgcat):
    p = pgcat()
    r = p.raw()
    try:
        r.startup("app", "appdb", version=4 << 16)
        fields, closed = r.read_error_then_eof()
        assert closed, "pgcat kept the connection open"
        # PostgreSQL's SQLSTATE for it (feature_not_supported)
        assert fields is not None and fields["C"] == "0A000", fields
        assert "3.0 to 3.2" in fields["M"], fields
    finally:
        r.close()
    assert_works(p)


# --- 32-byte keys and cancels -------------------------------------------------------

def run_in_thread(fn):
    box = {}

    def wrap():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
    t = threading.Thread(target=wrap, daemon=True)
    t.start()
    return t, box


@pytest.mark.parametrize("workers", [1, 2])
def test_cancel_with_a_32_byte_key(pgcat, pg, workers):
    """A 3.2 client's cancel, with its whole key, cancels its query, whichever
    worker the CancelRequest lands on; its secret cut to 4 bytes, or with one
    byte changed, cancels nothing. 3.0 clients share the pool and their
    cancels work beside."""
    p = pgcat(general={"workers": workers, "default_pool_size": 4})
    for version in [pgwire.PROTO_3_2, pgwire.PROTO_3_0] * (3 if workers > 1 else 1):
        r = login(p, version)
        pid, key = r.backend_key
        r.send(pgwire.query("SELECT pg_sleep(30)"))
        wait_until(lambda: sleeping_backend(pg, "pg_sleep(30)"), 10, msg="pg_sleep running")
        if version == pgwire.PROTO_3_2:
            assert len(key) == 32
            bad = bytearray(key)
            bad[20] ^= 0x01
            for wrong in (key[8:12], key[:4], bytes(bad), key[:31]):
                cr = p.raw()
                cr.send(pgwire.cancel_request(pid, wrong))
                assert cr.read_bytes(1, timeout=5) == b""
                cr.close()
            time.sleep(0.3)   # a wrongly accepted cancel would be on its way by now
            assert sleeping_backend(pg, "pg_sleep(30)"), "a partial key cancelled the query"
        cr = p.raw()
        cr.send(pgwire.cancel_request(pid, key))
        cr.wait_closed(5)
        cr.close()
        rows, err, status = r.collect(15)
        assert err is not None and err["C"] == "57014", err
        assert status == "I"
        assert select_one(r, "SELECT 4") == "4"
        r.close()


@pytest.mark.parametrize("key_len", [3, 257, 0])
def test_cancel_keys_of_lengths_never_issued_are_ignored(pgcat, pg, key_len):
    p = pgcat()
    r = login(p, pgwire.PROTO_3_2)
    pid, key = r.backend_key
    r.send(pgwire.query("SELECT pg_sleep(1.5)"))
    wait_until(lambda: sleeping_backend(pg, "pg_sleep(1.5)"), 10)
    cr = p.raw()
    cr.send(pgwire.cancel_request(pid, (key * 9)[:key_len]))
    assert cr.read_bytes(1, timeout=5) == b"", "pgcat answered a cancel key of %d bytes" % key_len
    cr.close()
    rows, err, status = r.collect(10)
    assert err is None, "a %d-byte key cancelled the query: %r" % (key_len, err)
    r.close()
    assert_works(p)


# --- libpq 18 (psycopg's bundled libpq) ---------------------------------------------

@pytest.mark.parametrize("max_version", ["3.2", "latest"])
@pytest.mark.parametrize("workers", [1, 2])
def test_libpq18_max_protocol_version(pgcat, pg, max_version, workers):
    assert psycopg.pq.version() >= 180000, "libpq %d: needs 18 (max_protocol_version)" % psycopg.pq.version()
    p = pgcat(general={"workers": workers})
    c = p.connect(max_protocol_version=max_version)
    try:
        assert c.pgconn.full_protocol_version == 30002
        assert c.execute("SELECT 5").fetchone()[0] == 5
        t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(30)"))
        wait_until(lambda: sleeping_backend(pg, "pg_sleep(30)"), 10, msg="pg_sleep running")
        c.cancel_safe(timeout=10)
        t.join(10)
        assert not t.is_alive(), "the query was not cancelled"
        assert isinstance(box.get("error"), errors.QueryCanceled), box
        assert c.execute("SELECT 6").fetchone()[0] == 6
    finally:
        c.close()
    # libpq 18's default (3.0) beside it
    with p.connect() as c30:
        assert c30.pgconn.full_protocol_version == 30000
        assert c30.execute("SELECT 7").fetchone()[0] == 7


# --- towards servers ------------------------------------------------------------------

def test_server_asked_for_32_and_downgraded_cancel_still_works(pgcat, pg):
    """pgcat asks PostgreSQL for 3.2; PostgreSQL 15 answers with a
    NegotiateProtocolVersion down to 3.0 and a 4-byte key, which pgcat's
    cancels then forward whole."""
    p = pgcat(general={"log_level": "debug"})
    c = p.connect()
    try:
        t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(30)"))
        wait_until(lambda: sleeping_backend(pg, "pg_sleep(30)"), 10, msg="pg_sleep running")
        c.cancel_safe(timeout=10)
        t.join(10)
        assert isinstance(box.get("error"), errors.QueryCanceled), box
    finally:
        c.close()
    major = int(pg.connect("postgres").execute("SHOW server_version_num").fetchone()[0]) // 10000
    if major < 18:
        assert "server speaks protocol 3.0" in p.log(), "no downgrade to 3.0 from PostgreSQL %d" % major
        assert "protocol 3.0, key of 4 bytes" in p.log()
