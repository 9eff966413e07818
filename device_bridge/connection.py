"""The bridge's dial-out link to the controller: one WebSocket at a time, resumed forever.

docs/design.md §3–4, docs/protocol.md. The wire rules live in :mod:`protocol` (sans I/O); this
module is the I/O around :class:`protocol.session.BridgeSession`:

* dial ``URL/v1/bridge`` with subprotocol ``droidwire.v1``, the token in an ``Authorization:
  Bearer`` header (never in the URL), compression off (it costs 3× on log streams), and
  websockets' own keepalive (``ping_interval``/``ping_timeout``/``close_timeout`` from the
  settings, §4.1) and ``max_size`` = the protocol's frame cap;
* send ``hello`` (inventory, capabilities, held ids) on every connect, wait for ``welcome``
  within ``handshake_timeout_s``, then serve ``req`` frames concurrently (bounded by
  ``handler_concurrency``), results through the session's outbox until acked. A handler that
  never waits (``immediate``: ``ping``, ``bridge.info``, ``devices.list``) runs in the step
  that read its request, without a task, while the bound leaves room;
* one writer at a time sends the send queue in order, and only while it is not empty: it
  starts in the step that queued a frame and runs up to its first real suspension (a send
  waits only when the socket pushes back), then a task carries it on — so a result usually
  leaves in the step that produced it (the controller's hub does the same, the "eager
  writer");
* reconnect as a loop with two swappable pieces: :func:`classify_failure`
  (terminal or retryable) and :func:`protocol.settings.backoff` (full jitter, a cap). One
  generator per *outage*: it is created when a session that reached ``welcome`` drops (quick
  first retry) and kept while attempts fail — including attempts accepted then closed before
  ``welcome``, the trap of websockets' own loop, which resets after any opened connection;
* the reconnect budget (:class:`protocol.settings.ReconnectBudget`) counts from the first
  failure and resets on each ``welcome``; exhausted → :class:`BudgetExhausted`;
* terminal close codes (4400–4499) and HTTP 401/403 at the handshake → :class:`LinkRefused`
  at once, after exactly one attempt;
* one guard (:meth:`Link.drop`): whatever notices the connection is broken first — the reader,
  the writer, the keepalive, a protocol violation — records the failure; later reports are
  ignored. The loop then closes that socket and waits for it before dialling again, so an
  error and a close arriving together make one reconnect and never two connections.

Exception tree (the root of this module)::

    LinkError              the link ended for good: the bridge exits non-zero
    ├── LinkRefused        terminal: close code 44xx, HTTP 401/403, bad welcome, bad URL
    └── BudgetExhausted    the reconnect budget ran out
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
import random as _random
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)
from websockets.frames import Frame, Opcode
from websockets.protocol import Event
from websockets.protocol import State as WsState

from protocol.closecodes import CloseCode, describe, is_terminal
from protocol.codec import Codec
from protocol.eager import start_eagerly
from protocol.envelope import (
    SUBPROTOCOL,
    Ack,
    Capabilities,
    DeviceInfo,
    Req,
    Res,
    Welcome,
    is_request_id,
)
from protocol.errors import (
    DecodeError,
    EncodeError,
    ErrorCode,
    FrameTooLarge,
    HandshakeRefused,
    InvalidState,
    RpcError,
    UnexpectedFrame,
)
from protocol.session import Admission, BridgeSession, WelcomeOutcome
from protocol.settings import ReconnectBudget, Settings, backoff

__all__ = [
    "BRIDGE_PATH",
    "BudgetExhausted",
    "Describe",
    "Dispatch",
    "Failure",
    "Immediate",
    "Link",
    "LinkError",
    "LinkRefused",
    "bridge_url",
    "classify_failure",
]

log = logging.getLogger("droidwire.bridge.connection")

BRIDGE_PATH = "/v1/bridge"
#: HTTP statuses at the handshake that no retry can fix (the token is wrong or not a bridge's).
TERMINAL_HTTP = frozenset({401, 403})

#: ``await dispatch(method, params)`` → result dict, or raise :class:`RpcError`.
Dispatch = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
#: ``await describe()`` → the capabilities and the full inventory for ``hello``.
Describe = Callable[[], Awaitable[tuple[Capabilities, Sequence[DeviceInfo]]]]
#: ``immediate(method)`` → a handler that never waits (params → result dict, or raise
#: :class:`RpcError`), or None: that method goes through ``dispatch``.
Immediate = Callable[[str], Callable[[dict[str, Any]], dict[str, Any]] | None]


class LinkError(Exception):
    """The link ended for good; ``str()`` is the message for the user."""

    exit_code = 1


class LinkRefused(LinkError):
    """Terminal: retrying the same way cannot help (close code 44xx, HTTP 401/403 …)."""

    exit_code = 2

    def __init__(
        self, message: str, *, close_code: int | None = None, http_status: int | None = None
    ) -> None:
        self.close_code = close_code
        self.http_status = http_status
        super().__init__(message)


class BudgetExhausted(LinkError):
    """The controller stayed unreachable for the whole reconnect budget."""

    exit_code = 3


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one connection (or attempt) ended. ``terminal``: stop, do not retry."""

    message: str
    terminal: bool = False
    close_code: int | None = None
    http_status: int | None = None
    unreached: bool = False  # no answer at all: refused, unknown host, timed out

    def error(self) -> LinkRefused:
        return LinkRefused(self.message, close_code=self.close_code, http_status=self.http_status)


