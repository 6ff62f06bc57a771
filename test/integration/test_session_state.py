# SPDX-License-Identifier: MIT
"""Session state never reaches the next client (SPEC §10), in transaction
mode with one server connection, so that a leak would show: a setting is
tracked at any length PostgreSQL takes (2,000 and 70,000-byte search_paths),
in long and multi-statement texts, through the extended protocol and
set_config; what pgcat does not follow (set_config with computed values,
SET ROLE, a text past the bound it reads) makes the server be reset before
another client gets it; a setting the server refuses closes that client
rather than leaving it another's. And startup options are read exactly as
PostgreSQL reads them (SPEC §3): each case gets the same acceptance or
refusal, SQLSTATE, message and resulting settings as a direct connection."""
import psycopg
import pytest

import pgwire
from conftest import PASSWORDS, assert_pool_idle, assert_works

READ_BOUND = 1024 * 1024   # PARAMS_SQL_MAX: texts read whole for the settings they change


def show(c, name):
    return c.execute("SELECT current_setting('%s')" % name).fetchone()[0]


def pid(c):
    return c.execute("SELECT pg_backend_pid()").fetchone()[0]


def schema_list(size):
    """A valid search_path of about size bytes: schema names s00000, s00001..."""
    names, n = [], 0
    while n < size:
        names.append("s%05d" % len(names))
        n += 8
    return ", ".join(names)


@pytest.fixture
def one_server(pgcat):
    # pool_size 1: every client necessarily runs on the same server connection.
    return pgcat(general={"pool_mode": "transaction", "default_pool_size": 1})


def direct(pg, statements, name="search_path"):
    """What PostgreSQL itself shows for name after statements."""
    with pg.connect(user="app", password=PASSWORDS["app"]) as d:
        for s in statements:
            d.execute(s)
        return show(d, name)


# ---- settings tracked at any length, in any text ------------------------------------

@pytest.mark.parametrize("size", [2000, 70000])
def test_long_search_path_is_tracked(one_server, pg, size):
    """A search_path over the 1,024 bytes pgcat used to track: A keeps it on
    its next transactions, B (same server) never sees it."""
    value = schema_list(size)
    want = direct(pg, ["SET search_path TO " + value])
    assert len(want) >= size - 10
    a = one_server.connect()
    b = one_server.connect()
    default = show(b, "search_path")
    a.execute("SET search_path TO " + value)
    assert pid(a) == pid(b), "pool_size 1: both clients share the one server"
    for _ in range(2):
        assert show(b, "search_path") == default, "B got A's %d-byte search_path" % size
        assert show(a, "search_path") == want
    a.close()
    b.close()
    assert_pool_idle(pg, max_conns=1)


LONG_TEXTS = {
    # a SET behind 200 kB of comment: read whole (up to 1 MB)
    "comment_200k": "/*" + "x" * 200_000 + "*/ SET search_path TO longq",
    # the SET is the second statement of a 200 kB text
    "second_statement_200k": "SELECT '" + "x" * 200_000 + "'; SET search_path TO longq",
    "second_statement": "SELECT 1; SET search_path TO longq",
}


@pytest.mark.parametrize("shape", sorted(LONG_TEXTS))
def test_set_in_long_or_multi_statement_query(one_server, pg, shape):
    text = LONG_TEXTS[shape]
    want = direct(pg, [text])
    assert want == "longq"
    a = one_server.connect()
    b = one_server.connect()
    default = show(b, "search_path")
    a.execute(text)
    for _ in range(2):
        assert show(b, "search_path") == default, "B got the SET of A's %s" % shape
        assert show(a, "search_path") == want
    a.close()
    b.close()


def test_set_in_query_past_the_read_bound_resets_the_server(one_server, pg):
    """A text longer than pgcat reads whole (1 MB) cannot be followed: its
    server is reset (RESET ALL) before it serves anyone, so B never gets the
    SET at its end; A's other settings come back on its next transaction
    (the one in that text does not: the documented bound)."""
    text = "SELECT '" + "x" * (READ_BOUND + 1000) + "'; SET search_path TO beyond"
    a = one_server.connect()
    b = one_server.connect()
    default = show(b, "search_path")
    a.execute("SET TimeZone TO 'Asia/Tokyo'")
    a.execute("SET statement_timeout TO '7s'")
    a.execute(text)
    assert show(b, "search_path") == default, "B got the SET of A's 1 MB text"
    assert show(b, "statement_timeout") == "0"
    assert show(a, "TimeZone") == "Asia/Tokyo"
    assert show(a, "statement_timeout") == "7s"
    assert show(a, "search_path") == default
    a.close()
    b.close()


