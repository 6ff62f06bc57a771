# SPDX-License-Identifier: MIT
"""Session parameters in transaction mode (SPEC §3): pgcat tracks each client's
TimeZone, search_path, application_name, DateStyle... and replays them with
SET on whichever server the client gets, so no client ever sees another
client's settings, and each keeps its own across transactions."""
import asyncio
import subprocess

import psycopg

import pytest

from conftest import PASSWORDS, PG_BIN, assert_pool_idle


def show(c, name):
    return c.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]


@pytest.fixture
def one_server(pgcat):
    # pool_size 1: both clients necessarily run on the same server connection.
    return pgcat(general={"pool_mode": "transaction", "default_pool_size": 1})


def test_set_by_one_client_is_not_seen_by_another(one_server, pg):
    p = one_server
    a = p.connect()
    b = p.connect()
    defaults = {k: show(b, k) for k in ("TimeZone", "search_path", "application_name", "DateStyle",
                                        "IntervalStyle", "extra_float_digits")}
    a.execute("SET TimeZone = 'Asia/Tokyo'")
    a.execute("SET search_path = other, public")
    a.execute("SET application_name = 'client_a'")
    a.execute("SET DateStyle = 'SQL, DMY'")
    a.execute("SET IntervalStyle = 'iso_8601'")
    a.execute("SET extra_float_digits = 1")
    pid_a = a.execute("SELECT pg_backend_pid()").fetchone()[0]
    pid_b = b.execute("SELECT pg_backend_pid()").fetchone()[0]
    assert pid_a == pid_b, "pool_size 1: both clients share the one server"
    for k, v in defaults.items():
        assert show(b, k) == v, "client B sees client A's %s" % k
    # A still has its own, on later transactions, after B used the server.
    assert show(a, "TimeZone") == "Asia/Tokyo"
    assert show(a, "search_path") == "other, public"
    assert show(a, "application_name") == "client_a"
    assert show(a, "DateStyle") == "SQL, DMY"
    assert show(a, "IntervalStyle") == "iso_8601"
    assert show(a, "extra_float_digits") == "1"
    # And B again, after A.
    for k, v in defaults.items():
        assert show(b, k) == v, "client B sees client A's %s (second round)" % k
    a.close()
    b.close()
    assert_pool_idle(pg, max_conns=1)


def test_search_path_resolves_tables_per_client(one_server, pg):
    """Not only SHOW: unqualified names resolve with the client's own search_path."""
    pg.sql("CREATE TABLE IF NOT EXISTS other.sp_probe (v text)")
    pg.sql("CREATE TABLE IF NOT EXISTS public.sp_probe (v text)")
    pg.sql("GRANT ALL ON other.sp_probe, public.sp_probe TO PUBLIC")
    pg.sql("TRUNCATE other.sp_probe, public.sp_probe")
    pg.sql("INSERT INTO other.sp_probe VALUES ('other')")
    pg.sql("INSERT INTO public.sp_probe VALUES ('public')")
    p = one_server
    a = p.connect()
    b = p.connect()
    a.execute("SET search_path TO other")
    for _ in range(3):
        assert a.execute("SELECT v FROM sp_probe").fetchone()[0] == "other"
        assert b.execute("SELECT v FROM sp_probe").fetchone()[0] == "public"
    a.execute("RESET search_path")
    assert a.execute("SELECT v FROM sp_probe").fetchone()[0] == "public"
    a.close()
    b.close()


def test_reset_and_reset_all(one_server):
    p = one_server
    a = p.connect()
    b = p.connect()
    default_tz = show(b, "TimeZone")
    a.execute("SET TimeZone = 'America/Lima'")
    a.execute("SET application_name = 'aa'")
    a.execute("RESET TimeZone")
    assert show(a, "TimeZone") == default_tz
    assert show(a, "application_name") == "aa"
    b.execute("SET TimeZone = 'Europe/Paris'")
    a.execute("RESET ALL")
    assert show(a, "application_name") == ""
    assert show(a, "TimeZone") == default_tz
    assert show(b, "TimeZone") == "Europe/Paris"
    a.close()
    b.close()


def test_set_local_and_rolled_back_set_do_not_stick(one_server):
    p = one_server
    a = p.connect(autocommit=False)
    default_tz = show(a, "TimeZone")
    a.commit()
    a.execute("SET LOCAL TimeZone = 'Asia/Kolkata'")
    assert show(a, "TimeZone") == "Asia/Kolkata"
    a.commit()
    assert show(a, "TimeZone") == default_tz
    a.commit()
    a.execute("SET TimeZone = 'Asia/Kolkata'")
    a.rollback()                      # a SET inside a rolled-back transaction is undone
    assert show(a, "TimeZone") == default_tz
    a.commit()
    b = p.connect()
    assert show(b, "TimeZone") == default_tz
    a.close()
    b.close()


