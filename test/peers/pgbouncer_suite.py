# SPDX-License-Identifier: MIT
"""PgBouncer 1.25.2's own test suite, through pgcat (or through PgBouncer itself).

    .venv/bin/python test/peers/pgbouncer_suite.py [--target pgcat|pgbouncer] [-- PYTEST ARGS]

The suite (`test/` of ANCHORS_DIR/pgbouncer-1.25.2.tar.gz: conftest.py,
utils.py, 15 test_*.py files, test.ini, userlist.txt, ssl/, hba and ident
files) is unpacked into a fresh directory RUN with what its harness reads
beside it (include/bouncer.h for the password limit, pyproject.toml for its
pytest settings, a config.mak saying whether TLS and LDAP are built in), and
the program under test is put where the harness runs it: RUN/pgbouncer.
The harness starts that program once per test as `RUN/pgbouncer --quiet
test.ini` on a pgbouncer.ini it writes from the suite's test.ini, with its
own PostgreSQL (initdb in pytest's temporary directory), reaches the
console as user pgbouncer on the Unix socket, rewrites the ini and sends
RELOAD or SET, stops it with SIGQUIT, and checks clients' errors, console
rows and the log file it names (logfile).

--target pgcat (the default): RUN/pgbouncer is PGCAT_BIN itself (when
`pgcat -t` on the suite's test.ini calls [pgbouncer] an unknown section,
pgcat cannot read pgbouncer.ini yet and the run fails at once); its
config.mak says TLS yes, LDAP yes (test_ldap_auth starts Debian's slapd;
PGBOUNCER_SUITE_LDAP=no says no). --target pgbouncer: PgBouncer 1.25.2
built by ANCHORS_DIR/build-pgbouncer into a temporary directory (or
PGBOUNCER_BUILD_DIR, kept and reused), with its own config.mak: against
it, 251 of the 259 tests pass and 8 skip (5 need root to shape loopback
traffic, 1 LDAP, which that build lacks, 1 PostgreSQL 17, 1 libpq 17).

What the suite needs: socat (scripts/lib.sh's APT_PACKAGES), PostgreSQL's
programs first on PATH (PG_BIN, default /usr/lib/postgresql/15/bin), pytest
run as an OS user other than root (initdb refuses root: as root, pytest
runs as PG_OS_USER, default postgres, and RUN and OUT are handed to it),
`pytest -n 2` (pytest-xdist), and psycopg 3.2 in its pure-Python form on the
system libpq (3.3 drops its own statement cache on DEALLOCATE ALL and
DISCARD ALL, and two of the suite's tests then fail on PgBouncer itself).
These and the suite's other modules, pinned, are in
test/peers/pgbouncer-requirements.txt, installed into their own venv made
with /usr/bin/python3 (readable by that OS user). HAVE_IPV6_LOCALHOST is set
when ::1 can be bound, which enables test_host_list.

The failures (failed or errored node ids, `test/test_FILE.py::NAME`) are
compared with test/peers/pgbouncer-expected.txt (pgcat) or
pgbouncer-expected-pgbouncer.txt (PgBouncer itself): one node id per line,
" # " and the reason. The run fails on a failure that is not listed, or on
a sanitizer report (ASan/UBSan's log_path files OUT/sanitizer.*, the test
logs); a listed test that passes is printed ("now passes,
remove from list") and does not fail the run. Up to 40 unexpected failures
are run again, up to 3 rounds (each on what still failed): one that passes
then is printed as flaky and does not fail the run; one that never passes
fails it.

Environment: PGCAT_BIN (default build-asan/pgcat), ANCHORS_DIR (default
../shared/anchors beside the repository, or beside the main working tree
when this is a git worktree), PGBOUNCER_SUITE_VENV (default
.venv-pgbouncer-suite in the repository), PGBOUNCER_SUITE_OUT_DIR (default
build-peers/; pytest.log, junit.xml, failed.txt, summary.line and the
pgbouncer/pgcat logs of every test (logs/) go to pgbouncer-TARGET/ under
it), PGBOUNCER_SUITE_JOBS (pytest-xdist
workers, default 2), PGBOUNCER_BUILD_DIR, PGBOUNCER_SUITE_LDAP, PG_BIN,
PG_OS_USER, PGBOUNCER_SUITE_KEEP=1 (keep RUN); extra pytest arguments after
"--" (e.g. `-- -k test_show`, or node ids `test/test_admin.py::test_show`).
Exit status 0 = the suite as expected.
"""
import argparse
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "test" / "integration"))
from conftest import SANITIZER_RE, DEFAULT_ASAN, DEFAULT_UBSAN, IS_ROOT, PG_OS_USER  # noqa: E402
from psycopg_suite import read_expected  # noqa: E402  (the same file format)
VERSION = "1.25.2"
TARBALL = "pgbouncer-%s.tar.gz" % VERSION
REQUIREMENTS = HERE / "pgbouncer-requirements.txt"
RERUN_MAX = 40
RERUN_ROUNDS = 3
# What the runner takes from the tarball (below its top directory).
MEMBERS = ("test/", "include/bouncer.h", "pyproject.toml")


