"""Packages, activities and instrumentation on the simulated device (no sockets)."""

from __future__ import annotations

import asyncio
import io
import re
import struct
import sys
import types
from xml.etree import ElementTree

import pytest
from PIL import Image

from device_bridge.sim.apk import SimPackage, SimTest, build_apk
from device_bridge.sim.shell import BytesSource
from tests.conftest import TIME_SCALE
from tests.device_bridge.sim.helpers import new_device, sh

APP = SimPackage(package="com.example.demo", kind="app", version_code=2)
TESTS = SimPackage(
    package="com.example.demo.test", kind="test", target_package="com.example.demo",
    tests=[SimTest("com.example.demo.FooTest", "testOne")],
)
RUNNER = "androidx.test.runner.AndroidJUnitRunner"
COMPONENT = f"com.example.demo.test/{RUNNER}"


def push(dev, name: str, data: bytes) -> str:
    path = f"/data/local/tmp/{name}"
    dev.files.write(path, data)
    return path


async def install(dev, pkg: SimPackage, flags: str = "-r -t") -> str:
    path = push(dev, f"{pkg.package}.apk", build_apk(pkg))
    return (await sh(dev, f"pm install {flags} {path}")).out


async def test_install_list_reinstall_uninstall():
    dev = new_device()
    assert await install(dev, APP) == "Success\n"
    assert "package:com.example.demo\n" in (await sh(dev, "pm list packages")).out
    assert (await sh(dev, "pm list packages -3")).out == "package:com.example.demo\n"
    assert (await sh(dev, "pm path com.example.demo")).out.startswith("package:/data/app/")
    # As pm on Android 7 and later: an install replaces what is there (``-r`` is accepted and
    # changes nothing); ``-R`` disallows the replacement.
    assert await install(dev, APP, flags="") == "Success\n"
    again = await install(dev, APP, flags="-R -t")
    assert again.startswith("Failure [INSTALL_FAILED_ALREADY_EXISTS")
    older = SimPackage(package=APP.package, kind="app", version_code=1)
    assert (await install(dev, older)).startswith("Failure [INSTALL_FAILED_VERSION_DOWNGRADE")
    assert await install(dev, older, flags="-r -d") == "Success\n"
    assert (await sh(dev, "pm clear com.example.demo")).out == "Success\n"
    assert (await sh(dev, "pm clear com.nope")).out == "Failed\n"
    assert (await sh(dev, "pm uninstall com.example.demo")).out == "Success\n"
    gone = await sh(dev, "pm uninstall com.example.demo")
    assert gone.out == "Failure [DELETE_FAILED_INTERNAL_ERROR]\n" and gone.code == 1
    assert "com.example.demo" not in (await sh(dev, "pm list packages")).out


async def test_non_simulated_apk_is_refused_like_android():
    dev = new_device()
    path = push(dev, "real.apk", b"PK\x03\x04 definitely not our format")
    result = await sh(dev, f"pm install -r -t {path}")
    assert result.out.startswith("Failure [INSTALL_PARSE_FAILED_NOT_APK: ")
    assert result.code == 1
    missing = await sh(dev, "pm install /data/local/tmp/none.apk")
    assert missing.code == 1 and "Unable to open file" in missing.err


async def test_streamed_install_reads_exactly_size_bytes_from_stdin():
    dev = new_device()
    apk = build_apk(APP)
    result = await sh(dev, f"cmd package 'install' '-r' -S {len(apk)}", stdin=apk + b"extra")
    assert result.out == "Success\n"
    short = await sh(dev, f"cmd package install -S {len(apk) + 10}", stdin=apk)
    assert "Failure" in short.out


