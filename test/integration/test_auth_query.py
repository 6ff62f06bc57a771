# SPDX-License-Identifier: MIT
"""auth_query (SPEC §2, §3): a user found neither in a users section nor in
auth_file is looked up on the pool's primary by running auth_query as
auth_user. The secret it returns (SCRAM verifier or md5 hash) authenticates
the client and logs pgcat in to PostgreSQL (SCRAM pass-through, md5 hash):
no password of the user is stored anywhere in pgcat's configuration.
Answers are cached for auth_query_cache_ttl; unknown users and wrong
passwords get the same 28P01; a primary that does not answer makes logins
fail within connect_timeout, never hang."""
import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time

import psycopg
import pytest

import pgwire
from conftest import (PASSWORDS, free_port, pgcat_binary, pgcat_env, render_ini, wait_until)
from test_admin import admin, command

LOOKUP_USER = "aq_lookup"
LOOKUP_PASSWORD = "aq_lookup_pw"
MD5_GROUP = "aq_md5_group"
# A lookup function (auth_user need not be a superuser); it also counts its
# calls, so the tests see the cache.
LOOKUP_QUERY = "SELECT usename, passwd FROM public.aq_lookup_fn($1)"
HBA_LINE = "host    all           +%s  127.0.0.1/32  md5\n" % MD5_GROUP


def _lit(s):
    return "'" + s.replace("'", "''") + "'"


@pytest.fixture(scope="module")
def aq_pg(pg):
    """pg with auth_user's role and lookup function, and md5 logins (pg_hba)
    for members of MD5_GROUP (the session's pg_hba asks every other role
    for SCRAM, which an md5-stored password cannot do)."""
    with pg.connect("postgres") as c:
        c.execute("SET password_encryption = 'scram-sha-256'")
        c.execute("CREATE ROLE %s LOGIN PASSWORD %s" % (LOOKUP_USER, _lit(LOOKUP_PASSWORD)))
        c.execute("CREATE ROLE %s NOLOGIN" % MD5_GROUP)
    with pg.connect("appdb") as c:
        c.execute("CREATE TABLE public.aq_calls (usename text, at timestamptz DEFAULT now())")
        c.execute("""
            CREATE FUNCTION public.aq_lookup_fn(p_user text, OUT usename name, OUT passwd text)
            RETURNS SETOF record LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS $$
                INSERT INTO public.aq_calls (usename) VALUES (p_user);
                SELECT usename, passwd FROM pg_catalog.pg_shadow WHERE usename = p_user;
            $$""")
        c.execute("REVOKE ALL ON FUNCTION public.aq_lookup_fn(text) FROM PUBLIC")
        c.execute("GRANT EXECUTE ON FUNCTION public.aq_lookup_fn(text) TO %s" % LOOKUP_USER)
    hba = pg.datadir / "pg_hba.conf"
    original = hba.read_text()
    lines = original.splitlines(keepends=True)
    last = max(i for i, l in enumerate(lines) if l.split()[:2] == ["host", "all"] and "scram-sha-256" in l)
    hba.write_text("".join(lines[:last] + [HBA_LINE] + lines[last:]))
    pg.sql("SELECT pg_reload_conf()", dbname="postgres")
    try:
        yield pg
    finally:
        hba.write_text(original)
        pg.sql("SELECT pg_reload_conf()", dbname="postgres")
        with pg.connect("appdb") as c:
            c.execute("DROP FUNCTION IF EXISTS public.aq_lookup_fn(text)")
            c.execute("DROP TABLE IF EXISTS public.aq_calls")
        with pg.connect("postgres") as c:
            for (role,) in c.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'aq\\_%'").fetchall():
                with contextlib.suppress(psycopg.Error):
                    c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                              (role,))
                    c.execute('DROP ROLE "%s"' % role)


_serial = [0]


def new_role(pg, password, method="scram-sha-256"):
    """A role made now, on PostgreSQL only (pgcat has never heard of it)."""
    _serial[0] += 1
    name = "aq_%s_%d_%s" % ("m" if method == "md5" else "s", _serial[0], os.urandom(3).hex())
    with pg.connect("postgres") as c:
        c.execute("SET password_encryption = %s" % _lit(method))
        c.execute("CREATE ROLE %s LOGIN PASSWORD %s%s" % (name, _lit(password),
                                                         " IN ROLE %s" % MD5_GROUP if method == "md5" else ""))
        stored = c.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (name,)).fetchone()[0]
    assert stored.startswith("md5" if method == "md5" else "SCRAM-SHA-256$"), stored
    return name


