# SPDX-License-Identifier: MIT
"""pgcat on an unchanged pgbouncer.ini (issue 41 item 1, doc/configuration.md
"Coming from PgBouncer"): a file of a production shape (several databases,
a forced user, a database over the Unix socket, one over TLS with its own
startup parameters, the `*` fallback, auth_file with md5, SCRAM and plaintext secrets,
auth_query for users it does not list, an hba file, [users] overrides, TLS
on both sides) passes `pgcat -t` without a word, serves psycopg and psql
clients as PgBouncer would, shows PgBouncer's settings on the console, and
takes an edited file on SIGHUP. The pgbouncer.ini conftest.py writes for
running the suite against PgBouncer itself runs pgcat unchanged too."""
import os
import re
import signal
import subprocess
import time

import psycopg
import pytest

from conftest import (PASSWORDS, PgServer, _setup_roles, default_general, default_pools, md5_secret,
                      pgcat_binary, render_pgbouncer, wait_until)
from test_admin import show
from test_tls import certs, p  # noqa: F401 (a fixture)

LOOKUP_PW = "lookup_pw"
AQ_PW = "aq_pw"
ADMIN_PW = "pgb_admin_pw"
STATS_PW = "pgb_stats_pw"


@pytest.fixture(scope="module")
def pg_ssl(pg_root, certs):  # noqa: F811
    """A PostgreSQL that takes TLS connections only (as test_tls.py's, a
    server of this module's own)."""
    server = PgServer(pg_root, "pgb_sslonly")
    server.initdb()
    with open(server.datadir / "postgresql.conf", "a") as f:
        f.write("ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\n"
                % (p(certs, "server.crt"), p(certs, "server.key")))
    (server.datadir / "pg_hba.conf").write_text(
        "local all all trust\n"
        "hostssl all postgres 127.0.0.1/32 trust\n"
        "hostssl all all 127.0.0.1/32 scram-sha-256\n")
    server.start()
    try:
        _setup_roles(server)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def roles(pg):
    """pgb_lookup runs auth_query (a superuser: PgBouncer's default query
    reads pg_authid); pgb_aq is a user only the server knows."""
    with pg.connect("postgres") as c:
        c.execute("SET password_encryption = 'scram-sha-256'")
        c.execute("CREATE ROLE pgb_lookup LOGIN SUPERUSER PASSWORD '%s'" % LOOKUP_PW)
        c.execute("CREATE ROLE pgb_aq LOGIN PASSWORD '%s'" % AQ_PW)
        app_secret = c.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'app'").fetchone()[0]
    try:
        yield app_secret
    finally:
        with pg.connect("postgres") as c:
            for r in ("pgb_lookup", "pgb_aq"):
                c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (r,))
            wait_until(lambda: pg.count("pgb_aq") + pg.count("pgb_lookup") == 0, 10)
            c.execute("DROP ROLE pgb_lookup")
            c.execute("DROP ROLE pgb_aq")


def production_ini(inst, pg, pg_ssl, certs, extra_db="", wait="30"):
    """A pgbouncer.ini as an operator would have it, pointing at this test's servers."""
    w = inst.workdir
    return f"""\
;; pgbouncer.ini of a production shape
[databases]
appdb = host=127.0.0.1 port={pg.port} dbname=appdb
; every client logs in to the server as md5user
forced = host=127.0.0.1 port={pg.port} dbname=appdb user=md5user pool_size=3
; another name for another database, over PostgreSQL's Unix socket
sock = host={pg.sockdir} port={pg.port} dbname=shard0
; a hostssl-only server, its own startup parameters
secure = host=127.0.0.1 port={pg_ssl.port} dbname=appdb user=app password='{PASSWORDS["app"]}' application_name=from_ini datestyle='SQL, DMY'
; any other name: that database on the main server
* = host=127.0.0.1 port={pg.port}
{extra_db}
[users]
app = pool_size=2 query_timeout=1.5
md5user = pool_mode=transaction

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {inst.port}
unix_socket_dir = {w}
logfile = {w}/pgbouncer.log
pidfile = {w}/pgbouncer.pid
auth_type = hba
auth_hba_file = hba.conf
auth_file = userlist.txt
auth_user = pgb_lookup
admin_users = pgb_admin
stats_users = pgb_stats
pool_mode = session
default_pool_size = 5
max_client_conn = 200
server_idle_timeout = 600
server_lifetime = 3600
query_wait_timeout = {wait}
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits, options
client_tls_sslmode = prefer
client_tls_cert_file = {p(certs, "server.crt")}
client_tls_key_file = {p(certs, "server.key")}
client_tls_ca_file = {p(certs, "ca.crt")}
server_tls_sslmode = prefer
server_tls_ca_file = {p(certs, "ca.crt")}
"""


def write_files(inst, app_secret):
    w = inst.workdir
    (w / "userlist.txt").write_text(
        '"app" "%s"\n' % app_secret                         # PostgreSQL's own SCRAM secret
        + '"md5user" "%s"\n' % md5_secret("md5user", PASSWORDS["md5user"])
        + '"pgb_lookup" "%s"\n' % LOOKUP_PW                 # plaintext: auth_query logs in with it
        + '"pgb_admin" "%s"\n' % ADMIN_PW
        + '"pgb_stats" "%s"\n' % STATS_PW)
    (w / "hba.conf").write_text(
        "local all      all                      md5\n"
        "host  sock     app        127.0.0.1/32  reject\n"
        "host  all      md5user    127.0.0.1/32  md5\n"
        "host  all      all        127.0.0.1/32  scram-sha-256\n")


