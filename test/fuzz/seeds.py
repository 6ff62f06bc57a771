#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed inputs of the fuzz targets into test/fuzz/corpus/<target>/.

The seeds are a handful of realistic inputs per target, so each fuzzer starts
from the shapes pgcat really sees. The SCRAM seeds hold proofs and
signatures that must match the fixed keys and nonces in fuzz_scram_*.c, which
is why they are computed here rather than written by hand. Run it again after
changing those constants:

    python3 test/fuzz/seeds.py

Only files named seed-* are (re)written; regression inputs (regress-*) that
reproduce fixed bugs are left alone.
"""
import base64
import hashlib
import hmac
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# --- wire protocol ------------------------------------------------------------

def msg(typ, payload=b""):
    return typ + struct.pack("!I", len(payload) + 4) + payload


def cstr(s):
    return (s.encode() if isinstance(s, str) else s) + b"\x00"


def startup(params, version=196608):
    body = struct.pack("!I", version) + b"".join(cstr(k) + cstr(v) for k, v in params.items()) + b"\x00"
    return struct.pack("!I", len(body) + 4) + body


def proto_startup():
    t = "proto_startup"
    write(t, "psql", startup({"user": "app", "database": "appdb", "application_name": "psql",
                              "client_encoding": "UTF8"}))
    write(t, "ssl-then-startup", struct.pack("!II", 8, 80877103) + startup({"user": "app"}))
    write(t, "gssenc", struct.pack("!II", 8, 80877104))
    write(t, "cancel", struct.pack("!IIII", 16, 80877102, 0x12345678, 0x9abcdef0))
    write(t, "pgjdbc", startup({"user": "app", "database": "appdb", "client_encoding": "UTF8",
                                "DateStyle": "ISO", "TimeZone": "Europe/Paris",
                                "extra_float_digits": "2",
                                "options": "-c search_path=app,public"}))
    write(t, "protocol-3.2", startup({"user": "app"}, version=(3 << 16) | 2))
    # libpq 19 betas' grease: a version and an option no server knows
    write(t, "grease", startup({"user": "app", "_pq_.test_protocol_negotiation": ""}, version=(3 << 16) | 9999))
    write(t, "protocol-4", startup({"user": "app"}, version=4 << 16))
    # protocol 3.2 cancel keys: 32 bytes (PostgreSQL 18's), 256 (the most), 3 (too short)
    write(t, "cancel-32", struct.pack("!III", 44, 80877102, 0x00100001) + bytes([1, 0, 0, 0]) + bytes(range(28)))
    write(t, "cancel-256", struct.pack("!III", 268, 80877102, 7) + bytes(range(256)))
    write(t, "cancel-3", struct.pack("!III", 15, 80877102, 7) + b"abc")


def error_body(fields):
    return b"".join(k.encode() + cstr(v) for k, v in fields) + b"\x00"


def proto_message():
    t = "proto_message"
    # First byte: index of the length limit (5 = 1 MB, 3 = before login).
    write(t, "simple-query", b"\x05" + msg(b"Q", cstr("SELECT 1")) + msg(b"X"))
    write(t, "extended", b"\x05" + msg(b"P", cstr("") + cstr("SELECT $1::int") + struct.pack("!HI", 1, 23))
          + msg(b"B", cstr("") + cstr("") + struct.pack("!HHi", 0, 1, 1) + b"7" + struct.pack("!H", 0))
          + msg(b"D", b"P" + cstr("")) + msg(b"E", cstr("") + struct.pack("!I", 0)) + msg(b"S"))
    write(t, "error-response", b"\x05" + msg(b"E", error_body([
        ("S", "ERROR"), ("V", "ERROR"), ("C", "42P01"),
        ("M", 'relation "nope" does not exist'), ("P", "15"), ("F", "parse_relation.c"),
        ("L", "1392"), ("R", "parserOpenTable")])) + msg(b"Z", b"I"))
    write(t, "login-tail", b"\x05" + msg(b"R", struct.pack("!I", 0))
          + msg(b"S", cstr("server_version") + cstr("15.8"))
          + msg(b"S", cstr("TimeZone") + cstr("UTC"))
          + msg(b"K", struct.pack("!II", 4242, 0x5eed)) + msg(b"Z", b"I"))
    write(t, "sasl-initial", b"\x03" + msg(b"p", cstr("SCRAM-SHA-256") + struct.pack("!I", 32)
                                         + b"n,,n=,r=pgcatFuzzClientNonce+024"))
    write(t, "notice", b"\x05" + msg(b"N", error_body([
        ("S", "WARNING"), ("V", "WARNING"), ("C", "01000"), ("M", "there is no transaction in progress")])))
    write(t, "copy", b"\x05" + msg(b"d", b"1\tone\n") + msg(b"d", b"2\ttwo\n") + msg(b"c")
          + msg(b"f", cstr("client gave up")))


# --- SCRAM ----------------------------------------------------------------------

def b64(b):
    return base64.b64encode(b).decode()


def hm(key, data):
    return hmac.new(key, data.encode() if isinstance(data, str) else data, hashlib.sha256).digest()


SALT = bytes(0xa0 + 3 * i for i in range(16))
SERVER_NONCE = b64(bytes(range(1, 19)))
CLIENT_NONCE = "pgcatFuzzClientNonce+024"


def scram_server():
    """Client messages to pgcat, which holds the verifier of "pencil"."""
    t = "scram_server"
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", SALT, 4096)
    client_key = hm(salted, "Client Key")
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hm(salted, "Server Key")

    def exchange(gs2, cnonce, ext="", good=True):
        first_bare = "n=,r=" + cnonce
        server_first = "r=%s%s,s=%s,i=4096" % (cnonce, SERVER_NONCE, b64(SALT))
        wo_proof = "c=%s,r=%s%s%s" % (b64(gs2.encode()), cnonce, SERVER_NONCE, ext)
        auth = ",".join([first_bare, server_first, wo_proof])
        proof = bytes(a ^ b for a, b in zip(client_key, hm(stored_key, auth)))
        if not good:
            proof = bytes(32)
        return (gs2 + first_bare).encode() + b"\x00" + (wo_proof + ",p=" + b64(proof)).encode()

    write(t, "libpq", exchange("n,,", CLIENT_NONCE))
    write(t, "gs2-y", exchange("y,,", "another/client+nonce"))
    write(t, "extension", exchange("n,,", CLIENT_NONCE, ext=",x=ignored"))
    write(t, "wrong-proof", exchange("n,,", CLIENT_NONCE, good=False))
    write(t, "channel-binding-p", "p=tls-server-end-point,,n=,r=" + CLIENT_NONCE)
    write(t, "verifier", "SCRAM-SHA-256$4096:%s$%s:%s" % (b64(SALT), b64(stored_key), b64(server_key)))


def scram_client():
    """Server messages to pgcat, which logs in with fixed pass-through keys."""
    t = "scram_client"
    client_key = bytes(0x10 + i for i in range(32))
    server_key = bytes(0x80 + i for i in range(32))

    def exchange(snonce, salt=SALT, iters=4096, good=True):
        nonce = CLIENT_NONCE + snonce
        server_first = "r=%s,s=%s,i=%d" % (nonce, b64(salt), iters)
        auth = ",".join(["n=,r=" + CLIENT_NONCE, server_first, "c=biws,r=" + nonce])
        sig = hm(server_key, auth) if good else bytes(32)
        return server_first.encode() + b"\x00" + ("v=" + b64(sig)).encode()

    assert client_key  # the client key only enters the proof, which the server would check
    write(t, "postgres", exchange("serverPart+0123456789"))
    write(t, "long-salt", exchange("x" * 24, salt=bytes(range(64))))
    write(t, "bad-signature", exchange("serverPart+0123456789", good=False))
    write(t, "server-error", ("r=%sserverPart+0123456789,s=%s,i=4096" % (CLIENT_NONCE, b64(SALT))).encode()
          + b"\x00e=invalid-proof")
    write(t, "foreign-nonce", "r=someoneelse,s=%s,i=4096" % b64(SALT))


# --- config -------------------------------------------------------------------------

def verifier(password):
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), SALT, 4096)
    stored = hashlib.sha256(hm(salted, "Client Key")).digest()
    return "SCRAM-SHA-256$4096:%s$%s:%s" % (b64(SALT), b64(stored), b64(hm(salted, "Server Key")))


CONFIG_GENERAL = """[general]
listen_addr = 127.0.0.1, ::1
listen_port = 6432
unix_socket_dir = /tmp
workers = 2
max_client_conn = 1000
pool_mode = transaction
default_pool_size = 10
connect_timeout = 5000
query_wait_timeout = 120000
idle_timeout = 600000
server_reset_query = DISCARD ALL
max_packet_size = 1048576
admin_username = pgcat
admin_password = admin_pw
auth_type = scram-sha-256
log_level = info
prometheus_port = 9930
"""


def config():
    t = "config"
    write(t, "minimal", """[general]
