# SPDX-License-Identifier: MIT
"""Typed drivers read every SHOW command of the admin console (SPEC §7,
appendix A): each column's RowDescription type is PgBouncer's (int8 for
counts, sizes, ports, pids and times in µs; text for names, addresses,
states and timestamps) and every value sent parses as that type.

What the drivers can do on a console that speaks the simple protocol only:

- psycopg 3, text results: a query without parameters goes out as a simple
  Query, so cursor.execute() reads every SHOW and loads each value with the
  loader of its declared type (int() for int8) — the check that matters.
- psycopg 3, binary results (execute(..., binary=True)): psycopg has to use
  the extended protocol to ask for binary, and the console answers that with
  0A000, so binary results are impossible here; the test checks that the
  refusal is clean and the session goes on.
- asyncpg: fetch() always goes through Parse/Bind, so it gets 0A000 too;
  only execute() without arguments (a simple Query, rows discarded) works.
  In place of asyncpg's decoders, a raw wire client parses every value of
  every row against the OID its RowDescription declares.
"""
import asyncio
import struct

import psycopg
import pytest

import pgwire
from conftest import ADMIN_PASSWORD, ADMIN_USER, wait_until

SHOW_COMMANDS = (
    "STATS", "STATS_TOTALS", "STATS_AVERAGES", "POOLS", "DATABASES", "SERVERS", "CLIENTS", "SOCKETS",
    "ACTIVE_SOCKETS", "USERS", "CONFIG", "LISTS", "VERSION", "MEM", "DNS_HOSTS", "SHARDS", "BANS", "PREPARED_STATEMENTS", "WORKERS",
    "ERRORS",
)

INT8OID = 20
TEXTOID = 25

# Columns that carry text (names, addresses, states, timestamps, free text);
# every other column of every SHOW command is int8.
TEXT_COLUMNS = {
    "database", "user", "name", "host", "pool_mode", "load_balance_hosts", "force_user", "role",
    "type", "replication", "state", "addr", "local_addr", "connect_time", "request_time", "ptr", "link",
    "tls", "application_name", "key", "value", "default", "changeable", "list", "version", "hostname",
    "addrs", "pool", "ban_reason", "reason", "banned_at", "source", "query", "started", "upgrade", "sqlstate",
}

APP_NAME = "psql-typed-app"   # non-numeric on purpose: it used to go out as int8

# Rows each command must have once the scene is set (so the types of
# values, not only of the header, are checked). ACTIVE_SOCKETS shows the
# console's own worker only, which may hold no linked client.
MUST_HAVE_ROWS = set(SHOW_COMMANDS) - {"DNS_HOSTS", "ACTIVE_SOCKETS"}


def admin_raw(inst):
    r = inst.raw()
    r.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat")
    return r


def admin_psycopg(inst):
    return psycopg.connect(host=inst.host, port=inst.port, user=ADMIN_USER, password=ADMIN_PASSWORD,
                           dbname="pgcat", sslmode="disable", connect_timeout=10, autocommit=True)


def raw_show(r, what):
    """[(name, oid, typlen)], rows (lists of str, decoded as UTF-8, or None) of SHOW <what>."""
    r.send(pgwire.query("SHOW " + what))
    cols, rows, err = [], [], None
    for typ, payload in r.read_until((b"Z",)):
        if typ == b"T":
            (n,) = struct.unpack("!H", payload[:2])
            off = 2
            for _ in range(n):
                end = payload.index(b"\x00", off)
                name = payload[off:end].decode()
                _tbl, _att, oid, typlen, _mod, fmt = struct.unpack("!IHIhiH", payload[end + 1:end + 19])
                assert fmt == 0, (what, name, fmt)
                cols.append((name, oid, typlen))
                off = end + 19
        elif typ == b"D":
            rows.append(pgwire.data_row_values(payload))
        elif typ == b"E":
            err = pgwire.parse_fields(payload)
    assert err is None, (what, err)
    return cols, rows


@pytest.fixture
def scene(pgcat, pg, request):
    """A pgcat with something in every list: a client (application_name
    non-numeric) inside a transaction with its server linked, an idle
    client, a prepared statement, a host name in the DNS cache, two bans
    (one on a configured server, one on an unknown host: NULL pool/shard)."""
    workers = request.param
    inst = pgcat(general={"workers": workers, "prepared_statements": "true"},
                 pools={"dnsdb": {"shards": {0: {"database": "appdb", "servers": "localhost:%d:primary" % pg.port}},
                                  "users": {"app": {"password": "app_pw"}}}})
    held = []
    busy = inst.connect(application_name=APP_NAME, autocommit=False)
    busy.execute("SELECT 1").fetchone()          # transaction open: server stays linked
    held.append(busy)
    idle = inst.connect(application_name="idle-" + APP_NAME)
    idle.execute("SELECT 1")
    held.append(idle)
    prep = inst.connect(prepare_threshold=0)
    for i in range(3):
        prep.execute("SELECT %s::int + 1", (i,)).fetchone()
    held.append(prep)
    with inst.connect(dbname="dnsdb") as c:
        c.execute("SELECT 1")
        with pytest.raises(psycopg.errors.DivisionByZero):   # a row of SHOW ERRORS
            c.execute("SELECT 1/0")
    r = admin_raw(inst)
    for cmd in ("BAN 127.0.0.1:%d 300" % pg.port, "BAN 192.0.2.1:5999 300"):
        r.send(pgwire.query(cmd))
        assert not [m for m in r.read_until((b"Z",)) if m[0] == b"E"], cmd
    # With several workers, wait until every one has published its figures.
    wait_until(lambda: any(v == APP_NAME
                           for row in raw_show(r, "CLIENTS")[1] for v in row), 10,
               msg="the busy client in SHOW CLIENTS")
    yield inst, r
    r.close()
    for c in held:
        c.close()


