# SPDX-License-Identifier: MIT
"""Atomic writes across shards (SPEC §6, two_phase_commit): a split write
commits with PREPARE TRANSACTION on every shard, the decision in the log in
state_dir, then COMMIT PREPARED. Each fault test ends with every shard
agreeing (the transfer's two rows, or neither) and nothing left prepared:
pgcat killed after PREPARE, after the log write, between COMMIT PREPAREDs;
a shard stopped during PREPARE; a shard restarted between PREPARE and
COMMIT PREPARED; the client gone at COMMIT; and 50 clients transferring
while pgcat is killed and restarted.

The two shards are PostgreSQL servers of this module's own (with
max_prepared_transactions > 0), so that they can be stopped; the session's
server (max_prepared_transactions = 0) shows the refusal."""
import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time

import asyncpg
import psycopg
import pytest

from conftest import (PASSWORDS, PG_BIN, PgServer, _setup_roles, as_pg_user, free_port, port_open,
                      proc_children, wait_until)

# pg_bigint_hash over 2 shards: keys A on shard 0, B on shard 1 (checked by
# the fixture with PostgreSQL's own hash partitioning)
KEY_A, KEY_B = None, None


def _own_server(pg_root, name):
    s = PgServer(pg_root, "%s-%d" % (name, free_port()))
    s.initdb()
    with open(s.datadir / "postgresql.conf", "a") as f:
        f.write("max_prepared_transactions = 64\n")
    s.start()
    _setup_roles(s)
    return s


@pytest.fixture(scope="module")
def shards(pg_root):
    servers = []
    try:
        for name in ("tpc0", "tpc1"):
            servers.append(_own_server(pg_root, name))
        for s in servers:
            with s.connect("shard0") as c:
                c.execute("CREATE TABLE ledger (id bigint, amount bigint)")
                c.execute("GRANT ALL ON ledger TO PUBLIC")
                c.execute("CREATE TABLE acct (id bigint PRIMARY KEY, balance bigint NOT NULL)")
                c.execute("GRANT ALL ON acct TO PUBLIC")
                c.execute("CREATE TABLE hp (id bigint) PARTITION BY HASH (id)")
        global KEY_A, KEY_B
        with servers[0].connect("shard0") as c:
            KEY_A = c.execute("SELECT g FROM generate_series(1, 100) g WHERE "
                              "satisfies_hash_partition('hp'::regclass, 2, 0, g::bigint) LIMIT 1").fetchone()[0]
            KEY_B = c.execute("SELECT g FROM generate_series(1, 100) g WHERE "
                              "satisfies_hash_partition('hp'::regclass, 2, 1, g::bigint) LIMIT 1").fetchone()[0]
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture
def clean(shards):
    """Every test starts with empty ledgers and nothing prepared."""
    for s in shards:
        _end_prepared(s)
        s.sql("TRUNCATE ledger", dbname="shard0")
        s.sql("DROP TRIGGER IF EXISTS slow ON ledger", dbname="shard0")
        s.sql("DROP TRIGGER IF EXISTS veto ON ledger", dbname="shard0")
    return shards


def _end_prepared(s):
    for (gid,) in s.sql("SELECT gid FROM pg_prepared_xacts", dbname="shard0") or []:
        s.sql("ROLLBACK PREPARED '%s'" % gid, dbname="shard0")


def prepared(s):
    try:
        return [r[0] for r in s.sql("SELECT gid FROM pg_prepared_xacts", dbname="postgres")]
    except psycopg.OperationalError:
        return None   # down


def ledger(s):
    return s.sql("SELECT id, amount FROM ledger ORDER BY id, amount", dbname="shard0")


def start(pgcat, shards, tmp_path, env=None, two_phase=True, general=None, pool_size=4, **kw):
    g = {"two_phase_commit": "true" if two_phase else "false", "state_dir": str(tmp_path / "state"),
         "two_phase_recovery_interval": "1000", "prepared_statements": "true"}
    g.update(general or {})
    pool = {
        "query_parser_enabled": "true",
        "sharding_function": "pg_bigint_hash",
        "sharded_tables": "ledger.id, acct.id",
        "default_shard": "0",
        "shards": {i: {"database": "shard0", "servers": "127.0.0.1:%d:primary" % s.port}
                   for i, s in enumerate(shards)},
        "users": {"app": {"password": PASSWORDS["app"], "pool_size": str(pool_size)}},
    }
    return pgcat(general=g, pools={"tpc": pool}, env=env, **kw)


def transfer_sql(amount):
    return "INSERT INTO ledger (id, amount) VALUES (%d, %d), (%d, %d)" % (KEY_A, -amount, KEY_B, amount)


def connect(p, **kw):
    return p.connect(dbname="tpc", **kw)


