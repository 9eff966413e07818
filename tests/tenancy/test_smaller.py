"""Item 9 of the hostile-tenant suite: the smaller leaks.

The bootstrap token cannot be revoked through the API (it would come back at the next start);
a ``runs:read`` or ``devices:read`` token can neither download trace frames nor list its
user's other tokens; ``POST /v1/grants`` does not tell a non-admin whether a user exists."""

from __future__ import annotations

import pytest

from controller.services import services_of
from controller.store import devices_seen
from tests.controller.conftest import ADMIN_TOKEN, Api, bearer

ADMIN = bearer(ADMIN_TOKEN)


async def _token(api: Api, name: str, as_token: str = ADMIN_TOKEN, **body: object) -> dict:
    response = await api.client.post("/v1/tokens", json={"kind": "user", "name": name, **body},
                                     headers=bearer(as_token))
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_the_bootstrap_token_cannot_be_revoked_through_the_api(api: Api) -> None:
    tokens = (await api.client.get("/v1/tokens", headers=ADMIN)).json()
    bootstrap = next(t["id"] for t in tokens if t["name"] == "bootstrap")
    response = await api.client.delete(f"/v1/tokens/{bootstrap}", headers=ADMIN)
    assert response.status_code == 409, response.text
    assert response.json()["error"]["rule"] == "bootstrap_token"
    assert (await api.client.get("/v1/tokens", headers=ADMIN)).status_code == 200


@pytest.mark.parametrize("scope", ["runs:read", "devices:read"])
async def test_a_read_scoped_token_gets_no_frames_and_no_other_tokens(
    api: Api, scope: str
) -> None:
    alice = await _token(api, "alice")
    limited = await _token(api, "alice", as_token=alice["token"], scopes=[scope])
    frame = "/v1/agent/traces/" + "a" * 32 + "/frames/step-1.png"
    response = await api.client.get(frame, headers=bearer(limited["token"]))
    assert response.status_code == 403, response.text
    assert response.json()["error"]["rule"] == "missing_scope"
    # A token that may read runs and use devices is only told the frame is not there.
    able = await _token(api, "alice", as_token=alice["token"],
                        scopes=["runs:read", "devices:use"])
    response = await api.client.get(frame, headers=bearer(able["token"]))
    assert response.status_code == 404, response.text
    # It lists only the tokens it could manage itself: never its user's stronger ones.
    listed = (await api.client.get("/v1/tokens", headers=bearer(limited["token"]))).json()
    assert {t["id"] for t in listed} == {limited["id"]}
    everything = (await api.client.get("/v1/tokens", headers=bearer(alice["token"]))).json()
    assert {t["id"] for t in everything} == {alice["id"], limited["id"], able["id"]}


async def test_lending_does_not_tell_whether_a_user_exists(api: Api) -> None:
    mallory = await _token(api, "mallory")
    await _token(api, "alice")
    made = await api.client.post("/v1/tokens", json={"kind": "bridge", "name": "mallory-br"},
                                 headers=bearer(mallory["token"]))
    assert made.status_code == 201, made.text
    await devices_seen(services_of(api.app).store, await _bridge_id(api, mallory["token"]),
                       {"emulator-5554": {"serial": "emulator-5554", "state": "device"}})

    async def lend(device: str, user: str) -> tuple[int, object]:
        response = await api.client.post("/v1/grants", json={"device": device, "user": user},
                                         headers=bearer(mallory["token"]))
        return response.status_code, response.json()

    # To a user who does not exist: the very answer an unknown device gets (before: "no
    # user 'nobody-42'", telling the two apart).
    no_user = await lend("mallory-br~emulator-5554", "nobody-42")
    no_device = await lend("mallory-br~emulator-9999", "alice")
    assert no_user == no_device and no_user[0] == 404, (no_user, no_device)
    assert "nobody-42" not in str(no_user)
    # The admin, who lists users anyway, is told plainly.
    response = await api.client.post(
        "/v1/grants", json={"device": "mallory-br~emulator-5554", "user": "nobody-42"},
        headers=ADMIN)
    assert response.status_code == 404 and "nobody-42" in response.text


async def _bridge_id(api: Api, token: str) -> str:
    bridges = (await api.client.get("/v1/bridges", headers=bearer(token))).json()
    return str(bridges[0]["id"])
