# SPDX-License-Identifier: MIT
"""Online resharding (SPEC §6, issue 45): pool `app` goes from two shards
(databases s0, s1) to the four of its target layout `[pools.app.next.shards.N]`
(n0..n3) with the console's `RESHARD app`, while clients keep writing.

The module runs a PostgreSQL server of its own (wal_level = logical, room for
slots and walsenders) and a superuser with a password as the pool's user (the
reshard logs in with it: CREATE PUBLICATION ... FOR ALL TABLES, replication
slots, session_replication_role). Each test starts from freshly created
databases: s0 and s1 with a sharded bigint table (items), a sharded uuid table
(docs, some of its bodies big enough to be TOASTed) and a table kept whole on
every shard (kinds); n0..n3 empty.

Where a row belongs is computed apart from pgcat, by PostgreSQL's own hash
partitioning (satisfies_hash_partition on a `PARTITION BY HASH` table of the
type the pool's sharding_function hashes, in a database of its own, so that
the databases being resharded hold nothing but the application's tables).

The load (`Load`): 8 client threads through pgcat, psycopg 3, autocommit
off, one transaction per operation. Each client owns its keys, and every
operation sets a row's state outright (an upsert of the whole row, an UPDATE
to given values, a DELETE), so an operation may be run again after an error
whose outcome is unknown, and the final state follows from each client's own
sequence of committed operations, whatever the interleaving: replayed on a
fresh database it must give exactly the rows of the new shards.

The phases, columns and commands used are those of the interface under
construction: `RESHARD app [HOLD]`, `RESHARD CUTOVER app`, `RESHARD CANCEL
app`, `RESHARD CLEANUP app`, `SHOW RESHARD` (pool, phase, source_shards,
target_shards, tables, tables_copied, rows_copied, bytes_copied,
changes_applied, lag_bytes, pause_ms, errors, last_error).
"""
import collections
import contextlib
import hashlib
import os
import random
import struct
import threading
import time
import uuid

import psycopg
import pytest

import pgwire
from conftest import ADMIN_PASSWORD, ADMIN_USER, PG_BIN, PgServer, free_port, wait_until

POOL = "app"
USER = "resharder"          # the pool's user: a superuser with a password (the reshard logs in with it)
PASSWORD = "resharder_pw"
OLD_DBS = ("s0", "s1")
NEW_DBS = ("n0", "n1", "n2", "n3")
REPLAY_DB = "replay"
HASH_DB = "hashcalc"        # holds the PARTITION BY HASH tables the expected shards are computed with
SHARDED = ("items", "docs")

# One sharding function per pool (doc/configuration.md): pg_bigint_hash reads
# only integers and pg_uuid_hash only uuids, so a pool whose keys are a bigint
# (items.id) and a uuid (docs.id) needs pg_text_hash, which hashes any key by
# its text. Both key types have one text form (int8out's decimal, uuid_out's
# lower-case 8-4-4-4-12) in every place a key is read: the clients below send
# exactly that text (a uuid as a str with ::uuid, never psycopg's hyphen-less
# text dumper), the binary forms are turned into it by pgcat (src/shardkey.c),
# and COPY's and pgoutput's text output is it. So shard n of N holds the rows
# that PARTITION BY HASH (key::text) MODULUS N, REMAINDER n holds.
# HASH_AS: the PostgreSQL type each table's key is hashed as; the
# pg_bigint_hash line is for a pgcat that would hash each key by its column's
# type (not what pgcat does today: it refuses a uuid key with pg_bigint_hash).
SHARDING_FUNCTION = "pg_text_hash"
HASH_AS = {
    "pg_text_hash": {"items": "text", "docs": "text", "events": "text", "events2": "text"},
    "pg_bigint_hash": {"items": "bigint", "docs": "uuid", "events": "bigint", "events2": "bigint"},
}[SHARDING_FUNCTION]

SCHEMA = """
CREATE TABLE items (id bigint PRIMARY KEY, v int, note text);
CREATE TABLE docs (id uuid PRIMARY KEY, body text, n int);
CREATE TABLE kinds (id int PRIMARY KEY, name text);
"""

COLUMNS = {"items": "id::text, v, note", "docs": "id::text, body, n", "kinds": "id::text, name",
           "events": "id::text, payload", "events2": "id::text, payload"}

# Every operation sets a row's state outright: running one again changes nothing.
OPS = {
    ("items", "upsert"): "INSERT INTO items (id, v, note) VALUES (%s, %s, %s) "
                         "ON CONFLICT (id) DO UPDATE SET v = excluded.v, note = excluded.note",
    ("items", "update"): "UPDATE items SET v = %s, note = %s WHERE id = %s",
    ("items", "delete"): "DELETE FROM items WHERE id = %s",
    ("docs", "upsert"): "INSERT INTO docs (id, body, n) VALUES (%s::uuid, %s, %s) "
                        "ON CONFLICT (id) DO UPDATE SET body = excluded.body, n = excluded.n",
    # leaves body alone: an UPDATE whose old TOASTed body pgoutput sends as "unchanged"
    ("docs", "set_n"): "UPDATE docs SET n = %s WHERE id = %s::uuid",
    ("docs", "delete"): "DELETE FROM docs WHERE id = %s::uuid",
    # reads by key (the load is read-write; a replay runs them too, to no effect)
    ("items", "read"): "SELECT id, v, note FROM items WHERE id = %s",
    ("docs", "read"): "SELECT id, body, n FROM docs WHERE id = %s::uuid",
}

N_CLIENTS = 8


# ---- the server and the databases ---------------------------------------------

@pytest.fixture(scope="module")
def rpg(pg_root):
    """This module's PostgreSQL: logical decoding on, its own roles."""
    s = PgServer(pg_root, "reshard-%d" % free_port())
    s.initdb()
    with open(s.datadir / "postgresql.conf", "a") as f:
        f.write("wal_level = logical\nmax_replication_slots = 20\nmax_wal_senders = 20\n")
    s.start()
    try:
        assert s.sql("SHOW wal_level", dbname="postgres") == [("logical",)]
        with s.connect("postgres") as c:
            c.execute("SET password_encryption = 'scram-sha-256'")
            c.execute("CREATE ROLE %s SUPERUSER REPLICATION LOGIN PASSWORD '%s'" % (USER, PASSWORD))
            c.execute("CREATE DATABASE %s" % HASH_DB)
        with s.connect(HASH_DB) as c:
            for t in ("text", "bigint", "uuid"):
                c.execute("CREATE TABLE hp_%s (id %s) PARTITION BY HASH (id)" % (t, t))
        yield s
    finally:
        s.stop()


def _drop_slots(s):
    def slots():
        return s.sql("SELECT slot_name, active_pid, database FROM pg_replication_slots", dbname="postgres")
    for _, pid, _ in slots():
        if pid:
            s.sql("SELECT pg_terminate_backend(%s)", (pid,), dbname="postgres")
    wait_until(lambda: all(pid is None for _, pid, _ in slots()), 15, msg="replication slots released")
    for name, _, db in slots():
        s.sql("SELECT pg_drop_replication_slot(%s)", (name,), dbname=db or "postgres")


def _reset(s):
    """No slot left, every database of the test made again; s0 and s1 with the schema."""
    _drop_slots(s)
    with s.connect("postgres") as c:
        for db in OLD_DBS + NEW_DBS + (REPLAY_DB,):
            c.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
            c.execute("CREATE DATABASE %s" % db)
    for db in OLD_DBS + (REPLAY_DB,):
        with s.connect(db) as c:
            c.execute(SCHEMA)


