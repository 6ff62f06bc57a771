# SPDX-License-Identifier: MIT
"""Transaction mode with more clients than server connections, for every
protocol pgbench speaks (simple, extended, prepared), its built-in scripts
(TPC-B with explicit transactions, select-only in autocommit) and a custom
one, through a pool of 4 servers.

pgbench -M prepared prepares each statement with a blocking PQprepare the
first time a client runs it; with -j 2 one thread's blocked prepare starves
its other clients, which may hold servers inside open transactions. A
pooler that needs a server for that prepare while all of them are held
inside transactions by clients of a blocked thread deadlocks (issue 20,
item 1): pgcat answers such a Parse from its statement cache instead.
"""
import os
import re
import subprocess

import pytest

from conftest import PASSWORDS, PG_BIN, assert_pool_idle
from test_load import bench_pool, ensure_bench_data

POOL = 4


def run_pgbench(inst, args, timeout=240):
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable", PGCONNECT_TIMEOUT="30")
    cmd = [str(PG_BIN / "pgbench"), "-n", "-h", inst.host, "-p", str(inst.port), "-U", "app"] + args + ["benchdb"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def assert_all_done(r, expected):
    out = r.stdout + r.stderr
    assert r.returncode == 0, "pgbench exit %d:\n%s" % (r.returncode, out[-3000:])
    m = re.search(r"number of transactions actually processed: (\d+)/(\d+)", out)
    assert m and int(m.group(1)) == expected, out[-3000:]
    m = re.search(r"number of failed transactions: (\d+)", out)
    assert m and m.group(1) == "0", out[-3000:]
    assert "does not exist" not in out and "already exists" not in out, out[-3000:]


@pytest.fixture
def stress_pool(pgcat, pg):
    ensure_bench_data(pg)
    inst = pgcat(general={"default_pool_size": POOL, "pool_mode": "transaction",
                          "prepared_statements": "true", "query_wait_timeout": 20000},
                 pools=bench_pool(pg))
    inst.pg = pg
    return inst


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["simple", "extended", "prepared"])
@pytest.mark.parametrize("clients", [10, 40])
def test_tpcb_more_clients_than_servers(stress_pool, protocol, clients):
    """pgbench's TPC-B script: BEGIN; 3 UPDATEs; SELECT; INSERT; END."""
    per_client = 2000 // clients
    r = run_pgbench(stress_pool, ["-M", protocol, "-c", str(clients), "-j", "2", "-t", str(per_client)])
    assert_all_done(r, clients * per_client)
    assert_pool_idle(stress_pool.pg, db="benchdb", max_conns=POOL)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["simple", "extended", "prepared"])
def test_select_only_autocommit(stress_pool, protocol):
    r = run_pgbench(stress_pool, ["-S", "-M", protocol, "-c", "20", "-j", "2", "-t", "200"])
    assert_all_done(r, 20 * 200)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["simple", "extended", "prepared"])
def test_custom_script_mixed(stress_pool, protocol):
    """Autocommit statements and an explicit transaction in one script, with
    a statement that fails inside the transaction's savepoint."""
    script = stress_pool.workdir / "mixed.sql"
    script.write_text(
        "\\set aid random(1, 100000)\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "BEGIN;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"
        "SAVEPOINT s;\n"
        "SELECT 1 / (:aid::int - :aid::int + 1);\n"
        "RELEASE SAVEPOINT s;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "END;\n"
        "SELECT count(*) FROM pgbench_branches;\n")
    r = run_pgbench(stress_pool, ["-M", protocol, "-c", "12", "-j", "2", "-t", "150", "-f", str(script)])
    assert_all_done(r, 12 * 150)
    assert_pool_idle(stress_pool.pg, db="benchdb", max_conns=POOL)
