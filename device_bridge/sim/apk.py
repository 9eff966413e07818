"""The simulated APK format: what the simulated toolchain builds and the simulated device installs.

A simulated APK is a real zip file (so ``adb install`` / adbutils push and install it like any
APK) whose entry ``droidwire-sim.json`` describes the package. The simulated toolchain
(``device_bridge.sim.toolchain``) writes one app APK and one test APK per compile; the
simulated device (``device_bridge.sim.device``) reads them on ``pm install`` and hands the test
package to an :class:`InstrumentationPlayer` on ``am instrument``.

This module is the contract between the two halves; keep it small and dependency-free.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

__all__ = [
    "MANIFEST_ENTRY",
    "ApkError",
    "DeviceHooks",
    "InstrumentationPlayer",
    "SimPackage",
    "SimTest",
    "build_apk",
    "read_apk",
]

MANIFEST_ENTRY = "droidwire-sim.json"
FORMAT_VERSION = 1


class ApkError(ValueError):
    """The bytes are not a simulated APK (or not an APK at all)."""


@dataclass(frozen=True)
class SimTest:
    """One test method and what it does, as the simulated compiler understood it.

    ``steps`` is a list of plain dicts interpreted by the instrumentation player, e.g.
    ``{"call": "loadSettingsFromDisk", "thread": "main", "timed": true}`` or
    ``{"throw": "java.lang.IllegalStateException", "message": "boom"}``.
    """

    class_name: str  # fully qualified test class
    method: str
    steps: list[dict[str, object]] = field(default_factory=list)
    ignored: bool = False
    source_file: str = ""  # the test's file name (``FooTest.kt``), for stack frames


@dataclass(frozen=True)
class SimPackage:
    package: str
    kind: Literal["app", "test"]
    version_code: int = 1
    target_package: str | None = None  # for a test package: the app under test
    runner: str = "androidx.test.runner.AndroidJUnitRunner"
    tests: list[SimTest] = field(default_factory=list)
    toolchain: str = "simulated"
    source_hash: str = ""
    # Who signed it (a real APK's certificate): an update must come from the same signer.
    signer: str = "droidwire-debug"


def build_apk(pkg: SimPackage) -> bytes:
    """Serialise ``pkg`` into a zip with the manifest entry (deterministic bytes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo(MANIFEST_ENTRY, date_time=(1980, 1, 1, 0, 0, 0))
        body = {"format": FORMAT_VERSION, **asdict(pkg)}
        zf.writestr(info, json.dumps(body, sort_keys=True))
    return buf.getvalue()


def read_apk(data: bytes) -> SimPackage:
    """Parse a simulated APK; raise :class:`ApkError` for anything else."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            raw = json.loads(zf.read(MANIFEST_ENTRY))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ApkError(f"not a droidwire simulated APK: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_VERSION:
        raise ApkError("unsupported simulated APK format")
    try:
        tests = [SimTest(**t) for t in raw.get("tests", [])]
        return SimPackage(
            package=str(raw["package"]),
            kind=raw["kind"],
            version_code=int(raw.get("version_code", 1)),
            target_package=raw.get("target_package"),
            runner=str(raw.get("runner", SimPackage.runner)),
            tests=tests,
            toolchain=str(raw.get("toolchain", "simulated")),
            source_hash=str(raw.get("source_hash", "")),
            signer=str(raw.get("signer", SimPackage.signer)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ApkError(f"malformed simulated APK manifest: {exc}") from exc


class DeviceHooks(Protocol):
    """What the simulated device offers an instrumentation player."""

    def log(self, priority: str, tag: str, message: str, *, pid: int, tid: int) -> None:
        """Append one line to the device's logcat ring buffer (threadtime format)."""

    def start_process(self, package: str) -> int:
        """Start (or return) the app's process; logs ``Start proc PID:pkg/...``; returns its pid."""

    def kill_process(self, package: str, *, reason: str) -> None:
        """The process dies (crash, ANR kill); logs the ActivityManager lines."""

    def advance(self, ms: float) -> None:
        """Let simulated time pass (the device clock used for logcat timestamps)."""


class InstrumentationPlayer(Protocol):
    """Plays a test package's behaviour back as ``am instrument -w -r`` output lines."""

    def play(
        self,
        test_pkg: SimPackage,
        app_pkg: SimPackage | None,
        *,
        class_filter: str | None,
        device: DeviceHooks,
    ) -> Iterator[str]:
        """Yield the raw output lines (INSTRUMENTATION_STATUS… records) as they happen."""
        ...