@pytest.fixture
def srv(request, rpg):
    _reset(rpg)
    off = rpg.log_offset()
    yield rpg
    failed = any(getattr(getattr(request.node, "rep_" + w, None), "failed", False) for w in ("setup", "call"))
    if failed:
        print("\n===== this module's PostgreSQL log during the test (last 80 lines) =====")
        print(rpg.log_since(off, 80))


# ---- where rows belong ----------------------------------------------------------

def expected_shards(s, table, keys, modulus):
    """{key text: shard} under `modulus` shards, by PostgreSQL's hash partitioning."""
    keys = list(keys)
    if not keys:
        return {}
    t = HASH_AS[table]
    with s.connect(HASH_DB) as c:
        rows = c.execute("SELECT k, r FROM unnest(%%s::text[]) k, generate_series(0, %%s - 1) r "
                         "WHERE satisfies_hash_partition('hp_%s'::regclass, %%s, r, k::%s)" % (t, t),
                         (keys, modulus, modulus)).fetchall()
    out = dict(rows)
    assert len(out) == len(rows) == len(set(keys)), "every key has exactly one shard"
    return out


def table_rows(s, db, table):
    return [tuple(r) for r in s.sql("SELECT %s FROM %s" % (COLUMNS[table], table), dbname=db)]


def placed_rows(s, dbs, table):
    """The rows of `table` over the layout `dbs` (shard i in database dbs[i]),
    as {key text: row}, after checking that each is on the shard the hash
    gives it and none is on two shards."""
    per = [table_rows(s, db, table) for db in dbs]
    counts = collections.Counter(r[0] for rows in per for r in rows)
    twice = [k for k, n in counts.items() if n > 1]
    assert not twice, "%s: %d keys on more than one shard of %s, e.g. %r" % (table, len(twice), dbs, twice[:5])
    exp = expected_shards(s, table, counts, len(dbs))
    bad = [(r[0], dbs[i], dbs[exp[r[0]]]) for i, rows in enumerate(per) for r in rows if exp[r[0]] != i]
    assert not bad, "%s: %d rows on the wrong shard of %s (key, on, belongs on), e.g. %r" % (
        table, len(bad), dbs, bad[:5])
    return {r[0]: r for rows in per for r in rows}


def checksum(rows):
    """count and md5 of the rows in key order ({key: row})."""
    h = hashlib.md5()
    for k in sorted(rows):
        h.update(repr(rows[k]).encode())
        h.update(b"\n")
    return len(rows), h.hexdigest()


def assert_same_rows(got, want, what):
    if checksum(got) == checksum(want):
        return
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    raise AssertionError(
        "%s: %s (count, md5) where %s was expected: %d missing (e.g. %r), %d extra (e.g. %r), "
        "%d different (e.g. %r)" % (what, checksum(got), checksum(want), len(missing), missing[:3],
                                    len(extra), extra[:3], len(differ),
                                    [(got[k][:2], want[k][:2]) for k in differ[:3]]))


def assert_layout_holds(s, dbs, want):
    """Every row of the sharded tables on its shard of the layout `dbs`, and
    the union exactly `want` ({table: {key: row}})."""
    for table in SHARDED:
        got = placed_rows(s, dbs, table)
        try:
            assert_same_rows(got, want[table], "%s over %s" % (table, ",".join(dbs)))
        except AssertionError as e:
            # where the rows that differ are, old shards included
            keys = sorted((set(got) ^ set(want[table])) | {k for k in set(got) & set(want[table])
                                                            if got[k] != want[table][k]})[:3]
            raise AssertionError("%s; held by: %r" % (e, {k: holders(s, table, k) for k in keys})) from None


def assert_kinds_everywhere(s, dbs, want):
    for db in dbs:
        assert sorted(table_rows(s, db, "kinds")) == want, "kinds on %s" % db


def holders(s, table, key):
    """The databases (old and new) where the row with this key is."""
    cast = "bigint" if table == "items" else "uuid"
    out = []
    for db in OLD_DBS + NEW_DBS:
        try:
            n = s.sql("SELECT count(*) FROM %s WHERE id = %%s::%s" % (table, cast), (str(key),), dbname=db)[0][0]
        except psycopg.errors.UndefinedTable:
            continue
        if n:
            out.append(db)
    return out


def assert_routed_to(p, s, dbs, tag, others=None):
    """pgcat routes pool app by the layout `dbs`: a row of each sharded table
    written through pgcat is on its shard of that layout and on no other
    shard of it nor of `others` (default: the other layout; () while a
    reshard replicates, which copies it there), and a read through pgcat by
    key sees a change made directly on that shard. The probe rows, (table,
    key) each: keys no client of the load owns."""
    if others is None:
        others = NEW_DBS if tuple(dbs) == OLD_DBS else OLD_DBS
    rnd = random.Random(tag)
    item = rnd.randrange(10 ** 12, 2 * 10 ** 12)
    doc = str(uuid.UUID(int=rnd.getrandbits(128)))
    with connect(p, autocommit=True) as c:
        c.execute(OPS[("items", "upsert")], (item, 1, "routed " + tag))
        c.execute(OPS[("docs", "upsert")], (doc, "routed " + tag, 1))
    for table, key in (("items", str(item)), ("docs", doc)):
        home = dbs[expected_shards(s, table, [key], len(dbs))[key]]
        found = [db for db in holders(s, table, key) if db in tuple(dbs) + tuple(others)]
        assert found == [home], "%s %s is on %r, expected on %s only" % (table, key, found, home)
        col = "note" if table == "items" else "body"
        s.sql("UPDATE %s SET %s = 'changed on %s' WHERE id = %%s::%s"
              % (table, col, home, "bigint" if table == "items" else "uuid"), (key,), dbname=home)
        with connect(p, autocommit=True) as c:
            got = c.execute("SELECT %s FROM %s WHERE id = %%s%s" % (col, table, "" if table == "items" else "::uuid"),
                            (int(key) if table == "items" else key,)).fetchall()
        assert got == [("changed on %s" % home,)], (table, key, got)
    return [("items", str(item)), ("docs", doc)]


def drop_probes(s, probes):
    """Deletes the rows assert_routed_to wrote (they are no client's) wherever they are."""
    for table, key in probes:
        for db in holders(s, table, key):
            s.sql("DELETE FROM %s WHERE id = %%s::%s" % (table, "bigint" if table == "items" else "uuid"),
                  (key,), dbname=db)


# ---- the data -------------------------------------------------------------------

def _note(rnd):
    return rnd.choice([None, "", "plain %d" % rnd.randrange(10 ** 6), "it's", "back\\slash \\x41",
                       "ünïcödé ✓", "tab\tnew\nline", "quote '' end", "x" * rnd.randrange(1, 300)])


def _value(rnd):
    return None if rnd.random() < 0.05 else rnd.randint(-2 ** 31, 2 ** 31 - 1)


def _body(rnd):
    if rnd.random() < 0.05:
        return rnd.randbytes(3000).hex()   # 6 kB that do not compress: stored out of line (TOAST)
    return None if rnd.random() < 0.03 else _note(rnd)


