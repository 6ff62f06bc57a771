# SPDX-License-Identifier: MIT
"""Admin console, statistics, /metrics and live reload (SPEC §2 reload, §7, §8).

Everything here goes through real clients: psql and a raw wire client for
the admin console, psycopg for traffic, HTTP for /metrics."""
import os
import signal
import struct
import time
import urllib.request

import psycopg
import pytest

import pgwire
from conftest import ADMIN_PASSWORD, ADMIN_USER, PASSWORDS, free_port, wait_until

# PgBouncer's column lists (SPEC appendix A): pgcat's own columns may only follow.
PGBOUNCER_COLUMNS = {
    "STATS": "database, total_server_assignment_count, total_xact_count, total_query_count, total_received, "
             "total_sent, total_xact_time, total_query_time, total_wait_time, total_client_parse_count, "
             "total_server_parse_count, total_bind_count, total_client_login_count, avg_server_assignment_count, "
             "avg_xact_count, avg_query_count, avg_recv, avg_sent, avg_xact_time, avg_query_time, avg_wait_time, "
             "avg_client_parse_count, avg_server_parse_count, avg_bind_count, avg_client_login_count",
    "STATS_TOTALS": "database, server_assignment_count, xact_count, query_count, bytes_received, bytes_sent, "
                    "xact_time, query_time, wait_time, client_parse_count, server_parse_count, bind_count, "
                    "client_login_count",
    "STATS_AVERAGES": "database, server_assignment_count, xact_count, query_count, bytes_received, bytes_sent, "
                      "xact_time, query_time, wait_time, avg_client_parse_count, avg_server_parse_count, "
                      "avg_bind_count, avg_client_login_count",
    "POOLS": "database, user, cl_active, cl_waiting, cl_active_cancel_req, cl_waiting_cancel_req, sv_active, "
             "sv_active_cancel, sv_being_canceled, sv_idle, sv_used, sv_tested, sv_login, maxwait, maxwait_us, "
             "pool_mode, load_balance_hosts, prepared_hits, prepared_misses",
    "SERVERS": "type, user, database, replication, state, addr, port, local_addr, local_port, connect_time, "
               "request_time, wait, wait_us, close_needed, ptr, link, remote_pid, tls, application_name, "
               "prepared_statements, id, worker, shard, role, prepared_hits, prepared_misses, upgrade",
    "CLIENTS": "type, user, database, replication, state, addr, port, local_addr, local_port, connect_time, "
               "request_time, wait, wait_us, close_needed, ptr, link, remote_pid, tls, application_name, "
               "prepared_statements, id, worker, shard, role, prepared_hits, prepared_misses, upgrade",
    "SOCKETS": "type, user, database, replication, state, addr, port, local_addr, local_port, connect_time, "
               "request_time, wait, wait_us, close_needed, ptr, link, remote_pid, tls, application_name, "
               "prepared_statements, id, worker, shard, role, prepared_hits, prepared_misses, upgrade, recv_pos, "
               "pkt_pos, pkt_remain, send_pos, send_remain, pkt_avail, send_avail",
    "ACTIVE_SOCKETS": "type, user, database, replication, state, addr, port, local_addr, local_port, connect_time, "
               "request_time, wait, wait_us, close_needed, ptr, link, remote_pid, tls, application_name, "
               "prepared_statements, id, worker, shard, role, prepared_hits, prepared_misses, upgrade, recv_pos, "
               "pkt_pos, pkt_remain, send_pos, send_remain, pkt_avail, send_avail",
    "DATABASES": "name, host, port, database, force_user, pool_size, min_pool_size, reserve_pool_size, "
                 "server_lifetime, pool_mode, load_balance_hosts, max_connections, current_connections, "
                 "max_client_connections, current_client_connections, paused, disabled, shard, role, banned",
    "USERS": "name, pool_size, reserve_pool_size, pool_mode, max_user_connections, current_connections, "
             "max_user_client_connections, current_client_connections",
    "CONFIG": "key, value, default, changeable",
    "LISTS": "list, items",
    "VERSION": "version",
    "MEM": "name, size, used, free, memtotal",
    "DNS_HOSTS": "hostname, ttl, addrs",
    "SHARDS": "pool, shard, host, port, role, banned, ban_reason, ban_remaining_s, cl_active, sv_active, "
              "sv_idle, xact_count",
    "BANS": "pool, shard, host, port, role, reason, banned_at, remaining_s, source",
}


