"""May they do this: actions, scopes, principals, and the one authorization check.

:func:`authorize` is THE authorization check: every device call, from REST, MCP, the web
dashboard and the executor, goes through it. Its rules, in order (docs/design.md §6):

1. A bridge token only connects a bridge: ``forbidden`` for anything else.
2. Who may see the device at all: an admin, the owner of its bridge, or a user holding a
   *live* grant on it (not revoked, ``until`` still ahead of :func:`now`). Anyone else gets
   ``not_found``: a stranger cannot even learn that the serial exists.
3. What they may do with it: admins and the owner anything; a borrower ``view`` and ``use``
   but never ``lend`` (``forbidden``, rule ``borrower_cannot_lend``): a borrower cannot
   re-lend, nor revoke the owner's loans.
4. The token's scopes (:class:`Scope`) on top: ``view`` needs ``devices:read``, ``use``
   ``devices:use``, ``lend`` ``devices:lend`` (``forbidden``, rule ``missing_scope``).

Grants are read from the store at every call, against :func:`now` at that moment: nothing is
cached, so a grant revoked or expired stops working at once. The clock is injectable
(:func:`use_clock`) so tests move time instead of sleeping. :func:`visible_devices` filters a
list in one query with the same rules; :func:`may` is :func:`authorize` as a boolean.

Scopes: a token with no scopes is unrestricted (every token made before scopes existed, and
the bootstrap token). A scoped token may do only what its scopes name; ``admin`` implies every
other scope, and an admin user's token acts as an admin only if it is unrestricted or holds
``admin``. A token can never mint, rotate or revoke a token with powers it does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import or_, select

from controller.store import Bridge, Device, Grant, Store, TokenKind, utcnow
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "ACTION_SCOPE", "ALL_SCOPES", "Action", "Clock", "DeviceRef", "Principal", "Scope",
    "authorize", "check_scope", "effective_scopes", "live_grant_filter", "may", "now",
    "use_clock", "visible_devices",
]


class Action(StrEnum):
    VIEW = "view"  # see it in a list, read its state
    USE = "use"  # shell, logcat, install, run tests, screenshots, input
    LEND = "lend"  # grant it to someone else (owner and admin only, never a borrower)


class Scope(StrEnum):
    """What a token may do, on top of what its user may do (never more)."""

    DEVICES_READ = "devices:read"  # list devices, read their state
    DEVICES_USE = "devices:use"  # shell, logcat, screenshots, input (implies devices:read)
    DEVICES_LEND = "devices:lend"  # grant and revoke loans (implies devices:read)
    RUNS_READ = "runs:read"  # read runs and their results
    RUNS_WRITE = "runs:write"  # start and cancel runs (implies runs:read)
    ADMIN = "admin"  # an admin's powers, if the user is an admin (implies every scope)


# Each scope with the scopes it implies (itself included).
_IMPLIED: dict[Scope, frozenset[Scope]] = {
    Scope.DEVICES_READ: frozenset({Scope.DEVICES_READ}),
    Scope.DEVICES_USE: frozenset({Scope.DEVICES_USE, Scope.DEVICES_READ}),
    Scope.DEVICES_LEND: frozenset({Scope.DEVICES_LEND, Scope.DEVICES_READ}),
    Scope.RUNS_READ: frozenset({Scope.RUNS_READ}),
    Scope.RUNS_WRITE: frozenset({Scope.RUNS_WRITE, Scope.RUNS_READ}),
    Scope.ADMIN: frozenset(Scope),
}
ALL_SCOPES: frozenset[Scope] = frozenset(Scope)
# The scope each device action needs.
ACTION_SCOPE: dict[Action, Scope] = {
    Action.VIEW: Scope.DEVICES_READ,
    Action.USE: Scope.DEVICES_USE,
    Action.LEND: Scope.DEVICES_LEND,
}


def effective_scopes(scopes: Iterable[str]) -> frozenset[Scope]:
    """What a token's stored scopes allow: none stored means all; unknown names allow nothing."""
    names = list(scopes)
    if not names:
        return ALL_SCOPES
    out: set[Scope] = set()
    for name in names:
        try:
            out |= _IMPLIED[Scope(name)]
        except ValueError:
            continue  # a scope this version does not know grants nothing
    return frozenset(out)


# --- time -------------------------------------------------------------------------------

Clock = Callable[[], datetime]
_clock: Clock = utcnow


def now() -> datetime:
    """The current time as authorization sees it (timezone-aware UTC)."""
    return _clock()


