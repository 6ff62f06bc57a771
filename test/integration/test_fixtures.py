# SPDX-License-Identifier: MIT
"""The fixtures themselves: the PostgreSQL servers the other tests stand on are
set up as those tests assume (one auth method per role, a working replica).
These talk to PostgreSQL directly, without pgcat."""
import pytest

import pgwire
from conftest import PASSWORDS


@pytest.mark.parametrize("user,code", [
    ("app", 10),            # SASL (SCRAM-SHA-256)
    ("md5user", 5),         # MD5
    ("cleartext_user", 3),  # cleartext password
    ("trust_user", 0),      # trust: AuthenticationOk at once
])
def test_server_asks_each_role_for_its_method(pg, user, code):
    r = pgwire.Raw(pg.host, pg.port)
    try:
        r.startup(user, "appdb")
        typ, payload = r.read_msg()
        assert typ == b"R"
        assert int.from_bytes(payload[:4], "big") == code
    finally:
        r.close()
    r = pgwire.Raw(pg.host, pg.port)
    r.login(user, PASSWORDS[user], "appdb")
    rows, err, status = r.simple("SELECT current_user")
    assert err is None and rows == [[user]] and status == "I"
    r.close()


def test_databases_exist(pg):
    names = {r[0] for r in pg.sql("SELECT datname FROM pg_database")}
    assert {"appdb", "shard0", "shard1", "benchdb"} <= names


def test_backend_counting_helper(pg):
    before = pg.count("app", "appdb")
    r = pgwire.Raw(pg.host, pg.port)
    r.login("app", PASSWORDS["app"], "appdb")
    assert pg.count("app", "appdb") == before + 1
    r.simple("BEGIN")
    assert pg.count("app", "appdb", state="idle in transaction") == 1
    r.close()


@pytest.mark.replica
def test_replica_streams(pg, pg_replica, table):
    t = table("a int")
    pg.sql("INSERT INTO %s VALUES (7)" % t)
    from conftest import wait_until
    wait_until(lambda: pg_replica.sql("SELECT count(*) FROM %s" % t)[0][0] == 1, 20)
    assert pg_replica.sql("SELECT pg_is_in_recovery()")[0][0] is True