def admin(inst):
    r = inst.raw()
    r.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat")
    return r


def show(r, what):
    """(columns, rows) of SHOW <what> on a raw admin connection."""
    r.send(pgwire.query("SHOW " + what))
    cols, rows, err = [], [], None
    for typ, payload in r.read_until((b"Z",)):
        if typ == b"T":
            (n,) = struct.unpack("!H", payload[:2])
            off = 2
            for _ in range(n):
                end = payload.index(b"\x00", off)
                cols.append(payload[off:end].decode())
                off = end + 1 + 18
        elif typ == b"D":
            rows.append(pgwire.data_row_values(payload))
        elif typ == b"E":
            err = pgwire.parse_fields(payload)
    assert err is None, err
    return cols, [dict(zip(cols, row)) for row in rows]


def command(r, sql):
    rows, err, status = r.simple(sql)
    assert status == "I"
    return err


def traffic(inst, n=20):
    with inst.connect() as c:
        for i in range(n):
            assert c.execute("SELECT %s::int", (i,)).fetchone()[0] == i


def test_admin_login_only_for_admin_user(pgcat):
    inst = pgcat()
    r = inst.psql("SHOW VERSION", user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD)
    assert r.stdout.strip().startswith("pgcat ")
    # database "pgbouncer" is an alias, for PgBouncer's tools
    r = inst.psql("SHOW VERSION", user=ADMIN_USER, dbname="pgbouncer", password=ADMIN_PASSWORD)
    assert r.stdout.strip().startswith("pgcat ")
    raw = inst.raw()
    raw.send(pgwire.startup_packet({"user": "app", "database": "pgcat"}))
    err, closed = raw.read_error_then_eof()
    assert err["C"] == "28000" and closed
    r = inst.psql("SHOW VERSION", user=ADMIN_USER, dbname="pgcat", password="wrong", check=False)
    assert r.returncode != 0 and "password authentication failed" in r.stderr


@pytest.mark.parametrize("what", sorted(PGBOUNCER_COLUMNS))
def test_show_columns_follow_pgbouncer(pgcat, what):
    inst = pgcat()
    traffic(inst, 3)
    r = admin(inst)
    cols, _ = show(r, what)
    expected = [c.strip() for c in PGBOUNCER_COLUMNS[what].split(",")]
    assert cols[:len(expected)] == expected


def test_show_pgcat_own_commands(pgcat):
    inst = pgcat()
    r = admin(inst)
    cols, rows = show(r, "WORKERS")
    assert cols[:2] == ["worker", "pid"] and len(rows) >= 1
    assert int(rows[0]["pid"]) > 0
    cols, rows = show(r, "PREPARED_STATEMENTS")
    assert "name" in cols


def test_stats_count_real_traffic(pgcat):
    inst = pgcat()
    r = admin(inst)
    _, before = show(r, "STATS_TOTALS")
    base = {row["database"]: row for row in before}["appdb"]
    traffic(inst, 25)
    _, after = show(r, "STATS_TOTALS")
    row = {row["database"]: row for row in after}["appdb"]
    assert int(row["xact_count"]) - int(base["xact_count"]) >= 25
    assert int(row["query_count"]) - int(base["query_count"]) >= 25
    assert int(row["bytes_received"]) > int(base["bytes_received"])
    assert int(row["bytes_sent"]) > int(base["bytes_sent"])
    assert int(row["query_time"]) > int(base["query_time"])
    assert int(row["client_login_count"]) - int(base["client_login_count"]) == 1
    # psycopg uses the extended protocol: parses and binds are counted
    assert int(row["bind_count"]) - int(base["bind_count"]) >= 25


