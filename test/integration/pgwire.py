# SPDX-License-Identifier: MIT
"""A tiny PostgreSQL v3 wire-protocol client over a raw socket.

Used by the integration tests to send exactly the bytes a test needs (bad
input, pipelined extended protocol, cancel requests) and to read exactly what
pgcat answers, without a driver in between that would hide or fix things.
"""
import base64
import hashlib
import hmac
import os
import socket
import struct
import time

PROTO_3_0 = 196608
PROTO_3_2 = (3 << 16) | 2
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102


class ProtocolError(Exception):
    pass


def msg(typ: bytes, payload: bytes = b"") -> bytes:
    """A typed message: type byte, int32 length (self-inclusive), payload."""
    return typ + struct.pack("!I", len(payload) + 4) + payload


def recv_exact(sock, n: int) -> bytes:
    """n bytes from a blocking socket (a fake server's reads); EOFError if
    the peer closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def cstr(s) -> bytes:
    if isinstance(s, str):
        s = s.encode()
    return s + b"\x00"


def startup_packet(params: dict, version: int = PROTO_3_0) -> bytes:
    body = struct.pack("!I", version)
    for k, v in params.items():
        body += cstr(k) + cstr(v)
    body += b"\x00"
    return struct.pack("!I", len(body) + 4) + body


def ssl_request() -> bytes:
    return struct.pack("!II", 8, SSL_REQUEST_CODE)


def gssenc_request() -> bytes:
    return struct.pack("!II", 8, GSSENC_REQUEST_CODE)


def cancel_request(pid: int, key) -> bytes:
    """key: an int (a 4-byte key, protocol 3.0) or the key's bytes (3.2: 4 to 256)."""
    if isinstance(key, int):
        key = struct.pack("!I", key)
    return struct.pack("!III", 12 + len(key), CANCEL_REQUEST_CODE, pid) + key


def query(sql: str) -> bytes:
    return msg(b"Q", cstr(sql))


def parse(sql: str, name: str = "", types=()) -> bytes:
    body = cstr(name) + cstr(sql) + struct.pack("!H", len(types))
    for t in types:
        body += struct.pack("!I", t)
    return msg(b"P", body)


def bind(params=(), portal: str = "", stmt: str = "") -> bytes:
    body = cstr(portal) + cstr(stmt)
    body += struct.pack("!H", 0)  # all parameters in text format
    body += struct.pack("!H", len(params))
    for p in params:
        if p is None:
            body += struct.pack("!i", -1)
        else:
            b = str(p).encode()
            body += struct.pack("!i", len(b)) + b
    body += struct.pack("!H", 0)  # all results in text format
    return msg(b"B", body)


def describe(kind: bytes = b"P", name: str = "") -> bytes:
    return msg(b"D", kind + cstr(name))


def execute(portal: str = "", max_rows: int = 0) -> bytes:
    return msg(b"E", cstr(portal) + struct.pack("!I", max_rows))


def sync() -> bytes:
    return msg(b"S")


def flush() -> bytes:
    return msg(b"H")


def terminate() -> bytes:
    return msg(b"X")


def parse_fields(payload: bytes) -> dict:
    """Fields of an ErrorResponse / NoticeResponse: {'S': 'ERROR', 'C': '08P01', 'M': ...}."""
    out = {}
    for part in payload.split(b"\x00"):
        if part:
            out[chr(part[0])] = part[1:].decode(errors="replace")
    return out


def data_row_values(payload: bytes):
    (n,) = struct.unpack("!H", payload[:2])
    pos = 2
    vals = []
    for _ in range(n):
        (ln,) = struct.unpack("!i", payload[pos:pos + 4])
        pos += 4
        if ln < 0:
            vals.append(None)
        else:
            vals.append(payload[pos:pos + ln].decode())
            pos += ln
    return vals


