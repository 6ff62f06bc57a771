# SPDX-License-Identifier: MIT
"""Load: the "Done when" of issue 2.

- through pgcat in transaction mode with pool_size 10, `pgbench -i -s 10`
  works and `pgbench -S -c 100 -j 2 -T 20` with --protocol simple and
  --protocol extended finishes with zero failed transactions (and every one
  of the 100 clients ran transactions);
- 1,000 concurrent psycopg clients each running 20 transactions against
  pool_size 10 all succeed;
- the same in session mode with `--protocol prepared`.

PGCAT_LOAD_SECONDS overrides pgbench's -T (default 20, the issue's figure).
"""
import asyncio
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import PASSWORDS, PG_BIN, assert_pool_idle
from test_pooling import MaxSampler

SECONDS = int(os.environ.get("PGCAT_LOAD_SECONDS", "20"))
SCALE = 10


def bench_pool(pg):
    return {"benchdb": {"shards": {0: {"database": "benchdb",
                                       "servers": "127.0.0.1:%d:primary" % pg.port}},
                        "users": {"app": {"password": PASSWORDS["app"]}}}}


def pgbench(args, host, port, timeout):
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable", PGCONNECT_TIMEOUT="60")
    cmd = [str(PG_BIN / "pgbench"), "-h", host, "-p", str(port), "-U", "app"] + args + ["benchdb"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return r


def bench_ready(pg):
    try:
        return (pg.sql("SELECT count(*) FROM pgbench_branches", dbname="benchdb")[0][0] == SCALE and
                pg.sql("SELECT count(*) FROM pgbench_accounts", dbname="benchdb")[0][0] == SCALE * 100000)
    except Exception:  # noqa: BLE001 - tables absent
        return False


def ensure_bench_data(pg):
    """pgbench tables at scale 10 in benchdb. test_pgbench_init_scale_10 makes
    them through pgcat; if that did not happen, make them directly so the
    other load tests still measure pgcat and not a missing table."""
    if not bench_ready(pg):
        r = pgbench(["-i", "-s", str(SCALE), "-q"], pg.host, pg.port, 300)
        assert r.returncode == 0, r.stderr


def check_pgbench_output(r, clients, log_prefix):
    out = r.stdout + r.stderr
    assert r.returncode == 0, "pgbench exit %d:\n%s" % (r.returncode, out[-3000:])
    m = re.search(r"number of failed transactions: (\d+)", out)
    assert m, "no failed-transactions line in pgbench output:\n" + out[-3000:]
    assert m.group(1) == "0", "failed transactions:\n" + out[-3000:]
    assert re.search(r"number of clients: %d\b" % clients, out)
    done = re.search(r"number of transactions actually processed: (\d+)", out)
    assert done and int(done.group(1)) > 0, out[-3000:]
    # pgbench -l: one line per transaction, first field = client id.
    ids = set()
    for f in Path(log_prefix).parent.glob(Path(log_prefix).name + ".*"):
        with open(f) as fh:
            for line in fh:
                ids.add(int(line.split(" ", 1)[0]))
    assert len(ids) == clients, "only %d of %d clients ran transactions" % (len(ids), clients)
    return out


@pytest.mark.timeout(600)
def test_pgbench_init_scale_10(pgcat, pg):
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 10}, pools=bench_pool(pg))
    r = pgbench(["-i", "-s", str(SCALE)], p.host, p.port, 600)
    assert r.returncode == 0, "pgbench -i through pgcat failed:\n" + (r.stdout + r.stderr)[-3000:]
    assert bench_ready(pg)
    assert_pool_idle(pg, db="benchdb", max_conns=10)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("protocol", ["simple", "extended"])
def test_pgbench_select_only_100_clients_transaction_mode(pgcat, pg, tmp_path, protocol):
    ensure_bench_data(pg)
    p = pgcat(general={"pool_mode": "transaction", "default_pool_size": 10}, pools=bench_pool(pg))
    prefix = str(tmp_path / "pgb")
    with MaxSampler(pg, db="benchdb") as s:
        r = pgbench(["-S", "-n", "-c", "100", "-j", "2", "-T", str(SECONDS), "--protocol", protocol,
                     "-l", "--log-prefix", prefix], p.host, p.port, SECONDS + 240)
    out = check_pgbench_output(r, 100, prefix)
    print(out[-1500:])
    assert s.max <= 10, "pool_size 10 but %d server connections" % s.max
    assert_pool_idle(pg, db="benchdb", max_conns=10)


@pytest.mark.timeout(600)
def test_pgbench_prepared_session_mode(pgcat, pg, tmp_path):
    """Session mode gives each pgbench client its own server (pool_size 100)."""
    ensure_bench_data(pg)
    p = pgcat(general={"pool_mode": "session", "default_pool_size": 100}, pools=bench_pool(pg))
    prefix = str(tmp_path / "pgb")
    r = pgbench(["-S", "-n", "-c", "100", "-j", "2", "-T", str(SECONDS), "--protocol", "prepared",
                 "-l", "--log-prefix", prefix], p.host, p.port, SECONDS + 240)
    out = check_pgbench_output(r, 100, prefix)
    print(out[-1500:])
    assert_pool_idle(pg, db="benchdb", max_conns=100)


# Not tested: session mode with pool_size 10 and `pgbench -C -c 100 --protocol
# prepared`. pgbench prepares statements with a blocking call on each new
# connection, so a pgbench thread stalls on a client that waits for a server
# while its other clients hold all ten sessions: a deadlock of pgbench's own
# (PgBouncer shows the same), not of the pooler.


def run_1000_clients(p, clients=1000, transactions=20, connecting_at_once=100, barrier=True):
    """`clients` psycopg AsyncConnections, each running `transactions`
    transactions. Logins are ramped (at most `connecting_at_once` handshakes in
    flight, as an application's pool would open them); with barrier=True all
    clients are connected before any transaction starts, so all of them are
    really there at once. (Session mode cannot wait for all: a session holds
    its server until it disconnects.)"""
    async def main():
        results = []
        gate = asyncio.Semaphore(connecting_at_once)
        connected = 0
        all_in = asyncio.Event()

        async def one(i):
            nonlocal connected
            async with gate:
                c = await p.aconnect(dbname="benchdb", connect_timeout=120)
            try:
                connected += 1
                if connected == clients:
                    all_in.set()
                if barrier:
                    await asyncio.wait_for(all_in.wait(), 300)
                for j in range(transactions):
                    async with c.transaction():
                        cur = await c.execute("SELECT %s::int + %s::int", (i, j))
                        v = (await cur.fetchone())[0]
                        assert v == i + j
                        results.append(1)
            finally:
                await c.close()

        outcomes = await asyncio.gather(*[one(i) for i in range(clients)], return_exceptions=True)
        errors = [repr(o) for o in outcomes if isinstance(o, BaseException)]
        return results, errors
    return asyncio.run(main())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_1000_concurrent_psycopg_clients_pool_10(pgcat, pg, mode):
    p = pgcat(general={"pool_mode": mode, "default_pool_size": 10, "max_client_conn": 2000},
              pools=bench_pool(pg))
    with MaxSampler(pg, db="benchdb") as s:
        results, errors = run_1000_clients(p, barrier=(mode == "transaction"))
    assert not errors, "%d of 1000 clients failed, e.g. %s" % (len(errors), errors[:3])
    assert len(results) == 1000 * 20
    assert s.max <= 10, "pool_size 10 but %d server connections" % s.max
    assert_pool_idle(pg, db="benchdb", max_conns=10)
