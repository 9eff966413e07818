"""``GET /v1/audit`` and ``droidwire audit``: filters, pages, and who may read which entries."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from controller.auth import Principal, authenticate
from controller.services import services_of
from controller.store import utcnow
from droidwire import app as cli
from tests.controller.conftest import ADMIN_TOKEN, Api, LiveController, bearer

runner = CliRunner()


async def _world(api: Api) -> dict[str, str]:
    """olivia owns bridge pi (device SIM1); bob owns nothing; both act a little."""
    tokens = {"admin": ADMIN_TOKEN}
    for user in ("olivia", "bob"):
        tokens[user] = (await api.new_token("user", user))["token"]
    await api.new_token("bridge", "pi", as_token=tokens["olivia"])
    audit = services_of(api.app).audit
    olivia = await _principal(api, tokens["olivia"])
    bob = await _principal(api, tokens["bob"])
    await audit.record(bob, "device.shell", device="pi~SIM1", outcome="forbidden",
                       detail={"rule": "metacharacter"})
    await audit.record(olivia, "apps.install", device="pi~SIM1")
    await audit.record(bob, "device.shell", device="lab~OTHER")
    return tokens


async def _principal(api: Api, token: str) -> Principal:
    return await authenticate(services_of(api.app).store, f"Bearer {token}")


async def test_filters_and_pages(api: Api) -> None:
    tokens = await _world(api)
    admin = bearer(tokens["admin"])
    everything = (await api.client.get("/v1/audit", headers=admin)).json()
    actions = [e["action"] for e in everything["entries"]]
    assert actions[:3] == ["device.shell", "apps.install", "device.shell"]  # newest first
    assert "token.create" in actions
    first = everything["entries"][0]
    assert {"id", "at", "actor", "action", "device", "outcome", "detail"} <= set(first)

    by_user = (await api.client.get("/v1/audit", params={"user": "bob"}, headers=admin)).json()
    assert {e["actor"] for e in by_user["entries"]} == {"bob"}
    refused = (
        await api.client.get("/v1/audit", params={"outcome": "forbidden"}, headers=admin)
    ).json()["entries"]
    assert [e["detail"] for e in refused] == [{"rule": "metacharacter"}]
    by_serial = (await api.client.get("/v1/audit", params={"device": "SIM1"}, headers=admin)).json()
    assert [e["action"] for e in by_serial["entries"]] == ["apps.install", "device.shell"]
    prefix = (await api.client.get("/v1/audit", params={"action": "token.*"}, headers=admin)).json()
    assert prefix["entries"] and all(e["action"].startswith("token.") for e in prefix["entries"])
    later = (utcnow() + timedelta(minutes=1)).isoformat()
    none = (await api.client.get("/v1/audit", params={"since": later}, headers=admin)).json()
    assert none == {"entries": [], "next": None}

    # Pages: ``next`` is the cursor of the following page; no entry twice, none missed.
    seen: list[int] = []
    cursor: int | None = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor is not None:
            params["before"] = cursor
        page = (await api.client.get("/v1/audit", params=params, headers=admin)).json()
        assert len(page["entries"]) <= 2
        seen += [e["id"] for e in page["entries"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == [e["id"] for e in everything["entries"]]


async def test_owners_see_their_devices_and_their_own_acts(api: Api) -> None:
    tokens = await _world(api)
    olivia = (await api.client.get("/v1/audit", headers=bearer(tokens["olivia"]))).json()
    devices = {e["device"] for e in olivia["entries"]}
    assert devices == {"pi~SIM1", None}  # bob's refusal on her device, her own acts
    assert any(e["actor"] == "bob" for e in olivia["entries"])
    bob = (await api.client.get("/v1/audit", headers=bearer(tokens["bob"]))).json()
    assert {e["actor"] for e in bob["entries"]} == {"bob"}
    assert "lab~OTHER" in {e["device"] for e in bob["entries"]}


@pytest.mark.parametrize(
    "params", [{"limit": 0}, {"limit": 100000}, {"since": "yesterday"}, {"before": "x"}]
)
async def test_bad_filters_are_typed_errors(api: Api, params: dict[str, object]) -> None:
    response = await api.client.get("/v1/audit", params=params, headers=bearer(ADMIN_TOKEN))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_request"


def test_cli_audit(live_controller: LiveController) -> None:
    import httpx

    with httpx.Client(base_url=live_controller.url) as http:
        response = http.post("/v1/tokens", json={"kind": "user", "name": "carol"},
                             headers=bearer(ADMIN_TOKEN))
        assert response.status_code == 201
    env = {"DROIDWIRE_CONTROLLER": live_controller.url, "DROIDWIRE_TOKEN": ADMIN_TOKEN}
    result = runner.invoke(cli, ["audit", "--action", "token.create", "--json"], env=env)
    assert result.exit_code == 0, result.stderr
    entries = json.loads(result.stdout)["entries"]
    assert entries and entries[0]["detail"].get("name") == "carol"
    table = runner.invoke(cli, ["audit", "--user", "admin"], env=env)
    assert table.exit_code == 0, table.stderr
    assert "token.create" in table.stdout
    bad = runner.invoke(cli, ["audit", "--since", "never"], env=env)
    assert bad.exit_code == 2


async def test_sign_ins_are_audited_refused_ones_too(api: Api) -> None:
    origin = {"Origin": "http://controller.test"}
    bad = await api.client.post("/login", data={"token": "dw_u_wrong"}, headers=origin)
    assert bad.status_code == 401
    good = await api.client.post("/login", data={"token": ADMIN_TOKEN}, headers=origin)
    assert good.status_code == 303
    page = await api.client.get("/v1/audit", params={"action": "web.login"},
                                headers=bearer(ADMIN_TOKEN))
    entries = page.json()["entries"]
    assert [(e["actor"], e["outcome"]) for e in entries] == [
        ("admin", "ok"), ("anonymous", "unauthorized")
    ]
    assert "dw_u_wrong" not in page.text


def test_transfer_routes_are_named_for_a_body_limit_to_skip() -> None:
    from controller.api.manage import TRANSFER_ROUTES

    assert TRANSFER_ROUTES.match("/v1/devices/desk~SIM1/apps")
    assert TRANSFER_ROUTES.match("/v1/devices/SIM1/files")
    assert TRANSFER_ROUTES.match("/manage/desk~SIM1/apps")
    assert not TRANSFER_ROUTES.match("/v1/devices/SIM1/shell")
    assert not TRANSFER_ROUTES.match("/v1/devices/SIM1/apps/com.example")
