"""The simulated phone's pace: ``instant`` by default, ``phone`` spends a phone's wall time.

The waits are recorded rather than slept (``Pace.wait`` is where every wait goes), so the
test checks what a paced phone asks for, not how long the machine took.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from device_bridge.sim.apk import SimPackage, SimTest, build_apk
from device_bridge.sim.pace import PACES, Pace, get_pace
from tests.device_bridge.sim.helpers import new_device, sh

APP = SimPackage(package="com.example.demo", kind="app", version_code=2)
TESTS = SimPackage(
    package="com.example.demo.test", kind="test", target_package="com.example.demo",
    tests=[SimTest("com.example.demo.FooTest", "testOne", steps=[{"sleep": 500}])],
)
COMPONENT = "com.example.demo.test/androidx.test.runner.AndroidJUnitRunner"


@dataclass(frozen=True)
class RecordingPace(Pace):
    waited: list[float] = field(default_factory=list)

    async def wait(self, seconds: float) -> None:
        self.waited.append(round(seconds, 3))


async def _install_run_uninstall(pace: RecordingPace) -> tuple[float, str]:
    dev = new_device(pace=pace)
    for pkg in (APP, TESTS):
        path = f"/data/local/tmp/{pkg.package}.apk"
        dev.files.write(path, build_apk(pkg))
        assert (await sh(dev, f"pm install -t {path}")).out == "Success\n"
    clock = dev._clock_offset
    out = (await sh(dev, f"am instrument -w -r {COMPONENT}")).out
    assert (await sh(dev, "pm uninstall com.example.demo.test")).out == "Success\n"
    return dev._clock_offset - clock, out


async def test_a_phone_paced_device_spends_a_phones_time_on_each_step() -> None:
    phone = PACES["phone"]
    pace = RecordingPace("phone", install_s=phone.install_s, uninstall_s=phone.uninstall_s,
                         process_start_s=phone.process_start_s, real_time=True)
    moved, out = await _install_run_uninstall(pace)
    assert "OK (1 test)" in out
    installs, (start, *test_time), uninstall = pace.waited[:2], pace.waited[2:-1], pace.waited[-1]
    assert installs == [phone.install_s, phone.install_s]
    assert start == phone.process_start_s
    assert sum(test_time) >= 0.5  # the test's own sleep passes for real …
    assert moved < 0.5  # … instead of moving the clock ahead of the wall
    assert uninstall == phone.uninstall_s


async def test_an_instant_device_moves_its_clock_and_waits_for_nothing() -> None:
    pace = RecordingPace("instant")
    moved, out = await _install_run_uninstall(pace)
    assert "OK (1 test)" in out
    assert set(pace.waited) == {0.0}
    assert moved >= 0.5


def test_an_unknown_pace_names_the_known_ones() -> None:
    assert get_pace("phone") is PACES["phone"]
    with pytest.raises(KeyError, match="instant, phone"):
        get_pace("snail")
