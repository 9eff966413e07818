"""Page content against the real stack and a real run; the lending rule on every page."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from controller.services import services_of
from tests.controller.web.conftest import Stack
from tests.controller.web.support import sign_in

pytestmark = [pytest.mark.adb, pytest.mark.asyncio(loop_scope="package")]


@contextlib.asynccontextmanager
async def signed_in(stack: Stack, user: str) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.client() as browser:
        response = await sign_in(browser, stack.tokens[user])
        assert response.status_code == 303, response.text
        yield browser


def rows(page: str) -> list[list[str]]:
    """The body rows of the page's tables, as text cells."""
    out = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if cells:
            out.append([html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells])
    return out


async def test_devices_page_shows_state_owner_loans_battery_and_android(stack: Stack) -> None:
    async with stack.api("olivia") as api:
        [device] = (await api.get("/v1/devices")).json()
    async with signed_in(stack, "olivia") as browser:
        page = (await browser.get("/devices")).text
    [row] = [r for r in rows(page) if r[0] == stack.device_id]
    assert row[1] == "device"
    assert row[2] == "olivia"
    assert row[3] == "bob"
    assert row[4] == f"{device['battery']}%"
    assert f"Android {device['release']}" in row[5] and f"SDK {device['sdk']}" in row[5]
    assert row[6] == device["model"]
    assert f'href="/devices/{stack.device_id}"' in page  # she may use it: live tail link


async def test_a_borrower_sees_the_lent_device(stack: Stack) -> None:
    async with signed_in(stack, "bob") as browser:
        page = (await browser.get("/devices")).text
        [row] = [r for r in rows(page) if r[0] == stack.device_id]
        assert row[2] == "olivia" and row[3] == "bob"
        assert (await browser.get(f"/devices/{stack.device_id}")).status_code == 200


async def test_a_stranger_sees_nothing(stack: Stack) -> None:
    async with signed_in(stack, "sam") as browser:
        devices = await browser.get("/devices")
        assert devices.status_code == 200
        assert stack.serial not in devices.text and "No devices you may see." in devices.text
        for path in (f"/devices/{stack.device_id}", f"/devices/{stack.serial}"):
            response = await browser.get(path)
            assert response.status_code == 404 and stack.serial not in response.text
        run = await browser.get(f"/runs/{stack.run_id}")
        assert run.status_code == 404 and "StrictMode" not in run.text
        runs = (await browser.get("/runs")).text
        assert stack.run_id[:12] not in runs and stack.serial not in runs
        assert stack.refused_run_id[:12] in runs  # his own run, and only that


async def test_runs_page_lists_verdict_device_and_timings(stack: Stack) -> None:
    async with signed_in(stack, "olivia") as browser:
        page = (await browser.get("/runs")).text
    [row] = [r for r in rows(page) if r[0] == stack.run_id[:12]]
    assert row[1] == "finished"
    assert row[2] == "CONFIRMED"
    assert row[3] == stack.device_id
    assert row[4].startswith("StrictMode violations:")
    assert row[6].endswith(" s")
    assert re.search(r"compile \d+ ms", row[7]) and re.search(r"run \d+ ms", row[7])
    assert f'href="/runs/{stack.run_id}"' in page
    assert stack.refused_run_id[:12] not in page  # sam's run is his