def test_show_pools_and_servers_states(pgcat, pg):
    inst = pgcat(general={"default_pool_size": 2})
    r = admin(inst)
    c1 = inst.connect(autocommit=False)
    c1.execute("SELECT 1")          # inside a transaction: the server stays linked
    _, pools = show(r, "POOLS")
    p = {(x["database"], x["user"]): x for x in pools}[("appdb", "app")]
    assert p["sv_active"] == "1" and p["cl_active"] == "1" and p["pool_mode"] == "transaction"
    _, servers = show(r, "SERVERS")
    active = [s for s in servers if s["state"] == "active" and s["user"] == "app"]
    assert len(active) == 1
    assert int(active[0]["remote_pid"]) in [b[0] for b in pg.backends(user="app", db="appdb")]
    _, clients = show(r, "CLIENTS")
    assert any(c["user"] == "app" and c["state"] == "active" and c["link"] == active[0]["ptr"] for c in clients)
    c1.rollback()
    c1.close()
    wait_until(lambda: {(x["database"], x["user"]): x for x in show(r, "POOLS")[1]}[("appdb", "app")]["sv_idle"] == "1")


def test_extended_protocol_refused_session_continues(pgcat):
    inst = pgcat()
    r = admin(inst)
    r.send(pgwire.parse("SHOW POOLS") + pgwire.bind() + pgwire.execute() + pgwire.sync())
    rows, err, status = r.collect()
    assert err["C"] == "0A000" and status == "I"
    cols, _ = show(r, "VERSION")
    assert cols == ["version"]


def test_unknown_command_is_an_error_not_a_disconnect(pgcat):
    inst = pgcat()
    r = admin(inst)
    err = command(r, "SHOW NOTHING_LIKE_THIS")
    assert err is not None
    err = command(r, "FROBNICATE")
    assert err is not None
    assert show(r, "VERSION")[1][0]["version"].startswith("pgcat")


def test_command_words_split_at_whitespace_only(pgcat):
    """The console splits a command at whitespace (\\v and \\f too) and
    reads neither comments nor quotes: they stay part of a word."""
    inst = pgcat()
    r = admin(inst)
    for sql in ("show\tversion", "\vSHOW\fVERSION\n;", "SHOW  VERSION ;;"):
        rows, err, status = r.simple(sql)
        assert err is None and status == "I" and rows[0][0].startswith("pgcat"), sql
    for sql in ("SHOW VERSION -- c", "SHOW /* c */ VERSION", "-- c\nSHOW VERSION"):
        err = command(r, sql)
        assert err is not None and err["C"] == "42601", sql
    err = command(r, "SHOW 'VERSION'")
    assert err is not None and err["C"] == "42704" and "'VERSION'" in err["M"]
    # SET's value is the rest of the text, unquoted by the configuration
    assert command(r, "SET default_pool_size = '5' ") is None
    assert {x["key"]: x for x in show(r, "CONFIG")[1]}["default_pool_size"]["value"] == "5"
    assert command(r, "SET\vdefault_pool_size\t=\f4") is None
    assert {x["key"]: x for x in show(r, "CONFIG")[1]}["default_pool_size"]["value"] == "4"


def test_pause_resume(pgcat):
    inst = pgcat()
    r = admin(inst)
    traffic(inst, 1)
    assert command(r, "PAUSE appdb") is None
    _, pools = show(r, "POOLS")
    assert {(x["database"], x["user"]): x for x in pools}[("appdb", "app")]["paused"] == "1"
    c = inst.connect()
    done = []

    import threading

    def run():
        done.append(c.execute("SELECT 42").fetchone()[0])

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    assert not done, "a query ran while the pool was paused"
    wait_until(lambda: {(x["database"], x["user"]): x for x in show(r, "POOLS")[1]}[("appdb", "app")]["cl_waiting"] == "1")
    assert command(r, "RESUME appdb") is None
    t.join(10)
    assert done == [42]
    c.close()


