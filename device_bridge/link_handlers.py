"""Running the controller's requests (a part of :class:`device_bridge.connection.Link`).

docs/design.md §3–4. An admitted ``req`` runs concurrently, bounded by
``handler_concurrency``; a handler that never waits (``immediate``: ``ping``, ``bridge.info``,
``devices.list``) runs in the step that read its request, without a task, while the bound
leaves room. Whatever a handler returns or raises becomes the request's result, into the
session's outbox until acked: an :class:`RpcError` as it is, a bug as ``internal``, a
result too large for a frame as ``bad_request`` — never a crash.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from device_bridge.link_writer import LinkWriter
from protocol.envelope import Req
from protocol.errors import EncodeError, ErrorCode, FrameTooLarge, RpcError

__all__ = ["Dispatch", "Immediate", "LinkHandlers"]

#: ``await dispatch(method, params)`` → result dict, or raise :class:`RpcError`.
Dispatch = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
#: ``immediate(method)`` → a handler that never waits (params → result dict, or raise
#: :class:`RpcError`), or None: that method goes through ``dispatch``.
Immediate = Callable[[str], Callable[[dict[str, Any]], dict[str, Any]] | None]


class LinkHandlers(LinkWriter):
    """Starting, running and finishing the handlers of admitted requests.

    A layer of :class:`~device_bridge.connection.Link` (over its writer, which sends the
    results), which owns the state below.
    """

    executed: int  # handlers started
    _dispatch: Dispatch
    _immediate: Immediate | None
    _clock: Callable[[], float]
    _sem: asyncio.Semaphore
    _tasks: dict[str, asyncio.Task[None]]
    _accepting: bool

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
