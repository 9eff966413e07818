"""What a borrower leaves on a lent device, and its removal when the loan ends.

A borrower may install apps and push files during a loan (``controller.api.manage``). Each
app they install — by the package *the device* reported as new — and their loan's working
folder (:func:`loan_folder`) is a row of ``loan_items``. :class:`Loans` removes them from the
device once the borrower no longer holds a live grant of it: at once when a grant is revoked
(the revoking route calls :meth:`Loans.sweep`), and within ``sweep_s`` when one expires.
Each sweep first starts the reservations whose time has come (their loans). A
device whose bridge is away keeps its rows, and is cleaned when it is back. Every removal is
audited (``loan.cleanup``, actor ``controller``).

The working folder is per borrower and device, not per grant: a loan extended or replaced by
a new grant keeps its files; they go when the borrower holds no live grant of the device.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from controller.api.reservations import activate_due
from controller.auth.authorization import DeviceRef, Principal, live_grant_filter, now
from controller.periodic import every
from controller.store import Bridge, Device, Grant, LoanItem, retrying
from protocol.errors import ErrorCode, RpcError
from protocol.manage_methods import APPS_UNINSTALL, FILES_REMOVE

if TYPE_CHECKING:
    from controller.audit import AuditLog
    from controller.hub import Hub
    from controller.store import Store

__all__ = ["LOANS_DIR", "Loans", "is_borrower", "loan_folder"]

log = logging.getLogger("droidwire.controller.loans")

LOANS_DIR = "/data/local/tmp/droidwire/loans"
APP, FOLDER = "app", "folder"
DEFAULT_SWEEP_S = 10.0
MAX_ITEMS_PER_LOAN = 256  # apps a borrower may leave on one device


def loan_folder(user_id: str) -> str:
    """The borrower's working folder on a device lent to them (ids are hex: a safe name)."""
    return f"{LOANS_DIR}/{user_id}"


def is_borrower(principal: Principal, device: DeviceRef) -> bool:
    """Neither an admin nor the device's owner: someone acting under a loan."""
    return not (principal.is_admin or principal.user_id == device.owner_id)


