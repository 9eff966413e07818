"""The hub over real loopback sockets, against a fake bridge that speaks the protocol."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from controller.auth import DeviceRef
from controller.hub import BridgeState
from protocol.closecodes import CloseCode
from protocol.envelope import SUBPROTOCOL, new_request_id
from protocol.errors import ErrorCode, RpcError
from protocol.methods import (
    PING,
    SHELL,
    Empty,
    Method,
    PingParams,
    PingResult,
    ShellParams,
    ShellResult,
)
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import (
    WAIT_S,
    FakeBridge,
    InLoopController,
    echo_handler,
    fast_settings,
    in_loop_controller,
)

# A bridge that dropped comes back when the test reconnects it (an event, not a delay), so
# the grace period only has to outlast a loaded machine; the test of its expiry sets its own.
LONG_GRACE = fast_settings(grace_period_s=WAIT_S * 3)


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[InLoopController]:
    async with in_loop_controller(tmp_path, LONG_GRACE) as c:
        yield c


@pytest.fixture
async def bridge(controller: InLoopController) -> AsyncIterator[FakeBridge]:
    fake = FakeBridge(controller.url, await controller.bridge_token("pi"))
    await fake.connect()
    yield fake
    await fake.close()


async def _shell(controller: InLoopController, device: str, command: str) -> Any:
    return await controller.http.post(f"/v1/devices/{device}/shell", json={"command": command})


class Gate:
    """A handler that holds calls until released, counting how often each method ran."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.shell":
            self.entered.set()
            await self.release.wait()
        return await echo_handler(method, params)


# -- handshake and identity


