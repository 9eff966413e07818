"""``/v1/tokens`` through the app (ASGI transport): who may issue, list and revoke what."""

from __future__ import annotations

import pytest

from controller.auth import TOKEN_PREFIXES
from controller.services import services_of
from controller.store import Token, TokenKind
from tests.controller.conftest import ADMIN_TOKEN, Api, bearer

ADMIN = bearer(ADMIN_TOKEN)


async def test_create_list_revoke(api: Api) -> None:
    created = await api.new_token("bridge", "pi-1")
    assert created["token"].startswith(TOKEN_PREFIXES[TokenKind.BRIDGE])
    assert (created["kind"], created["name"]) == ("bridge", "pi-1")

    listing = await api.client.get("/v1/tokens", headers=ADMIN)
    assert listing.status_code == 200
    assert created["token"] not in listing.text
    assert all("token" not in t and "hash" not in t for t in listing.json())
    mine = {t["id"]: t for t in listing.json()}[created["id"]]
    assert (mine["kind"], mine["name"], mine["owner"], mine["revoked"]) == (
        "bridge",
        "pi-1",
        "admin",
        False,
    )

    revoked = await api.client.delete(f"/v1/tokens/{created['id']}", headers=ADMIN)
    assert revoked.status_code == 204
    again = await api.client.delete(f"/v1/tokens/{created['id']}", headers=ADMIN)
    assert again.status_code == 204
    listing = await api.client.get("/v1/tokens", headers=ADMIN)
    assert {t["id"]: t for t in listing.json()}[created["id"]]["revoked"] is True


async def test_a_revoked_token_is_refused_and_hooks_run(api: Api) -> None:
    seen: list[Token] = []

    async def hook(token: Token) -> None:
        seen.append(token)

    api.app.state.revocation_hooks.append(hook)
    user = await api.new_token("user", "alice")
    assert (await api.client.get("/v1/tokens", headers=bearer(user["token"]))).status_code == 200
    assert (await api.client.delete(f"/v1/tokens/{user['id']}", headers=ADMIN)).status_code == 204
    refused = await api.client.get("/v1/tokens", headers=bearer(user["token"]))
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert [t.id for t in seen] == [user["id"]]


async def test_a_user_token_for_a_new_name_creates_that_user(api: Api) -> None:
    alice = await api.new_token("user", "alice")
    headers = bearer(alice["token"])
    own = await api.client.get("/v1/tokens", headers=headers)
    assert [(t["name"], t["owner"]) for t in own.json()] == [("alice", "alice")]

    # Alice may add a token for herself and create a bridge, which she then owns.
    await api.new_token("user", "alice", as_token=alice["token"])
    bridge = await api.new_token("bridge", "alice-desk", as_token=alice["token"])
    own = await api.client.get("/v1/tokens", headers=headers)
    assert {t["owner"] for t in own.json()} == {"alice"} and len(own.json()) == 3

    # The admin sees everyone's; alice only ever her own.
    everyone = await api.client.get("/v1/tokens", headers=ADMIN)
    assert {t["owner"] for t in everyone.json()} == {"admin", "alice"}
    assert bridge["id"] in {t["id"] for t in everyone.json()}


async def test_users_cannot_touch_other_users_tokens(api: Api) -> None:
    alice = await api.new_token("user", "alice")
    bob = await api.new_token("user", "bob")
    as_alice = bearer(alice["token"])

    denied = await api.client.post(
        "/v1/tokens", json={"kind": "user", "name": "carol"}, headers=as_alice
    )
    assert denied.status_code == 403
    assert denied.json()["error"] == {
        "code": "forbidden",
        "message": "only an admin can create tokens for other users",
        "rule": "token_for_other_user",
    }
    hidden = await api.client.delete(f"/v1/tokens/{bob['id']}", headers=as_alice)
    assert hidden.status_code == 404
    assert (await api.client.get("/v1/tokens", headers=bearer(bob["token"]))).status_code == 200

    await api.new_token("bridge", "shared-name", as_token=bob["token"])
    taken = await api.client.post(
        "/v1/tokens", json={"kind": "bridge", "name": "shared-name"}, headers=as_alice
    )
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "conflict"


async def test_bridge_tokens_do_not_open_the_rest_api(api: Api) -> None:
    bridge = await api.new_token("bridge", "pi-1")
    response = await api.client.get("/v1/tokens", headers=bearer(bridge["token"]))
    assert response.status_code == 403
    assert response.json()["error"]["rule"] == "bridge_token"


@pytest.mark.parametrize("param", ["token", "access_token", "TOKEN"])
async def test_tokens_in_the_query_string_are_rejected(api: Api, param: str) -> None:
    alone = await api.client.get("/v1/tokens", params={param: ADMIN_TOKEN})
    assert alone.status_code == 400
    assert alone.json()["error"]["rule"] == "token_in_url"
    assert ADMIN_TOKEN not in alone.text
    # Even alongside a valid header: the URL has leaked it, the caller must hear about it.
    both = await api.client.get("/v1/tokens", params={param: ADMIN_TOKEN}, headers=ADMIN)
    assert both.status_code == 400


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic YWRtaW46YWRtaW4="},
        bearer("dw_u_nope"),
        {"X-Token": ADMIN_TOKEN},
    ],
    ids=["none", "basic", "unknown", "other-header"],
)
async def test_only_a_valid_bearer_header_authenticates(api: Api, headers: dict[str, str]) -> None:
    response = await api.client.get("/v1/tokens", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "admin", "name": "root2"},
        {"kind": "user", "name": "a~b"},
        {"kind": "user", "name": ""},
        {"kind": "user"},
        {"kind": "user", "name": "ok", "extra": 1},
        {"kind": "user", "name": ["x"]},
        [],
    ],
)
async def test_bad_requests_are_400_with_typed_errors(api: Api, body: object) -> None:
    response = await api.client.post("/v1/tokens", json=body, headers=ADMIN)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_request" and error["errors"]


async def test_revoking_an_unknown_token_is_404(api: Api) -> None:
    response = await api.client.delete("/v1/tokens/does-not-exist", headers=ADMIN)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_token_changes_are_audited(api: Api) -> None:
    created = await api.new_token("bridge", "pi-1")
    await api.client.delete(f"/v1/tokens/{created['id']}", headers=ADMIN)
    entries = await services_of(api.app).audit.recent()
    assert [(e.actor, e.action, e.outcome) for e in entries] == [
        ("admin", "token.revoke", "ok"),
        ("admin", "token.create", "ok"),
    ]
    assert all(e.detail["token_id"] == created["id"] for e in entries)
    assert created["token"] not in repr([e.detail for e in entries])


async def test_refused_token_changes_are_audited(api: Api) -> None:
    alice = await api.new_token("user", "alice")
    await api.client.post(
        "/v1/tokens", json={"kind": "user", "name": "mallory"}, headers=bearer(alice["token"])
    )
    await api.client.delete("/v1/tokens/not-hers", headers=bearer(alice["token"]))
    entries = await services_of(api.app).audit.recent(limit=2)
    assert [(e.actor, e.action, e.outcome, e.detail) for e in entries] == [
        ("alice", "token.revoke", "not_found", {"token_id": "not-hers"}),
        ("alice", "token.create", "forbidden", {"kind": "user", "name": "mallory"}),
    ]
