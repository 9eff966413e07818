"""Booking and the audit page in headless Chromium: olivia lends her device to sam from the
dashboard with an end time, sam sees the loan on his page, olivia extends and revokes it, and
the admin reads both on the audit page (then filters it). Screenshots go to
``test-artifacts/web/``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from device_bridge.sim.apk import SimPackage, build_apk
from tests.controller.conftest import ADMIN_TOKEN
from tests.controller.web.conftest import Stack
from tests.controller.web.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    TIMEOUT_MS,
    playwright_api,
)

__all__ = ["playwright_api"]

pytestmark = [
    pytest.mark.adb, pytest.mark.browser, pytest.mark.asyncio(loop_scope="package"),
]


def _local(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


async def _sign_in(context: Any, stack: Stack, token: str) -> Any:
    page = await context.new_page()
    await page.goto(stack.url + "/login")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(stack.url + "/devices")
    return page


async def _visible_to(stack: Stack, user: str) -> list[str]:
    async with stack.api(user) as api:
        return [d["id"] for d in (await api.get("/v1/devices")).json()]


async def test_lend_extend_revoke_and_read_the_audit_page(
    stack: Stack, playwright_api: Any
) -> None:
    expect = playwright_api.expect
    problems: list[str] = []
    assert stack.device_id not in await _visible_to(stack, "sam")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            olivia_ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
            olivia_ctx.set_default_timeout(TIMEOUT_MS)
            page = await _sign_in(olivia_ctx, stack, stack.tokens["olivia"])
            page.on("pageerror", lambda e: problems.append(str(e)))

            # Lend to sam for two hours.
            await page.click("nav >> text=Loans")
            await page.wait_for_url(stack.url + "/loans")
            await page.select_option("#lend-device", stack.device_id)
            await page.fill("#lend-user", "sam")
            end = datetime.now(UTC) + timedelta(hours=2)
            await page.fill("#lend-until", _local(end))
            await page.click("form.lend button[type=submit]")
            await page.wait_for_url(stack.url + "/loans")
            row = page.locator("table.loans tr", has_text="sam")
            await expect(row).to_contain_text(end.strftime("%Y-%m-%d %H:%M"), timeout=TIMEOUT_MS)
            await expect(row).to_contain_text("live")
            await page.screenshot(path=str(ARTIFACTS / "10-lent.png"), full_page=True)
            assert stack.device_id in await _visible_to(stack, "sam")

            # sam sees it on his page, in one place.
            sam_ctx = await browser.new_context()
            sam_ctx.set_default_timeout(TIMEOUT_MS)
            sam = await _sign_in(sam_ctx, stack, stack.tokens["sam"])
            await sam.goto(stack.url + "/loans")
            await expect(sam.locator("table.held")).to_contain_text(stack.device_id)
            await expect(sam.locator("table.held")).to_contain_text("olivia")
            assert await sam.locator("form.lend").count() == 0  # nothing of his to lend

            # Extend to five hours.
            later = datetime.now(UTC) + timedelta(hours=5)
            await row.locator("input[name=until]").fill(_local(later))
            await row.locator("button.extend").click()
            await page.wait_for_url(stack.url + "/loans")
            row = page.locator("table.loans tr", has_text="sam")
            await expect(row).to_contain_text(later.strftime("%Y-%m-%d %H:%M"))
            assert stack.device_id in await _visible_to(stack, "sam")

            # Revoke: the row goes, and so does sam's access.
            await row.locator("button.revoke").click()
            await page.wait_for_url(stack.url + "/loans")
            await expect(page.locator("table.loans tr", has_text="sam")).to_have_count(0)
            assert stack.device_id not in await _visible_to(stack, "sam")
            await sam.goto(stack.url + "/loans")
            await expect(sam.locator("table.held")).not_to_contain_text(stack.device_id)

            # Book a window in advance (for bob, who holds a loan of it already: his own loan
            # is no conflict); a clashing one for sam is refused; cancel bob's.
            start = datetime.now(UTC) + timedelta(days=1)
            for user in ("bob", "sam"):
                await page.select_option("#res-device", stack.device_id)
                await page.fill("#res-user", user)
                await page.fill("#res-from", _local(start))
                await page.fill("#res-until", _local(start + timedelta(hours=2)))
                await page.click("form.reserve button[type=submit]")
            await expect(page.locator("p.error")).to_contain_text("booked")
            booked = page.locator("table.reservations tr", has_text="bob")
            await expect(booked).to_contain_text("upcoming")
            await expect(page.locator("table.reservations tr", has_text="sam")).to_have_count(0)
            await page.screenshot(path=str(ARTIFACTS / "12-reserved.png"), full_page=True)
            await booked.locator("button.cancel").click()
            await page.wait_for_url(stack.url + "/loans")
            await expect(page.locator("table.reservations tr", has_text="bob")).to_have_count(0)

            # A refused lend comes back as the page with the reason (the same words for an
            # unknown user as for an unknown device: docs/security.md, "Threat model").
            await page.select_option("#lend-device", stack.device_id)
            await page.fill("#lend-user", "nobody-like-this")
            await page.click("form.lend button[type=submit]")
            await expect(page.locator("p.error")).to_contain_text("no such device, or no such user")

            # The admin reads it all on the audit page, and filters it.
            admin_ctx = await browser.new_context(viewport={"width": 1400, "height": 900})
            admin_ctx.set_default_timeout(TIMEOUT_MS)
            admin = await _sign_in(admin_ctx, stack, ADMIN_TOKEN)
            await admin.click("nav >> text=Audit")
            await admin.wait_for_url(stack.url + "/audit")
            audit = admin.locator("table.audit")
            await expect(audit).to_contain_text("grant.create")
            await expect(audit).to_contain_text("grant.revoke")
            await expect(audit).to_contain_text("web.login")
            await admin.fill("#f-action", "grant.revoke")
            await admin.fill("#f-user", "olivia")
            await admin.click("form.filters button")
            await expect(audit.locator("tbody tr")).to_have_count(1)
            await expect(audit).to_contain_text("user=sam")
            await admin.screenshot(path=str(ARTIFACTS / "11-audit.png"), full_page=True)

            # sam (neither admin nor owner) sees only his own acts there.
            await sam.goto(stack.url + "/audit")
            whos = await sam.locator("table.audit tbody tr td:nth-child(2)").all_inner_texts()
            assert whos and set(whos) == {"sam"}
        finally:
            await browser.close()
    assert problems == []


async def test_apps_and_health_page(
    stack: Stack, playwright_api: Any, tmp_path: Path
) -> None:
    expect = playwright_api.expect
    problems: list[str] = []
    apk = tmp_path / "web.apk"
    apk.write_bytes(build_apk(SimPackage(package="com.example.web", kind="app")))
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            context.set_default_timeout(TIMEOUT_MS)
            page = await _sign_in(context, stack, stack.tokens["olivia"])
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            await page.click(f"a[href='/manage/{stack.device_id}']")
            await page.wait_for_url(f"{stack.url}/manage/{stack.device_id}")

            await page.click("button.read")
            await expect(page.locator("table.health")).to_contain_text("°C")
            await page.fill("#max-temp", "45")
            await page.fill("#min-battery", "15")
            await page.click("form.thresholds button")
            await expect(page.locator("#max-temp")).to_have_value("45.0")

            # Install with progress; the page shows the app the device reported.
            await page.set_input_files("#apk", str(apk))
            await page.click("form.upload button")
            row = page.locator("table.apps tr", has_text="com.example.web")
            await expect(row).to_have_count(1)
            await page.screenshot(path=str(ARTIFACTS / "13-apps.png"), full_page=True)
            await row.locator("button.launch").click()
            await page.wait_for_url(f"{stack.url}/manage/{stack.device_id}")
            assert await page.locator("p.error").count() == 0
            await page.locator("table.apps tr", has_text="com.example.web").locator(
                "button.uninstall").click()
            await expect(page.locator("table.apps tr", has_text="com.example.web")).to_have_count(0)

            # The device list shows the reading.
            await page.click("nav >> text=Devices")
            await expect(page.locator("tr", has_text=stack.device_id)).to_contain_text("°C")
        finally:
            await browser.close()
    assert problems == []
    async with stack.api("olivia") as api:
        reset = await api.put(f"/v1/devices/{stack.device_id}/thresholds", json={})
        assert reset.status_code == 200