class Dataset:
    """Keys of each client (disjoint ranges), and the rows the source shards
    start with (a share of the keys present)."""

    def __init__(self, items_per_client, docs_per_client, present=0.6, seed=1):
        rnd = random.Random(seed)
        self.client_items, self.client_docs = [], []
        self.items, self.docs = {}, {}       # key -> row (key text first, as table_rows gives them)
        for c in range(N_CLIENTS):
            base = 4 * 10 ** 18 if c == N_CLIENTS - 1 else (c + 1) * 10 ** 9
            sign = -1 if c % 2 else 1
            ik = [sign * (base + k) for k in range(items_per_client)]
            dk = [str(uuid.UUID(int=rnd.getrandbits(128))) for _ in range(docs_per_client)]
            self.client_items.append(ik)
            self.client_docs.append(dk)
            for k in ik:
                if rnd.random() < present:
                    self.items[str(k)] = (str(k), _value(rnd), _note(rnd))
            for k in dk:
                if rnd.random() < present:
                    self.docs[k] = (k, _body(rnd), rnd.randrange(1000))
        self.kinds = [(str(i), "kind %d" % i) for i in range(1, 21)]

    def rows(self):
        return {"items": dict(self.items), "docs": dict(self.docs)}

    def copy_into(self, conn, items, docs, kinds=True):
        with conn.cursor() as cur:
            with cur.copy("COPY items (id, v, note) FROM STDIN") as cp:
                for r in items:
                    cp.write_row(r)
            with cur.copy("COPY docs (id, body, n) FROM STDIN") as cp:
                for r in docs:
                    cp.write_row(r)
            if kinds:
                with cur.copy("COPY kinds (id, name) FROM STDIN") as cp:
                    for r in self.kinds:
                        cp.write_row(r)

    def load(self, s):
        """Writes the starting rows straight into s0 and s1, each on its shard
        (pg hash, 2 shards); kinds whole on both."""
        where = {t: expected_shards(s, t, self.rows()[t], len(OLD_DBS)) for t in SHARDED}
        for i, db in enumerate(OLD_DBS):
            with s.connect(db) as c:
                self.copy_into(c, [r for k, r in self.items.items() if where["items"][k] == i],
                               [r for k, r in self.docs.items() if where["docs"][k] == i])


def replay(s, data, clients):
    """The starting rows, then every client's committed operations in its
    order, on the fresh database `replay`: {table: {key: row}}."""
    with s.connect(REPLAY_DB) as c:
        data.copy_into(c, data.items.values(), data.docs.values(), kinds=False)
        with c.pipeline():
            for cl in clients:
                for table, kind, params in cl.committed:
                    c.execute(OPS[(table, kind)], params)
    return {t: {r[0]: r for r in table_rows(s, REPLAY_DB, t)} for t in SHARDED}


# ---- pgcat and its console ----------------------------------------------------------

def layout(s, dbs):
    return {i: {"database": db, "servers": "127.0.0.1:%d:primary" % s.port} for i, db in enumerate(dbs)}


def start_pgcat(pgcat, s, tmp_path, workers=2, pools=None, peer_id=None, start=True, state="state",
                sharded_tables="items.id, docs.id"):
    general = {"workers": workers, "state_dir": str(tmp_path / state), "prepared_statements": "true"}
    if peer_id is not None:
        general["peer_id"] = peer_id
    pool = {
        "pool_mode": "transaction",
        "query_parser_enabled": "true",
        "sharding_function": SHARDING_FUNCTION,
        "sharded_tables": sharded_tables,
        "default_shard": "all",
        "shards": layout(s, OLD_DBS),
        "next": {"shards": layout(s, NEW_DBS)},
        "users": {USER: {"password": PASSWORD, "pool_size": "12"}},
    }
    all_pools = {POOL: pool}
    all_pools.update(pools or {})
    # pg_dump (schema copy) from PATH, as the reshard looks for it
    env = {"PATH": "%s:%s" % (PG_BIN, os.environ.get("PATH", "/usr/bin:/bin"))}
    return pgcat(general=general, replace_pools=all_pools, env=env, start=start)


def connect(p, dbname=POOL, autocommit=False, **kw):
    kw.setdefault("connect_timeout", 3)
    return p.connect(user=USER, password=PASSWORD, dbname=dbname, autocommit=autocommit, **kw)


def console(p, sql, timeout=30.0):
    """One command on a new admin connection (simple protocol):
    (command tag, rows as dicts, error fields or None)."""
    r = pgwire.Raw(p.host, p.port, timeout)
    try:
        r.login(ADMIN_USER, ADMIN_PASSWORD, "pgcat")
        r.send(pgwire.query(sql))
        cols, rows, tag, err, status = [], [], None, None, None
        for typ, payload in r.read_until((b"Z",), timeout):
            if typ == b"T":
                (n,) = struct.unpack("!H", payload[:2])
                off = 2
                for _ in range(n):
                    end = payload.index(b"\x00", off)
                    cols.append(payload[off:end].decode())
                    off = end + 1 + 18
            elif typ == b"D":
                rows.append(dict(zip(cols, pgwire.data_row_values(payload))))
            elif typ == b"C":
                tag = payload.rstrip(b"\x00").decode()
            elif typ == b"E":
                err = pgwire.parse_fields(payload)
            elif typ == b"Z":
                status = payload.decode()
        assert status == "I", "no ReadyForQuery (idle) after %r: tag %r, error %r" % (sql, tag, err)
        return tag, rows, err
    finally:
        r.close()


def run(p, sql):
    """A console command that must succeed; its tag."""
    tag, _, err = console(p, sql)
    assert err is None, "%s: %r" % (sql, err)
    return tag


def refused(p, sql):
    """A console command that must be answered with an error (and the console
    goes on: ReadyForQuery idle); the error's fields."""
    tag, _, err = console(p, sql)
    assert err is not None and err.get("S") in ("ERROR", "FATAL") and err.get("M"), \
        "%s: expected an error, got tag %r, %r" % (sql, tag, err)
    return err


SHOW_RESHARD_COLUMNS = ["pool", "phase", "source_shards", "target_shards", "tables", "tables_copied",
                        "rows_copied", "bytes_copied", "changes_applied", "lag_bytes", "pause_ms", "errors",
                        "last_error"]


def show_reshard(p):
    """SHOW RESHARD as {pool: row}."""
    tag, rows, err = console(p, "SHOW RESHARD", timeout=10)
    assert err is None, err
    for row in rows:
        assert list(row) == SHOW_RESHARD_COLUMNS, list(row)
    return {row["pool"]: row for row in rows}


def wait_phase(p, want, timeout, seen=None):
    """Polls SHOW RESHARD until pool app is in phase `want` (pgcat may be down
    meanwhile); a phase `failed` ends the wait at once. The row."""
    deadline = time.monotonic() + timeout
    last, last_exc = None, None
    while True:
        try:
            last = show_reshard(p).get(POOL)
            last_exc = None
        except (OSError, pgwire.ProtocolError, AssertionError) as e:
            last_exc = e
        if last is not None:
            if seen is not None and (not seen or seen[-1] != last["phase"]):
                seen.append(last["phase"])
            if last["phase"] == want:
                return last
            if last["phase"] in ("failed", "cancelled") and want not in ("failed", "cancelled"):
                raise AssertionError("reshard ended in phase %s (waiting for %s): %r" % (last["phase"], want, last))
        if time.monotonic() > deadline:
            raise AssertionError("no phase %s within %.0fs; last SHOW RESHARD row %r (last error %r)"
                                 % (want, timeout, last, last_exc))
        time.sleep(0.1)


def slots(s):
    return s.sql("SELECT slot_name, database, active FROM pg_replication_slots", dbname="postgres")


# ---- the load -------------------------------------------------------------------------

class Outages:
    """When pgcat was down: spans [killed, accepting again]. An error is the
    kill's doing (and not a failure) when the connection it happened on (or
    the connection attempt) began before pgcat accepted again and the error
    came after the kill. Everything else is a failure."""

    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()

    def killed(self):
        with self.lock:
            self.spans.append([time.monotonic(), None])

    def back(self):
        with self.lock:
            self.spans[-1][1] = time.monotonic()

    def excuses(self, since, at):
        with self.lock:
            return any(at >= k and since <= (r if r is not None else float("inf")) for k, r in self.spans)


