# SPDX-License-Identifier: MIT
"""Statistics per query shape (issue 44, query_stats per pool,
doc/monitoring.md): per normalised query (libpg_query's fingerprint, text
with constants as $n), for both protocols and prepared statements by their
statement: calls, rows, errors, total/mean and p50/p95/p99 of execution
and wait time, the shards and roles it ran on. SHOW QUERIES (sortable,
per pool), RESET QUERIES, the top shapes in /metrics, at most
query_stats_max shapes per pool (least recently used dropped, counted),
summed over the workers."""
import copy
import re
import threading
import time
import urllib.request

import psycopg
import pytest

import pgwire
from conftest import default_pools, free_port, wait_until
from test_admin import admin, command, show

COLUMNS = ["database", "user", "fingerprint", "query", "calls", "rows", "errors",
           "total_exec_time", "mean_exec_time", "p50_exec_time", "p95_exec_time", "p99_exec_time",
           "total_wait_time", "mean_wait_time", "p50_wait_time", "p95_wait_time", "p99_wait_time",
           "shards", "roles"]


def queries(inst, args=""):
    r = admin(inst)
    try:
        cols, rows = show(r, "QUERIES" + (" " + args if args else ""))
    finally:
        r.close()
    assert cols == COLUMNS, cols
    return rows


def by_text(rows):
    return {r["query"]: r for r in rows}


def console(inst, sql):
    r = admin(inst)
    try:
        rows, err, status = r.simple(sql)
    finally:
        r.close()
    return rows, err


def metrics(port):
    return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()


def two_pools(pg):
    pools = default_pools(pg)
    pools["appdb"]["query_stats"] = "on"
    quiet = copy.deepcopy(pools["appdb"])
    del quiet["query_stats"]
    pools["quietdb"] = quiet
    pools["quietdb"]["shards"][0]["database"] = "appdb"
    return pools


@pytest.mark.parametrize("workers", [1, 2])
def test_shapes_counted_over_workers_and_protocols(pgcat, pg, workers):
    port = free_port()
    inst = pgcat(replace_pools=two_pools(pg), general={"workers": workers, "prometheus_port": port})
    assert queries(inst) == []
    conns = [inst.connect() for _ in range(4)]          # (spread over the workers)
    for i, c in enumerate(conns):
        for k in range(5):
            # simple protocol, a different constant each time: one shape
            assert c.execute("SELECT %d + 1000, 'secret-literal-%d'" % (k, k), prepare=False).fetchone()[0] == k + 1000
            # extended protocol (unnamed statements)
            c.execute("SELECT generate_series(1, %s), %s::text", [3, "param-secret"])
        for k in range(3):
            c.execute("SELECT %s::int * 2", [k], prepare=True)  # named: Parse once, then Binds only
        with pytest.raises(psycopg.errors.DivisionByZero):
            c.execute("SELECT 1 / %d" % (i - i))              # a server's error
    with inst.connect(dbname="quietdb") as q:               # a pool without query_stats
        q.execute("SELECT 42 AS not_counted")
    rows = by_text(queries(inst))
    simple = rows["SELECT $1 + $2, $3"]
    assert int(simple["calls"]) == 20 and int(simple["rows"]) == 20 and int(simple["errors"]) == 0, simple
    assert simple["database"] == "appdb" and simple["user"] == "app", simple
    assert re.fullmatch(r"[0-9a-f]{16}", simple["fingerprint"]), simple
    ext = rows["SELECT generate_series($3, $1), $2::text"]   # (the constant 1 numbered after the parameters)
    assert int(ext["calls"]) == 20 and int(ext["rows"]) == 60, ext
    named = rows["SELECT $1::int * $2"]
    assert int(named["calls"]) == 12 and int(named["rows"]) == 12, named
    err = rows["SELECT $1 / $2"]
    assert int(err["calls"]) == 4 and int(err["errors"]) == 4, err
    for r in rows.values():
        calls, total = int(r["calls"]), int(r["total_exec_time"])
        assert total > 0 and int(r["mean_exec_time"]) == total // calls, r
        assert 0 < int(r["p50_exec_time"]) <= int(r["p95_exec_time"]) <= int(r["p99_exec_time"]), r
        assert int(r["p99_wait_time"]) >= int(r["p50_wait_time"]) >= 0, r
        assert r["shards"] == "0" and r["roles"] == "primary", r
        assert "quietdb" != r["database"]
    text = str(queries(inst))
    for secret in ("secret-literal", "param-secret", "not_counted"):
        assert secret not in text
    # Sorting and a pool's rows only
    by_calls = queries(inst, "appdb ORDER BY calls ASC LIMIT 2")
    assert [int(r["calls"]) for r in by_calls] == [4, 12], by_calls
    assert [r["query"] for r in queries(inst, "ORDER BY query")] == sorted(rows), rows
    assert queries(inst, "quietdb") == []
    # /metrics: the top shapes, labelled by fingerprint
    body = metrics(port)
    m = re.search(r'^pgcat_query_calls_total\{pool="appdb",user="app",fingerprint="%s"\} (\d+)$'
                  % simple["fingerprint"], body, re.M)
    assert m and int(m.group(1)) == 20, body
    assert re.search(r'^pgcat_query_info\{pool="appdb",user="app",fingerprint="%s",query="SELECT \$1 \+ \$2, \$3"\} 1$'
                     % simple["fingerprint"], body, re.M), body
    assert re.search(r'^pgcat_query_errors_total\{pool="appdb",user="app",fingerprint="%s"\} 4$' % err["fingerprint"],
                     body, re.M), body
    assert 'pgcat_query_shapes_dropped_total{pool="appdb",user="app"} 0' in body
    for c in conns:
        c.close()