class Loans:
    def __init__(
        self, store: Store, hub: Hub, audit: AuditLog, *, sweep_s: float = DEFAULT_SWEEP_S
    ) -> None:
        self.store = store
        self.hub = hub
        self.audit = audit
        self.sweep_s = sweep_s
        self._lock = asyncio.Lock()

    # -- what a borrower left ------------------------------------------------------------------

    async def remember(self, principal: Principal, device: DeviceRef, kind: str, name: str) -> None:
        """Note that ``principal`` (a borrower) left ``name`` on ``device`` (idempotent)."""
        async def add() -> None:
            async with self.store.session() as session, session.begin():
                count = len(
                    (
                        await session.execute(
                            select(LoanItem.id).where(*_of(principal.user_id, device))
                        )
                    ).all()
                )
                if count >= MAX_ITEMS_PER_LOAN:
                    raise RpcError(
                        ErrorCode.FORBIDDEN,
                        f"at most {MAX_ITEMS_PER_LOAN} apps per loan",
                        {"rule": "loan_items"},
                    )
                session.add(
                    LoanItem(
                        user_id=principal.user_id,
                        bridge_id=device.bridge_id,
                        serial=device.serial,
                        kind=kind,
                        name=name,
                    )
                )

        with contextlib.suppress(IntegrityError):  # already noted
            await retrying(add, what="loan item")

    async def installed_through_tunnel(self, principal: Principal, device: DeviceRef,
                                       package: str) -> None:
        """``package`` is new on ``device`` after an install through ``principal``'s tunnel
        (docs/tunnel.md): a borrower's is theirs, removed when the loan ends, as a REST
        install is; audited (``apps.install``, ``via: tunnel``)."""
        if not is_borrower(principal, device):
            return
        outcome = "ok"
        try:
            await self.remember(principal, device, APP, package)
        except RpcError as exc:
            outcome = exc.code.value
            log.warning("tunnel install of %s on %s not noted: %s", package, device, exc.message)
        with contextlib.suppress(Exception):
            await self.audit.record(principal, "apps.install", device=str(device),
                                    outcome=outcome, detail={"package": package, "via": "tunnel"})

    async def items(self, user_id: str, device: DeviceRef, kind: str = APP) -> set[str]:
        async with self.store.session() as session:
            rows = await session.execute(
                select(LoanItem.name).where(*_of(user_id, device), LoanItem.kind == kind)
            )
            return set(rows.scalars())

    async def forget(self, user_id: str, device: DeviceRef, kind: str, name: str) -> None:
        async with self.store.session() as session, session.begin():
            await session.execute(
                delete(LoanItem).where(
                    *_of(user_id, device), LoanItem.kind == kind, LoanItem.name == name
                )
            )

    # -- the end of a loan ---------------------------------------------------------------------

    async def sweep(self, *, at: datetime | None = None) -> list[str]:
        """Remove what borrowers without a live grant left; returns ``SERIAL:kind:name`` of
        each removal. Items on a device whose bridge is away stay for the next sweep."""
        at = at or now()
        async with self._lock:
            # Reservations whose time has come become loans first (controller.api.reservations).
            for reservation_id, grant_id, device in await activate_due(self.store, at=at):
                with contextlib.suppress(Exception):
                    await self.audit.record(
                        None, "reservation.start", device=device,
                        detail={"reservation_id": reservation_id, "grant_id": grant_id},
                    )
            async with self.store.session() as session:
                rows = (
                    await session.execute(
                        select(LoanItem, Bridge.owner_id, Bridge.name).join(
                            Bridge, LoanItem.bridge_id == Bridge.id
                        )
                    )
                ).all()
                ended: dict[tuple[str, str, str], list[LoanItem]] = {}
                for item, _owner, _name in rows:
                    ended.setdefault((item.user_id, item.bridge_id, item.serial), []).append(item)
                refs = {
                    (r[0].bridge_id, r[0].serial): DeviceRef(r[0].bridge_id, r[0].serial, r[1], r[2])
                    for r in rows
                }
                for key in list(ended):
                    user_id, bridge_id, serial = key
                    live = await session.execute(
                        select(Grant.id)
                        .join(Device, Grant.device_id == Device.id)
                        .join(Bridge, Device.bridge_id == Bridge.id)
                        .where(
                            Grant.user_id == user_id,
                            Device.bridge_id == bridge_id,
                            Device.serial == serial,
                            Grant.owner_id == Bridge.owner_id,
                            live_grant_filter(at),
                        )
                        .limit(1)
                    )
                    if live.first() is not None:
                        del ended[key]
            removed: list[str] = []
            for (_user, bridge_id, serial), items in ended.items():
                ref = refs[(bridge_id, serial)]
                for item in items:
                    if await self._remove(ref, item):
                        removed.append(f"{serial}:{item.kind}:{item.name}")
            return removed

    async def _remove(self, device: DeviceRef, item: LoanItem) -> bool:
        outcome = "ok"
        try:
            if item.kind == APP:
                await self.hub.call(device, APPS_UNINSTALL, APPS_UNINSTALL.parse_params(
                    {"serial": device.serial, "package": item.name}))
            else:
                await self.hub.call(device, FILES_REMOVE, FILES_REMOVE.parse_params(
                    {"serial": device.serial, "path": item.name, "recursive": True}))
        except RpcError as exc:
            if exc.code in (ErrorCode.UNAVAILABLE, ErrorCode.DEVICE_OFFLINE, ErrorCode.TIMEOUT,
                            ErrorCode.BUSY):
                log.info("loan cleanup of %s on %s waits: %s", item.name, device, exc.code.value)
                return False
            outcome = exc.code.value  # gone already, or refused by the owner's policy: done
        async with self.store.session() as session, session.begin():
            await session.execute(delete(LoanItem).where(LoanItem.id == item.id))
        detail: dict[str, Any] = {"kind": item.kind, "name": item.name, "user_id": item.user_id}
        with contextlib.suppress(Exception):
            await self.audit.record(
                None, "loan.cleanup", device=str(device), outcome=outcome, detail=detail
            )
        return outcome == "ok"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Loans]:
        """Sweep every ``sweep_s`` while inside (the controller's lifespan)."""
        async with every(self.sweep_s, self.sweep, name="droidwire-loan-sweeper", log=log,
                         what="loan sweep"):
            yield self


def _of(user_id: str, device: DeviceRef) -> tuple[Any, ...]:
    return (
        LoanItem.user_id == user_id,
        LoanItem.bridge_id == device.bridge_id,
        LoanItem.serial == device.serial,
    )