def start_on(inst, text):
    """Start pgcat of the fixture on this pgbouncer.ini instead of a pgcat.ini."""
    inst.ini = inst.workdir / "pgbouncer.ini"
    inst.ini.write_text(text)
    inst.write = lambda: None
    inst.start()
    return inst


def start_transaction_mode(pgcat, pg, databases="", settings=""):
    """pgcat on a pgbouncer.ini of the default pools in transaction mode,
    with these [databases] lines ({port}: PostgreSQL's) and [pgbouncer]
    settings added. Returns it and its [pgbouncer] settings."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["pool_mode"] = "transaction"
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    text = text.replace("[pgbouncer]", databases.format(port=pg.port) + "[pgbouncer]\n" + settings, 1)
    return start_on(inst, text), g


def console(inst, user, password):
    r = inst.raw()
    r.login(user, password, "pgbouncer")
    return r


def show_config(r):
    cols, rows = show(r, "CONFIG")
    assert cols == ["key", "value", "default", "changeable"]
    return {row["key"]: (row["value"], row["default"], row["changeable"]) for row in rows}


def test_production_pgbouncer_ini(pgcat, pg, pg_ssl, certs, roles):
    inst = pgcat(start=False)
    write_files(inst, roles)
    text = production_ini(inst, pg, pg_ssl, certs)
    (inst.workdir / "pgbouncer.ini").write_text(text)

    # pgcat -t: no error, no warning; PgBouncer's settings, then pgcat's.
    # From the file's directory: its relative auth_file and auth_hba_file
    # are opened from the working directory, as PgBouncer opens them.
    t = subprocess.run([pgcat_binary(), "-t", str(inst.workdir / "pgbouncer.ini")], cwd=str(inst.workdir),
                       capture_output=True,
                       text=True, timeout=30)
    assert t.returncode == 0, t.stderr
    assert t.stderr == "", t.stderr
    assert "query_wait_timeout = 30\n" in t.stdout            # [pgbouncer], seconds
    assert "query_wait_timeout = 30s\n" in t.stdout           # [general], pgcat's
    assert "[pools.forced]" in t.stdout and "server_username = md5user" in t.stdout
    assert "[pools.*]" in t.stdout

    start_on(inst, text)
    assert (inst.workdir / "pgbouncer.pid").read_text().strip() == str(inst.pid)

    # A SCRAM secret from auth_file: the client proves it, pgcat logs in
    # to the server with the same key (pass-through). Over TLS, as the
    # client asked.
    with inst.connect("app", sslmode="require") as c:
        assert c.pgconn.ssl_in_use
        assert c.execute("SELECT current_user, current_database()").fetchone() == ("app", "appdb")
        # [users] app: query_timeout = 1.5 s (PgBouncer's unit), and
        # PgBouncer's action: the client is disconnected.
        t0 = time.monotonic()
        with pytest.raises(psycopg.OperationalError, match="query timeout"):
            c.execute("SELECT pg_sleep(5)")
        assert 1.0 < time.monotonic() - t0 < 4.5
        assert c.closed or c.broken
    # md5 secret, md5 hba line, plain TCP (prefer).
    with inst.connect("md5user", sslmode="disable") as c:
        assert not c.pgconn.ssl_in_use
        assert c.execute("SELECT current_user").fetchone()[0] == "md5user"
    # The forced user: whoever the client is, md5user on the server.
    with inst.connect("app", dbname="forced") as c:
        assert c.execute("SELECT current_user, session_user").fetchone() == ("md5user", "md5user")
    # Another database name, over PostgreSQL's Unix socket; the hba file
    # rejects app there.
    with inst.connect("md5user", dbname="sock") as c:
        assert c.execute("SELECT current_database(), inet_server_addr()").fetchone() == ("shard0", None)
    with pytest.raises(psycopg.OperationalError):
        inst.connect("app", dbname="sock").close()
    # A user in no auth_file: auth_query (PgBouncer's default, as
    # pgb_lookup) finds its SCRAM secret.
    with inst.connect("pgb_aq", password=AQ_PW) as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "pgb_aq"
    with pytest.raises(psycopg.OperationalError):
        inst.connect("pgb_aq", password="wrong").close()
    # The hostssl-only server, over TLS (prefer); the database's
    # startup parameters are what a client that sets none sees.
    with inst.connect("md5user", dbname="secure") as c:
        assert c.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0] is True
        assert c.execute("SELECT current_user").fetchone()[0] == "app"
        assert c.execute("SHOW application_name").fetchone()[0] == "from_ini"
        assert c.execute("SHOW datestyle").fetchone()[0] == "SQL, DMY"
    # The fallback database: a name no entry has.
    with inst.connect("md5user", dbname="benchdb") as c:
        assert c.execute("SELECT current_database(), current_user").fetchone() == ("benchdb", "md5user")
    # psql, over pgcat's Unix socket in unix_socket_dir.
    r = inst.psql("SELECT current_user", user="md5user", host=str(inst.workdir))
    assert r.stdout.strip() == "md5user"
    # logfile: pgcat's log goes there.
    assert "pgcat" in (inst.workdir / "pgbouncer.log").read_text()

    # The console under PgBouncer's names and units, for admin_users and
    # stats_users of auth_file.
    adm = console(inst, "pgb_admin", ADMIN_PW)
    cfg = show_config(adm)
    assert cfg["query_wait_timeout"] == ("30", "120", "yes")
    assert cfg["server_lifetime"] == ("3600", "3600", "yes")
    assert cfg["listen_port"] == (str(inst.port), "6432", "no")
    assert cfg["auth_type"][0] == "hba"
    assert cfg["pool_mode"][0] == "session"
    assert cfg["auth_dbname"] == (None, None, "yes")           # PgBouncer's NULL
    assert "workers" not in cfg and "idle_timeout" not in cfg   # pgcat's own names are not shown
    _, users = show(adm, "USERS")
    by_user = {u["name"]: u for u in users}
    assert by_user["app"]["pool_size"] == "2"                   # [users] app pool_size
    _, dbs = show(adm, "DATABASES")
    forced = [d for d in dbs if d["name"] == "forced"][0]
    assert forced["force_user"] == "md5user" and forced["pool_size"] == "3"
    # SET in PgBouncer's units.
    rows, err, _ = adm.simple("SET query_wait_timeout = 45")
    assert err is None, err
    assert show_config(adm)["query_wait_timeout"][0] == "45"
    rows, err, _ = adm.simple("SET pool_mode = statement")
    assert err is None, err
    assert show_config(adm)["pool_mode"][0] == "statement"
    rows, err, _ = adm.simple("SET pool_mode = bogus")
    assert err is not None and "pool_mode" in err.get("M", ""), err
    assert err["C"] == "08P01", err   # PgBouncer's one SQLSTATE for console errors
    rows, err, _ = adm.simple("KILL_CLIENT 99999")
    assert err is not None and err["C"] == "08P01" and "client not found" in err["M"], err
    rows, err, _ = adm.simple("SET pool_mode = session")
    assert err is None, err
    stats = console(inst, "pgb_stats", STATS_PW)
    assert show_config(stats)["max_client_conn"][0] == "200"
    stats.close()
    adm.close()

    # SIGHUP re-reads the edited file: a new database, a new value.
    text2 = production_ini(inst, pg, pg_ssl, certs,
                           extra_db="newdb = host=127.0.0.1 port=%d dbname=shard1" % pg.port, wait="20")
    inst.ini.write_text(text2)
    inst.send_signal(signal.SIGHUP)

    def reloaded():
        r = console(inst, "pgb_admin", ADMIN_PW)
        try:
            return show_config(r)["query_wait_timeout"][0] == "20"
        finally:
            r.close()
    wait_until(reloaded, 10, msg="SIGHUP did not apply the edited pgbouncer.ini")
    with inst.connect("md5user", dbname="newdb") as c:
        assert c.execute("SELECT current_database()").fetchone()[0] == "shard1"
    # A file that would not load is refused whole; the running one stays.
    inst.ini.write_text(text2 + "pool_mode = bogus\n")
    adm = console(inst, "pgb_admin", ADMIN_PW)
    rows, err, _ = adm.simple("RELOAD")
    assert err is not None and "pool_mode" in err.get("M", ""), err
    assert show_config(adm)["pool_mode"][0] == "session"
    adm.close()
    with inst.connect("md5user", dbname="newdb") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_auth_dbname_that_cannot_serve_refuses_in_pgbouncer_words(pgcat, pg, pg_ssl, certs, roles):
    """A database whose auth_dbname names no database is taken (as
    PgBouncer takes it, with a warning); its logins that need auth_query
    get "bouncer config error". One whose authentication database is
    DISABLEd: 'authentication database "X" is disabled'."""
    inst = pgcat(start=False)
    write_files(inst, roles)
    extra = ("noauth = host=127.0.0.1 port=%d dbname=appdb auth_dbname=nowhere\n"
             "viaapp = host=127.0.0.1 port=%d dbname=appdb auth_dbname=appdb\n" % (pg.port, pg.port))
    start_on(inst, production_ini(inst, pg, pg_ssl, certs, extra_db=extra))
    with pytest.raises(psycopg.OperationalError, match="bouncer config error"):
        psycopg.connect(inst.dsn("pgb_aq", dbname="noauth", password=AQ_PW, sslmode="disable"))
    assert 'authentication database "nowhere" is not configured' in (inst.workdir / "pgbouncer.log").read_text()
    adm = console(inst, "pgb_admin", ADMIN_PW)
    rows, err, _ = adm.simple("DISABLE appdb")
    assert err is None, err
    with pytest.raises(psycopg.OperationalError, match='authentication database "appdb" is disabled'):
        psycopg.connect(inst.dsn("pgb_aq", dbname="viaapp", password=AQ_PW, sslmode="disable"))
    rows, err, _ = adm.simple("ENABLE appdb")
    assert err is None, err
    adm.close()
    with psycopg.connect(inst.dsn("pgb_aq", dbname="viaapp", password=AQ_PW, sslmode="disable")) as c:
        assert c.execute("SELECT current_user").fetchone()[0] == "pgb_aq"
    # Users of auth_file need no lookup: they log in to noauth as anywhere.
    with inst.connect("md5user", dbname="noauth") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_conftest_pgbouncer_ini_runs_pgcat_unchanged(pgcat, pg):
    """The file conftest.py writes to run this suite against PgBouncer
    (PGCAT_TEST_TARGET=pgbouncer) starts pgcat as it is."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    start_on(inst, text)
    with inst.connect("app") as c:
        assert c.execute("SELECT current_user, current_database()").fetchone() == ("app", "appdb")
    # Its console user: admin_users with auth_file's password, on
    # database pgbouncer as PgBouncer's tools connect.
    adm = console(inst, g["admin_username"], g["admin_password"])
    cfg = show_config(adm)
    assert cfg["pool_mode"][0] == "transaction"
    assert cfg["server_connect_timeout"][0] == "5"
    assert cfg["ignore_startup_parameters"][0] == "extra_float_digits, options"
    adm.close()
    # server_login_retry = 1: one second, as PgBouncer's, no warning.
    assert cfg["server_login_retry"][0] == "1"
    assert "server_login_retry" not in inst.log()