class Client(threading.Thread):
    def __init__(self, n, p, data, outages, stop):
        super().__init__(daemon=True, name="client-%d" % n)
        self.n, self.p, self.outages, self.stop_ev = n, p, outages, stop
        self.rnd = random.Random(1000 + n)
        self.items = data.client_items[n]
        self.docs = data.client_docs[n]
        self.m_items = {k for k in self.items if str(k) in data.items}   # keys present, by our own writes
        self.m_docs = {k for k in self.docs if k in data.docs}
        self.committed = []     # (table, kind, params), in commit order
        self.spans = []         # (start, end) of every committed transaction
        self.failures = []      # (time, error) not excused by an outage
        self.excused = 0
        self.stuck_since = None
        self.unresolved = None

    def next_op(self):
        rnd = self.rnd
        if rnd.random() < 0.2:
            if rnd.random() < 0.5:
                return ("items", "read", (rnd.choice(self.items),))
            return ("docs", "read", (rnd.choice(self.docs),))
        if rnd.random() < 0.6:
            k = rnd.choice(self.items)
            here, r = k in self.m_items, rnd.random()
            if here and r < 0.5:
                return ("items", "update", (_value(rnd), _note(rnd), k))
            if here and r < 0.75:
                return ("items", "delete", (k,))
            return ("items", "upsert", (k, _value(rnd), _note(rnd)))
        k = rnd.choice(self.docs)
        here, r = k in self.m_docs, rnd.random()
        if here and r < 0.45:
            return ("docs", "set_n", (rnd.randrange(10 ** 6), k))
        if here and r < 0.7:
            return ("docs", "delete", (k,))
        return ("docs", "upsert", (k, _body(rnd), rnd.randrange(10 ** 6)))

    def _model(self, op):
        table, kind, params = op
        keys = self.m_items if table == "items" else self.m_docs
        if kind == "upsert":
            keys.add(params[0])
        elif kind == "delete":
            keys.discard(params[0])

    def run(self):
        conn, since = None, None
        while not self.stop_ev.is_set():
            op = self.next_op()
            attempts, give_up = 0, None
            while True:
                t0 = time.monotonic()
                self.stuck_since = t0
                try:
                    if conn is None or conn.closed:
                        since = t0
                        conn = connect(self.p)
                    t0 = time.monotonic()
                    conn.execute(OPS[op[:2]], op[2])
                    conn.commit()
                    self.spans.append((t0, time.monotonic()))
                    self.committed.append(op)
                    self._model(op)
                    break
                except Exception as e:   # noqa: BLE001 - any error of a transaction counts
                    at = time.monotonic()
                    if self.outages.excuses(since, at):
                        self.excused += 1
                    else:
                        self.failures.append((at, "%s: %r" % (op[:2], e)))
                        attempts += 1
                    if conn is not None and not conn.closed and not conn.broken:
                        with contextlib.suppress(psycopg.Error):
                            conn.rollback()
                    else:
                        with contextlib.suppress(Exception):
                            conn.close()
                        conn = None
                    # The operation may or may not have committed: run it again
                    # (it sets the row outright) until it is known to have.
                    # After failures that no outage excuses, give up (the test
                    # fails on those anyway); when stopping, give an outage 30 s.
                    if attempts >= 3:
                        self.unresolved = op
                        break
                    if self.stop_ev.is_set():
                        give_up = give_up or at + 30
                        if at > give_up:
                            self.unresolved = op
                            break
                    time.sleep(0.05)
                finally:
                    self.stuck_since = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


class Load:
    def __init__(self, p, data, clients=range(N_CLIENTS)):
        self.outages = Outages()
        self.stop_ev = threading.Event()
        self.clients = [Client(i, p, data, self.outages, self.stop_ev) for i in clients]

    def start(self):
        for c in self.clients:
            c.start()
        self.wait_commits(20)
        return self

    def commits_after(self, t):
        return [sum(1 for s, _ in c.spans if s >= t) for c in self.clients]

    def wait_commits(self, n, after=0.0, timeout=30):
        """Every client committed n transactions begun after `after`."""
        wait_until(lambda: min(self.commits_after(after)) >= n, timeout,
                   msg="every client committing (per client: %r; failures: %r)"
                   % (self.commits_after(after), self.failures()[:3]))

    def stop(self):
        self.stop_ev.set()
        for c in self.clients:
            c.join(60)
        now = time.monotonic()
        alive = [(c.name, None if c.stuck_since is None else round(now - c.stuck_since, 1))
                 for c in self.clients if c.is_alive()]
        assert not alive, "clients still running 60 s after the stop (name, seconds in their transaction): %r" % alive

    def failures(self):
        return sorted(f for c in self.clients for f in c.failures)

    def check_clean(self):
        """0 failed transactions (those an outage of pgcat excuses aside), and
        every operation's outcome known."""
        fails = self.failures()
        assert not fails, "%d failed transactions outside pgcat's outages, first: %r" % (len(fails), fails[:5])
        unresolved = [(c.name, c.unresolved) for c in self.clients if c.unresolved]
        assert not unresolved, unresolved

    def max_latency(self, t_from, t_to):
        """The longest transaction that overlapped [t_from, t_to], and how many did."""
        spans = [(e - s) for c in self.clients for s, e in c.spans if s <= t_to and e >= t_from]
        return (max(spans) if spans else None), len(spans)

    def total(self):
        return sum(len(c.committed) for c in self.clients)


def kill_and_restart(p, load):
    """SIGKILL pgcat's whole process group (supervisor and workers), then the
    same binary, config and state_dir again."""
    p.stopped_by_test = True     # the fixture is not to take the -9 for a crash
    load.outages.killed()
    p.kill_group()
    wait_until(lambda: not p.group_alive(), 10, msg="pgcat's process group gone after SIGKILL")
    p.log_fh.close()
    p.start()
    load.outages.back()




# ---- the tests ------------------------------------------------------------------------

def test_load_harness_on_the_old_layout(pgcat, srv, tmp_path):
    """No reshard: with the target layout in the file, pool app is routed by
    [pools.app.shards.N] only (rows on s0/s1 as the hash says for modulus 2,
    n0..n3 untouched, no slot), and the load, with pgcat SIGKILLed and
    started again under it, ends with 0 failures outside the outage and the
    replay of the clients' committed operations equal to the shards' rows.
    The check of this module's machinery that the reshard tests rely on."""
    data = Dataset(items_per_client=60, docs_per_client=40)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert_layout_holds(srv, OLD_DBS, data.rows())
    drop_probes(srv, assert_routed_to(p, srv, OLD_DBS, "old"))
    load = Load(p, data)
    try:
        load.start()
        time.sleep(1)
        kill_and_restart(p, load)
        load.wait_commits(10, after=load.outages.spans[-1][1])
        time.sleep(1)
    finally:
        load.stop()
    load.check_clean()
    assert sum(c.excused for c in load.clients) >= 1, "no client noticed the kill"
    assert load.total() > 200, load.total()
    want = replay(srv, data, load.clients)
    assert_layout_holds(srv, OLD_DBS, want)
    assert_kinds_everywhere(srv, OLD_DBS, sorted(data.kinds))
    for db in NEW_DBS:
        assert srv.sql("SELECT count(*) FROM pg_class WHERE relname IN ('items', 'docs', 'kinds')",
                       dbname=db) == [(0,)], db
    assert slots(srv) == []
    _checks_can_fail(srv, want)