def test_disable_enable_kill_reconnect(pgcat, pg):
    inst = pgcat()
    r = admin(inst)
    assert command(r, "DISABLE appdb") is None
    with pytest.raises(psycopg.OperationalError):
        inst.connect()
    assert command(r, "ENABLE appdb") is None
    c = inst.connect()
    assert c.execute("SELECT 1").fetchone()[0] == 1
    before = {b[0] for b in pg.backends(user="app", db="appdb")}
    assert command(r, "RECONNECT appdb") is None
    wait_until(lambda: not (before & {b[0] for b in pg.backends(user="app", db="appdb")}))
    assert c.execute("SELECT 2").fetchone()[0] == 2
    assert command(r, "KILL appdb") is None
    with pytest.raises(psycopg.OperationalError):
        c.execute("SELECT 3")
    assert command(r, "RESUME appdb") is None
    with inst.connect() as c2:
        assert c2.execute("SELECT 4").fetchone()[0] == 4
    assert command(r, "PAUSE nosuchdb") is not None


def test_ban_unban(pgcat, pg):
    inst = pgcat()
    r = admin(inst)
    assert command(r, "BAN 127.0.0.1:%d 30" % pg.port) is None
    _, bans = show(r, "BANS")
    assert len(bans) == 1 and bans[0]["source"] == "admin" and 25 <= int(bans[0]["remaining_s"]) <= 30
    assert bans[0]["banned_at"].endswith("Z")
    _, shards = show(r, "SHARDS")
    assert shards[0]["banned"] == "1"
    assert command(r, "UNBAN 127.0.0.1:%d" % pg.port) is None
    assert show(r, "BANS")[1] == []
    assert command(r, "BAN nonsense") is not None


def test_set_changeable_settings(pgcat):
    inst = pgcat()
    r = admin(inst)
    assert command(r, "SET default_pool_size = 3") is None
    cfg = {x["key"]: x for x in show(r, "CONFIG")[1]}
    assert cfg["default_pool_size"]["value"] == "3"
    assert cfg["listen_port"]["changeable"] == "no"
    err = command(r, "SET listen_port = 1234")
    assert err is not None and err["C"] == "22023"
    err = command(r, "SET default_pool_size = -5")
    assert err is not None
    assert {x["key"]: x for x in show(r, "CONFIG")[1]}["default_pool_size"]["value"] == "3"
    # PgBouncer's spellings: key=value in one word, and TO
    assert command(r, "SET default_pool_size=4") is None
    assert {x["key"]: x for x in show(r, "CONFIG")[1]}["default_pool_size"]["value"] == "4"
    assert command(r, "SET default_pool_size TO 3") is None
    err = command(r, "SET default_pool_size")
    assert err is not None and err["C"] == "42601", err
    # the new size holds for pools: 5 concurrent transactions use at most 3 servers
    conns = [inst.connect(autocommit=False) for _ in range(3)]
    for c in conns:
        c.execute("SELECT 1")
    _, pools = show(r, "POOLS")
    assert {(x["database"], x["user"]): x for x in pools}[("appdb", "app")]["sv_active"] == "3"
    for c in conns:
        c.rollback()
        c.close()


def _rewrite(inst, **general):
    inst.general.update(general)
    inst.write()


def test_reload_applies_new_pool_and_sizes(pgcat, pg):
    inst = pgcat()
    r = admin(inst)
    c = inst.connect()
    assert c.execute("SELECT 1").fetchone()[0] == 1
    inst.pools["postgres"] = {
        "shards": {0: {"database": "postgres", "servers": "127.0.0.1:%d:primary" % pg.port}},
        "users": {"app": {"password": PASSWORDS["app"], "pool_size": 2}},
    }
    _rewrite(inst, default_pool_size=4)
    assert command(r, "RELOAD") is None
    dbs = show(r, "DATABASES")[1]
    assert {x["name"]: x for x in dbs}["appdb"]["pool_size"] == "4"
    assert {x["name"]: x for x in dbs}["postgres"]["pool_size"] == "2"
    with inst.connect(dbname="postgres") as c2:
        assert c2.execute("SELECT current_database()").fetchone()[0] == "postgres"
    # the client connected before the reload was not dropped
    assert c.execute("SELECT 2").fetchone()[0] == 2
    # removing the pool: new logins refused, the old client drains
    del inst.pools["postgres"]
    inst.write()
    inst.send_signal(signal.SIGHUP)
    wait_until(lambda: "postgres" not in {x["name"] for x in show(r, "DATABASES")[1]})
    with pytest.raises(psycopg.OperationalError):
        inst.connect(dbname="postgres")
    c.close()