def settled(shards, timeout=30):
    """Waits until no shard holds a prepared transaction; the ledgers then."""
    wait_until(lambda: all(prepared(s) == [] for s in shards), timeout,
               msg="prepared transactions left: %r" % [prepared(s) for s in shards])
    return [ledger(s) for s in shards]


def agree(ledgers, amount):
    """Both rows of the transfer or neither: which one."""
    a = ledgers[0] == [(KEY_A, -amount)]
    b = ledgers[1] == [(KEY_B, amount)]
    assert ledgers[0] in ([], [(KEY_A, -amount)]) and ledgers[1] in ([], [(KEY_B, amount)]), ledgers
    assert a == b, "the shards disagree: %r" % (ledgers,)
    return a


def decision_lines(tmp_path):
    d = tmp_path / "state"
    out = []
    for f in sorted(d.glob("2pc-*.log")) if d.exists() else []:
        out += f.read_text().splitlines()
    return out


# ---- the commit path, with real drivers -------------------------------------

def test_split_writes_commit_with_prepare_on_every_shard(pgcat, clean, tmp_path):
    shards = clean
    p = start(pgcat, shards, tmp_path)
    with connect(p) as c:
        # a split multi-row INSERT (simple protocol), autocommit
        c.execute(transfer_sql(5))
        # the same in an explicit transaction (the split write is parked until COMMIT)
    with connect(p, autocommit=False) as c:
        c.execute(transfer_sql(7))
        c.commit()
    # extended protocol, with parameters
    with connect(p) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s), (%s, %s)", (KEY_A, -11, KEY_B, 11))
        # COPY split by rows
        with c.cursor().copy("COPY ledger (id, amount) FROM STDIN") as cp:
            cp.write_row((KEY_A, -13))
            cp.write_row((KEY_B, 13))

    with connect(p, prepare_threshold=5) as c:
        # a batch: executemany binds one statement per row, each on its key's shard
        c.cursor().executemany("INSERT INTO ledger (id, amount) VALUES (%s, %s)", [(KEY_A, -17), (KEY_B, 17)])
    with connect(p) as c:
        # the same without prepared statements: a Parse before every Bind
        c.cursor().executemany("INSERT INTO ledger (id, amount) VALUES (%s, %s)", [(KEY_A, -19), (KEY_B, 19)])
    ledgers = settled(shards, 5)
    assert ledgers[0] == [(KEY_A, -19), (KEY_A, -17), (KEY_A, -13), (KEY_A, -11), (KEY_A, -7), (KEY_A, -5)]
    assert ledgers[1] == [(KEY_B, 5), (KEY_B, 7), (KEY_B, 11), (KEY_B, 13), (KEY_B, 17), (KEY_B, 19)]
    # every one of the six went through the log (one decision each)
    assert decision_lines(tmp_path) == ["commit %d" % i for i in range(1, 7)], decision_lines(tmp_path)
    # a write on one shard is a plain COMMIT: no decision
    with connect(p) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%d, 1)" % KEY_A)
    assert len(decision_lines(tmp_path)) == 6


def test_a_write_on_every_shard_commits_in_two_phases(pgcat, clean, tmp_path):
    """default_shard = all: an UPDATE without a key runs on every shard,
    and commits with PREPARE TRANSACTION on each."""
    shards = clean
    p = start(pgcat, shards, tmp_path)
    with connect(p) as c:
        c.execute(transfer_sql(6))
    p.stop()
    p2 = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "state2")},
               pools={"tpc": dict(p.pools["tpc"], default_shard="all")})
    with connect(p2) as c:
        cur = c.execute("UPDATE ledger SET amount = amount * 2")
        assert cur.rowcount == 2
    assert settled(shards, 5) == [[(KEY_A, -12)], [(KEY_B, 12)]]
    lines = [l for f in (tmp_path / "state2").glob("2pc-*.log") for l in f.read_text().splitlines()]
    assert lines == ["commit 1"], lines


def test_without_the_switch_no_prepared_transactions(pgcat, clean, tmp_path):
    shards = clean
    p = start(pgcat, shards, tmp_path, two_phase=False)
    with connect(p) as c:
        c.execute(transfer_sql(3))
    assert [ledger(s) for s in shards] == [[(KEY_A, -3)], [(KEY_B, 3)]]
    assert decision_lines(tmp_path) == []


def test_a_failed_prepare_rolls_back_every_shard(pgcat, clean, tmp_path):
    shards = clean
    # shard 1 refuses at PREPARE: a deferred constraint trigger fires there
    shards[1].sql("""CREATE OR REPLACE FUNCTION veto() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.amount = 666 THEN RAISE EXCEPTION 'vetoed at commit'; END IF; RETURN NULL; END $$""",
                  dbname="shard0")
    shards[1].sql("CREATE CONSTRAINT TRIGGER veto AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED "
                  "FOR EACH ROW EXECUTE FUNCTION veto()", dbname="shard0")
    p = start(pgcat, shards, tmp_path)
    with connect(p) as c:
        with pytest.raises(psycopg.Error, match="vetoed at commit"):
            c.execute(transfer_sql(666))
        assert settled(shards, 5) == [[], []]
        c.execute(transfer_sql(4))   # the session goes on
    assert settled(shards, 5) == [[(KEY_A, -4)], [(KEY_B, 4)]]
    assert decision_lines(tmp_path) == ["commit 2"]