def classify_failure(exc: BaseException) -> Failure:
    """The classifier of the reconnect loop: what ``exc`` means, terminal or retryable.

    * HTTP 401/403 at the handshake: terminal (the token); any other status: retryable (a
      proxy's 502, a controller's 503 while it starts).
    * A close frame received: its code decides (:func:`protocol.closecodes.classify`); no
      close frame (1006): retryable.
    * An untrusted TLS certificate: terminal (only the owner's config can fix it).
    * Network errors, timeouts and other handshake failures: retryable.
    """
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        reason = exc.response.reason_phrase or ""
        answer = _error_message(bytes(exc.response.body or b""))
        if answer is None and status in (403, 404):
            # Not droidwire's answer (every refusal of ours has a JSON error body): nothing
            # serves the bridge endpoint at that URL, e.g. a path after the host:port.
            return Failure(
                f"no droidwire bridge endpoint at that URL (HTTP {status} {reason}): "
                "--controller takes the controller's base URL, e.g. http://HOST:8700, with "
                "a path only where a proxy serves the controller under one",
                terminal=True,
                http_status=status,
            )
        if status in TERMINAL_HTTP:
            what = "unauthorized" if status == 401 else "forbidden"
            return Failure(
                f"the controller refused the bridge token: HTTP {status} {what}"
                + (f" ({answer})" if answer else "")
                + ": check --token-file / DROIDWIRE_BRIDGE_TOKEN (a bridge token, from "
                "`droidwire token create --kind bridge NAME`)",
                terminal=True,
                http_status=status,
            )
        return Failure(f"handshake refused: HTTP {status} {reason}".rstrip(), http_status=status)
    if isinstance(exc, ConnectionClosed):
        code = exc.rcvd.code if exc.rcvd is not None else None
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        text = describe(code) + (f" ({reason[:200]})" if reason else "")
        return Failure(f"connection closed: {text}", terminal=is_terminal(code), close_code=code)
    if isinstance(exc, InvalidURI):
        return Failure(f"bad controller URL: {exc}", terminal=True)
    if isinstance(exc, _ssl.SSLCertVerificationError):
        # Retrying cannot make an untrusted certificate trusted: say so and stop.
        return Failure(
            f"the controller's TLS certificate is not trusted: {getattr(exc, 'verify_message', None) or exc}"
            " (set controller.ca to its CA)",
            terminal=True,
        )
    if isinstance(exc, TimeoutError):
        return Failure("timed out connecting to the controller", unreached=True)
    if isinstance(exc, InvalidHandshake):
        return Failure(f"WebSocket handshake failed: {exc}")
    if isinstance(exc, OSError):
        return Failure(f"network error: {exc.strerror or exc}", unreached=True)
    return Failure(f"connection failed: {type(exc).__name__}: {exc}")


def _error_message(body: bytes) -> str | None:
    """The message of a droidwire JSON error body, or None when the body is not one."""
    try:
        error = json.loads(body)["error"]
        return str(error["message"])[:200]
    except (ValueError, KeyError, TypeError):
        return None


