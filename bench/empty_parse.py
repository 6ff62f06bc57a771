#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What an empty unnamed Parse costs PostgreSQL: one backend, the pgbench -S
statement prepared once by name, then executed N times as Bind, Describe,
Execute, Sync (what pgcat sends for a mapped unnamed Parse it answers
itself) and N times with a Parse of an empty unnamed statement in front
(what it sends otherwise), interleaved, 5 rounds. Prints the backend's CPU
time per execution (utime + stime from /proc/PID/stat: run it on the
server's machine) and the wall time per round trip, medians.

Usage: bench/empty_parse.py PORT [N] [USER] [DBNAME]   (trust or no
password; the database needs pgbench -i tables)."""
import os
import socket
import struct
import sys
import time


def msg(t, body):
    return t + struct.pack("!i", len(body) + 4) + body


def cstr(s):
    return s.encode() + b"\0"


def main():
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    user = sys.argv[3] if len(sys.argv) > 3 else "postgres"
    db = sys.argv[4] if len(sys.argv) > 4 else "postgres"
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = struct.pack("!i", 196608) + cstr("user") + cstr(user) + cstr("database") + cstr(db) + b"\0"
    s.sendall(struct.pack("!i", len(body) + 4) + body)
    buf = bytearray()

    def read_until_z():
        nonlocal buf
        pid = None
        while True:
            while len(buf) < 5 or len(buf) < 1 + struct.unpack("!i", buf[1:5])[0]:
                d = s.recv(65536)
                if not d:
                    sys.exit("connection closed")
                buf += d
            t = buf[0:1]
            ln = struct.unpack("!i", buf[1:5])[0]
            m = bytes(buf[5:1 + ln])
            del buf[:1 + ln]
            if t == b"K":
                pid = struct.unpack("!i", m[:4])[0]
            elif t == b"E":
                sys.exit("error: %r" % m)
            elif t == b"R" and struct.unpack("!i", m[:4])[0] != 0:
                sys.exit("this needs trust authentication")
            elif t == b"Z":
                return pid

    pid = read_until_z()
    q = "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
    s.sendall(msg(b"P", cstr("s1") + cstr(q) + struct.pack("!h", 0)) + msg(b"S", b""))
    read_until_z()
    bind = msg(b"B", cstr("") + cstr("s1") + struct.pack("!hhi", 0, 1, 4) + b"1234" + struct.pack("!h", 0))
    tail = bind + msg(b"D", b"P\0") + msg(b"E", b"\0" + struct.pack("!i", 0)) + msg(b"S", b"")
    empty_parse = msg(b"P", b"\0\0\0\0")
    tick = os.sysconf("SC_CLK_TCK")

    def cpu():
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    res = {"bind only": [], "empty Parse + bind": []}
    for _ in range(5):
        for name, req in (("bind only", tail), ("empty Parse + bind", empty_parse + tail)):
            c0, t0 = cpu(), time.monotonic()
            for _ in range(n):
                s.sendall(req)
                read_until_z()
            c1, t1 = cpu(), time.monotonic()
            res[name].append(((c1 - c0) / tick * 1e6 / n, (t1 - t0) * 1e6 / n))
    print("backend pid %d, %d executions per round, 5 rounds" % (pid, n))
    for name, v in res.items():
        cpus = sorted(x[0] for x in v)
        walls = sorted(x[1] for x in v)
        print("%-20s backend CPU µs/execution median %.1f (rounds %s)  wall µs median %.1f" %
              (name, cpus[2], " ".join("%.1f" % x for x in cpus), walls[2]))


if __name__ == "__main__":
    main()
