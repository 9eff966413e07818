"""The host owner's command policy (docs/design.md §6): table tests and a property test.

Every refusal is checked for its rule name, because the rule is part of the REST error.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from device_bridge.policy import (
    DROIDWIRE_DIR,
    METACHARACTERS,
    CommandContext,
    LogcatScope,
    Policy,
    PolicyConfig,
    Profile,
    Rule,
    parse_command,
)
from protocol.errors import ErrorCode, RpcError

SERIAL = "127.0.0.1:5555"
APP = "com.example.app"
TEST = "com.example.app.test"
RUNNER = f"{TEST}/androidx.test.runner.AndroidJUnitRunner"
CTX = CommandContext(
    app_package=APP,
    test_package=TEST,
    installed_packages=frozenset({"org.droidwire.helper"}),
    screen=(1080, 1920),
)
W = DROIDWIRE_DIR


def policy(profile: Profile = Profile.STANDARD, **kw: object) -> Policy:
    return Policy(PolicyConfig(profile=profile, **kw))  # type: ignore[arg-type]


def refused(fn, *args, **kwargs) -> RpcError:
    with pytest.raises(RpcError) as info:
        fn(*args, **kwargs)
    return info.value


# --------------------------------------------------------------------------------------------
# standard: the allow-list

STANDARD_ALLOWED: list[tuple[str, list[str]]] = [
    ("echo hi", ["echo", "hi"]),
    ("echo", ["echo"]),
    ("echo 'hello world'", ["echo", "hello world"]),
    ('echo "two words"', ["echo", "two words"]),
    ("echo héllo", ["echo", "héllo"]),
    ("echo 日本語", ["echo", "日本語"]),
    ("echo -n x", ["echo", "-n", "x"]),
    ("getprop", ["getprop"]),
    ("getprop ro.product.model", ["getprop", "ro.product.model"]),
    ("getprop ro.build.version.sdk", ["getprop", "ro.build.version.sdk"]),
    ("logcat -d", ["logcat", "-d"]),
    ("logcat -c", ["logcat", "-c"]),
    ("logcat --clear", ["logcat", "--clear"]),
    ("logcat -d -v threadtime", ["logcat", "-d", "-v", "threadtime"]),
    ("logcat -d -v time", ["logcat", "-d", "-v", "time"]),
    ("logcat -d -v brief", ["logcat", "-d", "-v", "brief"]),
    ("logcat -d -b main", ["logcat", "-d", "-b", "main"]),
    ("logcat -d -b crash", ["logcat", "-d", "-b", "crash"]),
    ("logcat -d -b main,system", ["logcat", "-d", "-b", "main,system"]),
    ("logcat -d -b events", ["logcat", "-d", "-b", "events"]),
    ("logcat -t 100", ["logcat", "-t", "100"]),
    ("logcat -t 5000", ["logcat", "-t", "5000"]),
    ("logcat -d -T 50", ["logcat", "-d", "-T", "50"]),
    ("logcat -d -T '01-02 03:04:05.678'", ["logcat", "-d", "-T", "01-02 03:04:05.678"]),
    ("logcat -d --pid 1234", ["logcat", "-d", "--pid", "1234"]),
    ("logcat -d --pid=1234", ["logcat", "-d", "--pid=1234"]),
    ("dumpsys window", ["dumpsys", "window"]),
    ("dumpsys window windows", ["dumpsys", "window", "windows"]),
    ("dumpsys activity activities", ["dumpsys", "activity", "activities"]),
    ("dumpsys activity top", ["dumpsys", "activity", "top"]),
    ("dumpsys battery", ["dumpsys", "battery"]),
    ("dumpsys meminfo com.example.app", ["dumpsys", "meminfo", APP]),
    ("dumpsys gfxinfo com.example.app", ["dumpsys", "gfxinfo", APP]),
    ("dumpsys package com.example.app", ["dumpsys", "package", APP]),
    ("wm size", ["wm", "size"]),
    ("wm density", ["wm", "density"]),
    ("input tap 100 200", ["input", "tap", "100", "200"]),
    ("input tap 0 0", ["input", "tap", "0", "0"]),
    ("input tap 1079 1919", ["input", "tap", "1079", "1919"]),
    ("input tap 10.5 20.25", ["input", "tap", "10.5", "20.25"]),
    ("input swipe 100 200 300 400", ["input", "swipe", "100", "200", "300", "400"]),
    ("input swipe 100 200 300 400 500", ["input", "swipe", "100", "200", "300", "400", "500"]),
    ("input swipe 1 1 2 2 10000", ["input", "swipe", "1", "1", "2", "2", "10000"]),
    ("input text hello", ["input", "text", "hello"]),
    ("input text 'hello world'", ["input", "text", "hello world"]),
    ("input keyevent 66", ["input", "keyevent", "66"]),
    ("input keyevent KEYCODE_HOME", ["input", "keyevent", "KEYCODE_HOME"]),
    (
        "input keyevent --longpress KEYCODE_POWER",
        ["input", "keyevent", "--longpress", "KEYCODE_POWER"],
    ),
    ("am start -n com.example.app/.MainActivity", ["am", "start", "-n", f"{APP}/.MainActivity"]),
    (
        "am start -W -n com.example.app/com.example.app.Main",
        ["am", "start", "-W", "-n", f"{APP}/{APP}.Main"],
    ),
    (
        "am start -a android.intent.action.MAIN -n com.example.app/.Main",
        ["am", "start", "-a", "android.intent.action.MAIN", "-n", f"{APP}/.Main"],
    ),
    ("am force-stop com.example.app", ["am", "force-stop", APP]),
    ("am force-stop com.example.app.test", ["am", "force-stop", TEST]),
    ("am force-stop org.droidwire.helper", ["am", "force-stop", "org.droidwire.helper"]),
    (f"am instrument -w -r {RUNNER}", ["am", "instrument", "-w", "-r", RUNNER]),
    (
        f"am instrument -w -r -e class com.example.app.FooTest {RUNNER}",
        ["am", "instrument", "-w", "-r", "-e", "class", "com.example.app.FooTest", RUNNER],
    ),
    ("pm clear com.example.app", ["pm", "clear", APP]),
    ("pm list packages com.example.app", ["pm", "list", "packages", APP]),
    ("screencap -p", ["screencap", "-p"]),
    ("uiautomator dump /dev/tty", ["uiautomator", "dump", "/dev/tty"]),
    ("uiautomator dump --compressed /dev/tty", ["uiautomator", "dump", "--compressed", "/dev/tty"]),
    (f"uiautomator dump {W}/ui.xml", ["uiautomator", "dump", f"{W}/ui.xml"]),
    (f"ls {W}", ["ls", W]),
    (f"ls -l {W}/", ["ls", "-l", f"{W}/"]),
    (f"ls -la {W}/sub/dir", ["ls", "-la", f"{W}/sub/dir"]),
    (f"rm {W}/x.apk", ["rm", f"{W}/x.apk"]),
    (f"rm -f {W}/x.apk", ["rm", "-f", f"{W}/x.apk"]),
    (f"rm -rf {W}/build", ["rm", "-rf", f"{W}/build"]),
    (f"rm {W}/a/../b.txt", ["rm", f"{W}/a/../b.txt"]),
]


@pytest.mark.parametrize(("command", "argv"), STANDARD_ALLOWED)
def test_standard_allows(command: str, argv: list[str]) -> None:
    assert policy().check_shell(SERIAL, command, CTX) == argv


@pytest.mark.parametrize(("command", "argv"), STANDARD_ALLOWED)
def test_standard_allows_the_same_as_argv(command: str, argv: list[str]) -> None:
    assert policy().check_shell(SERIAL, argv, CTX) == argv


STANDARD_REFUSED: list[tuple[str, Rule]] = [
    # the must-refuse list
    ("rm -rf /data", Rule.RM_ROOT),
    ("rm -rf /data/", Rule.RM_ROOT),
    ("rm -r -f //data", Rule.RM_ROOT),
    ("rm -Rf /", Rule.RM_ROOT),
    (f"rm -rf {W}/../../..", Rule.RM_ROOT),
    ("rm -rf /sdcard", Rule.RM_ROOT),
    ("reboot", Rule.REBOOT),
    ("reboot bootloader", Rule.REBOOT),
    ("/system/bin/reboot", Rule.REBOOT),
    ("'reboot'", Rule.REBOOT),
    ("r''eboot", Rule.REBOOT),
    ('"re"boot', Rule.REBOOT),
    ("svc power reboot", Rule.REBOOT),
    ("su", Rule.SU),
    ("su 0 id", Rule.SU),
    ("/system/xbin/su -c id", Rule.SU),
    ("setprop persist.sys.usb.config none", Rule.SETPROP),
    ("dd if=/dev/zero of=/dev/block/sda", Rule.DD),
    ("chmod 777 /data/local/tmp", Rule.CHMOD),
    ("chown shell /data", Rule.CHMOD),
    ("echo a; reboot", Rule.METACHARACTER),
    ("echo a;reboot", Rule.METACHARACTER),
    ("echo a && reboot", Rule.METACHARACTER),
    ("echo a || reboot", Rule.METACHARACTER),
    ("echo a | sh", Rule.METACHARACTER),
    ("echo a & reboot", Rule.METACHARACTER),
    ("echo `reboot`", Rule.METACHARACTER),
    ("echo $(reboot)", Rule.METACHARACTER),
    ("echo ${PATH}", Rule.METACHARACTER),
    ("echo $HOME", Rule.METACHARACTER),
    ("echo a > /data/x", Rule.METACHARACTER),
    ("echo a >> /data/x", Rule.METACHARACTER),
    ("getprop < /data/x", Rule.METACHARACTER),
    ("echo (reboot)", Rule.METACHARACTER),
    ("ls /data/local/tmp/droidwire/*", Rule.METACHARACTER),
    ("echo a\\;reboot", Rule.METACHARACTER),
    ("echo {a,b}", Rule.METACHARACTER),
    ("ls ~", Rule.METACHARACTER),
    ("echo a #comment", Rule.METACHARACTER),
    ("sh -c 'echo hi'", Rule.SHELL_INTERPRETER),
    ("sh -c reboot", Rule.SHELL_INTERPRETER),
    ("/system/bin/sh -c id", Rule.SHELL_INTERPRETER),
    ("bash", Rule.SHELL_INTERPRETER),
    ("mksh /data/local/tmp/droidwire/x.sh", Rule.SHELL_INTERPRETER),
    ("toybox reboot", Rule.REBOOT),  # a multi-call binary is judged by its applet
    ("busybox rm -rf /data", Rule.RM_ROOT),
    ("env reboot", Rule.COMMAND_WRAPPER),
    ("exec reboot", Rule.COMMAND_WRAPPER),
    ("xargs rm", Rule.COMMAND_WRAPPER),
    ("run-as com.example.app id", Rule.COMMAND_WRAPPER),
    ("nohup reboot", Rule.COMMAND_WRAPPER),
    ("timeout 5 reboot", Rule.COMMAND_WRAPPER),
    # quoting smuggling: the quotes group, the screen still sees the metacharacter
    ("echo ';reboot'", Rule.METACHARACTER),
    ('echo ";reboot"', Rule.METACHARACTER),
    ("echo '$(reboot)'", Rule.METACHARACTER),
    ("echo '`id`'", Rule.METACHARACTER),
    ('echo "a\'b"', Rule.QUOTE),
    ("echo 'a\"b'", Rule.QUOTE),
    ("echo 'unterminated", Rule.UNPARSEABLE),
    ('echo "unterminated', Rule.UNPARSEABLE),
    # control characters
    ("echo a\nreboot", Rule.CONTROL_CHARACTER),
    ("echo a\rreboot", Rule.CONTROL_CHARACTER),
    ("echo a\x00reboot", Rule.CONTROL_CHARACTER),
    ("echo a\treboot", Rule.CONTROL_CHARACTER),
    ("echo a\x1b[2J", Rule.CONTROL_CHARACTER),
    ("echo a\x85reboot", Rule.CONTROL_CHARACTER),
    # unicode look-alikes
    ("echo a\uff1breboot", Rule.UNICODE_LOOKALIKE),  # fullwidth semicolon
    ("echo a\u037ereboot", Rule.UNICODE_LOOKALIKE),  # greek question mark (NFKC → ';')
    ("echo a\ufe54reboot", Rule.UNICODE_LOOKALIKE),  # small semicolon
    ("echo \uff04(reboot)", Rule.UNICODE_LOOKALIKE),  # fullwidth dollar (parenthesis refused too)
    ("echo \uff04\uff08id\uff09", Rule.UNICODE_LOOKALIKE),
    ("echo a\uff5creboot", Rule.UNICODE_LOOKALIKE),  # fullwidth vertical line
    ("echo a\uff06\uff06reboot", Rule.UNICODE_LOOKALIKE),  # fullwidth ampersands
    ("echo \uff40id\uff40", Rule.UNICODE_LOOKALIKE),  # fullwidth grave accent
    ("echo a\uff1e/data/x", Rule.UNICODE_LOOKALIKE),  # fullwidth greater-than
    ("echo \u2018a\u2019", Rule.UNICODE_LOOKALIKE),  # curly quotes
    ("echo \u201ca\u201d", Rule.UNICODE_LOOKALIKE),
    ("echo a\u2028reboot", Rule.UNICODE_LOOKALIKE),  # line separator
    ("echo a\u00a0reboot", Rule.UNICODE_LOOKALIKE),  # no-break space
    ("echo a\u200breboot", Rule.UNICODE_LOOKALIKE),  # zero-width space
    ("echo a\u202ereboot", Rule.UNICODE_LOOKALIKE),  # right-to-left override
    ("echo a\ufe68b", Rule.UNICODE_LOOKALIKE),  # small reverse solidus
    ("\uff52\uff45\uff42\uff4f\uff4f\uff54", Rule.NON_ASCII_COMMAND),  # fullwidth 'reboot'
    ("r\u0435boot", Rule.NON_ASCII_COMMAND),  # cyrillic e
    # not on the allow-list
    ("id", Rule.NOT_ALLOWLISTED),
    ("cat /data/system/packages.xml", Rule.NOT_ALLOWLISTED),
    ("/system/bin/echo hi", Rule.NOT_ALLOWLISTED),
    ("ps -A", Rule.NOT_ALLOWLISTED),
    ("settings put global adb_enabled 0", Rule.ADB_OFF),  # the deny list, every profile
    ("svc wifi disable", Rule.ADB_OFF),
    ("kill 1", Rule.SIGNAL_INIT),
    ("mv a b", Rule.NOT_ALLOWLISTED),
    ("", Rule.EMPTY_COMMAND),
    ("   ", Rule.EMPTY_COMMAND),
    ("''", Rule.EMPTY_COMMAND),
    # bounded arguments
    ("getprop a b", Rule.ARGUMENT),
    ("getprop ro.x=1", Rule.ARGUMENT),
    ("logcat", Rule.LOGCAT_FOLLOW),
    ("logcat -v threadtime", Rule.LOGCAT_FOLLOW),
    ("logcat -T 10", Rule.LOGCAT_FOLLOW),
    ("logcat -t 5001", Rule.LOGCAT_COUNT),
    ("logcat -d -T 9999", Rule.LOGCAT_COUNT),
    ("logcat -d -b radio", Rule.ARGUMENT),
    ("logcat -d -b all", Rule.ARGUMENT),
    ("logcat -d -b main,kernel", Rule.ARGUMENT),
    ("logcat -d -v bogus", Rule.ARGUMENT),
    ("logcat -d -f /sdcard/log.txt", Rule.ARGUMENT),
    ("logcat -d -G 16M", Rule.ARGUMENT),
    ("logcat -d -P '~1000'", Rule.METACHARACTER),
    ("logcat -d --pid abc", Rule.ARGUMENT),
    ("logcat -d -v", Rule.ARGUMENT),
    ("dumpsys", Rule.ARGUMENT),
    ("dumpsys wifi", Rule.ARGUMENT),
    ("dumpsys battery set level 5", Rule.ARGUMENT),
    ("dumpsys battery reset", Rule.ARGUMENT),
    ("dumpsys battery unplug", Rule.ARGUMENT),
    ("dumpsys gfxinfo com.example.app reset", Rule.ARGUMENT),
    ("dumpsys activity set x", Rule.ARGUMENT),
    ("wm size 100x100", Rule.ARGUMENT),
    ("wm size reset", Rule.ARGUMENT),
    ("wm density 200", Rule.ARGUMENT),
    ("wm overscan 0,0,0,0", Rule.ARGUMENT),
    ("input tap 1080 10", Rule.OUTSIDE_SCREEN),
    ("input tap 10 1920", Rule.OUTSIDE_SCREEN),
    ("input tap 99999 1", Rule.OUTSIDE_SCREEN),
    ("input tap -1 5", Rule.ARGUMENT),
    ("input tap 1", Rule.ARGUMENT),
    ("input swipe 1 1 2000 2", Rule.OUTSIDE_SCREEN),
    ("input swipe 1 1 2 2 10001", Rule.SWIPE_DURATION),
    ("input swipe 1 1 2 2 9999999", Rule.SWIPE_DURATION),
    ("input text " + "a" * 501, Rule.TEXT_TOO_LONG),
    ("input text a b", Rule.ARGUMENT),
    ("input keyevent", Rule.ARGUMENT),
    ("input keyevent KEYCODE_HOME; reboot", Rule.METACHARACTER),
    ("input keyevent " + " ".join(["3"] * 17), Rule.ARGUMENT),
    ("input draganddrop 1 1 2 2", Rule.ARGUMENT),
    ("input", Rule.ARGUMENT),
    ("am start -n com.android.settings/.Settings", Rule.PACKAGE_SCOPE),
    ("am start -a android.intent.action.VIEW -d http://evil", Rule.ARGUMENT),
    ("am start com.example.app", Rule.ARGUMENT),
    ("am force-stop com.android.systemui", Rule.PACKAGE_SCOPE),
    (
        "am instrument -w -r com.other.test/androidx.test.runner.AndroidJUnitRunner",
        Rule.PACKAGE_SCOPE,
    ),
    (f"am instrument -w -e class {RUNNER}", Rule.ARGUMENT),
    (f"am instrument -w -p /sdcard/prof {RUNNER}", Rule.ARGUMENT),
    ("am broadcast -a x", Rule.ARGUMENT),
    ("am kill-all", Rule.ARGUMENT),
    ("pm clear com.android.providers.contacts", Rule.PACKAGE_SCOPE),
    ("pm list packages", Rule.PACKAGE_SCOPE),
    ("pm list packages com.whatsapp", Rule.PACKAGE_SCOPE),
    ("pm uninstall com.example.app", Rule.ARGUMENT),
    ("pm grant com.example.app android.permission.CAMERA", Rule.ARGUMENT),
    ("screencap -p /sdcard/s.png", Rule.ARGUMENT),
    ("screencap", Rule.ARGUMENT),
    ("uiautomator dump", Rule.ARGUMENT),
    ("uiautomator dump /sdcard/window_dump.xml", Rule.PATH_OUTSIDE_WORKSPACE),
    ("uiautomator runtest x.jar", Rule.ARGUMENT),
    ("ls /", Rule.PATH_OUTSIDE_WORKSPACE),
    ("ls", Rule.PATH_OUTSIDE_WORKSPACE),
    ("ls /data/local/tmp", Rule.PATH_OUTSIDE_WORKSPACE),
    (f"ls {W}/../..", Rule.PATH_OUTSIDE_WORKSPACE),
    (f"ls {W}2/x", Rule.PATH_OUTSIDE_WORKSPACE),
    (f"ls {W}/sub/../../x", Rule.PATH_OUTSIDE_WORKSPACE),
    ("ls data/local/tmp/droidwire", Rule.PATH_INVALID),
    (f"ls -Z {W}", Rule.ARGUMENT),
    (f"rm {W}", Rule.PATH_OUTSIDE_WORKSPACE),
    (f"rm -rf {W}/", Rule.PATH_OUTSIDE_WORKSPACE),
    (f"rm {W}/../x", Rule.PATH_OUTSIDE_WORKSPACE),
    ("rm /data/local/tmp/other.apk", Rule.PATH_OUTSIDE_WORKSPACE),
    (f"rm --no-preserve-root {W}/x", Rule.ARGUMENT),
    ("rm -f", Rule.ARGUMENT),
    ("echo " + "a" * 5000, Rule.TOO_LONG),
    ("echo " + "a " * 70, Rule.TOO_LONG),
]


@pytest.mark.parametrize(("command", "rule"), STANDARD_REFUSED)
def test_standard_refuses(command: str, rule: Rule) -> None:
    err = refused(policy().check_shell, SERIAL, command, CTX)
    assert err.code is ErrorCode.FORBIDDEN
    assert err.data is not None and err.data["rule"] == rule.value, err.message
    assert err.to_wire()["data"]["rule"] == rule.value


def test_table_is_large_enough() -> None:
    # The issue asks for at least a hundred allowed/refused cases.
    assert len(STANDARD_ALLOWED) + len(STANDARD_REFUSED) >= 100


def test_input_without_screen_size_is_refused() -> None:
    err = refused(policy().check_shell, SERIAL, "input tap 1 1", CommandContext())
    assert err.data == {"rule": Rule.SCREEN_UNKNOWN.value}


def test_packages_default_to_none() -> None:
    err = refused(policy().check_shell, SERIAL, "am force-stop com.example.app")
    assert err.data is not None and err.data["rule"] == Rule.PACKAGE_SCOPE.value


ARGV_REFUSED: list[tuple[list[str], Rule]] = [
    (["echo", "a;b"], Rule.METACHARACTER),
    (["echo", "$(id)"], Rule.METACHARACTER),
    (["echo", "a\nb"], Rule.CONTROL_CHARACTER),
    (["echo", "it's"], Rule.QUOTE),
    (["echo", 'say "x"'], Rule.QUOTE),
    (["re\u0432oot"], Rule.NON_ASCII_COMMAND),
    (["sh", "-c", "id"], Rule.SHELL_INTERPRETER),
    (["rm", "-rf", "/data"], Rule.RM_ROOT),
    ([], Rule.EMPTY_COMMAND),
    ([""], Rule.EMPTY_COMMAND),
    (["echo", 3], Rule.UNPARSEABLE),
]


@pytest.mark.parametrize(("argv", "rule"), ARGV_REFUSED)
def test_argv_form_is_screened_the_same(argv: list[str], rule: Rule) -> None:
    err = refused(policy().check_shell, SERIAL, argv, CTX)
    assert err.data is not None and err.data["rule"] == rule.value


# --------------------------------------------------------------------------------------------
# the other profiles


@pytest.mark.parametrize("profile", [Profile.INSTRUMENT_ONLY, Profile.NO_SHELL])
@pytest.mark.parametrize("command", ["echo hi", "getprop", "logcat -d"])
def test_profiles_without_shell(profile: Profile, command: str) -> None:
    err = refused(policy(profile).check_shell, SERIAL, command, CTX)
    assert err.data == {"rule": Rule.SHELL_NOT_ALLOWED.value, "profile": profile.value}


FULL_ALLOWED = [
    "id",
    "cat /data/system/packages.xml",
    "ps -A",
    "settings get global adb_enabled",
    "logcat -v threadtime",
    "pm list packages",
    "rm -rf /data/user/0/com.example.app/cache",
    "rm /sdcard/x.txt",
    "ls /",
    "input tap 5000 5000",
]


@pytest.mark.parametrize("command", FULL_ALLOWED)
def test_full_allows_any_plain_command(command: str) -> None:
    import shlex

    assert policy(Profile.FULL).check_shell(SERIAL, command) == shlex.split(command)


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("echo a; id", Rule.METACHARACTER),
        ("id | cat", Rule.METACHARACTER),
        ("cat /data/x > /sdcard/y", Rule.METACHARACTER),
        ("rm -rf /data", Rule.RM_ROOT),
        ("reboot", Rule.REBOOT),
        ("su", Rule.SU),
        ("setprop a b", Rule.SETPROP),
        ("dd if=/dev/zero of=/sdcard/x", Rule.DD),
        ("chmod 777 /sdcard", Rule.CHMOD),
        ("sh -c id", Rule.SHELL_INTERPRETER),
        ("env X=1 id", Rule.COMMAND_WRAPPER),
        ("echo a\uff1bid", Rule.UNICODE_LOOKALIKE),
    ],
)
def test_full_still_refuses_metacharacters_and_the_deny_list(command: str, rule: Rule) -> None:
    err = refused(policy(Profile.FULL).check_shell, SERIAL, command)
    assert err.data is not None and err.data["rule"] == rule.value


def test_per_device_profile_overrides_the_default() -> None:
    p = policy(devices={"mine": Profile.FULL, "kiosk": Profile.INSTRUMENT_ONLY})
    assert p.check_shell("mine", "id") == ["id"]
    assert refused(p.check_shell, SERIAL, "id").data == {"rule": Rule.NOT_ALLOWLISTED.value}
    assert refused(p.check_shell, "kiosk", "echo").data is not None


# --------------------------------------------------------------------------------------------
# every other RPC kind


def test_screenshot_and_ui_by_profile() -> None:
    for profile in (Profile.STANDARD, Profile.NO_SHELL, Profile.FULL):
        policy(profile).check_screenshot(SERIAL)
        policy(profile).check_ui(SERIAL)
    p = policy(Profile.INSTRUMENT_ONLY)
    assert refused(p.check_screenshot, SERIAL).data["rule"] == Rule.SCREENSHOT_NOT_ALLOWED.value  # type: ignore[index]
    assert refused(p.check_ui, SERIAL).data["rule"] == Rule.UI_NOT_ALLOWED.value  # type: ignore[index]


@pytest.mark.parametrize("profile", [p for p in Profile if p is not Profile.AGENT])
def test_install_and_instrument_in_every_profile(profile: Profile) -> None:
    """(Every profile but agent, which never installs: test_policy_agent.py.)"""
    p = policy(profile)
    p.check_install(SERIAL)
    p.check_instrument(SERIAL, RUNNER, CTX)
    p.check_uninstall(SERIAL, APP, CTX)


@pytest.mark.parametrize("profile", [Profile.STANDARD, Profile.NO_SHELL, Profile.INSTRUMENT_ONLY])
def test_instrument_and_uninstall_only_the_runs_packages(profile: Profile) -> None:
    p = policy(profile)
    err = refused(
        p.check_instrument, SERIAL, "com.bank.test/androidx.test.runner.AndroidJUnitRunner", CTX
    )
    assert err.data is not None and err.data["rule"] == Rule.PACKAGE_SCOPE.value
    err = refused(p.check_uninstall, SERIAL, "com.bank", CTX)
    assert err.data is not None and err.data["rule"] == Rule.PACKAGE_SCOPE.value
    err = refused(p.check_instrument, SERIAL, "not a component", CTX)
    assert err.data is not None and err.data["rule"] == Rule.ARGUMENT.value


def test_full_instruments_and_uninstalls_anything() -> None:
    p = policy(Profile.FULL)
    p.check_instrument(SERIAL, "com.bank.test/androidx.test.runner.AndroidJUnitRunner")
    p.check_uninstall(SERIAL, "com.bank")


def test_logcat_scope_by_profile() -> None:
    for profile in (Profile.STANDARD, Profile.NO_SHELL, Profile.FULL):
        scope = policy(profile).check_logcat(SERIAL, buffers=["main", "system", "crash", "events"])
        assert scope.unrestricted
    scope = policy(Profile.INSTRUMENT_ONLY).check_logcat(SERIAL, CTX)
    assert scope == LogcatScope(packages=frozenset({APP, TEST, "org.droidwire.helper"}))
    assert not scope.unrestricted
    err = refused(policy(Profile.INSTRUMENT_ONLY).check_logcat, SERIAL, CommandContext())
    assert err.data is not None and err.data["rule"] == Rule.LOGCAT_SCOPE.value
    assert policy().check_logcat(SERIAL, buffers=["radio", "kernel", "all"]).unrestricted
    err = refused(policy().check_logcat, SERIAL, buffers=["bogus"])
    assert err.data is not None and err.data["rule"] == Rule.ARGUMENT.value


PUSH_PULL = [
    (f"{W}/x.apk", f"{W}/x.apk"),
    (f"{W}//a/./b", f"{W}/a/b"),
    (f"{W}/a/../b", f"{W}/b"),
    (f"//{W[1:]}/x", f"{W}/x"),
]


@pytest.mark.parametrize(("path", "normal"), PUSH_PULL)
@pytest.mark.parametrize("profile", [Profile.STANDARD, Profile.NO_SHELL])
def test_push_pull_inside_the_droidwire_folder(profile: Profile, path: str, normal: str) -> None:
    assert policy(profile).check_push(SERIAL, path) == normal
    assert policy(profile).check_pull(SERIAL, path) == normal


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/data/local/tmp/x", Rule.PATH_OUTSIDE_WORKSPACE),
        (f"{W}/../x", Rule.PATH_OUTSIDE_WORKSPACE),
        (f"{W}/a/../../x", Rule.PATH_OUTSIDE_WORKSPACE),
        (f"{W}", Rule.PATH_OUTSIDE_WORKSPACE),
        (f"{W}-evil/x", Rule.PATH_OUTSIDE_WORKSPACE),
        ("/sdcard/DCIM/photo.jpg", Rule.PATH_OUTSIDE_WORKSPACE),
        ("/data/data/com.bank/databases/x.db", Rule.PATH_OUTSIDE_WORKSPACE),
        ("x.apk", Rule.PATH_INVALID),
        ("", Rule.PATH_INVALID),
        (f"{W}/a\nb", Rule.CONTROL_CHARACTER),
        (f"{W}/a\x00b", Rule.CONTROL_CHARACTER),
        (f"{W}/" + "a" * 1100, Rule.PATH_INVALID),
    ],
)
def test_push_pull_refusals(path: str, rule: Rule) -> None:
    for check in (policy().check_push, policy().check_pull):
        err = refused(check, SERIAL, path)
        assert err.data is not None and err.data["rule"] == rule.value


def test_push_pull_by_profile() -> None:
    p = policy(Profile.INSTRUMENT_ONLY)
    assert refused(p.check_push, SERIAL, f"{W}/x").data["rule"] == Rule.PUSH_NOT_ALLOWED.value  # type: ignore[index]
    assert refused(p.check_pull, SERIAL, f"{W}/x").data["rule"] == Rule.PULL_NOT_ALLOWED.value  # type: ignore[index]
    full = policy(Profile.FULL)
    assert full.check_pull(SERIAL, "/sdcard/DCIM/../x.jpg") == "/sdcard/x.jpg"
    assert full.check_push(SERIAL, "/sdcard/x") == "/sdcard/x"
    assert refused(full.check_push, SERIAL, "relative").data["rule"] == Rule.PATH_INVALID.value  # type: ignore[index]


# --------------------------------------------------------------------------------------------
# exposure and the pause switch


def test_exposure_default_all() -> None:
    p = policy()
    assert p.is_exposed("anything")
    assert p.check_exposed("anything") is Profile.STANDARD


def test_exposure_lists_and_hide() -> None:
    p = policy(expose=frozenset({"a", "b"}), hide=frozenset({"b"}))
    assert p.is_exposed("a")
    assert not p.is_exposed("b")
    assert not p.is_exposed("c")
    for serial in ("b", "c"):
        err = refused(p.check_shell, serial, "echo hi")
        assert err.code is ErrorCode.NOT_FOUND
        assert err.data == {"rule": Rule.NOT_EXPOSED.value}
        err = refused(p.check_screenshot, serial)
        assert err.code is ErrorCode.NOT_FOUND


def test_pause_switch_stops_every_rpc_kind() -> None:
    p = policy(Profile.FULL)
    p.check_shell(SERIAL, "echo hi")
    p.pause()
    checks = [
        lambda: p.check_shell(SERIAL, "echo hi"),
        lambda: p.check_logcat(SERIAL),
        lambda: p.check_screenshot(SERIAL),
        lambda: p.check_ui(SERIAL),
        lambda: p.check_install(SERIAL),
        lambda: p.check_uninstall(SERIAL, APP, CTX),
        lambda: p.check_instrument(SERIAL, RUNNER, CTX),
        lambda: p.check_push(SERIAL, f"{W}/x"),
        lambda: p.check_pull(SERIAL, f"{W}/x"),
        lambda: p.check_exposed(SERIAL),
    ]
    for check in checks:
        err = refused(check)
        assert err.code is ErrorCode.FORBIDDEN
        assert err.data == {"rule": Rule.PAUSED.value}
    p.resume()
    assert p.check_shell(SERIAL, "echo hi") == ["echo", "hi"]


def test_pause_file_is_a_live_kill_switch(tmp_path) -> None:
    flag = tmp_path / "paused"
    p = policy(pause_file=str(flag))
    assert not p.paused
    flag.touch()
    assert p.paused
    assert refused(p.check_screenshot, SERIAL).data == {"rule": Rule.PAUSED.value}
    p.resume()  # the file still wins
    assert p.paused
    flag.unlink()
    assert not p.paused
    p.check_screenshot(SERIAL)


def test_config_paused_starts_paused() -> None:
    assert policy(paused=True).paused


# --------------------------------------------------------------------------------------------
# config parsing


def test_config_from_mapping() -> None:
    cfg = PolicyConfig.from_mapping(
        {
            "profile": "no-shell",
            "expose": ["a", "b"],
            "hide": ["b"],
            "paused": False,
            "pause_file": "~/droidwire-paused",
            "devices": {"a": "full", "c": {"profile": "instrument-only"}},
        }
    )
    assert cfg.profile is Profile.NO_SHELL
    assert cfg.devices == {"a": Profile.FULL, "c": Profile.INSTRUMENT_ONLY}
    assert cfg.expose == frozenset({"a", "b"})
    assert cfg.hide == frozenset({"b"})
    assert cfg.pause_file is not None and not cfg.pause_file.startswith("~")
    assert PolicyConfig.from_mapping({}) == PolicyConfig()


@pytest.mark.parametrize(
    "raw",
    [
        {"profile": "root"},
        {"devices": {"a": "godmode"}},
        {"devices": {"a": {"profile": "full", "x": 1}}},
        {"devices": ["a"]},
        {"expose": "some"},
        {"expose": [1]},
        {"hide": "a"},
        {"paused": "yes"},
        {"pause_file": 3},
        {"profiles": "standard"},
    ],
)
def test_config_errors_name_the_key(raw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="policy"):
        PolicyConfig.from_mapping(raw)


# --------------------------------------------------------------------------------------------
# property: no command containing a metacharacter passes, in any profile

_SAFE = string.ascii_letters + string.digits + " ._-/=:,"
_META = sorted(METACHARACTERS | set("\n\r\x00"))
_LOOKALIKES = [
    "\uff1b",
    "\u037e",
    "\ufe54",
    "\uff04",
    "\uff06",
    "\uff5c",
    "\uff40",
    "\uff1c",
    "\uff1e",
    "\uff08",
    "\u2028",
]


@st.composite
def commands_with_a_metacharacter(draw: st.DrawFn) -> str:
    head = draw(
        st.sampled_from(["echo", "getprop", "logcat", "ls", "id", "input", "am", "cat", ""])
    )
    before = draw(st.text(alphabet=_SAFE, max_size=20))
    meta = draw(st.sampled_from(_META + _LOOKALIKES))
    after = draw(st.text(alphabet=_SAFE + "'\"", max_size=20))
    quote = draw(st.sampled_from(["", "'", '"']))
    return f"{head} {before}{quote}{meta}{quote}{after}"


@settings(max_examples=400, deadline=None)
@given(command=commands_with_a_metacharacter(), profile=st.sampled_from(list(Profile)))
def test_no_command_with_a_metacharacter_passes(command: str, profile: Profile) -> None:
    with pytest.raises(RpcError) as info:
        policy(profile, devices={}).check_shell(SERIAL, command, CTX)
    assert info.value.code is ErrorCode.FORBIDDEN


@settings(max_examples=300, deadline=None)
@given(
    argv=st.lists(st.text(max_size=12), min_size=1, max_size=5),
    profile=st.sampled_from(list(Profile)),
)
def test_whatever_passes_has_no_metacharacter(argv: list[str], profile: Profile) -> None:
    # Any argv at all: if it passes, neither it nor its folded form carries shell syntax.
    import unicodedata

    try:
        out = policy(profile).check_shell(SERIAL, argv, CTX)
    except RpcError as exc:
        assert exc.code is ErrorCode.FORBIDDEN
        return
    for arg in out:
        folded = unicodedata.normalize("NFKC", arg)
        assert not METACHARACTERS.intersection(folded)
        assert not set("'\"").intersection(folded)
        assert all(ord(c) >= 0x20 for c in folded)


def test_parse_command_is_public_and_pure() -> None:
    assert parse_command("echo 'a b'") == ["echo", "a b"]
    with pytest.raises(RpcError):
        parse_command("echo a;b")


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(max_size=40),
    meta=st.sampled_from(_META + _LOOKALIKES),
    where=st.integers(min_value=0, max_value=40),
    profile=st.sampled_from(list(Profile)),
)
def test_any_text_with_a_metacharacter_anywhere_is_refused(
    text: str, meta: str, where: int, profile: Profile
) -> None:
    where = min(where, len(text))
    command = "echo " + text[:where] + meta + text[where:]
    for form in (command, command.split(" ")):
        with pytest.raises(RpcError) as info:
            policy(profile).check_shell(SERIAL, form, CTX)
        assert info.value.code is ErrorCode.FORBIDDEN
