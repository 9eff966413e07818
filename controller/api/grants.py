"""``/v1/grants``: lend a device to a user until a time, list loans, revoke them (docs/design.md §6, §9).

A device belongs to its bridge's owner. The owner (or an admin) grants it to another user,
optionally until a time; revoking ends the loan at once. Everything here goes through
:func:`controller.auth.authorize` with ``lend``, so the rules are the one check's: a borrower
may see the device but never lend it (403 ``borrower_cannot_lend``), a stranger cannot even
name it (404).

``device`` is ``SERIAL`` or ``BRIDGE~SERIAL``, resolved like the devices API among the devices
the caller may see, against the store's record of devices seen (a device must have been
reported once to be lent): none → 404, several → 409 with the candidates.

Decisions where the spec was open:

- A new grant for a device and user that already hold a live one replaces it (the old one is
  revoked in the same transaction, and named in ``replaces``): "lend it until Friday" is what
  the owner meant, not a second loan.
- ``until`` must be timezone-aware and in the future; lending to oneself is refused (400).
- ``GET`` shows live grants by default, and ended ones too with ``?all=true``. A user sees the
  grants on devices they own and the grants they hold; an admin sees every grant.
- Revoking is idempotent (204 again for an ended grant). The grant's holder sees it, so their
  attempt is 403, not 404; anyone else's is 404.

Every change, and every refused change, is written to the audit log (``grant.create``,
``grant.revoke``) with the device and the users involved.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import or_, select, update
from sqlalchemy.orm import aliased

from controller.api.refusals import audited_refusal
from controller.auth.authorization import (
    Action,
    DeviceRef,
    Principal,
    authorize,
    live_grant_filter,
    now,
    visible_devices,
)
from controller.auth.http import DeviceReader, UserPrincipal
from controller.auth.tokens import NAME_PATTERN, is_row_id
from controller.services import services_of
from controller.store import Bridge, Device, Grant, Reservation, Store, User
from protocol.errors import ErrorCode, RpcError

__all__ = [
    "GrantCreate",
    "GrantOut",
    "GrantStatus",
    "SeenDevice",
    "create_grant",
    "list_grants",
    "resolve_seen_device",
    "revoke_grant",
    "router",
]

router = APIRouter(prefix="/v1/grants", tags=["grants"])

SEPARATOR = "~"  # BRIDGE~SERIAL, as in the devices API
MAX_DEVICE_CHARS = 400


class GrantStatus(StrEnum):
    LIVE = "live"
    EXPIRED = "expired"
    REVOKED = "revoked"


class GrantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str = Field(
        min_length=1, max_length=MAX_DEVICE_CHARS, description="SERIAL or BRIDGE~SERIAL"
    )
    user: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    until: AwareDatetime | None = Field(default=None, description="omitted: until revoked")

    @field_validator("until")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        try:
            return value.astimezone(UTC)
        except OverflowError:  # e.g. 9999-12-31T23:59-14:00 is past the last representable day
            raise ValueError("'until' is out of range") from None


class GrantOut(BaseModel):
    id: str
    device: str = Field(description="BRIDGE~SERIAL")
    serial: str
    bridge: str
    owner: str
    user: str
    created_at: datetime
    until: datetime | None
    revoked_at: datetime | None
    status: GrantStatus
    replaces: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SeenDevice:
    """A device from the store's record, with what authorization needs."""

    device_id: str
    bridge_id: str
    bridge: str
    serial: str
    owner_id: str

    @property
    def ref(self) -> DeviceRef:
        return DeviceRef(self.bridge_id, self.serial, self.owner_id, self.bridge)

    @property
    def name(self) -> str:
        return f"{self.bridge}{SEPARATOR}{self.serial}"


