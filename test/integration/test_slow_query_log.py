# SPDX-License-Identifier: MIT
"""The slow-query log (issue 44, log_min_duration per pool,
doc/monitoring.md): a request that took at least log_min_duration is
logged on one line with its fingerprint and normalised text (constants as
$n), its duration and its wait for a server, the pool, the user, the
client's address, the server and the shard. Never a parameter value,
never a constant of the text."""
import json
import re
import threading
import time

import psycopg

from conftest import wait_until


def slow_lines(inst):
    return [l for l in inst.log().splitlines() if "slow query" in l or '"event":"slow_query"' in l]


def test_slow_queries_logged_with_their_shape_not_their_values(pgcat, pg):
    import copy
    from conftest import default_pools
    pools = default_pools(pg)
    pools["appdb"]["log_min_duration"] = "200ms"
    quiet = copy.deepcopy(pools["appdb"])
    del quiet["log_min_duration"]
    pools["quietdb"] = quiet
    pools["quietdb"]["shards"][0]["database"] = "appdb"
    inst = pgcat(replace_pools=pools, general={"log_format": "json"})
    with inst.connect() as c:
        c.execute("SELECT 1")                                               # fast: not logged
        c.execute("SELECT pg_sleep(0.3), 'literal-secret-7x'")              # simple protocol
        c.execute("SELECT pg_sleep(%s), %s::text", [0.3, "param-secret-9y"])  # extended
        c.execute("SELECT pg_sleep(%s)", [0.25], prepare=True)
        c.execute("SELECT pg_sleep(%s)", [0.25], prepare=True)              # by its name: a Bind only
    with inst.connect(dbname="quietdb") as q:
        q.execute("SELECT pg_sleep(0.3)")                                   # a pool without it
    wait_until(lambda: len(slow_lines(inst)) >= 4, 10)
    log = inst.log()
    objs = [json.loads(l) for l in slow_lines(inst)]
    assert len(objs) == 4, objs
    for o in objs:
        assert o["event"] == "slow_query" and o["pool"] == "appdb" and o["user"] == "app", o
        assert float(o["duration_ms"]) >= 200 and float(o["wait_ms"]) >= 0, o
        assert o["client_addr"] == "127.0.0.1" and o["client_port"] > 0 and o["shard"] == 0, o
        assert o["host"] == "127.0.0.1" and o["port"] == pg.port, o
    simple, extended, parsed, bound = objs
    assert simple["query"] == "SELECT pg_sleep($1), $2", simple
    assert re.fullmatch(r"[0-9a-f]{16}", simple["fingerprint"]), simple
    assert extended["query"] == "SELECT pg_sleep($1), $2::text", extended
    assert parsed["query"] == "SELECT pg_sleep($1)" and parsed["fingerprint"], parsed
    # a Bind of a statement parsed before: in transaction mode pgcat
    # prepares it on the server it runs on, and so knows its text
    assert bound["query"] == "SELECT pg_sleep($1)" and bound["fingerprint"] == parsed["fingerprint"], bound
    assert simple["fingerprint"] != parsed["fingerprint"]
    for secret in ("literal-secret-7x", "param-secret-9y"):
        assert secret not in log


def test_text_line_and_wait_time(pgcat, pg):
    """The text line, and the wait: a client that waited 0.4 s for the
    pool's only server has that wait on its line."""
    inst = pgcat(users={"app": {"pool_size": 1}}, general={"log_min_duration": "150ms"})
    holder = inst.connect(autocommit=False)
    holder.execute("SELECT 1")                       # holds the only server
    waiter = inst.connect()
    def later():
        time.sleep(0.4)
        holder.commit()
    t = threading.Thread(target=later)
    t.start()
    waiter.execute("SELECT pg_sleep(0.2)")
    t.join()
    wait_until(lambda: slow_lines(inst), 10)
    line = slow_lines(inst)[0]
    m = re.search(r"slow query: ([\d.]+) ms, waited ([\d.]+) ms, pool appdb, user app, client C-\d+ 127\.0\.0\.1:\d+, "
                  r"server S-\d+ 127\.0\.0\.1:%d, shard 0, fingerprint [0-9a-f]{16}: SELECT pg_sleep\(\$1\)$" % pg.port,
                  line)
    assert m, line
    assert float(m.group(1)) >= 150 and float(m.group(2)) >= 300, line
    holder.close()
    waiter.close()


def test_session_mode_bind_of_an_earlier_statement_names_it(pgcat, pg):
    """In session mode a statement stays on the client's own server, and
    pgcat does not keep its text: a Bind of it in a later request is
    logged by its name."""
    import pgwire
    inst = pgcat(general={"pool_mode": "session", "log_min_duration": "150ms", "log_format": "json"})
    r = inst.raw_login()
    try:
        r.send(pgwire.parse("SELECT pg_sleep($1)", name="napper") + pgwire.sync())
        r.read_until((b"Z",))
        r.send(pgwire.bind(params=("0.2",), stmt="napper") + pgwire.execute() + pgwire.sync())
        assert [m[0] for m in r.read_until((b"Z",))][-1] == b"Z"
    finally:
        r.close()
    wait_until(lambda: len(slow_lines(inst)) >= 1, 10)
    (o,) = [json.loads(l) for l in slow_lines(inst)]
    assert o["query"] == "" and o["fingerprint"] == "" and o["statement"] == "napper", o
    assert "prepared statement" in o["message"], o


def test_no_constant_ever_written(pgcat):
    """What libpg_query's normalisation leaves is not written: a comment
    goes, and a text with a constant left (EXECUTE's arguments) is not
    written at all."""
    inst = pgcat(general={"pool_mode": "session", "log_min_duration": "150ms", "log_format": "json"})
    with inst.connect() as c:
        c.execute("/* email=bob@example.com */ SELECT pg_sleep(0.2) -- token=s3cr3t-42")
        c.execute("DO $$ BEGIN PERFORM pg_sleep(0.2); RAISE NOTICE 'dollar-secret-5z'; END $$")
        c.execute("PREPARE slowp(text) AS SELECT pg_sleep(0.2), $1")
        c.execute("EXECUTE slowp('exec-secret-3q')")
    wait_until(lambda: len(slow_lines(inst)) >= 3, 10)
    commented, block, executed = [json.loads(l) for l in slow_lines(inst)]
    assert commented["query"].split() == ["SELECT", "pg_sleep($1)"], commented
    assert block["query"] == "DO $1", block
    assert executed["query"] == "" and executed["fingerprint"] == "", executed
    assert "constants left after normalising" in executed["message"], executed
    for secret in ("bob@example.com", "s3cr3t-42", "dollar-secret-5z", "exec-secret-3q"):
        assert secret not in "\n".join(slow_lines(inst)), secret
