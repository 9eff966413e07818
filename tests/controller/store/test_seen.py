from __future__ import annotations

from datetime import UTC, datetime

from controller.store import Bridge, Store, User, bridge_seen, devices_seen, known_devices

T1 = datetime(2030, 1, 1, tzinfo=UTC)
T2 = datetime(2030, 1, 2, tzinfo=UTC)


async def test_devices_are_upserted_per_bridge_and_serial(db_url: str) -> None:
    async with Store(db_url) as store:
        await store.migrate()
        async with store.session() as session, session.begin():
            owner = User(name="o")
            session.add(owner)
            await session.flush()
            a, b = Bridge(name="a", owner_id=owner.id), Bridge(name="b", owner_id=owner.id)
            session.add_all([a, b])
        first = await devices_seen(
            store, a.id, {"emulator-5554": {"sdk": 33}, "10.0.0.2:5555": {}}, at=T1
        )
        again = await devices_seen(store, a.id, {"emulator-5554": {"sdk": 34}}, at=T2)
        other = await devices_seen(store, b.id, {"emulator-5554": {"sdk": 30}}, at=T2)
        assert again["emulator-5554"] == first["emulator-5554"] != other["emulator-5554"]

        devices = {d.serial: d for d in await known_devices(store, a.id)}
        assert set(devices) == {"emulator-5554", "10.0.0.2:5555"}
        updated = devices["emulator-5554"]
        assert (updated.last_info, updated.first_seen_at, updated.last_seen_at) == (
            {"sdk": 34},
            T1,
            T2,
        )

        await bridge_seen(store, a.id, at=T2)
        async with store.session() as session:
            bridge = await session.get(Bridge, a.id)
        assert bridge is not None and bridge.last_seen_at == T2
