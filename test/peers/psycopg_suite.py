# SPDX-License-Identifier: MIT
"""psycopg 3's own test suite through pgcat, in session and in transaction mode.

    PGCAT_BIN=build-asan/pgcat .venv/bin/python test/peers/psycopg_suite.py [MODE...]

MODE is session and/or transaction (default: both). Session mode runs on
io_engine = epoll, transaction mode on the default (auto: io_uring where the
kernel allows it); PGCAT_IO_ENGINE sets both. For each mode: a
throwaway PostgreSQL 15 (initdb in a temporary directory, as OS user postgres
when run as root, free loopback port, max_prepared_transactions = 10), a role
`suite` that owns database `suitedb`, one pgcat in front of it in that pool
mode (prepared_statements = true), then `PEERS_DIR/psycopg-suite DSN LABEL`
(the peers' runner, see PEERS_DIR/README.md). Its failed.txt is compared with
test/peers/psycopg-expected-MODE.txt: one failed node id per line, then
" # " and the reason (only what no pooler can do in that mode). The run
fails on a failure that is not listed, on a sanitizer report in pgcat's log,
or when pgcat does not exit 0 on SIGTERM; a listed test that passes is
printed ("now passes, remove from list") and does not fail the run, unless
its reason starts with "race: " (a race in the test itself, which it wins
or loses against PostgreSQL directly too: either result is expected). Up to
40 unexpected failures are run again, up to 3 times (only those test
functions, same pgcat, each round on what still failed): one that passes
then is printed as flaky and does not fail the run (the suite has timing
tests that fail on busy machines); one that never passes fails it.

Environment: PGCAT_BIN (default build-asan/pgcat), PEERS_DIR (default
../shared/peers beside the repository, or beside the main working tree when
this is a git worktree), PSYCOPG_SUITE_VENV (default
.venv-psycopg-suite in the repository), PSYCOPG_SUITE_OUT_DIR (default
build-peers/; each mode's pytest.log, junit.xml, failed.txt and pgcat.log go
to psycopg-MODE/ under it), PSYCOPG_SUITE_JOBS (2: the modes run side by
side, each suite's console output printed whole when it ends; default 1),
PG_BIN; extra pytest arguments for the suite after "--". Exit status 0 =
every mode as expected.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "test" / "integration"))
from conftest import (PgServer, render_ini, free_port, port_open, wait_until,  # noqa: E402
                      SANITIZER_RE, DEFAULT_ASAN, DEFAULT_UBSAN, IS_ROOT, PG_OS_USER, tail)

MODES = ("session", "transaction")
RERUN_MAX = 40   # at most this many unexpected failures are re-run
# Left out of one mode, to keep the test command within its time budget:
# tests/test_waiting.py (250 tests, about 100 s a mode) tests psycopg's own
# socket-wait functions, each over one simple query or a notification on one
# connection, which pgcat serves alike in both modes; it runs in transaction
# mode (pgcat's default engine there, io_uring), not again in session mode.
MODE_ARGS = {"session": ["--ignore=tests/test_waiting.py"], "transaction": []}
PRINT_LOCK = threading.Lock()
RERUN_ROUNDS = 3  # each at most this many times
ROLE, PASSWORD, DB = "suite", "suite_pw", "suitedb"
# An expected failure whose reason starts so may pass as well: the test
# races itself (its outcome depends on which process the kernel runs
# first, against PostgreSQL directly as through pgcat).
RACE = "race: "


def read_expected(path: Path):
    """{node id: reason} from an expected-failures file; '#' lines and blank lines skipped."""
    out = {}
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text().splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        node, sep, reason = s.partition(" # ")
        if not sep or not reason.strip():
            raise SystemExit("%s:%d: expected 'NODE_ID # reason', got %r" % (path, n, line))
        out[node.strip()] = reason.strip()
    return out


def start_pg(root: Path) -> PgServer:
    pg = PgServer(root, "pg")
    pg.initdb()
    with open(pg.datadir / "postgresql.conf", "a") as f:
        # two-phase-commit tests; pgcat's server connections and the suite's direct ones
        f.write("max_prepared_transactions = 10\n")
    pg.start()
    with pg.connect("postgres") as c:
        c.execute("SET password_encryption = 'scram-sha-256'")
        c.execute("CREATE ROLE %s LOGIN PASSWORD '%s'" % (ROLE, PASSWORD))
        c.execute("CREATE DATABASE %s OWNER %s" % (DB, ROLE))
    with pg.connect(DB) as c:
        c.execute("ALTER SCHEMA public OWNER TO %s" % ROLE)
    return pg


# The I/O engine per mode (SPEC §12): session mode on epoll, transaction
# mode on pgcat's default (auto: io_uring where the kernel allows it), so
# that each engine carries one real client's whole suite. PGCAT_IO_ENGINE,
# when set, takes both modes to that engine.
IO_ENGINES = {"session": "epoll", "transaction": "auto"}


def io_engine_for(mode: str) -> str:
    return os.environ.get("PGCAT_IO_ENGINE") or IO_ENGINES[mode]


def start_pgcat(binary, workdir: Path, pg: PgServer, mode: str):
    port = free_port()
    general = {
        "listen_addr": "127.0.0.1",
        "listen_port": port,
        "io_engine": io_engine_for(mode),
        "unix_socket_dir": str(workdir),
        "workers": 1,
        "pool_mode": mode,
        "default_pool_size": 40,
        "connect_timeout": 5000,
        "shutdown_timeout": 10000,
        "log_level": "info",
        "prepared_statements": True,
        "admin_username": "pgcat",
        "admin_password": "admin_pw",
    }
    pools = {DB: {
        "shards": {0: {"database": DB, "servers": "127.0.0.1:%d:primary" % pg.port}},
        "users": {ROLE: {"password": PASSWORD}},
    }}
    ini = workdir / "pgcat.ini"
    ini.write_text(render_ini(general, pools))
    log = workdir / "pgcat.log"
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", DEFAULT_ASAN)
    env.setdefault("UBSAN_OPTIONS", DEFAULT_UBSAN)
    fh = open(log, "ab")
    proc = subprocess.Popen([binary, str(ini)], stdin=subprocess.DEVNULL, stdout=fh,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            cwd=str(workdir))

    def ready():
        if proc.poll() is not None:
            raise SystemExit("pgcat exited with %s before accepting; log:\n%s"
                             % (proc.returncode, tail(log, 60)))
        return port_open("127.0.0.1", port)
    wait_until(ready, 30, msg="pgcat accepting on port %d" % port)
    return proc, fh, port, log


def stop_pgcat(proc, fh, log):
    """SIGTERM by PID; problems (exit code, sanitizer lines) as a list of strings."""
    problems = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            rc = None
            problems.append("pgcat (pid %d) did not exit within 30s of SIGTERM" % proc.pid)
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # its own process group, started by us
            except ProcessLookupError:
                pass
            proc.wait(10)
        if rc is not None and rc != 0:
            problems.append("pgcat exited with code %d after SIGTERM (expected 0)" % rc)
    else:
        problems.append("pgcat exited by itself during the suite with code %d" % proc.returncode)
    fh.close()
    san = [l for l in log.read_text(errors="replace").splitlines() if SANITIZER_RE.search(l)]
    if san:
        problems.append("sanitizer report in pgcat's log (%s):\n  %s" % (log, "\n  ".join(san[:20])))
    return problems


def run_mode(mode, args, extra, side_by_side=False):
    t0 = time.monotonic()
    out = Path(args.out_dir).resolve() / ("psycopg-" + mode)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    root = Path(tempfile.mkdtemp(prefix="pgcat-psycopg-%s-" % mode))
    os.chmod(root, 0o755)
    if IS_ROOT:
        shutil.chown(root, PG_OS_USER, PG_OS_USER)
    pg = proc = None
    problems = []
    flaky = []
    exp_path = HERE / ("psycopg-expected-%s.txt" % mode)
    expected = read_expected(exp_path)
    try:
        pg = start_pg(root)
        proc, fh, port, log = start_pgcat(args.pgcat_bin, out, pg, mode)
        dsn = "host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable" % (
            port, ROLE, PASSWORD, DB)
        env = dict(os.environ, PSYCOPG_SUITE_VENV=args.venv, PSYCOPG_SUITE_OUT=str(out))
        if side_by_side and "PSYCOPG_SUITE_TIMEOUT" not in os.environ:
            # two suites on 2 cores: the slowest test (test_type_error_shadow,
            # 17 s alone under ASan) may pass the runner's 30 s otherwise
            env["PSYCOPG_SUITE_TIMEOUT"] = "60"
        src = Path(os.environ.get("PSYCOPG_SRC") or Path(args.peers) / "psycopg")
        if not (src / "tools" / "pproxy_fix.py").exists() and "PSYCOPG_SUITE_MARKERS" not in os.environ:
            # The suite's "proxy" tests run tools/pproxy_fix.py, which the
            # snapshot lacks: they fail the same way against PostgreSQL itself.
            print("psycopg %s: %s/tools/pproxy_fix.py missing: the suite's proxy tests are deselected"
                  % (mode, src), flush=True)
            env["PSYCOPG_SUITE_MARKERS"] = "not mypy and not dns and not refcount and not proxy"
        print("==> psycopg suite, %s mode (pgcat %s on port %d, io_engine %s, PostgreSQL on %d)"
              % (mode, args.pgcat_bin, port, io_engine_for(mode), pg.port), flush=True)
        suite = [str(Path(args.peers) / "psycopg-suite"), dsn, "pgcat-" + mode]
        extra = MODE_ARGS[mode] + extra
        if side_by_side:
            # the other mode runs meanwhile: this one's console output is
            # kept apart and printed whole when it ends (pytest.log has it too)
            with open(out / "console.log", "wb") as console:
                r = subprocess.run(suite + extra, env=env, stdin=subprocess.DEVNULL, stdout=console,
                                   stderr=subprocess.STDOUT)
            with PRINT_LOCK:
                print("==> psycopg suite, %s mode: its output" % mode, flush=True)
                sys.stdout.write((out / "console.log").read_text(errors="replace"))
                sys.stdout.flush()
        else:
            r = subprocess.run(suite + extra, env=env, stdin=subprocess.DEVNULL)
        if r.returncode > 1:
            problems.append("psycopg-suite broke (exit %d), see %s/pytest.log" % (r.returncode, out))
        # Unexpected failures are run once more (same pgcat and server, only
        # those test functions): a test that passes then is reported as
        # flaky instead of failing the run. Many failures are not re-run.
        unexpected = sorted(read_failed(out / "failed.txt") - set(expected))
        if 0 < len(unexpected) <= RERUN_MAX and r.returncode <= 1:
            # Up to RERUN_ROUNDS rounds, each on what still failed, after a
            # pause: a timing test that lost its race to a busy machine
            # (psycopg marks them "timing") gets its chance when it is quiet.
            still = list(unexpected)
            for rnd in range(1, RERUN_ROUNDS + 1):
                names = sorted(set(re.sub(r"\[.*$", "", t.split("::")[-1]) for t in still))
                print("==> psycopg %s: re-run %d of %d, %d unexpected failure(s): %s"
                      % (mode, rnd, RERUN_ROUNDS, len(still), " ".join(names)), flush=True)
                time.sleep(2)
                rdir = out / ("rerun%d" % rnd)
                env_re = dict(env, PSYCOPG_SUITE_OUT=str(rdir))
                subprocess.run(suite + extra + ["-k", " or ".join(names)], env=env_re,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                passed = passed_in(rdir / "junit.xml")
                flaky += [t for t in still if junit_key(t) in passed]
                still = [t for t in still if junit_key(t) not in passed]
                if not still:
                    break
        problems += stop_pgcat(proc, fh, log)
        proc = None
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if pg is not None:
            pg.stop()
        shutil.rmtree(root, ignore_errors=True)

    failed = read_failed(out / "failed.txt")
    unexpected = sorted(failed - set(expected) - set(flaky))
    ran_ok = passed_in(out / "junit.xml")
    now_pass = sorted(t for t in set(expected) - failed
                      if junit_key(t) in ran_ok and not expected[t].startswith(RACE))
    errors = first_errors(out / "junit.xml")
    for t in now_pass:
        print("psycopg %s: %s now passes, remove from list (%s)" % (mode, t, exp_path.name))
    for t in flaky:
        print("psycopg %s: flaky, failed and then passed on re-run: %s: %s"
              % (mode, t, errors.get(junit_key(t), "?")))
    for t in unexpected:
        print("psycopg %s: UNEXPECTED FAILURE %s: %s" % (mode, t, errors.get(junit_key(t), "?")))
    for p in problems:
        print("psycopg %s: %s" % (mode, p))
    secs = time.monotonic() - t0
    ok = not unexpected and not problems
    summary = (out / "summary.line").read_text().strip() if (out / "summary.line").exists() else "no summary"
    print("psycopg %s mode: %s; %d failed as expected, %d unexpected, %d flaky, %d listed now pass; %.0fs; %s"
          % (mode, summary, len(failed & set(expected)), len(unexpected), len(flaky), len(now_pass), secs,
             "ok" if ok else "FAILED"), flush=True)
    return ok


def read_failed(path: Path):
    if not path.exists():
        return set()
    return set(l.strip() for l in path.read_text().splitlines() if l.strip())


def passed_in(junit: Path):
    """(classname, name) of the test cases junit.xml shows as passed."""
    import xml.etree.ElementTree as ET
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return set()
    return set((tc.get("classname", ""), tc.get("name")) for tc in tree.iter("testcase")
               if not any(tc.find(k) is not None for k in ("failure", "error", "skipped")))


def first_errors(junit: Path):
    """{node id: first line of the failure/error message} from pytest's junit.xml."""
    import xml.etree.ElementTree as ET
    res = {}
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return res
    for tc in tree.iter("testcase"):
        for kind in ("failure", "error"):
            el = tc.find(kind)
            if el is None:
                continue
            msg = (el.get("message") or el.text or "").strip().splitlines()
            res.setdefault((tc.get("classname", ""), tc.get("name")), msg[0][:300] if msg else kind)
    return res