def test_pgbouncer_ini_errors_name_file_and_line(pgcat):
    inst = pgcat(start=False)
    bad = inst.workdir / "pgbouncer.ini"
    bad.write_text("[pgbouncer]\nlisten_port = %d\n\n[databases]\nx = host=127.0.0.1 bogus=1\n"
                   "db = host=127.0.0.1 pool_mode=bogus\n" % inst.port)
    t = subprocess.run([pgcat_binary(), "-t", str(bad)], capture_output=True, text=True, timeout=30)
    assert t.returncode == 1
    assert "%s:5: [databases] x: unknown connection parameter \"bogus\"" % bad in t.stderr
    assert "%s:6: [databases] db: pool_mode must be session, transaction or statement, got \"bogus\"" % bad in t.stderr
    # Started on it, pgcat refuses to start, with the same lines.
    r = subprocess.run([pgcat_binary(), str(bad)], capture_output=True, text=True, timeout=30,
                       cwd=str(inst.workdir))
    assert r.returncode == 1
    assert "pool_mode must be session, transaction or statement" in r.stderr


def test_host_lists_spread_or_stay_on_the_first(pgcat, pg):
    """host=h1,h2: PgBouncer spreads new connections over the hosts
    (load_balance_hosts = round-robin, the default), or stays on the first
    until it fails (disable). Two names for the same server, to tell which
    entry each session went to (SHOW SHARDS, per host)."""
    inst = pgcat(start=False)
    w = inst.workdir
    (w / "userlist.txt").write_text('"app" "%s"\n"pgb_admin" "%s"\n' % (PASSWORDS["app"], ADMIN_PW))
    start_on(inst, f"""\
[databases]
spread = host=127.0.0.1,localhost port={pg.port} dbname=appdb
ordered = host=localhost,127.0.0.1 port={pg.port} dbname=appdb load_balance_hosts=disable
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {inst.port}
unix_socket_dir = {w}
auth_file = userlist.txt
admin_users = pgb_admin
pool_mode = session
""")
    for db in ("spread", "ordered"):
        for _ in range(24):
            with inst.connect("app", dbname=db) as c:
                assert c.execute("SELECT current_database()").fetchone()[0] == "appdb"
    adm = console(inst, "pgb_admin", ADMIN_PW)
    _, shards = show(adm, "SHARDS")
    _, dbs = show(adm, "DATABASES")
    adm.close()
    lb = {d["name"]: d["load_balance_hosts"] for d in dbs}
    assert lb["spread"] == "round-robin" and lb["ordered"] == "disable", lb
    routed = {(s["pool"], s["host"]): int(s["xact_count"]) for s in shards}
    # One session at a time: a tie each time, broken at random: both hosts
    # (all 24 on one: 2 chances in 2^24).
    assert routed[("spread", "127.0.0.1")] > 0 and routed[("spread", "localhost")] > 0, routed
    # Sessions at the same time go to the host with fewer in use: one each.
    a, b = inst.connect("app", dbname="spread"), inst.connect("app", dbname="spread")
    for c in (a, b):
        c.execute("SELECT 1")
    adm = console(inst, "pgb_admin", ADMIN_PW)
    _, servers = show(adm, "SERVERS")
    adm.close()
    hosts = sorted(x["addr"] for x in servers if x["database"] == "spread" and x["link"])
    assert hosts == ["127.0.0.1", "localhost"], servers
    a.close()
    b.close()
    # disable: the first listed, every time.
    assert routed[("ordered", "localhost")] >= 24 and routed[("ordered", "127.0.0.1")] == 0, routed
    # Alternatives, not replicas: no lag monitor connections to them (they
    # would add to the servers' counts, which PgBouncer's users keep).
    time.sleep(1.5)   # (past replica_lag_check_interval)
    monitors = pg.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgcat lag monitor' "
                      "AND client_port IS NOT NULL", dbname="postgres")[0][0]
    assert monitors == 0