def test_invalid_reload_keeps_old_config(pgcat):
    inst = pgcat()
    r = admin(inst)
    good = inst.ini.read_text()
    inst.ini.write_text(good + "\n[general]\nlisten_port = not_a_port\n")
    err = command(r, "RELOAD")
    assert err is not None and "reload failed" in err["M"] and ":" in err["M"]
    assert "old configuration" in inst.log() or "rejected" in inst.log()
    inst.ini.write_text(good)
    traffic(inst, 2)


def test_autoreload(pgcat):
    inst = pgcat(general={"autoreload": 100})
    r = admin(inst)
    time.sleep(1.1)   # a different mtime second
    _rewrite(inst, default_pool_size=7)
    os.utime(inst.ini, None)
    wait_until(lambda: {x["key"]: x for x in show(r, "CONFIG")[1]}["default_pool_size"]["value"] == "7", 10)


def test_max_client_conn_admin_exempt(pgcat):
    inst = pgcat(general={"max_client_conn": 2})
    a = inst.connect()
    b = inst.connect()
    with pytest.raises(psycopg.OperationalError) as e:
        inst.connect()
    assert "too many clients" in str(e.value)
    r = admin(inst)
    assert show(r, "VERSION")[1]
    a.close()
    b.close()


def test_prometheus_metrics(pgcat):
    port = free_port()
    inst = pgcat(general={"prometheus_port": port})
    traffic(inst, 10)
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    lines = body.splitlines()
    assert any(l.startswith('pgcat_pools_sv_idle{pool="appdb",user="app"}') for l in lines)
    xacts = [l for l in lines if l.startswith('pgcat_stats_xacts_total{pool="appdb",user="app"}')]
    assert xacts and int(xacts[0].split()[-1]) >= 10
    assert any(l.startswith('pgcat_query_duration_seconds_bucket{pool="appdb",user="app",le="+Inf"}')
               for l in lines)
    assert any(l.startswith("pgcat_workers ") for l in lines)
    assert "# TYPE pgcat_query_duration_seconds histogram" in body
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen("http://127.0.0.1:%d/nothing" % port, timeout=5)
    assert e.value.code == 404


def test_shutdown_command_exits_zero(pgcat):
    inst = pgcat()
    r = admin(inst)
    r.send(pgwire.query("SHUTDOWN"))
    wait_until(lambda: not inst.alive(), 15)
    assert inst.proc.returncode == 0
    inst.stopped_by_test = True


def test_stats_count_exactly_the_transactions(pgcat):
    inst = pgcat()
    r = admin(inst)
    c = inst.connect()
    c.execute("SELECT 1")    # the connection's first use, before the baseline
    before = {x["database"]: x for x in show(r, "STATS_TOTALS")[1]}["appdb"]
    for i in range(100):
        c.execute("SELECT %s::int", (i,))
    after = {x["database"]: x for x in show(r, "STATS_TOTALS")[1]}["appdb"]
    assert int(after["xact_count"]) - int(before["xact_count"]) == 100
    assert int(after["query_count"]) - int(before["query_count"]) == 100
    c.close()