def default_anchors():
    """../shared/anchors beside the repository; for a git worktree, also
    beside the main working tree."""
    cands = [REPO.parent / "shared" / "anchors"]
    try:
        common = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--path-format=absolute",
                                 "--git-common-dir"], capture_output=True, text=True).stdout.strip()
        if common:
            cands.append(Path(common).parent.parent / "shared" / "anchors")
    except OSError:
        pass
    for c in cands:
        if (c / TARBALL).exists():
            return str(c)
    return str(cands[0])


def ensure_venv(venv: Path):
    """The suite's venv, made with the system Python (readable by PG_OS_USER;
    an interpreter under /root is not) and filled from the pinned
    requirements; made again when they change."""
    stamp = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    py = venv / "bin" / "python"
    if py.exists() and (venv / ".pgbouncer-suite-stamp").exists() \
            and (venv / ".pgbouncer-suite-stamp").read_text().strip() == stamp:
        return py
    base = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    print("pgbouncer suite: installing %s into %s" % (REQUIREMENTS.name, venv), flush=True)
    if not py.exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    (venv / ".pgbouncer-suite-stamp").write_text(stamp + "\n")
    return py


def extract(tarball: Path, run: Path):
    with tarfile.open(tarball) as tf:
        top = tf.getmembers()[0].name.split("/")[0]
        for m in tf.getmembers():
            rel = m.name[len(top) + 1:] if m.name.startswith(top + "/") else None
            if not rel or not any(rel == p or rel.startswith(p) for p in MEMBERS):
                continue
            if not (m.isfile() or m.isdir()):
                continue
            m.name = rel
            tf.extract(m, run, filter="data") if hasattr(tarfile, "data_filter") else tf.extract(m, run)


