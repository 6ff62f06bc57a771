# SPDX-License-Identifier: MIT
"""Replication connections (PgBouncer 1.23's; issue 41): a client that logs
in with replication=true or database gets a server connection of its own,
opened with its startup parameters and the replication parameter, and
pgcat relays its bytes both ways: pg_basebackup, pg_receivewal and a
walsender's SQL work through pgcat as against PostgreSQL itself; a server
that refuses the login fails the client with "login failed"."""
import os
import signal
import socket
import struct
import subprocess
import threading
import time

import psycopg
import pytest

import pgwire
from conftest import PG_BIN, assert_works, wait_until
from test_admin import admin, show
from test_memory_bounds import MB, PeakRss, small_quarantine_env

PG_PW = "repl_pw"      # what clients give pgcat; PostgreSQL trusts postgres on 127.0.0.1


def start(pgcat, pg, **general):
    # "replication": the database name libpq sends for a physical
    # replication connection (pg_basebackup, pg_receivewal), as PgBouncer's
    # users name it too.
    pool = {"shards": {0: {"database": "postgres", "servers": "127.0.0.1:%d:primary" % pg.port}},
            "users": {"postgres": {"password": PG_PW}, "app": {"password": "app_pw"}}}
    return pgcat(general=general or None, pools={"repl": pool, "replication": pool})


def conninfo(p, **kw):
    args = {"host": "127.0.0.1", "port": p.port, "dbname": "repl", "user": "postgres", "password": PG_PW}
    args.update(kw)
    return " ".join("%s=%s" % (k, v) for k, v in args.items())


def pg_env():
    env = dict(os.environ)
    env.pop("PGPASSWORD", None)
    return env


def test_pg_basebackup_through_pgcat(pgcat, pg, tmp_path):
    p = start(pgcat, pg)
    target = tmp_path / "backup"
    r = subprocess.run([str(PG_BIN / "pg_basebackup"), "--dbname", conninfo(p), "--checkpoint=fast",
                        "--pgdata", str(target), "--wal-method=stream", "--no-sync"],
                       capture_output=True, text=True, timeout=120, env=pg_env())
    assert r.returncode == 0, r.stderr
    assert (target / "PG_VERSION").read_text().strip() == "15", r.stderr
    assert (target / "global" / "pg_control").exists()
    assert any((target / "pg_wal").iterdir()), "no WAL streamed"
    assert "replication connection to" in p.log()
    assert_works(p)


def test_pg_receivewal_streams_through_pgcat(pgcat, pg, tmp_path):
    p = start(pgcat, pg)
    target = tmp_path / "wal"
    target.mkdir()
    proc = subprocess.Popen([str(PG_BIN / "pg_receivewal"), "--dbname", conninfo(p), "--directory", str(target),
                             "--no-loop"], stderr=subprocess.PIPE, text=True, env=pg_env())
    try:
        wait_until(lambda: pg.sql("SELECT count(*) FROM pg_stat_replication WHERE application_name = "
                                  "'pg_receivewal'", dbname="postgres")[0][0] == 1, 20,
                   msg="pg_receivewal to stream")
        # New WAL while it streams (a switch alone writes none in an
        # empty segment).
        pg.sql("CREATE TABLE IF NOT EXISTS repl_wal (i int); INSERT INTO repl_wal SELECT generate_series(1, 1000)",
               dbname="postgres")
        lsn = pg.sql("SELECT pg_current_wal_lsn()::text", dbname="postgres")[0][0]
        wait_until(lambda: pg.sql("SELECT write_lsn >= %s::pg_lsn FROM pg_stat_replication WHERE application_name "
                                  "= 'pg_receivewal'", (lsn,), dbname="postgres") == [(True,)], 20,
                   msg="pg_receivewal to write the new WAL")
        assert any(f.name.endswith(".partial") for f in target.iterdir())
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
        pg.sql("DROP TABLE IF EXISTS repl_wal", dbname="postgres")
    assert proc.returncode == 0, err
    assert_works(p)


