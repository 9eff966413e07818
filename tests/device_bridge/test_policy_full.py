"""The `full` profile (docs/security.md, "Profiles"): the owner's own use only, and even then
never what takes the device away from its owner or runs another program on its behalf —
judged by effect, not name, assuming the build may be rooted or userdebug."""

from __future__ import annotations

import shlex

import pytest

from device_bridge.policy import CommandContext, Policy, PolicyConfig, Profile, Rule
from protocol.errors import RpcError

SERIAL = "127.0.0.1:5555"


def full() -> Policy:
    return Policy(PolicyConfig(profile=Profile.FULL))


def rule_of(policy: Policy, command: str) -> str | None:
    try:
        policy.check_shell(SERIAL, command)
    except RpcError as exc:
        return str((exc.data or {}).get("rule"))
    return None


TAKEAWAYS: list[tuple[str, Rule]] = [
    # Programs that run other programs, by any name.
    ("toolbox reboot", Rule.REBOOT),
    ("toybox reboot", Rule.REBOOT),
    ("/system/bin/toybox reboot", Rule.REBOOT),
    ("toybox toybox reboot", Rule.REBOOT),
    ("toybox env reboot", Rule.COMMAND_WRAPPER),
    ("toybox nice -n 5 reboot", Rule.COMMAND_WRAPPER),
    ("toybox timeout 5 reboot", Rule.COMMAND_WRAPPER),
    ("toybox", Rule.COMMAND_WRAPPER),
    ("busybox reboot", Rule.REBOOT),
    ("busybox sh -c id", Rule.SHELL_INTERPRETER),
    ("linker64 /system/bin/reboot", Rule.COMMAND_WRAPPER),
    ("/apex/com.android.runtime/bin/linker64 /system/bin/reboot", Rule.COMMAND_WRAPPER),
    ("logwrapper reboot", Rule.COMMAND_WRAPPER),
    ("app_process64 / com.evil.Main", Rule.COMMAND_WRAPPER),
    ("app_process32 / com.evil.Main", Rule.COMMAND_WRAPPER),
    ("dalvikvm64 -cp /data/local/tmp/x.dex Main", Rule.COMMAND_WRAPPER),
    ("chrt -f 10 reboot", Rule.COMMAND_WRAPPER),
    ("nice reboot", Rule.COMMAND_WRAPPER),
    ("env reboot", Rule.COMMAND_WRAPPER),
    ("timeout 5 reboot", Rule.COMMAND_WRAPPER),
    ("nohup reboot", Rule.COMMAND_WRAPPER),
    ("sh -c reboot", Rule.SHELL_INTERPRETER),
    ("su 0 reboot", Rule.SU),
    ("magisk su -c reboot", Rule.COMMAND_WRAPPER),
    ("simpleperf record -- reboot", Rule.COMMAND_WRAPPER),
    ("gdbserver64 :5039 /system/bin/reboot", Rule.COMMAND_WRAPPER),
    ("/data/local/tmp/droidwire/rb", Rule.COMMAND_WRAPPER),
    ("./rb", Rule.COMMAND_WRAPPER),
    # Rebooting, shutting down, wiping, by any route.
    ("reboot", Rule.REBOOT),
    ("reboot recovery", Rule.REBOOT),
    ("svc power reboot", Rule.REBOOT),
    ("svc power shutdown", Rule.REBOOT),
    ("setprop sys.powerctl reboot", Rule.SETPROP),
    ("resetprop sys.powerctl reboot", Rule.SETPROP),
    ("service call power 16 i32 0 i32 0 i32 1", Rule.REBOOT),
    ("service call activity 1", Rule.COMMAND_WRAPPER),
    ("am broadcast -a android.intent.action.REBOOT", Rule.REBOOT),
    ("am broadcast -a android.intent.action.ACTION_SHUTDOWN", Rule.REBOOT),
    ("am broadcast -a android.intent.action.MASTER_CLEAR", Rule.REBOOT),
    ("am start -a android.intent.action.REBOOT", Rule.REBOOT),
    ("cmd power reboot", Rule.COMMAND_WRAPPER),
    ("stop", Rule.REBOOT),
    ("vdc volume unmount emulated", Rule.REBOOT),
    # The lock screen.
    ("locksettings set-pin 1234", Rule.LOCK_SCREEN),
    ("locksettings clear --old 1234", Rule.LOCK_SCREEN),
    ("settings put secure lockscreen.disabled 1", Rule.LOCK_SCREEN),
    ("settings --user 0 put secure lock_screen_owner_info x", Rule.LOCK_SCREEN),
    ("dpm set-device-owner com.evil/.Admin", Rule.LOCK_SCREEN),
    # adb itself.
    ("setprop ctl.stop adbd", Rule.SETPROP),
    ("stop adbd", Rule.ADB_OFF),
    ("settings put global adb_enabled 0", Rule.ADB_OFF),
    ("settings put global development_settings_enabled 0", Rule.ADB_OFF),
    ("settings delete global adb_enabled", Rule.ADB_OFF),
    ("settings reset global", Rule.ADB_OFF),
    ("svc usb setFunctions mtp", Rule.ADB_OFF),
    ("svc wifi disable", Rule.ADB_OFF),
    ("ip link set wlan0 down", Rule.ADB_OFF),
    ("ifconfig wlan0 down", Rule.ADB_OFF),
    ("iptables -A INPUT -p tcp --dport 5555 -j DROP", Rule.ADB_OFF),
    ("pkill adbd", Rule.SIGNAL_INIT),
    ("killall system_server", Rule.SIGNAL_INIT),
    # init and every process.
    ("kill 1", Rule.SIGNAL_INIT),
    ("kill -9 1", Rule.SIGNAL_INIT),
    ("kill -KILL 1", Rule.SIGNAL_INIT),
    ("kill -s KILL 1", Rule.SIGNAL_INIT),
    ("kill -- -1", Rule.SIGNAL_INIT),
    ("kill -9 -1", Rule.SIGNAL_INIT),
    ("kill -1", Rule.SIGNAL_INIT),
    ("toybox kill -9 1", Rule.SIGNAL_INIT),
    ("mount -o remount,rw /system", Rule.CHMOD),
]