async def resolve_seen_device(store: Store, principal: Principal, text: str) -> SeenDevice:
    """``SERIAL`` or ``BRIDGE~SERIAL`` → the one device seen that ``principal`` may view."""
    if not text or len(text) > MAX_DEVICE_CHARS or not text.isprintable():
        raise RpcError(ErrorCode.BAD_REQUEST, "a device is SERIAL or BRIDGE~SERIAL")
    bridge, sep, serial = text.partition(SEPARATOR)
    query = select(Device.id, Bridge.id, Bridge.name, Device.serial, Bridge.owner_id).join(
        Bridge, Device.bridge_id == Bridge.id
    )
    if sep:
        query = query.where(Bridge.name == bridge, Device.serial == serial)
    else:
        query = query.where(Device.serial == text)
    async with store.session() as session:
        rows = (await session.execute(query.order_by(Bridge.name))).all()
    seen = [SeenDevice(*row) for row in rows]
    candidates = await visible_devices(principal, seen, store=store, ref=lambda d: d.ref)
    if len(candidates) > 1 and not principal.is_admin:
        # The caller's own device wins over one lent to them (a lent one: BRIDGE~SERIAL).
        candidates = [d for d in candidates if d.owner_id == principal.user_id] or candidates
    if not candidates:
        raise RpcError(ErrorCode.NOT_FOUND, f"no device {text[:200]!r}")
    if len(candidates) > 1:
        ids = [d.name for d in candidates]
        raise RpcError(
            ErrorCode.CONFLICT,
            f"{len(ids)} devices have serial {text[:200]!r}: name one as BRIDGE~SERIAL",
            {"candidates": ids},
        )
    return candidates[0]


def _no_device_or_user() -> RpcError:
    """A non-admin's refused grant when its device or its user is unknown (not which)."""
    return RpcError(ErrorCode.NOT_FOUND, "no such device, or no such user, to lend to")


def _status(grant: Grant, at: datetime) -> GrantStatus:
    if grant.revoked_at is not None:
        return GrantStatus.REVOKED
    if grant.until is not None and grant.until <= at:
        return GrantStatus.EXPIRED
    return GrantStatus.LIVE


async def create_grant(
    store: Store, principal: Principal, body: GrantCreate, *, at: datetime | None = None
) -> GrantOut:
    """Lend ``body.device`` to ``body.user``; the caller must be allowed to ``lend`` it."""
    at = at or now()
    try:
        device = await resolve_seen_device(store, principal, body.device)
    except RpcError as exc:
        if exc.code is ErrorCode.NOT_FOUND and not principal.is_admin:
            raise _no_device_or_user() from None
        raise
    await authorize(principal, device.ref, Action.LEND, store=store, at=at)
    if body.until is not None and body.until <= at:
        raise RpcError(ErrorCode.BAD_REQUEST, "'until' is in the past", {"field": "until"})
    async with store.session() as session, session.begin():
        user = (
            await session.execute(select(User).where(User.name == body.user))
        ).scalar_one_or_none()
        if user is None:
            if not principal.is_admin:
                # The same answer as an unknown device: a lender cannot tell which was wrong,
                # so refusals never reveal whether a user name exists.
                raise _no_device_or_user()
            raise RpcError(ErrorCode.NOT_FOUND, f"no user {body.user!r}", {"field": "user"})
        if user.id == device.owner_id:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"{body.user!r} owns this device already",
                {"field": "user"},
            )
        # A booking of someone else's in the loan's time is in the way (a loan to the booked
        # user themselves is fine: it is what the booking will give them).
        booked = list(
            (
                await session.execute(
                    select(Reservation.id).where(
                        Reservation.device_id == device.device_id,
                        Reservation.user_id != user.id,
                        Reservation.cancelled_at.is_(None),
                        Reservation.ends_at > at,
                        *([Reservation.starts_at < body.until] if body.until else []),
                    )
                )
            ).scalars()
        )
        if booked:
            raise RpcError(
                ErrorCode.CONFLICT,
                "the device is booked for someone else in that time: end the loan before the "
                "booking starts, or cancel the booking",
                {"conflicts": booked},
            )
        # One live loan per device and user: a new grant replaces the old (see module doc).
        replaced = list(
            (
                await session.execute(
                    select(Grant.id).where(
                        Grant.device_id == device.device_id,
                        Grant.user_id == user.id,
                        live_grant_filter(at),
                    )
                )
            ).scalars()
        )
        if replaced:
            await session.execute(
                update(Grant)
                .where(Grant.id.in_(replaced), Grant.revoked_at.is_(None))
                .values(revoked_at=at)
                .execution_options(synchronize_session=False)
            )
        grant = Grant(
            device_id=device.device_id,
            owner_id=device.owner_id,
            user_id=user.id,
            created_at=at,
            until=body.until,
        )
        session.add(grant)
        await session.flush()
        owner = await session.get(User, device.owner_id)
        assert owner is not None  # a foreign key
        return GrantOut(
            id=grant.id,
            device=device.name,
            serial=device.serial,
            bridge=device.bridge,
            owner=owner.name,
            user=user.name,
            created_at=grant.created_at,
            until=grant.until,
            revoked_at=None,
            status=GrantStatus.LIVE,
            replaces=replaced,
        )


