"""Rows round-trip on both databases: relations, JSON, timezone-aware UTC timestamps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, StatementError

from controller.store import (
    AuditEntry,
    Bridge,
    Device,
    Grant,
    Run,
    RunStep,
    Store,
    TestResult,
    Token,
    User,
)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    async with Store(db_url) as store:
        await store.migrate()
        yield store


async def test_a_run_with_its_whole_context_round_trips(store: Store) -> None:
    until = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    async with store.session() as session, session.begin():
        owner, borrower = User(name="owner"), User(name="borrower")
        session.add_all([owner, borrower])
        await session.flush()
        bridge = Bridge(name="pi-1", owner_id=owner.id)
        session.add(bridge)
        await session.flush()
        session.add(
            Token(kind="bridge", name="pi-1", hash="a" * 64, owner_id=owner.id, bridge_id=bridge.id)
        )
        device = Device(
            bridge_id=bridge.id, serial="127.0.0.1:5555", last_info={"sdk": 34, "model": "Sim"}
        )
        session.add(device)
        await session.flush()
        session.add(Grant(device_id=device.id, owner_id=owner.id, user_id=borrower.id, until=until))
        run = Run(user_id=borrower.id, device_id=device.id, request={"test_code": "class T"})
        session.add(run)
        await session.flush()
        session.add(
            RunStep(run_id=run.id, seq=1, kind="rpc", status="ok", detail={"method": "shell"})
        )
        session.add(TestResult(run_id=run.id, class_name="a.T", name="t", status="passed"))
        session.add(
            AuditEntry(
                actor="borrower", action="device.shell", device="pi-1~127.0.0.1:5555", outcome="ok"
            )
        )
        run_id = run.id

    async with store.session() as session:
        run = await session.get(Run, run_id)
        assert run is not None
        assert run.status == "queued" and run.verdict is None
        assert run.request == {"test_code": "class T"}
        assert run.created_at.tzinfo is not None
        device = await session.get(Device, run.device_id)
        assert device is not None and device.last_info == {"sdk": 34, "model": "Sim"}
        grant = (await session.execute(select(Grant))).scalar_one()
        assert grant.until == until and grant.until.tzinfo == UTC
        step = (await session.execute(select(RunStep))).scalar_one()
        assert (step.seq, step.detail) == (1, {"method": "shell"})
        result = (await session.execute(select(TestResult))).scalar_one()
        assert (result.class_name, result.status, result.stack) == ("a.T", "passed", None)
        entry = (await session.execute(select(AuditEntry))).scalar_one()
        assert entry.at.tzinfo == UTC and entry.detail == {}


async def test_naive_datetimes_are_refused(store: Store) -> None:
    async with store.session() as session:
        session.add(User(name="naive", created_at=datetime(2030, 1, 1)))
        with pytest.raises(StatementError):
            await session.flush()


@pytest.mark.parametrize(
    "duplicate",
    [
        lambda owner_id: [User(name="dup"), User(name="dup")],
        lambda owner_id: [
            Token(kind="user", name="x", hash="b" * 64, owner_id=owner_id),
            Token(kind="user", name="y", hash="b" * 64, owner_id=owner_id),
        ],
        lambda owner_id: [
            Bridge(name="same", owner_id=owner_id),
            Bridge(name="same", owner_id=owner_id),
        ],
    ],
    ids=["user-name", "token-hash", "bridge-name"],
)
async def test_unique_constraints_hold(store: Store, duplicate: object) -> None:
    async with store.session() as session, session.begin():
        owner = User(name="owner")
        session.add(owner)
    async with store.session() as session:
        session.add_all(duplicate(owner.id))  # type: ignore[operator]
        with pytest.raises(IntegrityError):
            await session.flush()


async def test_foreign_keys_are_enforced(store: Store) -> None:
    async with store.session() as session:
        session.add(Bridge(name="orphan", owner_id="no-such-user"))
        with pytest.raises(IntegrityError):
            await session.flush()
