"""A device's live screen and remote control in headless Chromium (issue 17, docs/screen.md).

The whole path is the real one: the simulated phone's ``screencap`` over the real adb server,
the bridge's screen stream on its own channel of the bridge WebSocket, the controller's fan-out,
and the page's canvas. Two viewers (the owner and a borrower) share one bridge stream; a click
on the owner's canvas lands on the demo app's Settings button and both viewers see the
Settings page; revoking the borrower's grant ends the borrower's view.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from controller.services import services_of
from device_bridge.sim.ui_demo import DEMO_PACKAGE, SETTINGS_ACTIVITY, launch_demo
from tests.controller.web.conftest import WAIT_S, Stack
from tests.controller.web.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    TIMEOUT_MS,
    playwright_api,
)

pytestmark = [
    pytest.mark.adb, pytest.mark.browser, pytest.mark.asyncio(loop_scope="package"),
]

__all__ = ["playwright_api"]

# The demo app's "Settings" button on the simulated 1080x2400 screen: rows are 1/40 of the
# height (60 px), the button spans rows 14-17 and the width minus 1/12 margins.
SETTINGS_BUTTON = (0.5, (14 * 60 + 90) / 2400)
BLUE_BUTTON = (30, 110, 220)


async def _sign_in(browser: Any, stack: Stack, token: str) -> Any:
    context = await browser.new_context(viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    await page.goto(stack.url + "/login")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(stack.url + "/devices")
    return page


async def _pixel(page: Any, fx: float, fy: float) -> tuple[int, int, int]:
    rgb = await page.evaluate(
        """([fx, fy]) => { const c = document.getElementById('screen-canvas');
            const d = c.getContext('2d').getImageData(Math.floor(fx * c.width),
                                                      Math.floor(fy * c.height), 1, 1).data;
            return [d[0], d[1], d[2]]; }""",
        [fx, fy],
    )
    return (int(rgb[0]), int(rgb[1]), int(rgb[2]))


async def _next_frame(page: Any) -> None:
    """Until the page paints its next frame (an attribute the page sets on every paint)."""
    await page.evaluate(
        """() => new Promise((done) => {
            const box = document.getElementById('screen');
            const last = box.dataset.lastFrame;
            const seen = new MutationObserver(() => {
                if (box.dataset.lastFrame !== last) { seen.disconnect(); done(); }
            });
            seen.observe(box, { attributes: true });
        })"""
    )


async def _shows_button(page: Any, shown: bool) -> None:
    """Until the painted picture has (or has not) the blue Settings button where it is."""
    async with asyncio.timeout(WAIT_S):
        while _near(await _pixel(page, *SETTINGS_BUTTON), BLUE_BUTTON) != shown:
            await _next_frame(page)


def _near(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return all(abs(x - y) <= 24 for x, y in zip(a, b, strict=True))  # JPEG is lossy


async def test_two_viewers_share_one_stream_a_click_lands_and_revocation_ends_a_view(
    stack: Stack, playwright_api: Any
) -> None:
    hub = stack.controller.hub
    sim = stack.sim
    sim.sim.call(lambda: launch_demo(sim.device))
    # A borrower of our own: revoking bob's loan would change what other tests see.
    admin = stack.controller.http
    made = await admin.post("/v1/tokens", json={"kind": "user", "name": "dana"})
    assert made.status_code == 201, made.text
    dana_token = made.json()["token"]
    async with stack.api("olivia") as olivia:
        lent = await olivia.post("/v1/grants", json={"device": stack.device_id, "user": "dana"})
        assert lent.status_code == 201, lent.text
        grant_id = lent.json()["id"]
    subscribes = hub.screens.subscribes
    expect = playwright_api.expect
    problems: list[str] = []

    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            owner = await _sign_in(browser, stack, stack.tokens["olivia"])
            borrower = await _sign_in(browser, stack, dana_token)
            for page in (owner, borrower):
                page.on("pageerror", lambda e: problems.append(str(e)))
                await page.goto(f"{stack.url}/devices/{stack.device_id}")
            # Frames arrive in both, from one bridge stream.
            for page in (owner, borrower):
                await expect(page.locator("#screen")).to_have_attribute(
                    "data-frames", re.compile(r"^[1-9]\d*$"))
            assert hub.screens.subscribes == subscribes + 1
            [feed] = [f for f in hub.screens.feeds() if f.device.serial == stack.serial]
            assert len(feed.viewers) == 2
            assert await owner.locator("#screen-controls").count() == 1
            assert "dana" in await owner.inner_text("#holders")
            await owner.screenshot(path=str(ARTIFACTS / "10-screen-main.png"), full_page=True)
            codec = await owner.get_attribute("#screen", "data-codec")
            assert codec in ("h264", "jpeg")  # h264 where this Chromium's WebCodecs decodes it
            assert await borrower.get_attribute("#screen", "data-codec") == codec
            await _shows_button(owner, True)

            # A click on the owner's canvas lands on the demo app's Settings button.
            box = await owner.locator("#screen-canvas").bounding_box()
            assert box is not None
            await owner.mouse.click(box["x"] + box["width"] * SETTINGS_BUTTON[0],
                                    box["y"] + box["height"] * SETTINGS_BUTTON[1])
            focus = f"{DEMO_PACKAGE}/{SETTINGS_ACTIVITY}"
            for page in (owner, borrower):
                await _shows_button(page, False)  # both viewers see the Settings page
            assert sim.sim.call(lambda: sim.device.focus) == focus
            # The tap went through the caller's grant and the audit log like any device call.
            entries = await services_of(stack.controller.app).audit.recent(limit=500)
            assert any(e.action == "device.input" and e.outcome == "ok" and e.actor == "olivia"
                       for e in entries)

            # The picture path too (browsers without an H.264 decoder): JPEG frames.
            pictures = await owner.context.new_page()
            await pictures.goto(f"{stack.url}/devices/{stack.device_id}?codec=jpeg")
            await expect(pictures.locator("#screen")).to_have_attribute("data-codec", "jpeg")
            await expect(pictures.locator("#screen")).to_have_attribute(
                "data-frames", re.compile(r"^[1-9]\d*$"))
            await _shows_button(pictures, False)
            await pictures.close()
            await owner.screenshot(path=str(ARTIFACTS / "11-screen-settings.png"),
                                   full_page=True)

            # The borrower's view ends when the grant is revoked; the owner's goes on.
            async with stack.api("olivia") as olivia:
                revoked = await olivia.delete(f"/v1/grants/{grant_id}")
                assert revoked.status_code in (200, 204), revoked.text
            await expect(borrower.locator("#screen-status")).to_contain_text(
                "ended: forbidden", timeout=TIMEOUT_MS)
            assert (await owner.get_attribute("#screen", "data-ended")) is None
            await borrower.close()
            await owner.close()
        finally:
            await browser.close()
    assert problems == []
    # The last viewer gone, the bridge stream stops.
    for _ in range(int(WAIT_S * 100)):
        if not stack.bridge.screen.streams:
            break
        await _until_next_turn()
    assert stack.bridge.screen.streams == []


async def _until_next_turn() -> None:
    await asyncio.sleep(0.01)  # the bridge's unsubscribe has no event to await here
