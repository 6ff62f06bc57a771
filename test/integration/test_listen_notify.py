# SPDX-License-Identifier: MIT
"""LISTEN/NOTIFY in transaction mode (SPEC §11): pgcat answers LISTEN and
UNLISTEN, listens on one connection of its own per (pool, shard), and
delivers each notification to every client registered for its channel, at
the moments PostgreSQL would, with the notifying client's pid."""
import asyncio
import re
import threading
import time

import psycopg
import pytest

from conftest import assert_works, wait_until


def notifies(conn, timeout=2.0, stop_after=None):
    return list(conn.notifies(timeout=timeout, stop_after=stop_after))


def test_own_notification_arrives_before_the_notify_returns(pgcat):
    pgc = pgcat(users={"app": {"pool_size": 2}})
    with pgc.connect() as c:
        got = []
        c.add_notify_handler(got.append)
        c.execute("LISTEN foo")
        c.execute("NOTIFY foo, 'n1'")
        assert [(n.channel, n.payload) for n in got] == [("foo", "n1")]
        assert got[0].pid == c.pgconn.backend_pid
        c.execute("SELECT pg_notify('foo', 'n2')")
        assert [n.payload for n in got] == ["n1", "n2"]
        assert got[1].pid == c.pgconn.backend_pid


def test_notification_from_another_client(pgcat):
    pgc = pgcat(users={"app": {"pool_size": 1}})
    with pgc.connect() as listener, pgc.connect() as notifier:
        listener.execute("LISTEN chan")
        notifier.execute("NOTIFY chan, 'hello'")
        ns = notifies(listener, stop_after=1)
        assert [(n.channel, n.payload) for n in ns] == [("chan", "hello")]
        assert ns[0].pid == notifier.pgconn.backend_pid
        assert ns[0].pid != listener.pgconn.backend_pid