def bridge_url(url: str) -> str:
    """``http(s)://``/``ws(s)://HOST[:PORT][/prefix]`` → the bridge endpoint's ``ws(s)`` URL."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"controller URL {url!r} has no scheme (use wss:// or https://)")
    scheme = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme.lower())
    if scheme not in ("ws", "wss"):
        raise ValueError(f"controller URL {url!r}: scheme must be ws, wss, http or https")
    if "?" in rest or "#" in rest or "@" in rest.split("/", 1)[0]:
        # Credentials travel in the Authorization header only, never in a URL (docs/design.md §6).
        raise ValueError(f"controller URL {url!r} must not carry a query, fragment or user info")
    rest = rest.rstrip("/")
    if not rest.endswith(BRIDGE_PATH):
        rest += BRIDGE_PATH
    return f"{scheme}://{rest}"


class _LinkLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Every line of a link names its bridge (once welcomed) and its session (namespaced, with ids)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra: Any = self.extra
        session: BridgeSession = extra["link"].session
        return f"[bridge {session.bridge_id or '-'} session {session.session_id[:8]}] {msg}", kwargs


class Link:
    """The bridge's side of the reverse WebSocket, across reconnects.

    ``dispatch`` runs one RPC; ``describe`` gives ``hello``'s capabilities and inventory;
    ``immediate`` (optional) names the handlers that never wait, which run without a task
    (:meth:`device_bridge.rpc.Dispatcher.immediate`). Options are keyword-only. ``random``
    (a ``[0, 1)`` source) and ``clock`` are swappable for tests. :meth:`run` returns when
    ``stop`` is set and raises :class:`LinkError` when the link ends for good.
    """

    def __init__(
        self,
        urls: Sequence[str],
        token: str,
        *,
        dispatch: Dispatch,
        describe: Describe,
        immediate: Immediate | None = None,
        software: str,
        settings: Settings,
        session: BridgeSession | None = None,
        ssl: _ssl.SSLContext | None = None,
        random: Callable[[], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_open: Callable[[Link], Any] | None = None,
        on_lost: Callable[[Link], Any] | None = None,
        drain_s: float | None = None,
        start_budget_s: float | None = None,
    ) -> None:
        if not urls:
            raise ValueError("at least one controller URL is needed")
        if not token:
            raise ValueError("a bridge token is needed")
        self.urls = [bridge_url(u) for u in urls]
        self._token = token
        self._dispatch = dispatch
        self._describe = describe
        self._immediate = immediate
        self.software = software
        self.settings = settings
        self.session = session or BridgeSession(settings=settings)
        self._ssl = ssl
        self._random = random or _random.SystemRandom().random
        self._clock = clock
        self._on_open = on_open
        self._on_lost = on_lost
        self._drain_s = settings.close_timeout_s if drain_s is None else drain_s
        self.codec = Codec(max_frame_bytes=settings.max_frame_bytes)
        self.log = _LinkLog(log, {"link": self})
        self.budget = ReconnectBudget.from_settings(settings)
        # Until the first ``welcome``, a controller that cannot even be reached (refused,
        # unknown host, no answer) gives up after this many seconds: a wrong URL or port
        # fails fast. None: the reconnect budget applies from the start.
        self.start_budget_s = start_budget_s
        self._sem = asyncio.Semaphore(settings.handler_concurrency)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._accepting = True
        self._started = False
        # Per connection (reset in _serve).
        self._ws: ClientConnection | None = None
        self._out: collections.deque[bytes] = collections.deque()
        self._writer: asyncio.Task[None] | object | None = None  # _EAGER, a task, or None
        self._room = asyncio.Event()
        self._welcomed = asyncio.Event()
        self._lost = asyncio.Event()
        self._failure: Failure | None = None
        # Observable counters (tests, logs, metrics).
        self.attempts = 0  # dial attempts
        self.connections = 0  # WebSocket handshakes that succeeded
        self.welcomes = 0
        self.live = 0  # open WebSocket connections held right now: never above 1
        self.max_live = 0
        self.delays: list[float] = []  # every backoff delay slept, in order
        self.executed = 0  # handlers started
        self.url: str | None = None  # the URL of the current / last connection

    # -- public ------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """A connection is up and ``welcome`` was received."""
        return self.session.is_open and self._failure is None

    @property
    def bridge_id(self) -> str | None:
        return self.session.bridge_id

    def drop(self, failure: Failure | str) -> bool:
        """Report that the current connection is broken: THE guard of docs/design.md §4.4.

        The first report per connection wins and wakes the loop; later ones (the close that
        follows an error, the writer's error after the reader's …) are ignored. Returns
        whether this report was the one recorded.
        """
        if isinstance(failure, str):
            failure = Failure(failure)
        if self._failure is not None or self._ws is None:
            return False
        self._failure = failure
        self._lost.set()
        self._room.set()  # wake stream producers: they see the link is not open
        return True

    async def emit(self, channel: str, data: Any) -> bool:
        """Send an ``evt`` on ``channel`` (the session numbers it); waits while the send queue is
        full (backpressure). ``False`` if the link is not open: the producer ends its stream."""
        while self.is_open and len(self._out) >= self.settings.send_queue_frames:
            self._room.clear()
            await self._room.wait()
        if not self.is_open:
            return False
        # The logcat hot path: the session numbers the event, the codec packs it as a plain
        # map (no Evt model). Frames the session queued before it go out first, in order.
        seq = self.session.next_seq(channel)
        self._flush()
        try:
            self._out.append(self.codec.encode_event(channel, seq, data))
        except (FrameTooLarge, EncodeError) as exc:  # a producer's bug, never a crash
            self.log.error("dropping an unsendable evt frame on %s: %s", channel, exc)
            return True
        self._write_soon()
        return True

    async def idle(self) -> bool:
        """Wait until nothing waits in the send queue; ``False`` once the link is down.

        A stream that must skip rather than queue (the live screen) sends only then, so RPC
        results and logcat batches never wait behind a queue of its frames."""
        while self.is_open and self._out:
            self._room.clear()
            await self._room.wait()
        return self.is_open

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Connect, serve, reconnect until ``stop`` is set; :class:`LinkError` if it gives up."""
        if self._started:
            raise RuntimeError("a Link runs once: create another for another run")
        self._started = True
        stop = stop or asyncio.Event()
        delays: Iterator[float] | None = None
        index = 0
        try:
            while not stop.is_set():
                url = self.urls[index % len(self.urls)]
                welcomed, failure = await self._attempt(url, stop)
                if stop.is_set():
                    return
                assert failure is not None
                if welcomed:
                    delays = None
                if failure.terminal:
                    self.log.error("link to %s ended: %s; not retrying", url, failure.message)
                    raise failure.error()
                now = self._clock()
                self.budget.failed(now)
                if (
                    self.welcomes == 0
                    and self.start_budget_s is not None
                    and failure.unreached
                    and self.budget.elapsed(now) >= self.start_budget_s
                ):
                    raise BudgetExhausted(
                        f"cannot reach the controller at {', '.join(self.urls)}: "
                        f"{failure.message}, for {self.start_budget_s:g} s since the start. "
                        "Check --controller (its host and port; `droidwire controller` "
                        "listens on 8700 unless --port says otherwise) and that it runs; "
                        "--start-budget SECONDS waits longer for a controller still starting"
                    )
                if self.budget.exhausted(now):
                    raise BudgetExhausted(
                        f"the controller stayed unreachable for {self.budget.budget_s:g} s "
                        f"(last: {failure.message})"
                    )
                if delays is None:
                    delays = backoff(self.settings, self._random, quick_first=welcomed)
                if not welcomed:
                    index += 1  # fail over to the next controller URL
                delay = min(next(delays), self.budget.remaining(now))
                if self.welcomes == 0 and self.start_budget_s is not None and failure.unreached:
                    delay = min(delay, max(0.0, self.start_budget_s - self.budget.elapsed(now)))
                self.delays.append(delay)
                if self.welcomes == 0:
                    # Never connected: not a lost link, and worth a warning.
                    self.log.warning(
                        "cannot connect to %s (%s); retrying in %.2f s", url, failure.message, delay
                    )
                else:
                    self.log.info(
                        "link to %s lost (%s); retrying in %.2f s (budget left %.0f s)",
                        url,
                        failure.message,
                        delay,
                        self.budget.remaining(now),
                    )
                with contextlib.suppress(TimeoutError):  # not wait_for: it can eat a cancel
                    async with asyncio.timeout(delay):
                        await stop.wait()
        finally:
            await self._shutdown()

    # -- one attempt -------------------------------------------------------------------------

    async def _attempt(self, url: str, stop: asyncio.Event) -> tuple[bool, Failure | None]:
        """Dial once and serve until the connection ends: (reached welcome, why it ended)."""
        self.attempts += 1
        self.url = url
        self.log.debug("dialling %s (attempt %d)", url, self.attempts)
        dial = asyncio.create_task(self._dial(url), name="droidwire-link-dial")
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({dial, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not dial.done():  # stopped while dialling: do not wait for the handshake timeout
            dial.cancel()
            with contextlib.suppress(BaseException):
                ws = await dial
                await ws.close(CloseCode.GOING_AWAY, "bridge shutting down")
            return False, Failure("stopped")
        try:
            ws = dial.result()
        except Exception as exc:
            return False, classify_failure(exc)
        self.connections += 1
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        try:
            return await self._serve(ws, stop)
        finally:
            # The socket is fully closed before the loop may dial again (never two connections).
            with contextlib.suppress(Exception):
                await ws.close()
            self.live -= 1

    async def _dial(self, url: str) -> ClientConnection:
        s = self.settings
        return await connect(
            url,
            subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers={"Authorization": f"Bearer {self._token}"},
            compression=None,  # permessage-deflate costs 3x on log streams
            open_timeout=s.handshake_timeout_s,
            ping_interval=s.ping_interval_s,
            ping_timeout=s.ping_timeout_s,
            close_timeout=s.close_timeout_s,
            max_size=s.max_frame_bytes,
            max_queue=64,
            proxy=None,
            ssl=self._ssl if url.startswith("wss://") else None,
            user_agent_header=f"droidwire-bridge/{self.software}",
            create_connection=LinkConnection,
        )

    async def _serve(self, ws: ClientConnection, stop: asyncio.Event) -> tuple[bool, Failure]:
        if ws.subprotocol != SUBPROTOCOL:
            return False, Failure(
                f"the controller did not accept subprotocol {SUBPROTOCOL} "
                f"(answered {ws.subprotocol!r}): incompatible controller",
                terminal=True,
            )
        self._ws = ws
        if isinstance(ws, LinkConnection):
            ws.frame_hook = functools.partial(self._frame_now, ws)
        self._out = collections.deque()
        self._writer = None
        self._room = asyncio.Event()
        self._welcomed = asyncio.Event()
        self._lost = asyncio.Event()
        self._failure = None
        welcomed = False
        self.session.connection_made()
        reader = asyncio.create_task(self._read(ws), name="droidwire-link-reader")
        stopping = asyncio.create_task(stop.wait())
        try:
            try:
                caps, devices = await self._describe()
            except Exception as exc:  # a broken inventory must not take the bridge down
                self.log.exception("cannot describe this bridge for hello")
                self.drop(f"cannot build hello: {type(exc).__name__}")
                return False, self._failure or Failure("cannot build hello")
            self.session.make_hello(software=self.software, caps=caps, devices=devices)
            self._flush()
            lost = asyncio.create_task(self._lost.wait())
            got_welcome = asyncio.create_task(self._welcomed.wait())
            try:
                await asyncio.wait(
                    {lost, got_welcome, stopping},
                    timeout=self.settings.handshake_timeout_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                got_welcome.cancel()
            if not self._welcomed.is_set() and not self._lost.is_set() and not stop.is_set():
                self.drop(f"no welcome within {self.settings.handshake_timeout_s:g} s")
            welcomed = self._welcomed.is_set()
            if welcomed and not self._lost.is_set() and not stop.is_set():
                await asyncio.wait({lost, stopping}, return_when=asyncio.FIRST_COMPLETED)
            lost.cancel()
            if stop.is_set():
                await self._drain(ws)
                return welcomed, Failure("stopped")
            assert self._failure is not None
            return welcomed, self._failure
        finally:
            stopping.cancel()
            self.drop("connection ended")  # no-op if a failure was already recorded
            # No writer starts for this socket from here on (a handler finishing meanwhile
            # leaves its result in the outbox, for the resume).
            self._ws = None
            reader.cancel()
            writer = self._writer
            if isinstance(writer, asyncio.Task):
                writer.cancel()
                await asyncio.gather(reader, writer, return_exceptions=True)
            else:
                await asyncio.gather(reader, return_exceptions=True)
            self._writer = None
            self._out.clear()
            self.session.connection_lost()
            if self._on_lost is not None and welcomed:
                await _maybe_await(self._on_lost(self))

    async def _drain(self, ws: ClientConnection) -> None:
        """Staged shutdown: refuse new requests, give running ones ``drain_s`` to finish and
        their results a chance to go out, then close with 1001 (going away)."""
        self._accepting = False
        running = [t for t in self._tasks.values() if not t.done()]
        if running and self._drain_s > 0:
            await asyncio.wait(running, timeout=self._drain_s)
        if self._out and self._failure is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sent_all(), self._drain_s or 0.1)
        with contextlib.suppress(Exception):
            await ws.close(CloseCode.GOING_AWAY, "bridge shutting down")

    async def _sent_all(self) -> None:
        while self._out and self._failure is None:
            self._room.clear()
            await self._room.wait()

    async def _shutdown(self) -> None:
        """Cancel the handlers still running (results nobody will collect)."""
        self._accepting = False
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(InvalidState):
            self.session.close()

    # -- reading -----------------------------------------------------------------------------

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for message in ws:
                if isinstance(message, str):
                    await self._violation(ws, "text frame: droidwire frames are binary")
                    return
                if not await self._on_frame(ws, message):
                    return
        except ConnectionClosed as exc:
            self.drop(classify_failure(exc))
            return
        except Exception as exc:  # a bug in a frame handler must end the connection, not hang
            self.log.exception("link reader failed")
            self.drop(f"reader failed: {type(exc).__name__}")
            return
        # The iterator ended: a normal close (1000/1001) was received.
        code = ws.close_code
        reason = f" ({ws.close_reason[:200]})" if ws.close_reason else ""
        self.drop(
            Failure(
                f"connection closed: {describe(code)}{reason}",
                terminal=is_terminal(code),
                close_code=code,
            )
        )

    async def _on_frame(self, ws: ClientConnection, data: bytes) -> bool:
        """Handle one frame; False when the connection must end."""
        now = self._clock()
        try:
            frame = self.codec.decode(data)
        except DecodeError as exc:
            if exc.kind == "req" and exc.frame_id is not None and is_request_id(exc.frame_id):
                # A malformed request whose id can be read gets an error result, never a crash.
                if self.session.is_open:
                    self.session.reject(
                        exc.frame_id, RpcError(ErrorCode.BAD_REQUEST, str(exc)), now
                    )
                    self._flush()
                    return True
            await self._violation(ws, f"malformed frame: {exc}")
            return False
        try:
            outcome = self.session.receive(frame, now)
        except HandshakeRefused as exc:
            self.drop(Failure(str(exc), terminal=True, close_code=exc.close_code))
            await _close(ws, exc.close_code, str(exc))
            return False
        except UnexpectedFrame as exc:
            await self._violation(ws, str(exc))
            return False
        if isinstance(outcome, WelcomeOutcome):
            assert isinstance(frame, Welcome)
            self._welcome(frame, outcome)
        else:
            self._outcome(frame, outcome)
        self._flush()
        return True

    def _frame_now(self, ws: ClientConnection, data: bytes) -> bool:
        """A small ``req`` or ``ack`` handled in the transport's read callback — the reader
        is idle with nothing queued (:class:`LinkConnection` checks that), so frames keep
        their order — instead of one more trip through the event loop to wake the reader.
        The same steps as :meth:`_on_frame`; False (anything else, or a frame that does not
        decode): the reader reads it as usual."""
        if self._ws is not ws or len(data) > FAST_FRAME_BYTES or not self.session.is_open:
            return False
        try:
            frame = self.codec.decode(data)
        except DecodeError:
            return False
        if not isinstance(frame, Req | Ack):
            return False
        try:
            outcome = self.session.receive(frame, self._clock())
        except (HandshakeRefused, UnexpectedFrame) as exc:
            # The reader would close: the same, in a task (closing waits for the peer).
            task = asyncio.get_running_loop().create_task(self._violation(ws, str(exc)))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return True
        except Exception as exc:  # as in the reader: a bug ends the connection, not the loop
            self.log.exception("link reader failed")
            self.drop(f"reader failed: {type(exc).__name__}")
            return True
        try:
            self._outcome(frame, outcome)
            self._flush()
        except Exception as exc:
            self.log.exception("link reader failed")
            self.drop(f"reader failed: {type(exc).__name__}")
        return True

    def _outcome(self, frame: Any, outcome: Any) -> None:
        """What a frame's outcome (other than ``welcome``'s) asks of the link."""
        if isinstance(outcome, Admission):
            assert isinstance(frame, Req)
            if outcome is Admission.RUN:
                self._start(frame)
            else:
                self.log.debug("request %s %s: %s", frame.id, frame.method, outcome.value)
        elif outcome is True:  # a cancel of a running request
            rid = getattr(frame, "id", "")
            task = self._tasks.get(rid)
            if task is not None:
                task.cancel()
            # Answer it, outside the outbox (nobody waits: the controller drops it as a duplicate).
            self._send_direct(Res.failure(rid, RpcError(ErrorCode.CANCELLED, "cancelled")))

    def _welcome(self, welcome: Welcome, outcome: WelcomeOutcome) -> None:
        self.welcomes += 1
        self.budget.reset()
        # Adopt the controller's shared settings for streams and later connections.
        self.settings = welcome.settings.apply(self.settings)
        self.codec = Codec(max_frame_bytes=self.settings.max_frame_bytes)
        for rid in outcome.orphaned:
            task = self._tasks.get(rid)
            if task is not None:
                self.log.info("request %s: nobody waits for it any more; cancelling", rid)
                task.cancel()
        self.log.info(
            "link open to %s as bridge %s (session %s, %s; %d results re-sent, %d dropped)",
            self.url,
            welcome.bridge,
            self.session.session_id,
            "resumed" if welcome.resumed else "new",
            len(outcome.resent),
            len(outcome.dropped),
        )
        self._welcomed.set()
        if self._on_open is not None:
            result = self._on_open(self)
            if asyncio.iscoroutine(result):
                task = asyncio.create_task(result)
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def _violation(self, ws: ClientConnection, message: str) -> None:
        """The controller broke the protocol: close with 4400 and reconnect (our close)."""
        self.log.warning("protocol violation by the controller: %s", message)
        self.drop(Failure(f"protocol violation by the controller: {message}"))
        await _close(ws, CloseCode.BAD_REQUEST, message)

    # -- handlers ----------------------------------------------------------------------------

    def _start(self, req: Req) -> None:
        if not self._accepting:
            self.session.complete(
                req.id,
                RpcError(ErrorCode.UNAVAILABLE, "the bridge is shutting down"),
                self._clock(),
            )
            return
        run = self._immediate(req.method) if self._immediate is not None else None
        if run is not None and not self._sem.locked():
            # A handler that never waits, while the bound has room: it runs here, in the
            # reader's step, as if it took the semaphore and gave it back at once (a full
            # bound makes it queue for a task like any other handler).
            self._run_now(req, run)
            return
        task = asyncio.create_task(self._handle(req), name=f"droidwire-rpc-{req.method}")
        self._tasks[req.id] = task
        task.add_done_callback(functools.partial(self._forget_task, req.id))

    def _forget_task(self, request_id: str, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(request_id, None)

    def _run_now(self, req: Req, run: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Run a handler that never waits in this step; its result is queued (and usually
        written) before this returns. Same outcomes as :meth:`_handle`."""
        outcome: dict[str, Any] | RpcError
        encoded: bytes | None = None
        self.executed += 1
        self.log.debug("request %s %s: running", req.id, req.method)
        try:
            outcome = run(dict(req.params))
            if not isinstance(outcome, dict):
                raise TypeError(f"handler of {req.method} returned {type(outcome).__name__}")
            outcome, encoded = self._fit(req, outcome)
        except RpcError as exc:
            outcome = exc
        except Exception as exc:
            self.log.exception("request %s %s: handler failed", req.id, req.method)
            outcome = RpcError(ErrorCode.INTERNAL, f"{req.method} failed: {type(exc).__name__}")
        self._finish(req, outcome, encoded)

    async def _handle(self, req: Req) -> None:
        outcome: dict[str, Any] | RpcError
        encoded: bytes | None = None
        try:
            async with self._sem:
                self.executed += 1
                self.log.debug("request %s %s: running", req.id, req.method)
                outcome = await self._dispatch(req.method, dict(req.params))
            if not isinstance(outcome, dict):
                raise TypeError(f"handler of {req.method} returned {type(outcome).__name__}")
            outcome, encoded = self._fit(req, outcome)
        except RpcError as exc:
            outcome = exc
        except asyncio.CancelledError:
            outcome = RpcError(ErrorCode.CANCELLED, "cancelled")
        except Exception as exc:
            self.log.exception("request %s %s: handler failed", req.id, req.method)
            outcome = RpcError(ErrorCode.INTERNAL, f"{req.method} failed: {type(exc).__name__}")
        self._finish(req, outcome, encoded)

    def _finish(
        self, req: Req, outcome: dict[str, Any] | RpcError, encoded: bytes | None
    ) -> None:
        """A handler ended: its result into the outbox and out (unless cancelled meanwhile)."""
        if self.session.state.name == "CLOSED":
            return
        if self.session.is_running(req.id):
            res = self.session.complete(req.id, outcome, self._clock())
            self._flush(res, encoded)

    def _fit(
        self, req: Req, result: dict[str, Any]
    ) -> tuple[dict[str, Any] | RpcError, bytes | None]:
        """The result and its encoded ``res`` frame, or an error if it cannot travel (over
        the frame cap, not encodable) and None."""
        try:
            # Our own frame from an admitted id, packed without a model.
            encoded = self.codec.encode_result(req.id, result)
        except FrameTooLarge as exc:
            return RpcError(
                ErrorCode.BAD_REQUEST,
                f"the result of {req.method} ({exc.size} bytes) exceeds the {exc.limit}-byte frame cap",
                {"reason": "frame_too_large", "size": exc.size, "limit": exc.limit},
            ), None
        except EncodeError as exc:
            self.log.error("request %s %s: result not encodable: %s", req.id, req.method, exc)
            return RpcError(ErrorCode.INTERNAL, f"the result of {req.method} cannot be encoded"), None
        return result, encoded

    # -- writing -----------------------------------------------------------------------------

    def _flush(self, res: Res | None = None, encoded: bytes | None = None) -> None:
        """Move the session's queued frames to this connection's send queue (``encoded``:
        ``res`` as :meth:`_fit` encoded it already, so a result is not encoded twice)."""
        frames = self.session.frames_to_send()
        if self._ws is None:
            return
        for frame in frames:
            if frame is res and encoded is not None:
                self._out.append(encoded)
                continue
            try:
                self._out.append(self.codec.encode(frame))
            except (FrameTooLarge, EncodeError) as exc:  # pre-checked for results; never a crash
                self.log.error("dropping an unsendable %s frame: %s", frame.t, exc)
        if self._out:
            self._write_soon()

    def _send_direct(self, res: Res) -> None:
        if self._ws is not None and self.session.is_open:
            self._out.append(self.codec.encode(res))
            self._write_soon()

    def _write_soon(self) -> None:
        """The send queue has frames: send them now, unless a writer is already at it (it
        sends everything queued before it returns).

        An eager start (3.12's eager tasks, by hand for 3.11, as the hub's writer): the
        writer runs in the caller's step up to its first real suspension — ``ws.send``
        suspends only while the transport pushes back — and a task carries it on from there.
        Not while the connection is closing: websockets then waits for the close under a
        timeout bound to the *current* task, which must be the writer's own.
        """
        ws = self._ws
        if self._writer is not None or ws is None:
            return
        if ws.state is not WsState.OPEN:
            task = asyncio.get_running_loop().create_task(
                self._write(ws), name="droidwire-link-writer"
            )
            self._writer = task
            task.add_done_callback(self._written)
            return
        self._writer = _EAGER
        carried = start_eagerly(
            self._write(ws),
            lambda rest: asyncio.get_running_loop().create_task(rest, name="droidwire-link-writer"),
        )
        if carried is None:
            return  # all sent in this step (_write reset self._writer)
        self._writer = carried
        carried.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        if self._writer is task:
            self._writer = None

    async def _write(self, ws: ClientConnection) -> None:
        """Send the queue until it is empty; the only writer while it runs, and only for
        ``ws`` (it stops when that connection is no longer the current one)."""
        try:
            while self._out and self._ws is ws:
                await ws.send(self._out[0])
                self._out.popleft()
                if len(self._out) < self.settings.send_queue_frames:
                    self._room.set()
            self._room.set()
        except ConnectionClosed as exc:
            if self._ws is ws:
                self.drop(classify_failure(exc))
        except Exception as exc:
            self.log.exception("link writer failed")
            if self._ws is ws:
                self.drop(f"writer failed: {type(exc).__name__}")
        finally:
            # In the same step as the last look at the queue: a frame queued from now on
            # starts a new writer.
            self._writer = None


# Link._writer while a writer runs eagerly, in the step that queued a frame.
_EAGER = object()
# Frames up to this size may be handled in the read callback (Link._frame_now).
FAST_FRAME_BYTES = 64 * 1024


class LinkConnection(ClientConnection):
    """websockets' client connection, with one hook: a complete binary frame that arrives
    while the link's reader waits with nothing queued is offered to ``frame_hook`` in the
    read callback (True: handled, not queued). Saves the reader's wake-up — a trip through
    the event loop — per request on the RPC path (docs/benchmarks.md)."""

    frame_hook: Callable[[bytes], bool] | None = None

    def process_event(self, event: Event) -> None:
        hook = self.frame_hook
        if (hook is not None and isinstance(event, Frame) and event.opcode is Opcode.BINARY
                and event.fin):
            queue = self.recv_messages
            if queue.get_in_progress and not queue.frames.queue and not queue.paused:
                data = event.data
                if hook(data if isinstance(data, bytes) else bytes(data)):
                    return
        super().process_event(event)


async def _close(ws: ClientConnection, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):
        await ws.close(int(code), reason[:120])


async def _maybe_await(value: Any) -> None:
    if asyncio.iscoroutine(value):
        await value
