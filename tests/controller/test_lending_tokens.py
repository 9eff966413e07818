"""Token rotation and scopes over real HTTP (SQLite and PostgreSQL), with a bridge attached."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from controller.auth import Scope, effective_scopes
from controller.config import ControllerConfig
from controller.services import services_of
from droidwire import app as cli
from protocol.closecodes import CloseCode
from protocol.envelope import SUBPROTOCOL
from tests.controller.conftest import ADMIN_TOKEN, LiveController, bearer
from tests.controller.test_hub_support import WAIT_S, FakeBridge, InLoopController, fast_settings
from tests.controller.test_lending import SERIAL, until_device_seen

runner = CliRunner()


@dataclass
class Setup:
    controller: InLoopController
    bridge: FakeBridge
    olivia: str  # owns bridge "pi"
    bridge_token_id: str

    @property
    def http(self) -> httpx.AsyncClient:
        return self.controller.http

    async def token(
        self,
        name: str,
        *,
        as_token: str = ADMIN_TOKEN,
        scopes: list[str] | None = None,
        kind: str = "user",
    ) -> httpx.Response:
        body: dict[str, Any] = {"kind": kind, "name": name}
        if scopes is not None:
            body["scopes"] = scopes
        return await self.http.post("/v1/tokens", json=body, headers=bearer(as_token))

    async def scoped(self, *scopes: str, name: str = "olivia") -> str:
        response = await self.token(name, scopes=list(scopes))
        assert response.status_code == 201, response.text
        assert response.json()["scopes"] == sorted(scopes)
        return str(response.json()["token"])


@pytest.fixture
async def setup(db_url: str) -> AsyncIterator[Setup]:
    config = ControllerConfig(db_url=db_url, bootstrap_token=ADMIN_TOKEN, settings=fast_settings())
    controller = InLoopController(config)
    await controller.start()
    bridge: FakeBridge | None = None
    try:
        response = await controller.http.post("/v1/tokens", json={"kind": "user", "name": "olivia"})
        olivia = response.json()["token"]
        response = await controller.http.post(
            "/v1/tokens", json={"kind": "bridge", "name": "pi"}, headers=bearer(olivia)
        )
        bridge = FakeBridge(controller.url, response.json()["token"])
        await bridge.connect()
        await until_device_seen(controller, olivia)
        yield Setup(controller, bridge, olivia, response.json()["id"])
    finally:
        if bridge is not None:
            await bridge.close()
        await controller.stop()


async def _shell(http: httpx.AsyncClient, token: str) -> httpx.Response:
    return await http.post(
        f"/v1/devices/{SERIAL}/shell", json={"command": "echo hi"}, headers=bearer(token)
    )


# -- rotation


async def test_rotation_shows_a_new_secret_once_and_kills_the_old(setup: Setup) -> None:
    http = setup.http
    created = (await setup.token("bob", scopes=["devices:read"])).json()
    old = created["token"]
    rotated = await http.post(f"/v1/tokens/{created['id']}/rotate", headers=bearer(old))
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()
    assert new["replaces"] == created["id"] and new["id"] != created["id"]
    assert (new["kind"], new["name"], new["scopes"]) == ("user", "bob", ["devices:read"])
    assert new["token"].startswith("dw_u_") and new["token"] != old
    # The old secret is dead at once; the new one works.
    assert (await http.get("/v1/grants", headers=bearer(old))).status_code == 401
    assert (await http.get("/v1/grants", headers=bearer(new["token"]))).status_code == 200
    listed = (await http.get("/v1/tokens", headers=bearer(new["token"]))).json()
    assert {t["id"]: t["revoked"] for t in listed} == {created["id"]: True, new["id"]: False}
    assert all(new["token"] not in json.dumps(t) for t in listed)
    # A revoked token cannot be rotated back to life; the bootstrap token is configuration.
    again = await http.post(f"/v1/tokens/{created['id']}/rotate")
    assert again.status_code == 409
    tokens = (await http.get("/v1/tokens")).json()
    bootstrap = next(t["id"] for t in tokens if t["name"] == "bootstrap")
    refused = await http.post(f"/v1/tokens/{bootstrap}/rotate")
    assert refused.status_code == 409 and refused.json()["error"]["rule"] == "bootstrap_token"
    # Someone else's token is not found; an unknown id likewise.
    for token_id in (bootstrap, "f" * 32, "x" * 3000, "%00", "F" * 32):
        response = await http.post(f"/v1/tokens/{token_id}/rotate", headers=bearer(setup.olivia))
        assert response.status_code == 404
        response = await http.delete(f"/v1/tokens/{token_id}", headers=bearer(setup.olivia))
        assert response.status_code == 404
    entries = await services_of(setup.controller.app).audit.recent(limit=100)
    rotations = [(e.actor, e.outcome) for e in entries if e.action == "token.rotate"]
    assert ("bob", "ok") in rotations and ("admin", "conflict") in rotations


async def test_rotating_a_bridge_token_drops_the_bridge(setup: Setup) -> None:
    http = setup.http
    response = await http.post(
        f"/v1/tokens/{setup.bridge_token_id}/rotate", headers=bearer(setup.olivia)
    )
    assert response.status_code == 201, response.text
    new = response.json()
    assert new["kind"] == "bridge" and new["token"].startswith("dw_b_")
    await asyncio.wait_for(setup.bridge.closed.wait(), WAIT_S)
    assert setup.bridge.close_code == CloseCode.UNAUTHORIZED
    # The old token no longer opens the bridge endpoint; the new one does, as the same bridge.
    with pytest.raises(InvalidStatus) as refused:
        await connect(
            setup.controller.ws_url + "/v1/bridge",
            subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers=bearer(setup.bridge.token),
            open_timeout=WAIT_S,
        )
    assert refused.value.response.status_code == 401
    back = FakeBridge(setup.controller.url, new["token"])
    await back.connect()
    try:
        assert back.welcomes[0].bridge == "pi"
        assert (await _shell(http, setup.olivia)).status_code == 200
    finally:
        await back.close()


def test_token_rotate_cli(live_controller: LiveController) -> None:
    live = live_controller
    env = {"DROIDWIRE_CONTROLLER": live.url, "DROIDWIRE_TOKEN": ADMIN_TOKEN}
    result = runner.invoke(
        cli,
        [
            "token",
            "create",
            "--kind",
            "user",
            "bob",
            "--json",
            "--scope",
            "devices:use",
            "--scope",
            "runs:write",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["scopes"] == ["devices:use", "runs:write"]
    result = runner.invoke(cli, ["token", "rotate", created["id"]], env=env)
    assert result.exit_code == 0, result.stderr
    secret = result.stdout.strip()
    assert (
        secret.startswith("dw_u_")
        and "\n" not in secret
        and "shown only this once" in result.stderr
    )
    with httpx.Client(base_url=live.url) as http:
        assert http.get("/v1/grants", headers=bearer(created["token"])).status_code == 401
        assert http.get("/v1/grants", headers=bearer(secret)).status_code == 200
    result = runner.invoke(cli, ["token", "rotate", created["id"]], env=env)
    assert result.exit_code == 1 and "conflict" in result.stderr
    result = runner.invoke(cli, ["token", "list", "--json"], env=env)
    assert result.exit_code == 0, result.stderr
    bobs = [(t["scopes"], t["revoked"]) for t in json.loads(result.stdout) if t["name"] == "bob"]
    assert bobs == [(["devices:use", "runs:write"], True), (["devices:use", "runs:write"], False)]
    result = runner.invoke(
        cli, ["token", "create", "--kind", "user", "bob", "--scope", "root"], env=env
    )
    assert result.exit_code == 2 and "bad_request" in result.stderr  # a rejected request


# -- scopes


def test_scope_implications() -> None:
    assert effective_scopes([]) == frozenset(Scope)
    assert effective_scopes(["devices:use"]) == {Scope.DEVICES_USE, Scope.DEVICES_READ}
    assert effective_scopes(["devices:lend"]) == {Scope.DEVICES_LEND, Scope.DEVICES_READ}
    assert effective_scopes(["runs:write"]) == {Scope.RUNS_WRITE, Scope.RUNS_READ}
    assert effective_scopes(["admin"]) == frozenset(Scope)
    assert effective_scopes(["no-such-scope"]) == frozenset()  # unknown grants nothing


async def test_scopes_limit_what_a_token_may_do(setup: Setup) -> None:
    http = setup.http
    read = await setup.scoped("devices:read")
    use = await setup.scoped("devices:use")
    lend = await setup.scoped("devices:lend")
    runs = await setup.scoped("runs:read")
    device = f"pi~{SERIAL}"
    await setup.token("bob")

    async def listed(token: str) -> list[str]:
        response = await http.get("/v1/devices", headers=bearer(token))
        assert response.status_code == 200
        return [d["id"] for d in response.json()]

    assert await listed(read) == [device]
    assert await listed(use) == [device]
    assert await listed(runs) == []  # no devices:read: sees no device at all

    refused = await _shell(http, read)
    assert refused.status_code == 403
    assert refused.json()["error"] | {} == {
        "code": "forbidden",
        "message": "this token lacks the 'devices:use' scope",
        "rule": "missing_scope",
        "scope": "devices:use",
    }
    assert (await _shell(http, use)).status_code == 200
    assert (await _shell(http, lend)).status_code == 403
    assert (await _shell(http, runs)).status_code == 404  # cannot even see it

    async def lend_to_bob(token: str) -> httpx.Response:
        return await http.post(
            "/v1/grants", json={"device": device, "user": "bob"}, headers=bearer(token)
        )

    for token in (read, use):
        response = await lend_to_bob(token)
        assert response.status_code == 403 and response.json()["error"]["scope"] == "devices:lend"
    granted = await lend_to_bob(lend)
    assert granted.status_code == 201
    assert (await http.get("/v1/grants", headers=bearer(read))).status_code == 200
    listing = await http.get("/v1/grants", headers=bearer(runs))
    assert listing.status_code == 403 and listing.json()["error"]["rule"] == "missing_scope"
    revoke = await http.delete(f"/v1/grants/{granted.json()['id']}", headers=bearer(use))
    assert revoke.status_code == 403
    revoke = await http.delete(f"/v1/grants/{granted.json()['id']}", headers=bearer(lend))
    assert revoke.status_code == 204


async def test_a_scoped_token_cannot_escalate(setup: Setup) -> None:
    http = setup.http
    read = await setup.scoped("devices:read")
    # Omitted scopes: the new token inherits the caller's, never "unrestricted".
    inherited = await setup.token("olivia", as_token=read)
    assert inherited.status_code == 201 and inherited.json()["scopes"] == ["devices:read"]
    for scopes in (["devices:use"], ["admin"], ["devices:read", "runs:read"]):
        response = await setup.token("olivia", as_token=read, scopes=scopes)
        assert response.status_code == 403, response.text
        assert response.json()["error"]["rule"] == "scope_escalation"
    # A narrower token is fine.
    narrower = await setup.token(
        "olivia", as_token=await setup.scoped("devices:use"), scopes=["devices:read"]
    )
    assert narrower.status_code == 201
    # Nor can it make a bridge (a bridge token counts as unrestricted), or rotate or revoke
    # the owner's unrestricted tokens.
    bridge = await setup.token("pi-2", as_token=read, kind="bridge")
    assert bridge.status_code == 403
    tokens = (await http.get("/v1/tokens", headers=bearer(setup.olivia))).json()
    unrestricted = next(t["id"] for t in tokens if t["kind"] == "user" and not t["scopes"])
    response = await http.post(f"/v1/tokens/{unrestricted}/rotate", headers=bearer(read))
    assert response.status_code == 403
    response = await http.delete(f"/v1/tokens/{unrestricted}", headers=bearer(read))
    assert response.status_code == 403
    assert (await http.get("/v1/grants", headers=bearer(setup.olivia))).status_code == 200
    # But it may rotate itself.
    own = next(t["id"] for t in tokens if t["scopes"] == ["devices:read"])
    response = await http.post(f"/v1/tokens/{own}/rotate", headers=bearer(read))
    assert response.status_code == 201


async def test_an_admins_scoped_token_is_not_an_admin(setup: Setup) -> None:
    http = setup.http
    response = await setup.token("admin", scopes=["devices:read"])
    limited = response.json()["token"]
    # It sees no device it does not own, nor other users' tokens.
    assert (await http.get("/v1/devices", headers=bearer(limited))).json() == []
    tokens = (await http.get("/v1/tokens", headers=bearer(limited))).json()
    assert {t["name"] for t in tokens} <= {"admin", "bootstrap"}
    assert (await setup.token("carol", as_token=limited)).status_code == 403
    # With the admin scope it is an admin again.
    response = await setup.token("admin", scopes=["admin"])
    full = response.json()["token"]
    assert [d["serial"] for d in (await http.get("/v1/devices", headers=bearer(full))).json()] == [
        SERIAL
    ]


BAD_SCOPES: list[dict[str, Any]] = [
    {"kind": "user", "name": "bob", "scopes": ["root"]},
    {"kind": "user", "name": "bob", "scopes": []},
    {"kind": "user", "name": "bob", "scopes": "devices:read"},
    {"kind": "user", "name": "bob", "scopes": ["devices:read"] * 100},
    {"kind": "user", "name": "bob", "scopes": [None]},
    {"kind": "bridge", "name": "pi-3", "scopes": ["devices:read"]},
]


async def test_bad_scopes_are_400(setup: Setup) -> None:
    for body in BAD_SCOPES:
        response = await setup.http.post("/v1/tokens", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["code"] == "bad_request"
