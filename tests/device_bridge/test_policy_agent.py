"""The `agent` profile (docs/security.md, "Profiles"): between standard and full. An agent may
start any app's activity (the launcher's apps, system settings screens), press navigation
keys, tap and type anywhere on the screen; it never installs, wipes (``pm clear``), reboots or
writes settings."""

from __future__ import annotations

import pytest

from device_bridge.policy import CommandContext, Policy, PolicyConfig, Profile, Rule
from protocol.errors import ErrorCode, RpcError

SERIAL = "127.0.0.1:5555"
CONTEXT = CommandContext(app_package="com.droidwire.demo", screen=(1080, 2400))


def policy(profile: Profile) -> Policy:
    return Policy(PolicyConfig(profile=profile))


def rule_of(p: Policy, command: str) -> str | None:
    try:
        p.check_shell(SERIAL, command, CONTEXT)
    except RpcError as exc:
        return str((exc.data or {}).get("rule"))
    return None


ALLOWED = [
    "am start -n com.android.settings/.Settings",
    "am start -n com.android.settings/.SubSettings",
    "am start -W -n com.google.android.apps.maps/com.google.android.maps.MapsActivity",
    "am start -n com.droidwire.demo/.MainActivity",
    "input keyevent KEYCODE_HOME",
    "input keyevent KEYCODE_BACK KEYCODE_APP_SWITCH",
    "input tap 1079 2399",
    "input swipe 10 2000 10 200 300",
    "input text hello",
    "dumpsys gfxinfo com.droidwire.demo",
    "getprop ro.build.version.sdk",
]
REFUSED: list[tuple[str, Rule]] = [
    ("pm clear com.droidwire.demo", Rule.WIPE_NOT_ALLOWED),
    ("pm clear com.android.settings", Rule.WIPE_NOT_ALLOWED),
    ("pm install /data/local/tmp/droidwire/x.apk", Rule.ARGUMENT),
    ("settings put global adb_enabled 0", Rule.ADB_OFF),
    ("settings put system screen_brightness 10", Rule.NOT_ALLOWLISTED),
    ("reboot", Rule.REBOOT),
    ("svc wifi disable", Rule.ADB_OFF),  # the deny list: every profile
    ("am force-stop com.android.settings", Rule.PACKAGE_SCOPE),
    ("am start -n com.android.settings/.Settings --es x y", Rule.ARGUMENT),
    ("input tap 1080 10", Rule.OUTSIDE_SCREEN),
    ("am start -n com.android.settings/.Settings; reboot", Rule.METACHARACTER),
]


@pytest.mark.parametrize("command", ALLOWED)
def test_agent_allows_any_app_screen_keys_taps_and_text(command: str) -> None:
    assert rule_of(policy(Profile.AGENT), command) is None


@pytest.mark.parametrize(("command", "rule"), REFUSED, ids=[c for c, _ in REFUSED])
def test_agent_never_wipes_installs_reboots_or_writes_settings(command: str, rule: Rule) -> None:
    assert rule_of(policy(Profile.AGENT), command) == rule.value


def test_standard_keeps_other_apps_out_of_reach() -> None:
    """What agent adds: standard refuses another app's screen by its package scope."""
    assert rule_of(policy(Profile.STANDARD), "am start -n com.android.settings/.Settings") == (
        Rule.PACKAGE_SCOPE.value)
    assert rule_of(policy(Profile.STANDARD), "pm clear com.droidwire.demo") is None


def test_agent_refuses_installs_and_keeps_ui() -> None:
    p = policy(Profile.AGENT)
    with pytest.raises(RpcError) as caught:
        p.check_install(SERIAL)
    assert caught.value.code is ErrorCode.FORBIDDEN
    assert (caught.value.data or {})["rule"] == Rule.INSTALL_NOT_ALLOWED.value
    p.check_ui(SERIAL)
    p.check_screenshot(SERIAL)


def test_agent_is_not_capped_for_a_borrower() -> None:
    """full answers as standard for anyone but the owner; agent is the owner's choice for
    everyone, borrowers included."""
    assert policy(Profile.AGENT).for_caller(as_owner=False).profile_for(SERIAL) is Profile.AGENT
