# SPDX-License-Identifier: MIT
"""A stop-gap for test/peers/pgbouncer_suite.py --translate-ini: the
pgbouncer.ini files PgBouncer's test harness writes, turned into a pgcat.ini
that pgcat reads today, and the "pgbouncer" executable the harness runs.

This is not pgcat's pgbouncer.ini reader and stands in for none: it exists
so that, while pgcat cannot read pgbouncer.ini, the suite can still say
which of its tests fail for another reason. It maps what
doc/configuration.md's "Coming from PgBouncer" maps, drops the rest, and
writes every dropped setting into the generated file as a comment (and into
the shim's log), so that a failure can be traced to what was lost. Known
losses: pool_mode = statement becomes transaction; of a host list only the
first host is kept; [databases] user= becomes, for every user of
auth_file, a users section with server_username; min_pool_size,
per-database auth_user/auth_dbname, the '*' fallback database, peers on
Unix sockets, and every [pgbouncer] setting pgcat lacks are dropped.

Only the standard library: the shim runs under /usr/bin/python3 as the OS
user the harness runs as.

As the harness's executable (`pgbouncer_ini.py shim` behind a small script
RUN/pgbouncer that the runner writes):

    pgbouncer [--quiet|-q] [--verbose|-v] [--reboot|-R] [--version|-V] [--help|-h] INI

--version and --help are passed on to pgcat; anything else it does not know
(--reboot, -d) too, so pgcat refuses it as it would. Otherwise pgcat is
started as a child process on INI's stem + ".pgcat.ini" beside it: a FIFO
the shim serves, so that each time pgcat reads its configuration (at
start, on SIGHUP and on RELOAD) it reads a translation of INI as INI is
then; the latest one is also written to INI's stem + ".pgcat-last.ini".
The shim forwards SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1 and SIGUSR2 to
pgcat and exits with its status. Environment: PGBOUNCER_SUITE_PGCAT (the
pgcat binary, required), PGBOUNCER_SUITE_SHIM_LOG (a file each start,
translation and pgcat's stderr are appended to; default: stderr).
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

# PgBouncer times in seconds -> pgcat key (durations written with "s").
SECONDS = {
    "server_lifetime": "server_lifetime",
    "server_idle_timeout": "idle_timeout",
    "query_timeout": "query_timeout",
    "query_wait_timeout": "query_wait_timeout",
    "idle_transaction_timeout": "idle_transaction_timeout",
    "client_idle_timeout": "client_idle_timeout",
    "transaction_timeout": "transaction_timeout",
    "reserve_pool_timeout": "reserve_pool_timeout",
    "server_connect_timeout": "connect_timeout",
    "server_check_delay": "healthcheck_delay",
    "dns_max_ttl": "dns_max_ttl",
}
# Same name, same meaning, value as written.
SAME = (
    "listen_addr", "listen_port", "unix_socket_dir", "pidfile", "max_client_conn",
    "default_pool_size", "reserve_pool_size", "max_db_connections", "max_user_connections",
    "admin_users", "stats_users", "auth_query", "auth_user", "log_connections",
    "log_disconnections", "max_packet_size", "server_reset_query", "server_round_robin",
    "tcp_keepalive", "tcp_keepcnt", "tcp_keepidle", "tcp_keepintvl", "stats_period",
    "client_tls_sslmode", "client_tls_cert_file", "client_tls_key_file", "client_tls_ca_file",
    "server_tls_sslmode", "server_tls_ca_file", "server_tls_cert_file", "server_tls_key_file",
    "peer_id", "syslog",
)
PATHS = ("auth_file", "auth_hba_file", "pidfile", "logfile", "client_tls_cert_file",
         "client_tls_key_file", "client_tls_ca_file", "server_tls_ca_file",
         "server_tls_cert_file", "server_tls_key_file")
# pgcat's defaults differ from PgBouncer's here; PgBouncer's are written out.
PGBOUNCER_DEFAULTS = {"pool_mode": "session", "default_pool_size": "20", "max_client_conn": "100",
                      "auth_type": "md5", "server_lifetime": "3600", "server_idle_timeout": "600",
                      "server_connect_timeout": "15", "query_wait_timeout": "120"}


def parse_ini(path, cwd, seen=None):
    """[(section, key, value, where)] in file order, %include followed, as
    PgBouncer reads it: leading blanks skipped, ';' and '#' comment lines,
    setting names case-insensitive (database and user names are not)."""
    seen = seen or set()
    path = os.path.join(cwd, path)
    out = []
    if path in seen:
        return out
    seen.add(path)
    section = ""
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line[0] in ";#":
                continue
            if line.startswith("%include"):
                out += parse_ini(line[len("%include"):].strip(), cwd, seen)
                continue
            if line.startswith("["):
                section = line.strip("[]").strip().lower()
                continue
            key, sep, value = line.partition("=")
            if not sep:
                out.append((section, "", line, "%s:%d" % (path, n)))
                continue
            out.append((section, key.strip(), value.strip(), "%s:%d" % (path, n)))
    return out


def parse_connstr(s):
    """libpq-style 'k=v k2='quoted value'' as PgBouncer's [databases] has it."""
    res = {}
    i, n = 0, len(s)
    while i < n:
        while i < n and s[i].isspace():
            i += 1
        if i >= n:
            break
        j = i
        while j < n and s[j] != "=" and not s[j].isspace():
            j += 1
        key = s[i:j].lower()
        while j < n and s[j].isspace():
            j += 1
        if j >= n or s[j] != "=":
            raise ValueError("missing '=' after %r" % key)
        j += 1
        while j < n and s[j].isspace():
            j += 1
        if j < n and s[j] == "'":
            j += 1
            val = []
            while j < n:
                c = s[j]
                if c == "\\" and j + 1 < n:
                    val.append(s[j + 1])
                    j += 2
                    continue
                if c == "'":
                    if j + 1 < n and s[j + 1] == "'":
                        val.append("'")
                        j += 2
                        continue
                    j += 1
                    break
                val.append(c)
                j += 1
            value = "".join(val)
        else:
            k = j
            while j < n and not s[j].isspace():
                j += 1
            value = s[k:j]
        res[key] = value
        i = j
    return res


