#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Helpers for bench/run.sh (standard library only).

  bench.py freeports N                 print N free TCP ports on 127.0.0.1
  bench.py cell ...                    run one pgbench cell against one target,
                                       sample the pooler's CPU, append a JSON line
  bench.py idle ...                    open N logged-in idle clients (SCRAM or md5
                                       over raw asyncio sockets), report VmRSS growth
  bench.py report RESULTS.jsonl        print the markdown tables (medians, ratios)

run.sh owns the processes; this file never starts or stops a server.
"""
import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- /proc ----

def _children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def proc_tree(pids):
    """The given PIDs and all their descendants (pgcat: supervisor + workers)."""
    seen, todo = [], list(pids)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children(p)
    return seen


def cpu_ticks(pids):
    """utime+stime (clock ticks) summed over the process trees of pids.

    A process's /proc/PID/stat counts all its threads (pg_doorman's too)."""
    total = 0
    for p in proc_tree(pids):
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        # fields[0] is field 3 (state): utime is field 14, stime 15
        total += int(fields[11]) + int(fields[12])
    return total


def sys_cpu():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def rss_kb(pids):
    total = 0
    for p in proc_tree(pids):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


# ------------------------------------------------------------- freeports ----

def cmd_freeports(a):
    socks = []
    for _ in range(a.n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    print(" ".join(str(s.getsockname()[1]) for s in socks))
    for s in socks:
        s.close()


# ------------------------------------------------------------------ cell ----

RE = {
    "tps": re.compile(r"^tps = ([\d.]+)", re.M),
    "lat": re.compile(r"^latency average = ([\d.]+) ms", re.M),
    "txn": re.compile(r"^number of transactions actually processed: (\d+)", re.M),
    "failed": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "conn": re.compile(r"^average connection time = ([\d.]+) ms", re.M),
    "init": re.compile(r"^initial connection time = ([\d.]+) ms", re.M),
}
PROGRESS = re.compile(r"^progress: ([\d.]+) s, ([\d.]+) tps")


def cmd_cell(a):
    pids = [int(x) for x in a.pids.split(",") if x]
    clients = a.clients
    # pgbench's -T clock includes the initial connections (seconds with 1,000
    # SCRAM logins); its tps excludes them, so give that phase its own time.
    duration = a.seconds + (0 if a.connect else clients // 80)
    cmd = ["pgbench", "-n", "-S", "-M", a.protocol, "-c", str(clients),
           "-j", str(min(2, clients)), "-T", str(duration), "-P", "1",
           "-h", "127.0.0.1", "-p", str(a.port), "-U", a.user]
    if a.connect:
        cmd.append("-C")
    cmd.append(a.dbname)
    env = dict(os.environ, PGPASSWORD=a.password)
    t0 = time.monotonic()
    s0 = sys_cpu()
    c0 = cpu_ticks(pids) if pids else 0
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    c1 = None
    first_txn = 0.0
    errors = []
    aborted = 0
    for line in p.stderr:
        m = PROGRESS.match(line)
        if m:
            if c1 is None:
                # steady state starts here: every client is connected
                c1 = cpu_ticks(pids) if pids else 0
                first_txn = float(m.group(1)) * float(m.group(2))
            continue
        if re.match(r"pgbench: error: client \d+ .*aborted", line):
            aborted += 1
        if len(errors) < 5 and line.strip():
            errors.append(line.strip())
    out = p.stdout.read()
    rc = p.wait()
    c2 = cpu_ticks(pids) if pids else 0
    wall = time.monotonic() - t0
    s1 = sys_cpu()
    with open("/proc/loadavg") as f:
        load1 = float(f.read().split()[0])

    def grab(k, conv=float):
        m = RE[k].search(out)
        return conv(m.group(1)) if m else None

    r = {
        "section": a.section, "target": a.target, "protocol": a.protocol,
        "clients": clients, "connect": a.connect, "repeat": a.repeat,
        "seconds": a.seconds, "rc": rc, "wall": round(wall, 2),
        "tps": grab("tps"), "lat_ms": grab("lat"), "txn": grab("txn", int),
        "failed": grab("failed", int), "aborted_clients": aborted,
        "conn_ms": grab("conn"), "init_conn_ms": grab("init"), "duration": duration,
        "errors": errors, "load1": load1,
        # whole machine busy share over the cell (pgbench+pooler+PostgreSQL+
        # whatever else runs on the box): a noise indicator, not a result
        "machine_busy_pct": round((s1[0] - s0[0]) * 100 / max(1, s1[1] - s0[1]), 1),
    }
    if pids and r["txn"]:
        us_total = (c2 - c0) * 1e6 / CLK_TCK
        r["cpu_us_per_txn_total"] = us_total / r["txn"]
        steady_txn = r["txn"] - first_txn
        if c1 is not None and steady_txn > 0 and not a.connect:
            r["cpu_us_per_txn"] = (c2 - c1) * 1e6 / CLK_TCK / steady_txn
        else:
            r["cpu_us_per_txn"] = r["cpu_us_per_txn_total"]
    with open(a.out, "a") as f:
        f.write(json.dumps(r) + "\n")
    tps = f"{r['tps']:.0f}" if r["tps"] is not None else "-"
    cpu = f"{r['cpu_us_per_txn']:.1f}" if r.get("cpu_us_per_txn") else "-"
    fail = ""
    if rc != 0 or r["failed"] or aborted:
        fail = f"  rc={rc} failed={r['failed']} aborted={aborted} {errors[:1]}"
    if r["init_conn_ms"] and duration - r["init_conn_ms"] / 1000 < a.seconds / 2:
        fail += f"  (only {duration - r['init_conn_ms'] / 1000:.1f}s measured after connecting)"
    print(f"  {a.section:5} {a.protocol:8} c={clients:<5} {a.target:14} "
          f"r{a.repeat} tps={tps:>8} cpu_us/txn={cpu:>6}{fail}", flush=True)


# ------------------------------------------------------------------ idle ----

def _msg(t, body):
    return t + struct.pack("!I", len(body) + 4) + body


class Login:
    salted_cache = {}

    def __init__(self, user, password, dbname):
        self.user, self.password, self.dbname = user, password, dbname

    async def read_msg(self, r):
        hdr = await r.readexactly(5)
        n = struct.unpack("!I", hdr[1:])[0]
        return hdr[:1], await r.readexactly(n - 4)

    async def run(self, host, port):
        r, w = await asyncio.open_connection(host, port)
        params = (b"user\0" + self.user.encode() + b"\0database\0" +
                  self.dbname.encode() + b"\0\0")
        body = struct.pack("!I", 196608) + params
        w.write(struct.pack("!I", len(body) + 4) + body)
        nonce = base64.b64encode(os.urandom(18)).decode()
        cfb = f"n=,r={nonce}"
        server_sig = None
        while True:
            t, b = await self.read_msg(r)
            if t == b"E":
                raise RuntimeError(b.decode(errors="replace"))
            if t == b"R":
                code = struct.unpack("!I", b[:4])[0]
                if code == 0:
                    continue
                if code == 5:       # md5
                    inner = hashlib.md5((self.password + self.user).encode()).hexdigest()
                    outer = "md5" + hashlib.md5(inner.encode() + b[4:8]).hexdigest()
                    w.write(_msg(b"p", outer.encode() + b"\0"))
                elif code == 3:     # cleartext
                    w.write(_msg(b"p", self.password.encode() + b"\0"))
                elif code == 10:    # SASL
                    first = ("n,," + cfb).encode()
                    w.write(_msg(b"p", b"SCRAM-SHA-256\0" +
                                 struct.pack("!i", len(first)) + first))
                elif code == 11:    # SASLContinue
                    sfirst = b[4:].decode()
                    attrs = dict(kv.split("=", 1) for kv in sfirst.split(","))
                    salt = base64.b64decode(attrs["s"])
                    it = int(attrs["i"])
                    key = (salt, it)
                    salted = self.salted_cache.get(key)
                    if salted is None:
                        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(), salt, it)
                        self.salted_cache[key] = salted
                    ck = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
                    sk = hashlib.sha256(ck).digest()
                    final_wo = "c=biws,r=" + attrs["r"]
                    auth = f"{cfb},{sfirst},{final_wo}".encode()
                    sig = hmac.new(sk, auth, hashlib.sha256).digest()
                    proof = bytes(x ^ y for x, y in zip(ck, sig))
                    skey = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
                    server_sig = hmac.new(skey, auth, hashlib.sha256).digest()
                    w.write(_msg(b"p", (final_wo + ",p=" +
                                        base64.b64encode(proof).decode()).encode()))
                elif code == 12:    # SASLFinal
                    v = b[4:].decode()
                    if base64.b64decode(v.split("v=", 1)[1]) != server_sig:
                        raise RuntimeError("bad server signature")
                else:
                    raise RuntimeError(f"auth code {code}")
                await w.drain()
            elif t == b"Z":
                return r, w


async def idle_main(a):
    pids = [int(x) for x in a.pids.split(",") if x]
    before = rss_kb(pids)
    sem = asyncio.Semaphore(a.concurrency)
    conns, errs = [], []
    t0 = time.monotonic()

    async def one():
        async with sem:
            try:
                conns.append(await Login(a.user, a.password, a.dbname).run("127.0.0.1", a.port))
            except Exception as e:   # noqa: BLE001 - counted and reported
                errs.append(str(e)[:200])
    await asyncio.gather(*(one() for _ in range(a.n)))
    login_s = time.monotonic() - t0
    await asyncio.sleep(2)
    after = rss_kb(pids)
    # still alive? a pooler that dropped idle clients would show EOF here
    await asyncio.sleep(1)
    alive = sum(1 for r, w in conns if not r.at_eof())
    for r, w in conns:
        w.close()
    res = {"section": "idle", "target": a.target, "n": a.n, "ok": len(conns),
           "alive": alive, "errors": len(errs), "first_error": errs[:1],
           "rss_before_kb": before, "rss_after_kb": after,
           "bytes_per_client": (after - before) * 1024 / max(1, len(conns)),
           "login_seconds": round(login_s, 2)}
    with open(a.out, "a") as f:
        f.write(json.dumps(res) + "\n")
    print(f"  idle  {a.target:14} {len(conns)}/{a.n} logged in ({len(errs)} errors) "
          f"in {login_s:.1f}s, RSS {before} -> {after} kB, "
          f"{res['bytes_per_client']:.0f} B/client", flush=True)


def cmd_idle(a):
    asyncio.run(idle_main(a))


# ---------------------------------------------------------------- report ----

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return None
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m * 100 if m else None


def f0(x):
    return "—" if x is None else f"{x:,.0f}"


def f1(x):
    return "—" if x is None else f"{x:.1f}"


def f2(x):
    return "—" if x is None else f"{x:.2f}"


def f3(x):
    return "—" if x is None else f"{x:.3f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def cmd_report(a):
    rows = [json.loads(l) for l in open(a.results) if l.strip()]
    out = []
    P = out.append

    cells = {}
    for r in rows:
        if r["section"] == "cell":
            cells.setdefault((r["protocol"], r["clients"]), {}).setdefault(r["target"], []).append(r)

    def agg(rs):
        if not rs:
            return None
        bad = [r for r in rs if r["rc"] != 0 or r.get("failed") or r.get("aborted_clients")]
        return {
            "tps": med([r["tps"] for r in rs if r["rc"] == 0 or r["tps"]]),
            "spread": spread([r["tps"] for r in rs]),
            "lat": med([r["lat_ms"] for r in rs]),
            "cpu": med([r.get("cpu_us_per_txn") for r in rs]),
            "load": med([r.get("load1") for r in rs]),
            "n": len(rs), "bad": len(bad),
            "failed": sum((r.get("failed") or 0) for r in rs),
            "aborted": sum((r.get("aborted_clients") or 0) for r in rs),
            "errors": next((r["errors"] for r in bad if r["errors"]), []),
        }

    protos = [p for p in ("simple", "extended", "prepared") if any(k[0] == p for k in cells)]

    def cell_rows(*targets):
        """(protocol, clients, each target's medians or None) per cell, in report order."""
        for p in protos:
            for c in sorted({k[1] for k in cells if k[0] == p}):
                t = cells[(p, c)]
                yield (p, c) + tuple(agg(t.get(x)) for x in targets)
    P("### Throughput (pgbench -S, medians over repeats)\n")
    P("tps = median transactions/s; spread = (max−min)/median of the repeats; "
      "lat = median of pgbench's mean latency; CPU = pooler utime+stime per "
      "transaction in µs (steady state, after all clients connected); load = median "
      "1-minute load average at the end of the runs (2 cores: above ~2 means "
      "something else competed for the CPU).\n")
    P("| protocol | clients | direct tps | PgBouncer tps | pgcat tps | pgcat+parser tps "
      "| pgcat/PgBouncer | pgcat/direct | lat ms direct / PgB / pgcat "
      "| CPU µs/txn PgB | CPU µs/txn pgcat | pgcat/PgB CPU | spread % d/PgB/pgcat | load |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|")
    notes = []
    for p in protos:
        for c in sorted({k[1] for k in cells if k[0] == p}):
            t = cells[(p, c)]
            d, b, g, gp = (agg(t.get(x)) for x in ("direct", "pgbouncer", "pgcat", "pgcat-parser"))
            def v(x, k):
                return x[k] if x else None
            def mark(x):
                return " ⚠" if x and x["bad"] else ""
            P(f"| {p} | {c} | {f0(v(d,'tps'))}{mark(d)} | "
              f"{f0(v(b,'tps')) if b else 'n/a'}{mark(b)} | {f0(v(g,'tps'))}{mark(g)} | "
              f"{f0(v(gp,'tps'))}{mark(gp)} | {f2(ratio(v(g,'tps'), v(b,'tps')))} | "
              f"{f2(ratio(v(g,'tps'), v(d,'tps')))} | "
              f"{f3(v(d,'lat'))} / {f3(v(b,'lat'))} / {f3(v(g,'lat'))} | "
              f"{f1(v(b,'cpu'))} | {f1(v(g,'cpu'))} | {f2(ratio(v(g,'cpu'), v(b,'cpu')))} | "
              f"{f1(v(d,'spread'))} / {f1(v(b,'spread'))} / {f1(v(g,'spread'))} | "
              f"{f1(med([x['load'] for x in (d, b, g, gp) if x]))} |")
            for name, x in (("direct", d), ("pgbouncer", b), ("pgcat", g), ("pgcat-parser", gp)):
                if x and x["bad"]:
                    notes.append(f"- {p} c={c} {name}: {x['bad']}/{x['n']} runs failed or "
                                 f"aborted (failed transactions {x['failed']}, aborted clients "
                                 f"{x['aborted']}); first error: `{' | '.join(x['errors'][:2])}`")
    if notes:
        P("\n⚠ = at least one repeat exited non-zero, reported failed transactions or aborted clients:\n")
        out.extend(notes)

    if any("pgbouncer125" in t for t in cells.values()):
        has_dm = any("pg_doorman" in t for t in cells.values())
        P("\n### pgcat vs PgBouncer 1.25.2 (medians)\n")
        P("PgBouncer 1.25.2 with the config of the first table's PgBouncer (1.18) "
          "plus `max_prepared_statements = 200` (its default), so it also runs "
          "the prepared cells. PgBouncer 1.18's column repeats the first table's "
          "for reference.\n")
        P("| protocol | clients | PgBouncer 1.18 tps | PgBouncer 1.25.2 tps | pgcat tps "
          "| pgcat/PgBouncer 1.25.2 | PgBouncer 1.25.2/1.18 | lat ms PgB 1.25.2 / pgcat "
          "| CPU µs/txn PgB 1.25.2 | CPU µs/txn pgcat | pgcat/PgB 1.25.2 CPU | spread % PgB 1.25.2 |"
          + (" pg_doorman/PgBouncer 1.25.2 |" if has_dm else ""))
        P("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|" + ("---:|" if has_dm else ""))
        bnotes = []
        for p in protos:
            for c in sorted({k[1] for k in cells if k[0] == p}):
                t = cells[(p, c)]
                b, b5, g, dm = (agg(t.get(x)) for x in ("pgbouncer", "pgbouncer125", "pgcat", "pg_doorman"))
                if not b5:
                    continue
                def v(x, k):
                    return x[k] if x else None
                P(f"| {p} | {c} | {f0(v(b,'tps')) if b else 'n/a'} | "
                  f"{f0(b5['tps'])}{' ⚠' if b5['bad'] else ''} | {f0(v(g,'tps'))} | "
                  f"{f2(ratio(v(g,'tps'), b5['tps']))} | {f2(ratio(b5['tps'], v(b,'tps')))} | "
                  f"{f3(b5['lat'])} / {f3(v(g,'lat'))} | {f1(b5['cpu'])} | {f1(v(g,'cpu'))} | "
                  f"{f2(ratio(v(g,'cpu'), b5['cpu']))} | {f1(b5['spread'])} |"
                  + (f" {f2(ratio(v(dm,'tps'), b5['tps']))} |" if has_dm else ""))
                if b5["bad"]:
                    bnotes.append(f"- {p} c={c} pgbouncer125: {b5['bad']}/{b5['n']} runs failed or "
                                  f"aborted (failed transactions {b5['failed']}, aborted clients "
                                  f"{b5['aborted']}); first error: `{' | '.join(b5['errors'][:2])}`")
        if bnotes:
            P("")
            out.extend(bnotes)

    P("\n### Query parser on vs off (pgcat, medians)\n")
    P("| protocol | clients | parser off tps | parser on tps | on/off | CPU µs/txn off | CPU µs/txn on |")
    P("|---|---:|---:|---:|---:|---:|---:|")
    for p in protos:
        for c in sorted({k[1] for k in cells if k[0] == p}):
            t = cells[(p, c)]
            g, gp = agg(t.get("pgcat")), agg(t.get("pgcat-parser"))
            if not g or not gp:
                continue
            P(f"| {p} | {c} | {f0(g['tps'])} | {f0(gp['tps'])} | {f2(ratio(gp['tps'], g['tps']))} "
              f"| {f1(g['cpu'])} | {f1(gp['cpu'])} |")

    if any("pg_doorman" in t for t in cells.values()):
        P("\n### pgcat vs pg_doorman (medians)\n")
        P("pg_doorman with one worker thread (`worker_threads = 1`), the same pool "
          "and its prepared-statement cache on; its CPU is utime+stime of all its "
          "threads. PgBouncer's column repeats the first table's for reference.\n")
        P("| protocol | clients | PgBouncer tps | pg_doorman tps | pgcat tps "
          "| pgcat/pg_doorman | pg_doorman/PgBouncer | lat ms pg_doorman / pgcat "
          "| CPU µs/txn pg_doorman | CPU µs/txn pgcat | pgcat/pg_doorman CPU | spread % pg_doorman |")
        P("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
        dnotes = []
        for p in protos:
            for c in sorted({k[1] for k in cells if k[0] == p}):
                t = cells[(p, c)]
                b, dm, g = (agg(t.get(x)) for x in ("pgbouncer", "pg_doorman", "pgcat"))
                if not dm:
                    continue
                def v(x, k):
                    return x[k] if x else None
                P(f"| {p} | {c} | {f0(v(b,'tps')) if b else 'n/a'} | "
                  f"{f0(dm['tps'])}{' ⚠' if dm['bad'] else ''} | {f0(v(g,'tps'))} | "
                  f"{f2(ratio(v(g,'tps'), dm['tps']))} | {f2(ratio(dm['tps'], v(b,'tps')))} | "
                  f"{f3(dm['lat'])} / {f3(v(g,'lat'))} | {f1(dm['cpu'])} | {f1(v(g,'cpu'))} | "
                  f"{f2(ratio(v(g,'cpu'), dm['cpu']))} | {f1(dm['spread'])} |")
                if dm["bad"]:
                    dnotes.append(f"- {p} c={c} pg_doorman: {dm['bad']}/{dm['n']} runs failed or "
                                  f"aborted (failed transactions {dm['failed']}, aborted clients "
                                  f"{dm['aborted']}); first error: `{' | '.join(dm['errors'][:2])}`")
        if dnotes:
            P("")
            out.extend(dnotes)

    if any("pgcat-w2" in t for t in cells.values()):
        P("\n### pgcat workers = 2 vs workers = 1 (medians)\n")
        P("Two worker processes share this machine's two cores with pgbench and "
          "PostgreSQL: this shows what a second worker does here, not on a larger machine.\n")
        P("| protocol | clients | workers=1 tps | workers=2 tps | w2/w1 | w2/PgBouncer | CPU µs/txn w1 | CPU µs/txn w2 |")
        P("|---|---:|---:|---:|---:|---:|---:|---:|")
        for p, c, g, w2, b in cell_rows("pgcat", "pgcat-w2", "pgbouncer"):
            if not g or not w2:
                continue
            P(f"| {p} | {c} | {f0(g['tps'])} | {f0(w2['tps'])}{' ⚠' if w2['bad'] else ''} | "
              f"{f2(ratio(w2['tps'], g['tps']))} | {f2(ratio(w2['tps'], b['tps'])) if b else 'n/a'} | "
              f"{f1(g['cpu'])} | {f1(w2['cpu'])} |")

    if any("pgcat-epoll" in t for t in cells.values()):
        P("\n### pgcat io_engine: auto (io_uring here) vs epoll (medians)\n")
        P("| protocol | clients | io_uring tps | epoll tps | io_uring/epoll | CPU µs/txn io_uring | CPU µs/txn epoll |")
        P("|---|---:|---:|---:|---:|---:|---:|")
        for p, c, g, ge in cell_rows("pgcat", "pgcat-epoll"):
            if not g or not ge:
                continue
            P(f"| {p} | {c} | {f0(g['tps'])} | {f0(ge['tps'])}{' ⚠' if ge['bad'] else ''} | "
              f"{f2(ratio(g['tps'], ge['tps']))} | {f1(g['cpu'])} | {f1(ge['cpu'])} |")

    if any("pgcat-before" in t for t in cells.values()):
        P("\n### pgcat before (PGCAT_BIN_BEFORE) vs pgcat (medians)\n")
        P("The same config, the same PostgreSQL, interleaved in one run.\n")
        P("| protocol | clients | before tps | pgcat tps | pgcat/before tps | CPU µs/txn before | "
          "CPU µs/txn pgcat | pgcat/before CPU |")
        P("|---|---:|---:|---:|---:|---:|---:|---:|")
        for p, c, g, gb in cell_rows("pgcat", "pgcat-before"):
            if not g or not gb:
                continue
            P(f"| {p} | {c} | {f0(gb['tps'])}{' ⚠' if gb['bad'] else ''} | {f0(g['tps'])} | "
              f"{f2(ratio(g['tps'], gb['tps']))} | {f1(gb['cpu'])} | {f1(g['cpu'])} | "
              f"{f2(ratio(g['cpu'], gb['cpu']))} |")

    if "prepared" in protos:
        P("\n### pgcat: prepared vs extended protocol (medians)\n")
        P("| clients | extended tps | prepared tps | prepared/extended | prepared failures |")
        P("|---:|---:|---:|---:|---|")
        for c in sorted({k[1] for k in cells if k[0] == "prepared"}):
            e = agg(cells.get(("extended", c), {}).get("pgcat"))
            pr = agg(cells.get(("prepared", c), {}).get("pgcat"))
            if not e or not pr:
                continue
            P(f"| {c} | {f0(e['tps'])} | {f0(pr['tps'])} | {f2(ratio(pr['tps'], e['tps']))} | "
              f"{pr['bad']}/{pr['n']} runs bad, {pr['failed']} failed txns, {pr['aborted']} aborted clients |")

    conn = {}
    for r in rows:
        if r["section"] == "conn":
            conn.setdefault(r["target"], []).append(r)
    if conn:
        P("\n### Connection rate (pgbench -S -C: a new connection per transaction, medians)\n")
        P("| target | auth (client → pooler) | connections/s | spread % | pooler CPU µs per connection+txn | runs bad |")
        P("|---|---|---:|---:|---:|---|")
        desc = {
            "direct": "SCRAM (PostgreSQL)",
            "pgbouncer": "SCRAM, userlist holds the SCRAM secret",
            "pgbouncer-plain": "SCRAM, userlist holds the plaintext password",
            "pgbouncer-md5": "md5 (plaintext userlist)",
            "pgbouncer125": "PgBouncer 1.25.2: SCRAM, userlist holds the SCRAM secret",
            "pgcat": "SCRAM (plaintext password in pgcat.ini)",
            "pgcat-secret": "SCRAM (the SCRAM secret in pgcat.ini)",
            "pgcat-md5": "md5 (plaintext password in pgcat.ini)",
            "pg_doorman": "SCRAM (the SCRAM secret in its TOML, passthrough to PostgreSQL)",
        }
        for tname in ("direct", "pgbouncer", "pgbouncer-plain", "pgbouncer-md5", "pgbouncer125", "pgcat",
                      "pgcat-secret", "pgcat-md5", "pg_doorman"):
            rs = conn.get(tname)
            if not rs:
                continue
            x = agg(rs)
            P(f"| {tname} | {desc[tname]} | {f0(x['tps'])} | {f1(x['spread'])} | "
              f"{f1(x['cpu']) if tname != 'direct' else '—'} | {x['bad']}/{x['n']} |")
        def mt(n):
            x = agg(conn.get(n))
            return x and x["tps"]
        def mc(n):
            x = agg(conn.get(n))
            return x and x["cpu"]
        P(f"\npgcat/PgBouncer connection rate: SCRAM (vs secret userlist) "
          f"{f2(ratio(mt('pgcat'), mt('pgbouncer')))}, SCRAM (vs plaintext userlist) "
          f"{f2(ratio(mt('pgcat'), mt('pgbouncer-plain')))}, md5 "
          f"{f2(ratio(mt('pgcat-md5'), mt('pgbouncer-md5')))}; "
          f"CPU per connection pgcat/PgBouncer: SCRAM {f2(ratio(mc('pgcat'), mc('pgbouncer')))} "
          f"(pgcat holding the SCRAM secret: {f2(ratio(mc('pgcat-secret'), mc('pgbouncer')))}), "
          f"md5 {f2(ratio(mc('pgcat-md5'), mc('pgbouncer-md5')))}.")
        if conn.get("pgbouncer125"):
            P(f"\npgcat/PgBouncer 1.25.2 connection rate (both SCRAM, PgBouncer's userlist holding the SCRAM "
              f"secret): {f2(ratio(mt('pgcat'), mt('pgbouncer125')))}, pgcat holding the SCRAM secret too: "
              f"{f2(ratio(mt('pgcat-secret'), mt('pgbouncer125')))}; CPU per connection pgcat/PgBouncer 1.25.2: "
              f"{f2(ratio(mc('pgcat'), mc('pgbouncer125')))} (pgcat holding the SCRAM secret: "
              f"{f2(ratio(mc('pgcat-secret'), mc('pgbouncer125')))}); PgBouncer 1.25.2/1.18 connection rate: "
              f"{f2(ratio(mt('pgbouncer125'), mt('pgbouncer')))}"
              + (f", pg_doorman/PgBouncer 1.25.2: {f2(ratio(mt('pg_doorman'), mt('pgbouncer125')))}"
                 if conn.get("pg_doorman") else "") + ".")
        if conn.get("pg_doorman"):
            P(f"\npgcat/pg_doorman connection rate (both SCRAM): {f2(ratio(mt('pgcat'), mt('pg_doorman')))}, "
              f"pgcat holding the SCRAM secret as pg_doorman does: {f2(ratio(mt('pgcat-secret'), mt('pg_doorman')))}; "
              f"CPU per connection pgcat/pg_doorman: {f2(ratio(mc('pgcat'), mc('pg_doorman')))} "
              f"(pgcat holding the SCRAM secret: {f2(ratio(mc('pgcat-secret'), mc('pg_doorman')))}).")

    idle = [r for r in rows if r["section"] == "idle"]
    if idle:
        P("\n### Memory per idle logged-in client\n")
        P("| target | clients logged in | still connected after 3 s | RSS before kB | RSS after kB | bytes per client | login time s |")
        P("|---|---:|---:|---:|---:|---:|---:|")
        for r in idle:
            P(f"| {r['target']} | {r['ok']}/{r['n']} | {r['alive']} | {r['rss_before_kb']:,} | "
              f"{r['rss_after_kb']:,} | {r['bytes_per_client']:,.0f} | {r['login_seconds']} |")
            if r["errors"]:
                P(f"| | {r['errors']} login errors, first: `{r['first_error'][0]}` | | | | | |")
        bpc = {r["target"]: r["bytes_per_client"] for r in idle}
        if "pgbouncer125" in bpc:
            P(f"\nBytes per idle client pgcat/PgBouncer 1.25.2: {f2(ratio(bpc.get('pgcat'), bpc['pgbouncer125']))}"
              f" (pgcat/PgBouncer 1.18: {f2(ratio(bpc.get('pgcat'), bpc.get('pgbouncer')))}).")
    print("\n".join(out))


# ------------------------------------------------------------------ main ----

def main():
    ap = argparse.ArgumentParser()
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("freeports")
    p.add_argument("n", type=int)
    p.set_defaults(f=cmd_freeports)

    p = sp.add_parser("cell")
    for k in ("section", "target", "protocol", "out", "user", "password", "dbname"):
        p.add_argument("--" + k, required=True)
    p.add_argument("--pids", default="")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--seconds", type=int, required=True)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--connect", action="store_true")
    p.set_defaults(f=cmd_cell)

    p = sp.add_parser("idle")
    for k in ("target", "out", "user", "password", "dbname", "pids"):
        p.add_argument("--" + k, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--concurrency", type=int, default=200)
    p.set_defaults(f=cmd_idle)

    p = sp.add_parser("report")
    p.add_argument("results")
    p.set_defaults(f=cmd_report)
    a = ap.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
