# SPDX-License-Identifier: MIT
"""Fixtures for pgcat's integration tests.

- `pg`: one throwaway PostgreSQL 15 primary for the whole session (initdb in a
  temp dir, run as OS user postgres when we are root), with the roles and
  databases the tests use and a pg_hba.conf that makes the server ask each
  role for a different authentication method.
- `pg_replica`: a streaming replica of it (pg_basebackup -R), started only
  for the tests that ask for it.
- `pgcat`: a factory; each call writes a pgcat.ini on a free port, starts the
  binary (stderr to a log file), waits until it accepts, and at teardown
  sends SIGTERM, expects exit code 0 and a log free of sanitizer reports.
  Logs of pgcat and PostgreSQL are dumped when a test fails.

Nothing sleeps for a fixed time: `wait_until(pred, timeout)` polls.
"""
import contextlib
import copy
import ctypes
import hashlib
import os
import re
import shutil
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pgwire  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
IS_ROOT = os.geteuid() == 0
PG_OS_USER = os.environ.get("PG_OS_USER", "postgres")

# Passwords of the roles the fixtures create (on PostgreSQL and in pgcat.ini).
PASSWORDS = {
    "app": "app_pw",
    "md5user": "md5_pw",
    "cleartext_user": "clear_pw",
    "trust_user": "trust_pw",   # PostgreSQL trusts it; pgcat's clients still give this
}
ADMIN_USER = "pgcat"
ADMIN_PASSWORD = "admin_pw"

SANITIZER_RE = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|ThreadSanitizer")

DEFAULT_ASAN = "abort_on_error=0:halt_on_error=1:detect_leaks=1:print_stacktrace=1"
DEFAULT_UBSAN = "print_stacktrace=1:halt_on_error=1"


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------

