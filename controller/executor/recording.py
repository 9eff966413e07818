"""Every RPC of a run as a step of its log: :class:`RecordingGateway` wraps the executor's
:class:`~controller.executor.gateway.Gateway`, re-checks the caller's right before each step, and
records what a restarted controller needs to wait for a result again (docs/sandbox.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from controller.auth import DeviceRef
from controller.executor.gateway import (
    Gateway,
    Target,
)
from controller.executor.recovery import (
    ResumeContext,
)
from controller.executor.steps import MAX_DETAIL_TEXT, Step, StepLog
from controller.store import (
    utcnow,
)
from protocol.envelope import new_request_id
from protocol.errors import ErrorCode, RpcError
from protocol.methods import (
    InstallResult,
    InstrumentResult,
    Method,
)

__all__ = [
    "Reauth",
    "RecordingGateway",
    "ms_since",
    "small_detail",
]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


Reauth = Callable[[Target], Awaitable[None]]


class RecordingGateway:
    """Every RPC through the gateway as a step of the log (a wrapper that records)."""

    def __init__(
        self, gateway: Gateway, steps: StepLog, reauth: Reauth | None = None
    ) -> None:
        self.gateway = gateway
        self.steps = steps
        self.reauth = reauth  # re-checks the caller's right before each step

    async def call(
        self,
        target: Target,
        method: Method[P, R],
        params: P,
        *,
        timeout_s: float | None,
        resume: ResumeContext | None = None,
        check: bool = True,
    ) -> R:
        """``check=False``: a step that runs whatever the caller's right (cleanup)."""
        sent = params.model_dump(exclude_unset=True, exclude_none=True)
        shown = {k: v for k, v in sent.items() if k not in ("test_code", "apk")}
        if "apk" in sent:
            shown["apk_bytes"] = len(sent["apk"])
        where = str(target) if not isinstance(target, str) else f"bridge {target}"
        if check and self.reauth is not None:
            # When the re-check began: it read the store as of then or later, so a step whose
            # re-check began after a revocation committed cannot have passed it.
            checked = {"reauth_at": utcnow().isoformat()}
            try:
                await self.reauth(target)
            except RpcError as exc:
                await self.steps.record(
                    "rpc", "refused", method=method.name, target=where, **checked,
                    error={"code": exc.code.value, "message": exc.message, **small_detail(exc.data)},
                )
                raise
            extra_in: dict[str, Any] = dict(checked)
        else:
            extra_in = {}
        request_id: str | None = None
        session_of = getattr(self.gateway, "session_of", None)
        if resume is not None and isinstance(target, DeviceRef) and callable(session_of):
            # A restarted controller can wait for this result again (recovery.py): the request
            # id is chosen here and recorded with the bridge session it goes out on.
            bridge_session = session_of(target.bridge_id)
            if isinstance(bridge_session, str):
                request_id = new_request_id()
                extra_in.update(request_id=request_id, bridge_session=bridge_session,
                                resume=resume.model_dump(mode="json"))
        step = await self.steps.begin(
            "rpc", method=method.name, target=where, params=shown, **extra_in
        )
        started = time.monotonic()
        try:
            return await self._call(step, started, target, method, params, timeout_s,
                                    request_id)
        finally:
            settle = getattr(self.gateway, "settle", None)
            if request_id is not None and isinstance(target, DeviceRef) and callable(settle):
                # Only now that the step (with the result) is written: see HubGateway.call.
                with contextlib.suppress(Exception):
                    await asyncio.shield(settle(target.bridge_id, request_id))

    async def _call(
        self,
        step: Step,
        started: float,
        target: Target,
        method: Method[P, R],
        params: P,
        timeout_s: float | None,
        request_id: str | None,
    ) -> R:
        try:
            if request_id is not None:
                result = await self.gateway.call(  # type: ignore[call-arg]
                    target, method, params, timeout_s=timeout_s, request_id=request_id
                )
            else:
                result = await self.gateway.call(target, method, params, timeout_s=timeout_s)
        except RpcError as exc:
            status = "refused" if exc.code is ErrorCode.FORBIDDEN else "failed"
            await self.steps.end(
                step,
                status,
                ms=ms_since(started),
                error={"code": exc.code.value, "message": exc.message, **small_detail(exc.data)},
            )
            raise
        except asyncio.CancelledError:
            # The run was cancelled mid-call: the step ends, it does not stay "running".
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.steps.end(step, "failed", ms=ms_since(started), error="cancelled")
                )
            raise
        except Exception as exc:
            await self.steps.end(step, "failed", ms=ms_since(started), error=repr(exc)[:300])
            raise
        extra: dict[str, Any] = {}
        if isinstance(result, InstallResult) and result.package and not result.existed:
            # Kept so that a controller restarted mid-run still knows what to uninstall (never
            # a package that was on the device before the run: that one is the owner's).
            extra["package"] = result.package
        if (request_id is not None and isinstance(result, InstrumentResult)
                and len(result.output) <= MAX_DETAIL_TEXT):
            # Kept so that a replica taking over a run that died after its tests ran finishes
            # it (logcat, cleanup, verdict) instead of running the tests again (recovery.py).
            extra["result"] = result.model_dump(exclude_unset=True)
        await self.steps.end(step, "ok", ms=ms_since(started), **extra)
        return result


def small_detail(data: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (data or {}).items() if k != "output"}


def ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