def lookups(pg, user):
    return pg.sql("SELECT count(*) FROM public.aq_calls WHERE usename = %s", (user,))[0][0]


def pool_def(pg, servers=None, lookup_in_users=True):
    pool = {"shards": {0: {"database": "appdb",
                           "servers": servers or "127.0.0.1:%d:primary" % pg.port}}}
    if lookup_in_users:
        pool["users"] = {LOOKUP_USER: {"password": LOOKUP_PASSWORD}}
    return pool


def start(pgcat, pg, ttl=60000, servers=None, auth_query=LOOKUP_QUERY, **general):
    g = {"auth_user": LOOKUP_USER, "auth_query": auth_query, "auth_query_cache_ttl": ttl}
    g.update(general)
    return pgcat(general=g, replace_pools={"appdb": pool_def(pg, servers)})


def login_error(p, user, password):
    """The ErrorResponse fields of a failed login (raw protocol)."""
    r = p.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login(user, password, "appdb")
        fields = ei.value.args[0]
        assert isinstance(fields, dict), fields
        return fields
    finally:
        r.close()


def can_login(p, user, password):
    try:
        with p.connect(user=user, password=password) as c:
            return c.execute("SELECT current_user").fetchone()[0] == user
    except psycopg.OperationalError:
        return False


def test_roles_created_after_start_log_in_scram_and_md5(pgcat, aq_pg):
    p = start(pgcat, aq_pg)
    s_user = new_role(aq_pg, "s_pw")
    m_user = new_role(aq_pg, "m_pw", method="md5")
    for user, pw in ((s_user, "s_pw"), (m_user, "m_pw")):
        with p.connect(user=user, password=pw) as c:
            assert c.execute("SELECT current_user").fetchone()[0] == user
            assert c.execute("SELECT 40 + 2").fetchone()[0] == 42
        # A second login (and a third, through asyncpg) takes the cached answer.
        with p.connect(user=user, password=pw) as c:
            assert c.execute("SELECT current_user").fetchone()[0] == user

        async def via_asyncpg():
            conn = await p.asyncpg(user=user, password=pw)
            try:
                return await conn.fetchval("SELECT current_user")
            finally:
                await conn.close()
        assert asyncio.run(via_asyncpg()) == user
        assert lookups(aq_pg, user) == 1
    # Nothing in pgcat's configuration holds those passwords or secrets.
    ini = p.ini.read_text()
    assert "s_pw" not in ini and "m_pw" not in ini and "SCRAM-SHA-256$" not in ini


def test_new_server_connections_log_in_by_pass_through(pgcat, aq_pg):
    """SCRAM pass-through and the md5 hash also serve server connections
    opened after the first login (several transactions at once)."""
    p = start(pgcat, aq_pg)
    for method in ("scram-sha-256", "md5"):
        user = new_role(aq_pg, "pw_" + method[:3], method=method)
        conns = [p.connect(user=user, password="pw_" + method[:3], autocommit=False) for _ in range(3)]
        pids = {c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in conns}
        assert len(pids) == 3
        for c in conns:
            c.rollback()
            c.close()
        assert aq_pg.count(user=user) >= 3


def test_users_looked_up_log_in_with_the_password_in_clear(pgcat, aq_pg):
    """auth_type password: the password in clear checked against the SCRAM
    verifier or md5 hash auth_query brought; the verifier's key (derived
    from the clear password) logs pgcat in to PostgreSQL; wrong passwords
    and unknown users refused alike."""
    p = start(pgcat, aq_pg, auth_type="password")
    s_user = new_role(aq_pg, "s_clear_pw")
    m_user = new_role(aq_pg, "m_clear_pw", method="md5")
    for user, pw in ((s_user, "s_clear_pw"), (m_user, "m_clear_pw")):
        r = p.raw()
        r.startup(user, "appdb")
        typ, payload = r.read_msg()
        r.close()
        assert (typ, payload[:4]) == (b"R", b"\x00\x00\x00\x03"), (typ, payload)
        conns = [p.connect(user=user, password=pw, autocommit=False) for _ in range(2)]
        pids = {c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in conns}
        assert len(pids) == 2
        for c in conns:
            assert c.execute("SELECT current_user").fetchone()[0] == user
            c.rollback()
            c.close()
        wrong = login_error(p, user, "wrong_pw")
        assert (wrong["C"], wrong["M"]) == ("28P01", 'password authentication failed for user "%s"' % user), wrong
    nobody = "aq_nobody_" + os.urandom(3).hex()
    unknown = login_error(p, nobody, "s_clear_pw")
    assert (unknown["C"], unknown["M"]) == ("28P01", 'password authentication failed for user "%s"' % nobody)
    assert can_login(p, s_user, "s_clear_pw")


