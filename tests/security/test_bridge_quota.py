"""A cap on bridges per user (docs/security.md, "Bounds and secrets"): any user can mint
bridge tokens, so without one a tenant could register bridges (and connections, inventories,
hub entries) without end. Admins set the cap (``--max-bridges-per-user``) and are not held by
it; the refusal is a typed ``409 conflict`` with rule ``bridge_quota``."""

from __future__ import annotations

from pathlib import Path

from tests.controller.conftest import ADMIN_TOKEN
from tests.security.support import stack


async def test_a_user_owns_at_most_the_configured_number_of_bridges(tmp_path: Path) -> None:
    async with stack(tmp_path, {"max_bridges_per_user": 2}) as world:
        alice = world.client(await world.token("user", "alice"))
        try:
            made = [await alice.post("/v1/tokens", json={"kind": "bridge", "name": f"a{i}"})
                    for i in range(3)]
            assert [r.status_code for r in made] == [201, 201, 409], [r.text for r in made]
            error = made[2].json()["error"]
            assert (error["code"], error["rule"], error["limit"]) == ("conflict", "bridge_quota", 2)
            # Another token for a bridge she has is not another bridge.
            again = await alice.post("/v1/tokens", json={"kind": "bridge", "name": "a0"})
            assert again.status_code == 201, again.text
            # Revoking a bridge's tokens frees its place.
            for token_id in (made[0].json()["id"], again.json()["id"]):
                assert (await alice.delete(f"/v1/tokens/{token_id}")).status_code in (200, 204)
            freed = await alice.post("/v1/tokens", json={"kind": "bridge", "name": "a3"})
            assert freed.status_code == 201, freed.text
        finally:
            await alice.aclose()
        # The admin is not held by the cap.
        for i in range(3):
            await world.token("bridge", f"admin{i}", as_token=ADMIN_TOKEN)