def expected_oid(col):
    return TEXTOID if col in TEXT_COLUMNS else INT8OID


@pytest.mark.parametrize("scene", [1, 2], indirect=True, ids=["1worker", "2workers"])
def test_every_show_declares_and_sends_its_types(scene):
    """Raw wire: each column's OID is PgBouncer's type for it, and each
    value parses as that OID says."""
    inst, r = scene
    for what in SHOW_COMMANDS:
        cols, rows = raw_show(r, what)
        assert cols, what
        for name, oid, typlen in cols:
            assert oid == expected_oid(name), "SHOW %s: column %s declared as OID %d" % (what, name, oid)
            assert typlen == (8 if oid == INT8OID else -1), (what, name, typlen)
        if what in MUST_HAVE_ROWS:
            assert rows, "SHOW %s has no rows to check" % what
        for row in rows:
            assert len(row) == len(cols), (what, row)
            for (name, oid, _), v in zip(cols, row):
                if v is None:
                    continue
                s = v
                if oid == INT8OID:
                    try:
                        n = int(s, 10)
                    except ValueError:
                        pytest.fail("SHOW %s: %s = %r is declared int8" % (what, name, s))
                    assert -2**63 <= n < 2**63 and s.strip() == s, (what, name, s)
    # The scene is what the test thinks it is.
    cols, rows = raw_show(r, "CLIENTS")
    names = [c[0] for c in cols]
    apps = {row[names.index("application_name")] for row in rows}
    assert APP_NAME in apps, apps
    _, rows = raw_show(r, "BANS")
    assert len(rows) >= 2
    bcols = [c[0] for c in raw_show(r, "BANS")[0]]
    assert any(row[bcols.index("shard")] is None for row in rows)
    # pgcat checks each value it sends against its column's type and says
    # when the code and the table disagree.
    assert not [l for l in inst.log().splitlines()
                if "admin: text value" in l or "admin: number for" in l or "admin: row with" in l
                or "admin: more values" in l]


@pytest.mark.parametrize("scene", [1, 2], indirect=True, ids=["1worker", "2workers"])
def test_psycopg_reads_every_show(scene):
    """psycopg 3 with its type loaders: int8 columns come back as int, text
    ones as str, NULLs as None; no value makes it raise."""
    inst, _ = scene
    with admin_psycopg(inst) as conn:
        for what in SHOW_COMMANDS:
            cur = conn.cursor()
            cur.execute("SHOW " + what)
            rows = cur.fetchall()
            desc = cur.description
            if what in MUST_HAVE_ROWS:
                assert rows, what
            for row in rows:
                for d, v in zip(desc, row):
                    if v is None:
                        continue
                    want = str if expected_oid(d.name) == TEXTOID else int
                    assert isinstance(v, want), "SHOW %s: %s = %r" % (what, d.name, v)
        cur = conn.execute("SHOW CLIENTS")
        names = [d.name for d in cur.description]
        assert APP_NAME in {row[names.index("application_name")] for row in cur.fetchall()}
        # Binary results need the extended protocol, which the console refuses
        # (0A000); the session stays usable.
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("SHOW POOLS", binary=True)
        assert conn.execute("SHOW VERSION").fetchone()[0].startswith("pgcat ")


@pytest.mark.parametrize("scene", [1], indirect=True, ids=["1worker"])
def test_asyncpg_on_the_console(scene):
    """asyncpg logs in and runs simple queries; fetch() is extended protocol,
    refused with 0A000, and the connection goes on."""
    import asyncpg
    inst, _ = scene

    async def run():
        conn = await asyncpg.connect(host=inst.host, port=inst.port, user=ADMIN_USER, password=ADMIN_PASSWORD,
                                     database="pgcat", ssl=False, statement_cache_size=0, timeout=10)
        try:
            for what in SHOW_COMMANDS:
                assert (await conn.execute("SHOW " + what)) == "SHOW"
            with pytest.raises(asyncpg.exceptions.FeatureNotSupportedError):
                await conn.fetch("SHOW CLIENTS")
            assert (await conn.execute("SHOW VERSION")) == "SHOW"
        finally:
            await conn.close()

    asyncio.run(run())