def test_default_auth_query_as_superuser(pgcat, aq_pg):
    """The default auth_query (pg_shadow) with a superuser as auth_user,
    from a users section of another pool (PostgreSQL trusts postgres here)."""
    pools = {"appdb": pool_def(aq_pg, lookup_in_users=False),
             "other": {"shards": {0: {"database": "postgres", "servers": "127.0.0.1:%d:primary" % aq_pg.port}},
                       "users": {"postgres": {"password": "not_used_by_trust"}}}}
    p = pgcat(general={"auth_user": "postgres"}, replace_pools=pools)
    user = new_role(aq_pg, "dflt_pw")
    with p.connect(user=user, password="dflt_pw") as c:
        assert c.execute("SELECT current_user").fetchone()[0] == user
    assert login_error(p, user, "wrong")["C"] == "28P01"


def test_unknown_user_and_wrong_password_get_the_same_error(pgcat, aq_pg):
    p = start(pgcat, aq_pg)
    user = new_role(aq_pg, "right_pw")
    wrong = login_error(p, user, "wrong_pw")
    unknown = login_error(p, "aq_nobody_" + os.urandom(3).hex(), "wrong_pw")
    assert wrong["C"] == unknown["C"] == "28P01", (wrong, unknown)
    assert wrong["S"] == unknown["S"] == "FATAL"
    assert wrong["M"].replace(user, "X") == unknown["M"].replace(unknown["M"].split('"')[1], "X"), (wrong, unknown)
    assert wrong["M"] == 'password authentication failed for user "%s"' % user
    # md5 clients too (a role stored as md5 makes pgcat ask for md5)
    m_user = new_role(aq_pg, "right_pw", method="md5")
    assert login_error(p, m_user, "wrong_pw")["C"] == "28P01"
    assert can_login(p, user, "right_pw") and can_login(p, m_user, "right_pw")


def test_concurrent_logins_of_one_user_share_one_lookup(pgcat, aq_pg):
    p = start(pgcat, aq_pg)
    user = new_role(aq_pg, "conc_pw")
    results = []

    def one():
        results.append(can_login(p, user, "conc_pw"))
    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [True] * 12
    assert lookups(aq_pg, user) == 1


def test_each_worker_caches_on_its_own(pgcat, aq_pg):
    p = start(pgcat, aq_pg, workers=2)
    user = new_role(aq_pg, "w_pw")
    for _ in range(10):
        assert can_login(p, user, "w_pw")
    assert 1 <= lookups(aq_pg, user) <= 2


def test_dropped_role_stops_logging_in_after_the_ttl(pgcat, aq_pg):
    ttl_ms = 1500
    p = start(pgcat, aq_pg, ttl=ttl_ms)
    user = new_role(aq_pg, "drop_pw")
    t0 = time.monotonic()
    assert can_login(p, user, "drop_pw")
    with aq_pg.connect("postgres") as c:
        c.execute("DROP ROLE %s" % user)
    # Within the TTL the cached answer still logs the client in (its queries
    # then fail on PostgreSQL's side: the role is gone).
    if time.monotonic() - t0 < ttl_ms / 2000:
        p.connect(user=user, password="drop_pw").close()
    wait_until(lambda: not can_login(p, user, "drop_pw"), ttl_ms / 1000 + 10, msg="dropped role refused")
    assert time.monotonic() - t0 >= ttl_ms / 1000 * 0.9
    err = login_error(p, user, "drop_pw")
    assert err["C"] == "28P01" and err["M"] == 'password authentication failed for user "%s"' % user


def test_changed_password_takes_effect_after_the_ttl(pgcat, aq_pg):
    p = start(pgcat, aq_pg, ttl=500)
    for method in ("scram-sha-256", "md5"):
        user = new_role(aq_pg, "old_pw", method=method)
        assert can_login(p, user, "old_pw")
        with aq_pg.connect("postgres") as c:
            c.execute("SET password_encryption = %s" % _lit(method))
            c.execute("ALTER ROLE %s PASSWORD 'new_pw'" % user)
        wait_until(lambda: can_login(p, user, "new_pw"), 15, msg="new password accepted")
        assert login_error(p, user, "old_pw")["C"] == "28P01"
        # New server connections log in with the new secret.
        conns = [p.connect(user=user, password="new_pw", autocommit=False) for _ in range(3)]
        for c in conns:
            assert c.execute("SELECT current_user").fetchone()[0] == user
            c.rollback()
            c.close()