def test_logical_walsender_takes_replication_commands_and_sql(pgcat, pg):
    p = start(pgcat, pg)
    dsn = conninfo(p, replication="database", application_name="relay_test", options="'-c enable_seqscan=off'")
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute("IDENTIFY_SYSTEM").fetchone()
        system_id = pg.sql("SELECT system_identifier::text FROM pg_control_system()", dbname="postgres")[0][0]
        assert row[0] == system_id, row
        # The startup parameters reached the walsender itself.
        assert c.execute("SHOW application_name").fetchone()[0] == "relay_test"
        assert c.execute("SHOW enable_seqscan").fetchone()[0] == "off"
        assert c.execute("SELECT 1 + 1").fetchone()[0] == 2
        backend = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        # The console shows it as a replication connection holding its server.
        r = admin(p)
        _, clients = show(r, "CLIENTS")
        r.close()
        mine = [x for x in clients if x["application_name"] == "relay_test"]
        assert len(mine) == 1 and mine[0]["replication"] == "logical" and mine[0]["state"] == "active", clients
    # A server of its own, gone with the client.
    wait_until(lambda: pg.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (backend,),
                              dbname="postgres")[0][0] == 0, 10, msg="the walsender to end with its client")
    assert_works(p)


def test_physical_walsender_refuses_sql_as_postgresql_does(pgcat, pg):
    p = start(pgcat, pg)
    with psycopg.connect(conninfo(p, dbname="replication", replication="true"), autocommit=True) as c:
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="physical replication"):
            c.execute("SELECT 1")


def test_a_refused_replication_login_is_login_failed(pgcat, pg):
    """app has no REPLICATION attribute: PostgreSQL refuses its walsender;
    the client gets PgBouncer's "login failed", the log says why."""
    p = start(pgcat, pg)
    with pytest.raises(psycopg.OperationalError, match="login failed"):
        psycopg.connect(conninfo(p, user="app", password="app_pw", replication="database"))
    log = p.log()
    assert "closing because: login failed" in log
    assert "must be superuser or replication role" in log or "permission denied" in log, log[-2000:]
    assert_works(p)


def test_replication_parameter_values(pgcat, pg):
    p = start(pgcat, pg)
    r = p.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login("postgres", PG_PW, "repl", params={"replication": "maybe"})
        fields = ei.value.args[0]
        assert fields["C"] == "22023" and fields["M"] == 'invalid value for parameter "replication": "maybe"', fields
    finally:
        r.close()
    # false is a normal connection, pooled as any.
    with psycopg.connect(conninfo(p, replication="false")) as c:
        assert c.execute("SELECT 3").fetchone()[0] == 3
    assert_works(p)


class WalsenderStub:
    """A server that logs anyone in (trust) and answers the first query with
    CopyBothResponse and one CopyData declared 1 GB long, then streams its
    body as fast as pgcat takes it: what a hostile or broken server could
    send on a replication connection."""

    DECLARED = 1 << 30

    def __init__(self, body_bytes):
        self.body_bytes = body_bytes
        self.sent = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        c, _ = self.sock.accept()
        try:
            while True:   # an SSLRequest ('N': no TLS here), then the StartupMessage
                (ln,) = struct.unpack("!I", pgwire.recv_exact(c, 4))
                if struct.unpack("!I", pgwire.recv_exact(c, ln - 4)[:4])[0] != 80877103:
                    break
                c.sendall(b"N")
            c.sendall(pgwire.msg(b"R", struct.pack("!I", 0))
                      + pgwire.msg(b"S", b"server_version\x0015.0\x00")
                      + pgwire.msg(b"K", struct.pack("!II", 4242, 1))
                      + pgwire.msg(b"Z", b"I"))
            typ = pgwire.recv_exact(c, 1)
            (ln,) = struct.unpack("!I", pgwire.recv_exact(c, 4))
            pgwire.recv_exact(c, ln - 4)
            assert typ == b"Q"
            c.sendall(pgwire.msg(b"W", b"\x00\x00\x00") + b"d" + struct.pack("!I", self.DECLARED + 4))
            chunk = b"w" * 65536
            while self.sent < self.body_bytes:
                c.sendall(chunk)
                self.sent += len(chunk)
            time.sleep(30)   # (pgcat or the test closes it first)
        except (EOFError, OSError):
            pass
        finally:
            c.close()

    def close(self):
        self.sock.close()


