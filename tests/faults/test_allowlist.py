"""Security: the allow-list bypass catalogue (tests/faults/attempts.py) against the policy, then
through the bridge's RPC layer and the real adb server to a simulated device.

"Passed" means the policy let the command through; "executed" means the device ran it — read
from the simulated device's own log, which has a ``SimShell`` line for every command line its
shell receives. Both must be 0. Canary commands around the batch prove the log is read right.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from device_bridge.adb import AdbDevices
from device_bridge.policy import CommandContext, Policy, PolicyConfig, Profile
from device_bridge.rpc import Dispatcher
from protocol import ErrorCode, RpcError
from tests.adb_support import AdbServer, ConnectedSim
from tests.conftest import TIME_SCALE
from tests.faults.attempts import ANY, APP, ATTEMPTS, Attempt
from tests.faults.figures import record

AREA = "security: shell allow-list"
SCREEN = (1080, 1920)
#: Errors that mean "refused before the device": the policy (forbidden), parameter validation
#: (bad_request) or exposure (not_found). Anything else reached the device layer.
REFUSALS = {ErrorCode.FORBIDDEN, ErrorCode.BAD_REQUEST, ErrorCode.NOT_FOUND}


def _attempts(profile: Profile) -> list[Attempt]:
    return [a for a in ATTEMPTS if profile is Profile.STANDARD or a.scope == ANY]


def _check(passed: list[str]) -> None:
    assert not passed, "attempts got past the policy:\n" + "\n".join(passed)


@pytest.mark.parametrize("profile", [Profile.STANDARD, Profile.FULL])
def test_policy_refuses_every_bypass_attempt(profile: Profile) -> None:
    policy = Policy(PolicyConfig(profile=profile))
    context = CommandContext(app_package=APP, installed_packages=frozenset({APP}), screen=SCREEN)
    attempts = _attempts(profile)
    passed: list[str] = []
    rules: set[str] = set()
    for attempt in attempts:
        command = list(attempt.command) if isinstance(attempt.command, tuple) else attempt.command
        try:
            argv = policy.check_shell("emulator-5554", command, context)
        except RpcError as exc:
            assert exc.code is ErrorCode.FORBIDDEN, f"{attempt}: {exc}"
            assert exc.data and exc.data.get("rule"), f"{attempt}: refusal without a rule"
            rules.add(exc.data["rule"])
            continue
        passed.append(f"{attempt} -> {argv}")
    record(AREA, f"bypass attempts ({profile.value} profile)", len(attempts))
    record(AREA, f"  passed the policy ({profile.value})", len(passed),
           must_be_zero=True)
    record(AREA, f"  distinct refusal rules named ({profile.value})", len(rules))
    assert len(attempts) >= (100 if profile is Profile.STANDARD else 50)
    _check(passed)


# -- through the RPC layer, the real adb server and a simulated device ------------------------


@pytest.fixture
async def devices(adb_server: AdbServer) -> AsyncIterator[AdbDevices]:
    layer = AdbDevices(port=adb_server.port, call_timeout_s=15.0 * TIME_SCALE, flush_s=0.025)
    try:
        yield layer
    finally:
        await layer.aclose()


def _shell_lines(sim: ConnectedSim) -> list[str]:
    text: str = sim.call(lambda: sim.device.logbuf.text())
    return [line for line in text.splitlines() if " SimShell" in line]


@pytest.mark.adb
@pytest.mark.parametrize("profile", [Profile.STANDARD, Profile.FULL])
async def test_no_bypass_attempt_runs_on_the_device(
    profile: Profile, devices: AdbDevices, sim_device: ConnectedSim
) -> None:
    dispatcher = Dispatcher(policy=Policy(PolicyConfig(profile=profile)), devices=devices)
    serial = sim_device.address
    dispatcher.installed[serial] = {APP}  # the run's app: am/pm on it would be allowed
    mark = uuid.uuid4().hex[:12]

    async def echo(word: str) -> None:
        out = await dispatcher("device.shell", {"serial": serial, "argv": ["echo", word]})
        assert out["stdout"] == f"{word}\n"

    await dispatcher("device.shell", {"serial": serial, "argv": ["input", "tap", "1", "1"]})
    await echo(f"start-{mark}")  # the screen size is cached: no helper commands from here on
    attempts = _attempts(profile)
    passed: list[str] = []
    codes: dict[str, int] = {}
    for attempt in attempts:
        try:
            await dispatcher("device.shell", attempt.params(serial))
        except RpcError as exc:
            if exc.code in REFUSALS:
                codes[exc.code.value] = codes.get(exc.code.value, 0) + 1
                continue
        passed.append(str(attempt))
    await echo(f"end-{mark}")

    lines = _shell_lines(sim_device)
    starts = [i for i, line in enumerate(lines) if f"start-{mark}" in line]
    ends = [i for i, line in enumerate(lines) if f"end-{mark}" in line]
    assert len(starts) == 1 and len(ends) == 1, "the canaries must each be logged once"
    executed = lines[starts[0] + 1 : ends[0]]
    record(AREA, f"attempts through RPC + adb + device ({profile.value})", len(attempts))
    for code, n in sorted(codes.items()):
        record(AREA, f"  refused with {code} ({profile.value})", n)
    record(AREA, f"  executed on the device ({profile.value})", len(executed), must_be_zero=True)
    assert len(executed) == len(passed), executed
    _check(passed)