async def test_am_start_and_force_stop_drive_focus_and_log():
    dev = new_device()
    await install(dev, APP)
    started = await sh(dev, "am start -W -n com.example.demo/.MainActivity")
    assert started.code == 0 and "Status: ok" in started.out
    window = (await sh(dev, "dumpsys window")).out
    assert "com.example.demo/.MainActivity}" in window
    log = (await sh(dev, "logcat -d")).out
    assert "ActivityTaskManager: Displayed com.example.demo/.MainActivity for user 0: +" in log
    assert ":com.example.demo/u0a" in log and " for top-activity {" in log
    assert (await sh(dev, "am force-stop com.example.demo")).code == 0
    assert "NexusLauncherActivity" in (await sh(dev, "dumpsys window")).out
    assert "Killing " in (await sh(dev, "logcat -d ActivityManager:I *:S")).out
    missing = await sh(dev, "am start -n com.nope/.Main")
    assert missing.code == 1 and "does not exist" in missing.err


async def test_old_profiles_log_launches_as_activity_manager():
    dev = new_device(profile="old-nexus")
    await install(dev, APP)
    await sh(dev, "am start -n com.example.demo/.MainActivity")
    assert "I ActivityManager: Displayed com.example.demo/.MainActivity: +" in (
        await sh(dev, "logcat -d")).out


async def test_instrument_without_the_test_package_answers_like_a_real_device():
    dev = new_device()
    result = await sh(dev, f"am instrument -w -r -e class com.x.Foo {COMPONENT}")
    assert result.out == (
        "INSTRUMENTATION_STATUS: id=ActivityManagerService\n"
        "INSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for: "
        f"ComponentInfo{{{COMPONENT}}}\n"
        "INSTRUMENTATION_STATUS_CODE: -1\n"
    )
    assert result.err.startswith(
        f"android.util.AndroidException: INSTRUMENTATION_FAILED: {COMPONENT}\n\tat ")
    assert result.code == 1


async def test_instrument_with_a_broken_test_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "device_bridge.sim.player", None)  # import fails
    dev = new_device()
    await install(dev, APP)
    await install(dev, TESTS)
    result = await sh(dev, f"am instrument -w -r {COMPONENT}")
    assert result.out.startswith("INSTRUMENTATION_RESULT: shortMsg=java.lang.RuntimeException\n")
    assert result.out.endswith("INSTRUMENTATION_CODE: 0\n")
    crash = (await sh(dev, "logcat -d -b crash")).out
    assert "E AndroidRuntime: FATAL EXCEPTION: main" in crash
    assert "ClassNotFoundException" in crash


class _ScriptedPlayer:
    """Uses every DeviceHooks method, as the real player does."""

    def play(self, test_pkg, app_pkg, *, class_filter, device):
        pid = device.start_process(app_pkg.package)
        yield f"INSTRUMENTATION_STATUS: class={class_filter}"
        yield "INSTRUMENTATION_STATUS_CODE: 1"
        device.log("D", "StrictMode", "StrictMode policy violation; ~duration=50 ms: "
                   "android.os.strictmode.DiskReadViolation\n\tat a.b.C.d(C.java:1)",
                   pid=pid, tid=pid)
        device.advance(5000)
        device.log("I", "DroidUnblocker", "elapsed=847ms", pid=pid, tid=pid)
        device.kill_process(app_pkg.package, reason="crash")
        yield "INSTRUMENTATION_CODE: -1"


async def test_instrument_streams_the_players_lines_and_hooks_reach_logcat(monkeypatch):
    fake = types.ModuleType("device_bridge.sim.player")
    fake.default_player = _ScriptedPlayer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "device_bridge.sim.player", fake)
    dev = new_device()
    await install(dev, APP)
    await install(dev, TESTS)
    result = await sh(dev, f"am instrument -w -r -e class com.example.demo.FooTest {COMPONENT}")
    assert result.out == (
        "INSTRUMENTATION_STATUS: class=com.example.demo.FooTest\n"
        "INSTRUMENTATION_STATUS_CODE: 1\nINSTRUMENTATION_CODE: -1\n")
    entries = dev.logbuf.entries()
    start = next(e for e in entries if e.message.startswith("Start proc "))
    assert start.tag == "ActivityManager"
    assert start.message.endswith(":com.example.demo/u0a151 for added application com.example.demo")
    app_pid = int(start.message.split()[2].split(":")[0])
    strict = [e for e in entries if e.tag == "StrictMode"]
    assert [e.pid for e in strict] == [app_pid, app_pid] and strict[1].message.startswith("\tat ")
    timing = next(e for e in entries if e.tag == "DroidUnblocker")
    assert timing.ts - strict[0].ts >= 5.0
    assert any(e.message.startswith(f"Killing {app_pid}:com.example.demo/") for e in entries)


