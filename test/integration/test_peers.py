# SPDX-License-Identifier: MIT
"""Several pgcat instances behind one TCP load balancer (SPEC §3.4): with
peer_id and [peers] set, a CancelRequest that reaches an instance other than
the client's is forwarded to the right one. Three instances, every client's
cancel sent to another instance (3.0 and 3.2 keys, one and two workers, and
psycopg behind a round-robin balancer): every query is cancelled. Keys
naming a peer id [peers] does not list are ignored; a loop in the [peers]
sections stops at the hop limit; forwarding goes over TLS when the peer
offers it, and in clear to a peer's Unix socket (a directory, or Linux's
abstract namespace)."""
import os
import socket
import struct
import threading
import time
import uuid

import pytest
from psycopg import errors

import pgwire
from forward import Forwarder
from conftest import PASSWORDS, assert_works, wait_until
from test_admin import admin, command
from test_cancel import run_in_thread
from test_dns import hosts_entry
from test_tls import certs, tls_general  # noqa: F401 (certs: a fixture)

MAX_HOPS = 3


def sleeping(pg, pattern="pg_sleep(30)"):
    return [r[0] for r in pg.backends("app", "appdb") if r[3] == "active" and pattern in (r[4] or "")]


def instances(pgcat, n=3, general=None, peers_of=None):
    """n instances with peer_id 1..n; [peers] lists them all (the same
    section on every instance, as one config file would), unless peers_of
    gives an instance's own."""
    insts = [pgcat(general=dict(general or {}, peer_id=i + 1), start=False) for i in range(n)]
    every = {i + 1: "127.0.0.1:%d" % inst.port for i, inst in enumerate(insts)}
    for i, inst in enumerate(insts):
        inst.peers = (peers_of or {}).get(i + 1, every)
        inst.start()
    return insts


def login(inst, version):
    r = inst.raw()
    r.login("app", PASSWORDS["app"], "appdb", version=version)
    return r


def send_cancel(inst, pid, key):
    c = socket.create_connection((inst.host, inst.port), timeout=10)
    c.sendall(pgwire.cancel_request(pid, key))
    # the instance closes the connection once it has read the request
    c.settimeout(10)
    assert c.recv(1) == b"", "an instance answered a CancelRequest"
    c.close()


def peer_key_30(peer_id, slot=0):
    """A made-up 3.0 key of the peer layout: pid with the peer id in bytes
    1-2 (low byte first), the key's low 2 bits all hops left."""
    pid = ((0x10 + (slot >> 8)) << 24) | ((peer_id & 0xFF) << 16) | ((peer_id >> 8) << 8) | (slot & 0xFF)
    key = struct.unpack("!I", os.urandom(4))[0] | 3
    return pid, key


def peer_key_32(peer_id):
    """A made-up 32-byte key: layout 1, no hop yet, the peer id, a route."""
    pid = (1 << 20) | 1
    return pid, bytes([1, 0, peer_id >> 8, peer_id & 0xFF]) + struct.pack("!I", pid) + os.urandom(24)


def log_count(insts, text):
    return sum(inst.log().count(text) for inst in insts)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("version", [pgwire.PROTO_3_0, pgwire.PROTO_3_2], ids=["3.0", "3.2"])
def test_every_cancel_sent_to_another_instance_cancels(pgcat, pg, workers, version):
    insts = instances(pgcat, general={"workers": workers})
    clients = []
    for i, home in enumerate(insts):
        for j, other in enumerate(insts):
            if i != j:
                r = login(home, version)
                r.send(pgwire.query("SELECT pg_sleep(30)"))
                clients.append((r, other))
    wait_until(lambda: len(sleeping(pg)) == len(clients), 15, msg="every client's pg_sleep running")
    t0 = time.monotonic()
    for r, other in clients:
        send_cancel(other, *r.backend_key)
    for r, other in clients:
        rows, err, status = r.collect(10)
        assert err is not None and err["C"] == "57014", err
        assert status == "I"
    assert time.monotonic() - t0 < 5, "the cancels took %.1fs" % (time.monotonic() - t0)
    wait_until(lambda: not sleeping(pg), 10, msg="no pg_sleep left running")
    for r, other in clients:
        rows, err, status = r.simple("SELECT 7")
        assert err is None and rows == [["7"]]
        r.close()
    for inst in insts:
        assert_works(inst)