# ---- max_prepared_transactions = 0: refused at startup and by a reload --------

def _mixed_pool(shards, port1):
    """Shard 0 on a server that can PREPARE; shard 1 on 127.0.0.1:port1."""
    return {
        "query_parser_enabled": "true", "sharding_function": "pg_bigint_hash",
        "sharded_tables": "ledger.id", "default_shard": "0",
        "shards": {0: {"database": "shard0", "servers": "127.0.0.1:%d:primary" % shards[0].port},
                   1: {"database": "shard0", "servers": "127.0.0.1:%d:primary" % port1}},
        "users": {"app": {"password": PASSWORDS["app"], "pool_size": "2"}},
    }


ZERO = ("two_phase_commit: pool tpc, shard 1 (127.0.0.1:%d, database shard0) has "
        "max_prepared_transactions = 0, so it cannot PREPARE TRANSACTION")
ASKING = "asking the shards for max_prepared_transactions before serving clients"
WHAT_TO_DO = "Set max_prepared_transactions above 0 on that server (and restart it), or set two_phase_commit = false"


def _config(p):
    from conftest import ADMIN_PASSWORD, ADMIN_USER
    out = p.psql("SHOW CONFIG", user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD).stdout
    return {r.split("|")[0]: r.split("|")[1] for r in out.splitlines() if r}


@pytest.mark.parametrize("workers", [1, 2])
def test_max_prepared_transactions_zero_refuses_startup(pgcat, pg, shards, tmp_path, workers):
    # the session's server has max_prepared_transactions = 0
    p = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "state"), "workers": workers},
              pools={"tpc": _mixed_pool(shards, pg.port)}, wait=False)
    p.expected_rc = 1
    assert p.proc.wait(15) == 1
    log = p.log()
    assert ZERO % pg.port + "; pgcat does not start. " + WHAT_TO_DO in log, log
    assert "failed to start; stopping" in log
    assert "ready:" not in log   # never counted as ready (no READY=1)


def test_max_prepared_transactions_zero_refuses_startup_as_a_daemon(pgcat, pg, shards, tmp_path):
    logfile, pidfile = tmp_path / "daemon.log", tmp_path / "pgcat.pid"
    p = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "state"),
                       "log_file": str(logfile), "pidfile": str(pidfile)},
              pools={"tpc": _mixed_pool(shards, pg.port)}, args=["-d"], wait=False)
    assert p.proc.wait(15) == 0   # detached: the foreground part has no verdict to give
    try:
        wait_until(lambda: logfile.exists() and "pgcat stopped" in logfile.read_text(), 15,
                   msg="the daemon to stop")
    finally:
        if pidfile.exists():   # still running (the test fails): stop it
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
    log = logfile.read_text()
    assert ZERO % pg.port + "; pgcat does not start" in log, log
    assert "failed to start; stopping" in log
    assert not pidfile.exists()


def test_a_shard_down_at_startup_is_a_warning(pgcat, shards, tmp_path):
    down = free_port()
    p = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "state")},
              pools={"tpc": _mixed_pool(shards, down)})
    wait_until(lambda: "could not be checked" in p.log(), 10, msg="the warning")
    assert ("WARNING" in p.log() and "pool tpc, shard 1 (127.0.0.1:%d, database shard0): "
            "max_prepared_transactions could not be checked" % down in p.log()), p.log()
    with connect(p) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    assert p.alive()