def test_startup_parameters_follow_the_client(one_server):
    """Startup parameters (application_name, DateStyle, TimeZone, search_path via
    options, pgjdbc's extra_float_digits) are applied on whichever server the
    client gets."""
    p = one_server

    async def go():
        a = await p.asyncpg(server_settings={"application_name": "from_startup_a",
                                             "DateStyle": "German, DMY",
                                             "TimeZone": "Pacific/Auckland",
                                             "extra_float_digits": "2"})
        b = await p.asyncpg(server_settings={"application_name": "from_startup_b"})
        try:
            out = []
            for _ in range(2):
                out.append([await a.fetchval("SELECT current_setting('application_name')"),
                            await a.fetchval("SELECT current_setting('DateStyle')"),
                            await a.fetchval("SELECT current_setting('TimeZone')"),
                            await a.fetchval("SELECT current_setting('extra_float_digits')"),
                            await b.fetchval("SELECT current_setting('application_name')"),
                            await b.fetchval("SELECT current_setting('TimeZone')"),
                            await b.fetchval("SELECT current_setting('DateStyle')")])
            return out
        finally:
            await a.close()
            await b.close()
    for got in asyncio.run(go()):
        assert got[:4] == ["from_startup_a", "German, DMY", "Pacific/Auckland", "2"]
        assert got[4] == "from_startup_b"
        assert got[5] != "Pacific/Auckland" and got[6] != "German, DMY"


def test_options_search_path(one_server, pg):
    """The value as PostgreSQL takes it from options: the string itself
    (other,public), not a list re-spelled."""
    with pg.connect(options="-c search_path=other,public") as d:
        want = show(d, "search_path")
    assert want == "other,public"
    p = one_server
    a = p.connect(options="-c search_path=other,public")
    b = p.connect()
    for _ in range(2):
        assert show(a, "search_path") == want
        assert show(b, "search_path") == '"$user", public'
    a.close()
    b.close()


def test_parameter_status_reported_to_the_client(one_server):
    p = one_server
    a = p.connect()
    b = p.connect()
    a.execute("SET TimeZone = 'Asia/Tokyo'")
    assert a.info.parameter_status("TimeZone") == "Asia/Tokyo"
    b.execute("SELECT 1")
    assert b.info.parameter_status("TimeZone") != "Asia/Tokyo"
    a.execute("SET application_name = 'ps_a'")
    assert a.info.parameter_status("application_name") == "ps_a"
    a.execute("SELECT 1")
    assert a.info.parameter_status("TimeZone") == "Asia/Tokyo"
    a.close()
    b.close()


def test_params_with_several_servers(pgcat):
    """Many clients with distinct settings over 3 servers: each always sees its own."""
    p = pgcat(general={"default_pool_size": 3})
    zones = ["UTC", "Asia/Tokyo", "Europe/Paris", "America/Lima", "Africa/Cairo", "Asia/Kolkata"]
    conns = [p.connect() for _ in zones]
    for c, z in zip(conns, zones):
        c.execute("SET TimeZone = %s" % ("'%s'" % z))
        c.execute("SET application_name = %s" % ("'app_%s'" % z.replace("/", "_")))
    for _ in range(4):
        for c, z in zip(conns, zones):
            assert show(c, "TimeZone") == z
            assert show(c, "application_name") == "app_%s" % z.replace("/", "_")
    for c in conns:
        c.close()


def test_session_mode_keeps_settings(pgcat):
    p = pgcat(general={"pool_mode": "session", "default_pool_size": 2})
    a = p.connect()
    a.execute("SET TimeZone = 'Asia/Tokyo'")
    a.execute("SET work_mem = '9MB'")     # not tracked, but session mode keeps everything
    for _ in range(3):
        assert show(a, "TimeZone") == "Asia/Tokyo"
        assert show(a, "work_mem") == "9MB"
    a.close()


def _on_another_server(p, a, run):
    """Run a's next statement on a server other than the one a just used: a
    second client holds that one in an open transaction meanwhile."""
    used = a.execute("SELECT pg_backend_pid()").fetchone()[0]
    b = p.connect()
    try:
        b.execute("BEGIN")
        held = b.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert held == used, "the second client should get the server the first one just released"
        pid, value = run()
        assert pid != used, "the statement should run on another server connection"
        return value
    finally:
        b.execute("ROLLBACK")
        b.close()


