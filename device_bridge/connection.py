"""The bridge's dial-out link to the controller: one WebSocket at a time, resumed forever.

docs/design.md §3–4, docs/protocol.md. The wire rules live in :mod:`protocol` (sans I/O); the
link is the I/O around :class:`protocol.session.BridgeSession`. Its parts:

* :mod:`device_bridge.link_dial` reaching the controller: ``URL/v1/bridge``, subprotocol
  ``droidwire.v1``, the token in an ``Authorization: Bearer`` header (never in the URL),
  compression off, websockets' own keepalive and the frame cap;
* :mod:`device_bridge.link_failure` why a connection ended and whether to retry
  (:func:`classify_failure`), and the exception tree;
* :mod:`device_bridge.link_handlers` running the admitted requests, concurrently (bounded by
  ``handler_concurrency``) or, for a handler that never waits, in the step that read them;
* :mod:`device_bridge.link_writer` the send queue and its one eager writer;

and this module, :class:`Link`, which holds them together:

* send ``hello`` (inventory, capabilities, held ids) on every connect, wait for ``welcome``
  within ``handshake_timeout_s``, then read and serve frames, results through the session's
  outbox until acked;
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

The public names of those modules are importable from here too (``LinkError``, ``Failure``,
``bridge_url`` …).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import random as _random
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection

from device_bridge import link_dial
from device_bridge.link_dial import BRIDGE_PATH, LinkConnection, bridge_url
from device_bridge.link_failure import (
    BudgetExhausted,
    Failure,
    LinkError,
    LinkRefused,
    classify_failure,
)
from device_bridge.link_handlers import Dispatch, Immediate
from device_bridge.link_reader import LinkReader
from protocol.closecodes import CloseCode
from protocol.codec import Codec
from protocol.envelope import (
    SUBPROTOCOL,
    Capabilities,
    DeviceInfo,
    Welcome,
)
from protocol.errors import (
    EncodeError,
    FrameTooLarge,
    InvalidState,
)
from protocol.session import BridgeSession, WelcomeOutcome
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


#: ``await describe()`` → the capabilities and the full inventory for ``hello``.
Describe = Callable[[], Awaitable[tuple[Capabilities, Sequence[DeviceInfo]]]]


class _LinkLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Every line of a link names its bridge (once welcomed) and its session (namespaced, with ids)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra: Any = self.extra
        session: BridgeSession = extra["link"].session
        return f"[bridge {session.bridge_id or '-'} session {session.session_id[:8]}] {msg}", kwargs


class Link(LinkReader):
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

    async def round_trip(self) -> float:
        """The link's round trip now, in seconds: a WebSocket ping and its pong (answered by
        the controller's WebSocket layer, not its application). :class:`LinkError` when the
        link is not open."""
        ws = self._ws
        if ws is None or not self.is_open:
            raise LinkError("the link is not open")
        return float(await (await ws.ping()))

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
        if self.session.has_frames:
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
        dial = asyncio.create_task(
            link_dial.dial(url, token=self._token, settings=self.settings, ssl=self._ssl,
                           software=self.software),
            name="droidwire-link-dial",
        )
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

    # -- what a welcome changes --------------------------------------------------------------

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


async def _maybe_await(value: Any) -> None:
    if asyncio.iscoroutine(value):
        await value