def test_psycopg_behind_a_round_robin_balancer(pgcat, pg):
    """psycopg's own cancel (libpq's, a new connection to the balancer)
    lands on the next instance: each query is cancelled all the
    same, and the connection goes on."""
    insts = instances(pgcat, general={"log_level": "debug"})
    lb = Forwarder([(inst.host, inst.port) for inst in insts])
    try:
        for k in range(3):
            c = insts[0].connect(port=lb.port)   # connection 2k: instance 2k % 3
            t, box = run_in_thread(lambda: c.execute("SELECT pg_sleep(30)"))
            wait_until(lambda: sleeping(pg), 10, msg="pg_sleep running")
            # connection 2k + 1: the next instance. cancel_safe (libpq 17's
            # cancel API) lets the balancer's threads run meanwhile.
            c.cancel_safe(timeout=10)
            t.join(10)
            assert not t.is_alive(), "the query was not cancelled (round %d)" % k
            assert isinstance(box.get("error"), errors.QueryCanceled), box
            assert c.execute("SELECT 1").fetchone()[0] == 1
            c.close()
    finally:
        lb.close()
    assert lb.n == 6
    assert log_count(insts, "forwarded to") == 3


def test_unknown_peer_ids_are_ignored(pgcat, pg):
    """A key naming a peer id [peers] does not list is ignored silently, as
    an unknown key; one naming a listed peer but held nowhere is forwarded
    and ignored there. No query is cancelled; every instance still serves."""
    a, b = instances(pgcat, n=2, general={"log_level": "debug"})
    ra = login(a, pgwire.PROTO_3_0)
    rb = login(b, pgwire.PROTO_3_2)
    ra.send(pgwire.query("SELECT pg_sleep(2)"))
    rb.send(pgwire.query("SELECT pg_sleep(2)"))
    wait_until(lambda: len(sleeping(pg, "pg_sleep(2)")) == 2, 10, msg="both queries running")
    for key in (peer_key_30(9), peer_key_32(9), peer_key_30(16383, slot=0x6fff), peer_key_32(2), peer_key_30(2)):
        send_cancel(a, *key)
    # what a running client may send: its own pid with another secret
    send_cancel(b, ra.backend_key[0], ra.backend_key[1] ^ 0x10)
    for r in (ra, rb):
        rows, err, status = r.collect(10)
        assert err is None, "a made-up key cancelled a query: %r" % err
        assert rows == [[""]] and status == "I"
    wait_until(lambda: a.log().count("cancel request for peer 9 ignored: not in [peers]") == 2, 5)
    assert "cancel request for peer 16383 ignored" in a.log()
    # the two keys for peer 2 went there, and were not found
    wait_until(lambda: a.log().count("cancel request for peer 2 forwarded to") == 2, 5)
    assert "not forwarded" not in a.log() + b.log()
    for r in (ra, rb):
        rows, err, status = r.simple("SELECT 5")
        assert rows == [["5"]]
        r.close()
    assert_works(a)
    assert_works(b)


@pytest.mark.parametrize("key", [peer_key_30, peer_key_32], ids=["3.0", "3.2"])
def test_a_loop_of_peers_stops_at_the_hop_limit(pgcat, pg, key):
    """A says peer 3 is at B, B says it is at A: a request for peer 3 goes
    A -> B -> A -> B and is dropped there, after MAX_HOPS forwards."""
    a, b = [pgcat(general={"peer_id": i, "log_level": "debug"}, start=False) for i in (1, 2)]
    ports = {1: "127.0.0.1:%d" % a.port, 2: "127.0.0.1:%d" % b.port}
    a.peers = {**ports, 3: ports[2]}
    b.peers = {**ports, 3: ports[1]}
    a.start()
    b.start()
    send_cancel(a, *key(3))
    dropped = "cancel request for peer 3 dropped: forwarded %d times already" % MAX_HOPS
    wait_until(lambda: log_count((a, b), dropped) == 1, 10, msg="the request dropped at the hop limit")
    time.sleep(1)   # nothing more comes
    # A -> B, B -> A, A -> B: MAX_HOPS forwards, then B drops it
    assert a.log().count("cancel request for peer 3 forwarded to %s" % ports[2]) == 2
    assert b.log().count("cancel request for peer 3 forwarded to %s" % ports[1]) == 1
    assert log_count((a, b), "cancel request for peer 3 dropped") == 1
    assert "cancel request for peer 3 dropped" in b.log()
    assert_works(a)
    assert_works(b)