def _checks_can_fail(s, want):
    """The row checks above catch a changed value, a row on the wrong shard,
    a row on two shards and a missing row (a checker that cannot fail would
    make the reshard tests pass whatever the reshard did)."""
    k = next(iter(want["items"]))
    row = want["items"][k]
    home = OLD_DBS[expected_shards(s, "items", [k], 2)[k]]
    away = OLD_DBS[1 - OLD_DBS.index(home)]
    tampers = [
        ("different", [(home, "UPDATE items SET v = coalesce(v, 0) + 1 WHERE id = %s", (int(k),))],
         [(home, "UPDATE items SET v = %s WHERE id = %s", (row[1], int(k)))]),
        ("wrong shard", [(home, "DELETE FROM items WHERE id = %s", (int(k),)),
                         (away, "INSERT INTO items VALUES (%s, %s, %s)", (int(k), row[1], row[2]))],
         [(away, "DELETE FROM items WHERE id = %s", (int(k),)),
          (home, "INSERT INTO items VALUES (%s, %s, %s)", (int(k), row[1], row[2]))]),
        ("on two shards", [(away, "INSERT INTO items VALUES (%s, %s, %s)", (int(k), row[1], row[2]))],
         [(away, "DELETE FROM items WHERE id = %s", (int(k),))]),
        ("missing", [(home, "DELETE FROM items WHERE id = %s", (int(k),))],
         [(home, "INSERT INTO items VALUES (%s, %s, %s)", (int(k), row[1], row[2]))]),
    ]
    for what, do, undo in tampers:
        for db, sql, args in do:
            s.sql(sql, args, dbname=db)
        with pytest.raises(AssertionError):
            assert_layout_holds(s, OLD_DBS, want)
        for db, sql, args in undo:
            s.sql(sql, args, dbname=db)
        assert_layout_holds(s, OLD_DBS, want)


def test_reshard_two_to_four_without_load(pgcat, srv, tmp_path):
    """RESHARD app with no client writing: phase done by itself; each row of
    items and docs on its shard of the 4-shard layout, their union exactly the
    source rows, kinds whole on every new shard; pgcat then routes by the new
    layout (also once restarted: the state is in state_dir, while the file
    still lists the old layout under shards); CLEANUP empties the moved
    tables on the old shards and drops the slots."""
    data = Dataset(items_per_client=50, docs_per_client=40)
    data.load(srv)
    source = {t: placed_rows(srv, OLD_DBS, t) for t in SHARDED}
    assert source == data.rows()
    assert len(source["items"]) > 200 and len(source["docs"]) > 150
    p = start_pgcat(pgcat, srv, tmp_path)
    assert show_reshard(p) == {}

    assert run(p, "RESHARD app") == "RESHARD"
    seen = []
    row = wait_phase(p, "done", 120, seen)
    assert seen[-1] == "done" and set(seen) <= {"copy", "replicate", "cutover", "done"}, seen
    assert (row["source_shards"], row["target_shards"]) == ("2", "4"), row
    assert row["tables"] == "3" and row["tables_copied"] == "3", row       # items, docs, kinds
    assert int(row["rows_copied"]) >= len(source["items"]) + len(source["docs"]), row
    assert int(row["bytes_copied"]) > 0, row
    assert row["errors"] == "0", row
    assert 0 <= int(row["pause_ms"]) < 1000, row
    # per table and source shard: each old shard's rows of items and docs,
    # kinds from source shard 0 only
    tag, parts, err = console(p, "SHOW RESHARD TABLES")
    assert err is None, err
    got = {(r["table"], r["source_shard"]): int(r["rows_copied"]) for r in parts if r["pool"] == POOL}
    want = {("public.kinds", "0"): len(data.kinds)}
    for i, db in enumerate(OLD_DBS):
        for t in SHARDED:
            want[("public." + t, str(i))] = srv.sql("SELECT count(*) FROM %s" % t, dbname=db)[0][0]
    assert got == want, (got, want)
    assert all(r["errors"] == "0" and int(r["bytes_copied"]) > 0 for r in parts), parts

    assert_layout_holds(srv, NEW_DBS, source)
    assert_kinds_everywhere(srv, NEW_DBS, sorted(data.kinds))
    # nothing taken from the old shards before CLEANUP
    assert_layout_holds(srv, OLD_DBS, source)

    probes = assert_routed_to(p, srv, NEW_DBS, "new")
    rc = p.stop()
    assert rc == 0, rc
    p.log_fh.close()
    p.start()
    assert show_reshard(p)[POOL]["phase"] == "done"
    probes += assert_routed_to(p, srv, NEW_DBS, "new, restarted")

    run(p, "RESHARD CLEANUP app")

    def old_emptied():
        return all(srv.sql("SELECT (SELECT count(*) FROM items) + (SELECT count(*) FROM docs)", dbname=db)
                   == [(0,)] for db in OLD_DBS)
    wait_until(old_emptied, 30, msg="items and docs emptied on s0 and s1")
    wait_until(lambda: slots(srv) == [], 30, msg="no replication slot left (%r)" % (slots(srv),))
    drop_probes(srv, probes)
    assert_layout_holds(srv, NEW_DBS, source)
    assert_kinds_everywhere(srv, NEW_DBS, sorted(data.kinds))
    drop_probes(srv, assert_routed_to(p, srv, NEW_DBS, "new, cleaned up"))


def test_reshard_under_load_with_kill(pgcat, srv, tmp_path):
    """The issue's done-when. 8 clients insert, update (keeping the key) and
    delete rows of items (bigint key) and docs (uuid key) through pgcat the
    whole time. RESHARD app HOLD; in phase replicate pgcat's process group is
    SIGKILLed and started again: the reshard comes back in replicate by
    itself and stays there (HOLD); RESHARD CUTOVER app; done; 2 s more.

    0 failed transactions: a client counts every error of a transaction as a
    failure, except the errors of connections (and connection attempts) that
    pgcat's SIGKILL broke or that pgcat, down, refused (Outages); the
    operation a client had in flight at the kill is run again once connected
    (every operation sets its row outright, so a second run changes nothing
    whether the first committed or not). The cutover paused writes for under
    a second (pause_ms) and no transaction overlapping it took 1.5 s or more.
    Afterwards every row is on its shard of the new layout, the union of
    n0..n3 is exactly the replay of every client's committed operations on a
    fresh database, and nothing was written to s0/s1 after done."""
    data = Dataset(items_per_client=300, docs_per_client=150)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path)
    load = Load(p, data)
    seen = []
    try:
        load.start()
        assert run(p, "RESHARD app HOLD") == "RESHARD"
        wait_phase(p, "replicate", 90, seen)
        load.wait_commits(10, after=time.monotonic())      # writes go on in replicate

        kill_and_restart(p, load)
        back = load.outages.spans[-1][1]
        wait_phase(p, "replicate", 60, seen)
        load.wait_commits(10, after=back)                  # every client reconnected
        time.sleep(3)
        row = show_reshard(p)[POOL]
        assert row["phase"] == "replicate", "HOLD was not kept across the restart: %r" % row
        assert int(row["changes_applied"]) > 0, row

        t_cut = time.monotonic()
        run(p, "RESHARD CUTOVER app")
        done = wait_phase(p, "done", 60, seen)
        t_done = time.monotonic()
        old_at_done = {(db, t): sorted(table_rows(srv, db, t)) for db in OLD_DBS for t in SHARDED}
        load.wait_commits(10, after=t_done)
        time.sleep(2)
    finally:
        load.stop()
    assert set(seen) <= {"copy", "replicate", "cutover", "done"}, seen
    load.check_clean()
    assert sum(c.excused for c in load.clients) >= 1, "no client noticed the kill"
    assert 0 <= int(done["pause_ms"]) < 1000, done
    worst, n = load.max_latency(t_cut, t_done)
    assert n > 0, "no transaction overlapped the cutover"
    assert worst < 1.5, "a transaction overlapping the cutover took %.3f s" % worst
    final = show_reshard(p)[POOL]
    assert final["phase"] == "done" and final["source_shards"] == "2" and final["target_shards"] == "4", final

    want = replay(srv, data, load.clients)
    assert_layout_holds(srv, NEW_DBS, want)
    assert_kinds_everywhere(srv, NEW_DBS, sorted(data.kinds))
    for (db, t), rows in old_at_done.items():
        assert sorted(table_rows(srv, db, t)) == rows, "%s.%s changed after the reshard was done" % (db, t)
    drop_probes(srv, assert_routed_to(p, srv, NEW_DBS, "after the load"))


