"""What a user-build phone's shell offers scripts and clients: toybox basics, settings, pm
install sessions, bugreportz, /proc, binary logcat, arithmetic expansion."""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile

import pytest

from tests.device_bridge.sim.helpers import new_device, sh


@pytest.fixture
async def dev():
    d = new_device()
    d.files.write("/data/local/tmp/t.txt", b"b 2\na 10\nc 1\na 10\n")
    return d


@pytest.mark.parametrize(("cmdline", "out"), [
    ("printf '%s-%d|%5.2f|%x|%%|%c\\n' ab 42 3.14159 255 xyz", "ab-42| 3.14|ff|%|x\n"),
    ("printf '%s\\n' a b c", "a\nb\nc\n"),
    ("printf 'no newline'", "no newline"),
    ("printf '%-4s|%04d\\n' x 7", "x   |0007\n"),
    ("pwd", "/\n"),
    ("cd /data/local/tmp && pwd", "/data/local/tmp\n"),
    ("uname", "Linux\n"),
    ("uname -m", "aarch64\n"),
    ("echo $((3+4*2)) $(( (1+2)*3 )) $((10/3)) $((10%3)) $((-2+1))", "11 9 3 1 -1\n"),
    ("x=5; echo $((x+1)) $(($x*2)) $((x > 3))", "6 10 1\n"),
    ("cut -d ' ' -f 2 /data/local/tmp/t.txt", "2\n10\n1\n10\n"),
    ("echo a:b:c | cut -d: -f1,3", "a:c\n"),
    ("echo abcdef | cut -c 2-4", "bcd\n"),
    ("head -n 2 /data/local/tmp/t.txt", "b 2\na 10\n"),
    ("head -1 /data/local/tmp/t.txt", "b 2\n"),
    ("tail -n 1 /data/local/tmp/t.txt", "a 10\n"),
    ("tail -n +3 /data/local/tmp/t.txt", "c 1\na 10\n"),
    ("wc -l /data/local/tmp/t.txt", "4 /data/local/tmp/t.txt\n"),
    ("cat /data/local/tmp/t.txt | wc -l", "4\n"),
    ("echo one two | wc -w", "2\n"),
    ("sort /data/local/tmp/t.txt", "a 10\na 10\nb 2\nc 1\n"),
    ("sort -u /data/local/tmp/t.txt", "a 10\nb 2\nc 1\n"),
    ("cut -d ' ' -f 2 /data/local/tmp/t.txt | sort -n -r", "10\n10\n2\n1\n"),
    ("grep -n a /data/local/tmp/t.txt", "2:a 10\n4:a 10\n"),
    ("sed 's/a/A/' /data/local/tmp/t.txt", "b 2\nA 10\nc 1\nA 10\n"),
    ("echo aaa | sed 's/a/b/g'", "bbb\n"),
    ("echo 'x=1' | sed -E 's/([a-z])=([0-9])/\\2=\\1/'", "1=x\n"),
    ("sed -n '/c/p' /data/local/tmp/t.txt", "c 1\n"),
    ("sed '/a/d' /data/local/tmp/t.txt", "b 2\nc 1\n"),
    ("sed -n 2p /data/local/tmp/t.txt", "a 10\n"),
    ("sed -e 's/b/B/' -e 's/c/C/' /data/local/tmp/t.txt", "B 2\na 10\nC 1\na 10\n"),
])
async def test_toybox_basics(dev, cmdline, out):
    r = await sh(dev, cmdline)
    assert (r.code, r.out, r.err) == (0, out, "")


async def test_uname_all_and_by_abi():
    r = await sh(new_device(profile="tablet-x86"), "uname -a")
    assert r.out.startswith("Linux localhost ")
    assert r.out.rstrip().endswith("x86_64 Toybox")
    assert (await sh(new_device(), "uname -r")).out.strip().endswith("-android14-11-g0c1e2f3")


async def test_stat_and_checksums(dev):
    data = b"b 2\na 10\nc 1\na 10\n"
    r = await sh(dev, "stat -c '%s %a %F %n' /data/local/tmp/t.txt /data/local/tmp")
    assert r.out == (f"{len(data)} 644 regular file /data/local/tmp/t.txt\n"
                     "4096 771 directory /data/local/tmp\n")
    r = await sh(dev, "stat /data/local/tmp/t.txt")
    assert r.out.startswith("  File: /data/local/tmp/t.txt\n")
    assert f"Size: {len(data)}" in r.out and "Access: (0644/-rw-r--r--)" in r.out
    missing = await sh(dev, "stat /nope")
    assert (missing.code, missing.err) == (1, "stat: '/nope': No such file or directory\n")
    r = await sh(dev, "md5sum /data/local/tmp/t.txt")
    assert r.out == f"{hashlib.md5(data).hexdigest()}  /data/local/tmp/t.txt\n"
    r = await sh(dev, "sha256sum /data/local/tmp/t.txt")
    assert r.out.split()[0] == hashlib.sha256(data).hexdigest()
    r = await sh(dev, "echo -n hi | md5sum")
    assert r.out == f"{hashlib.md5(b'hi').hexdigest()}  -\n"