def test_forwarded_over_tls_when_the_peer_offers_it(pgcat, pg, certs):  # noqa: F811
    """Instances with client TLS on: the forward asks for TLS (the default
    server_tls_sslmode prefer), the peer accepts it, and the CancelRequest
    goes inside the TLS session."""
    a, b = instances(pgcat, n=2, general=dict(tls_general(certs, "prefer"), log_level="debug"))
    for home, other in ((a, b), (b, a)):
        r = home.raw_login()
        r.send(pgwire.query("SELECT pg_sleep(30)"))
        wait_until(lambda: sleeping(pg), 10, msg="pg_sleep running")
        send_cancel(other, *r.backend_key)
        rows, err, status = r.collect(10)
        assert err is not None and err["C"] == "57014", err
        r.close()
    assert "cancel request for peer 1 forwarded to 127.0.0.1:%d over TLS" % a.port in b.log()
    assert "cancel request for peer 2 forwarded to 127.0.0.1:%d over TLS" % b.port in a.log()


def test_peers_named_by_host_name(pgcat, pg):
    """[peers] with host names: resolved through the worker's c-ares cache
    (the first request waits for the lookup), for 3.0 and 3.2 keys."""
    name = "pgcat-peer-%s.test" % uuid.uuid4().hex[:8]
    with hosts_entry(name, "127.0.0.1"):
        a, b = [pgcat(general={"peer_id": i, "log_level": "debug"}, start=False) for i in (1, 2)]
        for inst in (a, b):
            inst.peers = {1: "%s:%d" % (name, a.port), 2: "%s:%d" % (name, b.port)}
            inst.start()
        for version in (pgwire.PROTO_3_0, pgwire.PROTO_3_2):
            r = login(a, version)
            r.send(pgwire.query("SELECT pg_sleep(30)"))
            wait_until(lambda: sleeping(pg), 10, msg="pg_sleep running")
            send_cancel(b, *r.backend_key)
            rows, err, status = r.collect(10)
            assert err is not None and err["C"] == "57014", err
            r.close()
        assert b.log().count("cancel request for peer 1 forwarded to %s:%d" % (name, a.port)) == 2


def test_keys_issued_before_a_reload_of_peer_id_still_cancel(pgcat, pg):
    """peer_id is reloadable: a client logged in before A's id changed from
    1 to 5 still has its query cancelled through B (which forwards to peer
    1, still A's address); clients after the reload get keys with 5."""
    a, b = instances(pgcat, n=2)
    old = login(a, pgwire.PROTO_3_0)
    a.general["peer_id"] = 5
    a.peers = {1: "127.0.0.1:%d" % a.port, 2: "127.0.0.1:%d" % b.port, 5: "127.0.0.1:%d" % a.port}
    a.write()
    r = admin(a)
    assert command(r, "RELOAD") is None
    r.close()
    b.peers = a.peers
    b.write()
    r = admin(b)
    assert command(r, "RELOAD") is None
    r.close()
    new = login(a, pgwire.PROTO_3_0)
    pid = new.backend_key[0]
    assert ((pid >> 16) & 0xFF) | (((pid >> 8) & 0xFF) << 8) == 5, hex(pid)
    for c in (old, new):
        c.send(pgwire.query("SELECT pg_sleep(30)"))
        wait_until(lambda: sleeping(pg), 10, msg="pg_sleep running")
        send_cancel(b, *c.backend_key)
        rows, err, status = c.collect(10)
        assert err is not None and err["C"] == "57014", err
        c.close()


