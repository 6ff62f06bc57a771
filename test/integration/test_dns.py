# SPDX-License-Identifier: MIT
"""Server host names (SPEC §2 dns_max_ttl): resolved asynchronously with
c-ares in each worker, cached for dns_max_ttl, looked up again when stale;
a host that stops resolving is banned like an unreachable server; SHOW
DNS_HOSTS lists the cache. The tests add names to /etc/hosts (they run as
root, like the rest of the suite) and take them out again."""
import contextlib
import os
import time
import uuid

import pytest

from conftest import PASSWORDS, assert_works, wait_until
from test_admin import admin, show

HOSTS = "/etc/hosts"


@contextlib.contextmanager
def hosts_entry(name, addr):
    """Adds 'addr name' to /etc/hosts; yields a function that re-points it."""
    marker = "# pgcat-test %s" % name
    with open(HOSTS) as f:
        original = f.read()

    def point(a):
        with open(HOSTS) as f:
            lines = [l for l in f.read().splitlines() if not l.endswith(marker)]
        lines.append("%s %s %s" % (a, name, marker))
        with open(HOSTS, "w") as f:
            f.write("\n".join(lines) + "\n")
    point(addr)
    try:
        yield point
    finally:
        with open(HOSTS) as f:
            lines = [l for l in f.read().splitlines() if not l.endswith(marker)]
        with open(HOSTS, "w") as f:
            f.write("\n".join(lines) + ("\n" if original.endswith("\n") else ""))


pytestmark = pytest.mark.skipif(not os.access(HOSTS, os.W_OK), reason="needs a writable /etc/hosts (root)")


def dns_hosts(inst):
    r = admin(inst)
    try:
        _, rows = show(r, "DNS_HOSTS")
    finally:
        r.close()
    return {x["hostname"]: x for x in rows}


def one_server_pool(pg, host, **extra):
    pool = {"shards": {0: {"database": "appdb", "servers": "%s:%d:primary" % (host, pg.port)}}}
    pool.update(extra)
    return pool


def test_localhost_resolved_by_the_resolver(pgcat, pg):
    inst = pgcat(pool=one_server_pool(pg, "localhost"))
    with inst.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    hosts = dns_hosts(inst)
    assert "localhost" in hosts, hosts
    assert "127.0.0.1" in hosts["localhost"]["addrs"].split(","), hosts
    assert int(hosts["localhost"]["ttl"]) > 0


def test_name_from_etc_hosts_serves_queries(pgcat, pg):
    name = "pgcat-test-%s.internal" % uuid.uuid4().hex[:8]
    with hosts_entry(name, "127.0.0.1"):
        inst = pgcat(pool=one_server_pool(pg, name))
        for _ in range(3):
            with inst.connect() as c:
                assert c.execute("SELECT current_user").fetchone()[0] == "app"
        assert dns_hosts(inst)[name]["addrs"] == "127.0.0.1"


def test_unresolvable_replica_banned_primary_serves(pgcat, pg, pg_replica):
    servers = "127.0.0.1:%d:primary, nonexistent-pgcat-test.invalid:%d:replica" % (pg.port, pg_replica.port)
    inst = pgcat(pool={"query_parser_enabled": "true", "primary_reads_enabled": "true",
                       "shards": {0: {"database": "appdb", "servers": servers}}},
                 general={"ban_time": 60})
    with inst.connect() as c:
        for _ in range(20):
            assert c.execute("SELECT 1").fetchone()[0] == 1         # reads
        c.execute("CREATE TEMP TABLE dns_t (x int)")                 # a write
    r = admin(inst)

    def banned():
        _, bans = show(r, "BANS")
        return any(b["host"] == "nonexistent-pgcat-test.invalid" for b in bans)
    wait_until(banned, 20, msg="the replica whose name does not resolve banned")
    r.close()
    with inst.connect() as c:
        assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False


def test_stale_answer_looked_up_again(pgcat, pg):
    name = "pgcat-test-%s.internal" % uuid.uuid4().hex[:8]
    with hosts_entry(name, "127.0.0.1") as point:
        inst = pgcat(pool=one_server_pool(pg, name), general={"dns_max_ttl": 1000})
        with inst.connect() as c:
            c.execute("SELECT 1")
        assert dns_hosts(inst)[name]["addrs"] == "127.0.0.1"
        point("127.0.0.9")
        # within about dns_max_ttl (plus the janitor's tick) the cache follows
        wait_until(lambda: dns_hosts(inst)[name]["addrs"] == "127.0.0.9", 10,
                   msg="SHOW DNS_HOSTS showing the new address")
        point("127.0.0.1")
        wait_until(lambda: dns_hosts(inst)[name]["addrs"] == "127.0.0.1", 10)
        with inst.connect() as c:                   # and it still serves
            assert c.execute("SELECT 1").fetchone()[0] == 1


def test_name_that_stops_resolving_fails_clients_clearly(pgcat, pg):
    name = "pgcat-test-%s.internal" % uuid.uuid4().hex[:8]
    import psycopg
    with hosts_entry(name, "127.0.0.1"):
        inst = pgcat(pool=one_server_pool(pg, name, pool_size=1), general={"dns_max_ttl": 500})
        with inst.connect() as c:
            c.execute("SELECT 1")
    # the name is gone from /etc/hosts: once the answer is stale and the
    # lookup fails, a client needing a new server connection gets the reason
    hosts_gone = lambda: name not in dns_hosts(inst) or dns_hosts(inst)[name]["addrs"] == ""
    wait_until(hosts_gone, 15, msg="the cache dropping the name's address")
    r = admin(inst)
    r.simple("RECONNECT appdb")        # close the idle server connection
    r.close()

    def fails_with_reason():
        try:
            with inst.connect() as c:
                c.execute("SELECT 1")
            return False
        except psycopg.Error as e:
            return "resolve" in str(e)
    wait_until(fails_with_reason, 15, msg="a clear 'cannot resolve' error to the client")


def test_unresolvable_name_not_looked_up_at_every_tick(pgcat, pg):
    """A pool whose host does not resolve and no client asking: the name is
    asked again about once a second, and the warning is logged when it
    starts failing, not at every janitor tick (10 a second)."""
    unres = {"shards": {0: {"database": "appdb", "servers": "nonexistent-pgcat-test.invalid:5432:primary"}},
             "users": {"app": {"password": PASSWORDS["app"]}}}
    inst = pgcat(pools={"unres": unres})
    time.sleep(3)
    warned = inst.log().count("cannot resolve nonexistent-pgcat-test.invalid")
    assert 1 <= warned <= 2, "%d warnings in 3 s:\n%s" % (warned, inst.log()[-2000:])
    assert_works(inst)
