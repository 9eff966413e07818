"""Work whose authorization lapses ends: revocation stops runs and streams within moments.

Authorization is checked when a call starts (:func:`controller.auth.authorize`); work that
outlasts a call — a queued or running sandbox run, a live logcat stream (REST, the
dashboard's live tail) — is *watched*: :class:`AccessWatch` re-checks it, and calls its
``on_lapse`` once the caller's right no longer holds. A right lapses when:

* its token is revoked or rotated, or its user disabled (every principal, owners and admins
  included);
* the loan it rests on is revoked or expires (a borrower);
* the token's scopes or the device's ownership no longer allow it.

It re-checks a watch at once when something that may end it happens — a token revoked
(``token_changed``, from the app's revocation hooks), a grant revoked (``user_changed``) —
at the exact moment the loan it rests on expires, and every ``recheck_s`` in any case (a
safety net: a replica that missed a cluster message still catches up). In cluster mode the
replica where the revocation happened tells the others (the cluster's ``revoked`` message),
and each re-checks its own watches.

One re-check is :func:`check_access`: the token read by id (live, not revoked), then
:func:`controller.auth.authorize` for the device — the same rules, read at that moment. Every
device step of a run re-checks (docs/sandbox.md), so the token reads of re-checks that wait
at the same moment (the runs of a fan-out, a fleet's runs) share one query
(:mod:`controller.store.batched`: never answered by a read that started before the ask).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

from sqlalchemy import bindparam, func, select

from controller.auth.authorization import (
    Action,
    DeviceRef,
    Principal,
    authorize,
    live_grant_filter,
    now,
)
from controller.store import Bridge, Device, Grant, Store, Token, User
from controller.store.batched import ReadsPerStore
from protocol.errors import ErrorCode, RpcError

__all__ = ["ACCESS_REVOKED", "AccessWatch", "check_access", "lapse_reason", "until_lapsed"]

log = logging.getLogger("droidwire.controller.access")

ACCESS_REVOKED = "access_revoked"  # the rule (and a run's PENDING reason code)
_EPSILON_S = 0.005  # past a grant's ``until``: it no longer holds at that instant


async def check_access(
    store: Store,
    principal: Principal,
    device: DeviceRef | None = None,
    action: Action = Action.USE,
) -> None:
    """Raise ``forbidden`` (rule ``access_revoked``) unless ``principal``'s token is live and
    — with a device — :func:`authorize` still allows ``action`` on it, now."""
    state = await _LIVE_READS.get(store, principal.token_id)
    # A disabled user's tokens end their work as revoked ones do (docs/security.md).
    if state is None or state.revoked_at is not None or state.disabled_at is not None:
        raise RpcError(ErrorCode.FORBIDDEN, "the token was revoked", {"rule": ACCESS_REVOKED,
                                                                        "why": "token"})
    if device is None:
        return
    try:
        await authorize(principal, device, action, store=store)
    except RpcError as exc:
        why = "grant" if exc.code is ErrorCode.NOT_FOUND else str((exc.data or {}).get("rule"))
        raise RpcError(
            ErrorCode.FORBIDDEN, "access to this device ended", {"rule": ACCESS_REVOKED,
                                                                  "why": why}
        ) from None


async def _token_states(store: Store, ids: Sequence[str]) -> dict[str, Any]:
    """Revocation and the owner's disabling of these tokens, by id, in one indexed read."""
    async with store.engine.connect() as conn:
        return {row.id: row for row in await conn.execute(_TOKEN_STATES, {"ids": list(ids)})}


# Token reads of re-checks, coalesced per store (one reader at a time each; nothing cached).
_LIVE_READS: ReadsPerStore[Any] = ReadsPerStore(_token_states)

_TOKEN_STATES = (
    select(Token.id, Token.revoked_at, User.disabled_at)
    .join(User, User.id == Token.owner_id)
    .where(Token.id.in_(bindparam("ids", expanding=True)))
)


def lapse_reason(exc: RpcError) -> str:
    """What a lapsed right tells its holder (never the device's name: a lapsed loan hides it)."""
    why = (exc.data or {}).get("why")
    if why == "token":
        return "forbidden: the token was revoked"
    if why == "grant":
        return "forbidden: access to this device ended (the loan was revoked or expired)"
    return f"forbidden: access to this device ended ({why or exc.code.value})"


async def _loan_ends(store: Store, principal: Principal, device: DeviceRef) -> datetime | None:
    """When the latest live loan of ``device`` to ``principal`` ends (None: never, or not
    a borrower)."""
    if principal.is_admin or principal.user_id == device.owner_id:
        return None
    at = now()
    query = (
        select(func.count(), func.count(Grant.until), func.max(Grant.until))
        .join(Device, Grant.device_id == Device.id)
        .join(Bridge, Device.bridge_id == Bridge.id)
        .where(Grant.user_id == principal.user_id, Device.bridge_id == device.bridge_id,
               Device.serial == device.serial, Grant.owner_id == Bridge.owner_id,
               live_grant_filter(at))
    )
    async with store.session() as session:
        total, bounded, latest = (await session.execute(query)).one()
    if not total or bounded < total:  # none live (the check refuses), or one without end
        return None
    return latest


