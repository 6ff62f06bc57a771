# SPDX-License-Identifier: MIT
"""SPEC §4's failover table, one test per row (R = read, W = write; parser =
query_parser_enabled, p.reads = primary_reads_enabled). "down" is a server
nobody listens on; a read's outcome is told by pg_is_in_recovery()."""
import psycopg
import pytest

from conftest import free_port
from test_admin import admin, show


def make(pgcat, pg, replica_port, parser, preads, primary_port=None, default_role="any"):
    servers = "127.0.0.1:%d:primary, 127.0.0.1:%d:replica" % (primary_port or pg.port, replica_port)
    pool = {"query_parser_enabled": "true" if parser else "false",
            "primary_reads_enabled": "true" if preads else "false",
            "default_role": default_role,
            "shards": {0: {"database": "appdb", "servers": servers}}}
    return pgcat(pool=pool, general={"ban_time": 60})


def reads(c, n=20, role=None):
    if role:
        c.execute("SET SERVER ROLE TO '%s'" % role)
    return [c.execute("SELECT pg_is_in_recovery()").fetchone()[0] for _ in range(n)]


def banned_ports(inst):
    r = admin(inst)
    _, bans = show(r, "BANS")
    r.close()
    return {int(b["port"]) for b in bans}


# ---- reads, servers up -------------------------------------------------------

def test_R_unset_parser_off_preads_off_up(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=False, preads=False)
    c = inst.connect()
    assert set(reads(c, 60)) == {True, False}   # any server of the loop


def test_R_unset_parser_on_preads_off_up(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=True, preads=False)
    assert set(reads(inst.connect())) == {True}


def test_R_unset_parser_on_preads_on_up(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=True, preads=True)
    assert set(reads(inst.connect(), 60)) == {True, False}


def test_R_replica_parser_off_up(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=False, preads=False)
    assert set(reads(inst.connect(), role="replica")) == {True}


def test_R_primary_parser_off_up(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=False, preads=False)
    assert set(reads(inst.connect(), role="primary")) == {False}


# ---- reads, target down ------------------------------------------------------

def test_R_unset_parser_off_preads_off_down(pgcat, pg):
    dead = free_port()
    inst = make(pgcat, pg, dead, parser=False, preads=False)
    assert set(reads(inst.connect(), 40)) == {False}   # the dead one banned, the next server serves
    assert dead in banned_ports(inst)


def test_R_unset_parser_on_preads_off_down(pgcat, pg, pg_replica):
    dead = free_port()
    pool = {"query_parser_enabled": "true", "primary_reads_enabled": "false",
            "shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary, 127.0.0.1:%d:replica, "
                           "127.0.0.1:%d:replica" % (pg.port, dead, pg_replica.port)}}}
    inst = pgcat(pool=pool)
    assert set(reads(inst.connect(), 40)) == {True}   # next replica
    assert dead in banned_ports(inst)


def test_R_unset_parser_on_preads_on_primary_down(pgcat, pg, pg_replica):
    dead = free_port()
    inst = make(pgcat, pg, pg_replica.port, parser=True, preads=True, primary_port=dead)
    assert set(reads(inst.connect(), 40)) == {True}   # even the primary is banned for reads
    assert dead in banned_ports(inst)


def test_R_replica_parser_off_down(pgcat, pg, pg_replica):
    dead = free_port()
    pool = {"query_parser_enabled": "false", "primary_reads_enabled": "false",
            "shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary, 127.0.0.1:%d:replica, "
                           "127.0.0.1:%d:replica" % (pg.port, dead, pg_replica.port)}}}
    inst = pgcat(pool=pool)
    got = reads(inst.connect(), 40, role="replica")
    assert set(got) == {True}, got
    assert dead in banned_ports(inst)


def test_R_primary_parser_off_down(pgcat, pg, pg_replica):
    dead = free_port()
    inst = make(pgcat, pg, pg_replica.port, parser=False, preads=False, primary_port=dead)
    c = inst.connect()
    c.execute("SET SERVER ROLE TO 'primary'")
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT pg_is_in_recovery()")


# ---- writes ------------------------------------------------------------------

def test_W_unset_parser_off_up_replica_error_reaches_client(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=False, preads=False)
    c = inst.connect()
    outcomes = set()
    for _ in range(30):
        try:
            c.execute("CREATE TEMP TABLE IF NOT EXISTS w (a int)")
            outcomes.add("ok")
        except psycopg.errors.ReadOnlySqlTransaction:
            outcomes.add("read-only")
    assert outcomes == {"ok", "read-only"}


def test_W_unset_parser_on_goes_to_primary(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=True, preads=False)
    c = inst.connect()
    for _ in range(20):
        c.execute("CREATE TEMP TABLE IF NOT EXISTS w (a int)")


def test_W_primary_parser_off_up(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=False, preads=False)
    c = inst.connect()
    c.execute("SET SERVER ROLE TO 'primary'")
    for _ in range(10):
        c.execute("CREATE TEMP TABLE IF NOT EXISTS w (a int)")


def test_W_replica_parser_off_up_read_only_error(pgcat, pg, pg_replica):
    inst = make(pgcat, pg, pg_replica.port, parser=False, preads=False)
    c = inst.connect()
    c.execute("SET SERVER ROLE TO 'replica'")
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        c.execute("CREATE TEMP TABLE w (a int)")


@pytest.mark.parametrize("parser,role", [(True, None), (False, "primary")])
def test_W_primary_down_error(pgcat, pg, pg_replica, parser, role):
    dead = free_port()
    inst = make(pgcat, pg, pg_replica.port, parser=parser, preads=False, primary_port=dead)
    c = inst.connect()
    if role:
        c.execute("SET SERVER ROLE TO '%s'" % role)
    with pytest.raises(psycopg.OperationalError):
        c.execute("CREATE TEMP TABLE w (a int)")