class Waiter(threading.Thread):
    """One statement on connection `conn` (autocommit), run in the
    background: `.done` is when it returned (None while it waits), or the
    exception it raised."""

    def __init__(self, conn, sql, params):
        super().__init__(daemon=True)
        self.conn, self.sql, self.params, self.done = conn, sql, params, None

    def run(self):
        try:
            self.conn.execute(self.sql, self.params)
            self.done = time.monotonic()
        except Exception as e:      # noqa: BLE001 (the test reports it)
            self.done = e


def test_reshard_cutover_pauses_writes_not_reads(pgcat, srv, tmp_path):
    """The cutover pauses writes, not reads. A client holds a write
    transaction open on the old layout, so the cutover waits for it (up to
    its 2 s drain limit) with the pool's writes paused. Meanwhile: an INSERT
    waits; a read by key and a transaction begun READ ONLY are answered at
    once, from the old layout; a request that begins with a read and then
    writes (one extended-protocol batch) gets its read and an error 25006 for
    its write, which lands nowhere. The writer commits, the cutover ends
    (done), the waiting INSERT lands on its shard of the new layout only."""
    data = Dataset(items_per_client=20, docs_per_client=10)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert run(p, "RESHARD app HOLD") == "RESHARD"
    wait_phase(p, "replicate", 90)
    held_key, read_key = sorted(data.items)[:2]
    read_row = data.items[read_key]
    batch_key = str(3 * 10 ** 12 + 7)      # no client's, not present
    late_key = str(3 * 10 ** 12 + 8)
    blocker = connect(p)
    reader = connect(p, autocommit=True)
    ro = connect(p)
    ro.read_only = True
    late = connect(p, autocommit=True)
    raw = pgwire.Raw(p.host, p.port, 10)
    raw.login(USER, PASSWORD, POOL)
    writer = Waiter(late, OPS[("items", "upsert")], (int(late_key), 8, "late"))
    try:
        blocker.execute("UPDATE items SET v = -1 WHERE id = %s", (int(held_key),))
        run(p, "RESHARD CUTOVER app")
        wait_phase(p, "cutover", 10)
        t_paused = time.monotonic()
        time.sleep(0.2)                     # every worker has the pause
        writer.start()
        time.sleep(0.3)
        assert writer.done is None, "a write went through during the cutover's pause: %r" % writer.done

        t0 = time.monotonic()
        got = reader.execute("SELECT id::text, v, note FROM items WHERE id = %s", (int(read_key),)).fetchall()
        t_read = time.monotonic() - t0
        assert got == [read_row], got
        got = ro.execute("SELECT id::text, v, note FROM items WHERE id = %s", (int(read_key),)).fetchall()
        ro.commit()
        assert got == [read_row], got
        raw.send(pgwire.parse("SELECT id::text FROM items WHERE id = $1") + pgwire.bind([read_key]) +
                 pgwire.execute() +
                 pgwire.parse("INSERT INTO items (id, v, note) VALUES ($1, 1, 'batch')") +
                 pgwire.bind([batch_key]) + pgwire.execute() + pgwire.sync())
        rows, err, status = raw.collect(5)
        t_all = time.monotonic() - t0
        assert rows == [[read_key]], rows
        assert err is not None and err.get("C") == "25006" and "reshard" in err.get("M", ""), err
        assert status == "I", status
        assert t_read < 0.5 and t_all < 1.0, "reads took %.3f s (all %.3f s) during the pause" % (t_read, t_all)
        assert writer.done is None, "a write went through during the cutover's pause: %r" % writer.done
        assert show_reshard(p)[POOL]["phase"] == "cutover", "the reads did not run during the pause"
        assert time.monotonic() - t_paused < 1.5, "too slow to finish before the drain limit"
        blocker.commit()
        done = wait_phase(p, "done", 30)
        writer.join(10)
        assert isinstance(writer.done, float), writer.done
        assert writer.done > t_paused + 0.4
        assert 0 < int(done["pause_ms"]) < 2000, done
    finally:
        for c in (blocker, reader, ro, late):
            c.close()
        raw.close()
    assert holders(srv, "items", batch_key) == [], "the refused write landed somewhere"
    home = NEW_DBS[expected_shards(srv, "items", [late_key], len(NEW_DBS))[late_key]]
    assert holders(srv, "items", late_key) == [home], holders(srv, "items", late_key)
    assert srv.sql("SELECT v FROM items WHERE id = %s", (int(held_key),),
                   dbname=NEW_DBS[expected_shards(srv, "items", [held_key], len(NEW_DBS))[held_key]]) == [(-1,)]
    drop_probes(srv, [("items", late_key)])
    drop_probes(srv, assert_routed_to(p, srv, NEW_DBS, "after a paused cutover"))


def test_reshard_cutover_keeps_an_operators_pause(pgcat, srv, tmp_path):
    """The cutover's write pause is its own: a pool the operator PAUSEd
    stays paused through a cutover (its clients keep waiting), and RESUME
    then serves them, over the new layout."""
    data = Dataset(items_per_client=10, docs_per_client=5)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert run(p, "RESHARD app HOLD") == "RESHARD"
    wait_phase(p, "replicate", 90)
    key = str(3 * 10 ** 12 + 11)
    c = connect(p, autocommit=True)
    assert run(p, "PAUSE app") == "PAUSE"
    t = Waiter(c, OPS[("items", "upsert")], (int(key), 3, "after pause"))
    try:
        t.start()
        run(p, "RESHARD CUTOVER app")
        wait_phase(p, "done", 30)
        time.sleep(0.5)
        assert t.done is None, "the cutover ended the operator's PAUSE: %r" % t.done
        t_resume = time.monotonic()
        assert run(p, "RESUME app") == "RESUME"
        t.join(10)
        assert isinstance(t.done, float) and t.done >= t_resume, t.done
    finally:
        c.close()
    home = NEW_DBS[expected_shards(srv, "items", [key], len(NEW_DBS))[key]]
    assert holders(srv, "items", key) == [home], holders(srv, "items", key)
    drop_probes(srv, [("items", key)])


def test_reshard_killed_while_copying(pgcat, srv, tmp_path):
    """pgcat SIGKILLed in phase copy (two 300,000-row tables on the way, a
    source shard copying two tables at once): started again it goes on by
    itself, copying again from the start (the new shards' tables emptied,
    the slots made again), and after the cutover every row is on its new
    shard exactly once."""
    data = Dataset(items_per_client=10, docs_per_client=10)
    data.load(srv)
    for db, first in zip(OLD_DBS, (1, 150001)):
        for t in ("events", "events2"):
            srv.sql("CREATE TABLE %s (id bigint PRIMARY KEY, payload text); "
                    "INSERT INTO %s SELECT g, repeat('e', 100) FROM generate_series(%d, %d) g"
                    % (t, t, first, first + 149999), dbname=db)
    p = start_pgcat(pgcat, srv, tmp_path, sharded_tables="items.id, docs.id, events.id, events2.id")
    assert run(p, "RESHARD app HOLD") == "RESHARD"

    def copying():
        row = show_reshard(p).get(POOL)
        return row is not None and row["phase"] == "copy" and int(row["rows_copied"]) > 1000
    wait_until(copying, 60, interval=0.02, msg="rows being copied")
    # two tables at a time on a source shard (its copy lanes)
    wait_until(lambda: srv.sql("SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM pg_stat_activity "
                               "WHERE query LIKE 'COPY %%TO STDOUT' AND state = 'active' GROUP BY datname) c",
                               dbname="postgres")[0][0] >= 2, 30, interval=0.02,
               msg="two tables copied at once from one source shard")
    p.stopped_by_test = True
    p.kill_group()
    wait_until(lambda: not p.group_alive(), 10, msg="pgcat's process group gone after SIGKILL")
    p.log_fh.close()
    p.start()
    wait_phase(p, "replicate", 120)
    assert len(slots(srv)) == len(OLD_DBS), slots(srv)
    run(p, "RESHARD CUTOVER app")
    wait_phase(p, "done", 60)
    for t in ("events", "events2"):
        moved = placed_rows(srv, NEW_DBS, t)
        assert len(moved) == 300000, (t, len(moved))
    assert_layout_holds(srv, NEW_DBS, data.rows())
    assert_kinds_everywhere(srv, NEW_DBS, sorted(data.kinds))
    wait_until(lambda: slots(srv) == [], 30, msg="no slot left (%r)" % (slots(srv),))


