# SPDX-License-Identifier: MIT
"""pgcat -R (--reboot): a new pgcat takes over the old one's listening
sockets and, as each is between requests, its clients, with their session
settings and cancel keys (SPEC §9; doc/operations.md "Online restart with
-R"). The clients never reconnect."""
import re
import socket
import subprocess
import time

import psycopg
import pytest

from conftest import as_pg_user, pgcat_binary, pgcat_process, port_open, wait_until
from test_admin import admin, show
from test_workers import run_in_thread


def start_pgbench(inst, tmp_path, db, proto, clients, seconds):
    """pgbench running a short transaction (BEGIN, two statements, COMMIT)
    through inst, in the background."""
    import os
    from conftest import PASSWORDS, PG_BIN
    script = tmp_path / "tx.sql"
    script.write_text("BEGIN;\nSELECT 1;\nSELECT pg_sleep(0.002);\nCOMMIT;\n")
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    return subprocess.Popen([str(PG_BIN / "pgbench"), "-h", inst.host, "-p", str(inst.port), "-U", "app", "-n",
                             "-M", proto, "-c", str(clients), "-j", "2", "-T", str(seconds), "-f", str(script), db],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def assert_no_failure(bench):
    out = bench.communicate(timeout=60)[0]
    assert bench.returncode == 0, out
    assert "number of failed transactions: 0" in out, out


def handover_name(port, worker=0):
    return "\0pgcat.handover.%d.%d" % (port, worker)


def app_clients(inst):
    r = admin(inst)
    _, rows = show(r, "CLIENTS")
    r.close()
    return [x for x in rows if x["user"] == "app"]


def test_reboot_moves_clients_with_their_session(pgcat, pg, tmp_path):
    a = pgcat(general={"shutdown_timeout": 15000})
    idle = a.connect()
    idle.execute("SET application_name = 'kept_over'")
    key_pid = idle.info.backend_pid
    in_tx = a.connect(autocommit=False)
    in_tx.execute("SELECT 1")                  # a transaction is open: it finishes here first
    pg_offset = pg.log_offset()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        wait_until(lambda: "took 1 listening sockets" in (tmp_path / "b.log").read_text(), 15)
        wait_until(lambda: "moving 2 clients" in a.log(), 10)
        time.sleep(0.3)
        assert a.alive(), "the old pgcat left while a transaction of its client was open"
        in_tx.commit()
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        assert b.poll() is None
        # the same connections, served by the new process
        assert idle.execute("SHOW application_name").fetchone()[0] == "kept_over"
        assert idle.info.backend_pid == key_pid
        assert in_tx.execute("SELECT 2").fetchone()[0] == 2
        in_tx.commit()
        assert "2 clients moved to the new process" in a.log()
        wait_until(lambda: "handover: 2 clients and 1 server connections taken over"
                   in (tmp_path / "b.log").read_text(), 10)
        assert len(app_clients(a)) == 2
        # the key the client got from the old process cancels on the new one
        t, box = run_in_thread(lambda: idle.execute("SELECT pg_sleep(30)"))
        wait_until(lambda: pg.count("app", "appdb", "active") >= 1, 10)
        idle.cancel()
        t.join(10)
        assert isinstance(box.get("error"), psycopg.errors.QueryCanceled), box
        assert idle.execute("SELECT 3").fetchone()[0] == 3
        # the server connection moved too: PostgreSQL saw no new login
        assert "connection authorized: user=app" not in pg.log_since(pg_offset, 10000)
        # and new clients land on it
        with a.connect() as fresh:
            assert fresh.execute("SELECT 4").fetchone()[0] == 4
        idle.close()
        in_tx.close()


def _metrics(port):
    import urllib.request
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    return {l.split()[0]: float(l.split()[1]) for l in body.splitlines() if l.startswith("pgcat_upgrade_")}


def test_show_clients_says_what_moves_and_what_drains(pgcat, tmp_path):
    """SPEC §9: the log and SHOW CLIENTS say which connections drain. On the
    old process (its console stays there) during the handover: a client in
    a transaction 'moving', the console 'draining: console'; on the new
    process the client that came over 'moved', a new one nothing. The new
    process's /metrics count what it took and what the old kept."""
    from conftest import free_port
    mport = free_port()
    a = pgcat(general={"shutdown_timeout": 15000, "prometheus_port": mport})
    assert _metrics(mport) == {"pgcat_upgrade_taking_over": 0, "pgcat_upgrade_clients_taken": 0,
                               "pgcat_upgrade_servers_taken": 0, "pgcat_upgrade_clients_left_to_drain": 0}
    mover = a.connect(autocommit=False)
    mover.execute("SET application_name = 'mover'")   # a transaction is open: it moves at its end
    old_console = admin(a)
    _, rows = show(old_console, "CLIENTS")
    assert [x["upgrade"] for x in rows] == [None] * len(rows), rows
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        wait_until(lambda: "took 1 listening sockets" in (tmp_path / "b.log").read_text(), 15)
        wait_until(lambda: re.search(r"moving \d+ clients", a.log()), 10)
        _, rows = show(old_console, "CLIENTS")
        by_app = {x["application_name"]: x for x in rows if x["user"] == "app"}
        assert by_app["mover"]["upgrade"] == "moving", rows
        console = [x for x in rows if x["database"] in ("pgcat", "pgbouncer")]
        assert console and all(x["upgrade"] == "draining: console" for x in console), rows
        _, srows = show(old_console, "SERVERS")
        assert srows and all(x["upgrade"] == "moving" for x in srows), srows
        m = _metrics(mport)   # the new process answers: it has taken nothing yet
        assert m["pgcat_upgrade_taking_over"] == 1 and m["pgcat_upgrade_clients_taken"] == 0, m
        mover.commit()
        # the console cannot move: the old one ends with it left to drain
        wait_until(lambda: "1 left to drain" in a.log(), 10)
        old_console.close()
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        assert b.poll() is None
        assert mover.execute("SHOW application_name").fetchone()[0] == "mover"
        with a.connect() as fresh:
            fresh.execute("SET application_name = 'fresh'")
            rows = app_clients(a)
            by_app = {x["application_name"]: x["upgrade"] for x in rows}
            assert by_app == {"mover": "moved", "fresh": None}, rows
        wait_until(lambda: _metrics(mport)["pgcat_upgrade_taking_over"] == 0, 10)
        assert _metrics(mport) == {"pgcat_upgrade_taking_over": 0, "pgcat_upgrade_clients_taken": 1,
                                   "pgcat_upgrade_servers_taken": 1, "pgcat_upgrade_clients_left_to_drain": 1}
        mover.close()


def test_reboot_two_workers_moves_every_client(pgcat, tmp_path):
    a = pgcat(general={"workers": 2})
    conns = [a.connect() for _ in range(10)]
    for i, c in enumerate(conns):
        c.execute("SET application_name = 'c%d'" % i)
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        log = (tmp_path / "b.log").read_text()
        assert log.count("listening sockets from the old worker") == 2, log
        for i, c in enumerate(conns):
            assert c.execute("SHOW application_name").fetchone()[0] == "c%d" % i
        assert len(app_clients(a)) == 10
        assert b.poll() is None
        for c in conns:
            c.close()


def test_reboot_with_a_bad_config_leaves_the_old_serving(pgcat, tmp_path):
    a = pgcat()
    c = a.connect()
    bad = tmp_path / "bad.ini"
    bad.write_text(a.ini.read_text().replace("pool_mode = \"transaction\"", "pool_mode = \"sometimes\"")
                   .replace("pool_mode = transaction", "pool_mode = sometimes"))
    assert "sometimes" in bad.read_text()
    r = subprocess.run([pgcat_binary(), "-R", str(bad)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r
    assert "pool_mode" in r.stderr
    assert "handover" not in a.log()
    assert c.execute("SELECT 1").fetchone()[0] == 1
    assert a.alive()
    c.close()


def test_handover_socket_refuses_strangers(pgcat, tmp_path):
    a = pgcat()
    c = a.connect()
    # the same OS user, but not a pgcat: refused, nothing handed out
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(handover_name(a.port))
    s.send(b"GET / HTTP/1.0\r\n\r\n")
    assert s.recv(100) == b""
    s.close()
    wait_until(lambda: "refused a connection that is not a pgcat" in a.log(), 10)
    # another OS user, even with the right greeting: refused before it is read
    probe = ("import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.settimeout(10); "
             "s.connect(%r)\n"
             "try:\n    s.send(b'H\\x00\\x00\\x00\\x01T'); m = s.recvmsg(100, 1024); print(len(m[0]), len(m[1]))\n"
             "except (ConnectionResetError, BrokenPipeError):\n    print(0, 0)\n" % handover_name(a.port))
    r = subprocess.run(as_pg_user(["python3", "-c", probe]), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    assert r.stdout.split() == ["0", "0"], r.stdout
    wait_until(lambda: "refused a connection from another OS user" in a.log(), 10)
    assert c.execute("SELECT 1").fetchone()[0] == 1
    # still taken over properly afterwards
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        assert c.execute("SELECT 2").fetchone()[0] == 2
        assert b.poll() is None
    c.close()


def test_reboot_without_an_old_process_starts_normally(pgcat, tmp_path):
    a = pgcat(start=False)
    a.write()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log"):
        wait_until(lambda: port_open(a.host, a.port), 15)
        with a.connect() as c:
            assert c.execute("SELECT 1").fetchone()[0] == 1
        assert "no old worker 0" in (tmp_path / "b.log").read_text()


@pytest.mark.parametrize("workers,proto,engine", [(1, "simple", None), (1, "prepared", None),
                                                 (2, "prepared", None), (1, "prepared", "epoll")])
def test_reboot_under_pgbench_no_failed_transaction(pgcat, pg, tmp_path, workers, proto, engine):
    """pgbench's clients keep their connections across the takeover: none
    fails, none reconnects (pgbench without -C would report a lost
    connection), and the old process leaves. (The engine's default moves
    sockets off io_uring; epoll's case is asked for explicitly.)"""
    general = {"workers": workers, "default_pool_size": 4}
    if engine:
        general["io_engine"] = engine
    a = pgcat(general=general)
    bench = start_pgbench(a, tmp_path, "appdb", proto, 10, 5)
    time.sleep(2)
    pg_offset = pg.log_offset()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        assert_no_failure(bench)
        logins = pg.log_since(pg_offset, 10000).count("connection authorized: user=app")
        if workers == 1:
            # the old process's connections came over: none was opened anew
            # (with 2 workers, each worker's pool may still open one to
            # even out clients the kernel spread unevenly, as it may any time)
            assert logins == 0, pg.log_since(pg_offset, 50)
        moved = [int(n) for n in re.findall(r"handover: (\d+) clients moved to the new process", a.log())]
        assert len(moved) == workers and sum(moved) == 10, a.log()[-3000:]
        assert "left to drain" not in a.log()
        assert not re.search(r"C-\d+ .*closing because", a.log().split("took the listeners")[-1])
        assert b.poll() is None


def test_reboot_session_mode_moves_each_client_with_its_server(pgcat, pg, tmp_path):
    """Session mode: a client moves with its own server connection, between
    its transactions: its temporary tables, its LISTEN and its settings are
    the server's session's, and stay. A transaction open at the takeover
    finishes on the old process, then the pair moves."""
    a = pgcat(general={"pool_mode": "session", "shutdown_timeout": 15000})
    temp = a.connect()
    temp.execute("CREATE TEMP TABLE kept (x int)")
    temp.execute("INSERT INTO kept VALUES (1)")
    temp.execute("SET work_mem = '7MB'")
    backend = temp.execute("SELECT pg_backend_pid()").fetchone()[0]
    listener = a.connect()
    listener.execute("LISTEN reboot_channel")
    in_tx = a.connect(autocommit=False)
    in_tx.execute("CREATE TEMP TABLE held (x int)")
    in_tx.execute("INSERT INTO held VALUES (2)")      # BEGIN ... still open
    pg_offset = pg.log_offset()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        wait_until(lambda: "moving 3 clients" in a.log(), 15)
        time.sleep(0.3)
        assert a.alive(), "the old pgcat left while a transaction of its client was open"
        in_tx.commit()
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        assert temp.execute("SELECT pg_backend_pid()").fetchone()[0] == backend
        assert temp.execute("SELECT count(*) FROM kept").fetchone()[0] == 1
        assert temp.execute("SHOW work_mem").fetchone()[0] == "7MB"
        assert in_tx.execute("SELECT x FROM held").fetchone()[0] == 2
        in_tx.commit()
        with pg.connect() as direct:
            direct.execute("NOTIFY reboot_channel, 'after'")
        got = next(listener.notifies(timeout=10), None)
        assert got is not None and got.payload == "after"
        assert "connection authorized: user=app" not in pg.log_since(pg_offset, 10000)
        assert re.search(r"handover: 3 clients moved to the new process, 3 server connections moved", a.log())
        assert b.poll() is None
    for c in (temp, listener, in_tx):
        c.close()


def _payloads(conn, until, times=1, timeout=15):
    """The notifications conn receives, (channel, payload), until times of
    them had the payload until."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        for n in conn.notifies(timeout=max(0.1, deadline - time.time()), stop_after=1):
            got.append((n.channel, n.payload))
        if sum(1 for _, p in got if p == until) >= times:
            return got
    raise AssertionError("no %r among %r" % (until, got[-5:]))


@pytest.mark.parametrize("engine", [None, "epoll"])
def test_reboot_moves_transaction_mode_listeners_with_their_connection(pgcat, pg, tmp_path, engine):
    """Transaction mode: clients that LISTEN (pgcat listens for them on a
    connection of its own, SPEC §11) move together with that connection,
    once every one of them is between transactions; a notification sent at
    any moment of the takeover reaches each of them once, in order, and
    PostgreSQL sees no new login. A LISTEN prepared by name before the
    takeover is executed by that name after it."""
    general = {"shutdown_timeout": 15000}
    if engine:
        general["io_engine"] = engine
    a = pgcat(general=general)
    one = a.connect()
    one.execute("LISTEN tx_a")
    one.execute("LISTEN tx_b")
    two = a.connect()
    two.execute("LISTEN tx_a", prepare=True)
    two.execute("LISTEN tx_a", prepare=True)          # now by its name
    busy = a.connect(autocommit=False)
    busy.execute("LISTEN tx_b")
    busy.commit()
    busy.execute("SELECT 1")                          # a transaction open across the start
    sent = []
    stop = []

    def notifier():
        with pg.connect(autocommit=True) as direct:
            i = 0
            while not stop:
                direct.execute("SELECT pg_notify('tx_a', %s), pg_notify('tx_b', %s)", (str(i), str(i)))
                sent.append(i)
                i += 1
                time.sleep(0.005)

    import threading
    th = threading.Thread(target=notifier, daemon=True)
    th.start()
    time.sleep(0.3)
    pg_offset = pg.log_offset()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        wait_until(lambda: "took 1 listening sockets" in (tmp_path / "b.log").read_text(), 15)
        time.sleep(1)
        # the group waits for its member in a transaction: the old process
        # still serves (and delivers) meanwhile
        assert a.alive(), "the old pgcat left while a listening client was in a transaction"
        assert "listening clients moved" not in a.log()
        busy.commit()
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        time.sleep(0.3)
        stop.append(True)
        th.join(10)
        with pg.connect(autocommit=True) as direct:
            direct.execute("NOTIFY tx_a, 'end'")
            direct.execute("NOTIFY tx_b, 'end'")
        n = len(sent)
        assert n > 100, n
        want = [str(i) for i in range(n)] + ["end"]
        got_one = _payloads(one, "end", times=2)
        assert [p for c, p in got_one if c == "tx_a"] == want
        assert [p for c, p in got_one if c == "tx_b"] == want
        assert [p for c, p in _payloads(two, "end")] == want
        assert [p for c, p in _payloads(busy, "end")] == want
        two.execute("LISTEN tx_a", prepare=True)      # its statement came along
        two.execute("UNLISTEN *")
        with pg.connect(autocommit=True) as direct:
            direct.execute("NOTIFY tx_a, 'after'")
            direct.execute("NOTIFY tx_b, 'after'")
        assert _payloads(busy, "after") == [("tx_b", "after")]
        assert next(two.notifies(timeout=0.5), None) is None
        assert "connection authorized: user=app" not in pg.log_since(pg_offset, 10000)
        assert re.search(r"pool appdb: 3 listening clients moved to the new process with their listening "
                         r"connections", a.log()), a.log()[-2000:]
        assert re.search(r"handover: 3 clients moved to the new process", a.log()), a.log()[-2000:]
        assert b.poll() is None
    for c in (one, two, busy):
        c.close()


def test_reboot_listen_on_the_new_process_while_the_old_listening_connection_comes(pgcat, pg, tmp_path):
    """While a pool's listening clients wait on the old process for the
    one among them in a transaction, a client of the new process LISTENs
    in that pool: its ReadyForQuery waits for the connection on its way
    (none is opened beside it), and once the group came, its notifications
    come over that connection: PostgreSQL sees no new listening
    connection."""
    a = pgcat(general={"shutdown_timeout": 15000})
    busy = a.connect(autocommit=False)
    busy.execute("LISTEN on_its_way")
    busy.commit()
    busy.execute("SELECT 1")                          # holds its group on the old process
    pg_offset = pg.log_offset()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        wait_until(lambda: "took 1 listening sockets" in (tmp_path / "b.log").read_text(), 15)
        fresh = a.connect()                           # the new process's
        t, box = run_in_thread(lambda: fresh.execute("LISTEN fresh_channel"))
        time.sleep(1)
        assert t.is_alive(), "the LISTEN was answered before any connection listened"
        busy.commit()
        t.join(15)
        assert not t.is_alive() and "error" not in box, box
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        with pg.connect(autocommit=True) as direct:
            direct.execute("NOTIFY fresh_channel, 'to the new one'")
            direct.execute("NOTIFY on_its_way, 'to the moved one'")
        got = next(fresh.notifies(timeout=10), None)
        assert got is not None and got.payload == "to the new one"
        got = next(busy.notifies(timeout=10), None)
        assert got is not None and got.payload == "to the moved one"
        # (the new client's login may open a server connection, as with no
        # takeover: the old one's only server is in the transaction)
        assert "application_name=pgcat listener" not in pg.log_since(pg_offset, 10000)
        assert "listening clients moved" in a.log()
        assert b.poll() is None
        fresh.close()
    busy.close()


def test_reboot_moves_a_client_with_a_prepared_setter(pgcat, tmp_path):
    """A client whose prepared statement changes a setting (set_config
    with Bind parameters, which pgcat tracks at each run: SPEC §10) moves
    with that knowledge: run again by its name on the new process, the
    setting is the client's, and the one server it shares with another
    client does not keep it for that one."""
    a = pgcat(users={"app": {"pool_size": 1}}, general={"shutdown_timeout": 15000})
    setter = a.connect()
    setter.execute("SELECT set_config(%s, %s, false)", ["work_mem", "5MB"], prepare=True)
    assert setter.execute("SHOW work_mem").fetchone()[0] == "5MB"
    other = a.connect()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        assert re.search(r"handover: 2 clients moved to the new process", a.log()), a.log()[-2000:]
        assert "left to drain" not in a.log()
        setter.execute("SELECT set_config(%s, %s, false)", ["work_mem", "7MB"], prepare=True)   # by its name
        assert other.execute("SHOW work_mem").fetchone()[0] == "4MB"
        assert setter.execute("SHOW work_mem").fetchone()[0] == "7MB"
        assert other.execute("SHOW work_mem").fetchone()[0] == "4MB"
        assert b.poll() is None
        setter.close()
        other.close()


@pytest.mark.parametrize("workers,engine", [(1, None), (2, None), (1, "epoll")])
def test_reboot_session_mode_under_pgbench(pgcat, pg, tmp_path, workers, engine):
    general = {"workers": workers, "pool_mode": "session", "default_pool_size": 20}
    if engine:
        general["io_engine"] = engine
    a = pgcat(general=general)
    bench = start_pgbench(a, tmp_path, "appdb", "extended", 10, 5)
    time.sleep(2)
    pg_offset = pg.log_offset()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        assert_no_failure(bench)
        moved = [int(n) for n in re.findall(r"handover: (\d+) clients moved to the new process", a.log())]
        assert sum(moved) == 10, a.log()[-3000:]
        assert "connection authorized: user=app" not in pg.log_since(pg_offset, 10000)
        assert b.poll() is None


@pytest.mark.parametrize("workers", [1, 2])
def test_reboot_cancel_reaches_a_query_still_on_the_old_process(pgcat, pg, tmp_path, workers):
    """A query running when the new process takes over stays on the old
    one until it ends; a CancelRequest with the client's key now reaches
    the new process (it has the listeners), which sends it on to the old."""
    a = pgcat(general={"workers": workers, "shutdown_timeout": 30000})
    c = a.connect()
    t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(60)"))
    wait_until(lambda: pg.count("app", "appdb", "active") >= 1, 10)
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        wait_until(lambda: (tmp_path / "b.log").read_text().count("listening sockets from the old worker") == workers,
                   15)
        assert t.is_alive()
        started = time.monotonic()
        c.cancel()
        t.join(15)
        assert isinstance(box.get("error"), psycopg.errors.QueryCanceled), box
        assert time.monotonic() - started < 10
        assert a.proc.wait(20) == 0      # the client moved once its query ended
        a.stopped_by_test = True
        assert c.execute("SELECT 5").fetchone()[0] == 5
        assert b.poll() is None
    c.close()


def test_reboot_survives_bad_records_from_the_old_side(pgcat, tmp_path):
    """What -R reads from the old process is checked like any input: a
    process of pgcat's user that answers on the handover name with
    malformed records (truncated, unknown, with stray sockets) gets them
    refused and logged; the new pgcat binds its own listeners and serves,
    LISTEN included."""
    import array
    import struct
    a = pgcat(start=False)
    a.write()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(handover_name(a.port))
    srv.listen(4)
    srv.settimeout(20)
    stray_a, stray_b = socket.socketpair()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        conn, _ = srv.accept()
        hello = conn.recv(100)
        assert hello[:1] == b"H" and hello[5:6] == b"T", hello
        conn.send(b"L" + struct.pack("!II", 1, 1))          # no listening socket passed
        fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [stray_a.fileno()]))]
        for rec in (b"C", b"C\x00\x00\x00", b"C" + struct.pack("!I", 1) + b"user\x00db",
                    b"C" + struct.pack("!I", 1) + b"u\x00d\x00" + b"\xff" * 40,
                    b"S" + b"garbage", b"S" + struct.pack("!I", 1) + b"p\x00u\x00" + b"\x00" * 8):
            conn.sendmsg([rec], fds)
        conn.send(b"N" + b"\x01\x02")
        conn.sendmsg([b"P" + struct.pack("!I", 10 ** 6) + b"x"], fds)   # a length past the record
        # a transaction-mode pool's listening connection and clients
        # (notify_move.h): truncated, for no pool, without their socket,
        # and one for the real pool whose "server" speaks garbage
        listen_a, listen_b = socket.socketpair()
        real = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [listen_a.fileno()]))]
        conn.send(b"w" + b"appdb\x00app\x00")
        for rec in (b"W", b"W" + b"appdb\x00app\x00" + struct.pack("!I", 0),
                    b"W" + b"nodb\x00nouser\x00" + struct.pack("!I", 0) + b"h\x00" + struct.pack("!I", 5432)
                    + b"d\x00" + struct.pack("!I", 0),
                    b"M" + struct.pack("!I", 10 ** 6), b"M"):
            conn.sendmsg([rec], fds)
        conn.send(b"W" + b"appdb\x00app\x00" + struct.pack("!I", 0))      # no socket beside it
        conn.sendmsg([b"W" + b"appdb\x00app\x00" + struct.pack("!I", 0) + b"127.0.0.1\x00"
                      + struct.pack("!I", 5432) + b"appdb\x00" + struct.pack("!I", 6) + b"\xff" * 6], real)
        conn.send(b"g" + b"appdb\x00app\x00")
        conn.send(b"g")
        wait_until(lambda: port_open(a.host, a.port), 15)
        with a.connect() as c:
            assert c.execute("SELECT 1").fetchone()[0] == 1
        log = (tmp_path / "b.log").read_text()
        assert "a listening connection's record this version cannot read" in log
        assert "a listening client's record this version cannot read" in log
        assert "a record 'W' with 0 sockets" in log
        wait_until(lambda: "sent an invalid or too long message" in (tmp_path / "b.log").read_text(), 10)
        time.sleep(1.2)                               # (its retry is a second away)
        with a.connect() as c, a.connect() as d:      # and LISTEN is served
            c.execute("LISTEN after_garbage")
            d.execute("NOTIFY after_garbage, 'ok'")
            got = next(c.notifies(timeout=10), None)
            assert got is not None and got.payload == "ok"
        listen_a.close()
        listen_b.close()
        assert "a client record this version cannot read" in log
        assert "a server record this version cannot read" in log
        assert "a malformed promise" in log
        assert "an unexpected record from the old process" in log
        assert b.poll() is None
        conn.close()
    srv.close()
    stray_a.close()
    stray_b.close()


def _admin_conn(inst):
    from conftest import ADMIN_PASSWORD, ADMIN_USER
    return psycopg.connect(host=inst.host, port=inst.port, user=ADMIN_USER, password=ADMIN_PASSWORD,
                           dbname="pgcat", sslmode="disable", autocommit=True, connect_timeout=10)


def _stop_pid(pid, timeout=30):
    import os
    import signal
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    wait_until(lambda: not _alive(pid), timeout)


def _alive(pid):
    import os
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_upgrade_command_hands_over_to_the_binary_on_disk(pgcat, tmp_path):
    """The console's UPGRADE: the binary pgcat was started from checks the
    configuration, then takes over (-R); the reply says what moved."""
    from conftest import check_sanitizer_log
    a = pgcat()
    c = a.connect()
    c.execute("SET application_name = 'upgraded'")
    adm = _admin_conn(a)
    notices = []
    adm.add_notice_handler(lambda d: notices.append(d.message_primary))
    new_pid = None
    try:
        adm.execute("UPGRADE")
        assert any("UPGRADE: 1 clients moved to the new process" in n for n in notices), notices
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        m = re.search(r"UPGRADE: started \S+ -R \S+ \(pid (\d+)\)", a.log())
        assert m, a.log()[-2000:]
        new_pid = int(m.group(1))
        assert _alive(new_pid)
        assert c.execute("SHOW application_name").fetchone()[0] == "upgraded"
        with a.connect() as fresh:
            assert fresh.execute("SELECT 1").fetchone()[0] == 1
    finally:
        adm.close()
        c.close()
        if new_pid:
            _stop_pid(new_pid)
    check_sanitizer_log(a.logfile)


def test_upgrade_with_a_bad_config_is_refused_and_the_old_goes_on(pgcat):
    a = pgcat()
    c = a.connect()
    a.ini.write_text(a.ini.read_text() + "\n[general]\npool_mode = sometimes\n")
    adm = _admin_conn(a)
    try:
        with pytest.raises(psycopg.Error, match="UPGRADE refused, this pgcat goes on"):
            adm.execute("UPGRADE")
        assert adm.execute("SHOW VERSION").fetchone()[0].startswith("pgcat")
        assert c.execute("SELECT 1").fetchone()[0] == 1
        assert "handover" not in a.log()
    finally:
        adm.close()
        c.close()
    a.write()   # (a good file again for the fixture's stop)


def test_reboot_tells_systemd_its_pid(pgcat, tmp_path):
    """Type=notify: the new supervisor says MAINPID= with READY=1 once its
    workers listen, so that systemd follows it when the old one exits."""
    sock_path = str(tmp_path / "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.settimeout(20)
    a = pgcat()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log", env={"NOTIFY_SOCKET": sock_path}) as b:
        msg = s.recv(1024).decode()
        assert msg == "MAINPID=%d\nREADY=1" % b.pid, msg
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
    s.close()


def test_reboot_keeps_the_bans(pgcat, tmp_path):
    from test_admin import command
    a = pgcat(general={"workers": 2})
    r = admin(a)
    assert command(r, "BAN 192.0.2.1:5999 300") is None
    r.close()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log") as b:
        assert a.proc.wait(20) == 0
        a.stopped_by_test = True
        r = admin(a)
        _, rows = show(r, "BANS")
        r.close()
        assert len(rows) == 1, rows
        assert "192.0.2.1" in rows[0]["host"] and rows[0]["source"] == "admin", rows
        assert 250 <= int(rows[0]["remaining_s"]) <= 300, rows
        assert b.poll() is None


@pytest.mark.parametrize("workers", [1, 2])
def test_upgrade_under_load_loses_nothing(pgcat, pg, tmp_path, workers):
    """Issue 43's scenario: pgbench -M prepared (transaction mode, 20
    clients) and -M extended (session mode, 10 clients) run through pgcat,
    with a psql session holding BEGIN and a temp table, clients that LISTEN (in
    session mode, and in transaction mode, where pgcat listens for it),
    and one whose long query runs across the takeover and is cancelled with
    its old key; pgcat is taken over (-R) meanwhile by another build
    (pgcat-next: another version string, which SHOW VERSION tells). No
    transaction fails, no client is disconnected, PostgreSQL sees no new
    login, the old process exits."""
    from conftest import pgcat_next_binary
    next_bin = pgcat_next_binary()
    import copy
    from conftest import default_pools
    pools = default_pools(pg)
    sess = copy.deepcopy(pools["appdb"])
    sess["pool_mode"] = "session"
    sess["pool_size"] = 16        # a server per session (12 of them)
    pools["sessdb"] = sess
    a = pgcat(general={"workers": workers, "default_pool_size": 8, "shutdown_timeout": 30000},
              replace_pools=pools)
    with _admin_conn(a) as adm:
        old_version = adm.execute("SHOW VERSION").fetchone()[0]
    # psql, in session mode, holds BEGIN with a temporary table across the
    # takeover (its commands come through a pipe, its output is read at
    # its end)
    import os
    from conftest import PASSWORDS, PG_BIN
    psql = subprocess.Popen([str(PG_BIN / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                             "-h", a.host, "-p", str(a.port), "-U", "app", "-d", "sessdb"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable",
                                     PGAPPNAME="held_psql"))
    psql.stdin.write("BEGIN;\nCREATE TEMP TABLE held (x int);\nINSERT INTO held VALUES (42);\n")
    psql.stdin.flush()
    with pg.connect() as direct:
        wait_until(lambda: direct.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                          "'held_psql' AND state = 'idle in transaction' AND query LIKE "
                                          "'INSERT INTO held%'").fetchone()[0] == 1, 15)
    listener = a.connect(dbname="sessdb")
    listener.execute("LISTEN upgrade_channel")
    tx_listener = a.connect()                          # transaction mode: pgcat listens for it
    tx_listener.execute("LISTEN upgrade_tx_channel")
    sleeper = a.connect()
    t, box = run_in_thread(lambda: sleeper.execute("SELECT pg_sleep(60)"))
    benches = [start_pgbench(a, tmp_path, "appdb", "prepared", 20, 8),
               start_pgbench(a, tmp_path, "sessdb", "extended", 10, 8)]
    time.sleep(2.5)
    pg_offset = pg.log_offset()
    with pgcat_process(["-R", a.ini], tmp_path / "b.log", binary=next_bin) as b:
        wait_until(lambda: (tmp_path / "b.log").read_text().count("listening sockets from the old worker") == workers,
                   15)
        time.sleep(1)
        with _admin_conn(a) as adm:                     # a new connection: the new process answers
            new_version = adm.execute("SHOW VERSION").fetchone()[0]
        assert old_version.startswith("pgcat ") and new_version == old_version + "+next", (old_version, new_version)
        sleeper.cancel()                                 # its key, given by the old process
        t.join(15)
        assert isinstance(box.get("error"), psycopg.errors.QueryCanceled), box
        time.sleep(0.5)
        assert a.alive(), "the old pgcat left while a transaction of its client was open"
        psql.stdin.write("SELECT 'in', x FROM held;\nCOMMIT;\n")
        psql.stdin.flush()
        for p in benches:
            assert_no_failure(p)
        assert a.proc.wait(30) == 0
        a.stopped_by_test = True
        # the temp table, in the transaction and after its commit, on the
        # same session (its server came over with it)
        out = psql.communicate("SELECT 'after', x FROM held;\n", timeout=30)[0]
        assert psql.returncode == 0 and out.split() == ["in|42", "after|42"], out
        assert sleeper.execute("SELECT 7").fetchone()[0] == 7
        with pg.connect() as direct:
            direct.execute("NOTIFY upgrade_channel, 'after'")
            direct.execute("NOTIFY upgrade_tx_channel, 'after tx'")
        got = next(listener.notifies(timeout=10), None)
        assert got is not None and got.payload == "after"
        got = next(tx_listener.notifies(timeout=10), None)
        assert got is not None and got.payload == "after tx"
        assert "listening clients moved to the new process" in a.log()
        logins = pg.log_since(pg_offset, 100000).count("connection authorized: user=app")
        if workers == 1:
            assert logins == 0, pg.log_since(pg_offset, 60)
        else:
            # each new worker gets the old one's connections of the same
            # number; where that was more than pool_size allows it now
            # (two workers' shares of an instance-wide size shift with
            # their clients), it closes the extra ones, or hands an idle
            # one back for the other worker's waiting clients (the
            # janitor's balancing), and a new one may open later, as it
            # would without a takeover: one login at most per such close
            extra = len(re.findall(r"closing because: (more server connections than pool_size"
                                   r"|handed back for another worker's waiting clients)",
                                   (tmp_path / "b.log").read_text()))
            assert logins <= extra, (logins, extra, pg.log_since(pg_offset, 60))
        assert "left to drain" not in a.log()
        assert b.poll() is None
        for c in (listener, tx_listener, sleeper):
            c.close()


def test_old_takes_its_listeners_back_when_the_new_process_dies(pgcat, tmp_path):
    import os
    import signal
    from conftest import pgcat_binary, pgcat_env
    a = pgcat(general={"shutdown_timeout": 30000})
    in_tx = a.connect(autocommit=False)
    in_tx.execute("SELECT 1")                  # keeps the handover open
    log = open(tmp_path / "b.log", "ab")
    b = subprocess.Popen([pgcat_binary(), "-R", str(a.ini)], stdout=log, stderr=subprocess.STDOUT,
                         env=pgcat_env(None), start_new_session=True)
    try:
        wait_until(lambda: "moving 1 clients" in a.log(), 15)
        os.killpg(b.pid, signal.SIGKILL)
        b.wait(10)
        wait_until(lambda: "takes its listeners back and goes on serving" in a.log(), 10)
        assert a.alive()
        in_tx.execute("SELECT 2")
        in_tx.commit()
        with a.connect() as c:                 # the old process accepts again
            assert c.execute("SELECT 3").fetchone()[0] == 3
        assert "the new pgcat went away; this one goes on" in a.log()
    finally:
        log.close()
        in_tx.close()
