# SPDX-License-Identifier: MIT
"""log_format = json (issue 44, doc/monitoring.md): every line pgcat writes
is one JSON object with time, level, pid, event and message; the events
of clients and servers carry their fields; a hostile name stays a string
(quotes, backslashes and control characters escaped). RELOAD switches the
format of the workers."""
import json
import re

import psycopg
import pytest

from conftest import wait_until
from test_admin import admin, command


def lines(inst):
    return [l for l in inst.log().splitlines() if l.strip()]


def test_json_lines_with_client_and_server_events(pgcat, pg):
    inst = pgcat(general={"log_format": "json", "log_connections": "true", "log_disconnections": "true"})
    with inst.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
    with inst.connect(host=str(inst.sockdir)) as c:         # over the Unix socket
        assert c.execute("SELECT 2").fetchone()[0] == 2
    # a user name a client chose, with what JSON must escape
    with pytest.raises(psycopg.OperationalError):
        inst.connect(user='ev"il\\name\ttab', password="x").close()
    # the server's backend ends: pgcat closes its connection, with a reason
    pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'")
    wait_until(lambda: '"event":"server_close"' in inst.log(), 10)
    objs = []
    for l in lines(inst):
        o = json.loads(l)                        # every line is one object
        assert list(o)[:4] == ["time", "level", "pid", "event"], o
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["time"]), o
        assert o["level"] in ("ERROR", "WARNING", "LOG", "DEBUG", "TRACE") and list(o)[-1] == "message", o
        objs.append(o)
    by = {}
    for o in objs:
        by.setdefault(o["event"], []).append(o)
    unix = [o for o in by["client_login"] if o["addr"] == "unix"]
    assert len(unix) == 1 and unix[0]["user"] == "app", by["client_login"]
    login = [o for o in by["client_login"] if o["user"] == "app" and o["addr"] != "unix"][0]
    assert login["database"] == "appdb" and login["addr"] == "127.0.0.1" and isinstance(login["client_id"], int)
    assert login["message"] == "login" and login["tls"] == ""
    close = [o for o in by["client_close"] if o["client_id"] == login["client_id"]][0]
    assert close["reason"] == "client close request" and close["age_s"] >= 0
    evil = [o for o in by["client_close"] if o["user"] == 'ev"il\\name\ttab']
    assert evil, by["client_close"]
    conn = by["server_connect"][0]
    assert conn["pool"] == "appdb" and conn["shard"] == 0 and conn["host"] == "127.0.0.1"
    assert conn["message"].startswith("new connection to server")
    assert by["server_close"] and by["server_close"][0]["server_id"] == conn["server_id"]
    assert by["log"], "lines without an event of their own are event log"


def test_bytes_that_are_not_utf8_stay_out_of_the_lines(pgcat):
    """A user name of bytes that are not UTF-8, and a very long one: each
    JSON line is still valid UTF-8 and valid JSON (U+FFFD for such a byte;
    the text format writes control characters as spaces: a name cannot
    start a line of its own)."""
    import pgwire
    inst = pgcat(general={"log_format": "json", "log_connections": "true", "log_disconnections": "true"})
    for user in (b"ev\xffil\xc3", b"x" * 5000 + b"\xe2\x82", b"multi\nline\r\x01"):
        r = inst.raw()
        r.send(pgwire.startup_packet({"user": user, "database": "no_such_db"}))   # refused at once
        r.read_error_then_eof()
        r.close()
    raw = open(inst.logfile, "rb").read()
    text = raw.decode("utf-8")                  # strict: fails on a byte that is not UTF-8
    objs = [json.loads(l) for l in text.splitlines() if l.strip()]
    names = [o.get("user", "") for o in objs if o["event"] == "client_close"]
    assert "ev\ufffdil\ufffd" in names, names
    assert "multi\nline\r\x01" in names, names
    with inst.connect() as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1


def test_text_lines_stay_one_line(pgcat):
    import pgwire
    inst = pgcat(general={"log_disconnections": "true"})
    r = inst.raw()
    r.send(pgwire.startup_packet({"user": "forged\n2026-01-01T00:00:00.000Z [1] LOG fake", "database": "no_such_db"}))
    r.read_error_then_eof()
    r.close()
    wait_until(lambda: "forged" in inst.log(), 10)
    assert not re.search(r"^2026-01-01T00:00:00.000Z \[1\] LOG fake", inst.log(), re.M), inst.log()[-1000:]


def test_reload_switches_the_format(pgcat):
    inst = pgcat()
    with inst.connect() as c:
        c.execute("SELECT 1")
    assert not lines(inst)[-1].startswith("{")
    inst.general["log_format"] = "json"
    inst.write()
    r = admin(inst)
    assert command(r, "RELOAD") is None
    r.close()
    n = len(lines(inst))
    with inst.connect() as c:
        c.execute("SELECT 1")
    after = lines(inst)[n:]
    assert after and all(json.loads(l)["pid"] > 0 for l in after), after


def test_ban_unban_and_reload_events(pgcat):
    """Bans and unbans with their server, reason and source; reloads with
    their outcome (SPEC §8's list of what is logged)."""
    inst = pgcat(general={"log_format": "json"})
    r = admin(inst)
    try:
        assert command(r, "BAN 192.0.2.7:6543 120") is None
        assert command(r, "UNBAN 192.0.2.7:6543") is None
        assert command(r, "RELOAD") is None
        inst.general["max_client_conn"] = "not a number"       # a reload refused
        inst.write()
        assert command(r, "RELOAD") is not None
    finally:
        r.close()
    wait_until(lambda: '"outcome":"rejected"' in inst.log(), 10)
    objs = [json.loads(l) for l in lines(inst)]
    ban = [o for o in objs if o["event"] == "server_ban"]
    assert len(ban) == 1, ban
    assert (ban[0]["host"], ban[0]["port"], ban[0]["seconds"], ban[0]["source"]) == ("192.0.2.7", 6543, 120, "admin")
    unban = [o for o in objs if o["event"] == "server_unban"]
    assert len(unban) == 1 and unban[0]["host"] == "192.0.2.7" and unban[0]["source"] == "admin", unban
    reloads = [o for o in objs if o["event"] == "reload"]
    assert [o["outcome"] for o in reloads] == ["applied", "rejected"], reloads
    assert reloads[0]["file"] and reloads[0]["message"].startswith("configuration reloaded")
    assert "max_client_conn" in reloads[1]["error"] and reloads[1]["level"] == "ERROR", reloads[1]
    with inst.connect() as c:                                  # the old configuration serves on
        assert c.execute("SELECT 1").fetchone()[0] == 1