@pytest.mark.parametrize("profile", ["pixel-7", "old-nexus", "tablet-x86"])
async def test_screencap_png_and_raw(profile):
    dev = new_device(profile=profile)
    out = io.BytesIO()

    class Sink:
        async def write(self, data: bytes) -> None:
            out.write(data)

    await dev.run_shell("screencap -p", stdin=BytesSource(), stdout=Sink(), stderr=Sink())
    img = Image.open(io.BytesIO(out.getvalue()))
    assert img.format == "PNG"
    assert img.size == (dev.profile.width, dev.profile.height)
    raw = dev.screenshot(png=False)
    w, h, fmt = struct.unpack_from("<III", raw)
    header = 16 if dev.profile.sdk >= 28 else 12
    assert (w, h, fmt) == (*img.size, 1)
    assert len(raw) == header + w * h * 4


async def test_dumpsys_package_meminfo_and_gfxinfo():
    dev = new_device()
    await install(dev, APP)
    await install(dev, TESTS)
    package = (await sh(dev, "dumpsys package com.example.demo")).out
    assert "Package [com.example.demo]" in package and "versionCode=2 " in package
    assert "Instrumentation: com.example.demo.test/" in (
        await sh(dev, "dumpsys package com.example.demo.test")).out
    assert (await sh(dev, "dumpsys meminfo com.example.demo")).out == (
        "No process found for: com.example.demo\n")
    await sh(dev, "am start -n com.example.demo/.MainActivity")
    meminfo = (await sh(dev, "dumpsys meminfo com.example.demo")).out
    assert "** MEMINFO in pid " in meminfo and "TOTAL" in meminfo
    assert "Janky frames:" in (await sh(dev, "dumpsys gfxinfo com.example.demo")).out


def _center(node) -> tuple[int, int]:
    left, top, right, bottom = map(int, re.findall(r"\d+", node.get("bounds")))
    return (left + right) // 2, (top + bottom) // 2


async def _dump(dev) -> ElementTree.Element:
    out = (await sh(dev, "uiautomator dump /dev/tty")).out
    xml, _, trailer = out.rpartition("</hierarchy>")
    assert trailer == "UI hierchary dumped to: /dev/tty\n"
    return ElementTree.fromstring(xml + "</hierarchy>")


async def test_what_uiautomator_shows_is_what_input_touches():
    dev = new_device()
    await install(dev, APP)
    launcher = await _dump(dev)
    icon = next(n for n in launcher.iter("node") if n.get("content-desc") == "com.example.demo")
    assert icon.get("clickable") == "true"
    x, y = _center(icon)
    await sh(dev, f"input tap {x} {y}")
    assert "u0 com.example.demo/.MainActivity}" in (await sh(dev, "dumpsys window")).out

    app = await _dump(dev)
    assert {n.get("package") for n in app.iter("node")} == {"com.example.demo"}
    edit = next(n for n in app.iter("node") if n.get("class") == "android.widget.EditText")
    assert edit.get("focused") == "false"
    assert "mInputShown=false" in (await sh(dev, "dumpsys input_method")).out
    x, y = _center(edit)
    await sh(dev, f"input tap {x} {y}; input text hello%sthere; input keyevent DEL")
    edit = next(n for n in (await _dump(dev)).iter("node")
                if n.get("class") == "android.widget.EditText")
    assert (edit.get("text"), edit.get("focused")) == ("hello ther", "true")
    assert "mInputMethodWindow=Window{" in (await sh(dev, "dumpsys window")).out

    await sh(dev, "input keyevent BACK")  # closes the keyboard first
    assert "mInputShown=false" in (await sh(dev, "dumpsys input_method")).out
    assert "com.example.demo/.MainActivity}" in (await sh(dev, "dumpsys window")).out
    await sh(dev, "input keyevent BACK")  # then leaves the activity
    assert "NexusLauncherActivity}" in (await sh(dev, "dumpsys window")).out
    assert (await sh(dev, "uiautomator dump")).out == (
        "UI hierchary dumped to: /sdcard/window_dump.xml\n")
    assert dev.files.read("/sdcard/window_dump.xml").startswith(b"<?xml")