def test_forwarded_to_a_peer_over_its_unix_socket(pgcat, pg, certs):  # noqa: F811
    """[peers] naming each instance by its Unix socket directory (as
    PgBouncer's own suite writes them): a cancel sent to the other instance
    over TCP reaches the client's instance through its socket, for 3.0 and
    3.2 keys. Client TLS is on and server_tls_sslmode is prefer: over TCP
    the forward would ask for TLS, over a Unix socket it goes in clear, as
    libpq does there."""
    a, b = [pgcat(general=dict(tls_general(certs, "prefer"), peer_id=i, log_level="debug"), start=False)
            for i in (1, 2)]
    for inst in (a, b):
        # a trailing '/' names the same socket
        inst.peers = {1: "%s/:%d" % (a.sockdir, a.port), 2: "%s:%d" % (b.sockdir, b.port)}
        inst.start()
    for version in (pgwire.PROTO_3_0, pgwire.PROTO_3_2):
        for home, other in ((a, b), (b, a)):
            r = login(home, version)
            r.send(pgwire.query("SELECT pg_sleep(30)"))
            wait_until(lambda: sleeping(pg), 10, msg="pg_sleep running")
            send_cancel(other, *r.backend_key)
            rows, err, status = r.collect(10)
            assert err is not None and err["C"] == "57014", err
            assert status == "I"
            rows, err, status = r.simple("SELECT 7")
            assert err is None and rows == [["7"]]
            r.close()
    for inst, peer_id, peer in ((b, 1, a), (a, 2, b)):
        forwarded = "cancel request for peer %d forwarded to %s:%d" % (peer_id, peer.sockdir, peer.port)
        assert inst.log().count(forwarded + "\n") == 2, inst.log()
    assert "over TLS" not in a.log() + b.log()
    assert "not forwarded" not in a.log() + b.log()


class AbstractListener:
    """A socket in Linux's abstract namespace, named as libpq names
    host=@NAME port=PORT: NAME/.s.PGSQL.PORT after a NUL. It keeps what the
    first connection sends until that side closes, then closes too."""

    def __init__(self, name, port):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0%s/.s.PGSQL.%d" % (name, port))
        self.sock.listen(1)
        self.sock.settimeout(10)
        self.data = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            c, _ = self.sock.accept()
        except OSError:
            return
        c.settimeout(10)
        try:
            # a CancelRequest says its length first; the peer closes after it
            while len(self.data) < 4 or len(self.data) < struct.unpack("!I", self.data[:4])[0]:
                chunk = c.recv(4096)
                if not chunk:
                    break
                self.data += chunk
        except OSError:
            pass
        c.close()

    def close(self):
        self.sock.close()
        self.thread.join(5)


@pytest.mark.parametrize("key", [peer_key_30, peer_key_32], ids=["3.0", "3.2"])
def test_forwarded_to_a_peer_in_the_abstract_namespace(pgcat, pg, certs, key):  # noqa: F811
    """A peer written '@NAME:PORT' (pgcat.ini) is reached at NAME/.s.PGSQL.PORT
    in the abstract namespace, as libpq reaches host=@NAME: the request
    arrives there first thing (no SSLRequest before it, although
    server_tls_sslmode is prefer), its hop counter moved by one."""
    name = "pgcat-peer-%s" % uuid.uuid4().hex[:8]
    listener = AbstractListener(name, 6439)
    try:
        a = pgcat(general=dict(tls_general(certs, "prefer"), peer_id=1, log_level="debug"), start=False)
        a.peers = {1: "127.0.0.1:%d" % a.port, 2: "@%s:6439" % name}
        a.start()
        pid, k = key(2)
        send_cancel(a, pid, k)
        listener.thread.join(10)
        assert not listener.thread.is_alive(), "nothing reached the abstract socket"
    finally:
        listener.close()
    if isinstance(k, int):
        sent = struct.pack("!I", (k & ~3) | 2)      # hops left: 3 -> 2
    else:
        sent = k[:1] + bytes([k[1] + 1]) + k[2:]   # hop counter: 0 -> 1
    assert listener.data == pgwire.cancel_request(pid, sent), listener.data
    wait_until(lambda: "cancel request for peer 2 forwarded to @%s:6439\n" % name in a.log(), 5)
    assert "not forwarded" not in a.log()
    assert_works(a)