def listener_backends(pg):
    """pgcat's listening connections on the server (their application_name)."""
    return [r for r in pg.sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgcat listener'")]


def test_more_listeners_than_servers_share_one_listening_connection(pgcat, pg):
    pgc = pgcat(users={"app": {"pool_size": 1}})
    conns = [pgc.connect() for _ in range(5)]
    try:
        for i, c in enumerate(conns):
            c.execute("LISTEN shared")
            c.execute("LISTEN own%d" % i)
        assert len(listener_backends(pg)) == 1
        # every client still runs queries on the one pooled server
        assert {c.execute("SELECT 1").fetchone()[0] for c in conns} == {1}
        with pgc.connect() as n:
            n.execute("NOTIFY shared, 'all'")
            n.execute("NOTIFY own3, 'three'")
        for i, c in enumerate(conns):
            want = [("shared", "all")] + ([("own3", "three")] if i == 3 else [])
            got = [(x.channel, x.payload) for x in notifies(c, timeout=1.0)]
            assert got == want, i
    finally:
        for c in conns:
            c.close()
    # the last listening client gone, the listening connection goes
    wait_until(lambda: not listener_backends(pg), msg="listening connection not closed")


def test_notification_waits_for_the_end_of_the_transaction(pgcat):
    pgc = pgcat(users={"app": {"pool_size": 2}})
    with pgc.connect() as a, pgc.connect() as b:
        got = []
        a.add_notify_handler(got.append)
        a.execute("LISTEN t")
        a.autocommit = False
        a.execute("SELECT 1")              # a transaction is open
        b.execute("NOTIFY t, 'x'")
        time.sleep(0.2)
        a.execute("SELECT 2")              # inside it: nothing yet, as on a server
        assert got == []
        a.commit()                         # delivered before its ReadyForQuery
        assert [n.payload for n in got] == ["x"]


def test_listen_in_a_transaction_takes_effect_at_commit(pgcat):
    pgc = pgcat(users={"app": {"pool_size": 2}})
    with pgc.connect() as a, pgc.connect() as b:
        got = []
        a.add_notify_handler(got.append)
        a.autocommit = False
        a.execute("SELECT 1")
        a.execute("LISTEN rolled")
        a.rollback()
        b.execute("NOTIFY rolled, 'no'")
        time.sleep(0.2)
        a.execute("SELECT 1")
        a.execute("LISTEN kept")
        a.commit()
        b.execute("NOTIFY rolled, 'no'")
        b.execute("NOTIFY kept, 'yes'")
        time.sleep(0.2)
        a.execute("SELECT 1")
        a.commit()
        assert [(n.channel, n.payload) for n in got] == [("kept", "yes")]


def test_listen_in_a_failed_transaction_is_refused(pgcat):
    pgc = pgcat(users={"app": {"pool_size": 2}})
    with pgc.connect(autocommit=False) as a:
        a.execute("SELECT 1")
        with pytest.raises(psycopg.errors.DivisionByZero):
            a.execute("SELECT 1/0")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            a.execute("LISTEN nope")
        a.rollback()
        assert a.execute("SELECT 3").fetchone()[0] == 3


def test_unlisten_and_unlisten_all(pgcat):
    pgc = pgcat(users={"app": {"pool_size": 2}})
    with pgc.connect() as a, pgc.connect() as b:
        a.execute("LISTEN one")
        a.execute('LISTEN "Two"')
        a.execute("UNLISTEN one")
        b.execute("NOTIFY one, '1'")
        b.execute('NOTIFY "Two", \'2\'')
        assert [(n.channel, n.payload) for n in notifies(a, timeout=1.0)] == [("Two", "2")]
        a.execute("UNLISTEN *")
        b.execute('NOTIFY "Two", \'3\'')
        assert notifies(a, timeout=0.5) == []
        assert a.execute("SELECT 4").fetchone()[0] == 4


def test_extended_protocol_listen(pgcat):
    """LISTEN through Parse/Bind/Describe/Execute/Sync, as drivers that use the
    extended protocol for everything send it: PostgreSQL's replies."""
    import pgwire
    pgc = pgcat(users={"app": {"pool_size": 1}})
    r = pgc.raw_login()
    try:
        r.send(pgwire.parse("LISTEN ext") + pgwire.bind() + pgwire.describe(b"P") + pgwire.execute()
               + pgwire.sync())
        msgs = r.read_until((b"Z",))
        assert [m[0] for m in msgs] == [b"1", b"2", b"n", b"C", b"Z"]
        assert msgs[3][1] == b"LISTEN\0" and msgs[4][1] == b"I"
        r.send(pgwire.parse("LISTEN ext2") + pgwire.describe(b"S") + pgwire.sync())
        msgs = r.read_until((b"Z",))
        assert [m[0] for m in msgs] == [b"1", b"t", b"n", b"Z"]
        with pgc.connect() as b:
            b.execute("NOTIFY ext, 'p'")
        typ, payload = r.read_msg(timeout=5)
        assert typ == b"A"
        assert payload[4:] == b"ext\0p\0"
        # an ordinary statement after it still runs on a server
        rows, err, status = r.simple("SELECT 7")
        assert rows == [["7"]] and err is None and status == "I"
    finally:
        r.close()


def test_named_statement_listen(pgcat):
    """LISTEN as a named prepared statement, as postgres.js sends it (Parse
    "p1", Bind of it to the unnamed portal, Describe P, Execute, Sync):
    answered by pgcat, executed again, its name taken until it is closed."""
    import pgwire
    pgc = pgcat(users={"app": {"pool_size": 1}})
    r = pgc.raw_login()
    try:
        r.send(pgwire.parse('listen "Named"', name="p1") + pgwire.bind(stmt="p1") + pgwire.describe(b"P")
               + pgwire.execute() + pgwire.sync())
        msgs = r.read_until((b"Z",))
        assert [m[0] for m in msgs] == [b"1", b"2", b"n", b"C", b"Z"]
        assert msgs[3][1] == b"LISTEN\0"
        # the name is taken, as on a server
        r.send(pgwire.parse("SELECT 1", name="p1") + pgwire.sync())
        msgs = r.read_until((b"Z",))
        assert [m[0] for m in msgs] == [b"E", b"Z"]
        assert pgwire.parse_fields(msgs[0][1])["C"] == "42P05"
        # executed again from the statement, described as PostgreSQL does
        r.send(pgwire.describe(b"S", "p1") + pgwire.bind(stmt="p1") + pgwire.execute() + pgwire.sync())
        msgs = r.read_until((b"Z",))
        assert [m[0] for m in msgs] == [b"t", b"n", b"2", b"C", b"Z"]
        with pgc.connect() as b:
            b.execute('NOTIFY "Named", \'x\'')
            b.execute("NOTIFY named, 'not this one'")
        typ, payload = r.read_msg(timeout=5)
        assert typ == b"A" and payload[4:] == b"Named\0x\0"
        # closed: the name is free again and the next Parse goes to a server
        r.send(pgwire.close(b"S", "p1") + pgwire.parse("SELECT 2 AS two", name="p1")
               + pgwire.bind(stmt="p1") + pgwire.execute() + pgwire.sync())
        msgs = r.read_until((b"Z",))
        assert [m[0] for m in msgs] == [b"3", b"1", b"2", b"D", b"C", b"Z"], msgs
    finally:
        r.close()


def test_extended_protocol_listen_inside_a_transaction_on_a_server(pgcat):
    """LISTEN through the extended protocol after a statement of the same
    transaction (the client holds a server, as a JDBC or pgx transaction
    does): answered by pgcat with the transaction's status, in effect at
    COMMIT, not left on the pooled server."""
    import pgwire
    pgc = pgcat(users={"app": {"pool_size": 1}})
    r = pgc.raw_login()
    try:
        for sql in ("BEGIN", "SELECT 1"):
            rows, err, status = r.simple(sql)
            assert err is None and status == "T"
        r.send(pgwire.parse("LISTEN intx", name="s1") + pgwire.bind(stmt="s1") + pgwire.describe(b"P")
               + pgwire.execute() + pgwire.sync())
        msgs = r.read_until((b"Z",))
        assert [m[0] for m in msgs] == [b"1", b"2", b"n", b"C", b"Z"]
        assert msgs[3][1] == b"LISTEN\0" and msgs[4][1] == b"T"
        rows, err, status = r.simple("SELECT 2")
        assert rows == [["2"]] and status == "T"
        rows, err, status = r.simple("COMMIT")
        assert err is None and status == "I"
        # the pooled server does not listen: another client's transaction on it gets nothing
        with pgc.connect() as b:
            got = []
            b.add_notify_handler(got.append)
            b.execute("NOTIFY intx, 'after'")
            b.commit()
            b.execute("SELECT 1")
            assert got == []
        typ, payload = r.read_msg(timeout=5)
        assert typ == b"A" and payload[4:] == b"intx\0after\0"
    finally:
        r.close()


def test_notifier_pid_when_servers_change_hands(pgcat):
    """On a pool of 2, three clients run transactions without pause while a
    fourth notifies in autocommit and in transactions: each notification
    carries the notifier's pid, never that of the client its server went to
    next (a listener skipping its own notifications by pid would lose
    others' otherwise)."""
    pgc = pgcat(users={"app": {"pool_size": 2}})
    stop = threading.Event()
    errors = []

    def busy():
        try:
            with pgc.connect() as c:
                c.execute("LISTEN other")
                while not stop.is_set():
                    with c.transaction():
                        c.execute("SELECT 1")
        except Exception as e:   # reported below
            errors.append(e)
    threads = [threading.Thread(target=busy) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        with pgc.connect(autocommit=True) as n, pgc.connect() as l:
            l.execute("LISTEN pids")
            l.commit()
            notifier_pid = n.pgconn.backend_pid
            for i in range(200):
                if i % 4 == 0:
                    with n.transaction():
                        n.execute("SELECT pg_notify('pids', %s)", [str(i)])
                else:
                    n.execute("NOTIFY pids, '%d'" % i)
            got = notifies(l, timeout=5, stop_after=200)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert [x.payload for x in got] == [str(i) for i in range(200)]
    wrong = [(x.payload, x.pid) for x in got if x.pid != notifier_pid]
    assert not wrong, "notifier %d, but: %s" % (notifier_pid, wrong[:5])


def test_listening_connection_lost_is_reopened(pgcat, pg):
    pgc = pgcat(users={"app": {"pool_size": 1}})
    with pgc.connect() as a, pgc.connect() as b:
        a.execute("LISTEN again")
        (old,) = listener_backends(pg)
        pg.sql("SELECT pg_terminate_backend(%d)" % old[0])
        wait_until(lambda: [r for r in listener_backends(pg) if r != old], timeout=10,
                   msg="listening connection not reopened")
        time.sleep(0.3)   # its LISTEN runs

        def delivered():
            b.execute("NOTIFY again, 'back'")
            return [n.payload for n in notifies(a, timeout=0.3)] == ["back"]
        wait_until(delivered, timeout=10, msg="no notification after the reconnect")
    assert "listener (pool appdb, shard 0)" in pgc.log()
    assert_works(pgc)


def test_session_mode_pid_is_the_clients(pgcat):
    pgc = pgcat(general={"pool_mode": "session"})
    with pgc.connect() as a, pgc.connect() as b:
        got = []
        a.add_notify_handler(got.append)
        a.execute("LISTEN s")
        a.execute("NOTIFY s, 'self'")
        b.execute("NOTIFY s, 'other'")
        time.sleep(0.3)
        a.execute("SELECT 1")
        assert [(n.payload, n.pid) for n in got] == [("self", a.pgconn.backend_pid),
                                                       ("other", b.pgconn.backend_pid)]


def test_asyncpg_add_listener_with_more_clients_than_servers(pgcat):
    pgc = pgcat(users={"app": {"pool_size": 2}})

    async def main():
        conns = [await pgc.asyncpg() for _ in range(10)]
        got = {i: [] for i in range(10)}
        for i, c in enumerate(conns):
            await c.add_listener("ac", lambda _c, pid, ch, payload, i=i: got[i].append(payload))
        notifier = await pgc.asyncpg()
        for k in range(5):
            await notifier.execute("SELECT pg_notify('ac', $1)", str(k))
        for _ in range(100):
            if all(len(v) == 5 for v in got.values()):
                break
            await asyncio.sleep(0.05)
        # the listeners still run queries between notifications
        assert [await c.fetchval("SELECT 1") for c in conns] == [1] * 10
        for c in conns + [notifier]:
            await c.close()
        return got

    got = asyncio.run(main())
    assert all(v == [str(k) for k in range(5)] for v in got.values()), got


@pytest.mark.timeout(600)
def test_1000_listening_clients_on_a_pool_of_5_get_10000_notifications(pgcat, pg):
    """Every client gets every notification of its channels, in order, once;
    the pool's 5 servers are not held by the listeners."""
    import selectors
    import pgwire
    clients, per_tx, txs = 1000, 1000, 10
    pgc = pgcat(general={"max_client_conn": 2000}, users={"app": {"pool_size": 5}})
    raws = []
    try:
        for i in range(clients):
            r = pgc.raw_login(user="trust_user")
            chans = ["load"] + (["half"] if i % 2 == 0 else [])
            for ch in chans:
                rows, err, status = r.simple("LISTEN " + ch)
                assert err is None and status == "I"
            raws.append(r)
        assert len(listener_backends(pg)) == 1
        assert pg.count("trust_user", "appdb") <= 5 + 1   # the pool and the listening connection
        with pgc.connect() as n:
            npid = n.pgconn.backend_pid
            for t in range(txs):
                n.execute("SELECT pg_notify('load', lpad(g::text, 5, '0')) "
                          "FROM generate_series(%s::int, %s::int) g", (t * per_tx + 1, (t + 1) * per_tx))
                n.execute("NOTIFY half, 'h%s'" % t)
        total = per_tx * txs
        load_msg = 1 + 4 + 4 + len(b"load\0") + 6
        half_msg = 1 + 4 + 4 + len(b"half\0") + 3
        want = {i: total * load_msg + (txs * half_msg if i % 2 == 0 else 0) for i in range(clients)}
        bufs = {i: bytearray() for i in range(clients)}
        sel = selectors.DefaultSelector()
        for i, r in enumerate(raws):
            r.sock.setblocking(False)
            sel.register(r.sock, selectors.EVENT_READ, i)
        pending = set(range(clients))
        deadline = time.monotonic() + 300
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1.0):
                i = key.data
                chunk = key.fileobj.recv(1 << 20)
                assert chunk, "client %d: connection closed" % i
                bufs[i] += chunk
                if len(bufs[i]) >= want[i]:
                    pending.discard(i)
        assert not pending, "%d clients short of notifications, e.g. %d: %d of %d bytes" % (
            len(pending), min(pending), len(bufs[min(pending)]), want[min(pending)])
        expect_load = [b"%05d" % k for k in range(1, total + 1)]
        pid = npid.to_bytes(4, "big")
        for i in range(clients):
            buf = bytes(bufs[i])
            assert len(buf) == want[i], i   # nothing more: each once
            loads = re.findall(rb"A\x00\x00\x00\x13(....)load\x00(\d{5})\x00", buf)
            assert [p for _, p in loads] == expect_load, i
            assert {p for p, _ in loads} == {pid}
            halves = re.findall(rb"A....(....)half\x00(h\d)\x00", buf, re.S)
            assert [h for _, h in halves] == ([b"h%d" % t for t in range(txs)] if i % 2 == 0 else []), i
    finally:
        for r in raws:
            r.close()
    assert_works(pgc)


def test_listeners_and_notifiers_on_two_workers(pgcat, pg):
    """workers = 2: clients land on both workers (SO_REUSEPORT). Every
    listening client gets every notification, from notifiers on either
    worker, each with its notifier's pgcat pid; each worker with listeners
    holds one listening connection of its own (doc/listen-notify.md). Each
    notification is awaited before the next client notifies: a notifier's
    pid is exact once its notification reached pgcat's listening
    connections; two clients notifying back to back through one server
    connection may see the second's pid on the first's notification when
    another worker reads it late (doc/listen-notify.md)."""
    pgc = pgcat(general={"workers": 2}, users={"app": {"pool_size": 2}})
    listeners = [pgc.connect(autocommit=True) for _ in range(12)]
    notifiers = [pgc.connect(autocommit=True) for _ in range(6)]
    try:
        for c in listeners:
            c.execute("LISTEN across")
        n_listening = len(listener_backends(pg))
        assert 1 <= n_listening <= 2
        for k, n in enumerate(notifiers):
            n.execute("NOTIFY across, '%d'" % k)
            for c in listeners:
                got = notifies(c, timeout=5, stop_after=1)
                assert [(x.payload, x.pid) for x in got] == [(str(k), n.pgconn.backend_pid)]
    finally:
        for c in listeners + notifiers:
            c.close()
    wait_until(lambda: not listener_backends(pg), timeout=10, msg="listening connections left open")


def test_listen_then_terminate_in_one_packet(pgcat):
    """A client's first LISTEN and its Terminate in one packet: the
    ReadyForQuery waits for the pool's new listening connection, whose
    answer releases it and lets the Terminate be read, inside that
    connection's own event; the pool's listening state, left without a
    client, must outlive the event (it goes at the hub's next tick). pgcat
    goes on serving listeners."""
    import pgwire
    pgc = pgcat()
    for i in range(3):
        r = pgc.raw_login()
        try:
            r.send(pgwire.query("LISTEN gone_%d" % i) + pgwire.terminate())
            time.sleep(0.4)            # past the hub's tick: the state is gone, made anew next time
        finally:
            r.close()
    with pgc.connect() as a:
        a.execute("LISTEN stays")
        with pgc.connect() as b:
            b.execute("NOTIFY stays, 'x'")
        got = notifies(a, timeout=5, stop_after=1)
        assert [n.payload for n in got] == ["x"]
    assert pgc.alive()


def test_listen_again_right_after_the_last_listener_left(pgcat, pg):
    """The pool's listening connection closes when its last channel goes;
    a LISTEN a moment later (within the second a lost connection waits
    before it is opened again) opens one at once: a notification right
    after it arrives."""
    pgc = pgcat()
    for i in range(3):
        with pgc.connect() as a:
            a.execute("LISTEN again_%d" % i)
        with pgc.connect() as b:
            b.execute("LISTEN again_%d" % i)
            with pg.connect(autocommit=True) as direct:
                direct.execute("NOTIFY again_%d, 'n%d'" % (i, i))
            got = notifies(b, timeout=5, stop_after=1)
            assert [n.payload for n in got] == ["n%d" % i]
