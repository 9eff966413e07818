"""Fixtures for the conformance suite: the simulated device driven by adb clients no one here wrote.

* ``direct_sim``: a simulated device in a thread of its own, *not* connected to an adb server —
  for adb-shell, which speaks the device protocol itself over TCP.
* ``host_key``: an RSA key pair made with adb-shell's own ``keygen`` (once per session), its
  signer (adb-shell's pure-python ``rsa`` signer) and its ``adbkey.pub`` line.
* :func:`adb_shell_device`: an ``adb_shell`` ``AdbDeviceTcp`` connected to a simulated device.

Every test carries a ``timeout`` mark: a hang guard that turns a missing CLSE or OKAY into a
failure naming the test, never a timing assertion.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from device_bridge.sim.apk import SimPackage, build_apk
from device_bridge.sim.threaded import ThreadedSimDevice

# Each client call gets this long before the client itself gives up (hang guard only).
CLIENT_TIMEOUT_S = 10.0


@dataclass
class HostKey:
    signer: Any
    public: str  # the adbkey.pub line


@pytest.fixture(scope="session")
def host_key(tmp_path_factory: pytest.TempPathFactory) -> HostKey:
    from adb_shell.auth.keygen import keygen
    from adb_shell.auth.sign_pythonrsa import PythonRSASigner

    path = tmp_path_factory.mktemp("adbkey") / "adbkey"
    keygen(str(path))
    public = Path(f"{path}.pub").read_text()
    return HostKey(PythonRSASigner(public, path.read_text()), public.strip())


@pytest.fixture(scope="session")
def other_host_key(tmp_path_factory: pytest.TempPathFactory) -> HostKey:
    from adb_shell.auth.keygen import keygen
    from adb_shell.auth.sign_pythonrsa import PythonRSASigner

    path = tmp_path_factory.mktemp("adbkey2") / "adbkey"
    keygen(str(path))
    public = Path(f"{path}.pub").read_text()
    return HostKey(PythonRSASigner(public, path.read_text()), public.strip())


@pytest.fixture
def direct_sim() -> Iterator[ThreadedSimDevice]:
    with ThreadedSimDevice(port=0, noise_interval=None, seed=7) as sim:
        yield sim


@contextlib.contextmanager
def adb_shell_device(sim: ThreadedSimDevice, *, keys: list[Any] | None = None,
                     auth_timeout_s: float = CLIENT_TIMEOUT_S,
                     timeout_s: float = CLIENT_TIMEOUT_S) -> Iterator[Any]:
    from adb_shell.adb_device import AdbDeviceTcp

    dev = AdbDeviceTcp("127.0.0.1", sim.port, default_transport_timeout_s=timeout_s)
    try:
        dev.connect(rsa_keys=keys, auth_timeout_s=auth_timeout_s, read_timeout_s=timeout_s)
        yield dev
    finally:
        dev.close()


def install_multiple_through_shell(push: Any, shell: Any) -> str:
    """What `adb install-multiple` does, with a library that has only push and shell."""
    base = build_apk(SimPackage(package="com.example.session", kind="app"))
    split = b"PK\x05\x06" + bytes(18)  # an empty zip: a split the phone does not parse
    push(base, "/data/local/tmp/base.apk")
    push(split, "/data/local/tmp/split.apk")
    created = shell(f"pm install-create -S {len(base) + len(split)}")
    sid = created.split("[", 1)[1].split("]", 1)[0]
    for name in ("base.apk", "split.apk"):
        assert "Success" in shell(f"pm install-write {sid} {name} /data/local/tmp/{name}")
    return shell(f"pm install-commit {sid}").strip()
