"""The toolchain's APKs on the simulated device: pm install, am instrument, logcat -v threadtime.

The device is another component; this only checks the seam (DeviceHooks, the APK contract).
"""

from __future__ import annotations

import re

from device_bridge.sim.device import SimDevice
from device_bridge.sim.shell import BufferSink, BytesSource

from .helpers import compile_test, llm_test

RUNNER = "androidx.test.runner.AndroidJUnitRunner"
THREADTIME = re.compile(r"^(\d\d-\d\d) (\d\d:\d\d:\d\d\.\d{3})\s+(\d+)\s+(\d+) ([VDIWEF]) (.*?)\s*: (.*)$")


async def _sh(dev: SimDevice, cmdline: str) -> str:
    out, err = BufferSink(), BufferSink()
    await dev.run_shell(cmdline, stdin=BytesSource(b""), stdout=out, stderr=err)
    return out.data.decode()


async def test_compiled_test_runs_on_the_simulated_device():
    compiled = compile_test(llm_test("loadSettingsFromDisk"))
    assert compiled.ok
    dev = SimDevice(noise_interval=None, seed=3)
    for name, data in (("app.apk", compiled.app_apk), ("test.apk", compiled.test_apk)):
        dev.files.write(f"/data/local/tmp/{name}", data)
        assert await _sh(dev, f"pm install -r -t /data/local/tmp/{name}") == "Success\n"
    await _sh(dev, "logcat -c")
    cls = compiled.test_classes[0]
    out = await _sh(dev, f"am instrument -w -r -e class {cls} com.droidwire.demo.test/{RUNNER}")
    assert "INSTRUMENTATION_STATUS_CODE: 0" in out
    assert out.rstrip().endswith("INSTRUMENTATION_CODE: -1")
    logcat = await _sh(dev, "logcat -d -v threadtime")
    rows = [m for m in map(THREADTIME.match, logcat.splitlines()) if m]
    start = next(r for r in rows if r.group(7).startswith("Start proc "))
    app_pid = start.group(7).split()[2].split(":")[0]
    strict = [r for r in rows if r.group(6) == "StrictMode"]
    assert strict[0].group(7).endswith("android.os.strictmode.DiskReadViolation")
    assert {(r.group(3), r.group(4)) for r in strict} == {(app_pid, app_pid)}
    [timing] = [r for r in rows if r.group(6) == "DroidUnblocker"]
    assert timing.group(3) == app_pid
    assert 800 <= int(re.fullmatch(r"elapsed=(\d+)ms", timing.group(7)).group(1)) <= 900