admin_password = secret

[pools.appdb]
[pools.appdb.shards.0]
servers = 127.0.0.1:5432:primary
""")
    write(t, "replicas", CONFIG_GENERAL + """
[pools.appdb]
default_role = any
query_parser_enabled = true
primary_reads_enabled = false
load_balancing_mode = loc

[pools.appdb.shards.0]
database = appdb
servers = 127.0.0.1:5432:primary, 127.0.0.1:5433:replica, [::1]:5434:auto

[pools.appdb.users.app]
password = %(md5)s
pool_size = 20
statement_timeout = 30000
""" % {"md5": "md5" + hashlib.md5(b"app_pwapp").hexdigest()})
    write(t, "sharded", CONFIG_GENERAL + """
[pools.sharded_db]
sharding_function = pg_bigint_hash
sharded_tables = users.id,
    public.orders.user_id
default_shard = all

[pools.sharded_db.shards.0]
database = shard0
servers = 127.0.0.1:5432:primary

[pools.sharded_db.shards.1]
database = shard1
servers = 127.0.0.1:5432:primary

[pools.sharded_db.users.app]
password = %(scram)s
server_username = app_rw
server_password = app_pw

[peers]
1 = pgcat-a.internal:6432
2 = pgcat-b.internal:6432
""" % {"scram": verifier("app_pw")})
    write(t, "errors", """[general]