def test_fallback_database(pgcat, pg):
    """`* = host=...`: any database name a client asks for connects to that
    name on the template's host; a made database goes after
    autodb_idle_timeout without clients, and comes back at the next login;
    a reload makes them again from the new template."""
    inst = pgcat(start=False)
    w = inst.workdir
    (w / "userlist.txt").write_text('"app" "%s"\n"pgb_admin" "%s"\n' % (PASSWORDS["app"], ADMIN_PW))

    def ini(extra=""):
        return f"""\
[databases]
appdb = host=127.0.0.1 port={pg.port} dbname=appdb
* = host=127.0.0.1 port={pg.port} pool_size=2 {extra}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {inst.port}
unix_socket_dir = {w}
auth_file = userlist.txt
admin_users = pgb_admin
pool_mode = transaction
autodb_idle_timeout = 1
"""
    start_on(inst, ini())
    for db in ("shard0", "shard1", "benchdb"):
        with inst.connect("app", dbname=db) as c:
            assert c.execute("SELECT current_database()").fetchone()[0] == db
    assert "registered new auto-database: shard1" in inst.log()   # (PgBouncer's words)
    # A name the server does not have: the server's own error.
    with pytest.raises(psycopg.OperationalError) as e:
        inst.connect("app", dbname="no_such_db").close()
    assert "no_such_db" in str(e.value) and "does not exist" in str(e.value)

    def databases():
        r = console(inst, "pgb_admin", ADMIN_PW)
        try:
            _, rows = show(r, "DATABASES")
            return {d["name"]: d for d in rows}
        finally:
            r.close()
    dbs = databases()
    assert dbs["shard0"]["pool_size"] == "2" and dbs["shard0"]["database"] == "shard0"
    # Unused for autodb_idle_timeout (1 s): dropped, servers closed.
    with inst.connect("app", dbname="shard1") as c:
        c.execute("SELECT 1")
        wait_until(lambda: "shard0" not in databases(), 15, msg="idle fallback database not dropped")
        assert "shard1" in databases()               # in use: kept
    wait_until(lambda: pg.count("app", "shard0") == 0, 10)
    with inst.connect("app", dbname="shard0") as c:    # and made again
        assert c.execute("SELECT current_database()").fetchone()[0] == "shard0"
        # A reload: the template's new settings for the databases made from it.
        inst.ini.write_text(ini("pool_size=3"))
        inst.send_signal(signal.SIGHUP)
        wait_until(lambda: databases().get("shard0", {}).get("pool_size") == "3", 10,
                   msg="reload did not remake shard0 from the new template")
        assert c.execute("SELECT 1").fetchone()[0] == 1  # the client's connection went on
    # Without a template, made databases go with the reload.
    inst.ini.write_text(ini().replace("* = host", "; * = host"))
    inst.send_signal(signal.SIGHUP)
    wait_until(lambda: "shard0" not in databases(), 10, msg="reload kept a database of a removed template")
    with pytest.raises(psycopg.OperationalError) as e:
        inst.connect("app", dbname="shard0").close()
    assert "no such database: shard0" in str(e.value)   # PgBouncer's words on a pgbouncer.ini


