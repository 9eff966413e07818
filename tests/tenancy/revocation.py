"""(Support, no tests.) Revocation scenarios shared by the tenancy suite and ``make faults``
(tests/faults/test_tenancy.py records their figures): each returns how long it took from
the revocation to the last stopped run or stream, and what ran after it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from controller.web import COOKIE_NAME
from tests.controller.executor.support import llm_style_test
from tests.controller.web.support import sign_in
from tests.tenancy.support import WAIT_S, Stack

__all__ = ["Stopped", "queued_runs_stop", "stream_stops"]

DEVICE_STEPS = ("device.install", "device.instrument", "device.logcat.dump", "device.logcat.clear")


@dataclass
class Stopped:
    seconds: float  # from the revocation to the last run or stream stopped
    # Device steps (install, instrument, logcat) that ran although their re-authorization
    # began after the revocation took effect (see queued_runs_stop).
    after: int
    reasons: list[str]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _authorized(step: dict[str, Any]) -> datetime:
    """When a device step's re-authorization began (when it began, had it none)."""
    return _at(step["detail"].get("reauth_at") or step["at"])


async def queued_runs_stop(
    stack: Stack,
    runs: int = 6,
    *,
    before: Callable[[], Awaitable[object]] | None = None,
    revoked: Callable[[], object] | None = None,
) -> Stopped:
    """Bob queues ``runs`` runs on alice's lent device; alice revokes the loan while the
    first one runs. Every run ends; none installs or runs anything after the revocation.

    ``before`` is awaited once a run is on the device, before the revocation is sent;
    ``revoked`` is called once it took effect (tests forcing an interleaving)."""
    alice, bob = stack["alice"], stack["bob"]
    grant = await stack.lend("alice", alice.device_id, "bob")
    run_ids = []
    for _ in range(runs):
        response = await bob.http.post(
            "/v1/sandbox/execute", params={"wait": "false"},
            json={"test_code": llm_style_test("fetchGreetingBlocking()"),
                  "device": alice.device_id},
        )
        assert response.status_code == 202, response.text
        run_ids.append(response.json()["run_id"])

    async def run(run_id: str) -> dict[str, Any]:
        response = await bob.http.get(f"/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    # Revoke once a run is on the device (one compile serves them all; they queue).
    async def on_device() -> bool:
        states = [await run(r) for r in run_ids]
        return any(s["detail"].get("method") == "device.install"
                   for state in states for s in state["steps"])

    async with asyncio.timeout(WAIT_S):
        while not await on_device():  # noqa: ASYNC110 - bounded poll of the runs' logs
            await asyncio.sleep(0.02)
        if before is not None:
            await before()
    started = time.monotonic()
    response = await alice.http.delete(f"/v1/grants/{grant['id']}")
    assert response.status_code == 204, response.text
    # The 204 comes after the revocation committed: from here on every re-check refuses.
    # (Not the time the request was sent, nor the grant's stored revoked_at, both taken
    # before the commit: a step re-authorized in between rightly passed.)
    revoked_at = datetime.now(UTC)
    if revoked is not None:
        revoked()
    async with asyncio.timeout(WAIT_S):
        while True:
            states = [await run(r) for r in run_ids]
            if all(s["status"] in ("finished", "cancelled") for s in states):
                break
            await asyncio.sleep(0.02)
    seconds = time.monotonic() - started
    # Every device step re-authorizes when it runs (docs/security.md, threat model): a step
    # whose re-check began once the revocation had taken effect must have been refused. One
    # re-checked just before it may run; the access watch then stops it at once. A step
    # without a re-check (none should be) counts from when it began.
    after = sum(
        1 for s in states for step in s["steps"]
        if step["kind"] == "rpc" and step["detail"].get("method") in DEVICE_STEPS
        and step["status"] != "refused"
        and _authorized(step) > revoked_at
    )
    # Runs whose tests were re-authorized before the revocation took effect may have
    # finished them in that moment and keep their verdicts; every other one was stopped.
    stopped = [s for s in states if not any(
        step["detail"].get("method") == "device.instrument" and step["status"] != "refused"
        and _authorized(step) <= revoked_at for step in s["steps"])]
    return Stopped(seconds, after, [str(s["result"]["reason_code"]) for s in stopped])


async def _read_to_eof(ws: ClientConnection) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:
            chunk = json.loads(await ws.recv())
            if chunk.get("eof"):
                return dict(chunk)


def _ws(stack: Stack, path: str) -> str:
    return stack.url.replace("http://", "ws://") + path


async def stream_stops(stack: Stack, how: str) -> Stopped:
    """One live stream ended by one revocation (``how``):

    * ``grant``: bob's REST stream on alice's lent device; alice revokes the loan;
    * ``expiry``: the same, the loan ending by itself;
    * ``owner_token``: alice's stream on her own device; she revokes the token it uses;
    * ``admin_token``: an admin's stream on bob's device; the admin's token is revoked;
    * ``dashboard``: bob's dashboard live tail (session cookie) on alice's lent device;
      alice revokes the loan.
    """
    alice, bob = stack["alice"], stack["bob"]
    until = None
    device = bob.device_id if how == "admin_token" else alice.device_id
    grant = None
    if how in ("grant", "expiry", "dashboard"):
        grant = await stack.lend("alice", alice.device_id, "bob")
    holder = {"owner_token": "alice", "admin_token": "admin"}.get(how, "bob")
    token = await stack.token(holder, as_token=stack.controller.http.headers["authorization"]
                              .removeprefix("Bearer ") if holder == "admin" else None)
    headers = {"Authorization": f"Bearer {token['token']}"}
    path = f"/v1/devices/{device}/logcat/stream?tail=1"
    if how == "dashboard":
        async with stack.client(token["token"]) as browser:
            browser.headers.pop("authorization")
            signed = await sign_in(browser, token["token"])
            assert signed.status_code == 303, signed.text
            cookie = browser.cookies[COOKIE_NAME]
        headers = {"Cookie": f"{COOKIE_NAME}={cookie}", "Origin": stack.url}
        path = f"/devices/{device}/logcat/stream?tail=1"
    async with connect(_ws(stack, path), additional_headers=headers,
                       open_timeout=WAIT_S) as ws:
        first = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert not first.get("eof"), first
        started = time.monotonic()
        if how in ("grant", "dashboard"):
            assert grant is not None
            response = await alice.http.delete(f"/v1/grants/{grant['id']}")
            assert response.status_code == 204, response.text
        elif how in ("owner_token", "admin_token"):
            revoker = alice.http if how == "owner_token" else stack.controller.http
            response = await revoker.delete(f"/v1/tokens/{token['id']}")
            assert response.status_code == 204, response.text
        else:
            # expiry: alice shortens the loan while the stream runs (a new loan replaces the
            # old one) to end a moment from now; the clock starts at that end.
            until = datetime.now(UTC) + timedelta(seconds=1.0)
            await stack.lend("alice", alice.device_id, "bob", until=until.isoformat())
            started += (until - datetime.now(UTC)).total_seconds()
        last = await _read_to_eof(ws)
        seconds = max(0.0, time.monotonic() - started)
        async with asyncio.timeout(WAIT_S):
            await ws.wait_closed()
        assert ws.close_code == 1008, (ws.close_code, last)
    return Stopped(seconds, 0, [str(last.get("reason"))])