@pytest.mark.parametrize("case", ["rolled_back", "failed_transaction", "failed_set", "committed"])
def test_set_sticks_only_if_postgresql_keeps_it(pgcat, pg, case):
    """A SET that PostgreSQL undoes (its transaction rolled back or failed,
    or the SET itself was refused) must not follow the client to its next
    server; one in a committed transaction must (what a direct connection
    shows)."""
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 4})
    a = p.connect()
    a.execute("SET search_path = kept_schema")          # stays through every case
    if case == "rolled_back":
        a.execute("BEGIN")
        a.execute("SET work_mem = '77MB'")
        a.execute("ROLLBACK")
        name, expected = "work_mem", "4MB"
    elif case == "failed_transaction":
        a.execute("BEGIN")
        a.execute("SET work_mem = '78MB'")
        with pytest.raises(psycopg.errors.DivisionByZero):
            a.execute("SELECT 1/0")
        a.execute("COMMIT")                                # answered ROLLBACK
        name, expected = "work_mem", "4MB"
    elif case == "failed_set":
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            a.execute("SET statement_timeout = 'not a duration'")
        name, expected = "statement_timeout", "0"
    else:
        a.execute("BEGIN")
        a.execute("SET work_mem = '79MB'")
        a.execute("COMMIT")
        name, expected = "work_mem", "79MB"
    value = _on_another_server(
        p, a, lambda: a.execute("SELECT pg_backend_pid(), current_setting(%s)", (name,)).fetchone())
    assert value == expected
    assert show(a, "search_path") == "kept_schema", "a refused or rolled-back SET cost the client its other settings"
    a.close()
    assert_pool_idle(pg)


# ---- values reported as PostgreSQL spells them ----------------------------------

def _status(c, names=("client_encoding", "DateStyle", "IntervalStyle", "standard_conforming_strings")):
    return {k: c.info.parameter_status(k) for k in names}


@pytest.mark.parametrize("enc", ["utf8", "utf-8", "UTF_8", "unicode", "UNICODE", "Unicode", "euc_jp", "euc-jp", "eucjp",
                                 "latin1", "ISO-8859-15", "win1252", "koi8"])
def test_client_encoding_reported_as_postgresql_does(one_server, pg, enc):
    """A client that starts with client_encoding=utf8 gets UTF8 back, as from
    PostgreSQL (libpq and psycopg compare what they asked for with it)."""
    with pg.connect(client_encoding=enc) as d:
        want = _status(d)
        want_codec = d.info.encoding
        want_show = d.execute("SHOW client_encoding").fetchone()[0]
    with one_server.connect(client_encoding=enc) as c:
        assert _status(c) == want
        assert c.info.encoding == want_codec
        assert c.execute("SHOW client_encoding").fetchone()[0] == want_show
        assert c.info.parameter_status("client_encoding") == want_show


@pytest.mark.parametrize("opts", ["-c DateStyle=iso", "-c DateStyle=german", "-c datestyle=sql,dmy",
                                  "-c DateStyle=Postgres,European", "-c IntervalStyle=SQL_STANDARD",
                                  "-c standard_conforming_strings=yes"])
def test_startup_settings_reported_as_postgresql_does(one_server, pg, opts):
    with pg.connect(options=opts) as d:
        want = _status(d)
    with one_server.connect(options=opts) as c:
        assert _status(c) == want
        assert c.execute("SHOW DateStyle").fetchone()[0] == want["DateStyle"]


@pytest.mark.parametrize("enc", ["utf8", "euc-jp", "latin9"])
def test_psql_client_encoding(one_server, pg, monkeypatch, enc):
    """psql with PGCLIENTENCODING: the encoding it takes from ParameterStatus
    (\\encoding) and SHOW agree with a direct connection."""
    monkeypatch.setenv("PGCLIENTENCODING", enc)
    args = ("-c", "\\encoding")
    direct = subprocess.run([str(PG_BIN / "psql"), "-X", "-At", "-h", pg.host, "-p", str(pg.port),
                             "-U", "postgres", "-d", "appdb", *args, "-c", "SHOW client_encoding"],
                            capture_output=True, text=True, timeout=60)
    assert direct.returncode == 0, direct.stderr
    via = one_server.psql("SHOW client_encoding", args=args)
    assert via.stdout.split() == direct.stdout.split()
    assert len(set(via.stdout.split())) == 1


