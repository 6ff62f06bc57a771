# SPDX-License-Identifier: MIT
"""Errors by SQLSTATE (issue 44, doc/monitoring.md): every error a client
is sent is counted per database, user, SQLSTATE and source: `server` for
a server's ErrorResponse passed on, `pgcat` for one pgcat raised itself.
The console's SHOW ERRORS and /metrics' pgcat_errors_total show the sums
over every worker. The table is bounded: errors whose key finds no room
are counted as untracked, and pgcat goes on serving."""
import urllib.request

import psycopg
import pytest

import pgwire
from conftest import ADMIN_USER, free_port
from test_admin import admin, show


def errors(inst):
    r = admin(inst)
    try:
        cols, rows = show(r, "ERRORS")
    finally:
        r.close()
    assert cols == ["database", "user", "sqlstate", "source", "count"], cols
    return {(x["database"], x["user"], x["sqlstate"], x["source"]): int(x["count"]) for x in rows}


def metrics(port):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
            if l.startswith("pgcat_errors_")}


def refused(inst, **kw):
    with pytest.raises(psycopg.OperationalError):
        inst.connect(**kw).close()


@pytest.mark.parametrize("workers", [1, 2])
def test_server_and_pgcat_errors_by_sqlstate(pgcat, workers):
    port = free_port()
    inst = pgcat(general={"workers": workers, "prometheus_port": port})
    assert errors(inst) == {}
    conns = [inst.connect() for _ in range(6)]    # (spread over the workers)
    for c in conns:
        with pytest.raises(psycopg.errors.DivisionByZero):
            c.execute("SELECT 1/0")                           # simple protocol
        with pytest.raises(psycopg.errors.DivisionByZero):
            c.execute("SELECT 1/%s::int", [0])                # extended protocol
        assert c.execute("SELECT 1").fetchone()[0] == 1
    with pytest.raises(psycopg.errors.UndefinedTable):
        conns[0].execute("SELECT * FROM no_such_table_here")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conns[0].execute("SET SERVER ROLE TO 'bogus'")         # pgcat's own, answered in place
    r = admin(inst)                                            # the console's own: 42601
    r.send(pgwire.query("NO SUCH COMMAND"))
    assert [m for m in r.read_until((b"Z",)) if m[0] == b"E"]
    r.close()
    refused(inst, password="wrong")                            # pgcat's: 28P01
    refused(inst, dbname="no_such_database")                   # pgcat's: 3D000
    got = errors(inst)
    assert got[("appdb", "app", "22012", "server")] == 12, got
    assert got[("appdb", "app", "42P01", "server")] == 1, got
    assert got[("appdb", "app", "28P01", "pgcat")] == 1, got
    assert got[("appdb", "app", "22023", "pgcat")] == 1, got
    assert got[("pgcat", ADMIN_USER, "42601", "pgcat")] == 1, got
    # before a client names a pool, its names are anyone's: not kept
    assert got[("", "", "3D000", "pgcat")] == 1, got
    m = metrics(port)
    key = 'pgcat_errors_total{pool="appdb",user="app",sqlstate="22012",source="server"}'
    assert m[key] == 12, m
    assert m['pgcat_errors_total{pool="appdb",user="app",sqlstate="28P01",source="pgcat"}'] == 1, m
    assert m["pgcat_errors_untracked_total"] == 0, m
    # a client between transactions is not an error
    for c in conns:
        c.close()
    assert errors(inst) == got


def test_probing_names_does_not_fill_the_table(pgcat):
    """600 logins to as many databases that do not exist (a client probing
    names, before any login): one row, not 600; nothing untracked, and
    pgcat still counts the errors of its pools. (A full table is the unit
    tests': test/unit/check_errstats.c.)"""
    inst = pgcat()
    for i in range(600):
        refused(inst, dbname="probe_%d\u00e9" % i)
    got = errors(inst)
    assert got == {("", "", "3D000", "pgcat"): 600}, got
    with inst.connect() as c:
        with pytest.raises(psycopg.errors.DivisionByZero):
            c.execute("SELECT 1/0")
    assert errors(inst)[("appdb", "app", "22012", "server")] == 1