@pytest.fixture
def silent_port():
    """A port that takes connections and never answers them (a shard the
    startup check waits for until connect_timeout)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        yield silent.getsockname()[1]


def test_nothing_listens_during_the_startup_check(pgcat, shards, tmp_path, silent_port):
    """A shard that takes the connection but never answers: the check gives
    up after connect_timeout (a warning). Until then pgcat does not listen
    (a client is refused at once, or, in an online restart, goes to the old
    instance), so no client waits in a process whose check may refuse."""
    t0 = time.monotonic()
    p = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "state"),
                       "connect_timeout": "1500"},
              pools={"tpc": _mixed_pool(shards, silent_port)}, wait=False)
    wait_until(lambda: ASKING in p.log(), 15, msg="the startup check")
    assert not port_open(p.host, p.port), "listening during the check"
    p.wait_ready()
    assert "could not be checked (no answer within connect_timeout)" in p.log(), p.log()
    assert time.monotonic() - t0 > 1.0, "listening before the check ended"
    with connect(p) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    # SIGTERM or SIGQUIT during the check: a prompt, clean exit
    for sig in (signal.SIGTERM, signal.SIGQUIT):
        p2 = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "state2"),
                            "connect_timeout": "20000"},
                   pools={"tpc": _mixed_pool(shards, silent_port)}, wait=False)
        wait_until(lambda: ASKING in p2.log(), 15, msg="the startup check")
        t0 = time.monotonic()
        assert p2.stop(sig, timeout=10) == 0
        assert time.monotonic() - t0 < 5
        p2.stopped_by_test = True


def test_an_online_restart_queues_nothing_in_the_new_instance_during_its_check(pgcat, shards, tmp_path, silent_port):
    """A second pgcat on the same port (SO_REUSEPORT, SPEC §9) asking its
    shards: every new client is served by the running one at once, none
    waits in the new one's backlog for its verdict."""
    pool = _mixed_pool(shards, silent_port)
    a = pgcat(general={"two_phase_commit": "false", "state_dir": str(tmp_path / "a")}, pools={"tpc": pool})
    b = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "b"), "listen_port": a.port,
                       "connect_timeout": "8000"},
              pools={"tpc": pool}, wait=False)
    wait_until(lambda: ASKING in b.log(), 15, msg="the new instance's check")
    slow = []
    for _ in range(20):
        t0 = time.monotonic()
        with connect(a, connect_timeout=10) as c:
            assert c.execute("SELECT 1").fetchone() == (1,)
        if time.monotonic() - t0 > 2:
            slow.append(time.monotonic() - t0)
    assert slow == [], "clients waited for the new instance's check: %r" % slow
    assert "could not be checked" not in b.log(), "the check ended before the clients were done"
    assert b.stop(signal.SIGTERM, timeout=10) == 0
    b.stopped_by_test = True