def junit_key(node):
    """pytest node id -> (classname, name) as junit.xml writes them."""
    parts = node.split("::")
    mod = parts[0][:-3].replace("/", ".") if parts[0].endswith(".py") else parts[0]
    return (".".join([mod] + parts[1:-1]), parts[-1])


def default_peers():
    """../shared/peers beside the repository; for a git worktree (git worktree
    add), also beside the main working tree."""
    cands = [REPO.parent / "shared" / "peers"]
    try:
        common = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--path-format=absolute",
                                 "--git-common-dir"], capture_output=True, text=True).stdout.strip()
        if common:
            cands.append(Path(common).parent.parent / "shared" / "peers")
    except OSError:
        pass
    for c in cands:
        if (c / "psycopg-suite").exists():
            return str(c)
    return str(cands[0])


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modes", nargs="*", help="session and/or transaction (default: both)")
    ap.add_argument("--pgcat-bin", default=os.environ.get("PGCAT_BIN", str(REPO / "build-asan" / "pgcat")))
    ap.add_argument("--peers", default=os.environ.get("PEERS_DIR") or default_peers())
    ap.add_argument("--venv", default=os.environ.get("PSYCOPG_SUITE_VENV", str(REPO / ".venv-psycopg-suite")))
    ap.add_argument("--out-dir", default=os.environ.get("PSYCOPG_SUITE_OUT_DIR", str(REPO / "build-peers")))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("PSYCOPG_SUITE_JOBS", "1")),
                    help="modes run at the same time (2: side by side; default 1, one after the other)")
    args = ap.parse_args(argv)
    if not (Path(args.peers) / "psycopg-suite").exists():
        print("psycopg suite: SKIPPED, no %s/psycopg-suite" % args.peers)
        return 0
    for m in args.modes:
        if m not in MODES:
            ap.error("unknown mode %r (session, transaction)" % m)
    args.pgcat_bin = str(Path(args.pgcat_bin).resolve())
    modes = args.modes or list(MODES)
    if args.jobs < 2 or len(modes) < 2:
        ok = True
        for mode in modes:
            ok = run_mode(mode, args, extra) and ok
        return 0 if ok else 1
    return 0 if run_side_by_side(modes, args, extra) else 1


def run_side_by_side(modes, args, extra):
    """The modes at the same time, each with its own PostgreSQL and pgcat.
    The next starts once the first one's suite runs pytest (its pytest.log
    is there): the suite's venv, made by the first run when missing, is then
    ready, and two runs never make it at once."""
    results = {}

    def one(mode):
        results[mode] = run_mode(mode, args, extra, side_by_side=True)

    started = Path(args.out_dir).resolve() / ("psycopg-" + modes[0]) / "pytest.log"
    started.unlink(missing_ok=True)   # (a previous run's)
    first = threading.Thread(target=one, args=(modes[0],))
    first.start()
    while first.is_alive() and not started.exists():
        time.sleep(0.5)
    others = [threading.Thread(target=one, args=(m,)) for m in modes[1:]]
    for t in others:
        t.start()
    for t in [first] + others:
        t.join()
    return all(results.get(m, False) for m in modes)


if __name__ == "__main__":
    sys.exit(main())
