# SPDX-License-Identifier: MIT
"""Command line (SPEC §1): -V, -h, -t on good and bad files (exit 0/1, each
problem named by file, line and key), bad arguments (exit 2), a bad config
at startup (exit 1, one clear line), -d with a pidfile, the default
./pgcat.ini."""
import os
import re
import signal
import subprocess

import pytest

from conftest import (DEFAULT_ASAN, DEFAULT_UBSAN, REPO, check_sanitizer_log, free_port, pgcat_binary, pgcat_env,
                      pgcat_process, port_open, render_ini, default_general, default_pools, wait_until)


def run(args, cwd=None, timeout=30, env=None):
    """pgcat run to its end; its output must have no sanitizer report, as
    the `pgcat` fixture checks for the instances it starts."""
    r = subprocess.run([pgcat_binary()] + list(args), capture_output=True, text=True,
                       timeout=timeout, cwd=cwd, env=pgcat_env(env), stdin=subprocess.DEVNULL)
    check_sanitizer_log(text=r.stdout + r.stderr)
    return r


def good_ini(pg, tmp_path, **general):
    g = default_general(free_port(), tmp_path)
    g.update(general)
    return render_ini(g, default_pools(pg))


def write(tmp_path, text, name="pgcat.ini"):
    path = tmp_path / name
    path.write_text(text)
    return path


def line_of(text, needle):
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith(needle):
            return i
    raise AssertionError("%r not in config" % needle)


def test_version():
    r = run(["-V"])
    assert r.returncode == 0, r.stderr
    assert re.match(r"pgcat \d+\.\d+\.\d+", r.stdout), r.stdout
    r2 = run(["--version"])
    assert r2.returncode == 0 and r2.stdout.splitlines()[0] == r.stdout.splitlines()[0]


def test_help():
    r = run(["-h"])
    assert r.returncode == 0
    out = r.stdout + r.stderr
    for opt in ("--test-config", "--daemon", "--workers", "--version"):
        assert opt in out, "usage does not mention %s" % opt


@pytest.mark.parametrize("args", [["--no-such-option"], ["-Z"], ["-w"], ["-w", "abc"],
                                  ["a.ini", "b.ini"]])
def test_bad_arguments_exit_2(args):
    r = run(args)
    assert r.returncode == 2, "exit %d for %r (stderr: %s)" % (r.returncode, args, r.stderr)
    assert r.stderr.strip(), "no message on stderr"


