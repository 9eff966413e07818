"""Item 1 of the hostile-tenant suite: builds never cross owners.

A run compiles only on a build bridge of its caller, of the device's owner, or one an admin
marked shared; the APK cache never serves an APK built within one owner's boundary to
another's run; every result names its builder."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.adb_support import AdbServer
from tests.controller.executor.support import llm_style_test
from tests.tenancy.support import tenancy_stack

pytestmark = pytest.mark.adb


def _code(tag: str) -> str:
    """A test whose source is unique to this run (a marker in a comment)."""
    return llm_style_test("fetchGreetingBlocking()") + f"\n// {tag}\n"


def _compiles_on(steps: list[dict[str, object]]) -> set[str]:
    return {str(s["detail"].get("target", "")) for s in steps  # type: ignore[union-attr]
            if s["kind"] == "rpc" and s["detail"].get("method") == "workspace.compile"}  # type: ignore[union-attr]


async def test_builds_never_cross_owners(tmp_path: Path, adb_server: AdbServer) -> None:
    async with tenancy_stack(tmp_path, adb_server) as stack:
        alice, bob, mallory = stack["alice"], stack["bob"], stack["mallory"]
        ids = {t.name: (await stack.controller.http.get("/v1/bridges")).json() for t in (alice,)}
        bridge_id = {b["name"]: b["id"] for b in ids["alice"]}

        # Bob has no build bridge of his own: his test code never reaches alice's or
        # mallory's bridge (before: "the devices' own, then the caller's, then any").
        secret = f"bob-secret-{secrets.token_hex(4)}"
        result = await stack.run("bob", _code(secret), bob.device_id)
        assert result["verification_status"] == "PENDING", result["summary"]
        assert result["reason_code"] == "bridge_unavailable"
        assert result["builder"] is None
        assert _compiles_on(await stack.steps("bob", result["run_id"])) == set()
        for other in (alice, mallory):
            assert other.state_dir is not None
            leaked = [p for p in other.state_dir.rglob("*.kt") if secret in p.read_text()]
            assert leaked == [], f"bob's test code reached {other.bridge_name}"

        # Mallory builds a test on her own bridge: it is cached within her boundary.
        shared_code = _code(f"planted-{secrets.token_hex(4)}")
        planted = await stack.run("mallory", shared_code, mallory.device_id)
        assert planted["builder"]["name"] == "mallory-br", planted
        # Alice runs the very same code on her own device: compiled on her own bridge, never
        # served the APKs mallory's bridge made (before: a cache hit on mallory's build).
        result = await stack.run("alice", shared_code, alice.device_id)
        assert result["verification_status"] == "CONFIRMED", result["summary"]
        assert result["builder"] == {"id": bridge_id["alice-br"], "name": "alice-br",
                                     "shared": False}
        steps = await stack.steps("alice", result["run_id"])
        assert not any("cache" in str(s["detail"].get("detail", "")) and
                       s["detail"].get("bridge") == "mallory-br" for s in steps)
        assert _compiles_on(steps) == {f"bridge {bridge_id['alice-br']}"}

        # Alice lends her device to bob: bob's run on it builds on the device owner's bridge.
        await stack.lend("alice", alice.device_id, "bob")
        result = await stack.run("bob", _code("on-alices-phone"), alice.device_id)
        assert result["verification_status"] == "CONFIRMED", result["summary"]
        assert result["builder"]["name"] == "alice-br"

        # A bridge an admin marks shared builds for everyone, and the result says so.
        refused = await mallory.http.patch(f"/v1/bridges/{bridge_id['mallory-br']}",
                                           json={"shared": True})
        assert refused.status_code == 403  # admins only
        marked = await stack.controller.http.patch("/v1/bridges/mallory-br",
                                                   json={"shared": True})
        assert marked.status_code == 200 and marked.json()["shared"] is True, marked.text
        result = await stack.run("bob", _code("shared-builder"), bob.device_id)
        assert result["verification_status"] == "CONFIRMED", result["summary"]
        assert result["builder"] == {"id": bridge_id["mallory-br"], "name": "mallory-br",
                                     "shared": True}
        # Unmarked, it builds for its owner only again (read at each run).
        await stack.controller.http.patch("/v1/bridges/mallory-br", json={"shared": False})
        result = await stack.run("bob", _code("unshared"), bob.device_id)
        assert result["reason_code"] == "bridge_unavailable" and result["builder"] is None