_Owner = aliased(User, name="owner")
_Borrower = aliased(User, name="borrower")


def _grant_query() -> Any:
    return (
        select(
            Grant,
            Device.serial,
            Bridge.name,
            Bridge.id,
            Bridge.owner_id,
            _Owner.name,
            _Borrower.name,
        )
        .join(Device, Grant.device_id == Device.id)
        .join(Bridge, Device.bridge_id == Bridge.id)
        .join(_Owner, Grant.owner_id == _Owner.id)
        .join(_Borrower, Grant.user_id == _Borrower.id)
    )


def _out(row: Any, at: datetime) -> GrantOut:
    grant, serial, bridge, _bridge_id, _owner_id, owner, user = row
    return GrantOut(
        id=grant.id,
        device=f"{bridge}{SEPARATOR}{serial}",
        serial=serial,
        bridge=bridge,
        owner=owner,
        user=user,
        created_at=grant.created_at,
        until=grant.until,
        revoked_at=grant.revoked_at,
        status=_status(grant, at),
    )


async def list_grants(
    store: Store,
    principal: Principal,
    *,
    include_ended: bool = False,
    at: datetime | None = None,
    to_me: bool = False,
) -> list[GrantOut]:
    """Grants on the caller's devices and grants they hold (every grant for an admin);
    ``to_me``: only the loans made to the caller (what they were lent, in one place)."""
    at = at or now()
    query = _grant_query()
    if to_me:
        query = query.where(Grant.user_id == principal.user_id, Grant.owner_id == Bridge.owner_id)
    elif not principal.is_admin:
        query = query.where(
            or_(Bridge.owner_id == principal.user_id, Grant.user_id == principal.user_id)
        )
    if not include_ended:
        query = query.where(live_grant_filter(at))
    async with store.session() as session:
        rows = (await session.execute(query.order_by(Grant.created_at, Grant.id))).all()
    return [_out(row, at) for row in rows]


async def revoke_grant(
    store: Store, principal: Principal, grant_id: str, *, at: datetime | None = None
) -> GrantOut:
    """End a grant now (idempotent); returns it as it stands after."""
    at = at or now()
    if not is_row_id(grant_id):
        raise RpcError(ErrorCode.NOT_FOUND, f"no grant {grant_id[:64]!r}")
    async with store.session() as session:
        row = (await session.execute(_grant_query().where(Grant.id == grant_id))).one_or_none()
    if row is None:
        raise RpcError(ErrorCode.NOT_FOUND, f"no grant {grant_id!r}")
    grant, serial, bridge, bridge_id, owner_id = row[0], row[1], row[2], row[3], row[4]
    holder = grant.user_id == principal.user_id
    if not (principal.is_admin or principal.user_id == owner_id or holder):
        raise RpcError(ErrorCode.NOT_FOUND, f"no grant {grant_id!r}")
    try:
        await authorize(
            principal,
            DeviceRef(bridge_id, serial, owner_id, bridge),
            Action.LEND,
            store=store,
            at=at,
        )
    except RpcError as exc:
        if exc.code is not ErrorCode.NOT_FOUND:
            raise
        # The holder of an ended grant no longer sees the device, but sees the grant itself.
        raise RpcError(
            ErrorCode.FORBIDDEN,
            "only the device's owner (or an admin) revokes its loans",
            {"rule": "borrower_cannot_lend"},
        ) from None
    if grant.revoked_at is None:
        async with store.session() as session, session.begin():
            await session.execute(
                update(Grant)
                .where(Grant.id == grant.id, Grant.revoked_at.is_(None))
                .values(revoked_at=at)
                .execution_options(synchronize_session=False)
            )
        async with store.session() as session:
            row = (await session.execute(_grant_query().where(Grant.id == grant_id))).one()
    return _out(row, at)


