"""The simulated device's shell: what adb, adbutils and scripts send, run without sockets."""

from __future__ import annotations

import pytest

from device_bridge.sim.shell import ShellSyntaxError, parse
from tests.device_bridge.sim.helpers import new_device, sh


@pytest.fixture
def dev():
    return new_device()


@pytest.mark.parametrize(
    ("cmdline", "out"),
    [
        ("echo hi", "hi\n"),
        ("echo 'a b'  c", "a b c\n"),
        ('echo "x  y" \'$HOME\' "$HOME"', "x  y $HOME /\n"),
        ("echo a\\ b", "a b\n"),
        ("echo -n abc", "abc"),
        ("echo '' | grep -c ''", "1\n"),
        ("echo one; echo two", "one\ntwo\n"),
        ("echo one\necho two", "one\ntwo\n"),
        ("false; echo $?", "1\n"),
        ("true; echo ${?}", "0\n"),
        ("echo hi; echo X4EXIT:$?", "hi\nX4EXIT:0\n"),
        ("nosuch; echo X4EXIT:$?", "X4EXIT:127\n"),
        ('export ANDROID_LOG_TAGS="\'\'"; echo "[$ANDROID_LOG_TAGS]"', "['']\n"),
        ("FOO=bar; echo $FOO", "bar\n"),
        ("export A=1 B=2; echo $A$B", "12\n"),
        ("exec echo replaced; echo never", "replaced\n"),
        ("echo a </dev/null", "a\n"),
        ("true && echo yes || echo no", "yes\n"),
        ("false && echo yes || echo no", "no\n"),
        ("! false && echo negated", "negated\n"),
        ("echo kept # a comment", "kept\n"),
        ("getprop ro.build.version.sdk", "34\n"),
        ("/system/bin/getprop ro.product.model", "Pixel 7\n"),
        ("getprop no.such.prop fallback", "fallback\n"),
        ("pm list packages | grep -c systemui", "1\n"),
        ("echo quiet >/dev/null; echo after", "after\n"),
        ("echo to-err 2>&1 >&2", "to-err\n"),
    ],
)
async def test_interpreter_cases(dev, cmdline, out):
    result = await sh(dev, cmdline)
    assert result.out == out, result.err


@pytest.mark.parametrize(("cmdline", "code"), [
    ("exit 3", 3), ("exit 300", 44), ("true", 0), ("false", 1), ("nosuch", 127),
    ("echo a; exit 5; echo b", 5), ("false; exit", 1), ("exec false", 1),
])
async def test_exit_status(dev, cmdline, code):
    assert (await sh(dev, cmdline)).code == code


async def test_unknown_command_answers_like_mksh(dev):
    result = await sh(dev, "frobnicate --now")
    assert result.code == 127
    assert result.err == "/system/bin/sh: frobnicate: inaccessible or not found\n"
    assert (await sh(dev, "/data/local/tmp/x")).code == 127


@pytest.mark.parametrize("cmdline", [
    "echo $(id)", "echo `id`", "sleep 1 &", "( echo a )", "if true; then echo a; fi",
    "echo 'unterminated", 'echo "open', "; ;", "echo a &&", "echo >",
])
async def test_unsupported_syntax_is_refused_not_misread(dev, cmdline):
    result = await sh(dev, cmdline)
    assert result.code == 1
    assert result.err.startswith("/system/bin/sh: ")
    assert result.out == ""


def test_parser_reports_what_it_refuses():
    with pytest.raises(ShellSyntaxError, match="command substitution"):
        parse("echo $(reboot)")
    assert len(parse("echo a; echo b && echo c")) == 2


async def test_files_redirection_glob_and_rm(dev):
    assert (await sh(dev, "echo one > /data/local/tmp/a.txt")).code == 0
    await sh(dev, "echo two >> /data/local/tmp/a.txt; echo x > /data/local/tmp/b.txt")
    assert (await sh(dev, "cat /data/local/tmp/a.txt")).out == "one\ntwo\n"
    assert (await sh(dev, "cd /data/local/tmp && ls")).out == "a.txt\nb.txt\n"
    assert (await sh(dev, "ls /data/local/tmp/*.txt")).out.split() == [
        "/data/local/tmp/a.txt", "/data/local/tmp/b.txt"]
    assert (await sh(dev, "rm /data/local/tmp/*.txt")).code == 0
    assert (await sh(dev, "ls /data/local/tmp")).out == ""
    missing = await sh(dev, "rm /data/local/tmp/gone")
    assert missing.code == 1 and "No such file or directory" in missing.err
    assert (await sh(dev, "rm -f /data/local/tmp/gone")).code == 0


async def test_shell_user_cannot_write_or_list_outside_its_places(dev):
    denied = await sh(dev, "echo x > /system/evil")
    assert denied.code == 1 and "Permission denied" in denied.err
    assert (await sh(dev, "ls /data")).code == 1
    assert (await sh(dev, "rm -rf /data")).code == 1
    assert (await sh(dev, "mkdir -p /data/local/tmp/droidwire/x && ls /data/local/tmp")).out == (
        "droidwire\n")


async def test_every_command_is_logged_as_received(dev):
    await sh(dev, "echo 'a  b'; nosuch")
    lines = [e.message for e in dev.logbuf.entries() if e.tag == "SimShell"]
    assert lines == ["echo 'a  b'; nosuch"]


async def test_pipeline_streams_and_stops_early(dev):
    result = await sh(dev, "cat | grep -v skip", stdin=b"keep 1\nskip\nkeep 2\n")
    assert result.out == "keep 1\nkeep 2\n"


async def test_input_is_validated_against_the_screen(dev):
    assert (await sh(dev, "input tap 100 200")).code == 0
    outside = await sh(dev, "input tap 1080 10")
    assert outside.code == 1 and "1080x2400" in outside.err
    assert (await sh(dev, "input tap x 1")).code == 1
    assert (await sh(dev, "input swipe 10 10 500 900 250")).code == 0
    assert (await sh(dev, "input swipe 10 10 500 99999")).code == 1
    assert (await sh(dev, "input text hello%sworld")).code == 0
    assert (await sh(dev, "input keyevent KEYCODE_HOME 4")).code == 0
    assert (await sh(dev, "input keyevent NOT_A_KEY")).code == 1
    assert [k for k, _ in dev.input_log] == ["tap", "swipe", "text", "keyevent", "keyevent"]
    assert dev.input_log[2] == ("text", {"text": "hello world"})  # %s is a space


async def test_window_battery_and_display_reports(dev):
    assert (await sh(dev, "wm size")).out == "Physical size: 1080x2400\n"
    assert (await sh(dev, "wm density")).out == "Physical density: 420\n"
    window = (await sh(dev, "dumpsys window")).out
    assert "mCurrentFocus=Window{" in window and "NexusLauncherActivity}" in window
    assert "level: 87" in (await sh(dev, "dumpsys battery")).out
    assert "mResumedActivity: ActivityRecord{" in (await sh(dev, "dumpsys activity activities")).out
    assert (await sh(dev, "dumpsys nosuchservice")).out == "Can't find service: nosuchservice\n"