@pytest.mark.parametrize(("command", "rule"), TAKEAWAYS, ids=[c for c, _ in TAKEAWAYS])
def test_full_refuses_what_takes_the_device_away(command: str, rule: Rule) -> None:
    assert rule_of(full(), command) == rule.value


OWNER_USE = [
    "toybox ls /sdcard",
    "/system/bin/ls /data",
    "kill 12345",
    "kill -9 12345",
    "kill -l",
    "svc power stayon true",
    "settings put system screen_brightness 80",
    "settings get global adb_enabled",
    "am start -n com.example.app/.MainActivity",
    "ip addr show",
    "pkill com.example.app",
]


@pytest.mark.parametrize("command", OWNER_USE)
def test_full_still_serves_the_owners_own_use(command: str) -> None:
    assert full().check_shell(SERIAL, command) == shlex.split(command)


def test_full_is_the_owners_alone_a_borrower_gets_standard() -> None:
    policy = Policy(PolicyConfig(profile=Profile.STANDARD, devices={SERIAL: Profile.FULL}))
    owner = policy.for_caller(as_owner=True)
    borrower = policy.for_caller(as_owner=False)
    assert owner.profile_for(SERIAL) is Profile.FULL
    assert borrower.profile_for(SERIAL) is Profile.STANDARD
    assert owner.check_shell(SERIAL, "ls /data") == ["ls", "/data"]
    assert rule_of(borrower, "ls /data") == Rule.PATH_OUTSIDE_WORKSPACE.value
    with pytest.raises(RpcError):
        borrower.check_pull(SERIAL, "/data/system/packages.xml")
    with pytest.raises(RpcError):
        borrower.check_uninstall(SERIAL, "com.bob.banking")
    # The view shares the owner's switches: a pause reaches every caller at once.
    policy.pause()
    assert rule_of(borrower, "echo hi") == Rule.PAUSED.value
    policy.resume()
    assert rule_of(borrower, "echo hi") is None


def test_a_package_that_was_there_before_is_never_cleared_nor_uninstalled() -> None:
    policy = Policy(PolicyConfig(profile=Profile.STANDARD))
    ctx = CommandContext(installed_packages=frozenset({"com.bob.banking", "com.new.app"}),
                         preexisting=frozenset({"com.bob.banking"}))
    assert policy.check_shell(SERIAL, "pm clear com.new.app", ctx) == ["pm", "clear", "com.new.app"]
    with pytest.raises(RpcError) as info:
        policy.check_shell(SERIAL, "pm clear com.bob.banking", ctx)
    assert (info.value.data or {})["rule"] == Rule.PACKAGE_PREEXISTING.value
    with pytest.raises(RpcError) as info:
        policy.check_uninstall(SERIAL, "com.bob.banking", ctx)
    assert (info.value.data or {})["rule"] == Rule.PACKAGE_PREEXISTING.value
    policy.check_uninstall(SERIAL, "com.new.app", ctx)
