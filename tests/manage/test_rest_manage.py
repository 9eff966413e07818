"""Apps and files over REST and the CLI, end to end: httpx and ``droidwire`` → the real
controller (uvicorn, hub, auth, store) → a bridge session over a real WebSocket whose handler
is the bridge's dispatcher with its management toolkit → the real adb server → the simulated
phone. A borrower installs, lists, pushes and pulls inside their loan; steps outside it are
refused and audited; revoking (or the end of) the loan removes what they left."""

from __future__ import annotations

import asyncio
import hashlib
import os
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controller import auth
from controller.loans import loan_folder
from controller.services import services_of
from device_bridge.sim.apk import SimPackage, build_apk
from tests.controller.conftest import bearer
from tests.manage.support import World

pytestmark = pytest.mark.adb

runner = CliRunner()
PACKAGE = "com.example.borrowed"
APK = build_apk(SimPackage(package=PACKAGE, kind="app"))


async def _lend(world: World, **body: object) -> str:
    response = await world.ctl.http.post(
        "/v1/grants", json={"device": world.sim.address, "user": "bob", **body},
        headers=bearer(world.tokens["olivia"]),
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def test_a_borrower_installs_pushes_pulls_and_leaves_nothing(
    world: World, tmp_path: Path
) -> None:
    grant = await _lend(world)
    folder = loan_folder(world.user_ids["bob"])

    # Install through the CLI (streamed upload); list through REST.
    apk = tmp_path / "app.apk"
    apk.write_bytes(APK)
    code, out, err = await asyncio.to_thread(world.cli, "bob", "app", "install",
                                             world.sim.address, str(apk))
    assert code == 0, err
    assert out.strip() == PACKAGE
    listed = (await world.call("bob", "GET", "/apps")).json()["apps"]
    assert listed == [{"package": PACKAGE, "managed": True, "yours": True}]
    one = await world.call("bob", "GET", f"/apps/{PACKAGE}")
    assert one.status_code == 200 and one.json()["yours"] is True
    for action in ("launch", "stop", "clear"):
        acted = await world.call("bob", "POST", f"/apps/{PACKAGE}", json={"action": action})
        assert acted.status_code == 204, acted.text

    # A file pushed (relative: into the loan's folder) comes back byte-identical.
    data = os.urandom(3 * 1024 * 1024 + 17)
    pushed = await world.call("bob", "PUT", "/files", params={"path": "in/data.bin"},
                              content=data)
    assert pushed.status_code == 201, pushed.text
    assert pushed.json() == {"path": f"{folder}/in/data.bin", "size": len(data)}
    pulled = await world.call("bob", "GET", "/files", params={"path": "in/data.bin"})
    assert pulled.status_code == 200
    assert hashlib.sha256(pulled.content).digest() == hashlib.sha256(data).digest()
    local = tmp_path / "back.bin"
    code, _, err = await asyncio.to_thread(world.cli, "bob", "file", "pull", world.sim.address,
                                           "in/data.bin", str(local))
    assert code == 0, err
    assert local.read_bytes() == data

    # Outside the loan's scope: refused, and audited.
    outside = [
        await world.call("bob", "DELETE", "/apps/com.android.chrome"),
        await world.call("bob", "POST", "/apps/com.android.chrome", json={"action": "clear"}),
        await world.call("bob", "PUT", "/files", params={"path": "/data/local/tmp/droidwire/x"},
                         content=b"x"),
        await world.call("bob", "GET", "/files", params={"path": "../../../../system/x"}),
    ]
    for response in outside:
        assert response.status_code == 403, response.text
        assert response.json()["error"]["rule"] == "loan_scope"
    owner_apps = (await world.call("olivia", "GET", "/apps")).json()["apps"]
    assert "com.android.chrome" not in {a["package"] for a in owner_apps}  # not third-party
    assert PACKAGE in {a["package"] for a in owner_apps}
    audit = (await world.ctl.http.get("/v1/audit", params={"user": "bob", "outcome": "forbidden"}))
    refused = audit.json()["entries"]
    assert len(refused) == 4 and {e["detail"]["rule"] for e in refused} == {"loan_scope"}
    assert {e["action"] for e in refused} == {"apps.uninstall", "apps.clear", "files.push",
                                              "files.pull"}
    ok = (await world.ctl.http.get("/v1/audit", params={"user": "bob", "action": "apps.install"}))
    assert ok.json()["entries"][0]["detail"]["package"] == PACKAGE

    # Too large for this controller's transfer limit: 413 before anything is read or sent
    # (the body limit knows each transfer route's own limit: controller/limits.py).
    big = await world.call("bob", "PUT", "/files", params={"path": "big"},
                           content=b"x" * (4 * 1024 * 1024 + 1))
    assert big.status_code == 413 and big.json()["error"]["rule"] == "body_too_large"

    assert PACKAGE in world.packages() and world.exists(f"{folder}/in/data.bin")
    revoked = await world.ctl.http.delete(f"/v1/grants/{grant}",
                                          headers=bearer(world.tokens["olivia"]))
    assert revoked.status_code == 204
    assert PACKAGE not in world.packages()
    assert not world.exists(f"{folder}/in/data.bin")
    after = await world.call("bob", "GET", "/files", params={"path": "in/data.bin"})
    assert after.status_code == 404
    cleanup = (await world.ctl.http.get("/v1/audit", params={"action": "loan.cleanup"})).json()
    assert {e["detail"]["kind"] for e in cleanup["entries"]} == {"app", "folder"}


async def test_an_expired_loan_is_cleaned_by_the_sweep(world: World) -> None:
    grant_until = auth.now() + timedelta(minutes=5)
    await _lend(world, until=grant_until.isoformat())
    installed = await world.call("bob", "POST", "/apps", content=APK)
    assert installed.status_code == 201, installed.text
    loans = services_of(world.ctl.app).loans
    assert await loans.sweep() == []  # still lent
    assert PACKAGE in world.packages()
    removed = await loans.sweep(at=grant_until + timedelta(seconds=1))
    assert removed == [f"{world.sim.address}:app:{PACKAGE}"]
    assert PACKAGE not in world.packages()


async def test_a_borrower_cannot_replace_the_owners_app(world: World) -> None:
    owner = await world.call("olivia", "POST", "/apps", content=APK)
    assert owner.status_code == 201 and owner.json()["package"] == PACKAGE
    try:
        await _lend(world)
        again = await world.call("bob", "POST", "/apps", content=APK)
        assert again.status_code == 409, again.text
        assert (await world.call("bob", "GET", "/apps")).json()["apps"] == []
        refused = await world.call("bob", "DELETE", f"/apps/{PACKAGE}")
        assert refused.status_code == 403
        stranger = await world.call("eve", "GET", "/apps")
        assert stranger.status_code == 404
        # The owner too is under the bridge's profile: a push outside the droidwire folder is
        # refused by the bridge while the body streams, and that refusal is the answer.
        outside = await world.call("olivia", "PUT", "/files", params={"path": "/sdcard/x.bin"},
                                   content=os.urandom(2 * 1024 * 1024 + 3))
        assert outside.status_code == 403, outside.text
        assert outside.json()["error"]["rule"] == "path_outside_workspace"
    finally:
        gone = await world.call("olivia", "DELETE", f"/apps/{PACKAGE}")
        assert gone.status_code == 204, gone.text