def test_ttl_zero_looks_up_every_login(pgcat, aq_pg):
    p = start(pgcat, aq_pg, ttl=0)
    user = new_role(aq_pg, "nocache_pw")
    for _ in range(3):
        assert can_login(p, user, "nocache_pw")
    assert lookups(aq_pg, user) == 3


def test_a_role_without_a_password_logs_in_under_trust_only(pgcat, aq_pg):
    """auth_query finds the role but no password (none set, or expired):
    the user exists, and logs in only where no password is asked (trust),
    as in PgBouncer; where one is asked it is refused as an unknown user."""
    name = "aq_nopw_" + os.urandom(3).hex()
    with aq_pg.connect("postgres") as c:
        c.execute("CREATE ROLE %s LOGIN" % name)
    # PostgreSQL lets the role in from 127.0.0.1 without a password.
    hba = aq_pg.datadir / "pg_hba.conf"
    original = hba.read_text()
    hba.write_text("host all %s 127.0.0.1/32 trust\n" % name + original)
    aq_pg.sql("SELECT pg_reload_conf()", dbname="postgres")
    try:
        p = start(pgcat, aq_pg, auth_type="trust")
        with p.connect(user=name, password="anything") as c:
            assert c.execute("SELECT current_user").fetchone()[0] == name
        with pytest.raises(psycopg.OperationalError):
            p.connect(user="aq_nobody_" + os.urandom(3).hex()).close()
        p2 = start(pgcat, aq_pg)   # scram-sha-256: a password is asked
        err = login_error(p2, name, "")
        assert err["C"] == "28P01" and err["M"] == 'password authentication failed for user "%s"' % name, err
    finally:
        hba.write_text(original)
        aq_pg.sql("SELECT pg_reload_conf()", dbname="postgres")


def test_config_users_are_not_looked_up(pgcat, aq_pg):
    p = start(pgcat, aq_pg)
    # auth_user itself is in the users section: no lookup for it.
    assert can_login(p, LOOKUP_USER, LOOKUP_PASSWORD)
    assert lookups(aq_pg, LOOKUP_USER) == 0


def _run_pgcat(tmp_path, general, pools, args=()):
    ini = tmp_path / "pgcat.ini"
    g = {"listen_addr": "127.0.0.1", "listen_port": free_port(), "unix_socket_dir": "", "workers": 1}
    g.update(general)
    ini.write_text(render_ini(g, pools))
    return subprocess.run([pgcat_binary()] + list(args) + [str(ini)], capture_output=True, text=True,
                          timeout=30, env=pgcat_env(), stdin=subprocess.DEVNULL)


def test_auth_user_missing_refuses_to_start(aq_pg, tmp_path):
    pools = {"appdb": pool_def(aq_pg)}
    for args in ((), ("-t",)):
        r = _run_pgcat(tmp_path, {"auth_user": "aq_no_such_lookup_user"}, pools, args)
        out = r.stdout + r.stderr
        assert r.returncode == 1, out
        assert "auth_user" in out and "aq_no_such_lookup_user" in out, out
        assert "pgcat.ini:" in out, out   # names the file (and line)
    # In auth_file: accepted (-t exits 0).
    ul = tmp_path / "userlist.txt"
    ul.write_text('"aq_file_lookup" "pw"\n')
    r = _run_pgcat(tmp_path, {"auth_user": "aq_file_lookup", "auth_file": str(ul)}, pools, ("-t",))
    assert r.returncode == 0, r.stdout + r.stderr


def test_auth_user_missing_on_reload_keeps_the_old_config(pgcat, aq_pg):
    p = start(pgcat, aq_pg)
    user = new_role(aq_pg, "reload_pw")
    assert can_login(p, user, "reload_pw")
    p.general["auth_user"] = "aq_not_configured"
    p.write()
    r = admin(p)
    err = command(r, "RELOAD")
    assert err is not None and "auth_user" in str(err) and "aq_not_configured" in str(err), err
    # SET is checked the same way.
    err = command(r, "SET auth_user = 'aq_not_configured'")
    assert err is not None and "auth_user" in str(err), err
    r.close()
    user2 = new_role(aq_pg, "reload_pw2")
    assert can_login(p, user2, "reload_pw2")   # the old auth_user still looks users up