def test_reshard_cancel(pgcat, srv, tmp_path):
    """RESHARD app HOLD, phase replicate (a slot per source shard), RESHARD
    CANCEL app: phase cancelled, no slot left on the source server, and pool
    app still routed by the old layout, also after a restart of pgcat (a
    cancelled reshard is not resumed)."""
    data = Dataset(items_per_client=40, docs_per_client=30)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert run(p, "RESHARD app HOLD") == "RESHARD"
    wait_phase(p, "replicate", 90)
    assert len(slots(srv)) == len(OLD_DBS), slots(srv)
    # replicating: a write through pgcat still goes to the old layout
    probes = assert_routed_to(p, srv, OLD_DBS, "replicating", others=())

    run(p, "RESHARD CANCEL")   # the pool is optional: the one with a reshard
    row = wait_phase(p, "cancelled", 30)
    assert (row["source_shards"], row["target_shards"]) == ("2", "4"), row
    wait_until(lambda: slots(srv) == [], 30, msg="no replication slot left (%r)" % (slots(srv),))
    assert srv.sql("SELECT count(*) FROM pg_stat_replication", dbname="postgres") == [(0,)]
    probes += assert_routed_to(p, srv, OLD_DBS, "cancelled")

    rc = p.stop()
    assert rc == 0, rc
    p.log_fh.close()
    p.start()
    time.sleep(1)   # time enough for a wrongly resumed reshard to make its slots again
    assert show_reshard(p)[POOL]["phase"] == "cancelled"
    assert slots(srv) == []
    probes += assert_routed_to(p, srv, OLD_DBS, "cancelled, restarted")
    for t, key in probes:
        for db in holders(srv, t, key):
            if db in OLD_DBS:
                srv.sql("DELETE FROM %s WHERE id = %%s::%s" % (t, "bigint" if t == "items" else "uuid"),
                        (key,), dbname=db)
    assert_layout_holds(srv, OLD_DBS, data.rows())

    # Started again to the same layout: the schema is on the new shards
    # already (their tables are emptied and the copy starts afresh).
    assert run(p, "RESHARD app") == "RESHARD"
    wait_phase(p, "done", 90)
    assert_layout_holds(srv, NEW_DBS, data.rows())
    assert_kinds_everywhere(srv, NEW_DBS, sorted(data.kinds))


def test_reshard_big_transactions(pgcat, srv, tmp_path):
    """Changes whose statements pass the 1 MB a new shard is sent at once:
    a row of 1.5 MB, and one source transaction of 3,000 rows. Both are on
    their new shards after the cutover, committed (not left open there).
    The cutover also sets every sequence of the new shards to the highest
    value of the sources, and closes a session that had SET its sharding
    key (its shard number was the old layout's)."""
    data = Dataset(items_per_client=10, docs_per_client=10)
    data.load(srv)
    for db in OLD_DBS:
        srv.sql("CREATE SEQUENCE tickets", dbname=db)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert run(p, "RESHARD app HOLD") == "RESHARD"
    wait_phase(p, "replicate", 90)
    big = "b" * (1536 * 1024)
    key = "00000000-0000-4000-8000-00000000b16b"
    # straight into its old shard (pgcat routes Binds of this size by the
    # default shard: not what this test is about)
    old = OLD_DBS[expected_shards(srv, "docs", [key], 2)[key]]
    srv.sql(OPS[("docs", "upsert")], (key, big, 7), dbname=old)
    # one transaction on one shard: keys pgcat routes to the same old shard
    shard_of = expected_shards(srv, "items", [str(k) for k in range(9 * 10 ** 12, 9 * 10 ** 12 + 8000)], 2)
    same = [int(k) for k, r in sorted(shard_of.items()) if r == 0][:3000]
    assert len(same) == 3000
    with connect(p) as c:
        for k in same:
            c.execute("INSERT INTO items (id, v, note) VALUES (%s, %s, %s)", (k, 1, "x" * 300), prepare=False)
        c.commit()
    # a sequence the sources took values of (the new shards start above them)
    for db, last in zip(OLD_DBS, (100, 250)):
        srv.sql("SELECT setval('tickets', %d)" % last, dbname=db)
    # a session that chose its shard by key: its number is the old layout's
    pinned = connect(p, autocommit=True)
    pinned.execute("SET SHARDING KEY TO '42'")
    run(p, "RESHARD CUTOVER app")
    wait_phase(p, "done", 60)
    with pytest.raises(psycopg.OperationalError, match="SET SHARD"):
        pinned.execute("SELECT 1")
    pinned.close()
    for db in NEW_DBS:
        assert srv.sql("SELECT last_value FROM tickets", dbname=db) == [(250,)], db
    assert srv.sql("SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
                   "AND datname LIKE 'n%%'", dbname="postgres") == [(0,)]
    got = placed_rows(srv, NEW_DBS, "docs")
    assert key in got and got[key][1] == big, "the 1.5 MB row is not on its new shard"
    n = sum(srv.sql("SELECT count(*) FROM items WHERE id >= 9000000000000", dbname=db)[0][0] for db in NEW_DBS)
    assert n == len(same), n


def test_reshard_refuses_a_table_without_key(pgcat, srv, tmp_path):
    """A table whose updates and deletes could not be applied by key (no
    primary key, no replica identity index) stops the reshard before it
    changes anything: phase failed with the table's name, no slot and no
    publication left on the sources, and the application's updates of that
    table keep working on the old shards."""
    data = Dataset(items_per_client=10, docs_per_client=10)
    data.load(srv)
    for db in OLD_DBS:
        srv.sql("CREATE TABLE logs (at timestamptz DEFAULT now(), line text); INSERT INTO logs (line) VALUES ('a')",
                dbname=db)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert run(p, "RESHARD app") == "RESHARD"
    row = wait_phase(p, "failed", 60)
    assert "logs" in row["last_error"] and "key" in row["last_error"], row
    wait_until(lambda: slots(srv) == [], 30, msg="no slot left (%r)" % (slots(srv),))
    for db in OLD_DBS:
        assert srv.sql("SELECT count(*) FROM pg_publication", dbname=db) == [(0,)]
        srv.sql("UPDATE logs SET line = 'b'", dbname=db)   # not refused for want of a replica identity
    assert_routed_to(p, srv, OLD_DBS, "refused", others=())