def build_pgbouncer(anchors: Path, dest: Path) -> Path:
    print("pgbouncer suite: building PgBouncer %s in %s" % (VERSION, dest), flush=True)
    r = subprocess.run([str(anchors / "build-pgbouncer"), str(dest)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("pgbouncer suite: build-pgbouncer failed: %s%s" % (r.stdout, r.stderr))
    return Path(r.stdout.strip().splitlines()[-1])


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def chown_tree(path: Path, user):
    for root, dirs, files in os.walk(path):
        shutil.chown(root, user, user)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                shutil.chown(p, user, user)


def setup_run(args, run: Path, out: Path, python: Path):
    """RUN/test, RUN/include/bouncer.h, RUN/pyproject.toml, RUN/config.mak, RUN/pgbouncer."""
    extract(Path(args.anchors) / TARBALL, run)
    exe = run / "pgbouncer"
    if args.target == "pgbouncer":
        dest = Path(args.pgbouncer_build) if args.pgbouncer_build else run.parent / (run.name + "-build")
        binary = build_pgbouncer(Path(args.anchors), dest)
        shutil.copy(binary.parent / "config.mak", run / "config.mak")
        os.symlink(binary, exe)
        return dest if not args.pgbouncer_build else None
    ldap = os.environ.get("PGBOUNCER_SUITE_LDAP", "yes")
    (run / "config.mak").write_text(
        "# written by test/peers/pgbouncer_suite.py: what the harness asks of the program under test\n"
        "tls_support = yes\nldap_support = %s\n" % ("yes" if ldap == "yes" else "no"))
    os.symlink(args.pgcat_bin, exe)
    return None


def pytest_env(args, out: Path, python: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PYTEST_", "PSYCOPG"))}
    env["PATH"] = "%s:%s:/usr/local/bin:/usr/bin:/bin" % (args.pg_bin, python.parent)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = str(HERE)        # pgbouncer_suite_plugin
    env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", DEFAULT_ASAN) + ":log_path=%s/sanitizer" % out
    env["UBSAN_OPTIONS"] = os.environ.get("UBSAN_OPTIONS", DEFAULT_UBSAN) + ":log_path=%s/sanitizer" % out
    env["PGBOUNCER_SUITE_PGCAT"] = args.pgcat_bin
    if ipv6_loopback():
        env["HAVE_IPV6_LOCALHOST"] = "1"
    if IS_ROOT:
        import pwd
        env["HOME"] = pwd.getpwnam(PG_OS_USER).pw_dir
        env["USER"] = env["LOGNAME"] = PG_OS_USER
    return env


def run_pytest(python: Path, run: Path, out: Path, env, jobs, extra, quiet=False):
    """pytest on RUN/test (as PG_OS_USER when root); output to OUT/pytest.log
    (and the console unless quiet); returns its exit status."""
    out.mkdir(parents=True, exist_ok=True)
    if IS_ROOT:
        shutil.chown(out, PG_OS_USER, PG_OS_USER)
    # Paths after the controller imports conftest (which chdirs into test/)
    # must be absolute for the xdist workers to find them.
    targets = [a if not re.match(r"^test/", a) else str(run / a) for a in extra]
    if not any(re.match(r"^/|^test/", a) for a in extra):
        targets.append(str(run / "test"))
    cmd = [str(python), "-m", "pytest", "-n", str(jobs), "-p", "no:cacheprovider", "-p", "pgbouncer_suite_plugin",
           "--basetemp", str(run / "tmp"), "--junitxml", str(out / "junit.xml"),
           "-rfEs", "--color=no",
           # Debian 12's Python 3.11.2 can fail with "SystemError: AST
           # constructor recursion depth mismatch" while pytest parses the
           # source for a failure's traceback, which kills that xdist
           # worker and the rest of its tests: the plain traceback needs
           # no parsing (the verdicts are the same)
           "--tb=native"] + targets
    if IS_ROOT:
        cmd = ["setpriv", "--reuid", PG_OS_USER, "--regid", PG_OS_USER, "--init-groups", "--"] + cmd
    with open(out / "pytest.log", "w") as log:
        log.write("+ %s\n" % " ".join(cmd))
        log.flush()
        p = subprocess.Popen(cmd, cwd=str(run), env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        for line in p.stdout:
            s = line.decode(errors="replace")
            log.write(s)
            if not quiet:
                sys.stdout.write(s)
                sys.stdout.flush()
        return p.wait()


def node_id(tc):
    cls = tc.get("classname", "")
    return "%s.py::%s" % (cls.replace(".", "/"), tc.get("name"))


def junit_results(junit: Path):
    """({node id: first line of failure/error}, set of passed ids, set of skipped ids)."""
    failed, passed, skipped = {}, set(), set()
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return failed, passed, skipped
    for tc in tree.iter("testcase"):
        nid = node_id(tc)
        bad = False
        for kind in ("failure", "error"):
            el = tc.find(kind)
            if el is None:
                continue
            bad = True
            msg = (el.get("message") or el.text or kind).strip().splitlines()
            failed.setdefault(nid, (msg[0] if msg else kind)[:300])
        if bad:
            continue
        if tc.find("skipped") is not None:
            skipped.add(nid)
        else:
            passed.add(nid)
    passed -= set(failed)
    return failed, passed, skipped


def socat_proxies():
    """The pids of the socat proxies running now (test_misc's tests start
    them with a command line that does not name RUN)."""
    found = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = open("/proc/%s/cmdline" % d, "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"socat" and len(argv) > 1 and argv[1].startswith(b"tcp-listen:"):
            found.add(int(d))
    return found


def stop_proxies(before):
    """socat proxies started during this run (not running before it) and
    left behind by a test: stopped by pid."""
    for pid in sorted(socat_proxies() - before):
        try:
            os.kill(pid, signal.SIGKILL)
            print("pgbouncer suite: killed leftover socat proxy pid %d" % pid)
        except OSError:
            pass


def stop_leftovers(run: Path):
    """Servers and poolers a killed or timed-out test left behind: only
    processes whose command line names RUN (all started by this run)."""
    for pidfile in run.glob("tmp/**/postmaster.pid"):
        subprocess.run(["pg_ctl" if shutil.which("pg_ctl") else "/usr/lib/postgresql/15/bin/pg_ctl",
                        "-D", str(pidfile.parent), "-m", "immediate", "stop"] if not IS_ROOT else
                       ["setpriv", "--reuid", PG_OS_USER, "--regid", PG_OS_USER, "--init-groups", "--",
                        os.path.join(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"), "pg_ctl"),
                        "-D", str(pidfile.parent), "-m", "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            cmdline = open("/proc/%s/cmdline" % d, "rb").read().decode(errors="replace")
        except OSError:
            continue
        if str(run) in cmdline:
            try:
                os.kill(int(d), signal.SIGKILL)
                print("pgbouncer suite: killed leftover pid %s: %s" % (d, cmdline.replace("\0", " ")[:150]))
            except OSError:
                pass


def test_files(run: Path, suffixes):
    """Files of the tests' pooler directories (RUN/tmp/popen-gwN/TEST/bouncer*/),
    not through pytest's "...current" symlinks."""
    res = []
    for root, dirs, files in os.walk(run / "tmp"):
        dirs[:] = [d for d in dirs if d != "pgdata" and not os.path.islink(os.path.join(root, d))]
        if os.path.basename(root).startswith("bouncer"):
            res += [Path(root) / f for f in files
                    if f.endswith(suffixes) and os.path.isfile(os.path.join(root, f))
                    and not os.path.islink(os.path.join(root, f))]
    return sorted(res)


def keep_logs(run: Path, out: Path):
    """Each test's pooler log into OUT/logs/, by test directory."""
    logs = out / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    for f in test_files(run, ("test.log",)):
        rel = f.relative_to(run / "tmp")
        dst = logs / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dst)


def sanitizer_reports(paths):
    """Sanitizer lines in these files (the sanitizers' own log_path files
    hold nothing else)."""
    found = []
    for f in paths:
        try:
            lines = [l for l in f.read_text(errors="replace").splitlines() if SANITIZER_RE.search(l)]
        except OSError:
            continue
        if lines:
            found.append("%s:\n  %s" % (f, "\n  ".join(lines[:20])))
    return found


def reads_pgbouncer_ini(args):
    """Whether pgcat takes a file with a [pgbouncer] section as PgBouncer's
    format: `pgcat -t` on the suite's test.ini must not call the section
    unknown (it may find other faults: the file is a template)."""
    with tempfile.TemporaryDirectory(prefix="pgbsuite-check-") as d:
        with tarfile.open(Path(args.anchors) / TARBALL) as tf:
            member = next(m for m in tf.getmembers() if m.name.endswith("/test/test.ini"))
            Path(d, "test.ini").write_bytes(tf.extractfile(member).read())
        r = subprocess.run([args.pgcat_bin, "-t", str(Path(d, "test.ini"))], capture_output=True, text=True,
                           cwd=d, timeout=60)
    return not re.search(r"\[pgbouncer\]: unknown section", r.stdout + r.stderr)


def after_pytest(run: Path, out: Path):
    """Leftovers stopped, logs kept; sanitizer reports as problems."""
    stop_leftovers(run)
    keep_logs(run, out)
    return ["sanitizer report in %s" % s for s in sanitizer_reports(test_files(run, ("test.log",)))]


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("pgcat", "pgbouncer"), default="pgcat")
    ap.add_argument("--pgcat-bin", default=os.environ.get("PGCAT_BIN", str(REPO / "build-asan" / "pgcat")))
    ap.add_argument("--anchors", default=os.environ.get("ANCHORS_DIR") or default_anchors())
    ap.add_argument("--venv", default=os.environ.get("PGBOUNCER_SUITE_VENV", str(REPO / ".venv-pgbouncer-suite")))
    ap.add_argument("--out-dir", default=os.environ.get("PGBOUNCER_SUITE_OUT_DIR", str(REPO / "build-peers")))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("PGBOUNCER_SUITE_JOBS", "2")))
    ap.add_argument("--pgbouncer-build", default=os.environ.get("PGBOUNCER_BUILD_DIR"))
    ap.add_argument("--pg-bin", default=os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
    args = ap.parse_args(argv)
    if not (Path(args.anchors) / TARBALL).exists():
        print("pgbouncer suite: SKIPPED, no %s/%s" % (args.anchors, TARBALL))
        return 0
    if not shutil.which("socat"):
        raise SystemExit("pgbouncer suite: socat is missing (scripts/lib.sh installs it)")
    args.pgcat_bin = str(Path(args.pgcat_bin).resolve())
    if args.target == "pgcat" and not os.access(args.pgcat_bin, os.X_OK):
        raise SystemExit("pgbouncer suite: no pgcat at %s (PGCAT_BIN)" % args.pgcat_bin)
    if args.target == "pgcat" and not reads_pgbouncer_ini(args):
        # Every test would fail in its fixture, and each pgcat, taking none
        # of test.ini's settings, would listen on 0.0.0.0:6432 and
        # /tmp/.s.PGSQL.6432, where other programs on this machine may be.
        print("pgbouncer suite: FAILED, %s does not read pgbouncer.ini ([pgbouncer] is an unknown section "
              "to `pgcat -t`)" % args.pgcat_bin)
        return 1
    out = Path(args.out_dir).resolve() / ("pgbouncer-" + args.target)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    exp_path = HERE / ("pgbouncer-expected.txt" if args.target == "pgcat"
                       else "pgbouncer-expected-pgbouncer.txt")
    expected = read_expected(exp_path)
    python = ensure_venv(Path(args.venv).resolve())

    t0 = time.monotonic()
    # short: the harness puts Unix sockets in per-test directories below it
    proxies_before = socat_proxies()
    run = Path(tempfile.mkdtemp(prefix="pgbsuite-"))
    os.chmod(run, 0o755)
    build_tmp = None
    flaky, problems = [], []
    try:
        build_tmp = setup_run(args, run, out, python)
        if IS_ROOT:
            chown_tree(run, PG_OS_USER)
            chown_tree(out, PG_OS_USER)
        env = pytest_env(args, out, python)
        print("==> PgBouncer %s's suite against %s (%d workers, RUN %s)"
              % (VERSION, "PgBouncer %s" % VERSION if args.target == "pgbouncer" else args.pgcat_bin,
                 args.jobs, run), flush=True)
        rc = run_pytest(python, run, out, env, args.jobs, extra)
        if rc > 1:
            problems.append("pytest broke (exit %d), see %s/pytest.log" % (rc, out))
        problems += after_pytest(run, out)
        failed, passed, skipped = junit_results(out / "junit.xml")
        unexpected = sorted(set(failed) - set(expected))
        if 0 < len(unexpected) <= RERUN_MAX and rc <= 1:
            still = list(unexpected)
            for rnd in range(1, RERUN_ROUNDS + 1):
                print("==> pgbouncer suite: re-run %d of %d, %d unexpected failure(s): %s"
                      % (rnd, RERUN_ROUNDS, len(still), " ".join(still)), flush=True)
                time.sleep(2)
                shutil.rmtree(run / "tmp", ignore_errors=True)
                rdir = out / ("rerun%d" % rnd)
                run_pytest(python, run, rdir, env, min(args.jobs, len(still)), still, quiet=True)
                problems += after_pytest(run, rdir)
                _, rpassed, _ = junit_results(rdir / "junit.xml")
                flaky += [t for t in still if t in rpassed]
                still = [t for t in still if t not in rpassed]
                if not still:
                    break
        problems += ["sanitizer report in %s" % s
                     for s in sanitizer_reports(sorted(out.glob("sanitizer*")))]
    finally:
        stop_leftovers(run)
        stop_proxies(proxies_before)
        if os.environ.get("PGBOUNCER_SUITE_KEEP") == "1":
            print("pgbouncer suite: RUN kept in %s" % run)
        else:
            shutil.rmtree(run, ignore_errors=True)
        if build_tmp:
            shutil.rmtree(build_tmp, ignore_errors=True)
        if IS_ROOT:
            chown_tree(out, "root")     # the runner's user again, for the next run's rmtree

    unexpected = sorted(set(failed) - set(expected) - set(flaky))
    now_pass = sorted(t for t in expected if t in passed)
    with open(out / "failed.txt", "w") as f:
        for t in sorted(failed):
            f.write(t + "\n")
    for t in now_pass:
        print("pgbouncer suite: %s now passes, remove from list (%s)" % (t, exp_path.name))
    for t in flaky:
        print("pgbouncer suite: flaky, failed and then passed on re-run: %s: %s" % (t, failed.get(t, "?")))
    for t in unexpected:
        print("pgbouncer suite: UNEXPECTED FAILURE %s: %s" % (t, failed.get(t, "?")))
    for p in problems:
        print("pgbouncer suite: %s" % p)
    ok = not unexpected and not problems
    summary = "%d passed, %d failed, %d skipped" % (len(passed), len(failed), len(skipped))
    (out / "summary.line").write_text(summary + "\n")
    print("pgbouncer suite (%s): %s; %d failed as expected, %d unexpected, %d flaky, %d listed now pass; %.0fs; %s"
          % (args.target, summary, len(set(failed) & set(expected)), len(unexpected), len(flaky), len(now_pass),
             time.monotonic() - t0, "ok" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
