"""The real adb CLI against the simulated device, end to end: the binary adbutils bundles
(adb 36) and Debian's (adb 29, installed by tests/tools/system_deps.sh), both through the
session's private adb server."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import os
import struct
import subprocess
import zipfile

import pytest

from device_bridge.sim.apk import SimPackage, build_apk
from tests.conftest import require_or_skip

pytestmark = [pytest.mark.adb, pytest.mark.timeout(90)]

T = 30.0  # per adb command: a hang guard, not a timing assertion
MB3 = os.urandom(3 * 1024 * 1024)
DEBIAN_ADB = "/usr/bin/adb"
_BINARY: list[str | None] = [None]


@pytest.fixture(autouse=True, params=["bundled", "debian"])
def cli_binary(request):
    """Every test runs with both CLIs (the server stays the session's)."""
    if request.param == "debian":
        require_or_skip(os.path.exists(DEBIAN_ADB), "Debian's adb (/usr/bin/adb) not installed")
        _BINARY[0] = DEBIAN_ADB
    else:
        _BINARY[0] = None
    yield request.param
    _BINARY[0] = None


def _adb(server, sim, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    return server.cli("-s", sim.address, *args, timeout=T, text=text, binary=_BINARY[0])


def test_shell_exec_out_and_exit_codes(sim_device, adb_server):
    r = _adb(adb_server, sim_device, "shell", "printf '%s\\n' hi; exit 3")
    assert (r.returncode, r.stdout) == (3, "hi\n")
    r = _adb(adb_server, sim_device, "exec-out", "uname -m")
    assert r.stdout == "aarch64\n"
    r = _adb(adb_server, sim_device, "shell", "echo $((6*7)) $TERM")
    assert r.stdout.split()[0] == "42"


def test_push_pull_ls_3mb_directories_and_missing_files(sim_device, adb_server, tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(MB3)
    r = _adb(adb_server, sim_device, "push", str(big), "/data/local/tmp/big.bin")
    assert r.returncode == 0, r.stderr
    md5 = _adb(adb_server, sim_device, "shell", "md5sum /data/local/tmp/big.bin").stdout
    assert md5.split()[0] == hashlib.md5(MB3).hexdigest()
    back = tmp_path / "back.bin"
    r = _adb(adb_server, sim_device, "pull", "/data/local/tmp/big.bin", str(back))
    assert r.returncode == 0, r.stderr
    assert back.read_bytes() == MB3
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "sub" / "b.txt").write_text("b")
    assert _adb(adb_server, sim_device, "push", str(tree), "/data/local/tmp/").returncode == 0
    ls = _adb(adb_server, sim_device, "ls", "/data/local/tmp/tree").stdout
    assert sorted(line.split()[-1] for line in ls.splitlines()) == [".", "..", "a.txt", "sub"]
    out = tmp_path / "out"
    out.mkdir()
    assert _adb(adb_server, sim_device, "pull", "/data/local/tmp/tree", str(out)).returncode == 0
    assert (out / "tree" / "sub" / "b.txt").read_text() == "b"
    missing = _adb(adb_server, sim_device, "pull", "/data/local/tmp/nope", str(tmp_path / "x"))
    assert missing.returncode != 0 and "No such file" in missing.stdout + missing.stderr
    stat = _adb(adb_server, sim_device, "shell", "stat -c %s /data/local/tmp/big.bin")
    assert stat.stdout.strip() == str(len(MB3))


def test_install_install_multiple_and_uninstall(sim_device, adb_server, tmp_path):
    apk = tmp_path / "app.apk"
    apk.write_bytes(build_apk(SimPackage(package="com.example.cli", kind="app")))
    r = _adb(adb_server, sim_device, "install", "-r", str(apk))
    assert (r.returncode, r.stdout.strip().splitlines()[-1]) == (0, "Success"), r.stderr
    base = tmp_path / "base.apk"
    base.write_bytes(build_apk(SimPackage(package="com.example.multi", kind="app")))
    split = tmp_path / "split_config.xxhdpi.apk"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("resources.arsc", b"\0" * 64)
    split.write_bytes(buf.getvalue())
    r = _adb(adb_server, sim_device, "install-multiple", str(base), str(split))
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout + r.stderr
    listed = _adb(adb_server, sim_device, "shell", "pm list packages -3").stdout.split()
    assert {"package:com.example.cli", "package:com.example.multi"} <= set(listed)
    r = _adb(adb_server, sim_device, "uninstall", "com.example.multi")
    assert (r.returncode, r.stdout.strip()) == (0, "Success")
    bad = tmp_path / "bad.apk"
    bad.write_bytes(b"not an apk")
    r = _adb(adb_server, sim_device, "install-multiple", str(bad), str(split))
    assert r.returncode != 0 and "INSTALL_FAILED_INVALID_APK" in r.stdout + r.stderr


def test_logcat_dump_clear_binary_and_stream(sim_device, adb_server):
    sim_device.call(lambda: sim_device.device.log("I", "CliTag", "hello cli", pid=4321, tid=4321))
    dump = _adb(adb_server, sim_device, "logcat", "-d", "-s", "CliTag")
    assert "I CliTag  : hello cli" in dump.stdout
    binary = _adb(adb_server, sim_device, "logcat", "-d", "-B", text=False).stdout
    length, hdr = struct.unpack_from("<HH", binary, 0)
    assert hdr == 28 and len(binary) >= 28 + length
    assert b"CliTag\0hello cli\0" in binary
    assert _adb(adb_server, sim_device, "logcat", "-c").returncode == 0
    assert "hello cli" not in _adb(adb_server, sim_device, "logcat", "-d").stdout
    # Streaming: the CLI keeps reading until the count is reached (-m), then exits.
    proc = subprocess.Popen(
        [_BINARY[0] or adb_server.adb, "-P", str(adb_server.port), "-s", sim_device.address, "logcat",
         "-m", "1", "-s", "Live"], env=adb_server.env, stdout=subprocess.PIPE, text=True)
    try:
        sim_device.call(lambda: sim_device.device.log("W", "Live", "streamed", pid=1, tid=1))
        out, _ = proc.communicate(timeout=T)
    finally:
        proc.kill()
        proc.wait(T)
    assert "W Live    : streamed" in out


def test_bugreport_pulls_a_zip(sim_device, adb_server, tmp_path):
    target = tmp_path / "report.zip"
    r = _adb(adb_server, sim_device, "bugreport", str(target))
    assert r.returncode == 0, r.stdout + r.stderr
    with zipfile.ZipFile(target) as z:
        main = z.read("main_entry.txt").decode()
        assert "dumpstate" in z.read(main).decode()


def test_concurrent_commands(sim_device, adb_server, tmp_path):
    payload = tmp_path / "p.bin"
    payload.write_bytes(os.urandom(300_000))

    def job(i: int) -> tuple[int, str]:
        if i % 2:
            r = _adb(adb_server, sim_device, "push", str(payload), f"/data/local/tmp/p{i}")
            return r.returncode, ""
        r = _adb(adb_server, sim_device, "shell", f"echo {i}; cat /proc/loadavg | wc -l")
        return r.returncode, r.stdout

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(job, range(8)))
    assert all(code == 0 for code, _ in results)
    assert [out for i, (_, out) in enumerate(results) if i % 2 == 0] == [
        f"{i}\n1\n" for i in range(0, 8, 2)]
