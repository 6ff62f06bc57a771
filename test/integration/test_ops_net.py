# SPDX-License-Identifier: MIT
"""What an operator moving off PgBouncer reaches for (SPEC §2): time
settings with PostgreSQL's units, TCP keepalive and TCP_USER_TIMEOUT on
client and server sockets, servers over Unix sockets, and a pool's
connect_query."""
import subprocess
import time

import psycopg
import pytest

from conftest import ADMIN_PASSWORD, ADMIN_USER, pgcat_binary, pgcat_env


def admin_command(p, sql):
    r = p.raw()
    r.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat")
    rows, err, status = r.simple(sql)
    r.close()
    assert err is None, err
    return rows


def reload_with(p, **general):
    p.general.update(general)
    p.write()
    admin_command(p, "RELOAD")


def run_t(p):
    r = subprocess.run([pgcat_binary(), "-t", str(p.ini)], capture_output=True, text=True, timeout=30,
                       env=pgcat_env(), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def waited_for_a_server(p):
    """Seconds a client waited for the pool's only server before its
    query_wait_timeout error."""
    holder = p.connect(autocommit=False)
    holder.execute("SELECT 1")                   # the only server, in a transaction
    waiter = p.connect()
    t0 = time.monotonic()
    with pytest.raises(psycopg.Error) as ei:
        waiter.execute("SELECT 2")
    took = time.monotonic() - t0
    assert ei.value.sqlstate == "08P01" and "query_wait_timeout" in str(ei.value), ei.value
    holder.rollback()
    assert waiter.execute("SELECT 3").fetchone()[0] == 3
    holder.close()
    waiter.close()
    return took


# ---------------------------------------------------------------------------
# (1) durations with units

def test_duration_with_a_unit_acts_and_reloads(pgcat):
    """query_wait_timeout = 1s: a waiting client gets its error after about
    a second (a bare 1 would be 1 ms); `pgcat -t` shows the value with its
    unit; a reload to 2500ms takes effect."""
    p = pgcat(general={"default_pool_size": 1, "query_wait_timeout": "1s", "ban_time": "2min",
                       "tcp_keepidle": "1min"})
    took = waited_for_a_server(p)
    assert 0.8 <= took < 2.5, "query_wait_timeout = 1s fired after %.2fs" % took
    out = run_t(p).stdout
    for line in ("query_wait_timeout = 1s", "ban_time = 2min", "tcp_keepidle = 1min", "connect_timeout = 5s",
                 "stats_period = 1min", "idle_transaction_timeout = 0"):
        assert "\n%s\n" % line in out, "pgcat -t does not show %r:\n%s" % (line, out)

    reload_with(p, query_wait_timeout="2500ms")
    took = waited_for_a_server(p)
    assert 2.3 <= took < 4, "query_wait_timeout = 2500ms after RELOAD fired after %.2fs" % took
    assert "\nquery_wait_timeout = 2500ms\n" in run_t(p).stdout


def test_pgbouncer_seconds_draw_a_warning(pgcat):
    """A bare value under 1,000 for a key PgBouncer counts in seconds is
    taken as milliseconds, and the log says so naming the key; the same
    value with a unit, and keys PgBouncer also counts in ms, say nothing."""
    p = pgcat(general={"server_lifetime": 600, "client_idle_timeout": "600s", "connect_timeout": 600})
    log = p.log()
    warned = [line for line in log.splitlines() if "PgBouncer" in line]
    assert len(warned) == 1, "expected one warning, got:\n%s" % "\n".join(warned)
    assert "server_lifetime" in warned[0] and "600s" in warned[0], warned[0]
    assert "warning" in warned[0].lower(), warned[0]
    r = run_t(p)
    assert "server_lifetime: 600 is taken as 600 milliseconds" in r.stderr, r.stderr
    assert "\nclient_idle_timeout = 10min\n" in r.stdout
    # and on reload, too
    reload_with(p, query_wait_timeout=120)
    assert "query_wait_timeout: 120 is taken as 120 milliseconds" in p.log()
