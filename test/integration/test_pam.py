# SPDX-License-Identifier: MIT
"""PAM authentication: auth_type = pam (auth_pam_service) and hba `pam`
lines (pamservice=), against Linux-PAM's pam_unix with an OS user made for
the test and a service file of its own in /etc/pam.d (both removed at the
end; root is needed for both, and pam_unix reads /etc/shadow as root, which
pgcat is here). The PAM user is in no pgcat config: its pool is made at its
first login and logs in to PostgreSQL with the password PAM took."""
import contextlib
import os
import shutil
import subprocess
import uuid

import psycopg
import pytest

from conftest import wait_until
from test_admin import admin, command, show
from test_hba import first_auth, login_error, works

OS_USER = "pgcatpam"
PASSWORD = "pam-pw-1"
AUTH_CLEARTEXT = 3


def need_root():
    if os.geteuid() == 0 and shutil.which("useradd") and os.path.isdir("/etc/pam.d"):
        return
    msg = "PAM tests need root, useradd and /etc/pam.d"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def pam_setup(pg):
    """An OS user with a password, a PAM service of pam_unix, and the same
    user as a PostgreSQL role with the same password."""
    need_root()
    service = "pgcat-test-" + uuid.uuid4().hex[:8]
    path = os.path.join("/etc/pam.d", service)
    subprocess.run(["userdel", OS_USER], capture_output=True)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OS_USER], check=True)
    try:
        subprocess.run(["chpasswd"], input="%s:%s\n" % (OS_USER, PASSWORD), text=True, check=True)
        with open(path, "w") as f:
            f.write("auth required pam_unix.so\naccount required pam_unix.so\n")
        with open(path + "-deny", "w") as f:
            f.write("auth required pam_deny.so\naccount required pam_deny.so\n")
        with pg.connect("postgres") as c:
            c.execute("DROP ROLE IF EXISTS %s" % OS_USER)
            c.execute("CREATE ROLE %s LOGIN PASSWORD '%s'" % (OS_USER, PASSWORD))
            c.execute("DROP ROLE IF EXISTS pgcatnoos")
            c.execute("CREATE ROLE pgcatnoos LOGIN PASSWORD 'x-pw'")
        yield service
    finally:
        for p in (path, path + "-deny"):
            with contextlib.suppress(OSError):
                os.unlink(p)
        subprocess.run(["userdel", OS_USER], capture_output=True)
        with pg.connect("postgres") as c:
            for role in (OS_USER, "pgcatnoos"):
                with contextlib.suppress(psycopg.Error, AssertionError):
                    c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
                    wait_until(lambda: not pg.backends(user=role), 10)
                    c.execute("DROP ROLE %s" % role)


def pool_rows(inst, user):
    r = admin(inst)
    try:
        return [x for x in show(r, "POOLS")[1] if (x["database"], x["user"]) == ("appdb", user)]
    finally:
        r.close()


def refused(inst, user, password):
    e = login_error(inst, user, password=password)
    assert e.get("S") == "FATAL" and e.get("C") == "28000", e
    assert e.get("M") == 'PAM authentication failed for user "%s"' % user, e


def test_auth_type_pam(pgcat, pam_setup):
    # (every login goes through PAM, the admin console's too: no SHOW here)
    inst = pgcat(general={"auth_type": "pam", "auth_pam_service": pam_setup})
    assert first_auth(inst, OS_USER) == AUTH_CLEARTEXT
    works(inst, OS_USER, password=PASSWORD)
    works(inst, OS_USER, password=PASSWORD)
    # its pool was made at the first login, and served the second
    assert inst.log().count("pool appdb user %s: made for a user PAM let in" % OS_USER) == 1
    refused(inst, OS_USER, "wrong")
    refused(inst, OS_USER, "")
    # a PostgreSQL role with no OS user: PAM does not know it
    refused(inst, "pgcatnoos", "x-pw")
    assert "PAM authentication failed: pam_authenticate" in inst.log()


def test_hba_pam_line(pgcat, pam_setup, tmp_path):
    hba = tmp_path / "hba.conf"
    hba.write_text("host pgcat pgcat 127.0.0.1/32 scram-sha-256\n"
                   "host appdb app 127.0.0.1/32 md5\n"
                   "host appdb %s 127.0.0.1/32 pam pamservice=%s\n" % (OS_USER, pam_setup))
    inst = pgcat(general={"auth_hba_file": str(hba)})
    assert not pool_rows(inst, OS_USER)
    works(inst, OS_USER, password=PASSWORD)
    assert len(pool_rows(inst, OS_USER)) == 1
    refused(inst, OS_USER, "wrong")
    works(inst, "app")
    # a service whose stack denies: refused with the right password
    hba.write_text("host pgcat pgcat 127.0.0.1/32 scram-sha-256\n"
                   "host appdb app 127.0.0.1/32 md5\n"
                   "host appdb %s 127.0.0.1/32 pam pamservice=%s-deny\n" % (OS_USER, pam_setup))
    r = admin(inst)
    try:
        assert command(r, "RELOAD") is None
    finally:
        r.close()
    refused(inst, OS_USER, PASSWORD)
    works(inst, "app")
