"""Accounts: an admin lists, disables and re-enables users (REST and CLI). A disabled user's
tokens are refused as revoked ones, their dashboard session ends and their bridge is
disconnected; re-enabled, their tokens work again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx

from tests.controller.conftest import bearer
from tests.controller.web.support import sign_in
from tests.manage.support import World


async def test_disable_and_enable(world: World) -> None:
    http = world.ctl.http  # the admin
    listed = (await http.get("/v1/users")).json()
    olivia = next(u for u in listed if u["name"] == "olivia")
    assert olivia["disabled"] is False and olivia["tokens"] == 2  # her user and bridge tokens
    assert (await world.call("bob", "GET", "/apps")).status_code == 404  # (a stranger, yet)
    assert (await http.get("/v1/users", headers=bearer(world.tokens["bob"]))).status_code == 403

    # olivia's dashboard session and bridge are live before.
    async with httpx.AsyncClient(base_url=world.ctl.url) as browser:
        signed = await sign_in(browser, world.tokens["olivia"])
        assert signed.status_code == 303
        assert (await browser.get("/loans")).status_code == 200
        bridge = world.bridge

        disabled = await http.post("/v1/users/olivia/disable")
        assert disabled.status_code == 200, disabled.text
        assert disabled.json()["disabled"] is True
        refused = await http.get("/v1/devices", headers=bearer(world.tokens["olivia"]))
        assert refused.status_code == 401
        assert (await browser.get("/loans")).status_code == 303  # back to the sign-in form
        async with asyncio.timeout(30):
            await bridge.closed.wait()
        assert bridge.close_code == 4401

        enabled = await http.post("/v1/users/olivia/enable")
        assert enabled.json()["disabled"] is False
        again = await http.get("/v1/devices", headers=bearer(world.tokens["olivia"]))
        assert again.status_code == 200

    assert (await http.post("/v1/users/admin/disable")).status_code == 403
    assert (await http.post("/v1/users/nobody/disable")).status_code == 404
    entries = (await http.get("/v1/audit", params={"action": "user.*"})).json()["entries"]
    assert [(e["action"], e["outcome"]) for e in entries] == [
        ("user.disable", "not_found"), ("user.disable", "forbidden"), ("user.enable", "ok"),
        ("user.disable", "ok"),
    ]

    code, out, err = await asyncio.to_thread(world.cli, "admin", "user", "disable", "bob")
    assert code == 0, err
    code, out, err = await asyncio.to_thread(world.cli, "admin", "user", "list", "--json")
    assert {u["name"]: u["disabled"] for u in json.loads(out)}["bob"] is True
    code, _, err = await asyncio.to_thread(world.cli, "bob", "audit")
    assert code == 3, err  # his token is refused while he is disabled
    code, _, err = await asyncio.to_thread(world.cli, "admin", "user", "enable", "bob")
    assert code == 0, err


async def test_disabling_stops_an_upload_under_way(world: World) -> None:
    http = world.ctl.http
    grant = await http.post("/v1/grants", json={"device": world.sim.address, "user": "bob"},
                            headers=bearer(world.tokens["olivia"]))
    assert grant.status_code == 201
    part = b"x" * (1024 * 1024)

    async def body() -> AsyncIterator[bytes]:
        yield part
        # The first chunk is on its way: now the admin disables bob.
        assert (await http.post("/v1/users/bob/disable")).status_code == 200
        yield part

    stopped = await http.put(
        world.base + "/files", params={"path": "big.bin"}, content=body(),
        headers={**bearer(world.tokens["bob"]), "Content-Length": str(2 * len(part))},
    )
    assert stopped.status_code == 403, stopped.text
    assert stopped.json()["error"]["rule"] == "access_ended"
    folder = f"/data/local/tmp/droidwire/loans/{world.user_ids['bob']}"
    assert not world.exists(f"{folder}/big.bin")
    audit = (await http.get("/v1/audit", params={"user": "bob", "action": "files.push"})).json()
    assert audit["entries"][0]["outcome"] == "forbidden"
    assert (await http.post("/v1/users/bob/enable")).status_code == 200
