"""The lending matrix over real HTTP: who sees and touches which device (SQLite and PostgreSQL).

A controller on real uvicorn (on the test's loop), a fake bridge owned by ``olivia`` that
reports one device, and every kind of caller × every kind of act. Time is moved through the
injectable clock of :mod:`controller.auth`, never slept through.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from controller import auth
from controller.config import ControllerConfig
from controller.services import services_of
from controller.store import AuditEntry, known_devices
from tests.conftest import TIME_SCALE
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import (
    WAIT_S,
    FakeBridge,
    InLoopController,
    echo_handler,
    fast_settings,
)

SERIAL = "emulator-5554"
DEVICE = f"pi~{SERIAL}"
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class FrozenClock:
    """A clock that only moves when told to."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture
def clock() -> Iterator[FrozenClock]:
    frozen = FrozenClock(T0)
    previous = auth.use_clock(frozen)
    try:
        yield frozen
    finally:
        auth.use_clock(previous)


@dataclass
class World:
    controller: InLoopController
    http: httpx.AsyncClient
    tokens: dict[str, str]  # who → secret
    grants: dict[str, str]  # whose grant → id

    async def call(self, who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self.http.request(method, path, headers=bearer(self.tokens[who]), **kwargs)

    async def grant(self, who: str, user: str, **body: Any) -> httpx.Response:
        return await self.call(
            who, "POST", "/v1/grants", json={"device": DEVICE, "user": user, **body}
        )

    async def audit(self) -> list[AuditEntry]:
        return await services_of(self.controller.app).audit.recent(limit=1000)


async def _token(http: httpx.AsyncClient, kind: str, name: str, as_token: str) -> str:
    response = await http.post(
        "/v1/tokens", json={"kind": kind, "name": name}, headers=bearer(as_token)
    )
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


async def until_device_seen(controller: InLoopController, owner_token: str) -> None:
    """The hub records a reported device in the store just after its welcome: wait for it."""
    bridges = (await controller.http.get("/v1/bridges", headers=bearer(owner_token))).json()
    store = services_of(controller.app).store
    async with asyncio.timeout(WAIT_S):
        # The hub announces no store write, so there is no event to wait on: poll the store.
        while not await known_devices(store, bridges[0]["id"]):  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def _with_logcat(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The echo bridge, which also starts (silent) logcat streams."""
    if method == "device.logcat.subscribe":
        return {"channel": "log-1"}
    if method == "device.logcat.unsubscribe":
        return {}
    return await echo_handler(method, params)


@pytest.fixture
async def world(db_url: str, clock: FrozenClock) -> AsyncIterator[World]:
    settings = fast_settings(stream_reauth_s=0.05 * TIME_SCALE)
    config = ControllerConfig(db_url=db_url, bootstrap_token=ADMIN_TOKEN, settings=settings)
    controller = InLoopController(config)
    await controller.start()
    bridge: FakeBridge | None = None
    try:
        http = controller.http
        tokens = {"admin": ADMIN_TOKEN}
        for user in ("olivia", "bob", "eve", "rita", "sam", "tess"):
            tokens[user] = await _token(http, "user", user, ADMIN_TOKEN)
        tokens["bridge"] = await _token(http, "bridge", "pi", tokens["olivia"])
        bridge = FakeBridge(controller.url, tokens["bridge"], handler=_with_logcat)
        await bridge.connect()
        await until_device_seen(controller, tokens["olivia"])
        world = World(controller, http, tokens, {})
        for user, until in (
            ("bob", T0 + timedelta(hours=1)),
            ("eve", T0 + timedelta(minutes=1)),
            ("rita", None),
        ):
            body = {} if until is None else {"until": until.isoformat()}
            response = await world.grant("olivia", user, **body)
            assert response.status_code == 201, response.text
            world.grants[user] = response.json()["id"]
        revoked = await world.call("olivia", "DELETE", f"/v1/grants/{world.grants['rita']}")
        assert revoked.status_code == 204
        clock.at = T0 + timedelta(minutes=2)  # eve's loan is over, bob's still runs
        yield world
    finally:
        if bridge is not None:
            await bridge.close()
        await controller.stop()


# Who the caller is in the matrix, and what each act must answer.
#              view (listed?)  use    lend   revoke
EXPECTED: dict[str, tuple[bool | int, int, int, int]] = {
    "olivia": (True, 200, 201, 204),  # the owner
    "admin": (True, 200, 201, 204),
    "bob": (True, 200, 403, 403),  # live grant: uses, never lends
    "eve": (False, 404, 404, 403),  # expired grant: a stranger again, who sees their grant
    "rita": (False, 404, 404, 403),  # revoked grant: likewise
    "sam": (False, 404, 404, 404),  # a stranger
    "bridge": (403, 403, 403, 403),  # a bridge token opens the bridge endpoint only
}


async def _act_view(world: World, who: str) -> bool | int:
    response = await world.call(who, "GET", "/v1/devices")
    if response.status_code != 200:
        return response.status_code
    return DEVICE in {d["id"] for d in response.json()}


async def _act_use(world: World, who: str, device: str = SERIAL) -> int:
    response = await world.call(
        who, "POST", f"/v1/devices/{device}/shell", json={"command": "echo hi"}
    )
    if response.status_code == 200:
        assert response.json()["stdout"] == "echo hi\n"
    return response.status_code


async def _act_lend(world: World, who: str, device: str = SERIAL) -> int:
    response = await world.call(who, "POST", "/v1/grants", json={"device": device, "user": "tess"})
    return response.status_code


async def _act_revoke(world: World, who: str) -> int:
    if who in world.grants:  # a holder tries to end their own loan
        target = world.grants[who]
    else:  # anyone else: a fresh loan to tess
        response = await world.grant("olivia", "tess")
        assert response.status_code == 201, response.text
        target = response.json()["id"]
    response = await world.call(who, "DELETE", f"/v1/grants/{target}")
    return response.status_code


async def test_lending_matrix(world: World) -> None:
    seen: dict[str, tuple[bool | int, int, int, int]] = {}
    for who in EXPECTED:
        seen[who] = (
            await _act_view(world, who),
            await _act_use(world, who),
            await _act_lend(world, who),
            await _act_revoke(world, who),
        )
    assert seen == EXPECTED


async def test_refusals_leak_nothing(world: World) -> None:
    """A device you cannot see answers exactly as a device that does not exist."""
    for who in ("eve", "rita", "sam"):
        for device in (SERIAL, DEVICE):
            for act in (_act_use, _act_lend):
                hidden = await act(world, who, device)
                absent = await act(world, who, "nope-0000")
                assert hidden == absent == 404
        response = await world.call(
            who, "POST", f"/v1/devices/{SERIAL}/shell", json={"command": "echo hi"}
        )
        body = response.json()
        assert body == {"error": {"code": "not_found", "message": f"no device {SERIAL!r}"}}
        # Nothing names the bridge, its owner or anyone's loan.
        for text in ("pi", "olivia", "bob"):
            assert text not in response.text
        devices = (await world.call(who, "GET", "/v1/devices")).json()
        assert devices == []
        grants = (await world.call(who, "GET", "/v1/grants", params={"all": "true"})).json()
        assert all(g["user"] == who for g in grants)
        assert (await world.call(who, "GET", "/v1/grants")).json() == []
    # The stranger cannot even tell a real grant id from a made-up one.
    real = await world.call("sam", "DELETE", f"/v1/grants/{world.grants['bob']}")
    fake = await world.call("sam", "DELETE", "/v1/grants/0123456789abcdef0123456789abcdef")
    assert real.status_code == fake.status_code == 404
    assert real.json()["error"]["code"] == fake.json()["error"]["code"] == "not_found"


async def test_the_borrower_cannot_relend(world: World) -> None:
    response = await world.grant("bob", "sam")
    assert response.status_code == 403
    assert response.json()["error"]["rule"] == "borrower_cannot_lend"
    # And so sam has nothing.
    assert await _act_use(world, "sam") == 404
    listed = (await world.call("bob", "GET", "/v1/grants")).json()
    assert [(g["user"], g["status"]) for g in listed] == [("bob", "live")]


async def test_expiry_takes_effect_at_once(world: World, clock: FrozenClock) -> None:
    assert await _act_use(world, "bob") == 200
    clock.at = T0 + timedelta(hours=1)  # the very instant the loan ends
    assert await _act_use(world, "bob") == 404
    assert await _act_view(world, "bob") is False
    grants = (await world.call("bob", "GET", "/v1/grants", params={"all": "true"})).json()
    assert {g["id"]: g["status"] for g in grants}[world.grants["bob"]] == "expired"
    # Nothing was cached: the same clock a second earlier gives the device back.
    clock.at = T0 + timedelta(hours=1) - timedelta(seconds=1)
    assert await _act_use(world, "bob") == 200


async def test_revocation_takes_effect_at_once(world: World) -> None:
    assert await _act_use(world, "bob") == 200
    response = await world.call("olivia", "DELETE", f"/v1/grants/{world.grants['bob']}")
    assert response.status_code == 204
    assert await _act_use(world, "bob") == 404
    assert await _act_view(world, "bob") is False
    # Idempotent.
    again = await world.call("olivia", "DELETE", f"/v1/grants/{world.grants['bob']}")
    assert again.status_code == 204


async def test_a_new_grant_replaces_the_live_one(world: World, clock: FrozenClock) -> None:
    later = T0 + timedelta(days=2)
    response = await world.grant("olivia", "bob", until=later.isoformat())
    assert response.status_code == 201
    created = response.json()
    assert created["replaces"] == [world.grants["bob"]]
    assert (created["device"], created["owner"], created["user"]) == (DEVICE, "olivia", "bob")
    live = (await world.call("olivia", "GET", "/v1/grants")).json()
    assert [(g["user"], g["id"]) for g in live] == [("bob", created["id"])]
    clock.at = T0 + timedelta(days=1)  # past the old loan's end, before the new one's
    assert await _act_use(world, "bob") == 200


async def test_an_admin_lends_on_the_owners_behalf(world: World) -> None:
    response = await world.grant("admin", "sam")
    assert response.status_code == 201
    assert response.json()["owner"] == "olivia"
    assert await _act_use(world, "sam") == 200
    assert (
        await world.call("olivia", "DELETE", f"/v1/grants/{response.json()['id']}")
    ).status_code == 204
    assert await _act_use(world, "sam") == 404


BAD_GRANTS: list[tuple[dict[str, Any], int]] = [
    ({"device": DEVICE, "user": "olivia"}, 400),  # to oneself
    ({"device": DEVICE, "user": "nobody"}, 404),
    ({"device": DEVICE, "user": "sam", "until": (T0 - timedelta(days=1)).isoformat()}, 400),
    ({"device": DEVICE, "user": "sam", "until": "2031-01-01T00:00:00"}, 400),  # naive
    ({"device": DEVICE, "user": "sam", "until": "tomorrow"}, 400),
    ({"device": DEVICE, "user": "sam", "extra": 1}, 400),
    ({"device": "", "user": "sam"}, 400),
    ({"device": "x" * 5000, "user": "sam"}, 400),
    ({"device": DEVICE, "user": "../../etc"}, 400),
    ({"device": "other~" + SERIAL, "user": "sam"}, 404),
    ({"device": ["list"], "user": "sam"}, 400),
    ({"device": DEVICE, "user": "sam", "until": "9999-12-31T23:59:59-14:00"}, 400),
    ({"device": DEVICE, "user": "sam", "until": "0001-01-01T00:00:00+14:00"}, 400),
    ({"device": DEVICE, "user": "sam", "until": 1e300}, 400),
    ({"device": "emulator\x00-5554", "user": "sam"}, 400),
    ({"device": "pi~emulator\u202e-5554", "user": "sam"}, 400),
    ([], 400),
]


async def test_bad_grants_are_typed_errors(world: World) -> None:
    for body, status in BAD_GRANTS:
        response = await world.call("olivia", "POST", "/v1/grants", json=body)
        assert response.status_code == status, (body, response.text)
        assert "code" in response.json()["error"]
    assert await _act_use(world, "sam") == 404
    bad_ids = ["x" * 5000, "%00", "..", "' OR 1=1 --"]
    for grant_id in bad_ids:
        response = await world.call("olivia", "DELETE", f"/v1/grants/{grant_id}")
        assert response.status_code in (404, 405), response.text  # "" and ".." reroute


async def test_every_grant_change_is_audited(world: World) -> None:
    assert await _act_use(world, "bob") == 200
    await world.grant("bob", "sam")  # refused
    await world.call("olivia", "DELETE", f"/v1/grants/{world.grants['bob']}")
    entries = [e for e in await world.audit() if e.action.startswith("grant.")]
    by_outcome = {(e.actor, e.action, e.outcome) for e in entries}
    assert ("olivia", "grant.create", "ok") in by_outcome
    assert ("olivia", "grant.revoke", "ok") in by_outcome
    assert ("bob", "grant.create", "forbidden") in by_outcome
    creates = [e for e in entries if e.action == "grant.create" and e.outcome == "ok"]
    assert len(creates) == 3 and all(e.device == DEVICE for e in creates)
    assert {e.detail["user"] for e in creates} == {"bob", "eve", "rita"}
    # A borrower's device calls are audited under their own name (the call is made first).
    assert any(
        e.actor == "bob" and e.action == "device.shell" and e.device == DEVICE
        for e in await world.audit()
    )


async def _stream_until_closed(world: World, who: str, end_the_loan: Any) -> tuple[Any, Any]:
    """Open ``who``'s logcat stream, end their loan with ``end_the_loan()``, return the last
    message and the close frame the controller sent."""
    url = world.controller.ws_url + f"/v1/devices/{DEVICE}/logcat/stream"
    headers = bearer(world.tokens[who])
    async with connect(url, additional_headers=headers, open_timeout=WAIT_S) as ws:
        await end_the_loan()
        messages = []
        async with asyncio.timeout(WAIT_S):
            with contextlib.suppress(ConnectionClosed):
                while True:
                    messages.append(json.loads(await ws.recv()))
        return messages[-1], ws.protocol.close_rcvd


async def test_a_stream_ends_when_the_loan_expires(world: World, clock: FrozenClock) -> None:
    async def expire() -> None:
        clock.at = T0 + timedelta(hours=2)  # bob's loan ran to T0 + 1 h

    last, close = await _stream_until_closed(world, "bob", expire)
    assert last["eof"] and last["reason"].startswith("forbidden")
    assert close is not None and close.code == 1008


async def test_a_stream_ends_when_the_loan_is_revoked(world: World) -> None:
    async def revoke() -> None:
        response = await world.call("olivia", "DELETE", f"/v1/grants/{world.grants['bob']}")
        assert response.status_code == 204

    last, close = await _stream_until_closed(world, "bob", revoke)
    assert last["eof"] and last["reason"].startswith("forbidden")
    assert close is not None and close.code == 1008


async def test_the_owners_stream_outlives_the_loans(world: World, clock: FrozenClock) -> None:
    url = world.controller.ws_url + f"/v1/devices/{DEVICE}/logcat/stream"
    headers = bearer(world.tokens["olivia"])
    async with connect(url, additional_headers=headers, open_timeout=WAIT_S) as ws:
        clock.at = T0 + timedelta(days=30)
        with pytest.raises(TimeoutError):  # nothing arrives: the stream is silent, not ended
            async with asyncio.timeout(20 * world.controller.config.settings.stream_reauth_s):
                await ws.recv()
        assert ws.protocol.close_rcvd is None