def wait_until(pred, timeout=10.0, interval=0.05, msg=None):
    """Poll pred() until it returns a truthy value; return that value.
    Fails the test (AssertionError) after timeout seconds."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - predicate may fail while things start
            last_exc = e
        if time.monotonic() >= deadline:
            detail = msg or getattr(pred, "__name__", "condition")
            if last_exc is not None:
                detail += " (last error: %r)" % (last_exc,)
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, detail))
        time.sleep(interval)


def free_port(host="127.0.0.1"):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(host, port, timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pgcat_binary():
    env = os.environ.get("PGCAT_BIN")
    if env:
        return env
    for cand in (REPO / "build-asan" / "pgcat", REPO / "pgcat"):
        if cand.exists():
            return str(cand)
    return str(REPO / "pgcat")


def pgcat_next_binary():
    """pgcat with another version string (make pgcat-next, include/version.h):
    the newer build the upgrade tests take over to. PGCAT_BIN_NEXT, else
    pgcat-next beside pgcat_binary(); scripts/test.sh builds it."""
    env = os.environ.get("PGCAT_BIN_NEXT")
    path = Path(env) if env else Path(pgcat_binary()).parent / "pgcat-next"
    if not path.exists():
        pytest.fail("no %s: run 'make pgcat-next' in pgcat's build directory, or set PGCAT_BIN_NEXT" % path)
    return str(path)


def md5_secret(user, password):
    return "md5" + hashlib.md5((password + user).encode()).hexdigest()


def tail(path, n=200):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        return "<cannot read %s: %s>" % (path, e)
    return "\n".join(lines[-n:])


def as_pg_user(cmd):
    """Prefix a command so it runs as the PostgreSQL OS user when we are root."""
    if IS_ROOT:
        return ["runuser", "-u", PG_OS_USER, "--"] + cmd
    return cmd


def proc_children(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def proc_tree(pid):
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += proc_children(p)
    return seen


def proc_status_kb(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kb(pid):
    """Resident memory of a process and all its descendants (pgcat's workers)."""
    return sum(proc_status_kb(p, "VmRSS") for p in proc_tree(pid))


def sanitizer_lines(text):
    """The lines of text that are part of a sanitizer report."""
    return [l for l in text.splitlines() if SANITIZER_RE.search(l)]


def check_sanitizer_log(*paths, text=""):
    """Fail (AssertionError) if a pgcat log (paths: log files, e.g. stderr or
    ASan's log_path files; text: captured output) holds an AddressSanitizer,
    LeakSanitizer, UndefinedBehaviorSanitizer or ThreadSanitizer report or a
    "runtime error:" line: the same check the `pgcat` fixture makes."""
    found = []
    for p in paths:
        try:
            found += ["%s: %s" % (p, l) for l in sanitizer_lines(Path(p).read_text(errors="replace"))]
        except OSError:
            pass
    found += sanitizer_lines(text or "")
    if found:
        raise AssertionError("sanitizer report in pgcat's log:\n  " + "\n  ".join(found[:20]))


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_and_check(proc, log, sig=signal.SIGTERM, timeout=30.0, expect_rc=0):
    """Stop a pgcat the test started itself (subprocess.Popen with
    start_new_session=True) the way the `pgcat` fixture stops its own:
    send sig if it still runs, wait at most timeout seconds, then check that
    it exited with expect_rc, left no worker behind and that its log (a path,
    or a list of paths) has no sanitizer report. A pgcat that does not exit
    in time gets SIGKILL (its process group, by PID) and fails the check."""
    problems = []
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        rc = None
        problems.append("pgcat (pid %d) did not exit within %.0fs after signal %d" % (proc.pid, timeout, sig))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    if rc is not None and expect_rc is not None and rc != expect_rc:
        problems.append("pgcat (pid %d) exited with code %d (expected %d)" % (proc.pid, rc, expect_rc))
    if _group_alive(proc.pid):
        deadline = time.monotonic() + 5
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(proc.pid):
            problems.append("pgcat (pid %d) left processes running after it exited" % proc.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    paths = [log] if isinstance(log, (str, Path)) else list(log)
    try:
        check_sanitizer_log(*paths)
    except AssertionError as e:
        problems.append(str(e))
    if problems:
        raise AssertionError("; ".join(problems) + "\n----- %s, last 60 lines -----\n%s"
                             % (paths[0], tail(paths[0], 60)))
    return rc


@contextlib.contextmanager
def pgcat_process(args, log, env=None, binary=None, **kw):
    """Start pgcat (binary, default pgcat_binary(), + args) with stdout and stderr to the file
    log, in a session of its own; yield the Popen. On leaving, stop_and_check()
    it (SIGTERM unless it has exited already: a test may stop it itself and
    assert on the exit code). When the body failed, pgcat is still stopped
    (by PID, bounded) but the body's error is the one reported."""
    fh = open(log, "ab")
    try:
        proc = subprocess.Popen([binary or pgcat_binary()] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                                stdout=fh, stderr=subprocess.STDOUT, env=pgcat_env(env),
                                start_new_session=True, **kw)
    except BaseException:
        fh.close()
        raise
    try:
        yield proc
    except BaseException:
        try:
            stop_and_check(proc, log)
        except AssertionError as e:
            print("\n" + str(e))
        raise
    else:
        stop_and_check(proc, log)
    finally:
        fh.close()


# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------

class PgServer:
    def __init__(self, root: Path, name: str):
        self.root = root
        self.name = name
        self.datadir = root / name
        self.sockdir = root / ("sock_" + name)
        self.logfile = root / (name + ".log")
        self.host = "127.0.0.1"
        self.port = None

    # -- lifecycle -----------------------------------------------------------
    def _run(self, cmd, **kw):
        return subprocess.run(as_pg_user(cmd), check=True, capture_output=True, text=True, **kw)

    def _conf(self, port, extra=""):
        return f"""
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{self.sockdir}'
max_connections = 300
superuser_reserved_connections = 5
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 128MB
wal_level = replica
max_wal_senders = 5
hot_standby = on
log_line_prefix = '%m [%p] %q%u@%d '
log_connections = on
log_disconnections = on
log_min_messages = warning
lc_messages = 'C'
{extra}
"""

    def initdb(self):
        self.sockdir.mkdir(parents=True, exist_ok=True)
        self._chown(self.sockdir)
        self._run([str(PG_BIN / "initdb"), "-D", str(self.datadir), "-U", "postgres",
                   "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"])
        self.port = free_port()
        with open(self.datadir / "postgresql.conf", "a") as f:
            f.write(self._conf(self.port))
        # One authentication method per role, so pgcat's server-side login is
        # exercised with each of them. Superuser postgres is trusted: the
        # tests use it to look at pg_stat_activity and to kill backends.
        (self.datadir / "pg_hba.conf").write_text("""
local   all           all                          trust
host    all           postgres       127.0.0.1/32  trust
host    replication   postgres       127.0.0.1/32  trust
host    all           trust_user     127.0.0.1/32  trust
host    all           md5user        127.0.0.1/32  md5
host    all           cleartext_user 127.0.0.1/32  password
host    all           all            127.0.0.1/32  scram-sha-256
""")

    def _chown(self, path):
        if IS_ROOT:
            shutil.chown(path, PG_OS_USER, PG_OS_USER)

    def start(self):
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile),
                   "-w", "-t", "60", "start"])
        wait_until(lambda: port_open(self.host, self.port), 30, msg="PostgreSQL %s port" % self.name)

    def postmaster_pid(self):
        try:
            return int((self.datadir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self):
        pid = self.postmaster_pid()
        if pid is None:
            return
        try:
            subprocess.run(as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(self.datadir),
                                       "-m", "fast", "-w", "-t", "30", "stop"]),
                           capture_output=True, timeout=40)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        os.kill(pid, signal.SIGQUIT)  # still there: immediate shutdown, by PID

    # -- connections ---------------------------------------------------------
    def conninfo(self, dbname="appdb", user="postgres", **kw):
        d = dict(host=self.host, port=self.port, dbname=dbname, user=user)
        d.update(kw)
        return d

    def connect(self, dbname="appdb", user="postgres", autocommit=True, **kw):
        import psycopg
        return psycopg.connect(**self.conninfo(dbname, user, **kw), autocommit=autocommit,
                               connect_timeout=10)

    def sql(self, sql, params=None, dbname="appdb"):
        """Run one statement as superuser directly on this server; rows or None."""
        with self.connect(dbname) as c:
            cur = c.execute(sql, params)
            return cur.fetchall() if cur.description else None

    def log_offset(self):
        try:
            return self.logfile.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset, limit=200):
        try:
            with open(self.logfile, "rb") as f:
                f.seek(offset)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError as e:
            return "<cannot read %s: %s>" % (self.logfile, e)
        return "\n".join(lines[-limit:])

    # -- what pgcat did to us --------------------------------------------------
    def backends(self, user=None, db=None):
        """Client backends (pid, usename, datname, state, query, application_name),
        excluding the backend that asks."""
        q = ("SELECT pid, usename, datname, state, query, application_name, backend_start "
             "FROM pg_stat_activity WHERE backend_type = 'client backend' "
             "AND pid <> pg_backend_pid()")
        args = []
        if user is not None:
            q += " AND usename = %s"
            args.append(user)
        if db is not None:
            q += " AND datname = %s"
            args.append(db)
        with self.connect("postgres") as c:
            return c.execute(q, args).fetchall()

    def count(self, user=None, db=None, state=None):
        rows = self.backends(user, db)
        if state is not None:
            rows = [r for r in rows if r[3] == state]
        return len(rows)

    def terminate(self, pid):
        with self.connect("postgres") as c:
            return c.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]