def test_a_server_message_of_any_length_streams_through_unheld(pgcat, pg):
    """SPEC §10: a server's message of any declared length does not make
    pgcat hold it. Once a replication connection is logged in its server's
    bytes are relayed as they come: a CopyData declared 1 GB reaches the
    client while it streams, pgcat's memory stays flat, and a client that
    stops reading stops pgcat reading its server (bounded, not buffered)."""
    stub = WalsenderStub(192 * MB)
    pool = {"shards": {0: {"database": "postgres", "servers": "127.0.0.1:%d:primary" % stub.port}},
            "users": {"postgres": {"password": PG_PW}}}
    p = pgcat(pools={"stub": pool}, env=small_quarantine_env())
    r = p.raw()
    try:
        r.login("postgres", PG_PW, "stub", params={"replication": "true"})
        rss = PeakRss(p.pid)
        r.send(pgwire.query("START_REPLICATION 0/0"))
        assert r.read_msg()[0] == b"W"
        assert r.read_bytes(5) == b"d" + struct.pack("!I", WalsenderStub.DECLARED + 4)
        # A client that does not read: pgcat stops reading its server.
        time.sleep(1.5)
        held = stub.sent
        time.sleep(1.0)
        assert stub.sent - held <= 2 * 65536, "pgcat read on for a client that read nothing"
        assert stub.sent < 64 * MB, "pgcat took %d MB for a client that read nothing" % (stub.sent // MB)
        # Reading again: the rest of what the stub sends arrives as it comes.
        got = 0
        while got < stub.body_bytes:
            got += len(r.read_bytes(min(1 << 20, stub.body_bytes - got), timeout=30))
        growth = rss.growth_mb()
        print("pgcat RSS growth: %.1f MB for %d MB relayed" % (growth, got // MB))
        assert got == stub.body_bytes
        assert growth < 40, "pgcat grew by %.0f MB relaying %d MB of one message" % (growth, got // MB)
    finally:
        r.close()
        stub.close()
    assert_works(p)


def test_replication_connections_count_in_the_pool(pgcat, pg):
    """A replication connection is one of its pool's server connections
    (PgBouncer's rule): an idle pooled connection is closed to make room
    ('closing because: evicted'), and with none idle a new replication
    client waits for a slot instead of going over pool_size."""
    pool = {"pool_size": 2, "shards": {0: {"database": "postgres", "servers": "127.0.0.1:%d:primary" % pg.port}},
            "users": {"postgres": {"password": PG_PW}}}
    p = pgcat(general={"pool_mode": "transaction", "query_wait_timeout": 20000}, pools={"repl": pool})

    def pooled():
        return pg.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'postgres' AND datname = 'postgres' "
                      "AND application_name <> 'psql' AND pid <> pg_backend_pid()", dbname="postgres")[0][0]
    # Two pooled connections, then idle.
    threads = [threading.Thread(target=lambda: psycopg.connect(conninfo(p), autocommit=True)
                                .execute("SELECT pg_sleep(0.5)").connection.close()) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_until(lambda: pooled() == 2, 10, msg="two pooled connections")
    r1 = psycopg.connect(conninfo(p, replication="database"), autocommit=True)
    r2 = psycopg.connect(conninfo(p, replication="database"), autocommit=True)
    assert p.log().count("closing because: evicted") == 2
    assert pooled() == 2, "over pool_size"
    box = {}

    def third():
        t0 = time.monotonic()
        box["conn"] = psycopg.connect(conninfo(p, replication="database"), autocommit=True)
        box["waited"] = time.monotonic() - t0
    t = threading.Thread(target=third)
    t.start()
    time.sleep(1.0)
    assert "conn" not in box, "a third replication connection went over pool_size"
    r1.close()
    t.join(15)
    assert box.get("waited", 0) >= 0.9, box
    assert box["conn"].execute("IDENTIFY_SYSTEM").fetchone() is not None
    box["conn"].close()
    r2.close()
    assert_works(p)