def use_clock(clock: Clock | None) -> Clock:
    """Make ``clock`` the time every grant is checked against (None: the real clock);
    returns the clock it replaces, so a test can put it back."""
    global _clock
    previous, _clock = _clock, clock or utcnow
    return previous


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: a token, and the user it acts for."""

    token_id: str
    kind: TokenKind
    name: str  # the token's name: the user's, or the bridge's
    user_id: str
    user_name: str
    is_admin: bool
    bridge_id: str | None = None
    scopes: tuple[str, ...] = ()  # as stored on the token; empty means unrestricted

    @property
    def actor(self) -> str:
        """How the audit log names this caller."""
        return f"bridge:{self.name}" if self.kind is TokenKind.BRIDGE else self.user_name

    @property
    def allowed(self) -> frozenset[Scope]:
        return effective_scopes(self.scopes)

    def allows(self, scope: Scope) -> bool:
        return scope in self.allowed


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A device as authorization sees it: which bridge it hangs off, and whose that is."""

    bridge_id: str
    serial: str
    owner_id: str
    bridge_name: str | None = None

    @classmethod
    def on_bridge(cls, bridge: Principal, serial: str) -> DeviceRef:
        """A device reported by the bridge authenticated as ``bridge``: its owner is ours."""
        if bridge.kind is not TokenKind.BRIDGE or bridge.bridge_id is None:
            raise ValueError("not a bridge principal")
        return cls(bridge.bridge_id, serial, bridge.user_id, bridge.name)

    def __str__(self) -> str:
        return f"{self.bridge_name or self.bridge_id}~{self.serial}"


async def authorize(
    principal: Principal,
    device: DeviceRef,
    action: Action,
    *,
    store: Store,
    at: datetime | None = None,
) -> None:
    """THE authorization check for every device call; raises :class:`RpcError` on refusal.

    A caller who may not even see the device gets ``not_found`` (its existence is not
    disclosed); one who sees it but may not do this gets ``forbidden`` with a ``rule``.
    Grants are looked up in ``store`` now, at every call (``at``: the time to judge them
    at, :func:`now` by default).
    """
    if principal.kind is TokenKind.BRIDGE:
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "a bridge token only connects a bridge",
            {"rule": "bridge_token"},
        )
    if not (principal.is_admin or principal.user_id == device.owner_id):
        if not await _holds_live_grant(store, principal.user_id, device, at or now()):
            raise RpcError(ErrorCode.NOT_FOUND, f"no device {device.serial!r}")
        if action is Action.LEND:
            raise RpcError(
                ErrorCode.FORBIDDEN,
                "a borrowed device cannot be lent or its loans changed: ask its owner",
                {"rule": "borrower_cannot_lend"},
            )
    check_scope(principal, ACTION_SCOPE[action])


async def may(
    principal: Principal,
    device: DeviceRef,
    action: Action,
    *,
    store: Store,
    at: datetime | None = None,
) -> bool:
    """:func:`authorize` as a yes or no (for filtering; never for a refusal's message)."""
    try:
        await authorize(principal, device, action, store=store, at=at)
    except RpcError:
        return False
    return True


_D = TypeVar("_D")


async def visible_devices(
    principal: Principal,
    devices: Sequence[_D],
    *,
    store: Store,
    ref: Callable[[_D], DeviceRef],
    at: datetime | None = None,
) -> list[_D]:
    """The ``devices`` that ``principal`` may view, in their order: the rules of
    :func:`authorize` for ``view``, with the caller's live grants read in one query.

    ``ref`` maps an item to its :class:`DeviceRef` (e.g. ``lambda r: r.ref``).
    """
    if principal.kind is TokenKind.BRIDGE or not principal.allows(Scope.DEVICES_READ):
        return []
    if principal.is_admin:
        return list(devices)
    refs = [ref(d) for d in devices]
    if all(r.owner_id == principal.user_id for r in refs):
        return list(devices)
    lent = await _live_grant_keys(store, principal.user_id, at or now())
    return [
        d
        for d, r in zip(devices, refs, strict=True)
        if r.owner_id == principal.user_id or (r.bridge_id, r.serial) in lent
    ]


def check_scope(principal: Principal, scope: Scope) -> None:
    """``forbidden`` (rule ``missing_scope``) unless the caller's token holds ``scope``."""
    if not principal.allows(scope):
        raise RpcError(
            ErrorCode.FORBIDDEN,
            f"this token lacks the {scope.value!r} scope",
            {"rule": "missing_scope", "scope": scope.value},
        )


def live_grant_filter(at: datetime) -> Any:
    """The SQL condition on :class:`Grant` for "in force at ``at``"."""
    return (Grant.revoked_at.is_(None)) & (or_(Grant.until.is_(None), Grant.until > at))


async def _holds_live_grant(store: Store, user_id: str, device: DeviceRef, at: datetime) -> bool:
    query = (
        select(Grant.id)
        .join(Device, Grant.device_id == Device.id)
        .join(Bridge, Device.bridge_id == Bridge.id)
        .where(
            Grant.user_id == user_id,
            Device.bridge_id == device.bridge_id,
            Device.serial == device.serial,
            # A grant only holds while its lender still owns the bridge.
            Grant.owner_id == Bridge.owner_id,
            live_grant_filter(at),
        )
        .limit(1)
    )
    async with store.session() as session:
        return (await session.execute(query)).first() is not None


async def _live_grant_keys(store: Store, user_id: str, at: datetime) -> set[tuple[str, str]]:
    query = (
        select(Device.bridge_id, Device.serial)
        .join(Grant, Grant.device_id == Device.id)
        .join(Bridge, Device.bridge_id == Bridge.id)
        .where(Grant.user_id == user_id, Grant.owner_id == Bridge.owner_id, live_grant_filter(at))
    )
    async with store.session() as session:
        return {(b, s) for b, s in (await session.execute(query)).all()}