async def test_device_appears_and_bridge_is_listed(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    devices = (await controller.http.get("/v1/devices")).json()
    uid = devices[0].pop("uid")  # the store's id: set once the inventory's write landed
    assert uid is None or (isinstance(uid, str) and "emulator" not in uid)
    assert devices == [
        {
            "id": "pi~emulator-5554", "serial": "emulator-5554", "bridge": "pi",
            "state": "device", "model": "Pixel 7", "release": None, "sdk": 34, "abi": None,
            "battery": None, "profile": "standard", "labels": [], "pool": None, "health": None,
        }
    ]
    bridges = (await controller.http.get("/v1/bridges")).json()
    assert [(b["name"], b["state"], b["devices"]) for b in bridges] == [("pi", "connected", 1)]
    # The identity comes from the token: welcome names the bridge "pi".
    assert bridge.welcomes[0].bridge == "pi"


@pytest.mark.parametrize(
    ("which", "status", "code"),
    [
        ("unknown", 401, "unauthorized"),
        ("user", 403, "forbidden"),
        ("no-subprotocol", 400, "bad_request"),
        ("token-in-url", 400, "bad_request"),
    ],
)
async def test_refused_before_accept(
    controller: InLoopController, which: str, status: int, code: str
) -> None:
    token = await controller.bridge_token("pi")
    headers, query = bearer(token), ""
    subprotocols: list[str] | None = [SUBPROTOCOL]
    if which == "unknown":
        headers = bearer("dw_b_unknown")
    elif which == "user":
        headers = bearer(ADMIN_TOKEN)
    elif which == "token-in-url":
        query = "?token=" + token
    else:
        subprotocols = None  # no Sec-WebSocket-Protocol header at all
    with pytest.raises(InvalidStatus) as info:
        async with connect(
            controller.ws_url + "/v1/bridge" + query,
            additional_headers=headers,
            subprotocols=subprotocols,  # type: ignore[arg-type]
            open_timeout=WAIT_S,
        ):
            pass
    response = info.value.response
    assert response.status_code == status
    # The app's error body, as on any route (the endpoint runs before the router).
    assert json.loads(response.body)["error"]["code"] == code
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_a_new_connection_replaces_the_old_with_4409(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    second = FakeBridge(controller.url, bridge.token)
    await second.connect()
    await asyncio.wait_for(bridge.closed.wait(), WAIT_S)
    assert bridge.close_code == CloseCode.REPLACED
    response = await _shell(controller, "emulator-5554", "echo hi")
    assert response.json()["stdout"] == "echo hi\n"
    await second.close()


async def test_a_revoked_token_closes_the_bridge_with_4401(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    tokens = (await controller.http.get("/v1/tokens")).json()
    token_id = next(t["id"] for t in tokens if t["kind"] == "bridge")
    assert (await controller.http.delete(f"/v1/tokens/{token_id}")).status_code == 204
    await asyncio.wait_for(bridge.closed.wait(), WAIT_S)
    assert bridge.close_code == CloseCode.UNAUTHORIZED


@pytest.mark.parametrize("payload", [b"\xc1garbage", "text frame"])
async def test_an_unparseable_frame_closes_with_4400(
    controller: InLoopController, bridge: FakeBridge, payload: bytes | str
) -> None:
    await bridge.send_raw(payload)
    await asyncio.wait_for(bridge.closed.wait(), WAIT_S)
    assert bridge.close_code == CloseCode.BAD_REQUEST


# -- REST on top of calls


async def test_shell_and_policy_refusal(controller: InLoopController, bridge: FakeBridge) -> None:
    ok = await _shell(controller, "emulator-5554", "echo hi")
    assert ok.status_code == 200
    assert ok.json() == {"exit_code": 0, "stdout": "echo hi\n", "stderr": ""}
    refused = await _shell(controller, "pi~emulator-5554", "echo a; reboot")
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert (error["code"], error["rule"]) == ("forbidden", "metacharacter")
    both = await controller.http.post(
        "/v1/devices/emulator-5554/shell", json={"command": "x", "argv": ["x"]}
    )
    assert both.status_code == 400
    entries = await controller.hub.audit.recent(device="pi~emulator-5554")
    assert [(e.action, e.outcome) for e in entries] == [
        ("device.shell", "bad_request"), ("device.shell", "forbidden"), ("device.shell", "ok")
    ]
    assert entries[1].detail == {"rule": "metacharacter"}


async def test_unknown_and_ambiguous_devices(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    assert (await _shell(controller, "nope", "echo")).status_code == 404
    other = FakeBridge(controller.url, await controller.bridge_token("farm"))
    await other.connect()
    try:
        ambiguous = await _shell(controller, "emulator-5554", "echo")
        assert ambiguous.status_code == 409
        assert sorted(ambiguous.json()["error"]["candidates"]) == [
            "farm~emulator-5554", "pi~emulator-5554"
        ]
        assert (await _shell(controller, "farm~emulator-5554", "echo")).status_code == 200
    finally:
        await other.close()


async def test_another_users_device_is_not_found(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    created = await controller.http.post("/v1/tokens", json={"kind": "user", "name": "eve"})
    eve = bearer(created.json()["token"])
    assert (await controller.http.get("/v1/devices", headers=eve)).json() == []
    response = await controller.http.post(
        "/v1/devices/emulator-5554/shell", json={"command": "echo"}, headers=eve
    )
    assert response.status_code == 404


# -- delivery across reconnects


async def test_cut_mid_call_result_arrives_exactly_once(controller: InLoopController) -> None:
    gate = Gate()
    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=gate)
    await fake.connect()
    call = asyncio.create_task(_shell(controller, "emulator-5554", "echo once"))
    await asyncio.wait_for(gate.entered.wait(), WAIT_S)
    await fake.drop()
    gate.release.set()  # the result lands in the outbox while disconnected
    await fake.connect()  # same session: hello.held lists the id, welcome.waiting asks for it
    response = await asyncio.wait_for(call, WAIT_S)
    assert response.json()["stdout"] == "echo once\n"
    assert list(fake.runs.values()) == [1]
    assert fake.welcomes[-1].resumed
    # Everything was acked: the bridge holds nothing any more.
    await _shell(controller, "emulator-5554", "echo flush")
    assert controller.hub.entries()[0].session.pending_count == 0
    await fake.close()


async def test_call_made_while_reconnecting_completes_when_back(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    await bridge.drop()
    entry = controller.hub.entries()[0]
    await _wait_until(lambda: entry.state is BridgeState.RECONNECTING)
    call = asyncio.create_task(_shell(controller, "emulator-5554", "echo later"))
    await _wait_until(lambda: entry.session.pending_count == 1)
    await bridge.connect()
    response = await asyncio.wait_for(call, WAIT_S)
    assert response.json()["stdout"] == "echo later\n"


async def test_after_the_grace_period_calls_fail_unavailable(tmp_path: Path) -> None:
    async with in_loop_controller(tmp_path, fast_settings(grace_period_s=0.5)) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("pi"))
        await bridge.connect()
        await bridge.drop()
        entry = controller.hub.entries()[0]
        call = asyncio.create_task(_shell(controller, "emulator-5554", "echo never"))
        response = await asyncio.wait_for(call, WAIT_S)
        assert response.status_code == 503
        assert response.json()["error"]["reason"] == "bridge_disconnected"
        assert entry.state is BridgeState.DISCONNECTED
        devices = (await controller.http.get("/v1/devices")).json()
        assert [d["state"] for d in devices] == ["disconnected"]
        again = await _shell(controller, "emulator-5554", "echo")
        assert again.status_code == 503
        await bridge.close()


async def test_a_restarted_bridge_gets_idempotent_calls_only(controller: InLoopController) -> None:
    gate = Gate()
    token = await controller.bridge_token("pi")
    first = FakeBridge(controller.url, token, handler=gate)
    await first.connect()
    hub = controller.hub
    entry = hub.entries()[0]
    shell = asyncio.create_task(_shell(controller, "emulator-5554", "echo x"))
    await asyncio.wait_for(gate.entered.wait(), WAIT_S)
    await first.drop()
    await _wait_until(lambda: entry.state is BridgeState.RECONNECTING)
    ping = asyncio.create_task(hub.call(entry.id, PING, PingParams(payload=b"abc")))
    await _wait_until(lambda: entry.session.pending_count == 2)
    second = FakeBridge(controller.url, token)  # a new process: a new session id
    await second.connect()
    assert (await asyncio.wait_for(ping, WAIT_S)) == PingResult(payload=b"abc")
    response = await asyncio.wait_for(shell, WAIT_S)
    assert response.status_code == 503
    assert response.json()["error"]["reason"] == "bridge_restarted"
    await second.close()
    await first.close()


async def test_call_timeout_sends_cancel(controller: InLoopController) -> None:
    gate = Gate()
    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=gate)
    await fake.connect()
    entry = controller.hub.entries()[0]
    with pytest.raises(RpcError) as info:
        await controller.hub.call(
            entry.id, SHELL, ShellParams(serial="emulator-5554", command="x"),
            timeout_s=0.2 * WAIT_S / 10,
        )
    assert info.value.code is ErrorCode.TIMEOUT
    await _wait_until(lambda: not fake.session.running_ids())
    await fake.close()


async def test_deadlines_share_one_timer_yet_each_call_times_out_on_its_own(
    controller: InLoopController,
) -> None:
    # One timer per bridge, set for the earliest pending deadline: a call with a shorter
    # timeout than the pending ones must move it earlier, and when it fires it must be set
    # again for the next one — else ``mid`` would wait for ``slow``'s deadline, or forever.
    gate = Gate()
    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=gate)
    await fake.connect()
    hub = controller.hub
    entry = hub.entries()[0]

    def shell(command: str, timeout_s: float) -> asyncio.Task[ShellResult]:
        params = ShellParams(serial="emulator-5554", command=command)
        return asyncio.create_task(hub.call(entry.id, SHELL, params, timeout_s=timeout_s))

    slow = shell("slow", WAIT_S * 10)
    await asyncio.wait_for(gate.entered.wait(), WAIT_S)
    mid = shell("mid", 0.4 * WAIT_S / 10)
    short = shell("short", 0.2 * WAIT_S / 10)
    for call in (short, mid):
        with pytest.raises(RpcError) as info:
            await asyncio.wait_for(call, WAIT_S)
        assert info.value.code is ErrorCode.TIMEOUT
        assert "timed out" in info.value.message
    assert not slow.done()
    await _wait_until(lambda: len(fake.session.running_ids()) == 1)  # both cancelled there
    gate.release.set()
    assert (await asyncio.wait_for(slow, WAIT_S)).stdout == "slow\n"
    await fake.close()


# -- liveness


async def test_an_idle_mute_bridge_is_dropped(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    bridge.mute = True
    await asyncio.wait_for(bridge.closed.wait(), WAIT_S)
    assert bridge.close_code == CloseCode.INTERNAL_ERROR


async def test_a_long_call_is_not_dropped_by_liveness(controller: InLoopController) -> None:
    gate = Gate()
    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=gate)
    await fake.connect()
    fake.mute = True  # would be dropped after 3 intervals if it were idle
    settings = controller.config.settings
    call = asyncio.create_task(_shell(controller, "emulator-5554", "echo slow"))
    await asyncio.wait_for(gate.entered.wait(), WAIT_S)
    # Several liveness intervals pass with a call pending: the bridge must stay.
    intervals = settings.liveness_interval_s * (settings.liveness_missed_max + 3)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(fake.closed.wait()), intervals)
    gate.release.set()
    response = await asyncio.wait_for(call, WAIT_S)
    assert response.json()["stdout"] == "echo slow\n"
    await fake.close()


# -- inventory and logcat streams


async def test_inventory_events_update_the_devices(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    await bridge.emit("$devices", {"devices": [
        {"serial": "emulator-5554", "state": "offline"},
        {"serial": "10.0.0.7:5555", "state": "device", "model": "Pi phone"},
    ]})
    await _wait_until(lambda: len(controller.hub.entries()[0].devices) == 2)
    states = {d["serial"]: d["state"] for d in (await controller.http.get("/v1/devices")).json()}
    assert states == {"10.0.0.7:5555": "device", "emulator-5554": "offline"}


async def test_logcat_stream_in_order_with_dedupe_and_gap_markers(
    controller: InLoopController,
) -> None:
    channel = "log-1"
    subscribed = asyncio.Event()

    async def handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.logcat.subscribe":
            subscribed.set()
            return {"channel": channel}
        return {}

    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=handler)
    await fake.connect()
    url = controller.ws_url + "/v1/devices/emulator-5554/logcat/stream"
    async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S) as ws:
        await asyncio.wait_for(subscribed.wait(), WAIT_S)
        lines = [f"line {i}" for i in range(1000)]
        for start in range(0, 500, 100):
            await fake.emit(channel, {"lines": lines[start:start + 100], "dropped": 0})
        # A duplicate of seq 4 (as after a resume) is ignored; a lost batch is reported.
        fake.session._seq[channel] = 4
        await fake.emit(channel, {"lines": ["dup"], "dropped": 0})
        fake.session._seq[channel] = 6
        await fake.emit(channel, {"lines": lines[600:700], "dropped": 3})
        await fake.emit(channel, {"lines": [], "dropped": 0, "eof": True, "reason": "device gone"})
        messages = [json.loads(m) async for m in ws]
    got = [line for m in messages for line in m["lines"]]
    assert got == lines[:500] + lines[600:700]
    marked = next(m for m in messages if m["lines"][:1] == ["line 600"])
    assert (marked["dropped"], marked["lost_batches"]) == (3, 1)
    assert messages[-1]["eof"] and messages[-1]["reason"] == "device gone"
    await fake.close()