def test_quiet_keeps_stderr_quiet_and_the_log_file_full(pgcat, pg):
    """PgBouncer's --quiet (its test harness starts it so): nothing on
    stderr, the log file at the configured level, LOG lines included."""
    inst = pgcat(start=False, args=["--quiet"])
    g = default_general(inst.port, inst.workdir)
    g["log_file"] = str(inst.workdir / "pgbouncer.log")
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    with inst.connect("app") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    logged = (inst.workdir / "pgbouncer.log").read_text()
    assert " LOG " in logged and "starting" in logged, logged[-2000:]
    assert " LOG " not in inst.log() and " WARNING " not in inst.log(), inst.log()[-2000:]


def test_pgbouncer_words_for_what_operators_alert_on(pgcat, pg):
    """The log lines and client errors a PgBouncer operator's scripts look
    for: "closing because: REASON (age=Ns)" for clients and servers, "no
    such database: X"."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["pool_mode"] = "statement"
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    with pytest.raises(psycopg.OperationalError, match="no such database: nosuchdb"):
        psycopg.connect(inst.dsn("app", dbname="nosuchdb"))
    # As PgBouncer, the client proves who it is first: a wrong password or
    # an unknown user learns nothing of which databases exist.
    for user, pw in (("app", "wrong"), ("nosuchuser", "x")):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(inst.dsn(user, dbname="nosuchdb", password=pw))
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(inst.dsn("app", password="wrong"))
    with inst.connect("app") as c:
        c.execute("SELECT 1")
    with inst.connect("app") as c:
        with pytest.raises(psycopg.OperationalError):
            c.execute("BEGIN")
    log = inst.log()
    assert re.search(r"closing because: no such database: nosuchdb \(age=\d+s\)", log), log[-3000:]
    assert re.search(r"app@appdb .*closing because: password authentication failed \(age=\d+s\)", log), log[-3000:]
    assert re.search(r"C-\d+ app@appdb .*closing because: client close request \(age=\d+s\)", log), log[-3000:]
    reason = "transaction blocks not allowed in statement pooling mode"
    assert re.search(r"C-\d+ app@appdb .*closing because: %s \(age=\d+s\)" % reason, log), log[-3000:]
    assert re.search(r"S-\d+ .*closing because: %s \(active, age=\d+s\)" % reason, log), log[-3000:]


def test_pgbouncer_words_for_refused_logins_name_the_method(pgcat, pg):
    """md5: "password authentication failed"; SCRAM: "SASL authentication
    failed"; trust and a user no one knows: '"trust" authentication
    failed' (PgBouncer's words)."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["auth_type"] = "md5"
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    with pytest.raises(psycopg.OperationalError, match="password authentication failed$"):
        psycopg.connect(inst.dsn("nosuchuser", password="wrong"))
    inst.stop()
    g["auth_type"] = "scram-sha-256"
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    for user in ("app", "nosuchuser"):
        with pytest.raises(psycopg.OperationalError, match="SASL authentication failed$"):
            psycopg.connect(inst.dsn(user, password="wrong"))
    inst.stop()
    g["auth_type"] = "trust"
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    with pytest.raises(psycopg.OperationalError, match='"trust" authentication failed'):
        psycopg.connect(inst.dsn("nosuchuser", password="wrong"))
    with inst.connect("app") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    assert re.search(r'nosuchuser@appdb .*closing because: "trust" authentication failed \(age=\d+s\)', inst.log())


