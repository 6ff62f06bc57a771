# SPDX-License-Identifier: MIT
"""SCRAM-SHA-256 beyond the plain login (test_startup_auth.py has that).

- SASLprep (RFC 4013), as PostgreSQL applies it: a role whose password
  SASLprep changes (or refuses) logs in through pgcat exactly when it logs
  in directly, whichever spelling of the password pgcat.ini and the client
  use.
"""
import contextlib

import psycopg
import pytest
from psycopg import sql

from conftest import wait_until


# --- SASLprep ------------------------------------------------------------------

SASL_ROLE = "saslprep_user"

# A role's password, as created on PostgreSQL, and another spelling of it;
# whether the two log in alike is for PostgreSQL to say.
SASL_CASES = {
    "roman_numeral": ("IX-\u2168", "IX-IX"),               # NFKC: U+2168 is "IX"
    "soft_hyphen": ("pass\u00adword", "password"),         # mapped to nothing
    "prohibited_before_nfkc": ("a\u0340b", "a\u0300b"),    # U+0340 prohibited: raw bytes
    "bidi_before_nfkc": ("\u05d0\u2122\u05d0", "\u05d0TM\u05d0"),   # checked before NFKC
}


def login_ok(connect):
    try:
        with connect() as c:
            return c.execute("SELECT current_user").fetchone()[0]
    except psycopg.OperationalError as e:
        assert "password authentication failed" in str(e), e
        return None


@pytest.fixture
def sasl_role(pg):
    def make(password):
        with pg.connect("postgres") as c:
            c.execute("SET password_encryption = 'scram-sha-256'")
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(SASL_ROLE)))
            c.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(SASL_ROLE),
                                                                         sql.Literal(password)))
    yield make
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not pg.backends(SASL_ROLE), 10)
    with pg.connect("postgres") as c:
        c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(SASL_ROLE)))


@pytest.mark.parametrize("case", sorted(SASL_CASES))
def test_saslprep_passwords_as_postgresql(pgcat, pg, sasl_role, case):
    password, other = SASL_CASES[case]
    sasl_role(password)
    spellings = (password, other)
    direct = {s: login_ok(lambda: psycopg.connect(**pg.conninfo("appdb", SASL_ROLE, password=s),
                                                  connect_timeout=10)) for s in spellings}
    assert direct[password] == SASL_ROLE, "the role cannot log in to PostgreSQL with its own password"
    # pgcat.ini with each spelling PostgreSQL accepts: its own login to the
    # server uses it; a client's login to pgcat is checked against it.
    for configured in [s for s in spellings if direct[s]]:
        p = pgcat(users={SASL_ROLE: {"password": configured}})
        for s in spellings:
            through = login_ok(lambda: p.connect(user=SASL_ROLE, password=s))
            assert through == direct[s], \
                "pgcat.ini %r, client password %r: PostgreSQL says %s, through pgcat %s" % (
                    configured, s, direct[s] and "ok", through and "ok")
        # (The login that worked reached the server: pgcat logged in there too.)
        assert pg.count(SASL_ROLE, "appdb") >= 1
        r = p.psql("SELECT current_user", user=SASL_ROLE, password=password)
        assert r.stdout.strip() == SASL_ROLE
        assert p.stop() == 0