async def test_a_consumer_leaving_never_waits_for_the_bridge(tmp_path: Path) -> None:
    """The consumer's socket handler ends at once; the bridge-side unsubscribe runs in the
    background. A bridge that does not answer it (gone, or slow) must not hold the handler,
    hence uvicorn's graceful shutdown, for the RPC's deadline."""
    settings = fast_settings(rpc_timeout_s=WAIT_S * 30, grace_period_s=WAIT_S * 30)
    subscribed, asked_to_stop = asyncio.Event(), asyncio.Event()

    async def handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.logcat.subscribe":
            subscribed.set()
            return {"channel": "log-1"}
        if method == "device.logcat.unsubscribe":
            asked_to_stop.set()
            await asyncio.Event().wait()  # never answers
        return {}

    fake: FakeBridge | None = None
    try:
        # Leaving the block stops the controller, bounded by WAIT_S: it fails if a stream
        # handler still waits for the bridge.
        async with in_loop_controller(tmp_path, settings) as controller:
            fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=handler)
            await fake.connect()
            url = controller.ws_url + "/v1/devices/emulator-5554/logcat/stream"
            async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S):
                async with asyncio.timeout(WAIT_S):
                    await subscribed.wait()
            async with asyncio.timeout(WAIT_S):
                await asked_to_stop.wait()  # the bridge was still asked to stop its stream
    finally:
        if fake is not None:
            await fake.close()