def test_sigint_is_pgbouncers_wait_for_servers(pgcat, pg):
    """SIGINT on a pgbouncer.ini: no new clients, a session goes on until
    it ends; a second SIGINT exits at once."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["pool_mode"] = "session"
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    c = inst.connect("app")
    c.execute("SELECT 1")
    inst.send_signal(signal.SIGINT)
    time.sleep(1)
    assert c.execute("SELECT 2").fetchone()[0] == 2     # its session goes on
    assert inst.alive()
    with pytest.raises(psycopg.OperationalError):
        inst.connect("app")
    inst.send_signal(signal.SIGINT)
    wait_until(lambda: not inst.alive(), 10, msg="a second SIGINT did not exit")
    inst.stopped_by_test = True
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 3")
    assert "SIGINT while shutting down, fast exit" in inst.log()


def test_new_connection_to_server_is_logged(pgcat, pg):
    """log_connections: PgBouncer's 'new connection to server (from ADDR)',
    ADDR the local address the server sees as its client's."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    with inst.connect("app") as c:
        c.execute("SELECT 1")
        port = c.execute("SELECT inet_client_port()").fetchone()[0]
    assert re.search(r"S-\d+ app@appdb 127\.0\.0\.1:%d new connection to server \(from 127\.0\.0\.1:%d\)"
                     % (pg.port, port), inst.log()), inst.log()[-3000:]