def test_set_through_the_extended_protocol(one_server, pg):
    """Parse/Bind/Execute of a SET (psycopg's prepared statements), short
    and behind a 20 kB comment, and a raw one without a driver."""
    a = one_server.connect()
    b = one_server.connect()
    default = show(b, "search_path")
    a.execute("SET search_path TO ext1", prepare=True)
    assert show(b, "search_path") == default
    assert show(a, "search_path") == "ext1"
    a.execute("/*" + "y" * 20_000 + "*/ SET search_path TO ext2", prepare=True)
    assert show(b, "search_path") == default
    assert show(a, "search_path") == "ext2"
    r = one_server.raw_login()
    r.send(pgwire.parse("SET search_path TO ext3") + pgwire.bind() + pgwire.execute() + pgwire.sync())
    msgs = r.read_until((b"Z",))
    assert [m[0] for m in msgs] == [b"1", b"2", b"C", b"Z"], msgs
    assert show(b, "search_path") == default
    rows, err, _ = r.simple("SHOW search_path")
    assert err is None and rows == [["ext3"]]
    r.close()
    a.close()
    b.close()


def test_set_config(one_server, pg):
    """SELECT set_config('name', 'value', false) with literals is followed
    like a SET (the value as PostgreSQL takes a string); any other use of
    set_config (a computed value, a bound parameter) cannot be, and resets
    the server: B never gets either."""
    a = one_server.connect()
    b = one_server.connect()
    default = show(b, "search_path")
    want = direct(pg, ["SELECT set_config('search_path', 'viafunc, public', false)"])
    a.execute("SELECT set_config('search_path', 'viafunc, public', false)")
    for _ in range(2):
        assert show(b, "search_path") == default
        assert show(a, "search_path") == want
    a.execute("SELECT set_config('myapp.tenant', '4' || '2', false)")
    assert show(b, "search_path") == default
    assert b.execute("SELECT current_setting('myapp.tenant', true)").fetchone()[0] in (None, "")
    a.execute("SELECT set_config('myapp.tenant', %s, false)", ["43"])
    assert b.execute("SELECT current_setting('myapp.tenant', true)").fetchone()[0] in (None, "")
    # what pgcat followed stays with A through the resets
    assert show(a, "search_path") == want
    a.close()
    b.close()