def test_t_on_a_good_file(pg, tmp_path):
    path = write(tmp_path, good_ini(pg, tmp_path))
    r = run(["-t", str(path)])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(["--test-config", str(path)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_t_on_the_full_spec_example(tmp_path):
    """Every key and section of SPEC §2's example parses."""
    text = """
[general]
listen_addr = 0.0.0.0
listen_port = 6432
unix_socket_dir = /tmp
workers = 1
max_client_conn = 10000
pool_mode = transaction
default_pool_size = 10
min_pool_size = 0
connect_timeout = 5000
query_wait_timeout = 120000
idle_timeout = 600000
server_lifetime = 3600000
idle_transaction_timeout = 0
client_idle_timeout = 0
max_db_connections = 0
max_user_connections = 0
reserve_pool_size = 0
reserve_pool_timeout = 5000
transaction_timeout = 0
query_timeout = 0
healthcheck_timeout = 1000
healthcheck_delay = 30000
replica_lag_check_interval = 1000
ban_time = 60
shutdown_timeout = 60000
server_reset_query = DISCARD ALL
server_round_robin = false
tcp_keepalive = true
max_packet_size = 2147483647
query_parser_max_length = 65536
autoreload = 0
admin_username = pgcat
admin_password = secret
auth_type = scram-sha-256
auth_file =
auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename = $1
auth_user =
auth_query_cache_ttl = 60000
log_level = info
log_file =
syslog = false
log_connections = true
log_disconnections = true
pidfile =
prepared_statements = true
prepare_unnamed = true
prepared_statements_cache_size = 500
query_cache_size = 10000
prometheus_port = 0
peer_id = 0
stats_period = 60
dns_max_ttl = 15000
client_tls_sslmode = disable
client_tls_cert_file =
client_tls_key_file =
client_tls_ca_file =
server_tls_sslmode = prefer
server_tls_ca_file =
server_tls_negotiation = postgres

[pools.sharded_db]
pool_mode = transaction
default_role = any
query_parser_enabled = true
primary_reads_enabled = true
load_balancing_mode = random
sharding_function = pg_bigint_hash
sharded_tables = users.id, orders.user_id
default_shard = 0
max_replica_lag = 0
sticky_primary_after_write = 0
read_your_writes = off
max_db_connections =

[pools.sharded_db.shards.0]
database = shard0
servers = 127.0.0.1:5432:primary, 127.0.0.1:5433:replica

[pools.sharded_db.shards.1]
database = shard1
servers = 127.0.0.1:5434:primary, [::1]:5435:replica

[pools.sharded_db.users.app]
password = secret
server_username =
server_password =
pool_size = 10
min_pool_size = 0
statement_timeout = 0
pool_mode =
transaction_timeout =
reserve_pool_size =
max_user_connections =

[peers]
1 = pgcat-a.internal:6432
2 = pgcat-b.internal:6432
"""
    path = write(tmp_path, text)
    r = run(["-t", str(path)])
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", ["pgcat.ini", "etc/pgcat.ini"])
def test_t_on_the_shipped_configs(name):
    path = REPO / name
    if not path.exists():
        pytest.fail("%s is missing" % name)
    r = run(["-t", str(path)])
    assert r.returncode == 0, "shipped %s does not validate:\n%s" % (name, r.stdout + r.stderr)


BAD = [
    # (replace "key = ..." line in [general] or append, section, key)
    ("listen_port", "listen_port = not_a_number", "general"),
    ("listen_port", "listen_port = 70000", "general"),
    ("pool_mode", "pool_mode = statement_mode_typo", "general"),
    ("default_pool_size", "default_pool_size = -3", "general"),
    ("auth_type", "auth_type = kerberos", "general"),
    ("log_level", "log_level = chatty", "general"),
    ("tcp_keepalive", "tcp_keepalive = perhaps", "general"),
    ("connect_timeout", "connect_timeout = 5 parsecs", "general"),
    ("query_wait_timeout", "query_wait_timeout = 400ms0", "general"),
    ("server_tls_negotiation", "server_tls_negotiation = sideways", "general"),
    # direct TLS has no way back to plain text: not with the default prefer
    ("server_tls_negotiation", "server_tls_negotiation = direct", "general"),
]


@pytest.mark.parametrize("key,line,section", BAD, ids=[b[1] for b in BAD])
def test_t_on_a_bad_value(pg, tmp_path, key, line, section):
    text = good_ini(pg, tmp_path, **{key: "__X__"}).replace("%s = __X__" % key, line)
    path = write(tmp_path, text)
    lineno = line_of(text, line)
    r = run(["-t", str(path)])
    out = r.stdout + r.stderr
    assert r.returncode == 1, "exit %d for %r:\n%s" % (r.returncode, line, out)
    pat = r"%s:%d: \[%s\] %s" % (re.escape(str(path)), lineno, re.escape(section), re.escape(key))
    assert re.search(pat, out), "expected a line like '%s:%d: [%s] %s: ...', got:\n%s" % (
        path, lineno, section, key, out)


def test_t_server_tls_negotiation_direct_needs_require(pg, tmp_path):
    """As libpq refuses sslnegotiation=direct below sslmode=require, -t
    refuses server_tls_negotiation = direct below server_tls_sslmode
    require, and says so naming both keys."""
    for mode in ("disable", "prefer"):
        path = write(tmp_path, good_ini(pg, tmp_path, server_tls_negotiation="direct", server_tls_sslmode=mode))
        r = run(["-t", str(path)])
        out = r.stdout + r.stderr
        assert r.returncode == 1, out
        assert re.search(r"\[general\] server_tls_negotiation: .*server_tls_sslmode require", out), out
    for mode in ("require", "verify-ca", "verify-full"):
        extra = {"server_tls_ca_file": "/etc/ssl/certs/ca-certificates.crt"} if mode != "require" else {}
        path = write(tmp_path, good_ini(pg, tmp_path, server_tls_negotiation="direct", server_tls_sslmode=mode,
                                        **extra))
        r = run(["-t", str(path)])
        assert r.returncode == 0, r.stdout + r.stderr


def test_t_on_bad_pool_sections(pg, tmp_path):
    text = good_ini(pg, tmp_path) + (
        "\n[pools.broken]\n"
        "\n[pools.broken.shards.0]\n"
        "database = appdb\n"
        "servers = 127.0.0.1:5432:leader\n")
    path = write(tmp_path, text)
    r = run(["-t", str(path)])
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    lineno = line_of(text, "servers = 127.0.0.1:5432:leader")
    assert re.search(r"%s:%d: \[pools\.broken\.shards\.0\] servers" % (re.escape(str(path)), lineno), out), out


def test_t_unknown_key_is_an_error(pg, tmp_path):
    text = good_ini(pg, tmp_path, no_such_setting="1")
    path = write(tmp_path, text)
    r = run(["-t", str(path)])
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    lineno = line_of(text, "no_such_setting")
    assert re.search(r"%s:%d: \[general\] no_such_setting" % (re.escape(str(path)), lineno), out), out


def test_t_reports_every_problem(pg, tmp_path):
    text = good_ini(pg, tmp_path, listen_port="__P__", pool_mode="__M__")
    text = text.replace("listen_port = __P__", "listen_port = x").replace("pool_mode = __M__", "pool_mode = y")
    path = write(tmp_path, text)
    r = run(["-t", str(path)])
    out = r.stdout + r.stderr
    assert r.returncode == 1
    assert "listen_port" in out and "pool_mode" in out, "only some problems reported:\n" + out


def test_t_missing_file(tmp_path):
    r = run(["-t", str(tmp_path / "nope.ini")])
    assert r.returncode == 1
    assert "nope.ini" in r.stdout + r.stderr


def test_startup_with_a_bad_config_exits_1(pg, tmp_path):
    text = good_ini(pg, tmp_path, pool_mode="__M__").replace("pool_mode = __M__", "pool_mode = wrong")
    path = write(tmp_path, text)
    r = run([str(path)], timeout=20)
    assert r.returncode == 1
    lineno = line_of(text, "pool_mode = wrong")
    assert re.search(r"%s:%d: \[general\] pool_mode" % (re.escape(str(path)), lineno), r.stderr), r.stderr


def test_startup_with_unknown_key_warns_and_runs(pg, tmp_path):
    port = free_port()
    text = good_ini(pg, tmp_path, listen_port=port, some_future_key="1")
    path = write(tmp_path, text)
    with pgcat_process([path], tmp_path / "log") as proc:
        wait_until(lambda: port_open("127.0.0.1", port) or proc.poll() is not None, 30)
        assert proc.poll() is None, "pgcat refused to start:\n" + (tmp_path / "log").read_text()
        lineno = line_of(text, "some_future_key")
        out = (tmp_path / "log").read_text()
        assert re.search(r":%d:.*some_future_key" % lineno, out), "no warning naming the line:\n" + out


def test_port_in_use_exits_1(pg, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        path = write(tmp_path, good_ini(pg, tmp_path, listen_port=port))
        r = run([str(path)], timeout=20)
        assert r.returncode == 1, "exit %d: %s" % (r.returncode, r.stderr)
        assert str(port) in r.stderr
    finally:
        s.close()


def test_default_config_is_dot_pgcat_ini(pg, tmp_path):
    write(tmp_path, good_ini(pg, tmp_path))
    r = run(["-t"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "pgcat.ini").write_text("[general]\nlisten_port = nope\n")
    r = run(["-t"], cwd=tmp_path)
    assert r.returncode == 1
    assert "pgcat.ini:2:" in r.stdout + r.stderr


def test_daemon_with_pidfile(pg, tmp_path):
    port = free_port()
    pidfile = tmp_path / "pgcat.pid"
    logfile = tmp_path / "pgcat.log"
    path = write(tmp_path, good_ini(pg, tmp_path, listen_port=port, pidfile=str(pidfile),
                                    log_file=str(logfile)))
    # A daemon's stderr goes nowhere: sanitizer reports go to files instead.
    asan = os.environ.get("ASAN_OPTIONS", DEFAULT_ASAN) + ":log_path=%s" % (tmp_path / "asan")
    ubsan = os.environ.get("UBSAN_OPTIONS", DEFAULT_UBSAN) + ":log_path=%s" % (tmp_path / "ubsan")
    r = run(["-d", str(path)], timeout=20, env={"ASAN_OPTIONS": asan, "UBSAN_OPTIONS": ubsan})
    assert r.returncode == 0, r.stderr
    pid = None
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, msg="pidfile")
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        wait_until(lambda: port_open("127.0.0.1", port), 10)
        import psycopg
        with psycopg.connect(host="127.0.0.1", port=port, user="app", password="app_pw",
                             dbname="appdb", sslmode="disable", autocommit=True) as c:
            assert c.execute("SELECT 1").fetchone()[0] == 1
    finally:
        if pid:
            os.kill(pid, signal.SIGTERM)

            def gone():
                try:
                    os.kill(pid, 0)
                    return False
                except ProcessLookupError:
                    return True
            wait_until(gone, 20, msg="daemon to exit on SIGTERM")
    assert not port_open("127.0.0.1", port)
    check_sanitizer_log(logfile, *tmp_path.glob("asan*"), *tmp_path.glob("ubsan*"))


def test_verbose_quiet_and_workers_flags(pg, tmp_path):
    path = write(tmp_path, good_ini(pg, tmp_path))
    for args in (["-v", "-t"], ["-vv", "-t"], ["-q", "-t"], ["-w", "1", "-t"], ["--workers", "1", "-t"]):
        r = run(args + [str(path)])
        assert r.returncode == 0, "%r: %s" % (args, r.stdout + r.stderr)
