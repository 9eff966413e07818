"""A user's steps on a device: authorize, call, audit — in that order, every time.

docs/security.md ("Threat model"), docs/design.md §6. :class:`UserCalls` is the part of
:class:`controller.hub.Hub` that users' requests go through (REST, MCP, the dashboard,
streams and tunnels): THE authorization check (:func:`controller.auth.authorize`) when each
step runs, not only when a request arrived; the owner's health gate; the call; and an audit
entry, refusals and failures included. :func:`vouch` / :func:`vouched` add ``as_owner`` to a
call's params for the device's owner only (the bridge's ``full`` profile is the owner's alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from controller.audit import AuditLog
from controller.auth.authorization import Action, DeviceRef, Principal, authorize
from controller.hub.logcat import LogcatStreams, StreamHold
from controller.hub.streams import LogStream
from controller.store import Store
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LOGCAT_SUBSCRIBE, METHODS, Method

__all__ = ["UserCalls", "vouch", "vouched"]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
log = logging.getLogger("droidwire.controller.hub")


class UserCalls:
    """Users' calls and streams on devices (mixed into :class:`controller.hub.Hub`, which
    provides what is declared here)."""

    store: Store
    audit: AuditLog
    logcat: LogcatStreams
    # Refuses a call on a device that may not serve now (the owner's health thresholds,
    # controller.health); raises RpcError. Set by the app.
    gate: Callable[[DeviceRef], None] | None

    if TYPE_CHECKING:
        async def call(self, target: DeviceRef | str, method: Method[P, R], params: P, *,
                       timeout_s: float | None = None) -> R: ...

    async def device_call(
        self,
        principal: Principal,
        device: DeviceRef,
        method: Method[P, R],
        params: P | Mapping[str, Any],
        *,
        timeout_s: float | None = None,
        action: str | None = None,
        audited: bool = True,
    ) -> R:
        """A user's call on a device: authorize, call, audit (refusals and failures too).

        ``params``: the params model, or the user's plain params without ``serial``
        (validated here: invalid ones are a ``bad_request`` audited as such).
        ``audited=False``: a step of something audited once as a whole (a stream's periodic
        reads): authorized all the same, and only a refusal is audited."""
        name = action or method.name
        try:
            await authorize(principal, device, Action.USE, store=self.store)
            if self.gate is not None:
                self.gate(device)
        except RpcError as exc:
            await self.audit_device(principal, name, device, exc)
            raise
        try:
            typed = params if isinstance(params, BaseModel) else method.parse_params(
                {**params, "serial": device.serial})
            result = await self.call(device, method, vouched(principal, device, typed),
                                     timeout_s=timeout_s)
        except RpcError as exc:
            if audited or exc.code is ErrorCode.FORBIDDEN:
                await self.audit_device(principal, name, device, exc)
            raise
        if audited:
            await self.audit_device(principal, name, device, None)
        return result

    async def audit_device(
        self, principal: Principal, action: str, device: DeviceRef, error: RpcError | None
    ) -> None:
        detail: dict[str, Any] = {}
        if error is not None and error.data and "rule" in error.data:
            detail["rule"] = str(error.data["rule"])[:128]
        try:
            await self.audit.record(
                principal,
                action,
                device=str(device),
                outcome="ok" if error is None else error.code.value,
                detail=detail,
            )
        except Exception:  # a failing audit write is logged; it never hides the call's outcome
            log.exception("audit write failed for %s on %s", action, device)

    async def device_stream(
        self, principal: Principal, device: DeviceRef, params: dict[str, Any] | None = None
    ) -> LogStream:
        """A user's logcat stream on a device: authorize, subscribe, audit (here, also when
        the bridge is held by another replica, which then relays it: :meth:`LogcatStreams.subscribe`)."""
        action = "device.logcat.stream"
        hold = StreamHold(principal.user_id, device.bridge_id,
                           principal.user_id != device.owner_id and not principal.is_admin)
        try:
            await authorize(principal, device, Action.USE, store=self.store)
            self.logcat.reserve(hold)  # before the await: concurrent opens count too
            stream = await self.logcat.subscribe(device, vouch(
                principal, device, LOGCAT_SUBSCRIBE.name, params))
            hold.stream = stream
        except RpcError as exc:
            self.logcat.release(hold)
            await self.audit_device(principal, action, device, exc)
            raise
        except BaseException:
            self.logcat.release(hold)
            raise
        await self.audit_device(principal, action, device, None)
        return stream


def vouch(
    principal: Principal, device: DeviceRef, method: str, params: dict[str, Any] | None
) -> dict[str, Any] | None:
    """``params`` with ``as_owner`` when the caller owns the device (the bridge's ``full``
    profile is the owner's alone): never for a borrower nor an admin acting on another's."""
    if principal.user_id != device.owner_id or principal.bridge_id is not None:
        return params
    spec = METHODS.get(method)
    fields = getattr(spec.params, "model_fields", {}) if spec is not None else {}
    if "as_owner" not in fields:
        return params
    return {**(params or {}), "as_owner": True}


def vouched(principal: Principal, device: DeviceRef, params: P) -> P:
    """:func:`vouch` for a params model."""
    if principal.user_id != device.owner_id or principal.bridge_id is not None:
        return params
    if "as_owner" not in type(params).model_fields:
        return params
    return params.model_copy(update={"as_owner": True})