def test_set_role_does_not_reach_the_next_client(one_server, pg):
    """SET ROLE is session state pgcat does not follow: the server is reset
    (RESET SESSION AUTHORIZATION, RESET ALL) before B gets it."""
    pg.sql("DO $$ BEGIN CREATE ROLE sstate_role NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    pg.sql("GRANT sstate_role TO app")
    a = one_server.connect()
    b = one_server.connect()
    with a.transaction():
        a.execute("SET ROLE sstate_role")
        assert a.execute("SELECT current_user").fetchone()[0] == "sstate_role"
    assert b.execute("SELECT current_user").fetchone()[0] == "app"
    a.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    assert show(b, "default_transaction_read_only") == "off"
    a.execute('SET "search_path" TO quoted')   # a name pgcat does not read
    assert show(b, "search_path") != "quoted"
    a.close()
    b.close()
    assert_pool_idle(pg, max_conns=1)


def test_set_time_zone_local_and_interval(one_server, pg):
    """SET TIME ZONE LOCAL and INTERVAL exist only in that form (SET
    TimeZone TO local is refused): replayed as such they would fail the
    next sync. A keeps the zone PostgreSQL gives it, B its own."""
    a = one_server.connect()
    b = one_server.connect()
    default = show(b, "TimeZone")
    a.execute("SET TIME ZONE LOCAL")
    b.execute("SET TimeZone TO 'Europe/Paris'")
    assert show(a, "TimeZone") == default
    assert show(b, "TimeZone") == "Europe/Paris"
    want = direct(pg, ["SET TIME ZONE INTERVAL '+05:00' HOUR TO MINUTE"], "TimeZone")
    a.execute("SET TIME ZONE INTERVAL '+05:00' HOUR TO MINUTE")
    assert show(b, "TimeZone") == "Europe/Paris"
    assert show(a, "TimeZone") == want
    a.close()
    b.close()


# ---- a setting the server refuses ---------------------------------------------------

def first_query(r, sql="SHOW search_path"):
    """(rows, error fields, closed) of one simple query on a raw connection."""
    r.send(pgwire.query(sql))
    rows, err = [], None
    while True:
        m = r.read_msg()
        if m is None:
            return rows, err, True
        if m[0] == b"D":
            rows.append(pgwire.data_row_values(m[1]))
        elif m[0] == b"E" and err is None:
            err = pgwire.parse_fields(m[1])
        elif m[0] == b"Z":
            return rows, err, False


def outcome(host, port, params, show_name="search_path"):
    """A login with these startup parameters and SHOW show_name, as
    ("ok", search_path, value) or ("refused", SQLSTATE, message): at the
    login, or (pgcat, for what only a server judges) as a FATAL answering
    the first query."""
    r = pgwire.Raw(host, port)
    try:
        try:
            r.login("app", PASSWORDS["app"], "appdb", params)
        except pgwire.ProtocolError as e:
            f = e.args[0]
            assert isinstance(f, dict), e
            return ("refused", f.get("C"), f.get("M"))
        rows, err, closed = first_query(r)
        if err is not None:
            assert closed and err.get("S") == "FATAL", (err, closed)
            return ("refused", err.get("C"), err.get("M"))
        rows2, err2, _ = first_query(r, "SELECT current_setting('%s', true)" % show_name)
        assert err2 is None, err2
        return ("ok", rows[0][0], rows2[0][0])
    finally:
        r.close()


def test_refused_setting_closes_the_client_not_hands_it_anothers(one_server, pg):
    """A startup setting only a server can judge (an unknown name, a bad
    value): PostgreSQL refuses the login; pgcat, which cannot know at login,
    refuses the client at its first query with the same error. Never does
    the client run with the previous client's settings."""
    a = one_server.connect()
    a.execute("SET search_path TO prev_client")
    for opts in ("-c nosuch=1", "-c work_mem=abc", "-c search_path=x -c statement_timeout=never"):
        want = outcome(pg.host, pg.port, {"options": opts})
        assert want[0] == "refused", want
        got = outcome(one_server.host, one_server.port, {"options": opts})
        assert got == want, "%s: PostgreSQL %r, pgcat %r" % (opts, want, got)
        assert show(a, "search_path") == "prev_client"
    a.close()
    assert_works(one_server)
    assert_pool_idle(pg, max_conns=1)


# ---- startup options as PostgreSQL reads them -----------------------------------------

OPTION_CASES = [
    # (options, setting to show besides search_path)
    ("-c search_path=abc\\", "search_path"),
    ("-c search_path=a\\ b", "search_path"),
    ("-c search_path=a\\\\b", "search_path"),
    ("-c search_path=\"a\\ b\",c", "search_path"),
    ("-c search_path=other,public", "search_path"),
    ("-c search_path= ", "search_path"),
    ("-c search_path=a,", "search_path"),
    ("-c search_path=\"unterminated", "search_path"),
    ("-csearch_path=x", "search_path"),
    ("--search_path=y", "search_path"),
    ("--search-path=z", "search_path"),
    ("-c search_path=x -c SEARCH_PATH=y", "search_path"),
    ("-c search_path", "search_path"),
    ("--search_path", "search_path"),
    ("-c", "search_path"),
    ("-c search_path=x -c", "search_path"),
    ("-c search_path=x extra", "search_path"),
    ("foo -c search_path=x", "search_path"),
    ("\\", "search_path"),
    ("-- x", "search_path"),
    ("-aP", "search_path"),
    ("-Pa", "search_path"),
    ("-c a.b=1", "a.b"),
    ("-c a-b.c=2", "a_b.c"),
    ("-c a..b=1", "search_path"),
    ("-c =1", "search_path"),
    ("-c\\ search_path=z", "search_path"),
    ("-c nosuch=1", "search_path"),
    ("-c user=x", "search_path"),
    ("-c server_version=1", "search_path"),
    ("-c work_mem=64kB", "work_mem"),
    ("-c work_mem=abc", "work_mem"),
    ("-S 1000", "work_mem"),
    ("-e", "DateStyle"),
    ("-fs", "enable_seqscan"),
    ("-f x", "search_path"),
    ("-B 100", "search_path"),
    ("-F", "search_path"),
    ("-i", "search_path"),
    ("-d 1", "search_path"),
    ("-b -C x -D /tmp -E -j -n -T -v 2 -r /tmp/x", "search_path"),
]


@pytest.mark.parametrize("opts,name", OPTION_CASES, ids=[c[0] for c in OPTION_CASES])
def test_options_as_postgresql(one_server, pg, opts, name):
    """Each options string through pgcat and directly: the same acceptance
    or refusal, SQLSTATE and message, and the same settings; a previous
    client's search_path (same server) never shows."""
    want = outcome(pg.host, pg.port, {"options": opts}, name)
    prev = one_server.connect()
    prev.execute("SET search_path TO prev_client")
    got = outcome(one_server.host, one_server.port, {"options": opts}, name)
    assert got == want, "PostgreSQL %r, pgcat %r" % (want, got)
    assert show(prev, "search_path") == "prev_client"
    prev.close()


@pytest.mark.parametrize("value", ["x,y", "a b", "\"Q\", public", ""])
def test_search_path_startup_parameter(one_server, pg, value):
    """search_path as a startup parameter of its own (pgjdbc's
    currentSchema): checked and taken as PostgreSQL takes it."""
    want = outcome(pg.host, pg.port, {"search_path": value})
    prev = one_server.connect()
    prev.execute("SET search_path TO prev_client")
    got = outcome(one_server.host, one_server.port, {"search_path": value})
    assert got == want, "PostgreSQL %r, pgcat %r" % (want, got)
    prev.close()


def test_backend_start_settings_are_refused(one_server, pg):
    """-P (ignore_system_indexes) and -W (post_auth_delay) set what only a
    backend's start can: PostgreSQL takes them at login, but a pooled
    server has started long ago. pgcat refuses the client, at its first
    query, with the error PostgreSQL gives for setting them later (the one
    difference from a direct connection, doc/architecture.md)."""
    assert outcome(pg.host, pg.port, {"options": "-P"})[0] == "ok"
    got = outcome(one_server.host, one_server.port, {"options": "-P"})
    assert got == ("refused", "55P02", 'parameter "ignore_system_indexes" cannot be set after connection start'), got
    assert_works(one_server)


# ---- statements that change settings, tracked where they run --------------------------

def tenant(c):
    return c.execute("SELECT current_setting('myapp.tenant', true)").fetchone()[0]


@pytest.mark.parametrize("prepared", ["off", "on"])
@pytest.mark.parametrize("threshold", [None, 0], ids=["unnamed", "named"])
def test_set_config_with_bound_values_is_tracked(pgcat, pg, prepared, threshold):
    """SELECT set_config(%s, %s, false), the drivers' way (psycopg's own
    suite, row-level security setups): the name and value are in the Bind,
    and are tracked from there, at each run: A keeps its value through
    its next transactions, B (the same server) never sees it. As an unnamed
    statement and as a named one prepared once and run again later
    (psycopg's prepare_threshold = 0), with prepared_statements on and
    off."""
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 1, "prepared_statements": prepared})
    a = p.connect(prepare_threshold=threshold)
    b = p.connect()
    for value in ("41", "42", "43"):
        a.execute("SELECT set_config(%s, %s, false)", ["myapp.tenant", value])
        for _ in range(2):
            assert tenant(b) in (None, "")
            assert tenant(a) == value
    # the is_local form lasts for its transaction only, as on one server
    with a.transaction():
        a.execute("SELECT set_config(%s, %s, true)", ["myapp.tenant", "local"])
        assert tenant(a) == "local"
    assert tenant(a) == "43" and tenant(b) in (None, "")
    a.close()
    b.close()
    assert_pool_idle(pg, max_conns=1)


@pytest.mark.parametrize("prepared", ["off", "on"])
def test_named_set_statement_run_in_a_later_transaction(pgcat, pg, prepared):
    """A statement that sets search_path, parsed once and run in later
    transactions (after other clients had the server): each run is
    tracked on the server it runs on; B never gets it, A always has it."""
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 1, "prepared_statements": prepared})
    a = p.raw_login()
    b = p.connect()
    default = show(b, "search_path")
    a.send(pgwire.parse("SET search_path TO other, public", name="setter") + pgwire.sync())
    assert [t for t, _ in a.read_until()] == [b"1", b"Z"]
    assert show(b, "search_path") == default
    for _ in range(3):
        a.send(pgwire.bind(stmt="setter") + pgwire.execute() + pgwire.sync())
        assert [t for t, _ in a.read_until()] == [b"2", b"C", b"Z"]
        assert show(b, "search_path") == default
        rows, err, status = a.simple("SHOW search_path")
        assert err is None and rows == [["other, public"]], (rows, err)
    a.close()
    b.close()
    assert_pool_idle(pg, max_conns=1)
