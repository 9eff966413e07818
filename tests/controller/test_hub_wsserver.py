"""``/v1/bridge`` on websockets' own server connection (controller.hub.wsserver), on the
controller's port beside the HTTP API and uvicorn's other WebSockets: real uvicorn as
``droidwire controller`` configures it, real websockets clients on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.frames import Frame, Opcode

from controller.hub.wsserver import (
    QUEUE_HIGH_BYTES,
    QUEUE_HIGH_MESSAGES,
    BridgeConnection,
    _FrameQueue,
    is_bridge_upgrade,
)
from controller.ws_protocol import RoutingProtocol
from protocol.envelope import SUBPROTOCOL
from protocol.methods import PING, PingParams
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.controller.test_hub_support import WAIT_S, FakeBridge, in_loop_controller


@pytest.mark.parametrize(
    ("head", "bridge"),
    [
        (b"GET /v1/bridge HTTP/1.1\r\nHost: x\r\n\r\n", True),
        (b"GET /v1/bridge?x=1 HTTP/1.1\r\n\r\n", True),
        (b"GET /v1/%62ridge HTTP/1.1\r\n\r\n", True),  # routed percent-decoded, as Starlette does
        (b"GET /v1/bridge/ HTTP/1.1\r\n\r\n", False),
        (b"GET /v1/bridges HTTP/1.1\r\n\r\n", False),
        (b"GET /v1/devices/s/logcat HTTP/1.1\r\n\r\n", False),
        (b"GET /v1/bridge", False),  # not a request line
    ],
)
def test_the_path_picks_the_protocol(head: bytes, bridge: bool) -> None:
    assert is_bridge_upgrade(head) is bridge


async def test_a_bridge_is_served_by_websockets_and_calls_complete(tmp_path: Path) -> None:
    async with in_loop_controller(tmp_path) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("b1"))
        await bridge.connect()
        try:
            [entry] = controller.hub.entries()
            assert entry.conn is not None
            assert isinstance(entry.conn.ws, BridgeConnection)
            assert entry.conn.ws.protocol.extensions == []  # no compression
            assert entry.conn.ws.protocol.subprotocol == SUBPROTOCOL
            for i in range(20):  # results handled in the read callback or by the reader
                payload = bytes([i]) * 200
                result = await controller.hub.call(entry.id, PING, PingParams(payload=payload))
                assert result.payload == payload
        finally:
            await bridge.close()


async def test_an_idle_bridge_keeps_neither_its_hello_nor_the_handshake_response(
        tmp_path: Path) -> None:
    """What a connection holds for its whole life is bounded to what it uses: the hello is
    applied (inventory, caps) and let go, the 101 response is not kept."""
    import gc

    from protocol.envelope import Hello

    async with in_loop_controller(tmp_path) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("b1"))
        await bridge.connect()
        try:
            [entry] = controller.hub.entries()
            assert entry.conn is not None
            ws = entry.conn.ws
            assert isinstance(ws, BridgeConnection)
            assert ws.response is None
            assert entry.session.hello is None
            assert entry.session.session_id is not None  # what a resume needs stays
            # No Hello with this bridge's session is left on the controller's side (the fake
            # bridge sends a plain map; it holds no Hello of its own).
            gc.collect()
            held = [o for o in gc.get_objects() if isinstance(o, Hello)
                    and o.session == entry.session.session_id]
            assert held == []
            result = await controller.hub.call(entry.id, PING, PingParams(payload=b"x"))
            assert result.payload == b"x"
        finally:
            await bridge.close()


async def test_other_websockets_stay_on_uvicorn(tmp_path: Path) -> None:
    """Any other WebSocket path goes through ASGI (here: no such route → refused by the app)."""
    async with in_loop_controller(tmp_path) as controller:
        url = controller.ws_url + "/v1/not-a-route"
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, additional_headers=bearer(ADMIN_TOKEN), open_timeout=WAIT_S):
                pass
        assert refused.value.response.status_code in (403, 404)
        assert controller.server.config.ws_protocol_class is RoutingProtocol


async def test_server_shutdown_closes_bridges_with_1012(tmp_path: Path) -> None:
    async with in_loop_controller(tmp_path) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("b1"))
        await bridge.connect()
        controller.server.should_exit = True  # what SIGTERM does
        await asyncio.wait_for(bridge.closed.wait(), WAIT_S)
        assert bridge.close_code == 1012


def test_the_frame_queue_pauses_at_the_byte_budget_and_resumes_when_taken() -> None:
    async def scenario() -> None:
        calls: list[str] = []
        queue = _FrameQueue(QUEUE_HIGH_MESSAGES, 0, pause=lambda: calls.append("pause"),
                            resume=lambda: calls.append("resume"))
        size = 64 * 1024
        for _ in range(QUEUE_HIGH_BYTES // size - 1):
            queue.put(Frame(Opcode.BINARY, b"y" * size))
        assert calls == []  # below the budget: reading goes on
        queue.put(Frame(Opcode.BINARY, b"y" * size))
        assert calls == ["pause"]
        for _ in range(QUEUE_HIGH_BYTES // size - 1):
            await queue.get()
        assert calls == ["pause"]  # resumes only once all are taken
        await queue.get()
        assert calls == ["pause", "resume"]

        calls.clear()
        for _ in range(QUEUE_HIGH_MESSAGES):  # small frames: the message count bounds it
            queue.put(Frame(Opcode.BINARY, b"z"))
        assert calls == ["pause"]
        for _ in range(QUEUE_HIGH_MESSAGES):
            await queue.get()
        assert calls == ["pause", "resume"]

    asyncio.run(scenario())



async def test_a_burst_of_log_batches_reaches_a_slow_consumer_whole(tmp_path: Path) -> None:
    """The hub's reader lets a stream's consumer run before its queue fills (it yields once the
    queue is half full): a burst of four queues' worth, sent in one go, loses no line even
    though the consumer takes its time with each chunk."""
    from controller.hub import LogStream
    from tests.controller.test_hub_support import fast_settings

    batches = 8
    settings = fast_settings(stream_queue_batches=batches)
    async with in_loop_controller(tmp_path, settings) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("b1"),
                            settings=settings)
        await bridge.connect()
        try:
            [entry] = controller.hub.entries()
            stream = LogStream(channel="burst", bridge_id=entry.id, serial="s",
                               max_batches=batches)
            entry.streams["burst"] = stream
            total = 4 * batches
            got: list[str] = []
            dropped = 0

            async def consume() -> None:
                nonlocal dropped
                while len(got) + dropped < total:
                    chunk = await stream.get()
                    got.extend(chunk.lines)
                    dropped += chunk.dropped
                    await asyncio.sleep(0)  # a consumer with work of its own per chunk

            consumer = asyncio.create_task(consume())
            for i in range(total):  # all queued first, then written back to back
                bridge.session.event("burst", {"lines": [f"line {i}"], "dropped": 0})
            await bridge.flush()
            await asyncio.wait_for(consumer, WAIT_S)
            assert dropped == 0
            assert got == [f"line {i}" for i in range(total)]
        finally:
            await bridge.close()


def test_the_read_callback_leaves_anything_but_a_result_to_the_reader_undecoded() -> None:
    """``BridgeLink.result_now`` runs for the first frame of every read while the reader waits:
    a log batch (or anything not a ``res``) is handed back without being decoded there — the
    reader decodes it, once."""
    from types import SimpleNamespace

    from controller.hub.link import BridgeLink
    from protocol.codec import Codec, encode_event, encode_result
    from protocol.envelope import new_request_id

    decoded: list[bytes] = []

    class CountingCodec(Codec):
        def decode(self, data: bytes) -> object:  # type: ignore[override]
            decoded.append(data)
            return super().decode(data)

    hub = SimpleNamespace(settings=SimpleNamespace(max_frame_bytes=1 << 20))
    link = BridgeLink(hub)  # type: ignore[arg-type]
    link.codec = CountingCodec()
    failures: list[BaseException] = []
    conn = SimpleNamespace(ending=False, failed=failures.append)
    entry = SimpleNamespace(conn=conn, session=SimpleNamespace(is_open=True))
    batch = encode_event("logcat-1", 0, {"lines": ["a"], "dropped": 0})
    assert link.result_now(entry, conn, batch) is False  # type: ignore[arg-type]
    assert decoded == []
    # A result is decoded there, and handled (here: no running loop, so a failure).
    result = encode_result(new_request_id(), {"ok": True})
    assert link.result_now(entry, conn, result) is True  # type: ignore[arg-type]
    assert decoded == [result]
    assert len(failures) == 1


async def test_a_large_payload_goes_to_the_bridge_unjoined_and_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request carrying a large ``data`` last (a tunnel's write) is written as its head and
    the payload itself (BridgeConnection.send_parts, no copy into a frame); the bridge gets
    the very frame ``encode`` makes, in order with the small frames around it."""
    import os

    from controller.hub import wsserver
    from protocol.codec import PARTS_MIN_PAYLOAD

    written: list[int] = []
    send_parts = wsserver.BridgeConnection.send_parts

    async def counted(self: BridgeConnection, head: bytes, payload: memoryview) -> None:
        written.append(payload.nbytes)
        await send_parts(self, head, payload)

    monkeypatch.setattr(wsserver.BridgeConnection, "send_parts", counted)
    got: dict[int, bytes] = {}

    async def handler(method: str, params: dict[str, object]) -> dict[str, object]:
        if method == "ping":
            return {"payload": params["payload"]}
        data = params["data"]
        assert method == "device.tunnel.write" and isinstance(data, bytes)
        got[int(str(params["offset"]))] = data
        return {"written": len(data)}

    payloads = [os.urandom(n) for n in (PARTS_MIN_PAYLOAD - 1, PARTS_MIN_PAYLOAD, 1 << 20)]
    async with in_loop_controller(tmp_path) as controller:
        bridge = FakeBridge(controller.url, await controller.bridge_token("b1"), handler=handler)
        await bridge.connect()
        try:
            [entry] = controller.hub.entries()
            calls = []
            for i, payload in enumerate(payloads):
                view = memoryview(b"head" + payload)[4:]  # as a client's frame gives it
                calls.append(controller.hub.call_wire(
                    entry.id, "device.tunnel.write",
                    {"channel": "tn-1", "offset": i, "data": view}, validate=False))
                calls.append(controller.hub.call(entry.id, PING, PingParams(payload=b"p%d" % i)))
            results = await asyncio.wait_for(asyncio.gather(*calls), WAIT_S)
        finally:
            await bridge.close()
    assert [r["written"] for r in results[::2]] == [len(p) for p in payloads]
    assert [r.payload for r in results[1::2]] == [b"p0", b"p1", b"p2"]
    assert got == dict(enumerate(payloads))
    assert written == [PARTS_MIN_PAYLOAD, 1 << 20]  # the smallest went joined, as before
