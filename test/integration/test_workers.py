# SPDX-License-Identifier: MIT
"""Several worker processes sharing the port, and the shared segment
(SPEC §3.4, §9): instance-wide pool sizes, client limits and figures,
cancellation across workers, restarts, signals, systemd readiness and the
online restart."""
import os
import signal
import socket
import subprocess
import threading
import time

import psycopg
import pytest

from conftest import (ADMIN_PASSWORD, ADMIN_USER, PASSWORDS, PG_BIN, TCP_MIGRATE_REQ, free_port, pgcat_process,
                      port_open, render_ini, default_general, default_pools, wait_until)
from test_admin import admin, command, show


def run_in_thread(fn):
    box = {}

    def target():
        try:
            box["result"] = fn()
        except Exception as e:   # the test inspects it
            box["error"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def worker_pids(inst):
    r = admin(inst)
    _, rows = show(r, "WORKERS")
    return [int(x["pid"]) for x in rows]


def test_workers_listed_and_share_the_port(pgcat):
    inst = pgcat(general={"workers": 2})
    wait_until(lambda: len(worker_pids(inst)) == 2)
    pids = worker_pids(inst)
    assert len(set(pids)) == 2 and inst.pid not in pids
    # many connections: both workers get some (SO_REUSEPORT spreads them)
    conns = [inst.connect() for _ in range(24)]
    for c in conns:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    r = admin(inst)
    _, rows = show(r, "WORKERS")
    clients = [int(x["clients"]) for x in rows]
    assert sum(clients) >= 24 and all(n > 0 for n in clients), clients
    for c in conns:
        c.close()


def test_pool_size_holds_per_instance(pgcat, pg):
    inst = pgcat(general={"workers": 2, "default_pool_size": 3})
    conns = [inst.connect(autocommit=False) for _ in range(50)]
    seen = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            seen.append(pg.count("app", "appdb"))
            time.sleep(0.02)
    s = threading.Thread(target=sample, daemon=True)
    s.start()
    threads = [run_in_thread(lambda c=c: (c.execute("SELECT pg_sleep(0.3)"), c.commit())) for c in conns]
    for t, box in threads:
        t.join(30)
        assert "error" not in box, box
    stop.set()
    s.join()
    assert max(seen) <= 3, "pool_size 3 but %d server connections" % max(seen)
    for c in conns:
        c.close()


ROUNDS = int(os.environ.get("PGCAT_BURST_ROUNDS", "12"))


# A cap as large as the workers: each worker's first login needs a connection
# of its own to learn the server's parameters, and under a cap it waits for
# room (another worker's idle connection of the same pool is not closed
# for it).
@pytest.mark.parametrize("workers, limit, size", [(2, "default_pool_size", 2), (3, "default_pool_size", 2),
                                                 (4, "default_pool_size", 2), (3, "max_db_connections", 3)])
def test_pool_size_holds_per_instance_when_workers_open_together(pgcat, pg, workers, limit, size):
    """Every worker decides to open connections in the same instant, round
    after round: clients queue on a paused, empty pool in every worker,
    and SIGUSR2 resumes all the workers at once. Two workers deciding
    together must not both take the last room (SPEC §9: N workers open at
    most pool_size per (pool, user, server); a cap counts every worker's
    connections too)."""
    general = {"workers": workers, "default_pool_size": 10, "query_wait_timeout": 30000}
    general[limit] = size
    inst = pgcat(general=general)
    wait_until(lambda: len(worker_pids(inst)) == workers)
    conns = [inst.connect() for _ in range(6 * workers)]
    most, over = 0, 0
    for _ in range(ROUNDS):
        # Paused: idle servers closed, clients queue. PostgreSQL's view
        # must be empty too (a closed backend lingers a moment).
        os.kill(inst.pid, signal.SIGUSR1)
        wait_until(lambda: pg.count("app", "appdb") == 0, 10, 0.01)
        threads = [run_in_thread(lambda c=c: c.execute("SELECT pg_sleep(0.03)")) for c in conns]
        time.sleep(0.3)
        seen = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                seen.append(pg.count("app", "appdb"))
        s = threading.Thread(target=sample, daemon=True)
        s.start()
        os.kill(inst.pid, signal.SIGUSR2)
        for t, box in threads:
            t.join(30)
            assert "error" not in box, box
        stop.set()
        s.join()
        most = max(most, max(seen))
        over += max(seen) > size
    print("workers %d, %s %d: most server connections seen %d, rounds over it %d of %d" %
          (workers, limit, size, most, over, ROUNDS))
    assert most <= size, "%s %d but %d server connections (in %d rounds of %d)" % (limit, size, most, over, ROUNDS)
    for c in conns:
        c.close()


def test_max_client_conn_per_instance(pgcat):
    inst = pgcat(general={"workers": 2, "max_client_conn": 4})
    conns = [inst.connect() for _ in range(4)]
    with pytest.raises(psycopg.OperationalError) as e:
        inst.connect()
    assert "too many clients" in str(e.value)
    for c in conns:
        c.close()


def test_cancel_reaches_the_query_from_any_worker(pgcat):
    inst = pgcat(general={"workers": 2})
    cancelled = 0
    for _ in range(20):
        c = inst.connect()
        t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(5)"))
        time.sleep(0.3)
        c.cancel()   # a new connection: lands on either worker
        t.join(10)
        assert not t.is_alive()
        if isinstance(box.get("error"), psycopg.errors.QueryCanceled):
            cancelled += 1
        c.close()
    assert cancelled == 20


def test_stats_are_summed_over_workers(pgcat):
    inst = pgcat(general={"workers": 2})
    for i in range(20):
        with inst.connect() as c:
            c.execute("SELECT 1")
    r = admin(inst)
    _, rows = show(r, "STATS_TOTALS")
    row = {x["database"]: x for x in rows}["appdb"]
    assert int(row["client_login_count"]) >= 20
    assert int(row["xact_count"]) >= 20


def test_dead_worker_is_restarted(pgcat):
    inst = pgcat(general={"workers": 2})
    wait_until(lambda: len(worker_pids(inst)) == 2)
    victim = worker_pids(inst)[1]
    os.kill(victim, signal.SIGKILL)

    def replaced():
        pids = worker_pids(inst)
        # a dead worker's row shows pid 0 until the supervisor has forked its successor
        return len(pids) == 2 and victim not in pids and all(p > 0 for p in pids)
    wait_until(replaced, 15)
    r = admin(inst)
    _, rows = show(r, "WORKERS")
    assert sum(int(x["restarts"]) for x in rows) == 1
    assert "died of signal 9" in inst.log()
    for _ in range(10):
        with inst.connect() as c:
            assert c.execute("SELECT 7").fetchone()[0] == 7


def test_pause_applies_to_every_worker(pgcat):
    inst = pgcat(general={"workers": 2})
    r = admin(inst)
    assert command(r, "PAUSE appdb") is None
    conns = [inst.connect() for _ in range(6)]
    threads = [run_in_thread(lambda c=c: c.execute("SELECT 5").fetchone()[0]) for c in conns]
    time.sleep(0.8)
    assert all(t.is_alive() for t, _ in threads), "a query ran on a paused pool"
    assert command(r, "RESUME appdb") is None
    for t, box in threads:
        t.join(10)
        assert box.get("result") == 5, box
    for c in conns:
        c.close()


def test_sighup_reloads_every_worker(pgcat, pg):
    inst = pgcat(general={"workers": 2, "default_pool_size": 5})
    inst.general["default_pool_size"] = 2
    inst.write()
    inst.send_signal(signal.SIGHUP)
    wait_until(lambda: inst.log().count("configuration reloaded") >= 2, 10)
    conns = [inst.connect(autocommit=False) for _ in range(8)]
    seen = []
    threads = [run_in_thread(lambda c=c: (c.execute("SELECT pg_sleep(0.3)"), c.commit())) for c in conns]
    for _ in range(10):
        seen.append(pg.count("app", "appdb"))
        time.sleep(0.05)
    for t, box in threads:
        t.join(30)
        assert "error" not in box, box
    assert max(seen) <= 2
    for c in conns:
        c.close()


def test_sd_notify_readiness(pg, tmp_path):
    sock_path = str(tmp_path / "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.settimeout(15)
    port = free_port()
    g = default_general(port, tmp_path)
    g["workers"] = 2
    ini = tmp_path / "pgcat.ini"
    ini.write_text(render_ini(g, default_pools(pg)))
    try:
        with pgcat_process([ini], tmp_path / "log", env={"NOTIFY_SOCKET": sock_path}) as proc:
            assert s.recv(100) == b"READY=1"
            assert port_open("127.0.0.1", port)
            proc.send_signal(signal.SIGHUP)
            assert s.recv(100) == b"RELOADING=1"
            assert s.recv(100) == b"READY=1"
            proc.send_signal(signal.SIGTERM)
            assert s.recv(100) == b"STOPPING=1"
            assert proc.wait(20) == 0
    finally:
        s.close()


# The online-restart tests run in a network namespace of their own
# (`netns_pg`): net.ipv4.tcp_migrate_req is per namespace, so it is set to 1
# there whatever the host has (and the host's is left alone), and a
# PostgreSQL of their own runs beside pgcat in that namespace.

def _start_in(tmp_path, name, pg, port, **general):
    d = tmp_path / name
    d.mkdir()
    g = default_general(port, d)
    g["unix_socket_dir"] = ""
    g.update(general)
    ini = d / "pgcat.ini"
    ini.write_text(render_ini(g, default_pools(pg)))
    return pgcat_process([ini], d / "log")


def _migrate_req_on():
    with open(TCP_MIGRATE_REQ) as f:
        assert f.read().strip() == "1", "net.ipv4.tcp_migrate_req is not 1 in the test's namespace"


def test_online_restart_no_client_error(netns_pg, tmp_path):
    """A second pgcat on the same port takes new clients while the first,
    sent SIGTERM, drains: clients that connect per transaction see no error
    (with net.ipv4.tcp_migrate_req = 1, SPEC §9)."""
    _migrate_req_on()
    pg = netns_pg
    port = free_port()
    errors = []
    done = []
    stop = threading.Event()

    def client_loop():
        while not stop.is_set():
            try:
                with psycopg.connect(host="127.0.0.1", port=port, user="app", password=PASSWORDS["app"],
                                     dbname="appdb", connect_timeout=5) as c:
                    c.execute("SELECT 1").fetchone()
                done.append(1)
            except Exception as e:   # counted: the test asserts there are none
                errors.append(repr(e))
            time.sleep(0.01)
    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(3)]
    try:
        with _start_in(tmp_path, "a", pg, port) as a:
            wait_until(lambda: a.poll() is None and port_open("127.0.0.1", port), 15)
            for t in threads:
                t.start()
            time.sleep(1)
            with _start_in(tmp_path, "b", pg, port) as b:
                time.sleep(1.5)          # b is listening beside a
                assert b.poll() is None, "the second pgcat exited: %s" % (tmp_path / "b" / "log").read_text()
                a.send_signal(signal.SIGTERM)
                assert a.wait(30) == 0
                before = len(done)
                time.sleep(1.5)          # clients now all land on b
                stop.set()
                for t in threads:
                    t.join(10)
                    assert not t.is_alive(), "a client is stuck"
                assert len(done) > before, "no client got through b after a stopped"
                b.send_signal(signal.SIGTERM)
                assert b.wait(30) == 0
    finally:
        stop.set()
        for t in threads:
            if t.ident is not None:
                t.join(10)
    assert errors == [], errors[:5]


def test_sigterm_with_transaction_in_flight_two_workers(pgcat, pg, table):
    t = table("id int")
    p = pgcat(general={"workers": 2, "shutdown_timeout": 20000})
    c = p.connect(autocommit=False)
    c.execute("INSERT INTO %s VALUES (1)" % t)
    p.send_signal(signal.SIGTERM)
    p.stopped_by_test = True
    wait_until(lambda: not port_open(p.host, p.port), 10)
    c.execute("INSERT INTO %s VALUES (2)" % t)
    c.commit()
    assert p.stop(timeout=15) == 0
    assert pg.sql("SELECT count(*) FROM %s" % t)[0][0] == 2
    c.close()


def test_online_restart_pgbench_no_failed_transactions(netns_pg, tmp_path):
    """pgbench with a new connection per transaction (-C) through an online
    restart: old instance drains, new one takes over, nothing fails (with
    net.ipv4.tcp_migrate_req = 1, SPEC §9)."""
    _migrate_req_on()
    pg = netns_pg
    port = free_port()
    script = tmp_path / "s.sql"
    script.write_text("SELECT 1;\n")
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"], PGSSLMODE="disable")
    bench = None
    try:
        with _start_in(tmp_path, "a", pg, port, workers=2) as a:
            wait_until(lambda: a.poll() is None and port_open("127.0.0.1", port), 15)
            bench = subprocess.Popen([str(PG_BIN / "pgbench"), "-h", "127.0.0.1", "-p", str(port), "-U", "app",
                                      "-n", "-C", "-c", "4", "-j", "2", "-T", "6", "-f", str(script), "appdb"],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(1.5)
            with _start_in(tmp_path, "b", pg, port, workers=2) as b:
                wait_until(lambda: b.poll() is None and port_open("127.0.0.1", port), 10)
                time.sleep(1)
                assert b.poll() is None, "the second pgcat exited: %s" % (tmp_path / "b" / "log").read_text()
                a.send_signal(signal.SIGTERM)
                assert a.wait(30) == 0
                out = bench.communicate(timeout=60)[0]
                b.send_signal(signal.SIGTERM)
                assert b.wait(30) == 0
    finally:
        if bench is not None and bench.poll() is None:
            bench.kill()     # only when the test failed before pgbench ended
            bench.wait(10)
    assert bench.returncode == 0, out
    assert "number of failed transactions: 0" in out, out


def test_cancel_of_a_waiting_client_from_any_worker(pgcat):
    """A client waiting for a server (nothing running yet) is cancelled by
    a CancelRequest whichever worker it lands on: pgcat answers 57014."""
    inst = pgcat(general={"workers": 2, "default_pool_size": 1})
    # Every worker learns the server's parameters first (a first login on a
    # worker waits for a server otherwise).
    for _ in range(12):
        with inst.connect() as w:
            w.execute("SELECT 1")
    holder = inst.connect(autocommit=False)
    holder.execute("SELECT 1")          # holds the only server (open transaction)
    cancelled = 0
    for _ in range(10):
        c = inst.connect()
        t, box = run_in_thread(lambda: c.execute("SELECT 42"))
        time.sleep(0.3)
        assert t.is_alive(), box             # waiting for the server
        c.cancel()                      # a new connection: either worker
        t.join(5)
        assert not t.is_alive()
        if isinstance(box.get("error"), psycopg.errors.QueryCanceled):
            cancelled += 1
        c.close()
    holder.rollback()
    holder.close()
    assert cancelled == 10


def test_show_clients_and_servers_list_every_worker(pgcat, pg):
    """SHOW CLIENTS / SHOW SERVERS answer for the whole instance, whichever
    worker the console landed on: every client and server connection once,
    with the worker that holds it."""
    inst = pgcat(general={"workers": 2, "default_pool_size": 6})
    wait_until(lambda: len(worker_pids(inst)) == 2)
    names = ["lister_%d" % i for i in range(24)]
    conns = []
    for i, n in enumerate(names):
        # four hold a server in an open transaction; the rest are idle
        c = inst.connect(autocommit=i >= 4, application_name=n)
        c.execute("SELECT 1")
        conns.append(c)
    try:
        for _ in range(3):               # consoles land on either worker
            r = admin(inst)
            cols, rows = show(r, "CLIENTS")
            apps = sorted(x["application_name"] for x in rows if x["user"] == "app")
            assert apps == sorted(names), apps
            workers = {x["worker"] for x in rows if x["user"] == "app"}
            assert workers == {"0", "1"}, workers
            cols, srows = show(r, "SERVERS")
            backends = pg.backends("app", "appdb")
            assert len([x for x in srows if x["user"] == "app"]) == len(backends), (srows, backends)
            assert sorted(int(x["remote_pid"]) for x in srows if x["user"] == "app") == \
                sorted(b[0] for b in backends)
            r.close()
    finally:
        for c in conns:
            c.close()


def test_show_prepared_statements_lists_every_worker(pgcat):
    """Each worker keeps its own registry; SHOW PREPARED_STATEMENTS gathers
    them all, with the worker that holds each."""
    inst = pgcat(general={"workers": 2})
    wait_until(lambda: len(worker_pids(inst)) == 2)
    conns = []

    def prepared_on_both():
        # the kernel spreads connections over the workers' listeners once
        # both listen (a loaded machine may start the second one late)
        c = inst.connect(prepare_threshold=0)     # every statement prepared by name
        c.execute("SELECT %s::int + 0 AS marker_workers_test", (len(conns),))
        conns.append(c)
        if len(conns) < 16:
            return False
        r = admin(inst)
        _, rows = show(r, "PREPARED_STATEMENTS")
        r.close()
        return {x["worker"] for x in rows if "marker_workers_test" in x["query"]} == {"0", "1"}
    wait_until(prepared_on_both, 30, msg="statements prepared through both workers")
    try:
        for _ in range(3):                        # consoles land on either worker
            r = admin(inst)
            cols, rows = show(r, "PREPARED_STATEMENTS")
            r.close()
            assert cols[-1] == "worker", cols
            mine = [x for x in rows if "marker_workers_test" in x["query"]]
            assert {x["worker"] for x in mine} == {"0", "1"}, mine
    finally:
        for c in conns:
            c.close()
