"""The bridge's link (device_bridge.connection) over real loopback WebSockets.

The peer is a small websockets server that plays the controller's part of the protocol from a
script per connection (welcome, requests, closes with a given code, HTTP refusals). It is the
peer of the unit under test, not a fake of it: the link's socket, handshake, keepalive,
codec and session are all real.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from device_bridge.connection import (
    BudgetExhausted,
    Failure,
    Link,
    LinkRefused,
    bridge_url,
    classify_failure,
)
from protocol import (
    SUBPROTOCOL,
    Ack,
    Cancel,
    Capabilities,
    DeviceInfo,
    ErrorCode,
    Frame,
    Hello,
    Ping,
    Pong,
    Req,
    Res,
    RpcError,
    Settings,
    SharedSettings,
    Welcome,
    decode,
    encode,
    new_request_id,
)
from protocol.settings import DEFAULTS
from tests.adb_support import free_port
from tests.conftest import TIME_SCALE

TOKEN = "bridge-token-0123456789"
WAIT = 10.0 * TIME_SCALE


def fast_settings(**changes: Any) -> Settings:
    """Every timing a hundred times shorter; the handshake keeps room for a slow CI box."""
    base = DEFAULTS.scaled(0.01 * TIME_SCALE)
    return dataclasses.replace(base, handshake_timeout_s=2.0 * TIME_SCALE, **changes)


# --- the scripted controller ------------------------------------------------------------------


class PeerConn:
    """One accepted connection, seen from the controller's side."""

    def __init__(self, ws: ServerConnection, index: int) -> None:
        self.ws = ws
        self.index = index
        self.hello_frame: Hello | None = None

    async def recv(self) -> Frame:
        async with asyncio.timeout(WAIT):
            data = await self.ws.recv()
        assert isinstance(data, bytes), "droidwire frames are binary"
        return decode(data)

    async def recv_kind(self, kind: type[Any]) -> Any:
        """The next frame of ``kind``, skipping others (evt, pong …)."""
        while True:
            frame = await self.recv()
            if isinstance(frame, kind):
                return frame

    async def send(self, frame: Frame) -> None:
        await self.ws.send(encode(frame))

    async def hello(self) -> Hello:
        frame = await self.recv()
        assert isinstance(frame, Hello), f"first frame must be hello, got {frame}"
        self.hello_frame = frame
        return frame

    async def welcome(
        self,
        *,
        waiting: list[str] | None = None,
        resumed: bool = False,
        settings: Settings | None = None,
    ) -> Hello:
        hello = self.hello_frame or await self.hello()
        shared = SharedSettings.from_settings(settings or DEFAULTS)
        await self.send(
            Welcome(
                bridge="b1",
                session=hello.session,
                resumed=resumed,
                waiting=waiting or [],
                settings=shared,
            )
        )
        return hello

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Res:
        rid = new_request_id()
        await self.send(Req(id=rid, m=method, p=params or {}))
        while True:
            res = await self.recv_kind(Res)
            if res.id == rid:
                await self.send(Ack(ids=[rid]))
                return res

    async def close(self, code: int, reason: str = "") -> None:
        await self.ws.close(code, reason)

    async def closed(self) -> None:
        """Wait until the bridge closes this connection."""
        async with asyncio.timeout(WAIT):
            await self.ws.wait_closed()


Script = Callable[[PeerConn], Awaitable[None]]


class Peer:
    """A controller peer: connection ``n`` runs ``script(n)``; ``refuse(n)`` → HTTP status."""

    def __init__(
        self,
        script: Callable[[int], Script],
        *,
        refuse: Callable[[int], int | None] = lambda n: None,
    ) -> None:
        self._script = script
        self._refuse = refuse
        self.attempts = 0  # handshakes seen, refused or not
        self.accepted = 0
        self.requests: list[Request] = []
        self.errors: list[BaseException] = []
        self.server: Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Peer:
        self.server = await serve(
            self._handler,
            "127.0.0.1",
            0,
            subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            process_request=self._process,
            compression=None,
            ping_interval=None,
        )
        self.port = next(iter(self.server.sockets)).getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def _process(self, connection: ServerConnection, request: Request) -> Response | None:
        n = self.attempts
        self.attempts += 1
        self.requests.append(request)
        if request.path != "/v1/bridge":
            # As the controller's router answers a WebSocket it has no route for.
            return connection.respond(http.HTTPStatus.FORBIDDEN, "")
        status = self._refuse(n)
        if status is not None:
            # As the controller refuses: a JSON error body (a bare status is not droidwire's).
            return connection.respond(
                http.HTTPStatus(status), '{"error": {"code": "unauthorized", "message": "refused"}}'
            )
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        n = self.accepted
        self.accepted += 1
        conn = PeerConn(ws, n)
        try:
            await self._script(n)(conn)
        except ConnectionClosed:
            pass
        except BaseException as exc:  # surfaced by the test, never swallowed
            self.errors.append(exc)
            raise