async def test_ls_all_shows_dot_entries_and_hidden_files(dev):
    dev.files.write("/data/local/tmp/.hidden", b"h")
    plain = await sh(dev, "ls /data/local/tmp")
    assert plain.out == "t.txt\n"
    everything = await sh(dev, "ls -a /data/local/tmp")
    assert everything.out == ".\n..\n.hidden\nt.txt\n"
    long = await sh(dev, "ls -la /data/local/tmp")
    names = [line.split()[-1] for line in long.out.splitlines()[1:]]
    assert names == [".", "..", ".hidden", "t.txt"]


async def test_arithmetic_is_not_command_substitution(dev):
    r = await sh(dev, "echo $(id)")
    assert r.code == 1 and "command substitution" in r.err
    r = await sh(dev, "echo $((1/0))")
    assert r.code != 0 and "division by zero" in r.err
    r = await sh(dev, "echo $((__import__))")
    assert (r.code, r.out) == (0, "0\n")  # an unset variable is 0, never Python


async def test_proc_files(dev):
    stat = (await sh(dev, "cat /proc/stat")).out
    first = stat.splitlines()[0].split()
    assert first[0] == "cpu" and len(first) == 11 and all(f.isdigit() for f in first[1:])
    assert "cpu0 " in stat and "ctxt " in stat
    meminfo = (await sh(dev, "cat /proc/meminfo")).out
    assert meminfo.startswith("MemTotal:") and "MemAvailable:" in meminfo
    load = (await sh(dev, "cat /proc/loadavg")).out.split()
    assert len(load) == 5 and "/" in load[3]
    assert (await sh(dev, "echo x > /proc/loadavg")).code == 1


async def test_settings_get_put_list_and_what_observes_them(dev):
    assert (await sh(dev, "settings get system screen_off_timeout")).out == "60000\n"
    assert (await sh(dev, "settings get global no_such_key")).out == "null\n"
    r = await sh(dev, "settings put system screen_off_timeout 600000")
    assert (r.code, r.out) == (0, "")
    assert (await sh(dev, "settings get system screen_off_timeout")).out == "600000\n"
    assert "mScreenOffTimeoutSetting=600000" in (await sh(dev, "dumpsys power")).out
    await sh(dev, "settings put global window_animation_scale 0")
    listing = (await sh(dev, "settings list global")).out
    assert "window_animation_scale=0\n" in listing
    assert (await sh(dev, "settings delete global window_animation_scale")).out == \
        "Deleted 1 rows\n"
    bad = await sh(dev, "settings get nowhere x")
    assert bad.code != 0 and "Invalid namespace" in bad.err
    assert (await sh(dev, "cmd settings get system screen_off_timeout")).out == "600000\n"


async def test_term_defaults_to_dumb_in_every_shell(dev):
    assert (await sh(dev, "echo $TERM")).out == "dumb\n"


async def test_pm_install_session(dev):
    from device_bridge.sim.apk import SimPackage, build_apk

    apk = build_apk(SimPackage(package="com.example.split", kind="app", version_code=3))
    created = await sh(dev, f"pm install-create -S {len(apk)}")
    assert created.code == 0
    session = created.out.split("[", 1)[1].split("]", 1)[0]
    assert created.out == f"Success: created install session [{session}]\n"
    wrote = await sh(dev, f"pm install-write -S {len(apk)} {session} base.apk -", stdin=apk)
    assert wrote.out == f"Success: streamed {len(apk)} bytes\n"
    assert (await sh(dev, f"pm install-commit {session}")).out == "Success\n"
    assert "package:com.example.split\n" in (await sh(dev, "pm list packages")).out
    # A committed session is gone; an abandoned one installs nothing.
    assert (await sh(dev, f"pm install-commit {session}")).code != 0
    other = (await sh(dev, "pm install-create")).out.split("[", 1)[1].split("]", 1)[0]
    assert (await sh(dev, f"pm install-abandon {other}")).out == "Success\n"
    short = await sh(dev, "cmd package install-create -S 10")
    sid = short.out.split("[", 1)[1].split("]", 1)[0]
    r = await sh(dev, f"cmd package install-write -S 10 {sid} x.apk -", stdin=b"12345")
    assert r.code != 0
    assert (await sh(dev, f"pm install-commit {sid}")).out.startswith("Failure [")