def _sync_sets(p, name):
    return [l for l in p.log().splitlines() if "sync parameters" in l and name.lower() in l.lower()]


def test_set_client_encoding_in_session(pgcat, pg):
    """SET client_encoding TO 'utf8' on a UTF8 session changes nothing, as on
    PostgreSQL (which reports nothing): pgcat must not then SET it again at
    every hand-over. A real change follows the client to its next server, and
    reads back as PostgreSQL spells it."""
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 4, "log_level": "trace"})
    a = p.connect()
    assert a.info.parameter_status("client_encoding") == "UTF8"
    a.execute("SET client_encoding TO 'utf8'")
    assert a.info.parameter_status("client_encoding") == "UTF8"
    for q in ("SET client_encoding = utf8", "SET client_encoding TO 'unicode'",
              "SET DateStyle TO 'iso, mdy'", "SET DateStyle = ISO", "SET standard_conforming_strings = true"):
        a.execute(q)
    value = _on_another_server(p, a, lambda: a.execute(
        "SELECT pg_backend_pid(), current_setting('client_encoding')").fetchone())
    assert value == "UTF8"
    assert _sync_sets(p, "client_encoding") == [], "useless SET client_encoding replayed"
    assert _sync_sets(p, "DateStyle") == [], "useless SET DateStyle replayed"
    assert _sync_sets(p, "standard_conforming_strings") == []
    a.execute("SET client_encoding TO 'euc-jp'")
    assert a.info.parameter_status("client_encoding") == "EUC_JP"
    assert a.info.encoding == "euc_jp"
    value = _on_another_server(p, a, lambda: a.execute(
        "SELECT pg_backend_pid(), current_setting('client_encoding')").fetchone())
    assert value == "EUC_JP"
    assert a.info.parameter_status("client_encoding") == "EUC_JP"
    a.execute("SET DateStyle TO 'german'")
    assert a.info.parameter_status("DateStyle") == "German, DMY"
    value = _on_another_server(p, a, lambda: a.execute(
        "SELECT pg_backend_pid(), current_setting('DateStyle')").fetchone())
    assert value == "German, DMY"
    a.close()


def test_startup_client_encoding_not_replayed(pgcat):
    """A client that started with client_encoding=utf8 on UTF8 servers needs no
    SET on any of them."""
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 2, "log_level": "trace"})
    a = p.connect(client_encoding="utf8", options="-c DateStyle=iso")
    for _ in range(3):
        _on_another_server(p, a, lambda: a.execute("SELECT pg_backend_pid(), 1").fetchone())
    assert _sync_sets(p, "client_encoding") == []
    assert _sync_sets(p, "DateStyle") == []
    a.close()


def test_ignore_startup_parameters(pgcat):
    """ignore_startup_parameters: the named settings are dropped unread, in
    the startup packet and inside options (where a value the server would
    refuse does no harm then); the others reach the server."""
    inst = pgcat(general={"pool_mode": "transaction", "ignore_startup_parameters": "extra_float_digits, geqo"})
    long = "1" * 4096
    with inst.connect(options="-c extra_float_digits=%s -c timezone=Europe/Lisbon" % long) as c:
        assert show(c, "extra_float_digits") == "1"      # the server's default
        assert show(c, "TimeZone") == "Europe/Lisbon"
    with inst.connect(options="-c geqo=off") as c:
        assert show(c, "geqo") == "on"
    # as startup parameters of their own (libpq sends none such: the raw protocol)
    r = inst.raw()
    try:
        r.login("app", PASSWORDS["app"], "appdb", params={"extra_float_digits": "3", "application_name": "kept"})
        rows, err, _ = r.simple("SELECT current_setting('extra_float_digits'), current_setting('application_name')")
        assert err is None and [tuple(x) for x in rows] == [("1", "kept")], (rows, err)
    finally:
        r.close()
    # without the key, the setting goes through; options PostgreSQL refuses
    # are refused (a -c without a value)
    plain = pgcat(general={"pool_mode": "transaction"})
    with plain.connect(options="-c geqo=off") as c:
        assert show(c, "geqo") == "off"
    with pytest.raises(psycopg.OperationalError, match="requires a value"):
        plain.connect(options="-c geqo")
    # "options" in the list: a refused options is dropped whole (PgBouncer's reading)
    lax = pgcat(general={"pool_mode": "transaction", "ignore_startup_parameters": "options"})
    with lax.connect(options="-c geqo=off -c timezone") as c:
        assert show(c, "geqo") == "on"
    with lax.connect(options="-c geqo=off") as c:
        assert show(c, "geqo") == "off"