listen_port = 70000
pool_mode = sometimes
unknown_key = 1
[pools.x.shards.zero]
servers = nohost
set_me = 'quoted ''value'''
""")
    write(t, "set-line", "[general]\nadmin_password = a\n[pools.d]\n[pools.d.shards.0]\n"
          "servers = localhost:5432:primary\nquery_wait_timeout = '5000'")


# --- router, params, sharding ----------------------------------------------------------

def router():
    t = "router"
    for name, sql in [
        ("select-key", "SELECT * FROM users WHERE id = 42"),
        ("join-in", "SELECT o.* FROM public.orders o JOIN users u ON u.id = o.user_id "
                    "WHERE u.id IN (1, 2, 3) AND o.total > 10.5"),
        ("insert", "INSERT INTO orders (user_id, total) VALUES ($1, $2), (7, 3) RETURNING id"),
        ("cte-write", "WITH moved AS (DELETE FROM app.events WHERE tenant = 'acme' RETURNING *) "
                      "SELECT count(*) FROM moved"),
        ("begin-read-only", "BEGIN READ ONLY; SELECT nextval('s'); COMMIT;"),
        ("hint", "/* pgcat: shard=1, role='replica' sharding_key=99 */ SELECT 1"),
        ("set-sharding-key", "SET SHARDING KEY TO '1234';"),
        ("set-server-role", "  set server role = \"replica\"  "),
        ("show-primary-reads", "SHOW PRIMARY READS;"),
        ("for-update", "SELECT * FROM users u WHERE u.id = 5 OR u.id = $1 FOR UPDATE SKIP LOCKED"),
        ("copy", "COPY orders (user_id, total) FROM STDIN WITH (FORMAT csv)"),
        ("explain", "EXPLAIN (ANALYZE, BUFFERS) UPDATE users SET name = 'x' WHERE id = -9223372036854775808"),
        ("shape-constants", "-- c 'x'\n/* pgcat: role=replica */ SELECT \"a\"\"b\", 'it''s', 1.5e-3, .5, "
                            "2147483648, x1 FROM t WHERE n = -7 AND s = 'a'\n'b' LIMIT $1;  "),
        ("shape-write", "UPDATE t SET v = v + 1, w = nextval('s') WHERE id IN (1, 2, 3.0) RETURNING 'done'"),
    ]:
        write(t, name, sql)


def params():
    t = "params"
    write(t, "search-path", "-c search_path=app,public -c DateStyle=ISO\x00"
          "SET search_path TO app, \"$user\", public\x00RESET search_path\x00SHOW search_path")
    write(t, "time-zone", "--application-name=worker\\ 1\x00SET TIME ZONE 'Europe/Paris'\x00"
          "set session timezone = default\x00SET LOCAL work_mem = '64MB'")
    write(t, "discard", "-cwork_mem=4MB\x00SET work_mem TO '8MB';SELECT 1\x00"
          "/* c */ -- line\n DISCARD ALL\x00RESET ALL")
    write(t, "custom", "\x00SET myapp.tenant = 'a''b'\x00SET statement_timeout TO 5000\x00"
          "RESET myapp.tenant\x00SET ROLE admin\x00SET SESSION AUTHORIZATION DEFAULT")


def sharding():
    t = "sharding"
    # byte 0: shard count + 2; byte 1: error buffer (multiple of 4: size/4, else 256)
    write(t, "bigint", b"\x04\x01" + b"1234")
    write(t, "bigint-spaces", b"\x05\x02" + b"  -0042 ")
    write(t, "bigint-min", b"\x0a\x03" + b"-9223372036854775808")
    write(t, "out-of-range", b"\x0a\x08" + b"9223372036854775808")
    write(t, "uuid", b"\x06\x01" + b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
    write(t, "uuid-braces", b"\x06\x01" + b"{A0EEBC999C0B4EF8BB6D6BB9BD380A11}")
    write(t, "text", b"\x03\x01" + "ümlaut key".encode())
    write(t, "no-shards", b"\x02\x01" + b"7")


# --- the state machines (fuzz_session.c) ------------------------------------------

def client_sm():
    """What a client sends, from its first byte (user app, database db)."""
    t = "client_sm"
    login = startup({"user": "app", "database": "db", "application_name": "fuzz"})
    write(t, "simple", login + msg(b"Q", cstr("SELECT 1")) + msg(b"X"))
    write(t, "extended", login
          + msg(b"P", cstr("") + cstr("SELECT $1::int") + struct.pack("!HI", 1, 23))
          + msg(b"B", cstr("") + cstr("") + struct.pack("!HHi", 0, 1, 1) + b"7" + struct.pack("!H", 0))
          + msg(b"D", b"P" + cstr("")) + msg(b"E", cstr("") + struct.pack("!I", 0)) + msg(b"S") + msg(b"X"))
    write(t, "named-prepared", login
          + msg(b"P", cstr("s1") + cstr("SELECT 1") + struct.pack("!H", 0)) + msg(b"D", b"S" + cstr("s1"))
          + msg(b"S") + msg(b"B", cstr("") + cstr("s1") + struct.pack("!HHH", 0, 0, 0))
          + msg(b"E", cstr("") + struct.pack("!I", 0)) + msg(b"C", b"S" + cstr("s1")) + msg(b"S"))
    write(t, "transaction", login + msg(b"Q", cstr("BEGIN")) + msg(b"Q", cstr("SET search_path = x"))
          + msg(b"Q", cstr("SELECT 1/0")) + msg(b"Q", cstr("ROLLBACK")) + msg(b"Q", cstr("SHOW search_path")))
    write(t, "copy-in", login + msg(b"Q", cstr("COPY t FROM STDIN")) + msg(b"d", b"1\tone\n")
          + msg(b"d", b"2\ttwo\n") + msg(b"c") + msg(b"Q", cstr("SELECT 1")))
    write(t, "copy-fail", login + msg(b"Q", cstr("COPY t FROM STDIN")) + msg(b"d", b"1\n")
          + msg(b"f", cstr("client gave up")))
    write(t, "pgcat-commands", login + msg(b"Q", cstr("SET SERVER ROLE TO 'replica'"))
          + msg(b"Q", cstr("SHOW SERVER ROLE")) + msg(b"Q", cstr("SET SHARD TO '0'"))
          + msg(b"Q", cstr("/* pgcat: role=primary */ SELECT 1")))
    write(t, "ssl-then-startup", struct.pack("!II", 8, 80877103) + login + msg(b"Q", cstr("SELECT 1")))
    write(t, "cancel", struct.pack("!IIII", 16, 80877102, 0x12345678, 0x9abcdef0))
    write(t, "cancel-32", struct.pack("!III", 44, 80877102, 0x00100001) + bytes([1, 0, 0, 0]) + bytes(range(28)))
    write(t, "protocol-3.2", startup({"user": "app", "database": "db"}, version=(3 << 16) | 2)
          + msg(b"Q", cstr("SELECT 1")) + msg(b"X"))
    write(t, "grease", startup({"user": "app", "database": "db", "_pq_.test_protocol_negotiation": ""},
                               version=(3 << 16) | 9999) + msg(b"Q", cstr("SELECT 1")))
    write(t, "admin", startup({"user": "admin", "database": "pgcat"})
          + msg(b"p", cstr("adminpw")) + msg(b"Q", cstr("SHOW POOLS")) + msg(b"Q", cstr("SHOW CLIENTS")))
    write(t, "function-call", login + msg(b"F", struct.pack("!IHHIH", 1598, 0, 0, 0, 0)))
    sh = startup({"user": "app", "database": "sh", "application_name": "fuzz"})
    write(t, "cross-shard-read", sh + msg(b"Q", cstr("SELECT id, v FROM t ORDER BY id LIMIT 3 OFFSET 1"))
          + msg(b"Q", cstr("SELECT count(*), sum(id) FROM t"))
          + msg(b"P", cstr("") + cstr("SELECT id FROM t WHERE v = $1 ORDER BY 1") + struct.pack("!H", 0))
          + msg(b"B", cstr("") + cstr("") + struct.pack("!HHi", 0, 1, 1) + b"x" + struct.pack("!H", 0))
          + msg(b"D", b"P" + cstr("")) + msg(b"E", cstr("") + struct.pack("!I", 2)) + msg(b"S")
          + msg(b"Q", cstr("SELECT v FROM t GROUP BY v")) + msg(b"X"))
    write(t, "cross-shard-write", sh + msg(b"Q", cstr("INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b'), (7, 'c')"))
          + msg(b"P", cstr("") + cstr("INSERT INTO t (id) VALUES ($1), ($2)") + struct.pack("!H", 0))
          + msg(b"B", cstr("") + cstr("") + struct.pack("!HHi", 0, 2, 1) + b"1" + struct.pack("!i", 1) + b"2"
                + struct.pack("!H", 0))
          + msg(b"E", cstr("") + struct.pack("!I", 0)) + msg(b"S")
          + msg(b"Q", cstr("COPY t (id, v) FROM STDIN")) + msg(b"d", b"1\tone\n2\tt") + msg(b"d", b"wo\n\\N\tx\n")
          + msg(b"c") + msg(b"Q", cstr("COPY t FROM STDIN CSV HEADER")) + msg(b"d", b"id\n5\n") + msg(b"f", cstr("no"))
          + msg(b"X"))
    write(t, "pipeline", login + msg(b"Q", cstr("SELECT 1")) + msg(b"Q", cstr("SELECT 2"))
          + msg(b"P", cstr("") + cstr("SELECT 3") + struct.pack("!H", 0))
          + msg(b"B", cstr("") + cstr("") + struct.pack("!HHH", 0, 0, 0)) + msg(b"E", cstr("") + struct.pack("!I", 0))
          + msg(b"H") + msg(b"S"))


def server_sm():
    """What the server answers to fuzz_session.c's fixed client script:
    login, SELECT 1, Parse s1/Bind/Describe/Execute/Sync, BEGIN, SET, COMMIT."""
    t = "server_sm"
    login = (msg(b"R", struct.pack("!I", 0))
             + msg(b"S", cstr("server_version") + cstr("15.8")) + msg(b"S", cstr("client_encoding") + cstr("UTF8"))
             + msg(b"S", cstr("DateStyle") + cstr("ISO, MDY")) + msg(b"S", cstr("TimeZone") + cstr("UTC"))
             + msg(b"S", cstr("integer_datetimes") + cstr("on"))
             + msg(b"K", struct.pack("!II", 4242, 0x5eed)) + msg(b"Z", b"I"))
    rowdesc = msg(b"T", struct.pack("!H", 1) + cstr("?column?") + struct.pack("!IHIhiH", 0, 0, 23, 4, -1, 0))
    select1 = rowdesc + msg(b"D", struct.pack("!HI", 1, 1) + b"1") + msg(b"C", cstr("SELECT 1")) + msg(b"Z", b"I")
    extended = (msg(b"1") + msg(b"2") + rowdesc + msg(b"D", struct.pack("!HI", 1, 1) + b"1")
                + msg(b"C", cstr("SELECT 1")) + msg(b"Z", b"I"))
    tx = (msg(b"C", cstr("BEGIN")) + msg(b"Z", b"T") + msg(b"C", cstr("SET")) + msg(b"Z", b"T")
          + msg(b"C", cstr("COMMIT")) + msg(b"Z", b"I"))
    write(t, "session", login + select1 + extended + tx)
    # pgcat asks for 3.2: PostgreSQL 13 to 17 negotiate down to 3.0, 18 gives a 32-byte key
    write(t, "negotiate-3.0", msg(b"v", struct.pack("!II", 3 << 16, 0)) + login + select1)
    write(t, "key-32", login.replace(msg(b"K", struct.pack("!II", 4242, 0x5eed)),
                                     msg(b"K", struct.pack("!I", 4242) + bytes(range(32)))) + select1)
    write(t, "md5-login", msg(b"R", struct.pack("!I", 5) + b"\x01\x02\x03\x04") + login + select1)
    write(t, "cleartext-login", msg(b"R", struct.pack("!I", 3)) + login + select1)
    write(t, "sasl-login", msg(b"R", struct.pack("!I", 10) + cstr("SCRAM-SHA-256") + b"\x00"))
    write(t, "login-error", msg(b"E", error_body([("S", "FATAL"), ("V", "FATAL"), ("C", "28P01"),
                                                  ("M", "password authentication failed")])))
    write(t, "query-error", login + msg(b"E", error_body([("S", "ERROR"), ("V", "ERROR"), ("C", "42P01"),
                                                         ("M", "relation does not exist")])) + msg(b"Z", b"I"))
    write(t, "notices", login + msg(b"N", error_body([("S", "NOTICE"), ("V", "NOTICE"), ("C", "00000"), ("M", "hi")]))
          + msg(b"A", struct.pack("!I", 7) + cstr("chan") + cstr("payload")) + select1)
    write(t, "parameter-change", login + msg(b"S", cstr("application_name") + cstr("x")) + select1
          + extended + tx)
    write(t, "fatal-mid-query", login + rowdesc + msg(b"E", error_body([
        ("S", "FATAL"), ("V", "FATAL"), ("C", "57P01"), ("M", "terminating connection due to administrator command")])))


def auth_file():
    t = "auth_file"
    write(t, "three-kinds", '"app" "SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$c3RvcmVk:c2VydmVy"\n'
          '"md5user" "md5b8c5a6a0e1f0a6f9f8c5e5d0b0b0b0b0"\n"plain" "secret"\n')
    write(t, "quotes-comments", '; comment\r\n# other\n\n  "we""ird" "pa""ss" trailing\r\n"last" "x"')
    write(t, "bad-lines", '"unterminated\nbare words\n"onlyuser"\n"" "empty"\n"ok" "1"\n')


def hba():
    t = "hba"
    write(t, "each-type", "local all all trust\nhostssl all all 0.0.0.0/0 cert\n"
          "hostnossl appdb,\"My DB\" app 10.0.0.0 255.0.0.0 md5\nhost all all ::1/128 scram-sha-256\n"
          "host all all all reject\n")
    write(t, "keywords-comments", "# c\r\n\n  host sameuser \"all\" 127.0.0.1/32 trust # x\r\n"
          "host replication,all \"we\"\"ird\" fe80::/10 md5\n")
    write(t, "bad-lines", "hots all all all md5\nhost all all 127.0.0.1 md5\nhost +g @f samenet peer\n"
          "host all all 0.0.0.0/0 md5 clientcert=verify-full\nhost \"open all all md5")


def shardkey():
    t = "shardkey"

    def bind(params, formats=()):
        b = b"\x00s1\x00" + struct.pack("!H", len(formats))
        for f in formats:
            b += struct.pack("!H", f)
        b += struct.pack("!H", len(params))
        for p in params:
            b += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
        return b + struct.pack("!H", 0)
    # byte 0: function (0 pg_bigint_hash, 1 text, 2 uuid, 3 sha1, 4 murmur3);
    # byte 1: shards - 1; byte 2: parameter number; byte 3: type (0 unknown, 1 int8, 2 int2, 3 int4, 4 text, 6 uuid)
    write(t, "text-int", b"\x00\x02\x01\x00" + bind([b"1234"]))
    write(t, "binary-int8", b"\x00\x02\x01\x01" + bind([struct.pack("!q", -7)], [1]))
    write(t, "binary-int4-second", b"\x03\x06\x02\x03" + bind([b"x", struct.pack("!i", 42)], [0, 1]))
    write(t, "uuid", b"\x02\x01\x01\x06" + bind([bytes(range(16))], [1]))
    write(t, "text-null", b"\x01\x02\x02\x04" + bind([b"alice", None]))


def copysplit():
    t = "copysplit"
    # byte 0: bit 0 CSV, bit 1 HEADER; byte 1: key column; byte 2: delimiter (bits 0-1),
    # quote ' (bit 2), escape \\ (bit 3), NULL 'NULL' (bit 4); byte 3: chunk sizes
    write(t, "text", b"\x00\x01\x00\x21" + b"a\t7\nx\\\ty\t1\\t2\r\n\\N\t\\N\n\\.\nrest\n")
    write(t, "text-escapes", b"\x00\x00\x00\x05" + b"\\x41\\101\\z\tq\na\\\nb\tc\nlast")
    write(t, "csv-header", b"\x03\x01\x01\x47" + b"id,v\na,\"7\"\n\"x,\ny\",\"a\"\"b\"\n,,\n")
    write(t, "csv-escape", b"\x01\x01\x0d\x13" + b"a;'q\\'r\\\\'\nb;'open")
    write(t, "csv-null", b"\x01\x00\x10\x02" + b"NULL\t\"NULL\"\n\\.\n")
    # byte 0 bit 2: binary; signature, flags, extension, two tuples (one NULL key), trailer
    sig = b"PGCOPY\n\xff\r\n\x00" + bytes(4) + bytes([0, 0, 0, 2]) + b"ex"
    tup = bytes([0, 2, 0, 0, 0, 8]) + (42).to_bytes(8, "big") + bytes([0, 0, 0, 1]) + b"a"
    nul = bytes([0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])
    write(t, "binary", b"\x04\x00\x00\x25" + sig + tup + nul + tup + b"\xff\xff" + b"after")


def merge():
    t = "merge"
    # byte 0: value type (index) and format (bit 7); SQL; NUL; value; NUL; value
    write(t, "order-limit", b"\x0e" + b"SELECT id, v FROM items ORDER BY 2 DESC NULLS LAST, id LIMIT 10 OFFSET 5"
          + b"\x00-12.50\x0099999.001")
    write(t, "aggregates", b"\x02" + b"select count(*), sum(x), count(x), avg(x), min(v) filter (where y > 1) from items"
          + b"\x009223372036854775807\x001")
    write(t, "insert", b"\x0d" + b"INSERT INTO items (v, id) VALUES ('a,(b)', 7), ($$x)$$, 42), (E'e\\')', -1) "
          b"RETURNING id" + b"\x002024-01-01 10:00:00+02\x002024-01-01 09:00:00.5+00")
    write(t, "copy", b"\x08" + b"COPY s.t (v, k) FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'nil')"
          + b"\x000.1\x00NaN")
    write(t, "binary-numeric", b"\x8e" + b"select 1" + b"\x00" + bytes([0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 9, 41, 26, 124])
          + b"\x00" + bytes([0, 1, 0xff, 0xff, 0x40, 0, 0, 4, 0, 12]))


def pgoutput():
    t = "pgoutput"
    # byte 0: the room (columns, values, relations: & 7); then a CopyData payload
    def text(s):
        return b"t" + struct.pack("!I", len(s)) + s
    rel = (b"R" + struct.pack("!I", 16385) + b"public\0accounts\0d" + struct.pack("!H", 2)
           + b"\x01id\0" + struct.pack("!Ii", 20, -1) + b"\x00note\0" + struct.pack("!Ii", 25, -1))
    ins = b"I" + struct.pack("!I", 16385) + b"N" + struct.pack("!H", 2) + text(b"42") + b"n"
    upd = (b"U" + struct.pack("!I", 16385) + b"K" + struct.pack("!H", 2) + text(b"42") + b"n"
           + b"N" + struct.pack("!H", 2) + text(b"43") + b"u")
    dele = b"D" + struct.pack("!I", 16385) + b"O" + struct.pack("!H", 2) + text(b"43") + text(b"x")
    begin = b"B" + struct.pack("!QqI", 0x16B3748, 1234, 731)
    commit = b"C" + b"\0" + struct.pack("!QQq", 0x16B3748, 0x16B3778, 1235)
    trunc = b"T" + struct.pack("!IBII", 2, 1, 16385, 16390)
    message = b"M" + b"\x01" + struct.pack("!Q", 99) + b"pgcat\0" + struct.pack("!I", 3) + b"a\0b"
    def xlog(m):
        return b"w" + struct.pack("!QQq", 0x100, 0x200, 777) + m
    for name, m in (("relation", rel), ("insert", ins), ("update-key", upd), ("delete-full", dele),
                    ("begin", begin), ("commit", commit), ("truncate", trunc), ("message", message)):
        write(t, name, b"\x07" + xlog(m))
    write(t, "keepalive", b"\x02" + b"k" + struct.pack("!QqB", 0x300, 888, 1))
    write(t, "bare-update-small-room", b"\x01" + upd)


if __name__ == "__main__":
    for f in (proto_startup, proto_message, scram_server, scram_client, config, router, params, sharding,
              client_sm, server_sm, auth_file, hba, shardkey, copysplit, merge, pgoutput):
        f()
