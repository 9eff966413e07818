"""``authorize()`` against a reference model of the lending rules, exhaustively over callers,
devices, grant states, scopes, actions and instants; and ``visible_devices()`` agreeing with
it (SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from controller.auth import (
    Action,
    DeviceRef,
    Principal,
    Scope,
    authorize,
    effective_scopes,
    may,
    visible_devices,
)
from controller.store import Bridge, Device, Grant, Store, TokenKind, User
from protocol.errors import ErrorCode, RpcError

T0 = datetime(2030, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Loan:
    user: str
    device: str
    until: datetime | None
    revoked: bool = False
    by_previous_owner: bool = False  # lent by someone who no longer owns the bridge


LOANS = [
    Loan("bob", "d1", T0 + HOUR),
    Loan("bob", "d2", None, revoked=True),
    Loan("carl", "d2", None),
    Loan("carl", "d1", T0 - HOUR),  # ended before anything here happens
    Loan("dora", "d1", None, by_previous_owner=True),
]
INSTANTS = [T0, T0 + HOUR - timedelta(microseconds=1), T0 + HOUR]  # the edge of bob's loan
SCOPES: list[tuple[str, ...]] = [
    (),
    ("devices:read",),
    ("devices:use",),
    ("devices:lend",),
    ("runs:write",),
    ("admin",),
]


@dataclass
class Fixture:
    store: Store
    users: dict[str, User]
    devices: dict[str, DeviceRef]


@pytest.fixture
async def world(db_url: str) -> AsyncIterator[Fixture]:
    async with Store(db_url) as store:
        await store.migrate()
        async with store.session() as session, session.begin():
            users = {
                name: User(name=name, is_admin=(name == "root"))
                for name in ("olivia", "bob", "carl", "dora", "root", "prev")
            }
            session.add_all(users.values())
            await session.flush()
            bridge = Bridge(name="pi", owner_id=users["olivia"].id)
            session.add(bridge)
            await session.flush()
            rows = {s: Device(bridge_id=bridge.id, serial=s) for s in ("d1", "d2", "d3")}
            session.add_all(rows.values())
            await session.flush()
            for loan in LOANS:
                lender = users["prev" if loan.by_previous_owner else "olivia"]
                session.add(
                    Grant(
                        device_id=rows[loan.device].id,
                        owner_id=lender.id,
                        user_id=users[loan.user].id,
                        created_at=T0 - 2 * HOUR,
                        until=loan.until,
                        revoked_at=T0 - HOUR if loan.revoked else None,
                    )
                )
            devices = {s: DeviceRef(bridge.id, s, users["olivia"].id, "pi") for s in rows}
        yield Fixture(store, users, devices)


def expected(user: User, scopes: tuple[str, ...], device: str, action: Action, at: datetime) -> str:
    """The rules of docs/design.md §6, written out independently: "ok", or the refusal's code."""
    allowed = effective_scopes(scopes)
    admin = user.is_admin and Scope.ADMIN in allowed
    owner = user.name == "olivia"
    borrower = any(
        loan.user == user.name
        and loan.device == device
        and not loan.revoked
        and not loan.by_previous_owner
        and (loan.until is None or loan.until > at)
        for loan in LOANS
    )
    if not (admin or owner or borrower):
        return ErrorCode.NOT_FOUND.value
    if action is Action.LEND and not (admin or owner):
        return ErrorCode.FORBIDDEN.value
    needed = {
        Action.VIEW: Scope.DEVICES_READ,
        Action.USE: Scope.DEVICES_USE,
        Action.LEND: Scope.DEVICES_LEND,
    }[action]
    return "ok" if needed in allowed else ErrorCode.FORBIDDEN.value


async def test_authorize_follows_the_rules_everywhere(world: Fixture) -> None:
    checked = 0
    callers = [n for n in world.users if n != "prev"]  # prev: a stranger like carl at T0+1h
    for name, scopes, at in itertools.product(callers, SCOPES, INSTANTS):
        user = world.users[name]
        principal = Principal(
            token_id="t",
            kind=TokenKind.USER,
            name=name,
            user_id=user.id,
            user_name=name,
            is_admin=user.is_admin and Scope.ADMIN in effective_scopes(scopes),
            scopes=scopes,
        )
        for serial, action in itertools.product(world.devices, Action):
            try:
                await authorize(principal, world.devices[serial], action, store=world.store, at=at)
                outcome = "ok"
            except RpcError as exc:
                outcome = exc.code.value
            assert outcome == expected(user, scopes, serial, action, at), (
                name,
                scopes,
                serial,
                action.value,
                at,
            )
            checked += 1
        refs = list(world.devices.values())
        shown = await visible_devices(principal, refs, store=world.store, ref=lambda r: r, at=at)
        viewable = [
            r for r in refs if await may(principal, r, Action.VIEW, store=world.store, at=at)
        ]
        assert shown == viewable, (name, scopes, at)
    assert checked == len(callers) * len(SCOPES) * len(INSTANTS) * 3 * len(Action)


async def test_bridge_principals_touch_no_device(world: Fixture) -> None:
    olivia = world.users["olivia"]
    bridge = Principal(
        token_id="t",
        kind=TokenKind.BRIDGE,
        name="pi",
        user_id=olivia.id,
        user_name="olivia",
        is_admin=False,
        bridge_id=world.devices["d1"].bridge_id,
    )
    for ref, action in itertools.product(world.devices.values(), Action):
        with pytest.raises(RpcError) as refused:
            await authorize(bridge, ref, action, store=world.store)
        assert refused.value.code is ErrorCode.FORBIDDEN
        assert refused.value.data["rule"] == "bridge_token"
    assert (
        await visible_devices(
            bridge, list(world.devices.values()), store=world.store, ref=lambda r: r
        )
        == []
    )