class Raw:
    """One raw connection. read_msg() returns (type, payload) or None at EOF."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, unix_path: str = None):
        if unix_path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix_path)
        else:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.eof = False
        self.backend_key = None
        self.backend_key_bytes = None  # the key of BackendKeyData, whatever its length
        self.negotiate = None          # NegotiateProtocolVersion: (version, [option names])
        self.params = {}

    # -- bytes -------------------------------------------------------------
    def send(self, data: bytes):
        self.sock.sendall(data)

    def try_send(self, data: bytes) -> bool:
        """Send, tolerating a peer that already closed (returns False then)."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _fill(self, timeout):
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read_bytes(self, n: int, timeout: float = 10.0) -> bytes:
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out reading %d bytes" % n)
            if not self._fill(left):
                break
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_msg(self, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 5:
                typ = self.buf[:1]
                (ln,) = struct.unpack("!I", self.buf[1:5])
                if ln < 4:
                    raise ProtocolError("bad length %d from server" % ln)
                if len(self.buf) >= 1 + ln:
                    payload = self.buf[5:1 + ln]
                    self.buf = self.buf[1 + ln:]
                    return typ, payload
            if self.eof:
                if self.buf:
                    raise ProtocolError("truncated message at EOF: %r" % self.buf[:20])
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out waiting for a message")
            self._fill(left)

    def read_until(self, types=(b"Z",), timeout: float = 10.0):
        """Messages up to and including the first of `types`; stops at EOF too."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            m = self.read_msg(max(0.01, deadline - time.monotonic()))
            if m is None:
                return out
            out.append(m)
            if m[0] in types:
                return out

    def read_error_then_eof(self, timeout: float = 10.0):
        """Read until an ErrorResponse or EOF; returns (error_fields_or_None, closed)."""
        deadline = time.monotonic() + timeout
        err = None
        while True:
            try:
                m = self.read_msg(max(0.01, deadline - time.monotonic()))
            except socket.timeout:
                return err, False
            if m is None:
                return err, True
            if m[0] == b"E" and err is None:
                err = parse_fields(m[1])

    def read_to_eof(self, timeout: float = 10.0):
        """Every byte the peer sends until it closes: (bytes, closed). closed
        is False if it was still open after timeout."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                self._fill(left)
            except socket.timeout:
                break
        out, self.buf = self.buf, b""
        return out, self.eof

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True if the peer closes within timeout (messages before are discarded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = self.read_msg(max(0.01, deadline - time.monotonic()))
            except socket.timeout:
                return False
            except (ProtocolError, OSError):
                return True
            if m is None:
                return True
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    # -- authentication ----------------------------------------------------
    def startup(self, user=None, database=None, params=None, version=PROTO_3_0):
        p = {}
        if user is not None:
            p["user"] = user
        if database is not None:
            p["database"] = database
        p.update(params or {})
        self.send(startup_packet(p, version))

    def first_auth_request(self, timeout=10.0):
        """The first message after StartupMessage (R with its code, or E)."""
        m = self.read_msg(timeout)
        return m

    def login(self, user, password, database, params=None, timeout=10.0, version=PROTO_3_0):
        """Full login. Returns the messages after authentication up to ReadyForQuery.
        Raises ProtocolError with the error fields on an ErrorResponse. A
        NegotiateProtocolVersion (before authentication) is kept in self.negotiate."""
        self.startup(user, database, params, version)
        while True:
            m = self.read_msg(timeout)
            if m is None:
                raise ProtocolError("connection closed during login")
            typ, payload = m
            if typ == b"E":
                raise ProtocolError(parse_fields(payload))
            if typ == b"v":
                if self.negotiate is not None:
                    raise ProtocolError("a second NegotiateProtocolVersion")
                ver, n = struct.unpack("!II", payload[:8])
                names = [x.decode() for x in payload[8:].split(b"\x00")[:n]]
                self.negotiate = (ver, names)
                continue
            if typ != b"R":
                raise ProtocolError("unexpected %r during auth" % typ)
            (code,) = struct.unpack("!I", payload[:4])
            if code == 0:
                break
            elif code == 3:
                self.send(msg(b"p", cstr(password)))
            elif code == 5:
                salt = payload[4:8]
                inner = hashlib.md5((password + user).encode()).hexdigest()
                outer = hashlib.md5(inner.encode() + salt).hexdigest()
                self.send(msg(b"p", cstr("md5" + outer)))
            elif code == 10:
                mechs = [x.decode() for x in payload[4:].split(b"\x00") if x]
                if "SCRAM-SHA-256" not in mechs:
                    raise ProtocolError("no SCRAM-SHA-256 in %r" % mechs)
                self._scram(password, timeout)
            else:
                raise ProtocolError("unsupported auth code %d" % code)
        rest = []
        while True:
            m = self.read_msg(timeout)
            if m is None:
                raise ProtocolError("connection closed after AuthenticationOk")
            rest.append(m)
            typ, payload = m
            if typ == b"K":
                self.backend_key_bytes = payload[4:]
                if len(payload) == 8:
                    self.backend_key = struct.unpack("!II", payload[:8])
                else:
                    self.backend_key = (struct.unpack("!I", payload[:4])[0], payload[4:])
            elif typ == b"S":
                k, v = payload.split(b"\x00")[:2]
                self.params[k.decode()] = v.decode()
            elif typ == b"E":
                raise ProtocolError(parse_fields(payload))
            elif typ == b"Z":
                return rest

    def _scram(self, password, timeout):
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = "n=,r=" + nonce
        first = ("n,," + first_bare).encode()
        self.send(msg(b"p", cstr("SCRAM-SHA-256") + struct.pack("!i", len(first)) + first))
        typ, payload = self.read_msg(timeout)
        if typ == b"E":
            raise ProtocolError(parse_fields(payload))
        (code,) = struct.unpack("!I", payload[:4])
        if code != 11:
            raise ProtocolError("expected SASLContinue, got %d" % code)
        server_first = payload[4:].decode()
        attrs = dict(x.split("=", 1) for x in server_first.split(","))
        if not attrs["r"].startswith(nonce):
            raise ProtocolError("server nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(),
                                     base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored_key = hashlib.sha256(client_key).digest()
        final_wo_proof = "c=biws,r=" + attrs["r"]
        auth_message = ",".join([first_bare, server_first, final_wo_proof]).encode()
        sig = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, sig))
        self.send(msg(b"p", (final_wo_proof + ",p=" + base64.b64encode(proof).decode()).encode()))
        typ, payload = self.read_msg(timeout)
        if typ == b"E":
            raise ProtocolError(parse_fields(payload))
        (code,) = struct.unpack("!I", payload[:4])
        if code != 12:
            raise ProtocolError("expected SASLFinal, got %d" % code)
        server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
        expect = base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest()).decode()
        got = payload[4:].decode()
        if got != "v=" + expect:
            raise ProtocolError("bad server signature %r" % got)

    # -- queries -----------------------------------------------------------
    def simple(self, sql: str, timeout: float = 10.0):
        """Run a simple query; returns (rows, error_fields_or_None, rfq_status)."""
        self.send(query(sql))
        return self.collect(timeout)

    def collect(self, timeout: float = 10.0):
        rows, err = [], None
        for typ, payload in self.read_until((b"Z",), timeout):
            if typ == b"D":
                rows.append(data_row_values(payload))
            elif typ == b"E" and err is None:
                err = parse_fields(payload)
            elif typ == b"Z":
                return rows, err, payload.decode()
        raise ProtocolError("connection closed before ReadyForQuery (error: %r)" % (err,))


def close(kind: bytes = b"S", name: str = "") -> bytes:
    return msg(b"C", kind + cstr(name))