def test_show_through_psycopg_client_cursor(pgcat):
    """psycopg's ClientCursor speaks the simple protocol the console wants."""
    inst = pgcat()
    traffic(inst, 5)
    with psycopg.connect(**inst.conninfo(user=ADMIN_USER, dbname="pgbouncer", password=ADMIN_PASSWORD),
                         autocommit=True, cursor_factory=psycopg.ClientCursor) as a:
        cur = a.execute("SHOW POOLS")
        cols = [d.name for d in cur.description]
        assert cols[:4] == ["database", "user", "cl_active", "cl_waiting"]
        rows = cur.fetchall()
        assert ("appdb", "app") in [(x[0], x[1]) for x in rows]
        cur = a.execute("SHOW STATS")
        row = [x for x in cur.fetchall() if x[0] == "appdb"][0]
        assert int(row[2]) >= 5     # total_xact_count


def test_metrics_parse_with_prometheus_client(pgcat):
    from prometheus_client.parser import text_string_to_metric_families
    port = free_port()
    inst = pgcat(general={"prometheus_port": port})
    traffic(inst, 12)
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    # counters are exposed without the _total suffix in the family name
    xacts = [s for s in families["pgcat_stats_xacts"].samples
             if s.labels.get("pool") == "appdb" and s.labels.get("user") == "app"]
    assert xacts and xacts[0].value >= 12
    hist = families["pgcat_query_duration_seconds"]
    assert hist.type == "histogram"
    count = [s for s in hist.samples if s.name.endswith("_count") and s.labels.get("user") == "app"][0]
    assert count.value >= 12