# --- routes ------------------------------------------------------------------------------


@router.post("", status_code=201, response_model=GrantOut)
async def post_grant(body: GrantCreate, principal: UserPrincipal, request: Request) -> GrantOut:
    """Lend a device (owner or admin only); ``until`` omitted: until revoked."""
    services = services_of(request)
    named = body.device if body.device.isprintable() else ascii(body.device)  # no NUL in logs
    async with audited_refusal(
        services.audit, principal, "grant.create", device=named[:200], user=body.user
    ):
        grant = await create_grant(services.store, principal, body)
    await services.audit.record(
        principal,
        "grant.create",
        device=grant.device,
        detail={
            "grant_id": grant.id,
            "user": grant.user,
            "owner": grant.owner,
            "until": grant.until.isoformat() if grant.until else None,
            "replaces": grant.replaces,
        },
    )
    if grant.replaces:
        # The new loan may end sooner than the one it replaces: work resting on it learns
        # its new end now (controller.access), here and on every replica.
        await _loan_ended(request, grant)
    return grant


@router.get("", response_model=list[GrantOut])
async def get_grants(
    principal: DeviceReader,
    request: Request,
    include_ended: Annotated[
        bool, Query(alias="all", description="include expired and revoked grants")
    ] = False,
    to: Annotated[
        Literal["me"] | None,
        Query(description="'me': only the devices lent to you (each reached as BRIDGE~SERIAL)"),
    ] = None,
) -> list[GrantOut]:
    """Live grants on your devices and those you hold (every grant for an admin);
    ``?to=me``: the loans made to you."""
    return await list_grants(
        services_of(request).store, principal, include_ended=include_ended, to_me=to == "me"
    )


@router.delete("/{grant_id}", status_code=204)
async def delete_grant(grant_id: str, principal: UserPrincipal, request: Request) -> Response:
    """Revoke a grant: the borrower loses the device at once (idempotent)."""
    services = services_of(request)
    async with audited_refusal(
        services.audit, principal, "grant.revoke", grant_id=grant_id[:64]
    ):
        grant = await revoke_grant(services.store, principal, grant_id)
    await services.audit.record(
        principal,
        "grant.revoke",
        device=grant.device,
        detail={"grant_id": grant.id, "user": grant.user, "owner": grant.owner},
    )
    await _loan_ended(request, grant)
    # The borrower's apps and files go with the loan (controller.loans).
    await services_of(request).loans.sweep()
    return Response(status_code=204)


async def _loan_ended(request: Request, grant: GrantOut) -> None:
    """The borrower's runs and streams on the device are re-checked now — here and, in
    cluster mode, on every replica — so they stop within moments, or learn when their loan
    now ends (controller.access)."""
    services = services_of(request)
    async with services.store.session() as session:
        user_id = (
            await session.execute(select(User.id).where(User.name == grant.user))
        ).scalar_one_or_none()
    if user_id is None:
        return
    services = services_of(request)
    services.access.user_changed(user_id)
    if services.cluster is not None:
        await services.cluster.grant_revoked(user_id)