TEST_DATABASES = ("appdb", "shard0", "shard1", "benchdb")


def _setup_roles(pg: PgServer):
    with pg.connect("postgres") as c:
        c.execute("SET password_encryption = 'scram-sha-256'")
        c.execute("CREATE ROLE app LOGIN PASSWORD %s" % _lit(PASSWORDS["app"]))
        c.execute("CREATE ROLE cleartext_user LOGIN PASSWORD %s" % _lit(PASSWORDS["cleartext_user"]))
        c.execute("CREATE ROLE trust_user LOGIN")
        c.execute("SET password_encryption = 'md5'")
        c.execute("CREATE ROLE md5user LOGIN PASSWORD %s" % _lit(PASSWORDS["md5user"]))
        c.execute("RESET password_encryption")
        for db in TEST_DATABASES:
            c.execute("CREATE DATABASE %s" % db)
    for db in TEST_DATABASES:
        with pg.connect(db) as c:
            c.execute("GRANT ALL ON SCHEMA public TO PUBLIC")
            c.execute("CREATE SCHEMA other")
            c.execute("GRANT ALL ON SCHEMA other TO PUBLIC")
    # Check that each role really is stored/asked the way the tests assume.
    with pg.connect("postgres") as c:
        r = c.execute("SELECT rolname, left(rolpassword, 14) FROM pg_authid "
                      "WHERE rolname IN ('app', 'md5user')").fetchall()
        stored = dict(r)
        assert stored["app"].startswith("SCRAM-SHA-256"), stored
        assert stored["md5user"].startswith("md5"), stored


def _lit(s):
    return "'" + s.replace("'", "''") + "'"


@pytest.fixture(scope="session")
def pg_root():
    root = Path(tempfile.mkdtemp(prefix="pgcat-it-"))
    os.chmod(root, 0o755)
    if IS_ROOT:
        shutil.chown(root, PG_OS_USER, PG_OS_USER)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg(pg_root):
    """The PostgreSQL 15 primary every test uses."""
    server = PgServer(pg_root, "primary")
    server.initdb()
    server.start()
    try:
        _setup_roles(server)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_replica(pg, pg_root):
    """A streaming replica of `pg`, created on first use."""
    rep = PgServer(pg_root, "replica")
    rep.sockdir.mkdir(parents=True, exist_ok=True)
    rep._chown(rep.sockdir)
    subprocess.run(as_pg_user([str(PG_BIN / "pg_basebackup"), "-h", pg.host, "-p", str(pg.port),
                               "-U", "postgres", "-D", str(rep.datadir), "-R", "-X", "stream", "-c", "fast",
                               "--no-sync"]), check=True, capture_output=True, text=True, timeout=120)
    rep.port = free_port()
    with open(rep.datadir / "postgresql.conf", "a") as f:
        f.write(rep._conf(rep.port))
    rep.start()
    try:
        wait_until(lambda: rep.sql("SELECT pg_is_in_recovery()")[0][0], 30, msg="replica in recovery")
        wait_until(lambda: pg.sql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                                  dbname="postgres")[0][0] >= 1, 30, msg="replica streaming")
        yield rep
    finally:
        rep.stop()


