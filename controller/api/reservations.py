"""``/v1/reservations``: book a device in advance, from–until (docs/security.md,
"Reservations").

- ``POST /v1/reservations`` ``{"device", "user", "from", "until"}`` → 201 the reservation. The
  device's owner or an admin books (as for lending; a borrower cannot). Refused ``409
  conflict`` (with ``conflicts``: the ids in the way) when it overlaps another reservation of
  the device, or a loan of the device to someone else that is still running at ``from``.
- ``GET /v1/reservations`` → the reservations of your devices and yours (every one for an
  admin), not ended or cancelled (``?all=true``: those too).
- ``DELETE /v1/reservations/{id}`` → 204: cancelled; if it has started, its loan is revoked
  (and what the borrower left is removed).

When ``from`` arrives the controller makes the loan — a grant to ``user`` until ``until`` —
within ``loan_sweep_s`` (at once if ``from`` is already past), audited as
``reservation.start``. That is how a lab books a device for a CI window.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field
from sqlalchemy import or_, select, update

from controller.api.grants import resolve_seen_device
from controller.api.refusals import audited_refusal
from controller.auth.authorization import Action, Principal, authorize, live_grant_filter, now
from controller.auth.http import UserPrincipal
from controller.auth.tokens import NAME_PATTERN
from controller.services import services_of
from controller.store import Bridge, Device, Grant, Reservation, Store, User
from protocol.errors import ErrorCode, RpcError

__all__ = ["ReservationIn", "ReservationOut", "activate_due", "router"]

router = APIRouter(prefix="/v1/reservations", tags=["reservations"])

MAX_AHEAD = timedelta(days=366)
MAX_LENGTH = timedelta(days=31)


class Status(StrEnum):
    UPCOMING = "upcoming"
    ACTIVE = "active"
    ENDED = "ended"
    CANCELLED = "cancelled"


class ReservationIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    device: str = Field(min_length=1, max_length=400)
    user: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    starts_at: AwareDatetime = Field(validation_alias=AliasChoices("from", "starts_at"))
    ends_at: AwareDatetime = Field(validation_alias=AliasChoices("until", "ends_at"))


class ReservationOut(BaseModel):
    id: str
    device: str
    user: str
    owner: str
    created_by: str
    starts_at: datetime
    ends_at: datetime
    status: Status
    grant_id: str | None


def _status(r: Reservation, at: datetime) -> Status:
    if r.cancelled_at is not None:
        return Status.CANCELLED
    if r.ends_at <= at:
        return Status.ENDED
    return Status.ACTIVE if r.starts_at <= at else Status.UPCOMING


def _query() -> Any:
    owner = User.__table__.alias("owner")
    borrower = User.__table__.alias("borrower")
    return (
        select(Reservation, Bridge.name, Device.serial, owner.c.name, borrower.c.name)
        .join(Device, Reservation.device_id == Device.id)
        .join(Bridge, Device.bridge_id == Bridge.id)
        .join(owner, Reservation.owner_id == owner.c.id)
        .join(borrower, Reservation.user_id == borrower.c.id)
    )


def _out(row: Any, at: datetime) -> ReservationOut:
    r, bridge, serial, owner, user = row
    return ReservationOut(
        id=r.id, device=f"{bridge}~{serial}", user=user, owner=owner, created_by=r.created_by,
        starts_at=r.starts_at, ends_at=r.ends_at, status=_status(r, at), grant_id=r.grant_id,
    )


async def create_reservation(
    store: Store, principal: Principal, body: ReservationIn, *, at: datetime | None = None
) -> ReservationOut:
    at = at or now()
    device = await resolve_seen_device(store, principal, body.device)
    await authorize(principal, device.ref, Action.LEND, store=store, at=at)
    start, end = body.starts_at, body.ends_at
    if end <= start:
        raise RpcError(ErrorCode.BAD_REQUEST, "'until' must be after 'from'", {"field": "until"})
    if end <= at:
        raise RpcError(ErrorCode.BAD_REQUEST, "'until' is in the past", {"field": "until"})
    if start - at > MAX_AHEAD or end - start > MAX_LENGTH:
        raise RpcError(ErrorCode.BAD_REQUEST,
                       f"at most {MAX_AHEAD.days} days ahead and {MAX_LENGTH.days} days long")
    async with store.session() as session, session.begin():
        user = (await session.execute(select(User).where(User.name == body.user))).scalar_one_or_none()
        if user is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"no user {body.user!r}", {"field": "user"})
        if user.id == device.owner_id:
            raise RpcError(ErrorCode.BAD_REQUEST, f"{body.user!r} owns this device already")
        overlapping = list((await session.execute(
            select(Reservation.id).where(
                Reservation.device_id == device.device_id,
                Reservation.cancelled_at.is_(None),
                Reservation.starts_at < end,
                Reservation.ends_at > start,
            )
        )).scalars())
        # A loan to someone else still running when the reservation starts is in the way
        # (one to the same user is simply superseded when the reservation starts).
        lent = list((await session.execute(
            select(Grant.id).where(
                Grant.device_id == device.device_id,
                Grant.user_id != user.id,
                live_grant_filter(at),
                or_(Grant.until.is_(None), Grant.until > start),
            )
        )).scalars())
        if overlapping or lent:
            raise RpcError(
                ErrorCode.CONFLICT,
                "the device is booked or lent at that time",
                {"conflicts": overlapping + lent},
            )
        row = Reservation(
            device_id=device.device_id, owner_id=device.owner_id, user_id=user.id,
            created_by=principal.user_name, starts_at=start, ends_at=end, created_at=at,
        )
        session.add(row)
        await session.flush()
        reservation_id = row.id
    async with store.session() as session:
        got = (await session.execute(_query().where(Reservation.id == reservation_id))).one()
    return _out(got, at)


async def activate_due(
    store: Store, *, at: datetime | None = None
) -> list[tuple[str, str, str]]:
    """Make the loans of reservations whose time has come; ``(reservation id, grant id,
    BRIDGE~SERIAL)`` of each. Idempotent: one grant per reservation."""
    at = at or now()
    made: list[tuple[str, str, str]] = []
    async with store.session() as session, session.begin():
        due = (await session.execute(
            select(Reservation, Bridge.name, Device.serial)
            .join(Device, Reservation.device_id == Device.id)
            .join(Bridge, Device.bridge_id == Bridge.id)
            .where(
                Reservation.cancelled_at.is_(None),
                Reservation.grant_id.is_(None),
                Reservation.starts_at <= at,
                Reservation.ends_at > at,
            ).limit(500)
        )).all()
        for r, bridge, serial in due:
            # One live loan per device and user: the reservation's replaces an earlier one.
            await session.execute(
                update(Grant)
                .where(Grant.device_id == r.device_id, Grant.user_id == r.user_id,
                       live_grant_filter(at))
                .values(revoked_at=at)
                .execution_options(synchronize_session=False)
            )
            grant = Grant(device_id=r.device_id, owner_id=r.owner_id, user_id=r.user_id,
                          created_at=at, until=r.ends_at)
            session.add(grant)
            await session.flush()
            r.grant_id = grant.id
            made.append((r.id, grant.id, f"{bridge}~{serial}"))
    return made


async def list_reservations(
    store: Store, principal: Principal, *, include_ended: bool = False
) -> list[ReservationOut]:
    at = now()
    query = _query()
    if not principal.is_admin:
        query = query.where(or_(Reservation.owner_id == principal.user_id,
                                Reservation.user_id == principal.user_id))
    if not include_ended:
        query = query.where(Reservation.cancelled_at.is_(None), Reservation.ends_at > at)
    async with store.session() as session:
        rows = (await session.execute(query.order_by(Reservation.starts_at))).all()
    return [_out(row, at) for row in rows]


async def cancel_reservation(store: Store, principal: Principal, reservation_id: str) -> ReservationOut:
    at = now()
    async with store.session() as session:
        row = (await session.execute(_query().where(Reservation.id == reservation_id[:64]))).one_or_none()
    if row is None:
        raise RpcError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id[:64]!r}")
    r = row[0]
    if not (principal.is_admin or principal.user_id in (r.owner_id, r.user_id)):
        raise RpcError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id[:64]!r}")
    async with store.session() as session, session.begin():
        await session.execute(
            update(Reservation).where(Reservation.id == r.id, Reservation.cancelled_at.is_(None))
            .values(cancelled_at=at).execution_options(synchronize_session=False)
        )
        if r.grant_id is not None:
            await session.execute(
                update(Grant).where(Grant.id == r.grant_id, Grant.revoked_at.is_(None))
                .values(revoked_at=at).execution_options(synchronize_session=False)
            )
    async with store.session() as session:
        got = (await session.execute(_query().where(Reservation.id == r.id))).one()
    return _out(got, at)


@router.post("", status_code=201, response_model=ReservationOut)
async def post_reservation(
    body: ReservationIn, principal: UserPrincipal, request: Request
) -> ReservationOut:
    services = services_of(request)
    async with audited_refusal(services.audit, principal, "reservation.create",
                                  device=body.device[:200], user=body.user):
        out = await create_reservation(services.store, principal, body)
    await services.audit.record(principal, "reservation.create", device=out.device, detail={
        "reservation_id": out.id, "user": out.user, "from": out.starts_at.isoformat(),
        "until": out.ends_at.isoformat(),
    })
    if out.status is Status.ACTIVE:
        await services.loans.sweep()  # starts now: make its loan at once
        async with services.store.session() as session:
            got = (await session.execute(_query().where(Reservation.id == out.id))).one()
        out = _out(got, now())
    return out


@router.get("", response_model=list[ReservationOut])
async def get_reservations(
    principal: UserPrincipal,
    request: Request,
    include_ended: Annotated[bool, Query(alias="all")] = False,
) -> list[ReservationOut]:
    return await list_reservations(services_of(request).store, principal,
                                   include_ended=include_ended)


@router.delete("/{reservation_id}", status_code=204)
async def delete_reservation(reservation_id: str, principal: UserPrincipal,
                             request: Request) -> Response:
    services = services_of(request)
    async with audited_refusal(services.audit, principal, "reservation.cancel",
                                  reservation_id=reservation_id[:64]):
        out = await cancel_reservation(services.store, principal, reservation_id)
    await services.audit.record(principal, "reservation.cancel", device=out.device,
                                detail={"reservation_id": out.id, "user": out.user})
    await services.loans.sweep()
    return Response(status_code=204)