async def _wait_until(predicate: Any) -> None:
    """Wait (bounded) for a condition on the hub's state, which has no event to wait on."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():  # noqa: ASYNC110 - polling hub state, yielding to the loop
            await asyncio.sleep(0.001)




# -- the CLI


def _cli(controller: InLoopController, *args: str) -> Any:
    from typer.testing import CliRunner

    from droidwire import app as cli

    env = {"DROIDWIRE_CONTROLLER": controller.url, "DROIDWIRE_TOKEN": ADMIN_TOKEN}
    return CliRunner().invoke(cli, list(args), env=env)


async def test_device_cli(controller: InLoopController) -> None:
    channel = "log-cli"

    async def handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.logcat.subscribe":
            return {"channel": channel}
        if method == "device.logcat.dump":
            return {"lines": ["a", "b"]}
        if method == "device.shell":
            return {"exit_code": 3, "stdout": "out\n", "stderr": "err\n"}
        return {}

    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=handler)
    await fake.connect()
    listed = await asyncio.to_thread(_cli, controller, "device", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [d["id"] for d in json.loads(listed.stdout)] == ["pi~emulator-5554"]
    table = await asyncio.to_thread(_cli, controller, "device", "list")
    assert "pi~emulator-5554" in table.stdout and "Pixel 7" in table.stdout
    shell = await asyncio.to_thread(
        _cli, controller, "device", "shell", "emulator-5554", "--", "getprop", "-x"
    )
    assert (shell.exit_code, shell.stdout, shell.stderr) == (3, "out\n", "err\n")
    dumped = await asyncio.to_thread(_cli, controller, "device", "logcat", "pi~emulator-5554")
    assert dumped.stdout == "a\nb\n"
    missing = await asyncio.to_thread(_cli, controller, "device", "logcat", "nope", "-f")
    assert missing.exit_code == 4
    for args in (["state", "nope"], ["screenshot", "nope", "-o", "/nonexistent/x.png"]):
        refused = await asyncio.to_thread(_cli, controller, "device", *args)
        assert refused.exit_code == 4, refused.output
        assert "not_found" in refused.stderr
    follow = asyncio.create_task(
        asyncio.to_thread(_cli, controller, "device", "logcat", "emulator-5554", "-f")
    )
    entry = controller.hub.entries()[0]
    await _wait_until(lambda: channel in entry.streams)
    await fake.emit(channel, {"lines": ["x", "y"], "dropped": 2})
    await fake.emit(channel, {"lines": [], "dropped": 0, "eof": True, "reason": "done"})
    result = await asyncio.wait_for(follow, WAIT_S)
    # `logcat -f` runs until Ctrl-C: a stream the controller ends is never a success (exit 5,
    # unavailable: docs/cli.md, "Exit codes"), and what came before it is all printed.
    assert result.exit_code == 5, result.output
    assert result.stdout == "x\ny\n"
    assert "2 lines lost" in result.stderr
    await fake.close()


async def test_a_stream_resumes_after_a_reconnect_without_gap_or_duplicate(
    controller: InLoopController,
) -> None:
    subscribes: list[dict[str, Any]] = []
    resubscribed = asyncio.Event()

    async def handler(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "device.logcat.subscribe":
            subscribes.append(params)
            if len(subscribes) > 1:
                resubscribed.set()
            return {"channel": f"log-{len(subscribes)}"}
        return {}

    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=handler)
    await fake.connect()
    entry = controller.hub.entries()[0]
    lines = [f"11-30 10:00:00.{i:03d} 1 1 I T: line {i}" for i in range(400)]
    url = controller.ws_url + "/v1/devices/emulator-5554/logcat/stream"
    async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S) as ws:
        await _wait_until(lambda: "log-1" in entry.streams)
        await fake.emit("log-1", {"lines": lines[:150], "dropped": 0})
        first = json.loads(await ws.recv())
        await fake.drop()
        await fake.connect()
        await asyncio.wait_for(resubscribed.wait(), WAIT_S)
        assert subscribes[1]["tail"] > 0 and "tail" not in subscribes[0]
        await _wait_until(lambda: "log-2" in entry.streams)
        # The bridge's new stream starts with the buffer's tail (overlapping what was sent).
        await fake.emit("log-2", {"lines": lines[100:250], "dropped": 0})
        await fake.emit("log-2", {"lines": lines[250:400], "dropped": 0})
        await fake.emit("log-2", {"lines": [], "dropped": 0, "eof": True, "reason": "end"})
        messages = [first] + [json.loads(m) async for m in ws]
    got = [line for m in messages for line in m["lines"]]
    assert got == lines
    assert all(m["dropped"] == 0 and "lost_batches" not in m for m in messages)
    await fake.close()


async def test_many_concurrent_calls_each_get_their_own_result(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    entry = controller.hub.entries()[0]
    payloads = [f"p{i}".encode() for i in range(200)]
    results = await asyncio.wait_for(
        asyncio.gather(*(controller.hub.call(entry.id, PING, PingParams(payload=p))
                         for p in payloads)),
        WAIT_S,
    )
    assert [r.payload for r in results] == payloads
    assert entry.session.pending_count == 0
    metrics = (await controller.http.get("/metrics")).text
    assert 'droidwire_rpc_calls_total{method="ping",outcome="ok"} 200.0' in metrics
    assert "droidwire_bridges_connected 1.0" in metrics


async def test_requests_behind_a_stalled_bridge_go_out_in_order_when_it_reads_again(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    """A bridge that stops reading pushes back: the hub's drain, started in the caller's
    step, suspends and a task carries it on; every request still arrives once, in order."""
    entry = controller.hub.entries()[0]
    assert bridge.ws is not None and entry.conn is not None
    bridge.ws.transport.pause_reading()
    # 24 MiB: more than the loopback socket buffers hold (a receive buffer is not grown
    # while its reader does not read; tcp_wmem's maximum is 4 MiB), so the transport pushes
    # back.
    payloads = [bytes([i]) * (1 << 20) for i in range(24)]
    ids = [new_request_id() for _ in payloads]
    calls = [
        asyncio.create_task(
            controller.hub.call(entry.id, PING, PingParams(payload=p), request_id=rid)
        )
        for p, rid in zip(payloads, ids, strict=True)
    ]
    await asyncio.sleep(0)  # every call has taken its first step (FIFO) and queued its frame
    assert isinstance(entry.conn.writer, asyncio.Task)  # the drain waits for room
    bridge.ws.transport.resume_reading()
    results = await asyncio.wait_for(asyncio.gather(*calls), WAIT_S)
    assert [r.payload for r in results] == payloads
    assert list(bridge.runs.items()) == [(rid, 1) for rid in ids]
    assert entry.conn.writer is None  # the drain ended with nothing left to send


async def test_a_cancelled_call_cancels_on_the_bridge(controller: InLoopController) -> None:
    gate = Gate()
    fake = FakeBridge(controller.url, await controller.bridge_token("pi"), handler=gate)
    await fake.connect()
    entry = controller.hub.entries()[0]
    call = asyncio.create_task(
        controller.hub.call(entry.id, SHELL, ShellParams(serial="emulator-5554", command="x"))
    )
    await asyncio.wait_for(gate.entered.wait(), WAIT_S)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _wait_until(lambda: not fake.session.running_ids())
    assert entry.session.pending_count == 0
    await fake.close()


async def test_an_incompatible_protocol_is_closed_with_4426(
    controller: InLoopController,
) -> None:
    from protocol.codec import encode
    from protocol.envelope import Hello, new_request_id

    token = await controller.bridge_token("pi")
    async with connect(
        controller.ws_url + "/v1/bridge", additional_headers=bearer(token),
        subprotocols=[SUBPROTOCOL], open_timeout=WAIT_S,  # type: ignore[list-item]
    ) as ws:
        await ws.send(encode(Hello(session=new_request_id(), software="x", protocol=99)))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT_S)
        assert ws.protocol.close_rcvd is not None
        assert ws.protocol.close_rcvd.code == CloseCode.INCOMPATIBLE


async def test_a_token_revoked_before_the_hello_never_opens(tmp_path: Path) -> None:
    """A connection is registered only at its hello: a revocation in between reaches it."""
    from protocol.codec import encode
    from protocol.envelope import Capabilities, Hello

    async with in_loop_controller(tmp_path) as c:
        made = await c.http.post("/v1/tokens", json={"kind": "bridge", "name": "pi"})
        token, token_id = made.json()["token"], made.json()["id"]
        async with connect(
            c.ws_url + "/v1/bridge", additional_headers=bearer(token),
            subprotocols=[SUBPROTOCOL], open_timeout=WAIT_S,  # type: ignore[list-item]
        ) as ws:
            assert (await c.http.delete(f"/v1/tokens/{token_id}")).status_code in (200, 204)
            await ws.send(encode(Hello(session=new_request_id(), software="x",
                                       caps=Capabilities(devices=True))))
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WAIT_S)
            assert ws.protocol.close_rcvd is not None
            assert ws.protocol.close_rcvd.code == CloseCode.UNAUTHORIZED
        assert c.hub.entries() == []


async def test_no_hello_in_time_closes_with_1013(tmp_path: Path) -> None:
    async with in_loop_controller(tmp_path, fast_settings(handshake_timeout_s=0.2)) as c:
        token = await c.bridge_token("pi")
        async with connect(
            c.ws_url + "/v1/bridge", additional_headers=bearer(token),
            subprotocols=[SUBPROTOCOL], open_timeout=WAIT_S,  # type: ignore[list-item]
        ) as ws:
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WAIT_S)
            assert ws.protocol.close_rcvd is not None
            assert ws.protocol.close_rcvd.code == CloseCode.TRY_AGAIN_LATER
        # A connection that never said hello proved nothing: it is not the bridge's session,
        # it registers nothing and replaces nothing.
        assert c.hub.entries() == []
        bridges = (await c.http.get("/v1/bridges")).json()
        assert [(b["name"], b["state"]) for b in bridges] in ([], [("pi", "disconnected")])


async def test_calling_an_unknown_bridge_is_unavailable(controller: InLoopController) -> None:
    with pytest.raises(RpcError) as info:
        await controller.hub.call("no-such-bridge", PING, PingParams())
    assert info.value.code is ErrorCode.UNAVAILABLE
    with pytest.raises(RpcError) as bad:
        await controller.hub.call("no-such-bridge", UNREGISTERED, Empty())
    assert bad.value.code is ErrorCode.UNAVAILABLE


async def test_unknown_methods_and_bad_params_are_bad_requests(
    controller: InLoopController, bridge: FakeBridge
) -> None:
    entry = controller.hub.entries()[0]
    # A descriptor nobody registered, and params that skipped their model's validation: the
    # hub checks both before anything goes out.
    calls: list[tuple[Method[Any, Any], BaseModel]] = [
        (UNREGISTERED, Empty()), (SHELL, ShellParams.model_construct(serial="emulator-5554")),
    ]
    for method, params in calls:
        with pytest.raises(RpcError) as info:
            await controller.hub.call(entry.id, method, params)
        assert info.value.code is ErrorCode.BAD_REQUEST
    assert entry.session.pending_count == 0



UNREGISTERED = Method("no.such.method", Empty, Empty)


async def test_a_typed_call_returns_the_methods_result_model(
    controller: InLoopController,
) -> None:
    seen: list[dict[str, Any]] = []

    async def recording(method: str, params: dict[str, Any]) -> dict[str, Any]:
        seen.append(params)
        return await echo_handler(method, params)

    fake = FakeBridge(controller.url, await controller.bridge_token("typed"), handler=recording)
    await fake.connect()
    entry = controller.hub.entries()[0]
    pong = await controller.hub.call(entry.id, PING, PingParams(payload=b"typed"))
    assert isinstance(pong, PingResult) and pong.payload == b"typed"
    device = DeviceRef(entry.id, "emulator-5554", entry.owner_id, entry.name)
    # The device's serial is the target's, whatever the params said.
    shell = await controller.hub.call(device, SHELL, ShellParams(serial="x", command="echo hi"))
    assert isinstance(shell, ShellResult) and shell.stdout == "echo hi\n"
    assert seen[-1] == {"serial": "emulator-5554", "command": "echo hi"}
    await fake.close()


async def test_a_result_that_does_not_fit_the_methods_model_is_internal(
    controller: InLoopController,
) -> None:
    async def wrong(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"exit_code": "not a number"}

    fake = FakeBridge(controller.url, await controller.bridge_token("odd"), handler=wrong)
    await fake.connect()
    entry = controller.hub.entries()[0]
    device = DeviceRef(entry.id, "emulator-5554", entry.owner_id, entry.name)
    with pytest.raises(RpcError) as info:
        await controller.hub.call(device, SHELL, ShellParams(serial="s", command="x"))
    assert info.value.code is ErrorCode.INTERNAL
    assert "invalid result for device.shell" in info.value.message
    await fake.close()