async def test_screenshots_follow_the_screen():
    dev = new_device()
    await install(dev, APP)
    home = dev.screenshot(png=True)
    await sh(dev, "am start -n com.example.demo/.MainActivity")
    app = dev.screenshot(png=True)
    await sh(dev, "input text typed")
    assert len({home, app, dev.screenshot(png=True)}) == 3


async def test_instrument_without_r_prints_the_stream_texts(monkeypatch):
    class Player:
        def play(self, test_pkg, app_pkg, *, class_filter, device):
            yield "INSTRUMENTATION_STATUS: class=com.example.demo.FooTest"
            yield "INSTRUMENTATION_STATUS: stream="
            yield "com.example.demo.FooTest:"
            yield "INSTRUMENTATION_STATUS_CODE: 1"
            yield "INSTRUMENTATION_STATUS: stream=."
            yield "INSTRUMENTATION_STATUS_CODE: 0"
            yield "INSTRUMENTATION_RESULT: stream="
            yield ""
            yield "OK (1 test)"
            device.log("I", "Player", "finished", pid=1, tid=1)
            yield "INSTRUMENTATION_CODE: -1"

    fake = types.ModuleType("device_bridge.sim.player")
    fake.default_player = Player  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "device_bridge.sim.player", fake)
    dev = new_device()
    await install(dev, APP)
    await install(dev, TESTS)
    assert (await sh(dev, f"am instrument -w {COMPONENT}")).out == (
        "\ncom.example.demo.FooTest:\n.\n\n\nOK (1 test)\n")
    assert (await sh(dev, f"am instrument {COMPONENT}")).out == ""  # no -w: runs detached

    async def finished_twice() -> None:
        while sum(e.tag == "Player" for e in dev.logbuf.entries()) < 2:
            await dev.logbuf.wait_after(dev.logbuf.last_seq)

    await asyncio.wait_for(finished_twice(), 5 * TIME_SCALE)


async def test_pidof_ps_and_date_see_the_app_process():
    dev = new_device()
    await install(dev, APP)
    assert (await sh(dev, "pidof com.example.demo")).code == 1
    await sh(dev, "am start -n com.example.demo/.MainActivity")
    pid = (await sh(dev, "pidof com.example.demo")).out.strip()
    assert pid.isdigit()
    logcat = (await sh(dev, f"logcat -d --pid={pid}")).out
    assert "Start proc" not in logcat  # that line is system_server's, not the app's
    rows = (await sh(dev, "ps -A")).out.splitlines()
    assert rows[0].split()[:2] == ["USER", "PID"]
    assert any(r.split()[1] == pid and r.endswith(" com.example.demo") for r in rows)
    assert (await sh(dev, "ps -A com.nope")).code == 1
    year = (await sh(dev, "date +%Y")).out.strip()
    assert year.isdigit() and int(year) >= 2024


async def test_an_update_must_come_from_the_same_signer_and_moves_the_code_path():
    """Like a phone: another signer's APK cannot replace an installed package, and an update
    gets a new code path in ``pm list packages -f`` (how the bridge tells what it installed)."""
    dev = new_device()
    mine = SimPackage(package="com.alice.banking", kind="app", signer="alice")
    assert await install(dev, mine) == "Success\n"
    before = (await sh(dev, "pm list packages -f com.alice.banking")).out
    theirs = SimPackage(package="com.alice.banking", kind="app", signer="mallory",
                        version_code=9)
    refused = await install(dev, theirs)
    assert refused.startswith("Failure [INSTALL_FAILED_UPDATE_INCOMPATIBLE"), refused
    assert (await sh(dev, "pm list packages -f com.alice.banking")).out == before
    assert await install(dev, mine, flags="-r -t -g") == "Success\n"
    after = (await sh(dev, "pm list packages -f com.alice.banking")).out
    assert after != before and after.endswith("=com.alice.banking\n")
