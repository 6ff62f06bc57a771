# SPDX-License-Identifier: MIT
"""Caps on client connections (PgBouncer's max_db_client_connections and
max_user_client_connections): counted over every worker from the moment a
client's pool is known at login until it leaves; one more is refused at
login with 53300 and PgBouncer's words, and a place freed is taken again."""
import psycopg
import pytest

from conftest import PASSWORDS, assert_works, default_general, default_pools, render_pgbouncer, wait_until
from test_admin import admin, show
from test_pgbouncer_ini import start_on


def refused(inst, user="app", dbname="appdb", word="max_db_client_connections"):
    with pytest.raises(psycopg.OperationalError) as ei:
        psycopg.connect(inst.dsn(user, dbname=dbname))
    assert "client connections exceeded (%s)" % word in str(ei.value), str(ei.value)


@pytest.mark.parametrize("workers", [1, 2])
def test_max_db_client_connections(pgcat, pg, workers):
    inst = pgcat(general={"max_db_client_connections": 2, "workers": workers})
    a, b = inst.connect("app"), inst.connect("md5user")
    try:
        refused(inst, "app")
        refused(inst, "trust_user")
        r = admin(inst)
        _, dbs = show(r, "DATABASES")
        row = [d for d in dbs if d["name"] == "appdb"][0]
        assert row["max_client_connections"] == "2" and row["current_client_connections"] == "2", row
        r.close()
    finally:
        a.close()
    # the place a left is taken again (counted out at its close)
    wait_until(lambda: _logs_in(inst, "app"), 10, msg="a client admitted once one left")
    b.close()
    assert_works(inst)


def _logs_in(inst, user):
    try:
        with psycopg.connect(inst.dsn(user)) as c:
            return c.execute("SELECT 1").fetchone()[0] == 1
    except psycopg.OperationalError:
        return False


def test_max_user_client_connections_over_databases(pgcat, pg):
    pools = default_pools(pg)
    pools["otherdb"] = {"shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg.port}},
                        "users": {"app": {"password": PASSWORDS["app"]}}}
    inst = pgcat(general={"max_user_client_connections": 2}, replace_pools=pools)
    a, b = inst.connect("app"), inst.connect("app", dbname="otherdb")
    try:
        refused(inst, "app", "appdb", "max_user_client_connections")
        refused(inst, "app", "otherdb", "max_user_client_connections")
        with inst.connect("md5user") as c:          # another user is not counted
            assert c.execute("SELECT 1").fetchone()[0] == 1
        r = admin(inst)
        _, users = show(r, "USERS")
        row = [u for u in users if u["name"] == "app"][0]
        assert row["max_user_client_connections"] == "2" and row["current_client_connections"] == "2", row
        r.close()
    finally:
        a.close()
        b.close()
    assert_works(inst)


def test_pgbouncer_ini_per_database_and_per_user(pgcat, pg):
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    text = text.replace("[databases]\n", "[databases]\ncapped = host=127.0.0.1 port=%d dbname=appdb "
                        "max_db_client_connections=1\n" % pg.port)
    text += "[users]\nmd5user = max_user_client_connections=1\nnot_in_auth_file = max_user_client_connections=3\n"
    start_on(inst, text)
    # A [users] name no pool has is listed too, with its cap (PgBouncer lists it).
    r = inst.raw()
    r.login(g["admin_username"], g["admin_password"], "pgbouncer")
    _, users = show(r, "USERS")
    r.close()
    row = [u for u in users if u["name"] == "not_in_auth_file"]
    assert row and row[0]["max_user_client_connections"] == "3" and row[0]["current_client_connections"] == "0", users
    with inst.connect("app", dbname="capped"):
        refused(inst, "app", "capped")
        with inst.connect("app") as c:              # appdb has no cap
            assert c.execute("SELECT 1").fetchone()[0] == 1
    with inst.connect("md5user"):
        refused(inst, "md5user", "appdb", "max_user_client_connections")
    assert "closing because: client connections exceeded" in inst.log()


def test_console_clients_counted_as_pgbouncer_counts_them(pgcat, pg):
    """On a pgbouncer.ini the console's clients are clients of database
    pgbouncer (SHOW DATABASES has its row) and of their user, under the
    caps; admin_users are let in over them."""
    inst = pgcat(start=False)
    g = default_general(inst.port, inst.workdir)
    text = render_pgbouncer(g, default_pools(pg), inst.workdir)
    text = text.replace("[pgbouncer]\n", "[pgbouncer]\nmax_db_client_connections = 2\nstats_users = md5user\n")
    start_on(inst, text)
    s1 = psycopg.connect(inst.dsn("md5user", dbname="pgbouncer"), autocommit=True)
    try:
        adm = psycopg.connect(inst.dsn(g["admin_username"], dbname="pgbouncer",
                                       password=g["admin_password"]), autocommit=True)
        cols = None
        cur = adm.execute("SHOW DATABASES")
        cols = [d.name for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        row = [r for r in rows if r["name"] == "pgbouncer"][0]
        assert row["current_client_connections"] == 2 and row["max_client_connections"] == 2, row
        refused(inst, "md5user", "pgbouncer")            # a stats user over the cap
        extra = psycopg.connect(inst.dsn(g["admin_username"], dbname="pgbouncer",
                                         password=g["admin_password"]), autocommit=True)
        extra.close()                                    # an admin is let in over it
        adm.close()
    finally:
        s1.close()
    wait_until(lambda: _console_logs_in(inst), 10, msg="a console client admitted once the others left")


def _console_logs_in(inst):
    try:
        psycopg.connect(inst.dsn("md5user", dbname="pgbouncer"), autocommit=True).close()
        return True
    except psycopg.OperationalError:
        return False