def test_auth_user_with_a_wrong_password_is_a_clear_error(pgcat, aq_pg):
    pool = pool_def(aq_pg)
    pool["users"][LOOKUP_USER]["password"] = "wrong_lookup_pw"
    p = pgcat(general={"auth_user": LOOKUP_USER, "auth_query": LOOKUP_QUERY}, replace_pools={"appdb": pool})
    user = new_role(aq_pg, "x_pw")
    t0 = time.monotonic()
    err = login_error(p, user, "x_pw")
    assert time.monotonic() - t0 < 5
    assert err["C"] == "08006", err
    assert "authentication lookup failed" in err["M"], err
    wait_until(lambda: "login as auth_user failed" in p.log(), 5, msg="the log says why")
    assert "password authentication failed for user \"%s\"" % LOOKUP_USER in p.log()


class SilentServer:
    """A TCP listener that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                continue

    def close(self):
        self.stop = True
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


def test_a_primary_that_does_not_answer_fails_logins_within_connect_timeout(pgcat, aq_pg):
    silent = SilentServer()
    try:
        p = start(pgcat, aq_pg, servers="127.0.0.1:%d:primary" % silent.port, connect_timeout=1000)
        for _ in range(2):
            t0 = time.monotonic()
            err = login_error(p, "aq_silent_user", "pw")
            elapsed = time.monotonic() - t0
            assert elapsed < 1.0 + 2.0, elapsed   # connect_timeout plus a margin
            assert err["C"] in ("08006", "08P01"), err
        assert silent.conns, "pgcat never connected to the silent server"
        # Several clients at once: none hangs.
        out = []

        def one():
            t = time.monotonic()
            try:
                login_error(p, "aq_silent_user", "pw")
                out.append(time.monotonic() - t)
            except Exception as e:  # noqa: BLE001
                out.append(e)
        threads = [threading.Thread(target=one) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(out) == 5 and all(isinstance(x, float) and x < 3.0 for x in out), out
        # pgcat still serves its config's users meanwhile (here: a pool elsewhere).
        assert p.alive()
    finally:
        silent.close()


def test_a_primary_that_refuses_connections_fails_logins_at_once(pgcat, aq_pg):
    port = free_port()   # nothing listens there
    p = start(pgcat, aq_pg, servers="127.0.0.1:%d:primary" % port, connect_timeout=5000)
    t0 = time.monotonic()
    err = login_error(p, "aq_refused_user", "pw")
    assert time.monotonic() - t0 < 2.0
    assert err["C"] == "08006", err


def test_lookup_over_a_unix_socket_takes_no_tls(pgcat, aq_pg):
    """auth_query's own connection reaches a server given as a Unix-socket
    directory as the pools do: no TLS there, whatever server_tls_sslmode
    says (as libpq; PostgreSQL's socket has no TLS)."""
    p = start(pgcat, aq_pg, servers="%s:%d:primary" % (aq_pg.sockdir, aq_pg.port), server_tls_sslmode="require")
    user = new_role(aq_pg, "sock_pw")
    assert can_login(p, user, "sock_pw")
    assert login_error(p, user, "wrong")["C"] == "28P01"


def test_console_users_looked_up_in_auth_dbname(pgcat, aq_pg):
    """A console user (stats_users) that no auth_file or users section
    lists is looked up with auth_query in the database the global
    auth_dbname names, as PgBouncer does; a wrong password is refused;
    without auth_dbname the console's own database cannot serve the
    lookup: refused, and the log says why."""
    user = new_role(aq_pg, "st_pw")
    p = start(pgcat, aq_pg, stats_users=user, auth_dbname="appdb")
    with psycopg.connect(host=p.host, port=p.port, user=user, password="st_pw", dbname="pgcat",
                         autocommit=True, connect_timeout=5) as c:
        assert c.execute("SHOW VERSION").fetchone()[0].startswith("pgcat")
    assert lookups(aq_pg, user) == 1
    assert login_error_db(p, user, "wrong", "pgcat")["C"] == "28P01"
    # not in stats_users: not looked up, not let in
    other = new_role(aq_pg, "o_pw")
    assert "not allowed" in login_error_db(p, other, "o_pw", "pgcat")["M"]
    assert lookups(aq_pg, other) == 0
    q = start(pgcat, aq_pg, stats_users=user)
    e = login_error_db(q, user, "st_pw", "pgcat")
    assert e["C"] == "08006" and "auth_dbname names no pool" in e["M"], e
    assert 'cannot use the reserved "pgcat" database as an auth_dbname' in q.log()


def login_error_db(p, user, password, dbname):
    r = p.raw()
    try:
        with pytest.raises(pgwire.ProtocolError) as ei:
            r.login(user, password, dbname)
        return ei.value.args[0]
    finally:
        r.close()