async def serve_forever(conn: PeerConn) -> None:
    """Welcome, then answer nothing until the bridge goes."""
    await conn.welcome()
    await conn.closed()


# --- the bridge side --------------------------------------------------------------------------


class Handlers:
    """The link's dispatch callback: ``ping`` echoes; ``test.slow`` waits for ``release``."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.running = 0
        self.max_running = 0
        self.result: dict[str, Any] = {"ok": True}

    async def __call__(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(method)
        if method == "ping":
            return {"payload": params.get("payload", b"")}
        if method == "test.big":
            return {"blob": b"x" * int(params["size"])}
        if method == "test.slow":
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            finally:
                self.running -= 1
            return self.result
        raise RpcError(ErrorCode.BAD_REQUEST, f"unknown method {method}")


async def describe() -> tuple[Capabilities, list[DeviceInfo]]:
    return Capabilities(devices=True, methods=["ping"]), [
        DeviceInfo(serial="127.0.0.1:5555", state="device")
    ]


def make_link(
    urls: list[str], handlers: Handlers | None = None, *, token: str = TOKEN, **kwargs: Any
) -> Link:
    kwargs.setdefault("settings", fast_settings())
    return Link(
        urls,
        token,
        dispatch=handlers or Handlers(),
        describe=describe,
        software="0.0-test",
        **kwargs,
    )


@pytest.fixture
async def stop() -> AsyncIterator[asyncio.Event]:
    yield asyncio.Event()


async def run_link(link: Link, stop: asyncio.Event) -> None:
    async with asyncio.timeout(WAIT * 3):
        await link.run(stop)


# --- tests --------------------------------------------------------------------------------------


def test_bridge_url_forms() -> None:
    assert bridge_url("http://127.0.0.1:8000") == "ws://127.0.0.1:8000/v1/bridge"
    assert bridge_url("https://c.example/base/") == "wss://c.example/base/v1/bridge"
    assert bridge_url("wss://c.example/v1/bridge") == "wss://c.example/v1/bridge"
    for bad in ("c.example", "ftp://c.example", "wss://c.example/?token=x", "wss://u:p@c.x"):
        with pytest.raises(ValueError):
            bridge_url(bad)


def test_classifier() -> None:
    assert classify_failure(ConnectionRefusedError(111, "refused")).terminal is False
    assert classify_failure(TimeoutError()).terminal is False
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert classify_failure(untrusted).terminal is True


async def test_hello_welcome_and_a_call(stop: asyncio.Event) -> None:
    seen: dict[str, Any] = {}

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            hello = await conn.welcome()
            seen["hello"] = hello
            seen["res"] = await conn.call("ping", {"payload": b"abc"})
            await conn.send(Ping(id="p1"))
            seen["pong"] = await conn.recv_kind(Pong)
            stop.set()
            await conn.closed()
            seen["close"] = conn.ws.close_code

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url])
        await run_link(link, stop)
    assert not peer.errors
    hello: Hello = seen["hello"]
    assert hello.session == link.session.session_id
    assert hello.caps.devices and hello.devices[0].serial == "127.0.0.1:5555"
    assert hello.held == []
    assert seen["res"].unwrap() == {"payload": b"abc"}
    assert seen["pong"].id == "p1"
    assert seen["close"] == 1001  # going away: the bridge shut down
    request = peer.requests[0]
    assert request.path == "/v1/bridge"
    assert TOKEN not in request.path
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Sec-WebSocket-Protocol"] == SUBPROTOCOL
    assert "Sec-WebSocket-Extensions" not in request.headers  # compression off
    assert link.attempts == 1 and link.max_live == 1
    with pytest.raises(RuntimeError):  # one run per link: never two loops, two connections
        await link.run(asyncio.Event())


@pytest.mark.parametrize("status", [401, 403])
async def test_wrong_token_stops_at_once_after_one_attempt(
    stop: asyncio.Event, status: int
) -> None:
    async with Peer(lambda n: serve_forever, refuse=lambda n: status) as peer:
        link = make_link([peer.url])
        with pytest.raises(LinkRefused) as info:
            async with asyncio.timeout(1.0 * TIME_SCALE):
                await link.run(stop)
    assert info.value.http_status == status
    assert "unauthorized" in str(info.value) or "forbidden" in str(info.value)
    assert info.value.exit_code != 0
    assert peer.attempts == 1 and link.attempts == 1


async def test_a_bare_403_says_no_bridge_endpoint_at_that_url(stop: asyncio.Event) -> None:
    """A path after host:port reaches the controller's router, which answers a WebSocket it
    has no route for with a bare 403: that is the URL, not the token, and it is terminal."""
    async with Peer(lambda n: serve_forever) as peer:
        link = make_link([peer.url + "/foo"])
        with pytest.raises(LinkRefused) as info:
            async with asyncio.timeout(1.0 * TIME_SCALE):
                await link.run(stop)
    assert "no droidwire bridge endpoint" in str(info.value)
    assert "--controller" in str(info.value) and "token" not in str(info.value)
    assert link.attempts == 1


async def test_never_reached_gives_up_after_the_start_budget(stop: asyncio.Event) -> None:
    """A port nothing listens on: exit 3 once the start budget is spent, saying what to
    check, not a reconnect budget of retries logged as a lost link."""
    port = free_port()
    link = make_link([f"ws://127.0.0.1:{port}"], start_budget_s=0.2 * TIME_SCALE)
    with pytest.raises(BudgetExhausted) as info:
        async with asyncio.timeout(5.0 * TIME_SCALE):
            await link.run(stop)
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "--controller" in message
    assert "--start-budget" in message and link.welcomes == 0
    assert info.value.exit_code == 3


@pytest.mark.parametrize("code", [4400, 4401, 4403, 4409])
async def test_terminal_close_code_stops_without_retry(stop: asyncio.Event, code: int) -> None:
    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.hello()
            await conn.close(code, "no")

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url])
        with pytest.raises(LinkRefused) as info:
            await run_link(link, stop)
    assert info.value.close_code == code
    assert str(code) in str(info.value)
    assert peer.attempts == 1


async def test_terminal_close_after_welcome_too(stop: asyncio.Event) -> None:
    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            await conn.close(4409, "replaced")

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url])
        with pytest.raises(LinkRefused, match="replaced"):
            await run_link(link, stop)
    assert peer.attempts == 1


async def test_budget_exhausted_exits(stop: asyncio.Event) -> None:
    settings = fast_settings(reconnect_budget_s=0.3 * TIME_SCALE, backoff_cap_s=0.05)
    async with Peer(lambda n: serve_forever, refuse=lambda n: 503) as peer:
        link = make_link([peer.url], settings=settings)
        with pytest.raises(BudgetExhausted) as info:
            await run_link(link, stop)
    assert info.value.exit_code != 0
    assert "503" in str(info.value)
    assert peer.attempts > 1  # retried: 503 is not terminal
    assert link.budget.first_failure is not None  # the clock ran from the first failure


async def test_backoff_grows_while_accepted_then_closed_before_welcome(
    stop: asyncio.Event,
) -> None:
    settings = fast_settings(backoff_base_s=0.01, backoff_factor=2.0, backoff_cap_s=0.08)

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.hello()
            if n == 5:
                stop.set()
            await conn.close(1011, "broken server")

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url], settings=settings, random=lambda: 0.999)
        await run_link(link, stop)
    assert link.welcomes == 0
    ceilings = [d / 0.999 for d in link.delays]
    assert ceilings == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.08])
    assert peer.accepted == 6


async def test_quick_retry_after_welcome_and_budget_reset(stop: asyncio.Event) -> None:
    settings = fast_settings(backoff_first_max_s=0.004, backoff_base_s=0.01, backoff_cap_s=0.5)
    budget_at_open: list[float | None] = []

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            if n in (0, 3):
                await conn.welcome()
                await conn.call("ping")
                await conn.close(1012, "restart")
            elif n in (1, 2):
                await conn.hello()
                await conn.close(1013, "later")
            else:
                await conn.welcome()
                await conn.call("ping")
                stop.set()
                await conn.closed()

        return run

    def on_open(link: Link) -> None:
        budget_at_open.append(link.budget.first_failure)

    async with Peer(script) as peer:
        link = make_link([peer.url], settings=settings, random=lambda: 0.999, on_open=on_open)
        await run_link(link, stop)
    ceilings = [d / 0.999 for d in link.delays]
    # quick after a welcomed session, growing while attempts fail, quick again after welcome
    assert ceilings == pytest.approx([0.004, 0.01, 0.02, 0.004])
    assert budget_at_open == [None, None, None]  # every welcome reset the budget clock
    assert link.welcomes == 3


async def test_one_reconnect_per_outage_under_simultaneous_errors_and_close(
    stop: asyncio.Event,
) -> None:
    rounds = 5
    holder: dict[str, Link] = {}
    reported: list[bool] = []

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            if n == rounds:
                await conn.call("ping")
                stop.set()
                await conn.closed()
                return
            link = holder["link"]

            async def error() -> None:
                reported.append(link.drop(Failure("simulated keepalive timeout")))

            await asyncio.gather(conn.close(1011, "internal"), *(error() for _ in range(50)))

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url])
        holder["link"] = link
        await run_link(link, stop)
    assert not peer.errors
    assert peer.attempts == rounds + 1  # exactly one reconnect per outage
    assert link.max_live == 1  # never two connections at once
    assert reported.count(True) <= rounds  # at most one report recorded per connection


async def test_results_survive_a_drop_and_run_once(stop: asyncio.Event) -> None:
    handlers = Handlers()
    rid = new_request_id()
    seen: dict[str, Any] = {}

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            if n == 0:
                await conn.welcome()
                await conn.send(Req(id=rid, m="test.slow", p={}))
                async with asyncio.timeout(WAIT):
                    await handlers.started.wait()
                await conn.close(1012, "restart")  # mid-RPC
                handlers.release.set()  # it finishes while the bridge is away
                return
            hello = await conn.hello()
            seen["held"] = hello.held
            await conn.welcome(waiting=[rid], resumed=True)
            await conn.send(Req(id=rid, m="test.slow", p={}))  # re-sent: must not run again
            first = await conn.recv_kind(Res)
            second = await conn.recv_kind(Res)
            seen["results"] = [first, second]
            await conn.send(Ack(ids=[rid]))
            await conn.send(Req(id=rid, m="test.slow", p={}))  # acked: ignored
            seen["after_ack"] = await conn.call("ping")
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url], handlers)
        await run_link(link, stop)
    assert not peer.errors
    assert seen["held"] == [rid]
    assert [r.id for r in seen["results"]] == [rid, rid]  # from the outbox, twice
    assert all(r.unwrap() == {"ok": True} for r in seen["results"])
    assert handlers.calls.count("test.slow") == 1  # exactly-once effect
    assert link.session.unacked_results() == []


async def test_cancel_stops_the_handler_and_answers_cancelled(stop: asyncio.Event) -> None:
    handlers = Handlers()
    seen: dict[str, Any] = {}

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            rid = new_request_id()
            await conn.send(Req(id=rid, m="test.slow", p={}))
            async with asyncio.timeout(WAIT):
                await handlers.started.wait()
            await conn.send(Cancel(id=rid))
            seen["res"] = await conn.recv_kind(Res)
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url], handlers)
        await run_link(link, stop)
    assert handlers.cancelled.is_set()
    assert seen["res"].error.code == "cancelled"


async def test_orphaned_requests_are_cancelled_after_resume(stop: asyncio.Event) -> None:
    handlers = Handlers()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            if n == 0:
                await conn.welcome()
                await conn.send(Req(id=new_request_id(), m="test.slow", p={}))
                async with asyncio.timeout(WAIT):
                    await handlers.started.wait()
                await conn.close(1012)
                return
            await conn.welcome(waiting=[])  # nobody waits for it any more
            res = await conn.recv_kind(Res)
            assert res.error is not None and res.error.code == "cancelled"
            await conn.send(Ack(ids=[res.id]))
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url], handlers)
        await run_link(link, stop)
    assert not peer.errors
    assert handlers.cancelled.is_set()


async def test_handlers_run_concurrently_but_bounded(stop: asyncio.Event) -> None:
    handlers = Handlers()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            ids = [new_request_id() for _ in range(5)]
            for rid in ids:
                await conn.send(Req(id=rid, m="test.slow", p={}))
            # a liveness ping still answers while every slot is busy: the reader never blocks
            await conn.send(Ping(id="alive"))
            assert (await conn.recv_kind(Pong)).id == "alive"
            handlers.release.set()
            got = {(await conn.recv_kind(Res)).id for _ in ids}
            assert got == set(ids)
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url], handlers, settings=fast_settings(handler_concurrency=2))
        await run_link(link, stop)
    assert not peer.errors
    assert handlers.max_running == 2


async def test_malformed_frames_get_errors_never_kill_the_bridge(stop: asyncio.Event) -> None:
    seen: dict[str, Any] = {}

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            if n == 0:
                await conn.welcome()
                rid = new_request_id()
                # a req whose id reads but whose method is missing: a bad_request result
                import msgpack

                await conn.ws.send(msgpack.packb({"t": "req", "id": rid, "p": 3}))
                seen["bad"] = await conn.recv_kind(Res)
                seen["ok"] = await conn.call("ping")
                await conn.ws.send(b"\xc1 not msgpack")  # cannot be parsed at all
                await conn.closed()
                seen["close"] = conn.ws.close_code
                return
            await conn.welcome()
            seen["again"] = await conn.call("ping")
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url])
        await run_link(link, stop)
    assert not peer.errors
    assert seen["bad"].error.code == "bad_request"
    assert seen["ok"].ok and seen["again"].ok
    assert seen["close"] == 4400
    assert peer.attempts == 2  # our own 4400 close is retried


async def test_oversize_result_becomes_an_error(stop: asyncio.Event) -> None:
    seen: dict[str, Any] = {}

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome(settings=fast_settings(max_frame_bytes=65_536))
            seen["res"] = await conn.call("test.big", {"size": 70_000})
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url], settings=fast_settings(max_frame_bytes=65_536))
        await run_link(link, stop)
    assert seen["res"].error.code == "bad_request"
    assert seen["res"].error.data["reason"] == "frame_too_large"


async def test_failover_to_the_next_controller(stop: asyncio.Event) -> None:
    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            await conn.call("ping")
            stop.set()
            await conn.closed()

        return run

    dead = f"ws://127.0.0.1:{free_port()}"  # nothing listens there
    async with Peer(script) as peer:
        link = make_link([dead, peer.url])
        await run_link(link, stop)
    assert link.attempts == 2 and link.welcomes == 1
    assert link.url == bridge_url(peer.url)


async def test_no_welcome_in_time_is_a_failed_attempt(stop: asyncio.Event) -> None:
    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            if n == 0:
                await conn.hello()
                await conn.closed()  # silent: the bridge gives up waiting and closes
                return
            await conn.welcome()
            await conn.call("ping")
            stop.set()
            await conn.closed()

        return run

    settings = dataclasses.replace(fast_settings(), handshake_timeout_s=0.2 * TIME_SCALE)
    async with Peer(script) as peer:
        link = make_link([peer.url], settings=settings)
        await run_link(link, stop)
    assert peer.accepted == 2 and link.welcomes == 1
    assert link.delays[0] >= 0  # retried under the backoff, not as a welcomed session


def test_headers_type_is_available() -> None:
    # websockets' Headers is what process_request sees; keep the import honest
    assert Headers({"a": "b"})["a"] == "b"


async def test_stop_while_dialling_a_silent_server_returns_at_once(stop: asyncio.Event) -> None:
    accepted = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        accepted.set()  # never answers the HTTP upgrade

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = dataclasses.replace(fast_settings(), handshake_timeout_s=60.0)
    link = make_link([f"ws://127.0.0.1:{port}"], settings=settings)
    try:
        task = asyncio.create_task(link.run(stop))
        async with asyncio.timeout(WAIT):
            await accepted.wait()
        stop.set()
        async with asyncio.timeout(WAIT):  # far less than the 60 s handshake timeout
            await task
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()
    assert link.attempts == 1 and link.connections == 0


async def test_a_silently_dead_link_is_noticed_by_the_keepalive(stop: asyncio.Event) -> None:
    back = asyncio.Event()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            if n == 0:
                await conn.call("ping")
                conn.ws.transport.pause_reading()  # half-open: no pong ever comes back
                async with asyncio.timeout(WAIT):
                    await back.wait()  # the bridge gave up on it and dialled again
                conn.ws.transport.abort()
                return
            back.set()
            await conn.call("ping")
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url])  # ping interval and timeout: 0.1 s (scaled)
        await run_link(link, stop)
    assert not peer.errors
    assert link.welcomes == 2 and peer.accepted == 2
    assert link.settings.ping_timeout_s is not None


# --- handlers that never wait, and the eager writer ---------------------------------------------


def immediate_table(
    ran: list[str], pinged: asyncio.Event | None = None
) -> Callable[[str], Any]:
    """The link's ``immediate`` lookup: ``now.*`` handlers (and ``ping``) that never wait;
    ``pinged`` is set when ``ping`` runs (its result is queued in that same step)."""

    def ok(params: dict[str, Any]) -> dict[str, Any]:
        ran.append("now.ok")
        return {"echo": params.get("x")}

    def refused(params: dict[str, Any]) -> dict[str, Any]:
        ran.append("now.refused")
        raise RpcError(ErrorCode.FORBIDDEN, "not here", {"rule": "test"})

    def crash(params: dict[str, Any]) -> dict[str, Any]:
        ran.append("now.crash")
        raise ValueError("a bug in a handler")

    def odd(params: dict[str, Any]) -> Any:
        ran.append("now.odd")
        return ["not", "a", "map"]

    def big(params: dict[str, Any]) -> dict[str, Any]:
        ran.append("now.big")
        return {"blob": b"x" * 70_000}

    def ping(params: dict[str, Any]) -> dict[str, Any]:
        ran.append("ping")
        if pinged is not None:
            pinged.set()
        return {"payload": params.get("payload", b"")}

    table = {"now.ok": ok, "now.refused": refused, "now.crash": crash, "now.odd": odd,
             "now.big": big, "ping": ping}
    return table.get


async def test_immediate_handlers_give_the_outcomes_of_awaited_ones(stop: asyncio.Event) -> None:
    handlers = Handlers()
    ran: list[str] = []
    seen: dict[str, Any] = {}
    small = fast_settings(max_frame_bytes=65_536)

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome(settings=small)
            for method in ("now.ok", "now.refused", "now.crash", "now.odd", "now.big"):
                seen[method] = await conn.call(method, {"x": 1})
            # Re-sent after its result: answered from the outbox, never run again.
            rid = new_request_id()
            await conn.send(Req(id=rid, m="now.ok", p={"x": 2}))
            first = await conn.recv_kind(Res)
            await conn.send(Req(id=rid, m="now.ok", p={"x": 2}))
            again = await conn.recv_kind(Res)
            seen["twice"] = [first, again]
            await conn.send(Ack(ids=[rid]))
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link([peer.url], handlers, settings=small, immediate=immediate_table(ran))
        await run_link(link, stop)
    assert not peer.errors
    assert seen["now.ok"].unwrap() == {"echo": 1}
    assert seen["now.refused"].error.code == "forbidden"
    assert seen["now.refused"].error.data == {"rule": "test"}
    assert seen["now.crash"].error.code == "internal"
    assert seen["now.odd"].error.code == "internal"
    assert seen["now.big"].error.code == "bad_request"
    assert seen["now.big"].error.data["reason"] == "frame_too_large"
    assert [r.unwrap() for r in seen["twice"]] == [{"echo": 2}, {"echo": 2}]
    assert ran.count("now.ok") == 2  # once per request id: exactly-once holds
    assert handlers.calls == []  # none of them went through dispatch
    assert link.executed == 6
    assert link.session.unacked_results() == []


async def test_an_immediate_handler_waits_its_turn_when_every_slot_is_busy(
    stop: asyncio.Event,
) -> None:
    # handler_concurrency bounds immediate handlers too: with every slot taken, a ping is
    # not answered in the reader's step (its result would come before the pong) but queues
    # for a slot like any other request.
    handlers = Handlers()
    ran: list[str] = []
    seen: dict[str, Any] = {}

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            slow, ping = new_request_id(), new_request_id()
            await conn.send(Req(id=slow, m="test.slow", p={}))
            async with asyncio.timeout(WAIT):
                await handlers.started.wait()
            await conn.send(Req(id=ping, m="ping", p={"payload": b"p"}))
            await conn.send(Ping(id="alive"))
            seen["first"] = await conn.recv()
            handlers.release.set()
            results = [await conn.recv_kind(Res), await conn.recv_kind(Res)]
            seen["order"] = [r.id for r in results] == [slow, ping]
            seen["ping"] = results[1]
            await conn.send(Ack(ids=[slow, ping]))
            stop.set()
            await conn.closed()

        return run

    settings = fast_settings(handler_concurrency=1)
    async with Peer(script) as peer:
        link = make_link([peer.url], handlers, settings=settings, immediate=immediate_table(ran))
        await run_link(link, stop)
    assert not peer.errors
    assert isinstance(seen["first"], Pong)
    assert seen["order"] and seen["ping"].unwrap() == {"payload": b"p"}
    assert handlers.calls.count("ping") == 1 and ran == []  # it waited for the slot


async def test_a_result_during_backpressure_waits_behind_the_queued_frames(
    stop: asyncio.Event,
) -> None:
    # The controller stops reading, so the socket pushes back and the writer is suspended
    # with frames queued. A ping answered meanwhile (in the reader's step) must queue behind
    # them: not written past them, not lost, sent once the socket drains.
    ran: list[str] = []
    seen: dict[str, Any] = {}
    paused = asyncio.Event()
    opened = asyncio.Event()
    blocked = asyncio.Event()
    pinged = asyncio.Event()
    blob = b"x" * 200_000
    # No keepalive (a peer that does not read answers no ping) and a short send queue.
    settings = fast_settings(ping_interval_s=None, ping_timeout_s=None, send_queue_frames=4)
    link: Link | None = None

    async def produce() -> None:
        assert link is not None
        async with asyncio.timeout(WAIT):
            await paused.wait()
            await opened.wait()
        sent = 0
        # Emit until the socket pushed back: the writer was handed to a task (suspended).
        while not isinstance(link._writer, asyncio.Task):
            assert sent < 2_000, "the socket never pushed back"
            assert await link.emit("bulk", {"blob": blob})
            sent += 1
        seen["emitted"] = sent
        blocked.set()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            assert link is not None
            await conn.welcome(settings=settings)
            conn.ws.transport.pause_reading()
            paused.set()
            async with asyncio.timeout(WAIT):
                await blocked.wait()
            rid = new_request_id()
            await conn.send(Req(id=rid, m="ping", p={"payload": b"p"}))
            async with asyncio.timeout(WAIT):  # answered, while the frames before it wait
                await pinged.wait()
            assert any(r.id == rid for r in link.session.unacked_results())
            assert link._out, "frames are still queued"
            conn.ws.transport.resume_reading()
            seqs: list[int] = []
            while True:
                data = await asyncio.wait_for(conn.ws.recv(), WAIT)
                assert isinstance(data, bytes)
                frame = decode(data)
                if isinstance(frame, Res):
                    break
                seqs.append(frame.seq)  # type: ignore[union-attr]
            seen["seqs"] = seqs
            seen["res"] = frame
            await conn.send(Ack(ids=[rid]))
            stop.set()
            await conn.closed()

        return run

    async with Peer(script) as peer:
        link = make_link(
            [peer.url], settings=settings, immediate=immediate_table(ran, pinged),
            on_open=lambda _: opened.set(),
        )
        producer = asyncio.create_task(produce())
        await run_link(link, stop)
        await producer
    assert not peer.errors
    assert ran == ["ping"]  # answered in the reader's step, written after the rest
    assert seen["res"].unwrap() == {"payload": b"p"}
    assert seen["seqs"] == list(range(seen["emitted"]))  # every frame, in order, before it