def test_console_as_pgbouncer_over_the_unix_socket(pgcat, pg):
    """As PgBouncer: user "pgbouncer" on the Unix socket, from pgcat's own
    OS user, reaches the console without a password and may run commands;
    the same user over TCP is refused."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    with psycopg.connect(host=str(inst.workdir), port=inst.port, user="pgbouncer", dbname="pgbouncer",
                         autocommit=True) as c:
        c.execute("RELOAD")
        assert any(r[0] == "appdb" for r in c.execute("SHOW POOLS").fetchall())
    with pytest.raises(psycopg.OperationalError, match="not allowed to connect to the admin console"):
        psycopg.connect(host="127.0.0.1", port=inst.port, user="pgbouncer", dbname="pgbouncer")
    assert "pgbouncer access from unix socket" in inst.log()


def test_console_peer_access_only_on_a_pgbouncer_ini(pgcat):
    inst = pgcat()
    with pytest.raises(psycopg.OperationalError, match="not allowed to connect to the admin console"):
        psycopg.connect(host=str(inst.workdir), port=inst.port, user="pgbouncer", dbname="pgbouncer")


def test_pgbouncer_words_for_a_full_pooler_and_a_refused_reload(pgcat, pg):
    """max_client_conn reached: PgBouncer's 'no more connections allowed
    (max_client_conn)'; a RELOAD of a file that cannot be read: F0000
    'RELOAD failed, see logs for additional details', the old settings kept."""
    from test_admin import command
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["max_client_conn"] = 2
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    start_on(inst, text)
    a = inst.connect("app")
    b = inst.connect("app")
    with pytest.raises(psycopg.OperationalError, match=r"no more connections allowed \(max_client_conn\)"):
        inst.connect("app")
    b.close()
    adm = console(inst, g["admin_username"], g["admin_password"])
    inst.ini.write_text(text.replace("[pgbouncer]", "[pgbouncer]\nserver_lifetime = not_a_duration", 1))
    err = command(adm, "RELOAD")
    assert err is not None and err["C"] == "F0000", err
    assert err["M"].startswith("RELOAD failed, see logs for additional details"), err
    assert "server_lifetime" in inst.log()
    adm.close()
    assert a.execute("SELECT 1").fetchone()[0] == 1
    a.close()


def test_forced_user_one_pool_for_the_database(pgcat, pg):
    """user= in [databases] (PgBouncer's forced user): clients of every user
    share the forced user's server connections, one pool_size for the
    database; min_pool_size is kept from the start; SHOW POOLS has one row
    under the forced user; each client still counts as its own user."""
    import threading
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["pool_mode"] = "transaction"
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    # auth_file: app, md5user and the console's user; clients log in as app
    # and md5user, the servers see md5user only.
    with open(inst.workdir / "userlist.txt", "a") as f:
        f.write('"md5user" "%s"\n' % PASSWORDS["md5user"])
    text = text.replace("[pgbouncer]", "forced = host=127.0.0.1 port=%d dbname=appdb user=md5user pool_size=2 "
                        "min_pool_size=1\n[pgbouncer]" % pg.port, 1)
    start_on(inst, text)
    wait_until(lambda: pg.count("md5user", "appdb") == 1, 10, msg="min_pool_size's connection from the start")
    errors = []

    def sleeper(user):
        try:
            with psycopg.connect(inst.dsn(user, dbname="forced")) as c:
                assert c.execute("SELECT current_user").fetchone()[0] == "md5user"
                c.execute("SELECT pg_sleep(0.6)")
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=sleeper, args=(u,)) for u in ("app", "md5user") * 3]
    for t in threads:
        t.start()
    peak = 0
    while any(t.is_alive() for t in threads):
        peak = max(peak, pg.count("md5user", "appdb"))
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert not errors, errors
    assert peak == 2, "%d server connections for a database of pool_size 2" % peak
    adm = console(inst, g["admin_username"], g["admin_password"])
    _, rows = show(adm, "POOLS")
    forced = [(r["database"], r["user"]) for r in rows if r["database"] == "forced"]
    assert forced == [("forced", "md5user")], rows
    adm.close()


def test_sigterm_is_pgbouncers_wait_for_clients(pgcat, pg):
    """SIGTERM on a pgbouncer.ini (PgBouncer 1.23's): no new clients, those
    connected go on as long as they like; pgcat exits after the last one,
    or at once on a second SIGTERM."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["pool_mode"] = "transaction"
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    c = inst.connect("app")
    c.execute("SELECT 1")
    inst.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    for i in range(3):                                  # its next transactions are served
        assert c.execute("SELECT %s::int", (i,)).fetchone()[0] == i
    assert inst.alive()
    with pytest.raises(psycopg.OperationalError):
        inst.connect("app")
    inst.send_signal(signal.SIGTERM)
    wait_until(lambda: not inst.alive(), 10, msg="a second SIGTERM did not exit")
    inst.stopped_by_test = True
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 3")
    assert "SIGTERM while shutting down, fast exit" in inst.log()


def test_server_login_failure_in_pgbouncer_words(pgcat, pg):
    """A server that refuses pgcat's login: the log has PgBouncer's 'server
    login failed: FATAL ...' and 'closing because: ...' for the server and
    for each client that waited for it, which is closed with the reason."""
    inst, _ = start_transaction_mode(pgcat, pg, "badpw = host=127.0.0.1 port={port} dbname=appdb user=md5user "
                                                "password=wrong\n")
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "md5user"'):
        psycopg.connect(inst.dsn("app", dbname="badpw"))
    log = inst.log()
    assert re.search(r'S-\d+ .*: server login failed: FATAL password authentication failed for user "md5user"',
                     log), log[-3000:]
    assert re.search(r'S-\d+ .*closing because: password authentication failed for user "md5user"', log), log[-3000:]
    assert re.search(r'C-\d+ app@badpw .*closing because: password authentication failed for user "md5user"',
                     log), log[-3000:]
    with inst.connect("app") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_auth_query_on_a_database_the_server_lacks(pgcat, pg):
    """auth_query's login refused by the server (a '*' database PostgreSQL
    does not have): the client hears the server's own words and the log
    has PgBouncer's 'server login failed: FATAL ...', as PgBouncer does."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["auth_type"] = "md5"
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    text = text.replace("[pgbouncer]", "* = host=127.0.0.1 port=%d\n[pgbouncer]\nauth_user = postgres" % pg.port, 1)
    start_on(inst, text)
    with pytest.raises(psycopg.OperationalError, match='database "nosuchdb" does not exist'):
        psycopg.connect(inst.dsn("someone", dbname="nosuchdb", password="x"))
    log = inst.log()
    assert 'server login failed: FATAL database "nosuchdb" does not exist' in log, log[-3000:]
    assert re.search(r'someone@nosuchdb .*closing because: database "nosuchdb" does not exist', log), log[-3000:]
    with inst.connect("app") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_console_commands_count_in_stats(pgcat, pg):
    """On a pgbouncer.ini the console's database has its SHOW STATS row and
    each command counts as a transaction and a query (SHOW TOTALS too), as
    PgBouncer counts them."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    start_on(inst, render_pgbouncer(g, default_pools(pg), inst.workdir))
    with inst.connect("app") as c:
        c.execute("SELECT 1")
    adm = console(inst, g["admin_username"], g["admin_password"])
    show(adm, "VERSION")
    _, rows = show(adm, "STATS")                      # the third command
    row = [x for x in rows if x["database"] == "pgbouncer"][0]
    assert (row["total_xact_count"], row["total_query_count"]) == ("2", "2"), row
    _, totals = show(adm, "TOTALS")
    totals = {x["name"]: int(x["value"]) for x in totals}
    app = [x for x in rows if x["database"] == "appdb"][0]
    assert totals["total_xact_count"] == int(app["total_xact_count"]) + 3, (totals, app)
    adm.close()


def test_scram_auth_type_refuses_an_md5_secret(pgcat, pg):
    """auth_type = scram-sha-256 on a pgbouncer.ini: SCRAM only, a user whose
    auth_file secret is an md5 hash is refused (PgBouncer's and PostgreSQL's
    rule), while a plaintext secret logs in."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["auth_type"] = "scram-sha-256"
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    with open(inst.workdir / "userlist.txt", "a") as f:
        f.write('"md5user" "%s"\n' % md5_secret("md5user", PASSWORDS["md5user"]))
    start_on(inst, text)
    with pytest.raises(psycopg.OperationalError, match="SASL authentication failed"):
        psycopg.connect(inst.dsn("md5user"))
    with inst.connect("app") as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_prepared_statement_errors_and_counts_in_pgbouncer_ways(pgcat, pg):
    """On a pgbouncer.ini, as PgBouncer: a Parse of a name the client already
    prepared, or a Bind of one it never did, closes the client ("prepared
    statement 'x' was already prepared", "prepared statement did not
    exist"); SHOW STATS counts only named statements' Parse and Bind."""
    import pgwire
    inst, g = start_transaction_mode(pgcat, pg, settings="max_prepared_statements = 100\n")
    r = inst.raw_login()
    r.send(pgwire.parse("SELECT 1", name="s1") + pgwire.sync())
    assert [t for t, _ in r.read_until()] == [b"1", b"Z"]
    r.send(pgwire.bind(stmt="s1") + pgwire.execute() + pgwire.sync())
    assert [t for t, _ in r.read_until()][-1] == b"Z"
    r.send(pgwire.parse("SELECT 1") + pgwire.bind() + pgwire.execute() + pgwire.sync())   # unnamed: not counted
    assert [t for t, _ in r.read_until()][-1] == b"Z"
    r.send(pgwire.parse("SELECT 2", name="s1") + pgwire.sync())
    err, closed = r.read_error_then_eof(10)
    assert closed and err and err["M"] == "prepared statement 's1' was already prepared", err
    r = inst.raw_login()
    r.send(pgwire.bind(stmt="nosuch") + pgwire.execute() + pgwire.sync())
    err, closed = r.read_error_then_eof(10)
    assert closed and err and err["M"] == "prepared statement did not exist", err
    adm = console(inst, g["admin_username"], g["admin_password"])
    _, rows = show(adm, "STATS")
    row = [x for x in rows if x["database"] == "appdb"][0]
    assert (row["total_client_parse_count"], row["total_server_parse_count"], row["total_bind_count"]) == \
        ("1", "1", "1"), row
    adm.close()
    assert "closing because: prepared statement did not exist" in inst.log()


def test_server_login_without_a_usable_secret_fails_at_once(pgcat, pg):
    """A forced user whose only secret is a SCRAM verifier, before any
    client lent its key: every login would fail alike, so the client is
    told at once, in PgBouncer's words ("wrong password type"), not left
    waiting for a server."""
    from test_auth_file import scram_secret
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    g["auth_type"] = "md5"
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    ul = inst.workdir / "userlist.txt"
    lines = [x for x in ul.read_text().splitlines() if not x.startswith('"app"')]
    lines.append('"app" "%s"' % scram_secret(PASSWORDS["app"], b"0123456789abcdef"))
    ul.write_text("\n".join(lines) + "\n")
    text = text.replace("[pgbouncer]", "scramonly = host=127.0.0.1 port=%d dbname=appdb user=app\n[pgbouncer]"
                        % pg.port, 1)
    start_on(inst, text)
    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match="wrong password type"):
        psycopg.connect(inst.dsn("md5user", dbname="scramonly"))
    assert time.monotonic() - t0 < 5
    assert "no client has logged in with it yet" in inst.log()


def test_max_db_connections_counts_per_entry(pgcat, pg):
    """On a pgbouncer.ini max_db_connections counts the connections of its
    own database entry, as PgBouncer: another entry's connections to the
    same server database do not fill it."""
    inst, _ = start_transaction_mode(pgcat, pg, "warm = host=127.0.0.1 port={port} dbname=appdb min_pool_size=3 "
                                                "pool_size=3\ncapped = host=127.0.0.1 port={port} dbname=appdb "
                                                "max_db_connections=1\n", "query_wait_timeout = 3\n")
    with inst.connect("app", dbname="warm") as c:        # (min_pool_size counts once a client came)
        c.execute("SELECT 1")
    wait_until(lambda: pg.count("app", "appdb") >= 3, 10, msg="warm's min_pool_size connections")
    t0 = time.monotonic()
    with inst.connect("app", dbname="capped") as c:
        assert c.execute("SELECT 7").fetchone()[0] == 7
    assert time.monotonic() - t0 < 2
    assert "closed to make room" not in inst.log()


def test_unresolvable_first_host_is_met_by_the_clients(pgcat, pg):
    """host=BAD,GOOD with load_balance_hosts = disable: as PgBouncer, a name
    that does not resolve counts when a client would go there ('closing
    because: server DNS lookup failed', once: the host is then left out for
    ban_time), and the clients are served by the next host."""
    inst, _ = start_transaction_mode(pgcat, pg, "badfirst = host=no-such-host.invalid,127.0.0.1 port={port} "
                                                "dbname=appdb load_balance_hosts=disable\n")
    time.sleep(0.5)
    assert "server DNS lookup failed" not in inst.log()   # not before a client went there
    for _ in range(3):
        with inst.connect("app", dbname="badfirst") as c:
            assert c.execute("SELECT 1").fetchone()[0] == 1
    assert inst.log().count("closing because: server DNS lookup failed") == 1, inst.log()[-3000:]
