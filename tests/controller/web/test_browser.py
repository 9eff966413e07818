"""The dashboard in headless Chromium (Debian's ``chromium``, driven by Playwright): sign in
through the form, open the devices page, a run's page, and watch live logcat lines arrive.
Screenshots go to ``test-artifacts/web/`` (kept by CI, ignored by git).

Skips outside CI when ``/usr/bin/chromium`` is absent; fails in CI (``require_or_skip``).
Playwright never downloads a browser here: it launches the system one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from controller.web import COOKIE_NAME
from tests.conftest import require_or_skip
from tests.controller.web.conftest import WAIT_S, Stack

pytestmark = [
    pytest.mark.adb, pytest.mark.browser, pytest.mark.asyncio(loop_scope="package"),
]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "web"
TIMEOUT_MS = WAIT_S * 1000


@pytest.fixture
def playwright_api() -> Any:
    """Playwright's async API, with Chromium present (skip outside CI, fail in CI)."""
    require_or_skip(os.path.exists(CHROMIUM), f"{CHROMIUM} is not installed")
    require_or_skip(importlib.util.find_spec("playwright") is not None,
                    "the playwright package is not installed")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return importlib.import_module("playwright.async_api")


async def test_sign_in_devices_run_and_live_logcat_in_chromium(
    stack: Stack, playwright_api: Any
) -> None:
    token = stack.tokens["olivia"]
    requested: list[str] = []
    problems: list[str] = []

    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            context.set_default_timeout(TIMEOUT_MS)
            page = await context.new_page()
            page.on("request", lambda r: requested.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))

            # Sign in through the form.
            await page.goto(stack.url + "/")
            assert page.url == stack.url + "/login"
            await page.fill("#token", token)
            await page.screenshot(path=str(ARTIFACTS / "01-login.png"))
            await page.click("button[type=submit]")
            await page.wait_for_url(stack.url + "/devices")
            [cookie] = [c for c in await context.cookies() if c["name"] == COOKIE_NAME]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert cookie["value"] != token
            assert COOKIE_NAME not in await page.evaluate("document.cookie")  # HttpOnly

            # Devices.
            row = page.locator("tr", has_text=stack.device_id)
            assert "olivia" in await row.inner_text() and "bob" in await row.inner_text()
            await page.screenshot(path=str(ARTIFACTS / "02-devices.png"), full_page=True)

            # A run's page, reached by clicking through the runs list.
            await page.click("nav >> text=Runs")
            await page.wait_for_url(stack.url + "/runs")
            await page.click(f"a[href='/runs/{stack.run_id}']")
            await page.wait_for_url(f"{stack.url}/runs/{stack.run_id}")
            assert await page.locator("mark.violation").count() > 0
            assert await page.locator(".d-add", has_text="+import android.util.Log").count() == 1
            assert await page.locator(".badge", has_text="CONFIRMED").count() == 1
            await page.screenshot(path=str(ARTIFACTS / "03-run.png"), full_page=True)

            # The live tail: open the device, make it log, see the line appear.
            await page.click("nav >> text=Devices")
            await page.click(f"a[href='/devices/{stack.device_id}']")
            # Locator assertions, not wait_for_function: the page's CSP forbids eval.
            expect = playwright_api.expect
            await expect(page.locator("#logcat-status")).to_have_text("live", timeout=TIMEOUT_MS)
            marker = f"browser-{secrets.token_hex(4)}"
            async with stack.api("olivia") as api:
                shell = await api.post(f"/v1/devices/{stack.device_id}/shell",
                                       json={"argv": ["echo", marker]})
                assert shell.status_code == 200, shell.text
            await expect(page.locator("#logcat")).to_contain_text(marker, timeout=TIMEOUT_MS)
            assert await page.locator("#logcat .line", has_text=marker).count() == 1
            await page.screenshot(path=str(ARTIFACTS / "04-live-logcat.png"), full_page=True)

            # Sign out: back to the form, and the pages are closed again.
            await page.click("form.signout button")
            await page.wait_for_url(stack.url + "/login")
            await page.goto(stack.url + "/devices")
            assert page.url == stack.url + "/login"
        finally:
            await browser.close()

    ws_origin = stack.url.replace("http://", "ws://")
    outside = [u for u in requested if not u.startswith((stack.url, ws_origin))]
    assert outside == []  # no CDN, nothing fetched from elsewhere
    assert not [u for u in requested if token in u]  # the token never went into a URL
    assert problems == []  # no script errors, no CSP violations