def test_a_reload_to_two_phase_commit_is_refused_while_a_shard_has_zero(pgcat, pg_root, shards, tmp_path):
    z = PgServer(pg_root, "tpcz-%d" % free_port())   # max_prepared_transactions = 0 (the default)
    z.initdb()
    z.start()
    try:
        _setup_roles(z)
        p = pgcat(general={"two_phase_commit": "false", "state_dir": str(tmp_path / "state")},
                  pools={"tpc": _mixed_pool(shards, z.port)})
        with connect(p) as c:
            assert c.execute("SELECT 1").fetchone() == (1,)
        p.general["two_phase_commit"] = "true"
        p.write()

        from conftest import ADMIN_PASSWORD, ADMIN_USER
        # SET cannot wait for the check: refused, nothing changes
        r = p.psql("SET two_phase_commit = true", user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD,
                   check=False)
        assert r.returncode != 0 and "two_phase_commit is turned on by pgcat.ini and RELOAD" in r.stderr, r.stderr
        assert _config(p)["two_phase_commit"] == "false"

        # admin RELOAD: its answer waits for the check (the loop goes on)
        off = len(p.log())
        r = p.psql("RELOAD", user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD, check=False)
        assert r.returncode != 0
        assert "reload failed, old configuration kept: " + ZERO % z.port in r.stderr, r.stderr
        log = p.log()[off:]
        assert ZERO % z.port + "; the reload is refused and the old configuration stays in force. " \
            + WHAT_TO_DO in log, log
        assert "reload rejected (two_phase_commit" in log
        assert "configuration reloaded" not in log
        assert _config(p)["two_phase_commit"] == "false"
        with connect(p) as c:
            assert c.execute("SELECT 1").fetchone() == (1,)

        # SIGHUP: the same, in the log
        off = len(p.log())
        p.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload rejected (two_phase_commit" in p.log()[off:], 10, msg="the refusal")
        assert _config(p)["two_phase_commit"] == "false"

        # the shard fixed: the same reload goes through, once asked
        z.sql("ALTER SYSTEM SET max_prepared_transactions = 8", dbname="postgres")
        z.stop()
        z.start()
        off = len(p.log())
        r = p.psql("RELOAD", user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD)
        log = p.log()[off:]
        assert "asking the shards" in log and "configuration reloaded" in log, log
        assert "reload rejected" not in log
        assert _config(p)["two_phase_commit"] == "true"
        with connect(p) as c:
            assert c.execute("SELECT 1").fetchone() == (1,)

        # checked with two_phase_commit on: the next reload is applied at once, unasked
        off = len(p.log())
        p.psql("RELOAD", user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD)
        assert "configuration reloaded" in p.log()[off:]
        assert "asking the shards" not in p.log()[off:]
    finally:
        z.stop()


def test_a_restarted_worker_does_not_take_a_refused_configuration(pgcat, pg, shards, tmp_path):
    """A reload refused (a shard at 0) leaves the file on disk: a worker
    restarted after a crash asks the shards too, and on the refusal serves
    the configuration pgcat started with instead (no restart loop)."""
    p = pgcat(general={"two_phase_commit": "false", "state_dir": str(tmp_path / "state"), "workers": 1},
              pools={"tpc": _mixed_pool(shards, pg.port)})
    p.general["two_phase_commit"] = "true"
    p.write()
    off = len(p.log())
    p.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload rejected (two_phase_commit" in p.log()[off:], 10, msg="the refusal")
    (worker,) = proc_children(p.pid)
    os.kill(worker, signal.SIGKILL)
    wait_until(lambda: "running the configuration pgcat started with" in p.log()[off:], 15,
               msg="the restarted worker's verdict")
    log = p.log()[off:]
    assert ZERO % pg.port + "; this restarted worker runs the configuration pgcat started with" in log, log
    wait_until(lambda: _config(p)["two_phase_commit"] == "false", 10, msg="the old configuration served")
    with connect(p) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    assert p.alive()
    # one restart, not a loop
    time.sleep(1.5)
    assert p.log()[off:].count("restarted as pid") == 1, p.log()[off:]


def test_a_worker_killed_during_its_startup_check_is_checked_again(pgcat, shards, tmp_path, silent_port):
    """Killed by a signal while it asked the shards: the restarted worker asks
    again before it serves (here a shard that never answers: the warning
    after connect_timeout comes from the restarted one)."""
    p = pgcat(general={"two_phase_commit": "true", "state_dir": str(tmp_path / "state"),
                       "connect_timeout": "2000", "workers": 1},
              pools={"tpc": _mixed_pool(shards, silent_port)}, wait=False)
    wait_until(lambda: ASKING in p.log(), 15, msg="the startup check")
    (worker,) = proc_children(p.pid)
    os.kill(worker, signal.SIGKILL)
    wait_until(lambda: "restarted as pid" in p.log(), 10, msg="the restart")
    wait_until(lambda: "could not be checked (no answer within connect_timeout)" in p.log(), 10,
               msg="the restarted worker's check")
    log = p.log()
    assert log.count(ASKING) == 2, log
    assert log.index("could not be checked") > log.index("restarted as pid"), log
    p.wait_ready()
    with connect(p) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_a_waiting_reload_replaced_by_a_refused_one_answers_the_refusal(pgcat, pg, shards, tmp_path, silent_port):
    """An admin RELOAD waiting for its check is replaced by a SIGHUP's (the
    file changed meanwhile): the RELOAD answers how the reload that ended
    went, here refused, not a success for one never applied."""
    from conftest import ADMIN_PASSWORD, ADMIN_USER
    p = pgcat(general={"two_phase_commit": "false", "state_dir": str(tmp_path / "state"),
                       "connect_timeout": "5000", "workers": 1},
              pools={"tpc": _mixed_pool(shards, silent_port)})
    p.general["two_phase_commit"] = "true"
    p.write()
    off = len(p.log())
    answer = []
    t = threading.Thread(target=lambda: answer.append(
        p.psql("RELOAD", user=ADMIN_USER, dbname="pgcat", password=ADMIN_PASSWORD, check=False)))
    t.start()
    wait_until(lambda: "asking the shards for max_prepared_transactions first" in p.log()[off:], 10,
               msg="the RELOAD's check")
    # the file now names a shard at 0; SIGHUP replaces the waiting reload
    p.pools["tpc"] = _mixed_pool(shards, pg.port)
    p.write()
    p.send_signal(signal.SIGHUP)
    t.join(15)
    assert not t.is_alive(), "the RELOAD got no answer"
    r = answer[0]
    assert r.returncode != 0, r.stdout
    assert "reload failed, old configuration kept: " + ZERO % pg.port in r.stderr, r.stderr
    log = p.log()[off:]
    assert "replaced by this one" in log and "configuration reloaded" not in log, log
    assert _config(p)["two_phase_commit"] == "false"


# ---- faults -----------------------------------------------------------------

@pytest.mark.parametrize("point,committed", [("after_prepare", False), ("after_log", True),
                                             ("between_commits", True)])
def test_pgcat_killed_mid_commit_every_shard_agrees(pgcat, clean, tmp_path, point, committed):
    shards = clean
    p = start(pgcat, shards, tmp_path, env={"PGCAT_TEST_2PC_CRASH": point},
              general={"two_phase_recovery_interval": "600000"})
    with connect(p) as c:
        with pytest.raises(psycopg.OperationalError):
            c.execute(transfer_sql(9))
    # what the killed worker left prepared
    left = [prepared(s) for s in shards]
    assert sum(len(x) for x in left) >= 1, left
    if point == "between_commits":
        assert [len(x) for x in left] == [0, 1], left   # shard 0 committed, shard 1 not yet
    # pgcat stops; the next one (no hook) finishes at start, even with the
    # switch turned off meanwhile (its predecessor's log is there)
    p.stop(signal.SIGKILL)
    p.stopped_by_test = True
    q = start(pgcat, shards, tmp_path, two_phase=point != "between_commits")
    assert agree(settled(shards, 20), 9) is committed
    wait_until(lambda: "left in doubt" in q.log(), 5)
    # the dead process's log goes once nothing of it is left
    wait_until(lambda: len(list((tmp_path / "state").glob("2pc-*.log"))) == 0, 10,
               msg="log files: %r" % list((tmp_path / "state").glob("*")))
    with connect(q) as c:
        c.execute(transfer_sql(1))
    assert agree(settled(shards, 5), 1) if not committed else True


def test_shard_stopped_during_prepare(pgcat, clean, tmp_path):
    shards = clean
    # shard 1's PREPARE takes 3 s (a deferred trigger); it is stopped meanwhile
    shards[1].sql("""CREATE OR REPLACE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$""", dbname="shard0")
    shards[1].sql("CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED "
                  "FOR EACH ROW EXECUTE FUNCTION slow()", dbname="shard0")
    p = start(pgcat, shards, tmp_path)
    err = []

    def run():
        try:
            with connect(p) as c:
                c.execute(transfer_sql(21))
        except psycopg.Error as e:
            err.append(e)
    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: len(prepared(shards[0]) or []) == 1, 10, msg="shard 0 prepared")
    subprocess.run(as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(shards[1].datadir), "-m", "immediate",
                               "-w", "-t", "30", "stop"]), check=True, capture_output=True, timeout=40)
    t.join(20)
    assert not t.is_alive()
    assert err, "the write succeeded without shard 1"
    shards[1].start()
    try:
        assert agree(settled(shards, 20), 21) is False
    finally:
        shards[1].sql("DROP TRIGGER IF EXISTS slow ON ledger", dbname="shard0")
    with connect(p) as c:
        wait_until(lambda: _try(c, transfer_sql(2)), 15, msg="writes again once shard 1 is back")
    assert agree(settled(shards, 10), 2)