def test_pgbouncer_exporter_scrapes_pgcat(pgcat):
    """Debian's prometheus-pgbouncer-exporter, written for PgBouncer, reads
    pgcat's console without errors and reports the pools."""
    exe = "/usr/bin/prometheus-pgbouncer-exporter"
    assert os.path.exists(exe), "scripts/test.sh installs prometheus-pgbouncer-exporter"
    inst = pgcat()
    traffic(inst, 7)
    port = free_port()
    env = dict(os.environ, PGPASSWORD=ADMIN_PASSWORD)
    import subprocess
    proc = subprocess.Popen([exe, "--port", str(port), "--host", "127.0.0.1", "--pgbouncer-port", str(inst.port),
                             "--pgbouncer-user", ADMIN_USER, "--pgbouncer-host", inst.host],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def scrape():
            return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
        body = wait_until(scrape, 20)
        assert 'pgbouncer_active_clients{database="appdb",user="app"}' in body
        req = [l for l in body.splitlines() if l.startswith('pgbouncer_requests_total{database="appdb"}')]
        assert req and float(req[0].split()[-1]) >= 7
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode(errors="replace")
    assert "Traceback" not in out and "Error" not in out, out


def test_reload_under_load_no_failed_transactions(pgcat, pg, tmp_path):
    import subprocess
    from conftest import PG_BIN
    inst = pgcat(general={"default_pool_size": 5})
    script = tmp_path / "select.sql"
    script.write_text("SELECT 1;\n")
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    bench = subprocess.Popen([str(PG_BIN / "pgbench"), "-h", inst.host, "-p", str(inst.port), "-U", "app", "-n",
                              "-c", "8", "-j", "2", "-T", "6", "-f", str(script), "appdb"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r = admin(inst)
    for size in (3, 7, 4):
        time.sleep(1.2)
        inst.general["default_pool_size"] = size
        inst.write()
        assert command(r, "RELOAD") is None
    out = bench.communicate(timeout=60)[0]
    assert bench.returncode == 0, out
    assert "number of failed transactions: 0" in out, out


def test_show_totals_state_help_peers(pgcat, pg):
    """PgBouncer's SHOW TOTALS (SHOW STATS summed, one row per figure),
    STATE, HELP (a notice), PEERS, PEER_POOLS and DNS_ZONES."""
    inst = pgcat()
    traffic(inst, 7)
    r = admin(inst)

    def totals():
        cols, rows = show(r, "TOTALS")
        assert cols == ["name", "value"], cols
        return {row["name"]: int(row["value"]) for row in rows}
    wait_until(lambda: totals().get("total_query_count", 0) >= 7, 10, msg="SHOW TOTALS counting the queries")
    t = totals()
    assert t["total_xact_count"] >= 7 and t["total_client_login_count"] >= 1, t
    assert "avg_query_count" in t and "database" not in t and "total_requests" not in t, t
    cols, rows = show(r, "STATE")
    assert cols == ["key", "value"]
    assert {row["key"]: row["value"] for row in rows} == {"active": "yes", "paused": "no", "suspended": "no"}
    assert command(r, "PAUSE") is None
    _, rows = show(r, "STATE")
    assert {row["key"]: row["value"] for row in rows}["paused"] == "yes"
    assert command(r, "RESUME") is None
    r.send(pgwire.query("SHOW HELP"))
    msgs = r.read_until((b"Z",))
    notices = [pgwire.parse_fields(m[1]) for m in msgs if m[0] == b"N"]
    assert notices and "SHOW" in notices[0]["M"] and "RELOAD" in notices[0]["M"], msgs
    assert not any(m[0] == b"E" for m in msgs), msgs
    cols, rows = show(r, "PEERS")
    assert cols == ["peer_id", "host", "port", "pool_size"] and rows == []
    cols, rows = show(r, "PEER_POOLS")
    assert cols[0] == "peer_id" and rows == []
    cols, rows = show(r, "DNS_ZONES")
    assert cols == ["zonename", "serial", "count"] and rows == []
    r.close()


def test_show_sockets_lists_connections_with_their_buffers(pgcat):
    """SHOW SOCKETS: every client then every server of the worker, with
    PgBouncer's buffer columns; SHOW ACTIVE_SOCKETS: those linked to the
    other side (a session-mode client in a transaction and its server)."""
    p = pgcat(general={"pool_mode": "session"})
    c = p.connect(autocommit=False)
    c.execute("SELECT 1")                  # a transaction open: client and server linked
    r = admin(p)
    _, rows = show(r, "SOCKETS")
    kinds = sorted((x["type"], x["user"], x["database"]) for x in rows)
    assert kinds == [("C", "app", "appdb"), ("C", "pgcat", "pgcat"), ("S", "app", "appdb")], rows
    client = [x for x in rows if x["type"] == "C" and x["user"] == "app"][0]
    server = [x for x in rows if x["type"] == "S"][0]
    assert client["link"] == server["ptr"] and server["link"] == client["ptr"], rows
    assert all(int(x["send_avail"]) >= 0 and int(x["pkt_pos"]) == 0 for x in rows), rows
    _, active = show(r, "ACTIVE_SOCKETS")
    assert sorted(x["ptr"] for x in active) == sorted([client["ptr"], server["ptr"]]), active
    c.rollback()
    c.close()
    r.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_log_level_set_at_run_time(pgcat, workers):
    """SET log_level on the console (issue 44: as PgBouncer's verbose)
    changes what every worker logs from now on, without a reload; SHOW
    CONFIG says the level in force. A level that does not exist is
    refused."""
    import re
    import time
    inst = pgcat(general={"workers": workers, "log_level": "info"})
    r = admin(inst)
    def debug_lines():
        return len(re.findall(r"\] DEBUG ", inst.log()))
    traffic(inst, 3)
    assert debug_lines() == 0
    assert command(r, "SET log_level = debug") is None
    _, rows = show(r, "CONFIG")
    assert {x["key"]: x["value"] for x in rows}["log_level"] == "debug"
    time.sleep(0.5)                             # (the other worker applies it at its next tick)
    for _ in range(16):                         # (clients spread over the workers by the kernel)
        traffic(inst, 1)
    pids = set(re.findall(r"\[(\d+)\] DEBUG ", inst.log()))
    assert len(pids) == workers, pids           # every worker logs at the new level
    assert command(r, "SET log_level = info") is None
    time.sleep(0.5)
    before = debug_lines()
    traffic(inst, 3)
    assert debug_lines() == before
    err = command(r, "SET log_level = chatty")
    assert err is not None and err["C"] == "22023", err
    # the file's level comes back with a RELOAD
    assert command(r, "SET log_level = debug") is None
    assert command(r, "RELOAD") is None
    _, rows = show(r, "CONFIG")
    assert {x["key"]: x["value"] for x in rows}["log_level"] == "info"
    r.close()
