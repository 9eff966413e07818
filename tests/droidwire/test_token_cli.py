"""``droidwire token`` against a controller running on real uvicorn (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from typer.testing import CliRunner

from droidwire import app as cli
from droidwire.client import ExitCode
from tests.controller.conftest import ADMIN_TOKEN, LiveController, bearer

runner = CliRunner()


def droidwire(live: LiveController, *args: str, token: str = ADMIN_TOKEN) -> tuple[int, str, str]:
    env = {"DROIDWIRE_CONTROLLER": live.url, "DROIDWIRE_TOKEN": token}
    result = runner.invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_token_lifecycle_over_real_http(live_controller: LiveController) -> None:
    live = live_controller
    code, out, err = droidwire(live, "token", "create", "--kind", "bridge", "pi-1")
    assert code == 0, err
    bridge_token = out.strip()
    assert bridge_token.startswith("dw_b_") and "\n" not in bridge_token
    assert "shown only this once" in err

    code, out, err = droidwire(live, "token", "create", "--kind", "user", "alice", "--json")
    assert code == 0, err
    alice = json.loads(out)
    assert set(alice) >= {"id", "token", "kind", "name"} and alice["token"].startswith("dw_u_")

    with httpx.Client(base_url=live.url) as http:
        # The bridge token is real: authenticated, then kept off the REST API.
        refused = http.get("/v1/tokens", headers=bearer(bridge_token))
        assert refused.status_code == 403 and refused.json()["error"]["rule"] == "bridge_token"
        # Tokens in a URL are refused over the wire too.
        assert http.get("/v1/tokens", params={"token": ADMIN_TOKEN}).status_code == 400

    code, out, err = droidwire(live, "token", "list", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert {(t["kind"], t["name"]) for t in listed} == {
        ("admin", "bootstrap"),
        ("bridge", "pi-1"),
        ("user", "alice"),
    }
    assert bridge_token not in out and alice["token"] not in out

    code, out, err = droidwire(live, "token", "list", token=alice["token"])
    assert code == 0, err
    assert alice["id"] in out and "pi-1" not in out

    code, out, err = droidwire(live, "token", "revoke", alice["id"])
    assert (code, out.strip()) == (0, f"revoked token {alice['id']}")
    code, _, err = droidwire(live, "token", "list", token=alice["token"])
    assert code == ExitCode.AUTH
    assert "unauthorized" in err


def test_cli_errors_have_distinct_exit_codes(live_controller: LiveController) -> None:
    code, _, err = droidwire(live_controller, "token", "revoke", "no-such-id")
    assert code == ExitCode.NOT_FOUND and "not_found" in err

    code, _, err = droidwire(live_controller, "token", "create", "--kind", "user", "bad~name")
    assert code == ExitCode.USAGE and "bad_request" in err

    code, _, err = droidwire(live_controller, "token", "list", token="dw_u_wrong")
    assert code == ExitCode.AUTH


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DROIDWIRE_TOKEN": "x"}, "no controller"),
        ({"DROIDWIRE_CONTROLLER": "http://127.0.0.1:1"}, "no token"),
        ({"DROIDWIRE_CONTROLLER": "ftp://h", "DROIDWIRE_TOKEN": "x"}, "not an http(s) URL"),
    ],
)
def test_missing_settings_are_usage_errors(
    env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DROIDWIRE_CONTROLLER", raising=False)
    monkeypatch.delenv("DROIDWIRE_TOKEN", raising=False)
    result = runner.invoke(cli, ["token", "list"], env=env)
    assert result.exit_code == ExitCode.USAGE
    assert expected in result.stderr


def test_an_unreachable_controller_is_unavailable() -> None:
    # A port that was just free and is closed again: the connection is refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"DROIDWIRE_CONTROLLER": f"http://127.0.0.1:{port}", "DROIDWIRE_TOKEN": "x"}
    result = runner.invoke(cli, ["token", "list"], env=env)
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert "cannot reach" in result.stderr