async def test_run_page_shows_steps_rounds_tests_and_highlighted_logcat(stack: Stack) -> None:
    async with stack.api("olivia") as api:
        run = (await api.get(f"/v1/runs/{stack.run_id}")).json()
    async with signed_in(stack, "olivia") as browser:
        response = await browser.get(f"/runs/{stack.run_id}")
    assert response.status_code == 200
    page = response.text
    table = rows(page)
    # Every step of the run's log, in order, with its method.
    step_rows = [r for r in table if len(r) == 7 and r[0].isdigit()]
    assert [int(r[0]) for r in step_rows] == [s["seq"] for s in run["steps"]]
    methods = [r[3] for r in step_rows if r[1] == "rpc"]
    assert methods == [s["detail"]["method"] for s in run["steps"] if s["kind"] == "rpc"]
    for method in ("workspace.compile", "device.install", "device.instrument",
                   "device.logcat.dump"):
        assert method in methods
    # Two compile rounds; the fixer's diff, with the added line marked as an addition.
    assert "Round 1: 1 error(s)" in page or "Round 1: 2 error(s)" in page
    assert "Round 2: compiled · fixer: rules" in page
    assert '<span class="d-add">+import android.util.Log</span>' in page
    assert "Unresolved reference" in page
    # Per-test results from the store.
    names = {t["name"]: t["status"] for t in run["result"]["tests"]}
    for name, status in names.items():
        assert any(r[1] == name and r[2] == status for r in table), (name, status)
    # The logcat, its StrictMode evidence highlighted.
    marked = re.findall(r'<mark class="violation">(.*?)</mark>', page)
    assert marked and any("StrictMode" in html.unescape(m) for m in marked)
    evidence = re.search(r'<pre class="logcat evidence">(.*?)</pre>', page, re.S)
    assert evidence is not None
    for violation in run["result"]["violations"]:
        assert html.escape(violation["line"].strip(), quote=True) in evidence.group(1)
    assert "CONFIRMED" in page and run["result"]["summary"] in html.unescape(page)


async def test_refused_steps_are_shown_as_refused(stack: Stack) -> None:
    async with signed_in(stack, "sam") as browser:
        page = (await browser.get(f"/runs/{stack.refused_run_id}")).text
    assert '<tr class="step-refused">' in page
    refused = [r for r in rows(page) if len(r) == 7 and r[2] == "refused"]
    assert {r[1] for r in refused} >= {"authorize"}
    assert stack.serial not in page  # the refused device is counted, never named
    assert "PENDING" in page


async def test_pages_escape_what_they_show(stack: Stack) -> None:
    """Text from runs and bridges is data, never markup."""
    async with stack.api("olivia") as api:
        response = await api.post("/v1/sandbox/execute", json={
            "test_code": "Could not generate test body <script>alert(1)</script>",
        })
        run_id = response.json()["run_id"]
    async with signed_in(stack, "olivia") as browser:
        page = (await browser.get(f"/runs/{run_id}")).text
        assert "<script>alert(1)</script>" not in page
        bad = await browser.get("/runs/<script>")
        assert bad.status_code == 404 and "<script>" not in bad.text


async def test_static_files_are_served_locally_and_nothing_else(stack: Stack) -> None:
    async with stack.client() as browser:
        css = await browser.get("/static/dashboard.css")
        js = await browser.get("/static/dashboard.js")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert js.status_code == 200 and "WebSocket" in js.text
        for path in ("/static/%2e%2e", "/static/pages.py", "/static/%2e%2e%2fsessions.py",
                     "/static/missing.css"):
            assert (await browser.get(path)).status_code == 404, path
    async with signed_in(stack, "olivia") as browser:
        for path in ("/devices", "/runs", f"/runs/{stack.run_id}", f"/devices/{stack.device_id}"):
            page = (await browser.get(path)).text
            assert "http://" not in page and "https://" not in page, path  # no CDN, no links out


async def test_a_run_still_going_reloads_itself(stack: Stack) -> None:
    from sqlalchemy import select

    from controller.store import Run, RunStep, User

    store = services_of(stack.controller.app).store
    async with store.session() as session, session.begin():
        olivia = (await session.execute(select(User).where(User.name == "olivia"))).scalar_one()
        going = Run(user_id=olivia.id, status="running", request={"device_id": stack.device_id})
        session.add(going)
        await session.flush()
        session.add(RunStep(run_id=going.id, seq=0, kind="device_busy", status="running",
                            detail={"device": stack.device_id}))
    async with signed_in(stack, "olivia") as browser:
        running = (await browser.get(f"/runs/{going.id}")).text
        finished = (await browser.get(f"/runs/{stack.run_id}")).text
    assert '<meta http-equiv="refresh"' in running and "device_busy" in running
    assert '<meta http-equiv="refresh"' not in finished
    async with store.session() as session, session.begin():  # leave no run "going" behind
        await session.delete(await session.get(Run, going.id))