def parse_userlist(path):
    """[(user, secret)] of a PgBouncer auth_file ("user" "secret" lines)."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r'\s*"((?:[^"]|"")*)"\s+"((?:[^"]|"")*)"', line)
                if m:
                    out.append((m.group(1).replace('""', '"'), m.group(2).replace('""', '"')))
    except OSError:
        pass
    return out


def seconds(v):
    v = v.strip()
    try:
        x = float(v)
    except ValueError:
        return v            # let pgcat say what is wrong with it
    if x == 0:
        return "0"
    ms = x * 1000
    return "%ds" % x if x == int(x) else "%dms" % round(ms)


def safe(v):
    """A value pgcat's ini syntax keeps as written (no ' ;' comment start, one line)."""
    return "\n" not in v and not re.search(r"\s[;#]", v) and len(v) < 170


class Translation:
    def __init__(self, ini, cwd):
        self.ini = ini
        self.cwd = cwd
        self.dropped = []        # (where, text, why)
        self.general = {}
        self.databases = {}      # name -> (connstr dict, where)
        self.users = {}          # name -> dict
        self.peers = {}          # id -> (dict, where)
        self.hba_file = ""
        self.entries = parse_ini(ini, cwd)

    def drop(self, where, what, why):
        self.dropped.append((where, what, why))

    def path(self, v):
        return v if not v or os.path.isabs(v) else os.path.normpath(os.path.join(self.cwd, v))

    def run(self):
        pgb = {}
        for section, key, value, where in self.entries:
            if not key:
                self.drop(where, value, "not key = value")
            elif section == "pgbouncer":
                pgb[key.lower()] = (value, where)      # the last one counts, as in PgBouncer
            elif section == "databases":
                try:
                    self.databases[key] = (parse_connstr(value), where)
                except ValueError as e:
                    self.drop(where, key, "cannot parse: %s" % e)
            elif section == "users":
                try:
                    self.users[key] = (parse_connstr(value), where)
                except ValueError as e:
                    self.drop(where, key, "cannot parse: %s" % e)
            elif section == "peers":
                try:
                    self.peers[key] = (parse_connstr(value), where)
                except ValueError as e:
                    self.drop(where, key, "cannot parse: %s" % e)
            else:
                self.drop(where, "[%s] %s" % (section, key), "unknown section")
        for k, v in PGBOUNCER_DEFAULTS.items():
            pgb.setdefault(k, (v, "(PgBouncer's default)"))
        g = self.general
        g["workers"] = "1"
        g["admin_username"] = "pgbouncer"
        g["log_level"] = "info"
        cfgdir = os.path.dirname(os.path.join(self.cwd, self.ini))
        g["state_dir"] = os.path.join(cfgdir, "pgcat-state")
        self.auth_type = "md5"
        self.auth_file = ""
        for key, (value, where) in pgb.items():
            if key in PATHS:
                value = self.path(value)
            if key in SECONDS:
                g[SECONDS[key]] = seconds(value)
            elif key == "logfile":
                g["log_file"] = value
            elif key == "auth_type":
                self.auth_type = value.lower()
            elif key == "auth_file":
                self.auth_file = value
                g["auth_file"] = value
            elif key == "auth_hba_file":
                self.hba_file = value
            elif key == "pool_mode":
                if value.lower() == "statement":
                    self.drop(where, "pool_mode = statement", "pgcat has no statement mode: transaction")
                    g["pool_mode"] = "transaction"
                else:
                    g["pool_mode"] = value
            elif key == "max_prepared_statements":
                n = value.strip()
                g["prepared_statements"] = "false" if n == "0" else "true"
                if n.isdigit() and n != "0":
                    g["prepared_statements_cache_size"] = n
            elif key == "client_login_timeout":
                if "server_connect_timeout" not in pgb:
                    g["connect_timeout"] = seconds(value)
            elif key == "tcp_user_timeout":
                g["tcp_user_timeout"] = value + ("ms" if value.strip().isdigit() and value.strip() != "0" else "")
            elif key == "verbose":
                if value.strip() not in ("", "0"):
                    g["log_level"] = "debug" if value.strip() == "1" else "trace"
            elif key == "min_pool_size":
                self.drop(where, "min_pool_size = " + value, "dropped: pgcat opens it for every user of every pool")
            elif key in SAME:
                g[key] = value
            else:
                self.drop(where, "%s = %s" % (key, value), "no pgcat setting")
        if self.auth_type == "hba":
            g["auth_type"] = "trust"     # the hba file decides
            if self.hba_file:
                g["auth_hba_file"] = self.hba_file
        else:
            g["auth_type"] = self.auth_type
        self.userlist = parse_userlist(self.auth_file) if self.auth_file else []
        secrets = dict(self.userlist)
        if "pgbouncer" in secrets and not secrets["pgbouncer"].startswith(("md5", "SCRAM-SHA-256$")):
            g["admin_password"] = secrets["pgbouncer"]
        lines = ["; generated by test/peers/pgbouncer_ini.py from %s" % os.path.join(self.cwd, self.ini),
                 "[general]"]
        for k, v in g.items():
            if v == "" and k in PATHS:
                continue
            if not safe(v):
                self.drop("[pgbouncer]", k, "value pgcat's ini cannot hold")
                continue
            lines.append("%s = %s" % (k, v))
        for name, (cs, where) in self.databases.items():
            lines += self.pool(name, cs, where, secrets)
        for user, (ucs, uwhere) in self.users.items():
            for k in ucs:
                if k not in ("pool_size", "reserve_pool_size", "max_user_connections", "pool_mode",
                             "query_timeout", "transaction_timeout"):
                    self.drop(uwhere, "[users] %s: %s" % (user, k), "not translated")
            if user not in secrets:
                self.drop(uwhere, "[users] %s" % user, "not in auth_file: no users section")
        for pid, (cs, where) in self.peers.items():
            host, port = cs.get("host", ""), cs.get("port", "6432")
            if not pid.isdigit() or not host or host.startswith("/"):
                self.drop(where, "[peers] %s" % pid, "pgcat's peers are TCP host:port only")
                continue
            lines += ["[peers]", "%s = %s:%s" % (pid, "[%s]" % host if ":" in host else host, port)]
        for where, what, why in self.dropped:
            # pgcat refuses any line over 197 characters, comments too
            lines.append(("; dropped (%s): %s: %s" % (os.path.basename(where), what.replace("\n", " "), why))[:190])
        return "\n".join(lines) + "\n"

    def pool(self, name, cs, where, secrets):
        if name == "*":
            self.drop(where, "* (fallback database)", "pgcat has none")
            return []
        if "." in name or len(name.encode()) > 63:
            self.drop(where, name, "not a pgcat pool name")
            return []
        out = ["[pools.%s]" % name]
        for k in cs:
            if k not in ("host", "port", "dbname", "user", "password", "pool_size", "reserve_pool",
                         "reserve_pool_size", "pool_mode", "max_db_connections", "connect_query"):
                self.drop(where, "%s: %s=%s" % (name, k, cs[k]), "not translated")
        mode = cs.get("pool_mode", "")
        if mode:
            out.append("pool_mode = %s" % ("transaction" if mode.lower() == "statement" else mode))
            if mode.lower() == "statement":
                self.drop(where, "%s: pool_mode=statement" % name, "pgcat has no statement mode: transaction")
        if cs.get("max_db_connections"):
            out.append("max_db_connections = %s" % cs["max_db_connections"])
        if cs.get("connect_query"):
            if safe(cs["connect_query"]):
                out.append("connect_query = %s" % cs["connect_query"])
            else:
                self.drop(where, "%s: connect_query" % name, "value pgcat's ini cannot hold")
        port = cs.get("port", "5432")
        servers, hosts = [], []
        for h in cs.get("host", "").split(","):
            h = h.strip()
            if h and h not in hosts:       # a shard lists a server once
                hosts.append(h)
        # A host list is PgBouncer's set of equivalent servers; pgcat's
        # replicas are something else (and bring a lag monitor that logs
        # in as the pool's users): the first host only.
        for h in hosts[:1]:
            host = "[%s]" % h if ":" in h else h
            servers.append("%s:%s:primary" % (host, port))
        if not servers:
            servers = ["/tmp:%s:primary" % port]     # PgBouncer's default: the Unix socket
        if len(hosts) > 1:
            self.drop(where, "%s: host=%s" % (name, cs["host"]), "host list: the first host only")
        out += ["[pools.%s.shards.0]" % name, "database = %s" % (cs.get("dbname") or name),
                "servers = %s" % ", ".join(servers)]
        forced = cs.get("user", "")
        per_db = {k: cs[k] for k in ("pool_size",) if cs.get(k)}
        rp = cs.get("reserve_pool_size") or cs.get("reserve_pool")
        if rp:
            per_db["reserve_pool_size"] = rp
        if not (forced or per_db or cs.get("password") or self.users):
            return out    # the pool takes its users from auth_file
        for user, secret in self.userlist:
            sec = ["[pools.%s.users.%s]" % (name, user)]
            if secret and safe(secret):
                sec.append("password = %s" % secret)
            if forced:
                sec.append("server_username = %s" % forced)
                spw = cs.get("password") or secrets.get(forced, "")
                if spw and safe(spw):
                    sec.append("server_password = %s" % spw)
            elif cs.get("password") and safe(cs["password"]):
                sec.append("server_password = %s" % cs["password"])
            vals = dict(per_db)
            # with a forced user all clients share its pool: its [users] line counts
            ucs = self.users.get(forced or user, ({}, ""))[0]
            for k, v in ucs.items():
                if k in ("pool_size", "reserve_pool_size", "max_user_connections"):
                    vals[k] = v
                elif k == "pool_mode":
                    vals[k] = "transaction" if v.lower() == "statement" else v
                elif k in ("query_timeout",):
                    vals["statement_timeout"] = seconds(v)
                elif k in ("transaction_timeout",):
                    vals["transaction_timeout"] = seconds(v)
            for k, v in vals.items():
                sec.append("%s = %s" % (k, v))
            out += sec
        return out