CLONE_NEWNET = 0x40000000
TCP_MIGRATE_REQ = "/proc/sys/net/ipv4/tcp_migrate_req"


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _netns_inode():
    return os.stat("/proc/thread-self/ns/net").st_ino


def _pids_in_netns(ino):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat("/proc/%s/ns/net" % d).st_ino == ino:
                out.append(int(d))
        except OSError:
            pass
    return out


def _require_netns_privilege():
    if not IS_ROOT:
        pytest.fail("this test runs in a network namespace of its own (unshare(CLONE_NEWNET)), "
                    "which needs root; run the integration tests as root, as CI does", pytrace=False)


def _loopback_up():
    """`ip link set lo up` in the calling thread's network namespace, without
    needing iproute2: SIOCGIFFLAGS/SIOCSIFFLAGS on a socket made there."""
    import fcntl
    import struct
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH22x", b"lo", 0)     # struct ifreq: 40 bytes
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


@contextlib.contextmanager
def own_netns():
    """Move the calling thread into a new, empty network namespace (only
    `lo`, brought up; no iproute2 needed) and back on leaving. Network namespaces are per thread:
    the threads and processes it starts meanwhile (PostgreSQL, pgcat, client
    threads, pgbench) are in the new namespace too; the rest of the test
    session is not. Needs root (CAP_SYS_ADMIN).

    The namespace has no name: it goes away with its last process and
    socket. On leaving, every process still in it is one the test started
    and failed to stop: it gets SIGKILL (by PID) and the test fails."""
    _require_netns_privilege()
    libc = _libc()
    orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    orig_ino = _netns_inode()
    if libc.unshare(CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        os.close(orig)
        pytest.fail("unshare(CLONE_NEWNET) failed: %s" % os.strerror(e), pytrace=False)
    ino = _netns_inode()
    leftover = []
    try:
        assert ino != orig_ino
        _loopback_up()
        yield
    finally:
        # Back to the namespace the session runs in, whatever happened.
        if libc.setns(orig, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            os.close(orig)
            raise OSError(e, "setns back to the test session's network namespace failed")
        os.close(orig)
        assert _netns_inode() == orig_ino
        deadline = time.monotonic() + 10
        while True:
            leftover = _pids_in_netns(ino)
            if not leftover or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if leftover:
        raise AssertionError("processes left running in the test's network namespace (killed): %r"
                             % leftover)


@pytest.fixture
def netns_pg(pg):
    """A network namespace of the test's own (own_netns()) with
    net.ipv4.tcp_migrate_req = 1 (a per-namespace sysctl, so the host's is
    left alone) and a throwaway PostgreSQL 15 listening on its 127.0.0.1,
    set up like `pg` (same roles, databases, pg_hba.conf). The test body and
    everything it starts run in that namespace: `pg` (the session's server,
    in the host's namespace) is not reachable from there; this one is.
    `pg` is requested only so that it is started in the host namespace first."""
    _require_netns_privilege()
    root = Path(tempfile.mkdtemp(prefix="pgcat-netns-"))
    os.chmod(root, 0o755)
    if IS_ROOT:
        shutil.chown(root, PG_OS_USER, PG_OS_USER)
    server = PgServer(root, "nspg")
    try:
        server.initdb()
        with own_netns():
            with open(TCP_MIGRATE_REQ, "w") as f:
                f.write("1")
            with open(TCP_MIGRATE_REQ) as f:
                assert f.read().strip() == "1"
            # initdb picked its port in the host namespace: any port is free here.
            try:
                server.start()
                _setup_roles(server)
                yield server
            finally:
                server.stop()
                # shown by pytest when the test fails
                print("\n===== PostgreSQL log (in the test's namespace), last 50 lines =====")
                print(tail(server.logfile, 50))
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------
# pgcat
# ---------------------------------------------------------------------------

def _fmt(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    return str(v)


def render_ini(general: dict, pools: dict, peers: dict = None, extra: str = "") -> str:
    lines = ["; written by test/integration/conftest.py", "[general]"]
    for k, v in general.items():
        if v is not None:
            lines.append("%s = %s" % (k, _fmt(v)))
    for pname, pool in pools.items():
        lines.append("")
        lines.append("[pools.%s]" % pname)
        for k, v in pool.items():
            if k in ("shards", "users", "next") or v is None:
                continue
            lines.append("%s = %s" % (k, _fmt(v)))
        for idx, shard in sorted(pool.get("shards", {}).items()):
            lines.append("")
            lines.append("[pools.%s.shards.%s]" % (pname, idx))
            for k, v in shard.items():
                if v is not None:
                    lines.append("%s = %s" % (k, _fmt(v)))
        # the target layout of a reshard: pool["next"] = {"shards": {0: {...}, ...}}
        # (keys of [pools.NAME.next] itself beside "shards", if any)
        nxt = pool.get("next")
        if nxt:
            own = [(k, v) for k, v in nxt.items() if k != "shards" and v is not None]
            if own:
                lines.append("")
                lines.append("[pools.%s.next]" % pname)
                lines += ["%s = %s" % (k, _fmt(v)) for k, v in own]
            for idx, shard in sorted(nxt.get("shards", {}).items()):
                lines.append("")
                lines.append("[pools.%s.next.shards.%s]" % (pname, idx))
                for k, v in shard.items():
                    if v is not None:
                        lines.append("%s = %s" % (k, _fmt(v)))
        for uname, user in pool.get("users", {}).items():
            lines.append("")
            lines.append("[pools.%s.users.%s]" % (pname, uname))
            for k, v in user.items():
                if v is not None:
                    lines.append("%s = %s" % (k, _fmt(v)))
    if peers:
        lines.append("")
        lines.append("[peers]")
        for k, v in peers.items():
            lines.append("%s = %s" % (k, v))
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


# Harness self-check only: PGCAT_TEST_TARGET=pgbouncer runs the same tests
# against Debian's PgBouncer (translated config), to tell a wrong test from
# a pgcat bug. pgcat-specific behaviour (SPEC error codes, CLI) differs there.
TARGET = os.environ.get("PGCAT_TEST_TARGET", "pgcat")
# A command pgcat runs under (scripts/valgrind.sh sets it to valgrind's).
WRAPPER = os.environ.get("PGCAT_WRAPPER", "")


def _secs(ms):
    return max(1, (int(ms) + 999) // 1000)


def render_pgbouncer(general: dict, pools: dict, workdir: Path) -> str:
    g = general
    out = ["[databases]"]
    users = {}
    for name, pool in pools.items():
        shard = pool.get("shards", {}).get(0) or {}
        host, port = shard.get("servers", "127.0.0.1:5432:primary").split(",")[0].strip().rsplit(":", 2)[:2]
        extra = ""
        if pool.get("pool_mode"):
            extra += " pool_mode=%s" % pool["pool_mode"]
        for u, ud in pool.get("users", {}).items():
            users[u] = ud.get("password", "")
            if ud.get("pool_size") is not None:
                extra += " pool_size=%s" % ud["pool_size"]
            if ud.get("min_pool_size") is not None:
                extra += " min_pool_size=%s" % ud["min_pool_size"]
        out.append("%s = host=%s port=%s dbname=%s%s" % (name, host, port, shard.get("database", name), extra))
    out.append("[pgbouncer]")
    m = {"listen_addr": "listen_addr", "listen_port": "listen_port",
         "unix_socket_dir": "unix_socket_dir", "pool_mode": "pool_mode",
         "default_pool_size": "default_pool_size", "min_pool_size": "min_pool_size",
         "max_client_conn": "max_client_conn", "auth_type": "auth_type",
         "server_reset_query": "server_reset_query", "pidfile": "pidfile", "log_file": "logfile"}
    secs = {"connect_timeout": "server_connect_timeout", "query_wait_timeout": "query_wait_timeout",
            "idle_timeout": "server_idle_timeout", "server_lifetime": "server_lifetime",
            "idle_transaction_timeout": "idle_transaction_timeout",
            "client_idle_timeout": "client_idle_timeout"}
    for k, v in g.items():
        if k in m:
            out.append("%s = %s" % (m[k], _fmt(v)))
        elif k in secs:
            out.append("%s = %s" % (secs[k], _secs(v) if int(v) else 0))
        elif k in ("log_connections", "log_disconnections"):
            out.append("%s = %d" % (k, 1 if v in (True, "true", 1) else 0))
    out.append("auth_file = %s" % (workdir / "userlist.txt"))
    out.append("admin_users = %s" % g.get("admin_username", "pgcat"))
    out.append("server_login_retry = 1")
    out.append("ignore_startup_parameters = extra_float_digits, options")
    users.setdefault(g.get("admin_username", "pgcat"), g.get("admin_password", ""))
    (workdir / "userlist.txt").write_text("".join('"%s" "%s"\n' % (u, pw) for u, pw in users.items()))
    return "\n".join(out) + "\n"


class Pgcat:
    """One running pgcat. Connect through it with connect()/aconnect()/asyncpg()/psql()."""

    def __init__(self, binary, workdir: Path, general, pools, env, args, pg):
        self.binary = binary
        self.workdir = workdir
        self.general = general
        self.pools = pools
        self.host = general.get("listen_addr", "127.0.0.1").split(",")[0].strip()
        if self.host in ("*", "0.0.0.0"):
            self.host = "127.0.0.1"
        self.port = int(general["listen_port"])
        self.sockdir = general.get("unix_socket_dir") or None
        self.ini = workdir / "pgcat.ini"
        self.logfile = workdir / "pgcat.log"
        self.env = env
        self.args = args
        self.pg = pg
        self.proc = None
        self.stopped_by_test = False
        self.expected_rc = 0
        self.peers = None   # {peer id: "host:port"}: the [peers] section

    # -- process -------------------------------------------------------------
    def write(self):
        self.ini.write_text(render_ini(self.general, self.pools, self.peers))

    def start(self, wait=True, timeout=30.0):
        self.write()
        self.log_fh = open(self.logfile, "ab")
        cmd = [self.binary] + list(self.args) + [str(self.ini)]
        if WRAPPER and TARGET == "pgcat":
            # e.g. valgrind (scripts/valgrind.sh); {workdir} is this instance's directory
            cmd = [a.replace("{workdir}", str(self.workdir)) for a in shlex.split(WRAPPER)] + cmd
        if TARGET == "pgbouncer":
            self.ini.write_text(render_pgbouncer(self.general, self.pools, self.workdir))
            for f in [self.workdir] + list(self.workdir.iterdir()):
                shutil.chown(f, PG_OS_USER, PG_OS_USER)
            cmd = ["setpriv", "--reuid", PG_OS_USER, "--regid", PG_OS_USER, "--init-groups",
                   "/usr/sbin/pgbouncer", str(self.ini)]
        self.proc = subprocess.Popen(cmd,
                                     stdin=subprocess.DEVNULL, stdout=self.log_fh,
                                     stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True, cwd=str(self.workdir))
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=30.0):
        def ready():
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError("pgcat exited with %s before accepting connections; log:\n%s"
                                     % (rc, tail(self.logfile, 60)))
            return port_open(self.host, self.port)
        deadline = time.monotonic() + timeout
        while True:
            if ready():
                return
            if time.monotonic() > deadline:
                raise AssertionError("pgcat did not accept on %s:%d within %.0fs; log:\n%s"
                                     % (self.host, self.port, timeout, tail(self.logfile, 60)))
            time.sleep(0.05)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=None):
        """Send sig and wait for exit; returns the exit code (None if it did not exit)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass
        if timeout is None:
            timeout = int(self.general.get("shutdown_timeout", 60000)) / 1000.0 + 15
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill_group(self):
        """Last resort: SIGKILL pgcat's process group (the processes we started)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def group_alive(self):
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def log(self):
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    def sanitizer_lines(self):
        return sanitizer_lines(self.log())

    def valgrind_problems(self):
        """Under PGCAT_WRAPPER=valgrind ...: each process's log must end with
        ERROR SUMMARY: 0 errors (leaks count as errors, see scripts/valgrind.sh)."""
        out = []
        for f in sorted(self.workdir.glob("valgrind.*.log")):
            text = f.read_text(errors="replace")
            m = re.search(r"ERROR SUMMARY: (\d+) errors", text)
            if m is None:
                # a process still running, or one that exec'd: no summary
                continue
            if int(m.group(1)) != 0:
                out.append("%s:\n%s" % (f.name, text[-6000:]))
        return out

    def rss_kb(self):
        return tree_rss_kb(self.proc.pid)

    # -- clients -------------------------------------------------------------
    def conninfo(self, user="app", dbname="appdb", password=None, **kw):
        if password is None:
            password = PASSWORDS.get(user, "")
        d = dict(host=self.host, port=self.port, dbname=dbname, user=user, password=password,
                 sslmode="disable", connect_timeout=10)
        d.update(kw)
        return d

    def dsn(self, user="app", dbname="appdb", password=None, **kw):
        from psycopg.conninfo import make_conninfo
        return make_conninfo(**self.conninfo(user, dbname, password, **kw))

    def connect(self, user="app", dbname="appdb", password=None, autocommit=True,
                prepare_threshold=None, **kw):
        """psycopg 3 connection through pgcat. Named prepared statements are off
        by default (prepare_threshold=None): they are SPEC §5, tested apart."""
        import psycopg
        c = psycopg.connect(**self.conninfo(user, dbname, password, **kw), autocommit=autocommit)
        c.prepare_threshold = prepare_threshold
        return c

    async def aconnect(self, user="app", dbname="appdb", password=None, autocommit=True,
                       prepare_threshold=None, **kw):
        import psycopg
        c = await psycopg.AsyncConnection.connect(**self.conninfo(user, dbname, password, **kw),
                                                  autocommit=autocommit)
        c.prepare_threshold = prepare_threshold
        return c

    async def asyncpg(self, user="app", dbname="appdb", password=None, **kw):
        import asyncpg
        if password is None:
            password = PASSWORDS.get(user, "")
        kw.setdefault("statement_cache_size", 0)
        kw.setdefault("ssl", False)
        kw.setdefault("timeout", 10)
        return await asyncpg.connect(host=self.host, port=self.port, user=user, password=password,
                                     database=dbname, **kw)

    def psql(self, sql=None, user="app", dbname="appdb", password=None, args=(), input=None,
             timeout=60, host=None, check=True):
        env = dict(os.environ)
        env["PGPASSWORD"] = PASSWORDS.get(user, "") if password is None else password
        env["PGSSLMODE"] = "disable"
        env["PGCONNECT_TIMEOUT"] = "10"
        cmd = [str(PG_BIN / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-h", host or self.host,
               "-p", str(self.port), "-U", user, "-d", dbname, "-At"] + list(args)
        if sql is not None:
            cmd += ["-c", sql]
        r = subprocess.run(cmd, env=env, input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("psql failed (%d): %s" % (r.returncode, r.stderr))
        return r

    def raw(self, timeout=10.0):
        return pgwire.Raw(self.host, self.port, timeout)

    def raw_login(self, user="app", dbname="appdb", password=None, params=None):
        r = self.raw()
        r.login(user, PASSWORDS.get(user, "") if password is None else password, dbname, params)
        return r


def default_pools(pg: PgServer):
    users = {u: {"password": p} for u, p in PASSWORDS.items()}
    return {
        "appdb": {
            "shards": {0: {"database": "appdb", "servers": "127.0.0.1:%d:primary" % pg.port}},
            "users": users,
        },
    }


# PGCAT_IO_ENGINE=epoll|io_uring|auto sets io_engine in every generated
# pgcat.ini (scripts/test.sh runs a part of the suite once more with the
# engine the default does not pick). Unset: pgcat's default (auto).
IO_ENGINE = os.environ.get("PGCAT_IO_ENGINE", "")


def default_general(port, sockdir):
    g = {
        "listen_addr": "127.0.0.1",
        "listen_port": port,
        "unix_socket_dir": str(sockdir),
        "workers": 1,
        "pool_mode": "transaction",
        "default_pool_size": 10,
        "connect_timeout": 5000,
        "shutdown_timeout": 10000,
        "log_level": "info",
        "admin_username": ADMIN_USER,
        "admin_password": ADMIN_PASSWORD,
    }
    if IO_ENGINE and TARGET == "pgcat":
        g["io_engine"] = IO_ENGINE
    return g


def _deep_merge(base: dict, over: dict):
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = v
    return base


def pgcat_env(extra=None):
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", DEFAULT_ASAN)
    env.setdefault("UBSAN_OPTIONS", DEFAULT_UBSAN)
    env.update(extra or {})
    return env


def pytest_configure(config):
    # A SIGTERM (CI timeout, `timeout` command) tears down like Ctrl-C does, so
    # the PostgreSQL servers and pgcat instances of the fixtures are stopped.
    def on_term(signum, frame):
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, on_term)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _test_failed(request):
    for when in ("setup", "call"):
        rep = getattr(request.node, "rep_" + when, None)
        if rep is not None and rep.failed:
            return True
    return False


@pytest.fixture
def pgcat(request, pg):
    """Factory: pgcat(general={...}, pool={...}, users={...}, pools={...}, args=[...]).

    general: overrides of [general] keys (value None removes a key);
    pool:    overrides of the default pool `appdb` (keys of [pools.appdb]);
    users:   {user: {key: value}} merged into the default pool's users;
    pools:   extra pools {name: {..., "shards": {...}, "users": {...}}};
    replace_pools: use exactly these pools instead of the default one;
    peers:   {peer id: "host:port"}, the [peers] section (or set inst.peers
             before inst.start(), with start=False, to name ports of
             instances made after this one).
    """
    instances = []
    pg_offset = pg.log_offset()

    def start(general=None, pool=None, users=None, pools=None, replace_pools=None,
              args=(), env=None, wait=True, start=True, peers=None):
        workdir = Path(tempfile.mkdtemp(prefix="pgcit-"))
        port = free_port()
        g = default_general(port, workdir)
        for k, v in (general or {}).items():
            if v is None:
                g.pop(k, None)
            else:
                g[k] = v
        if replace_pools is not None:
            p = copy.deepcopy(replace_pools)
        else:
            p = default_pools(pg)
            if pool:
                _deep_merge(p["appdb"], copy.deepcopy(pool))
            if users:
                for u, over in users.items():
                    p["appdb"]["users"].setdefault(u, {})
                    if over is None:
                        del p["appdb"]["users"][u]
                    else:
                        p["appdb"]["users"][u].update(over)
            if pools:
                p.update(copy.deepcopy(pools))
        inst = Pgcat(pgcat_binary(), workdir, g, p, pgcat_env(env), args, pg)
        inst.peers = peers
        instances.append(inst)
        if start:
            inst.start(wait=wait)
        return inst

    yield start

    problems = []
    for inst in instances:
        if inst.proc is None:
            continue
        if inst.proc.poll() is None:
            rc = inst.stop(signal.SIGTERM)
            if rc is None:
                problems.append("pgcat (pid %d) did not exit within shutdown_timeout after SIGTERM"
                                % inst.pid)
                inst.kill_group()
            elif rc != 0 and TARGET == "pgcat":
                problems.append("pgcat exited with code %d after SIGTERM (expected 0)" % rc)
        elif not inst.stopped_by_test and inst.proc.returncode != inst.expected_rc:
            problems.append("pgcat exited by itself during the test with code %d"
                            % inst.proc.returncode)
        if inst.group_alive():
            # The supervisor is gone but a worker is still around.
            wait_ok = True
            try:
                wait_until(lambda: not inst.group_alive(), 5)
            except AssertionError:
                wait_ok = False
            if not wait_ok:
                problems.append("pgcat left processes running after it exited")
                inst.kill_group()
        san = inst.sanitizer_lines()
        if san:
            problems.append("sanitizer report in pgcat's log:\n  " + "\n  ".join(san[:20]))
        for v in inst.valgrind_problems():
            problems.append("valgrind report:\n" + v)
        inst.log_fh.close()

    if problems or _test_failed(request):
        for inst in instances:
            print("\n===== pgcat log (%s), last 200 lines =====" % inst.logfile)
            print(tail(inst.logfile, 200))
            print("===== pgcat.ini =====")
            print(inst.ini.read_text() if inst.ini.exists() else "<none>")
        print("\n===== PostgreSQL log during the test (last 100 lines) =====")
        print(pg.log_since(pg_offset, 100))
    for inst in instances:
        if not problems and not _test_failed(request):
            shutil.rmtree(inst.workdir, ignore_errors=True)
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture
def table(pg):
    """Factory: table("a int, b text", db="appdb") creates a fresh table every
    role may use, and returns its name."""
    made = []

    def make(columns, db="appdb"):
        name = "t_%s_%d" % (os.urandom(4).hex(), len(made))
        with pg.connect(db) as c:
            c.execute("CREATE TABLE %s (%s)" % (name, columns))
            c.execute("GRANT ALL ON TABLE %s TO PUBLIC" % name)
        made.append((db, name))
        return name

    yield make
    for db, name in made:
        # A test that failed may leave a transaction holding the table (an
        # unfinished COPY): give up on the drop rather than hang teardown.
        with contextlib.suppress(Exception):
            pg.sql("SET lock_timeout = '5s'; DROP TABLE IF EXISTS %s" % name, dbname=db)


@pytest.fixture(autouse=True)
def _no_leftover_backends(pg):
    """Start every test from a server without client backends of the test
    roles (the previous test's pgcat closed its connections when it exited;
    PostgreSQL may take a moment to notice)."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not [r for r in pg.backends() if r[1] in PASSWORDS], 10)
    yield


def assert_pool_idle(pg, user="app", db="appdb", timeout=10.0, max_conns=None, ignore_pids=()):
    """No server connection leaked: every backend pgcat holds for (user, db)
    is idle (none 'active' or 'idle in transaction'), and at most max_conns
    (ignore_pids: backends a test holds on purpose, not counted as idle)."""
    def ok():
        rows = [r for r in pg.backends(user, db) if r[0] not in ignore_pids]
        bad = [r for r in rows if r[3] != "idle"]
        if bad:
            return False
        if max_conns is not None and len(rows) > max_conns:
            return False
        return True
    try:
        wait_until(ok, timeout)
    except AssertionError:
        rows = pg.backends(user, db)
        raise AssertionError("server connections of %s@%s not back to idle (max %s): %r"
                             % (user, db, max_conns, [(r[0], r[3], r[4]) for r in rows]))


def assert_works(pgc, user="app", dbname="appdb"):
    """A normal client can still log in and run a query."""
    with pgc.connect(user=user, dbname=dbname) as c:
        assert c.execute("SELECT 41 + 1").fetchone()[0] == 42