def _try(c, sql):
    try:
        c.execute(sql)
        return True
    except psycopg.OperationalError:
        raise
    except psycopg.Error:
        return False


def test_shard_restarted_between_prepare_and_commit_prepared(pgcat, clean, tmp_path):
    shards = clean
    # the worker stalls 4 s once the decision is logged; shard 1 restarts then
    p = start(pgcat, shards, tmp_path, env={"PGCAT_TEST_2PC_CRASH": "after_log", "PGCAT_TEST_2PC_PAUSE_MS": "4000"})
    done = []

    def run():
        with connect(p) as c:
            c.execute(transfer_sql(31))
            done.append(True)
    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: "test hook: stalled" in p.log(), 10)
    subprocess.run(as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(shards[1].datadir), "-l", str(shards[1].logfile),
                               "-m", "fast", "-w", "-t", "30", "restart"]), check=True, capture_output=True, timeout=40)
    t.join(20)
    assert done == [True], "the client did not get its COMMIT (the decision was logged)"
    assert agree(settled(shards, 20), 31) is True


def test_client_gone_at_commit(pgcat, clean, tmp_path):
    shards = clean
    p = start(pgcat, shards, tmp_path, env={"PGCAT_TEST_2PC_CRASH": "after_prepare", "PGCAT_TEST_2PC_PAUSE_MS": "1500"})
    c = connect(p, autocommit=False)
    c.execute(transfer_sql(41))
    # COMMIT sent, then the socket goes at once
    c.pgconn.send_query(b"COMMIT")
    c.pgconn.flush()
    sock = socket.socket(fileno=os.dup(c.pgconn.socket))
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    c.close()
    ledgers = settled(shards, 20)
    agree(ledgers, 41)
    with connect(p) as c2:
        c2.execute(transfer_sql(1))


def keys_on(shard, n):
    """n keys that pg_bigint_hash puts on shard (of 2), by PostgreSQL's own hash."""
    return [r[0] for r in
            (KEYS_SERVER[0].sql("SELECT g FROM generate_series(1, 10000) g WHERE "
                                "satisfies_hash_partition('hp'::regclass, 2, %d, g::bigint) LIMIT %d" % (shard, n),
                                dbname="shard0"))]


KEYS_SERVER = []