def test_reshard_reads_sharded_tables_as_the_router_does(pgcat, srv, tmp_path):
    """sharded_tables names its tables in any case and with or without the
    schema, as the router reads them: the reshard moves them by key all the
    same (not as tables kept whole). An entry naming no table refuses the
    reshard before anything changes."""
    data = Dataset(items_per_client=20, docs_per_client=20)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path, sharded_tables="Items.ID, public.Docs.id")
    assert run(p, "RESHARD app") == "RESHARD"
    wait_phase(p, "done", 90)
    assert_layout_holds(srv, NEW_DBS, data.rows())
    p.stop()
    p.log_fh.close()
    srv.sql("SELECT 1", dbname="postgres")
    q = start_pgcat(pgcat, srv, tmp_path, sharded_tables="items.id, docs.id, orders.id", state="state-2")
    assert run(q, "RESHARD app") == "RESHARD"
    row = wait_phase(q, "failed", 60)
    assert "orders.id" in row["last_error"], row
    wait_until(lambda: slots(srv) == [], 30, msg="no slot left (%r)" % (slots(srv),))


def test_reshard_table_created_meanwhile_stops_the_cutover(pgcat, srv, tmp_path):
    """A table created on the sources during the reshard is in no publication
    and on no new shard (DDL is not replicated): the reshard does not cut
    over, it fails with the reason, and the pool stays on its old layout."""
    data = Dataset(items_per_client=10, docs_per_client=10)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert run(p, "RESHARD app HOLD") == "RESHARD"
    wait_phase(p, "replicate", 90)
    for db in OLD_DBS:
        srv.sql("CREATE TABLE late (id int PRIMARY KEY)", dbname=db)
    run(p, "RESHARD CUTOVER app")
    row = wait_phase(p, "failed", 60)
    assert "created or dropped" in row["last_error"], row
    assert row["pause_ms"] == "0", row
    wait_until(lambda: slots(srv) == [], 30, msg="no slot left (%r)" % (slots(srv),))
    drop_probes(srv, assert_routed_to(p, srv, OLD_DBS, "not cut over", others=()))


def test_reshard_destination_fails(pgcat, srv, tmp_path):
    """A new shard that fails during replication stops the reshard with an
    error naming it (phase failed), the pool keeps serving on the old layout,
    the replication slots are dropped by themselves (no WAL kept on the
    sources), and a restarted pgcat does not take the reshard up again."""
    data = Dataset(items_per_client=40, docs_per_client=30)
    data.load(srv)
    p = start_pgcat(pgcat, srv, tmp_path)
    assert run(p, "RESHARD app HOLD") == "RESHARD"
    wait_phase(p, "replicate", 90)
    assert len(slots(srv)) == len(OLD_DBS), slots(srv)
    killed = srv.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                     "WHERE application_name LIKE 'pgcat reshard %%' AND datname = 'n2'", dbname="postgres")
    assert killed[0][0] >= 1, killed
    row = wait_phase(p, "failed", 30)
    assert "new shard 2" in row["last_error"] and "n2" in row["last_error"], row
    assert int(row["errors"]) >= 1, row
    wait_until(lambda: slots(srv) == [], 30, msg="the failed reshard's slots dropped (%r)" % (slots(srv),))
    probes = assert_routed_to(p, srv, OLD_DBS, "failed")
    rc = p.stop()
    assert rc == 0, rc
    p.log_fh.close()
    p.start()
    time.sleep(1)
    assert show_reshard(p)[POOL]["phase"] == "failed"
    assert slots(srv) == []
    probes += assert_routed_to(p, srv, OLD_DBS, "failed, restarted")
    drop_probes(srv, probes)
    assert_layout_holds(srv, OLD_DBS, data.rows())


def test_reshard_switches_the_peers(pgcat, srv, tmp_path):
    """Two instances in front of the same pool ([peers], each with its own
    state_dir), a keyed load through both: the reshard run by instance 1
    pauses instance 2 at its cutover (PAUSE on its console), switches it
    (RESHARD SWITCH) and resumes it. Afterwards both route over the new
    layout, also instance 2 once restarted, and the rows are those of a
    replay of every client's operations."""
    data = Dataset(items_per_client=60, docs_per_client=30)
    data.load(srv)
    a = start_pgcat(pgcat, srv, tmp_path, peer_id=1, start=False, state="state-a")
    b = start_pgcat(pgcat, srv, tmp_path, peer_id=2, start=False, state="state-b")
    every = {1: "127.0.0.1:%d" % a.port, 2: "127.0.0.1:%d" % b.port}
    for inst in (a, b):
        inst.peers = every
        inst.start()
    load_a, load_b = Load(a, data, clients=range(0, 4)), Load(b, data, clients=range(4, 8))
    try:
        load_a.start()
        load_b.start()
        assert run(a, "RESHARD app HOLD") == "RESHARD"
        wait_phase(a, "replicate", 90)
        load_a.wait_commits(5, after=time.monotonic())
        load_b.wait_commits(5, after=time.monotonic())
        t_cut = time.monotonic()
        run(a, "RESHARD CUTOVER app")
        done = wait_phase(a, "done", 60)
        t_done = time.monotonic()
        wait_phase(b, "done", 10)
        load_a.wait_commits(5, after=t_done)
        load_b.wait_commits(5, after=t_done)
        time.sleep(1)
    finally:
        load_a.stop()
        load_b.stop()
    load_a.check_clean()
    load_b.check_clean()
    assert 0 <= int(done["pause_ms"]) < 1000, done
    worst, n = load_b.max_latency(t_cut, t_done)
    assert n > 0 and worst < 1.5, (worst, n)
    want = replay(srv, data, load_a.clients + load_b.clients)
    assert_layout_holds(srv, NEW_DBS, want)
    probes = assert_routed_to(b, srv, NEW_DBS, "peer after the cutover")
    rc = b.stop()
    assert rc == 0, rc
    b.log_fh.close()
    b.start()
    probes += assert_routed_to(b, srv, NEW_DBS, "peer restarted")
    assert show_reshard(b)[POOL]["phase"] == "done"
    drop_probes(srv, probes)


def test_reshard_refusals(pgcat, srv, tmp_path):
    """Refused, each with an ErrorResponse on a console that goes on, and
    each followed by a normal query through pgcat that works: CLEANUP,
    CUTOVER and CANCEL of a pool with no reshard; RESHARD of a pool without a
    target layout and of an unknown pool; a second RESHARD (HOLD or not) of
    a pool already resharding; CLEANUP before done."""
    data = Dataset(items_per_client=20, docs_per_client=10)
    data.load(srv)
    plain = {"pool_mode": "transaction",
             "shards": {0: {"database": "s0", "servers": "127.0.0.1:%d:primary" % srv.port}},
             "users": {USER: {"password": PASSWORD}}}
    p = start_pgcat(pgcat, srv, tmp_path, pools={"plain": plain})
    n = [0]

    def works(others=None):
        n[0] += 1
        assert_routed_to(p, srv, OLD_DBS, "works %d" % n[0], others=others)
        with connect(p, dbname="plain", autocommit=True) as c:
            assert c.execute("SELECT current_database(), 41 + 1").fetchone() == ("s0", 42)

    assert show_reshard(p) == {}
    for sql in ("RESHARD CLEANUP app", "RESHARD CUTOVER app", "RESHARD CANCEL app",
                "RESHARD plain", "RESHARD plain HOLD", "RESHARD nosuchpool", "RESHARD CANCEL nosuchpool"):
        refused(p, sql)
        works()
    assert show_reshard(p) == {}, "a refused command left a reshard behind"
    assert slots(srv) == []

    assert run(p, "RESHARD app HOLD") == "RESHARD"
    wait_phase(p, "replicate", 90)
    for sql in ("RESHARD app", "RESHARD app HOLD", "RESHARD CLEANUP app"):
        refused(p, sql)
        works(others=())
    assert show_reshard(p)[POOL]["phase"] == "replicate"

    run(p, "RESHARD CANCEL app")
    wait_phase(p, "cancelled", 30)
    wait_until(lambda: slots(srv) == [], 30, msg="no replication slot left (%r)" % (slots(srv),))
    works()
