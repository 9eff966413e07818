"""The whole simulated path through the real adb server: simulated toolchain → install → run.

The toolchain compiles a Kotlin test against the demo app into simulated APKs; adbutils installs
them on the simulated device; ``am instrument -w -r`` streams the player's records; the logcat
holds what the demo app's behaviour model says the test caused.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from device_bridge.sim.toolchain import SimulatedToolchain
from device_bridge.workspace_template import template_dir

pytestmark = pytest.mark.adb

RUNNER = "com.droidwire.demo.test/androidx.test.runner.AndroidJUnitRunner"
TEST = textwrap.dedent("""\
    package com.droidwire.demo

    import android.os.StrictMode
    import android.os.SystemClock
    import android.util.Log
    import androidx.test.core.app.ActivityScenario
    import androidx.test.ext.junit.runners.AndroidJUnit4
    import org.junit.Test
    import org.junit.runner.RunWith

    @RunWith(AndroidJUnit4::class)
    class SettingsLoadTest {
        @Test
        fun loadingSettingsBlocksTheMainThread() {
            ActivityScenario.launch(MainActivity::class.java).use { scenario ->
                scenario.onActivity { activity ->
                    StrictMode.setThreadPolicy(
                        StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build()
                    )
                    val start = SystemClock.elapsedRealtime()
                    activity.loadSettingsFromDisk()
                    Log.i("DroidUnblocker", "elapsed=${SystemClock.elapsedRealtime() - start}ms")
                }
            }
        }
    }
    """)


def test_compile_install_instrument_and_read_the_evidence(sim_device, tmp_path):
    compiled = SimulatedToolchain().compile(template_dir(), TEST)
    assert compiled.ok, compiled.output
    assert compiled.app_apk is not None and compiled.test_apk is not None
    (tmp_path / "app.apk").write_bytes(compiled.app_apk)
    (tmp_path / "test.apk").write_bytes(compiled.test_apk)
    d = sim_device.adb
    d.install(str(tmp_path / "app.apk"), nolaunch=True, silent=True)
    d.install(str(tmp_path / "test.apk"), nolaunch=True, silent=True)
    assert {"com.droidwire.demo", "com.droidwire.demo.test"} <= set(d.list_packages())
    assert d.shell2("logcat -c").returncode == 0

    out = d.shell(f"am instrument -w -r {RUNNER}")
    assert "INSTRUMENTATION_STATUS: test=loadingSettingsBlocksTheMainThread" in out
    codes = re.findall(r"^INSTRUMENTATION_STATUS_CODE: (-?\d+)$", out, flags=re.M)
    assert codes == ["1", "0"]
    assert out.rstrip().endswith("INSTRUMENTATION_CODE: -1")

    log = d.shell("logcat -d -v threadtime")
    start = re.search(r"I ActivityManager: Start proc (\d+):com\.droidwire\.demo/u0a\d+ for ", log)
    assert start, log[-2000:]
    pid = start.group(1)
    strict = re.search(rf"^\S+ \S+\s+{pid}\s+\d+ D StrictMode: StrictMode policy violation; "
                       r"~duration=\d+ ms: android\.os\.strictmode\.DiskReadViolation$", log, re.M)
    assert strict, log[-2000:]
    elapsed = re.search(rf"\s{pid}\s+\d+ I DroidUnblocker: elapsed=(\d+)ms", log)
    assert elapsed and int(elapsed.group(1)) > 300
    assert f"SimShell: am instrument -w -r {RUNNER}" in log