def test_reset_queries_and_bad_console_input(pgcat, pg):
    inst = pgcat(replace_pools=two_pools(pg), general={"workers": 2})
    with inst.connect() as c:
        for k in range(3):
            c.execute("SELECT %d" % k)
    assert int(by_text(queries(inst))["SELECT $1"]["calls"]) == 3
    for bad, code in (("SHOW QUERIES appdb ORDER BY nothing", "42703"), ("SHOW QUERIES ORDER", "42601"),
                      ("SHOW QUERIES LIMIT -1", "42601"), ("SHOW QUERIES LIMIT x", "42601"),
                      ("SHOW QUERIES appdb LIMIT 1 extra", "42601"), ("SHOW QUERIES no_such_db", "3D000"),
                      ("RESET QUERIES no_such_db", "3D000"),
                      ("SHOW QUERIES appdb ORDER BY calls DESC LIMIT 1 a b c d e f", "42601")):
        rows, err = console(inst, bad)
        assert err and err.get("C") == code, (bad, err)
    rows, err = console(inst, "RESET QUERIES appdb")
    assert err is None, err
    assert queries(inst) == []
    with inst.connect() as c:
        c.execute("SELECT 7")
    assert int(by_text(queries(inst))["SELECT $1"]["calls"]) == 1   # counted afresh
    rows, err = console(inst, "RESET QUERIES")
    assert err is None and queries(inst) == []
    # a console SET with a long value (more words than SHOW QUERIES may have) still works
    rows, err = console(inst, "SET auth_query = 'SELECT usename, passwd FROM pg_shadow WHERE usename = $1 AND true AND true'")
    assert err is None, err
    with inst.connect() as c:                              # and pgcat goes on serving
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_session_mode_statement_by_name_and_text_not_sql(pgcat, pg):
    pools = two_pools(pg)
    pools["appdb"]["pool_mode"] = "session"
    inst = pgcat(replace_pools=pools)
    with inst.connect() as c:
        for k in range(4):
            c.execute("SELECT %s::text || 'x'", [str(k)], prepare=True)
        with pytest.raises(psycopg.errors.SyntaxError):
            c.execute("SELEC 'not sql 1234'")
        c.execute("NOTIFY chan, 'payload-secret'")
    rows = by_text(queries(inst))
    assert int(rows["SELECT $1::text || $2"]["calls"]) == 4, rows
    bad = rows["(text not written: not read as SQL)"]
    assert int(bad["calls"]) == 1 and int(bad["errors"]) == 1 and bad["fingerprint"] == "0" * 16, bad
    notify = rows["(text not written: constants left after normalising)"]
    assert int(notify["calls"]) == 1, notify
    assert "payload-secret" not in str(rows) and "1234" not in str(rows)


def test_wait_time_of_a_shape(pgcat, pg):
    pools = two_pools(pg)
    pools["appdb"]["users"]["app"]["pool_size"] = 1
    inst = pgcat(replace_pools=pools)
    holder = inst.connect(autocommit=False)
    holder.execute("SELECT abs(1)")                        # holds the only server
    waiter = inst.connect()
    t = threading.Timer(0.4, holder.commit)
    t.start()
    waiter.execute("SELECT lower('waited')")
    t.join()
    row = by_text(queries(inst))["SELECT lower($1)"]
    assert int(row["total_wait_time"]) >= 300_000 and int(row["p99_wait_time"]) >= 250_000, row
    assert int(row["total_exec_time"]) < 300_000, row
    holder.close()
    waiter.close()


def test_query_stats_max_drops_least_recently_used(pgcat, pg):
    port = free_port()
    pools = two_pools(pg)
    pools["appdb"]["query_stats_max"] = 3
    inst = pgcat(replace_pools=pools, general={"prometheus_port": port})
    # (constants do not make shapes: a function's name does)
    fns = ["abs", "sign", "ceil", "floor", "round", "trunc"]
    with inst.connect() as c:
        for f in fns:                                       # six shapes
            c.execute("SELECT %s(1.5)" % f)
        c.execute("SELECT ceil(2.5)")                       # the third again: it was dropped, floor goes
    shown = sorted(r["query"] for r in queries(inst))
    assert shown == ["SELECT ceil($1)", "SELECT round($1)", "SELECT trunc($1)"], shown
    body = metrics(port)
    assert re.search(r'^pgcat_query_shapes_dropped_total\{pool="appdb",user="app"\} 4$', body, re.M), [l for l in body.splitlines() if "dropped" in l]
    with inst.connect() as c:
        c.execute("SELECT abs(7)")                          # one more: round is the least recently used
    shown = sorted(r["query"] for r in queries(inst))
    assert shown == ["SELECT abs($1)", "SELECT ceil($1)", "SELECT trunc($1)"], shown


def test_replica_and_shards_routed_to(pgcat, pg, pg_replica):
    pools = default_pools(pg)
    pools["appdb"]["query_stats"] = "on"
    pools["appdb"]["shards"] = {
        0: {"database": "shard0", "servers": "127.0.0.1:%d:primary,127.0.0.1:%d:replica" % (pg.port, pg_replica.port)},
        1: {"database": "shard1", "servers": "127.0.0.1:%d:primary" % pg.port},
    }
    pools["appdb"]["default_role"] = "replica"
    pools["appdb"]["primary_reads_enabled"] = "false"
    inst = pgcat(replace_pools=pools)
    with inst.connect() as c:
        for shard in (0, 1):
            c.execute("/* pgcat: shard=%d */ SELECT current_database()" % shard)
        c.execute("/* pgcat: shard=0 role=primary */ SELECT current_database()")
    rows = queries(inst)
    assert len(rows) == 1, rows
    r = rows[0]
    assert int(r["calls"]) == 3 and r["shards"] == "0,1" and r["roles"] == "primary,replica", r
