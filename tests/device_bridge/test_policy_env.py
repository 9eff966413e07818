"""A leading NAME=value word is an assignment to the device's shell: refused in every profile."""

from __future__ import annotations

import pytest

from device_bridge.policy import CommandContext, Policy, PolicyConfig
from protocol.envelope import Profile
from protocol.errors import ErrorCode, RpcError

CASES = ["X=1 reboot", "A=b sh -c id", "LD_PRELOAD=/data/local/tmp/x.so id", "X=1 rm -rf /",
         "PATH=/data/local/tmp echo hi", "_=1 echo"]


@pytest.mark.parametrize("profile", [Profile.STANDARD, Profile.FULL])
@pytest.mark.parametrize("command", CASES)
def test_env_assignment_prefix_is_refused(profile: Profile, command: str) -> None:
    policy = Policy(PolicyConfig(profile=profile))
    with pytest.raises(RpcError) as info:
        policy.check_shell("emulator-5554", command, CommandContext())
    assert info.value.code is ErrorCode.FORBIDDEN
    assert info.value.data == {"rule": "env_assignment"}


def test_an_equals_sign_in_a_later_argument_is_still_fine_under_full() -> None:
    policy = Policy(PolicyConfig(profile=Profile.FULL))
    assert policy.check_shell("emulator-5554", "echo a=b", CommandContext()) == ["echo", "a=b"]
