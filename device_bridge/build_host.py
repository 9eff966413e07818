"""What this host offers a build: a JDK and an Android SDK for Gradle, the kotlinc check,
the simulated toolchain (docs/design.md §5, §8).

:func:`detect_host` looks for a JDK and an SDK the way Gradle and AGP do (environment first);
:func:`kotlinc_ready` says cheaply whether the kotlinc check can run; :func:`load_kotlinc` and
:func:`load_simulated` bring up the check's warm compiler and the simulated toolchain when the
:class:`~device_bridge.build.BuildService` first needs them. :class:`SimulatedCompiler` and
:class:`Checker` are what the service needs of those two.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "Checker",
    "HostToolchain",
    "SimulatedCompiler",
    "detect_host",
    "kotlinc_ready",
    "load_kotlinc",
    "load_simulated",
]

log = logging.getLogger("droidwire.bridge.build")


@dataclass(frozen=True)
class HostToolchain:
    """What this host offers for a real Android build."""

    java: Path | None
    sdk: Path | None
    build_tools: tuple[str, ...] = ()
    gradle: Path | None = None  # ``gradle`` on PATH, used when a project has no wrapper

    @property
    def can_build(self) -> bool:
        return self.java is not None and self.sdk is not None and bool(self.build_tools)

    @property
    def missing(self) -> list[str]:
        out = []
        if self.java is None:
            out.append("a JDK (java)")
        if self.sdk is None:
            out.append("the Android SDK (ANDROID_HOME or ANDROID_SDK_ROOT)")
        elif not self.build_tools:
            out.append(f"build-tools in {self.sdk}")
        return out


def detect_host(env: Mapping[str, str] | None = None) -> HostToolchain:
    """Look for a JDK and an Android SDK the way Gradle and AGP do (environment first)."""
    env = os.environ if env is None else env
    path = env.get("PATH", "")
    java: Path | None = None
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            java = candidate
    if java is None:
        found = shutil.which("java", path=path)
        java = Path(found) if found else None

    sdk: Path | None = None
    build_tools: tuple[str, ...] = ()
    for var in ("ANDROID_HOME", "ANDROID_SDK_ROOT"):
        value = env.get(var)
        if value and Path(value).is_dir():
            sdk = Path(value)
            bt = sdk / "build-tools"
            if bt.is_dir():
                build_tools = tuple(
                    sorted(d.name for d in bt.iterdir() if d.is_dir() and any(d.iterdir()))
                )
            break
    gradle = shutil.which("gradle", path=path)
    return HostToolchain(java, sdk, build_tools, Path(gradle) if gradle else None)


class SimulatedCompiler(Protocol):
    """What the build service needs of ``device_bridge.sim.toolchain.SimulatedToolchain``."""

    def compile(self, project_dir: Path, test_code: str, *, test_path: Path | None = None) -> Any:
        """Build ``test_code`` (written at ``test_path``) against the project in ``project_dir``;
        returns an object with ``ok``, ``output``, ``app_apk``, ``test_apk``."""


class Checker(Protocol):
    """What the build service needs of ``device_bridge.kotlinc.KotlincChecker``."""

    def check(
        self, project_dir: Path, test_path: Path, *, module: str = "app",
        app_dir: Path | None = None, timeout_s: float | None = None,
    ) -> Any:
        """Type-check the test at ``test_path``; an object with ``ok``, ``output``,
        ``summary()``."""

    def close(self) -> None: ...


def kotlinc_ready(env: Mapping[str, str] | None = None) -> str | None:
    """None when the kotlinc check can run here, else what is missing (cheap: no build)."""
    try:
        from device_bridge.kotlinc.install import cache_dir, compiler_ok, find_java
    except ImportError as exc:  # pragma: no cover - part of this package
        return f"device_bridge.kotlinc is not importable: {exc}"
    env_d = dict(os.environ if env is None else env)
    if find_java(env_d) is None:
        return "no JDK (java and javac; Debian: openjdk-17-jdk-headless)"
    if not compiler_ok(cache_dir(env_d)):
        return "the pinned Kotlin compiler is not in the cache (run `make setup`)"
    return None


def load_kotlinc(env: Mapping[str, str]) -> Checker:
    """Build (or find) the class path and a checker with its warm compiler. Raises
    ``device_bridge.kotlinc.SetupError`` with what is missing."""
    from device_bridge.kotlinc import KotlincChecker, ensure_layout

    return KotlincChecker(ensure_layout(fetch=False, env=dict(env)), env=env)


def load_simulated() -> SimulatedCompiler | None:
    try:
        from device_bridge.sim.toolchain import SimulatedToolchain
    except ImportError as exc:
        log.warning("simulated toolchain unavailable (pip install 'droidwire[sim]'): %s", exc)
        return None
    return SimulatedToolchain()
