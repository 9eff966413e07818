"""Reservations: a device booked in advance (from–until) for a CI window; overlaps and loans in
the way are refused, and so is a loan to someone else over a booking; the loan starts when the
window does; cancelling ends it."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import httpx
from typer.testing import CliRunner

from controller.services import services_of
from controller.store import Store, devices_seen, utcnow
from droidwire import app as cli
from tests.controller.conftest import ADMIN_TOKEN, Api, LiveController, bearer

runner = CliRunner()


async def _world(api: Api) -> dict[str, str]:
    tokens = {u: (await api.new_token("user", u))["token"] for u in ("olivia", "bob", "ci")}
    await api.new_token("bridge", "pi", as_token=tokens["olivia"])
    bridges = (await api.client.get("/v1/bridges", headers=bearer(tokens["olivia"]))).json()
    store: Store = services_of(api.app).store
    await devices_seen(store, bridges[0]["id"], {"SIM1": {"serial": "SIM1"}})
    return tokens


async def test_book_a_ci_window(api: Api) -> None:
    tokens = await _world(api)
    olivia = bearer(tokens["olivia"])
    t0 = utcnow()

    async def reserve(who: dict[str, str], user: str, start: int, end: int) -> object:
        body = {"device": "SIM1", "user": user,
                "from": (t0 + timedelta(hours=start)).isoformat(),
                "until": (t0 + timedelta(hours=end)).isoformat()}
        return await api.client.post("/v1/reservations", json=body, headers=who)

    first = await reserve(olivia, "ci", 1, 3)
    assert first.status_code == 201, first.text
    booked = first.json()
    assert (booked["device"], booked["user"], booked["status"]) == ("pi~SIM1", "ci", "upcoming")

    clash = await reserve(olivia, "bob", 2, 4)
    assert clash.status_code == 409
    assert clash.json()["error"]["conflicts"] == [booked["id"]]
    after = await reserve(olivia, "bob", 3, 4)  # back to back is no overlap
    assert after.status_code == 201, after.text
    assert (await reserve(olivia, "bob", 1, 0)).status_code == 400  # until before from
    assert (await reserve(bearer(tokens["bob"]), "ci", 5, 6)).status_code == 404  # not his

    # The window opens: ci holds a loan until its end, and sees the device.
    ci = bearer(tokens["ci"])
    assert await services_of(api.app).loans.sweep(at=t0 + timedelta(hours=1, minutes=1)) == []
    grants = (await api.client.get("/v1/grants", headers=ci)).json()
    assert [(g["user"], g["until"][:16]) for g in grants] == [
        ("ci", (t0 + timedelta(hours=3)).isoformat()[:16])
    ]
    listed = (await api.client.get("/v1/reservations", headers=ci)).json()
    assert [r["grant_id"] for r in listed] == [grants[0]["id"]]
    await services_of(api.app).loans.sweep(at=t0 + timedelta(hours=1, minutes=2))  # idempotent
    assert len((await api.client.get("/v1/grants", headers=ci)).json()) == 1

    # A loan to someone else over ci's booking is refused; one that ends before it is not.
    forever = await api.client.post("/v1/grants", json={"device": "SIM1", "user": "bob"},
                                    headers=olivia)
    assert forever.status_code == 409, forever.text
    assert booked["id"] in forever.json()["error"]["conflicts"]
    lent = await api.client.post("/v1/grants", headers=olivia, json={
        "device": "SIM1", "user": "bob", "until": (t0 + timedelta(minutes=30)).isoformat()})
    assert lent.status_code == 201, lent.text
    # …and a loan to someone else in the way of a new booking is a conflict too.
    blocked = await reserve(olivia, "ci", 0, 1)
    assert blocked.status_code == 409 and lent.json()["id"] in blocked.json()["error"]["conflicts"]
    assert (await reserve(bearer(tokens["bob"]), "ci", 0, 1)).status_code == 403  # borrower

    # Cancelling a started reservation ends its loan.
    gone = await api.client.delete(f"/v1/reservations/{booked['id']}", headers=olivia)
    assert gone.status_code == 204
    assert (await api.client.get("/v1/grants", headers=ci)).json() == []
    left = (await api.client.get("/v1/reservations", headers=olivia)).json()
    assert [r["id"] for r in left] == [after.json()["id"]]
    audit = (await api.client.get("/v1/audit", params={"action": "reservation.*"},
                                  headers=olivia)).json()["entries"]
    actions = [e["action"] for e in audit]
    assert "reservation.start" in actions  # the controller's entry, about her device
    assert actions.count("reservation.create") >= 2 and "reservation.cancel" in actions


def test_reserve_from_the_cli(live_controller: LiveController, db_url: str) -> None:
    with httpx.Client(base_url=live_controller.url) as http:
        tokens = {}
        for user in ("olivia", "ci"):
            made = http.post("/v1/tokens", json={"kind": "user", "name": user},
                             headers=bearer(ADMIN_TOKEN))
            tokens[user] = made.json()["token"]
        http.post("/v1/tokens", json={"kind": "bridge", "name": "pi"},
                  headers=bearer(tokens["olivia"]))
        bridge_id = http.get("/v1/bridges", headers=bearer(tokens["olivia"])).json()[0]["id"]

    async def seen() -> None:
        async with Store(db_url) as store:
            await devices_seen(store, bridge_id, {"SIM1": {"serial": "SIM1"}})

    asyncio.run(seen())
    env = {"DROIDWIRE_CONTROLLER": live_controller.url, "DROIDWIRE_TOKEN": tokens["olivia"]}
    start = (utcnow() + timedelta(days=1)).isoformat()
    made = runner.invoke(cli, ["reserve", "create", "SIM1", "ci", "--from", start, "--for", "2h"],
                         env=env)
    assert made.exit_code == 0, made.stderr
    again = runner.invoke(cli, ["reserve", "create", "SIM1", "ci", "--from", start, "--for", "1h"],
                          env=env)
    assert again.exit_code == 1 and "conflict" in again.stderr
    listed = runner.invoke(cli, ["reserve", "list", "--json"], env=env)
    assert [r["id"] for r in json.loads(listed.stdout)] == [made.stdout.strip()]
    gone = runner.invoke(cli, ["reserve", "cancel", made.stdout.strip()], env=env)
    assert gone.exit_code == 0, gone.stderr
