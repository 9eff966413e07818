"""Per-user quotas (docs/sandbox.md, "Quotas"): ``max_running`` runs started at once (more
wait, ``queued``), ``max_queued`` runs waiting to start (more are refused 429 naming the
limit); only an admin sets them. Over the ASGI app with the executor on the in-process
gateway (real adb server, simulated device)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

import pytest

from controller.executor import SandboxExecutor
from controller.executor.placement import Quota
from controller.services import services_of
from tests.controller.conftest import Api, bearer
from tests.controller.executor.support import llm_style_test
from tests.controller.executor.test_api import ADMIN, TIMEOUT, client  # noqa: F401 - fixture

pytestmark = pytest.mark.adb


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll REST state (nothing to wait on), bounded."""
    try:
        async with asyncio.timeout(TIMEOUT):
            while not await check():  # noqa: ASYNC110 - polling REST answers
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"{what}: not reached in {TIMEOUT:g} s") from None


async def test_only_an_admin_sets_limits_and_a_user_reads_their_own(
    client: Api,  # noqa: F811 - fixture
) -> None:
    http = client.client
    bob = bearer((await client.new_token("user", "bob"))["token"])
    refused = await http.put("/v1/users/bob/limits", json={"max_running": 5}, headers=bob)
    assert refused.status_code == 403, refused.text
    assert (await http.get("/v1/users/admin/limits", headers=bob)).status_code == 404
    bad = await http.put("/v1/users/bob/limits", json={"max_running": 0}, headers=ADMIN)
    assert bad.status_code == 400, bad.text
    set_ = await http.put("/v1/users/bob/limits", json={"max_running": 2, "max_queued": 3},
                          headers=ADMIN)
    assert set_.status_code == 200, set_.text
    own = (await http.get("/v1/users/bob/limits", headers=bob)).json()
    assert own == {"user": "bob", "max_running": 2, "max_queued": 3}
    assert (await http.get("/v1/users/nobody/limits", headers=ADMIN)).status_code == 404
    entries = await services_of(client.app).audit.recent(limit=5)
    assert [e.outcome for e in entries if e.action == "user.limits"] == ["ok", "refused"]


async def test_runs_past_max_running_wait_and_past_max_queued_are_refused(
    client: Api,  # noqa: F811 - fixture
) -> None:
    http = client.client
    limited = await http.put("/v1/users/admin/limits", json={"max_running": 1, "max_queued": 1},
                             headers=ADMIN)
    assert limited.status_code == 200, limited.text
    code = llm_style_test("loadSettingsFromDisk()")

    async def submit() -> str:
        response = await http.post("/v1/sandbox/execute?wait=false", json={"test_code": code},
                                   headers=ADMIN)
        assert response.status_code == 202, response.text
        return str(response.json()["run_id"])

    async def run(run_id: str) -> dict:  # type: ignore[type-arg]
        return dict((await http.get(f"/v1/runs/{run_id}", headers=ADMIN)).json())

    first = await submit()

    async def first_started() -> bool:
        return (await run(first))["status"] in ("running", "finished")

    await until(first_started, "the first run started")
    second = await submit()

    async def second_waits_for_the_quota() -> bool:
        found = await run(second)
        return found["status"] == "queued" and any(
            s["kind"] == "user_quota" for s in found["steps"])

    await until(second_waits_for_the_quota, "the second run waits for the quota")
    third = await http.post("/v1/sandbox/execute?wait=false", json={"test_code": code},
                            headers=ADMIN)
    assert third.status_code == 429, third.text
    error = third.json()["error"]
    assert (error["code"], error["quota"], error["limit"]) == ("busy", "max_queued", 1)
    assert "1 queued runs" in error["message"]

    executor: SandboxExecutor = client.app.state.services.executor
    async with asyncio.timeout(TIMEOUT):
        while executor._tasks:
            await asyncio.gather(*executor._tasks, return_exceptions=True)
    one, two = await run(first), await run(second)
    assert one["verdict"] == two["verdict"] == "CONFIRMED"
    # The second run did nothing before the first had finished.
    first_rpc = min(datetime.fromisoformat(s["at"]) for s in two["steps"]
                    if s["kind"] == "rpc")
    assert datetime.fromisoformat(one["finished_at"]) <= first_rpc
    quota_step = next(s for s in two["steps"] if s["kind"] == "user_quota")
    assert quota_step["status"] == "ok" and quota_step["detail"]["max_running"] == 1


def test_the_refusal_names_the_limit() -> None:
    assert Quota().refusal(100) is None
    too_wide = Quota(max_running=2).refusal(3)
    assert too_wide is not None and too_wide.code.value == "busy"
    assert too_wide.data == {"rule": "quota", "quota": "max_running", "limit": 2, "current": 0}
    full = Quota(max_queued=4, queued=3).refusal(2)
    assert full is not None and full.data is not None and full.data["quota"] == "max_queued"
    assert Quota(max_queued=4, queued=3).refusal(1) is None
    assert Quota(max_running=1, running=1).may_start(1) is False
    assert Quota(max_running=2, running=1).may_start(1) is True
