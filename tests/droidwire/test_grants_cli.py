"""``droidwire grant create|list|revoke`` against a controller on real uvicorn (SQLite and
PostgreSQL), and the parsing of ``--until`` / ``--for``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from typer.testing import CliRunner

from controller.store import Store, devices_seen
from droidwire import app as cli
from droidwire.client import ExitCode
from droidwire.grant import parse_duration, parse_until
from tests.controller.conftest import ADMIN_TOKEN, LiveController, bearer

runner = CliRunner()
SERIAL = "R58M123ABC"


def droidwire(live: LiveController, token: str, *args: str) -> tuple[int, str, str]:
    env = {"DROIDWIRE_CONTROLLER": live.url, "DROIDWIRE_TOKEN": token}
    result = runner.invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def _token(http: httpx.Client, kind: str, name: str, as_token: str = ADMIN_TOKEN) -> str:
    response = http.post("/v1/tokens", json={"kind": kind, "name": name}, headers=bearer(as_token))
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


async def _report_device(db_url: str, bridge_id: str) -> None:
    """What the hub writes when a bridge reports a device (no bridge needed to lend)."""
    async with Store(db_url) as store:
        await devices_seen(store, bridge_id, {SERIAL: {"serial": SERIAL, "model": "SM-G991B"}})


def test_lend_list_revoke_from_the_cli(live_controller: LiveController, db_url: str) -> None:
    live = live_controller
    with httpx.Client(base_url=live.url) as http:
        olivia, bob, sam = (_token(http, "user", n) for n in ("olivia", "bob", "sam"))
        _token(http, "bridge", "pi", olivia)
        bridge_id = http.get("/v1/bridges", headers=bearer(olivia)).json()[0]["id"]
        asyncio.run(_report_device(db_url, bridge_id))
        assert http.get("/v1/devices", headers=bearer(bob)).json() == []

        before = datetime.now(UTC)
        code, out, err = droidwire(
            live, olivia, "grant", "create", SERIAL, "bob", "--for", "2h", "--json"
        )
        assert code == 0, err
        grant = json.loads(out)
        assert (grant["device"], grant["owner"], grant["user"], grant["status"]) == (
            f"pi~{SERIAL}",
            "olivia",
            "bob",
            "live",
        )
        until = datetime.fromisoformat(grant["until"])
        assert before + timedelta(hours=2) <= until <= datetime.now(UTC) + timedelta(hours=2)

        # The borrower sees the device now, and the loan.
        devices = http.get("/v1/devices", headers=bearer(bob)).json()
        assert [d["id"] for d in devices] == [f"pi~{SERIAL}"]
        code, out, err = droidwire(live, bob, "grant", "list", "--json")
        assert code == 0, err
        assert [g["id"] for g in json.loads(out)] == [grant["id"]]
        code, out, err = droidwire(live, olivia, "grant", "list")
        assert code == 0, err
        assert grant["id"] in out and "bob" in out and "live" in out

        # The borrower cannot re-lend, nor end the owner's loan; a stranger cannot find it.
        code, out, err = droidwire(live, bob, "grant", "create", f"pi~{SERIAL}", "sam")
        assert code == ExitCode.AUTH and "borrower_cannot_lend" in err
        code, out, err = droidwire(live, bob, "grant", "revoke", grant["id"])
        assert code == ExitCode.AUTH
        code, out, err = droidwire(live, sam, "grant", "revoke", grant["id"])
        assert code == ExitCode.NOT_FOUND
        code, out, err = droidwire(live, sam, "grant", "create", SERIAL, "bob")
        assert code == ExitCode.NOT_FOUND

        # Plain output: the id alone on stdout, so G=$(droidwire grant create …) works.
        code, out, err = droidwire(
            live, olivia, "grant", "create", f"pi~{SERIAL}", "sam", "--until", "2999-01-01T00:00Z"
        )
        assert code == 0, err
        sams = out.strip()
        assert len(sams) == 32 and "lent pi~" in err and "2999-01-01 00:00:00" in err

        code, out, err = droidwire(live, olivia, "grant", "revoke", grant["id"])
        assert (code, out.strip()) == (0, f"revoked grant {grant['id']}")
        assert http.get("/v1/devices", headers=bearer(bob)).json() == []
        code, out, err = droidwire(live, olivia, "grant", "list", "--all", "--json")
        assert code == 0, err
        statuses = {g["id"]: g["status"] for g in json.loads(out)}
        assert statuses == {grant["id"]: "revoked", sams: "live"}
        code, out, err = droidwire(live, olivia, "grant", "revoke", sams, "--json")
        assert code == 0 and json.loads(out) == {"id": sams, "revoked": True}


def test_cli_usage_errors(live_controller: LiveController) -> None:
    live = live_controller
    cases = [
        ("--until", "next tuesday"),
        ("--for", "forever"),
        ("--for", "0m"),
        ("--until", "2999-01-01T00:00Z", "--for", "2h"),
    ]
    for extra in cases:
        code, _, err = droidwire(live, ADMIN_TOKEN, "grant", "create", SERIAL, "bob", *extra)
        assert code == ExitCode.USAGE, (extra, err)
        assert err.startswith("error: usage:")
    # Well-formed but refused by the controller: a typed error, its own exit code.
    code, _out, err = droidwire(live, ADMIN_TOKEN, "grant", "create", SERIAL, "bob")
    assert code == ExitCode.NOT_FOUND and "not_found" in err
    code, _, _ = droidwire(live, "dw_u_not-a-real-token", "grant", "list")
    assert code == ExitCode.AUTH


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        (" 2H ", timedelta(hours=2)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "2", "h", "2x", "-2h", "1.5h", "2h-", "h2", "0s", "99999w", "2h 3"]
)
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_until_times() -> None:
    assert parse_until("2026-12-01T18:00Z") == datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
    assert parse_until("2026-12-01T18:00:00+02:00") == datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
    local = parse_until("2026-12-01T18:00")
    assert local.tzinfo is not None  # this machine's zone, never naive
    with pytest.raises(ValueError):
        parse_until("soon")