def test_transfers_under_restarts_keep_the_total(pgcat, clean, tmp_path):
    """50 clients move money between accounts on different shards for a
    minute while pgcat is killed and started again at random. Half of them
    transfer in one transaction of two UPDATEs, one on each shard (the
    transaction goes on to the second shard); the other half write a
    transfer as a debit and a credit row of a ledger in one split INSERT.
    After the last restart: the accounts' total over both shards is what it
    was, the ledger sums to 0, and each ledger transfer is on both shards or
    on neither."""
    shards = clean
    KEYS_SERVER[:] = [shards[0]]
    n_accts = 20
    accts = [keys_on(0, n_accts), keys_on(1, n_accts)]
    for i, s in enumerate(shards):
        s.sql("TRUNCATE acct", dbname="shard0")
        s.sql("INSERT INTO acct SELECT unnest(%s::bigint[]), 1000", (accts[i],), dbname="shard0")
    total_before = 2 * n_accts * 1000
    duration = float(os.environ.get("PGCAT_2PC_LOAD_SECONDS", "60"))
    # A write on two shards holds a server of each at once: with fewer
    # servers than such clients they could wait for each other until
    # query_wait_timeout (doc/sharding.md), so the pool has one per client.
    p = start(pgcat, shards, tmp_path, general={"workers": "2"}, pool_size=50)
    stop = threading.Event()
    ok = [0, 0]
    failed = [0]

    def client(n):
        rnd = random.Random(n)
        spread = n % 2 == 1
        while not stop.is_set():
            try:
                with connect(p, connect_timeout=3, autocommit=not spread) as c:
                    c.execute("SET lock_timeout = '5s'")
                    if spread:
                        c.commit()
                    while not stop.is_set():
                        x = rnd.randint(1, 100)
                        if spread:
                            # shard 0's row first, then shard 1's: one order, no
                            # lock cycle across the shards
                            a, b = rnd.choice(accts[0]), rnd.choice(accts[1])
                            sign = rnd.choice((1, -1))
                            try:
                                c.execute("UPDATE acct SET balance = balance - %s WHERE id = %s", (sign * x, a))
                                c.execute("UPDATE acct SET balance = balance + %s WHERE id = %s", (sign * x, b))
                                c.commit()
                                ok[1] += 1
                            except psycopg.errors.LockNotAvailable:
                                c.rollback()
                        else:
                            c.execute(transfer_sql(x))
                            ok[0] += 1
            except psycopg.Error:
                failed[0] += 1
                time.sleep(0.1)
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(50)]
    for t in threads:
        t.start()
    rnd = random.Random(7)
    end = time.monotonic() + duration
    restarts = 0
    while time.monotonic() < end:
        time.sleep(rnd.uniform(4, 10))
        p.stop(signal.SIGKILL)
        p.kill_group()
        p.start()
        restarts += 1
    stop.set()
    for t in threads:
        t.join(30)
    p.stopped_by_test = False
    ledgers = settled(shards, 30)
    total = sum(a for _, a in ledgers[0]) + sum(a for _, a in ledgers[1])
    assert total == 0, "the ledger's total changed: %d" % total
    assert len(ledgers[0]) == len(ledgers[1]), (len(ledgers[0]), len(ledgers[1]))
    balances = sum(s.sql("SELECT coalesce(sum(balance), 0) FROM acct", dbname="shard0")[0][0] for s in shards)
    assert balances == total_before, "the accounts' total changed: %d, was %d" % (balances, total_before)
    assert restarts >= 3 and ok[0] > 100 and ok[1] > 100, (restarts, ok, failed[0])


# ---- a transaction that goes on to other shards, statement by statement ----

def test_a_transaction_goes_on_to_another_shard_psycopg(pgcat, clean, tmp_path):
    """Keys of two shards in one explicit transaction: each statement runs
    on its shard, reads see the transaction's own writes there, and COMMIT
    commits on both in two phases (extended protocol with parameters, and
    simple protocol)."""
    shards = clean
    p = start(pgcat, shards, tmp_path)
    with connect(p, autocommit=False) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -50))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 50))
        assert c.execute("SELECT amount FROM ledger WHERE id = %s", (KEY_A,)).fetchall() == [(-50,)]
        assert c.execute("SELECT amount FROM ledger WHERE id = %s", (KEY_B,)).fetchall() == [(50,)]
        # nothing visible outside before COMMIT
        assert [ledger(s) for s in shards] == [[], []]
        c.commit()
    assert settled(shards, 5) == [[(KEY_A, -50)], [(KEY_B, 50)]]
    assert decision_lines(tmp_path) == ["commit 1"]
    # simple protocol (psycopg's client-side cursor): the same, then ROLLBACK
    with connect(p, autocommit=False) as c:
        cur = psycopg.ClientCursor(c)
        cur.execute("UPDATE ledger SET amount = amount - 1 WHERE id = %d" % KEY_A)
        cur.execute("UPDATE ledger SET amount = amount + 1 WHERE id = %d" % KEY_B)
        cur.execute("SELECT amount FROM ledger WHERE id = %d" % KEY_B)
        assert cur.fetchall() == [(51,)]
        c.rollback()
        cur = psycopg.ClientCursor(c)
        cur.execute("UPDATE ledger SET amount = amount - 2 WHERE id = %d" % KEY_A)
        cur.execute("UPDATE ledger SET amount = amount + 2 WHERE id = %d" % KEY_B)
        c.commit()
    assert settled(shards, 5) == [[(KEY_A, -52)], [(KEY_B, 52)]]
    assert decision_lines(tmp_path) == ["commit 1", "commit 2"]