@dataclass(eq=False)
class _Watch:
    id: int
    principal: Principal
    device: DeviceRef | None
    on_lapse: Callable[[str], None]
    action: Action = Action.USE
    next_check: float = 0.0
    ended: bool = False
    checking: bool = field(default=False)


class AccessWatch:
    """Watches long-lived work and ends it when its caller's right lapses (see module doc).

    ``async with AccessWatch(store):`` runs its loop; :meth:`watch` registers work."""

    def __init__(self, store: Store, *, recheck_s: float = 5.0) -> None:
        self.store = store
        self.recheck_s = recheck_s
        self._watches: dict[int, _Watch] = {}
        self._due: set[int] = set()
        self._ids = itertools.count(1)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.lapsed = 0  # how many watches ended (a figure for tests and metrics)

    async def __aenter__(self) -> AccessWatch:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._watches.clear()

    def __len__(self) -> int:
        return len(self._watches)

    def watch(
        self,
        principal: Principal,
        device: DeviceRef | None,
        on_lapse: Callable[[str], None],
        *,
        action: Action = Action.USE,
    ) -> Callable[[], None]:
        """Call ``on_lapse(reason)`` (once) when ``principal`` may no longer ``action`` the
        ``device`` (or, without one, when its token is revoked). Returns the function that
        stops watching. The first check runs at once (it learns when a loan ends)."""
        w = _Watch(next(self._ids), principal, device, on_lapse, action)
        self._watches[w.id] = w
        self._due.add(w.id)
        self._poke()

        def unwatch() -> None:
            w.ended = True
            self._watches.pop(w.id, None)
            self._due.discard(w.id)

        return unwatch

    def token_changed(self, token_id: str) -> None:
        """A token was revoked or rotated (here, or on another replica): re-check its work."""
        self._mark(lambda w: w.principal.token_id == token_id)

    def user_changed(self, user_id: str | None = None) -> None:
        """A grant of ``user_id`` (None: of anyone) was revoked: re-check their work."""
        self._mark(lambda w: user_id is None or w.principal.user_id == user_id)

    async def on_token_revoked(self, token: Any) -> None:
        """The app's revocation hook."""
        self.token_changed(str(token.id))

    def _mark(self, which: Callable[[_Watch], bool]) -> None:
        marked = [w.id for w in self._watches.values() if which(w)]
        if marked:
            self._due.update(marked)
            self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _loop(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            waits = [w.next_check for w in self._watches.values()]
            if not self._due:
                timeout = max(0.0, min(waits) - t) if waits else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
            self._wake.clear()
            t = loop.time()
            due = [w for w in list(self._watches.values())
                   if w.id in self._due or w.next_check <= t]
            self._due.difference_update(w.id for w in due)
            if due:
                # Concurrently: a slow store answer for one watch must not delay the others.
                await asyncio.gather(*(self._check(w) for w in due), return_exceptions=True)

    async def _check(self, w: _Watch) -> None:
        loop = asyncio.get_running_loop()
        try:
            await check_access(self.store, w.principal, w.device, w.action)
            ends = (await _loan_ends(self.store, w.principal, w.device)
                    if w.device is not None else None)
        except RpcError as exc:
            if exc.code is not ErrorCode.FORBIDDEN:
                log.warning("access re-check failed (%s); trying again", exc.code.value)
                w.next_check = loop.time() + min(self.recheck_s, 1.0)
                return
            if w.ended:
                return
            w.ended = True
            self._watches.pop(w.id, None)
            self.lapsed += 1
            reason = lapse_reason(exc)
            log.info("%s: %s%s", w.principal.actor, reason,
                     f" (device {w.device})" if w.device is not None else "")
            try:
                w.on_lapse(reason)
            except Exception:
                log.exception("ending lapsed work failed")
            return
        except Exception:  # the store away: try again at the next tick, keep the work
            log.warning("access re-check failed; trying again", exc_info=True)
            w.next_check = loop.time() + min(self.recheck_s, 1.0)
            return
        nxt = loop.time() + self.recheck_s
        if ends is not None:
            nxt = min(nxt, loop.time() + max(0.0, (ends - now()).total_seconds()) + _EPSILON_S)
        w.next_check = nxt


async def until_lapsed(
    watch: AccessWatch | None,
    store: Store,
    recheck_s: float,
    principal: Principal,
    device: DeviceRef,
) -> str:
    """Return the refusal (``"forbidden: …"``) once ``principal`` may no longer use
    ``device``: its token revoked (owners and admins too), its loan revoked or expired. With
    the app's ``watch`` it is told at once (a revocation anywhere in the cluster, a loan's
    end); without one, re-checked every ``recheck_s``. Live streams (logcat, the screen) end
    on it."""
    if watch is not None:
        lapsed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def lapse(reason: str) -> None:
            if not lapsed.done():
                lapsed.set_result(reason)

        unwatch = watch.watch(principal, device, lapse)
        try:
            return await lapsed
        finally:
            unwatch()
    while True:
        await asyncio.sleep(recheck_s)
        try:
            await check_access(store, principal, device)
        except RpcError as exc:
            log.info("a stream of %s for %s ends: %s", device.serial, principal.actor, exc)
            # Not exc.message: a lapsed loan answers not_found, which would name the device.
            return lapse_reason(exc)