def translate(ini, cwd=None):
    """pgcat.ini text for PgBouncer ini file INI (relative paths from CWD, as PgBouncer takes them)."""
    t = Translation(ini, cwd or os.getcwd())
    return t.run(), t


# ---------------------------------------------------------------------------
# the shim


def shim_main(argv):
    pgcat = os.environ.get("PGBOUNCER_SUITE_PGCAT")
    if not pgcat:
        print("pgbouncer shim: PGBOUNCER_SUITE_PGCAT is not set", file=sys.stderr)
        return 2
    logpath = os.environ.get("PGBOUNCER_SUITE_SHIM_LOG")
    log = open(logpath, "a", buffering=1) if logpath else sys.stderr
    flags, pos, passthrough = [], [], False
    for a in argv:
        if a in ("-q", "--quiet"):
            # PgBouncer's --quiet only keeps the log off stderr (pgcat
            # writes to log_file alone when it is set); pgcat's -q lowers
            # the log level, which would hide the lines the tests read
            continue
        elif a in ("-v", "--verbose"):
            flags.append("-v")
        elif a.startswith("-"):
            passthrough = True        # --version, --help, --reboot, -d ...: pgcat's answer
            flags.append(a)
        else:
            pos.append(a)
    if passthrough or len(pos) != 1:
        log.write("%s pgbouncer shim %d: exec pgcat %s\n" % (time.strftime("%T"), os.getpid(), " ".join(argv)))
        if log is not sys.stderr:
            log.close()
        os.execv(pgcat, [pgcat] + argv)
    ini = pos[0]
    cwd = os.getcwd()
    src = os.path.join(cwd, ini)
    base = os.path.splitext(src)[0]
    fifo = base + ".pgcat.ini"
    last = base + ".pgcat-last.ini"   # a copy of the latest translation, for the logs

    def translation():
        try:
            text, t = translate(ini, cwd)
            note = "%d dropped" % len(t.dropped)
        except Exception as e:      # the harness wrote something unreadable: pgcat refuses it
            text = "; cannot translate %s: %r\n[general]\nnot a key value line\n" % (src, e)
            note = "cannot translate: %r" % e
        with open(last, "w") as f:
            f.write(text)
        log.write("%s shim %d: %s translated (%s)\n" % (time.strftime("%T"), os.getpid(), src, note))
        return text

    # pgcat reads its configuration from a FIFO: each time it opens the
    # file (at start, on SIGHUP or RELOAD) it gets a translation of the ini
    # as it is at that moment, so that a RELOAD right after the harness
    # rewrote the ini sees the new one. pgcat reads the file with fopen
    # and fread to the end of file, which a FIFO serves; with one worker
    # only one process reads it at a time.
    if os.path.lexists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo, 0o600)

    def serve():
        while True:
            fd = os.open(fifo, os.O_WRONLY)        # waits for pgcat to open it
            # A new FIFO in its place before this one is written: the next
            # open is a new reader's, and this reader sees the end of file
            # when this one write end closes.
            tmp = fifo + ".next"
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.mkfifo(tmp, 0o600)
            os.replace(tmp, fifo)
            data = translation().encode()
            try:
                while data:
                    data = data[os.write(fd, data):]
            except BrokenPipeError:
                pass
            finally:
                os.close(fd)
    threading.Thread(target=serve, daemon=True).start()
    log.write("%s shim %d: starting pgcat %s %s\n" % (time.strftime("%T"), os.getpid(), " ".join(flags), fifo))
    child = subprocess.Popen([pgcat] + flags + [fifo], stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def forward(sig, _frame):
        try:
            child.send_signal(sig)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, forward)
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
    log.write("%s shim %d: pgcat exited with %d\n" % (time.strftime("%T"), os.getpid(), rc))
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "translate":
        text, _ = translate(sys.argv[2])
        sys.stdout.write(text)
        sys.exit(0)
    if len(sys.argv) >= 2 and sys.argv[1] == "shim":
        sys.exit(shim_main(sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