def test_a_transaction_goes_on_to_another_shard_asyncpg(pgcat, clean, tmp_path):
    """asyncpg prepares named statements first, then binds them: the same."""
    import asyncio
    shards = clean
    p = start(pgcat, shards, tmp_path)

    async def run():
        conn = await p.asyncpg(dbname="tpc")
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO ledger (id, amount) VALUES ($1, $2)", KEY_A, -7)
                await conn.execute("INSERT INTO ledger (id, amount) VALUES ($1, $2)", KEY_B, 7)
                a = await conn.fetchval("SELECT sum(amount) FROM ledger WHERE id = $1", KEY_A)
                b = await conn.fetchval("SELECT sum(amount) FROM ledger WHERE id = $1", KEY_B)
            with pytest.raises(asyncpg.PostgresError):
                async with conn.transaction():
                    await conn.execute("INSERT INTO ledger (id, amount) VALUES ($1, $2)", KEY_A, -8)
                    await conn.execute("INSERT INTO ledger (id, amount) VALUES ($1, $2)", KEY_B, 8)
                    await conn.execute("SELECT 1 / 0 FROM ledger WHERE id = $1", KEY_B)
            return a, b, await conn.fetchval("SELECT 1")
        finally:
            await conn.close()
    assert asyncio.run(run()) == (-7, 7, 1)
    assert settled(shards, 5) == [[(KEY_A, -7)], [(KEY_B, 7)]]


def test_an_error_on_one_shard_fails_the_whole_transaction(pgcat, clean, tmp_path):
    shards = clean
    p = start(pgcat, shards, tmp_path)
    with connect(p, autocommit=False) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -3))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 3))
        with pytest.raises(psycopg.errors.DivisionByZero):
            c.execute("SELECT 1 / 0 FROM ledger WHERE id = %s", (KEY_B,))
        # as on one server: nothing more until the transaction ends
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("SELECT 1 FROM ledger WHERE id = %s", (KEY_A,))
        c.rollback()
        # every shard rolled back at once (no lock left, nothing prepared)
        assert [prepared(s) for s in shards] == [[], []]
        assert [ledger(s) for s in shards] == [[], []]
        # savepoints cannot span shards: refused, the transaction fails
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -4))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 4))
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="savepoint"):
            c.execute("SAVEPOINT s1")
        c.rollback()
        # a statement without a key runs on the shard the transaction began on
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 5))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -5))
        assert c.execute("SELECT inet_server_port()").fetchone() == (shards[1].port,)
        c.commit()
    assert settled(shards, 5) == [[(KEY_A, -5)], [(KEY_B, 5)]]
    with connect(p, autocommit=False) as c:
        # a read of every shard cannot be part of it: refused, all rolled back
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 6))
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -6))
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="several shards"):
            c.execute("SELECT count(*) FROM ledger")
        c.rollback()
    assert settled(shards, 5) == [[(KEY_A, -5)], [(KEY_B, 5)]]


def test_without_the_switch_a_second_shard_is_refused(pgcat, clean, tmp_path):
    shards = clean
    p = start(pgcat, shards, tmp_path, two_phase=False)
    with connect(p, autocommit=False) as c:
        c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -1))
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="two_phase_commit"):
            c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 1))
        c.rollback()
    assert [ledger(s) for s in shards] == [[], []]


def test_a_spread_transaction_survives_a_crash_at_commit(pgcat, clean, tmp_path):
    shards = clean
    p = start(pgcat, shards, tmp_path, env={"PGCAT_TEST_2PC_CRASH": "after_log"},
              general={"two_phase_recovery_interval": "600000"})
    c = connect(p, autocommit=False)
    c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -60))
    c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 60))
    with pytest.raises(psycopg.OperationalError):
        c.commit()
    c.close()
    p.stop(signal.SIGKILL)
    p.stopped_by_test = True
    start(pgcat, shards, tmp_path)
    assert agree(settled(shards, 20), 60) is True


def test_client_gone_inside_a_spread_transaction(pgcat, clean, tmp_path):
    shards = clean
    p = start(pgcat, shards, tmp_path)
    c = connect(p, autocommit=False)
    c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_A, -70))
    c.execute("INSERT INTO ledger (id, amount) VALUES (%s, %s)", (KEY_B, 70))
    c.close()
    wait_until(lambda: all(s.sql("SELECT count(*) FROM pg_locks l JOIN pg_class r ON r.oid = l.relation "
                                 "WHERE r.relname = 'ledger'", dbname="shard0") == [(0,)] for s in shards), 10,
               msg="the shards' transactions still hold the table")
    assert [ledger(s) for s in shards] == [[], []]
    with connect(p) as c2:
        c2.execute(transfer_sql(1))