async def test_bugreportz_writes_a_zip_the_host_can_pull(dev):
    version = await sh(dev, "bugreportz -v")
    assert version.err == "bugreportz 1.2\n"
    r = await sh(dev, "bugreportz -p")
    lines = r.out.splitlines()
    assert lines[0].startswith("BEGIN:/bugreports/bugreport-")
    assert lines[-1].startswith("OK:/bugreports/") and lines[-1].endswith(".zip")
    assert any(line.startswith("PROGRESS:") for line in lines)
    path = lines[-1][3:]
    with zipfile.ZipFile(io.BytesIO(dev.files.read(path))) as z:
        names = z.namelist()
        main = z.read("main_entry.txt").decode()
        assert main in names and "version.txt" in names
        text = z.read(main).decode()
    assert "== dumpstate:" in text and "ro.product.model" in text
    plain = await sh(dev, "bugreport")
    assert plain.out.startswith("========================================================\n== dumpstate")


async def test_binary_logcat_uses_logger_entry_v4(dev):
    dev.log("W", "BinTag", "binary message", pid=1234, tid=1240)
    from device_bridge.sim.shell import BufferSink, BytesSource

    out = BufferSink()
    code = await dev.run_shell("logcat -B -d", stdin=BytesSource(), stdout=out,
                               stderr=BufferSink())
    assert code == 0
    data = bytes(out.data)
    entries = []
    off = 0
    while off < len(data):
        length, hdr_size, pid, tid, sec, nsec, lid, uid = struct.unpack_from("<HHiIIIII", data, off)
        assert hdr_size == 28
        payload = data[off + hdr_size : off + hdr_size + length]
        entries.append((pid, tid, lid, uid, payload, sec, nsec))
        off += hdr_size + length
    ours = [e for e in entries if e[0] == 1234]
    (logged,) = [e for e in dev.logbuf.entries() if e.pid == 1234]
    stamp = (int(logged.ts), int((logged.ts - int(logged.ts)) * 1e9))
    assert ours == [(1234, 1240, 0, dev.uid_of(1234),
                     bytes([5]) + b"BinTag\0binary message\0", *stamp)]
    assert "--------- beginning" not in data.decode("latin-1")


@pytest.mark.parametrize("cmdline", [
    "printf '%999999999d' 1",
    "printf '%.999999999f' 1",
    "printf '%*s' 999999999 x",
    "echo $((" + "(" * 400 + "1" + ")" * 400 + "))",
    "echo abc | sed 's/a/\\g<nope>/'",
    "echo abc | sed -E 's/(/x/'",
])
async def test_hostile_input_is_a_clean_error(dev, cmdline):
    r = await sh(dev, cmdline)
    assert r.code != 0 and r.err and len(r.out) < 10_000


async def test_install_sessions_are_bounded(dev):
    dev.files.write("/data/local/tmp/big", b"x" * 1000)
    dev.files.quota = 1500
    sid = (await sh(dev, "pm install-create")).out.split("[", 1)[1].split("]", 1)[0]
    assert (await sh(dev, f"pm install-write {sid} a.apk /data/local/tmp/big")).code == 0
    over = await sh(dev, f"pm install-write {sid} b.apk /data/local/tmp/big")
    assert over.code != 0 and "INSUFFICIENT_STORAGE" in over.out
    for _ in range(20):
        await sh(dev, "pm install-create")
    assert len(dev.install_sessions.sessions) == 16


async def test_an_install_session_with_minus_big_r_never_replaces(dev):
    """``install-create -R`` (adb install-multiple's, or a borrower's through a tunnel) fails
    on a package already installed, as pm does; without it the session replaces the app."""
    from device_bridge.sim.apk import SimPackage, build_apk

    apk = build_apk(SimPackage(package="com.example.kept", kind="app", version_code=3))

    async def session(flags: str) -> str:
        created = await sh(dev, f"pm install-create {flags} -S {len(apk)}")
        sid = created.out.split("[", 1)[1].split("]", 1)[0]
        await sh(dev, f"pm install-write -S {len(apk)} {sid} base.apk -", stdin=apk)
        return (await sh(dev, f"pm install-commit {sid}")).out

    assert await session("-R") == "Success\n"  # nothing there yet
    assert await session("") == "Success\n"  # replaced
    assert (await session("-R")).startswith("Failure [INSTALL_FAILED_ALREADY_EXISTS")
