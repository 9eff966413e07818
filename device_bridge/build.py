"""The bridge's build service: compile a test against a project, with the right toolchain.

Toolchain choice (docs/design.md §5, §8), per project:

* ``gradle`` — the host has a JDK (``JAVA_HOME/bin/java`` or ``java`` on PATH) and an
  Android SDK (``ANDROID_HOME`` or ``ANDROID_SDK_ROOT`` with at least one ``build-tools/<v>``)
  and the project has a launcher (``gradlew``, else ``gradle`` on PATH). The service runs
  ``gradlew assembleDebug assembleDebugAndroidTest`` in the project's working copy, with a
  timeout, output captured, and reads the APKs from ``app/build/outputs/apk/…``.
* ``simulated`` — otherwise, for the demo project only: ``device_bridge.sim.toolchain``
  checks the test against the demo app's symbols and builds simulated APKs. It says so in
  every outcome and in the capabilities, never silently.
* any other project on a host without an SDK is refused: ``unavailable``, with what is
  missing.

The ``kotlinc`` check (:mod:`device_bridge.kotlinc`) comes first for the demo project when
the pinned Kotlin compiler is set up (``make setup``) and a JDK is present: one warm compiler
JVM type-checks the test against the app's classes and the test libraries. A test it rejects
never reaches Gradle or the simulated toolchain: the outcome carries the real compiler's
messages (``checked_by="kotlinc"``). Without an SDK it gates the simulated toolchain; with
one, Gradle runs once, on a test that already compiles. Without a JDK or the compiler the
bridge says so once in its log and builds without the check.

``prefer`` forces a side: ``"simulated"`` (the simulated toolchain alone, no check),
``"kotlinc"`` (the check, then the simulated toolchain; refused when the compiler is not set
up) or ``"gradle"`` (never fall back). Blocking work — copying, tar, reading APKs, the simulated
compiler — runs in threads; Gradle runs as an asyncio subprocess in its own process group,
killed as a group on timeout or cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import os
import shutil
import signal
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from protocol.errors import ErrorCode, RpcError
from protocol.methods import Apk, CompileResult

from .workspace import (
    DEFAULT_SLOTS_PER_PROJECT,
    Lease,
    Project,
    ProjectRegistry,
    WorkspaceManager,
    default_state_dir,
    source_fingerprint,
)
from .workspace.fsutil import is_within

__all__ = [
    "DEFAULT_COMPILE_TIMEOUT_S",
    "GRADLE_TASKS",
    "PREFER_CHOICES",
    "BuildService",
    "CompileOutcome",
    "HostToolchain",
    "Toolchain",
    "detect_host",
    "from_config",
    "kotlinc_ready",
]

log = logging.getLogger("droidwire.bridge.build")

Toolchain = Literal["gradle", "simulated"]
Prefer = Literal["auto", "gradle", "simulated", "kotlinc"]
PREFER_CHOICES: tuple[str, ...] = ("auto", "gradle", "simulated", "kotlinc")

GRADLE_TASKS = ("assembleDebug", "assembleDebugAndroidTest")
DEFAULT_COMPILE_TIMEOUT_S = 900.0
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
# Gradle's compiler errors come near the end of its output: keep the tail when it is long.
MAX_OUTPUT_BYTES = 2 * 1024 * 1024
# After killing Gradle, how long to wait for a grandchild that still holds the pipe open.
_DRAIN_AFTER_KILL_S = 5.0


@dataclass(frozen=True)
class CompileOutcome:
    """What a compile produced. ``ok`` False means the compiler refused the test (the output
    holds its errors, for the fixer); anything else that goes wrong is an ``RpcError``."""

    ok: bool
    output: str
    toolchain: Toolchain
    app_apk: bytes | None = None
    test_apk: bytes | None = None
    apk_hashes: dict[str, str] = field(default_factory=dict)  # {"app": sha256, "test": sha256}
    project: str = ""
    test_class: str | None = None  # fully qualified, for ``am instrument -e class``
    workspace: str | None = None  # the start branch the working copy took
    duration_ms: int = 0
    cached: bool = False  # served from the bridge's APK cache, no compile ran
    checked_by: Literal["kotlinc"] | None = None  # the real compiler checked the test first
    check: dict[str, Any] | None = None  # the check's summary (kotlinc.CheckResult.summary)

    def to_result(self) -> CompileResult:
        """The ``workspace.compile`` RPC result (protocol.methods)."""
        apks = []
        if self.ok and self.app_apk is not None and self.test_apk is not None:
            apks = [
                Apk.from_bytes("app", "app-debug.apk", self.app_apk),
                Apk.from_bytes("test", "app-debug-androidTest.apk", self.test_apk),
            ]
        return CompileResult(
            ok=self.ok, output=self.output, toolchain=self.toolchain, apks=apks,
            checked_by=self.checked_by, check=self.check,
        )


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


def _load_kotlinc(env: Mapping[str, str]) -> Checker:
    """Build (or find) the class path and a checker with its warm compiler. Raises
    ``device_bridge.kotlinc.SetupError`` with what is missing."""
    from device_bridge.kotlinc import KotlincChecker, ensure_layout

    return KotlincChecker(ensure_layout(fetch=False, env=dict(env)), env=env)


def _load_simulated() -> SimulatedCompiler | None:
    try:
        from device_bridge.sim.toolchain import SimulatedToolchain
    except ImportError as exc:
        log.warning("simulated toolchain unavailable (pip install 'droidwire[sim]'): %s", exc)
        return None
    return SimulatedToolchain()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _as_bytes(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str | os.PathLike):
        return Path(value).read_bytes()
    raise TypeError(f"an APK must be bytes or a path, not {type(value).__name__}")


class BuildService:
    """Compiles tests for the projects a :class:`WorkspaceManager` serves."""

    def __init__(
        self,
        workspaces: WorkspaceManager,
        *,
        prefer: Prefer = "auto",
        host: HostToolchain | None = None,
        simulated: SimulatedCompiler | None = None,
        env: Mapping[str, str] | None = None,
        # Limits
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        checker: Checker | None = None,
    ) -> None:
        self.workspaces = workspaces
        self.prefer: Prefer = prefer
        self._env = dict(os.environ if env is None else env)
        self.host = host if host is not None else detect_host(self._env)
        self._simulated = simulated
        self._simulated_loaded = simulated is not None
        # The kotlinc check: given, or loaded on the first compile that wants it.
        self._checker = checker
        self._owns_checker = checker is None  # a given checker is closed by whoever gave it
        self._checker_missing: str | None = None
        if checker is None and prefer != "simulated":
            self._checker_missing = kotlinc_ready(self._env)
            if self._checker_missing is not None:
                if prefer == "kotlinc":
                    log.warning("kotlinc toolchain unavailable: %s", self._checker_missing)
                else:
                    log.warning(
                        "the kotlinc check is off: %s; builds go without it (the demo project"
                        " with the simulated toolchain alone)", self._checker_missing,
                    )
        self._checker_lock = asyncio.Lock()
        self.max_output_bytes = max_output_bytes
        self._cache = _ApkCache(cache_bytes) if cache_bytes else None

    # -- choosing ----------------------------------------------------------------------
    @property
    def simulated(self) -> SimulatedCompiler | None:
        if not self._simulated_loaded:
            self._simulated = _load_simulated()
            self._simulated_loaded = True
        return self._simulated

    def _launcher(self, project: Project) -> list[str] | None:
        if (project.path / "gradlew").is_file():
            return ["sh", "gradlew"]  # sh: package data may have lost the executable bit
        if self.host.gradle is not None:
            return [str(self.host.gradle)]
        return None

    @property
    def checks_with_kotlinc(self) -> bool:
        """Whether compiles of the demo project are checked with kotlinc first."""
        return self.prefer != "simulated" and (
            self._checker is not None or self._checker_missing is None
        )

    def checker_for(self, project: Project) -> bool:
        """Whether ``project``'s tests get the kotlinc check (the demo project only: its class
        path is known; any other project's dependencies are Gradle's business)."""
        return project.demo and self.checks_with_kotlinc

    async def _get_checker(self) -> Checker | None:
        if self._checker is not None or self._checker_missing is not None:
            return self._checker
        async with self._checker_lock:
            if self._checker is None and self._checker_missing is None:
                try:
                    self._checker = await asyncio.to_thread(_load_kotlinc, self._env)
                except Exception as exc:  # SetupError, OSError: say it once, go without
                    self._checker_missing = str(exc)
                    log.warning("the kotlinc check is off: %s", exc)
        return self._checker

    def toolchain_for(self, project: Project) -> Toolchain:
        """The toolchain ``project`` builds with here; ``unavailable`` if none can."""
        if self.prefer == "kotlinc":
            if not project.demo:
                raise RpcError(
                    ErrorCode.UNAVAILABLE,
                    f"cannot build project {project.name}: this bridge is set to the kotlinc"
                    " toolchain, which checks and builds only the demo project",
                    {"reason": "simulated_only", "project": project.name},
                )
            if not self.checks_with_kotlinc:
                raise RpcError(
                    ErrorCode.UNAVAILABLE,
                    f"the kotlinc toolchain is not available here: {self._checker_missing}",
                    {"reason": "no_kotlinc", "project": project.name},
                )
        if self.prefer not in ("simulated", "kotlinc") and self.host.can_build:
            if self._launcher(project) is not None:
                return "gradle"
            if self.prefer == "gradle" or not project.demo:
                raise RpcError(
                    ErrorCode.UNAVAILABLE,
                    f"project {project.name} has no Gradle wrapper (gradlew) and there is no"
                    " gradle on PATH",
                    {"reason": "no_gradle", "project": project.name},
                )
        elif self.prefer == "gradle":
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                f"cannot build {project.name}: this bridge lacks {' and '.join(self.host.missing)}",
                {"reason": "no_sdk", "project": project.name, "missing": self.host.missing},
            )
        if project.demo and self.simulated is not None:
            return "simulated"
        if project.demo:
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                "the simulated toolchain is not installed on this bridge",
                {"reason": "no_toolchain", "project": project.name},
            )
        if self.prefer == "simulated":
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                f"cannot build project {project.name}: this bridge is set to the simulated"
                " toolchain, which builds only the demo project",
                {"reason": "simulated_only", "project": project.name},
            )
        raise RpcError(
            ErrorCode.UNAVAILABLE,
            f"cannot build project {project.name}: this bridge lacks"
            f" {' and '.join(self.host.missing)}; without them only the demo project builds,"
            " with the simulated toolchain",
            {"reason": "no_sdk", "project": project.name, "missing": self.host.missing},
        )

    def project_toolchains(self) -> dict[str, Toolchain | None]:
        """Each served project and the toolchain it builds with here (None: it cannot)."""
        out: dict[str, Toolchain | None] = {}
        for project in self.workspaces.projects:
            try:
                out[project.name] = self.toolchain_for(project)
            except RpcError:
                out[project.name] = None
        return out

    def capabilities(self) -> dict[str, Any]:
        """The ``build`` side of the bridge's ``hello`` capabilities (``protocol.envelope.
        Capabilities``): ``build`` — some project compiles here; ``toolchain`` — the default
        project's (else the first buildable one's); ``projects`` — the buildable names."""
        per_project = self.project_toolchains()
        default = self.workspaces.projects.default
        toolchain = per_project.get(default) if default is not None else None
        if toolchain is None:
            toolchain = next((t for t in per_project.values() if t is not None), None)
        return {
            "build": any(t is not None for t in per_project.values()),
            "toolchain": toolchain,
            "checker": "kotlinc" if self.checks_with_kotlinc else None,
            "projects": [name for name, t in per_project.items() if t is not None],
            "default_project": default,
        }

    async def stop(self) -> None:
        """Staged shutdown: refuse new compiles, let running ones finish, snapshot; then the
        warm compiler's JVM goes."""
        await self.workspaces.stop()
        if self._checker is not None and self._owns_checker:
            await asyncio.to_thread(self._checker.close)

    # -- compiling ---------------------------------------------------------------------
    async def compile(
        self,
        project: str | None,
        test_code: str,
        *,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
    ) -> CompileOutcome:
        """Write ``test_code`` into a working copy of ``project`` and build it.

        Raises ``RpcError``: refusals of the project or the test (``not_found``,
        ``forbidden``, ``bad_request``, ``conflict``), ``unavailable`` (no toolchain, disk
        errors), ``busy`` (no workspace free in time), ``timeout``.
        """
        if not timeout_s or timeout_s <= 0:
            raise RpcError(ErrorCode.BAD_REQUEST, "timeout_s must be positive")
        proj = self.workspaces.projects.get(project)
        toolchain = self.toolchain_for(proj)
        checker = await self._get_checker() if self.checker_for(proj) else None
        if checker is None and self.prefer == "kotlinc":
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                f"the kotlinc toolchain is not available here: {self._checker_missing}",
                {"reason": "no_kotlinc", "project": proj.name},
            )
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout_s
        key = None
        if self._cache is not None:
            fingerprint = await asyncio.to_thread(source_fingerprint, proj.path)
            key = _cache_key(
                f"{toolchain}+kotlinc" if checker is not None else toolchain,
                proj, fingerprint, test_code,
            )
            hit = self._cache.get(key)
            if hit is not None:
                log.info("compile of %s served from the APK cache", hit.test_class)
                return replace(hit, cached=True, workspace=None, duration_ms=0)
        try:
            async with asyncio.timeout_at(deadline):
                async with self.workspaces.lease(proj.name, test_code) as lease:
                    log.info(
                        "compile %s in %s slot %d (%s, %s)",
                        lease.test_class,
                        proj.name,
                        lease.slot,
                        toolchain,
                        lease.branch.value,
                    )
                    check = None
                    if checker is not None:
                        check = await self._check(checker, lease, deadline - loop.time())
                        if not check.ok:
                            outcome = self._outcome(
                                lease, False, str(check.output), toolchain, None, None
                            )
                            outcome = replace(
                                outcome, checked_by="kotlinc", check=check.summary()
                            )
                    if check is not None and not check.ok:
                        pass  # the real compiler refused it: no build runs
                    elif toolchain == "gradle":
                        outcome = await self._gradle(lease, test_code, deadline)
                    else:
                        outcome = await self._simulate(lease, test_code)
                    if check is not None and check.ok:
                        outcome = replace(
                            outcome, checked_by="kotlinc", check=check.summary(),
                            output=f"{check.output}{outcome.output}",
                        )
        except TimeoutError:
            raise RpcError(
                ErrorCode.TIMEOUT,
                f"compile of project {proj.name} did not finish within {timeout_s:g}s",
                {"project": proj.name, "toolchain": toolchain},
            ) from None
        if key is not None and self._cache is not None and outcome.ok:
            self._cache.put(key, outcome)
        return replace(outcome, duration_ms=int((loop.time() - started) * 1000))

    async def _check(self, checker: Checker, lease: Lease, budget_s: float) -> Any:
        """The kotlinc check of the test in ``lease`` (in a thread; the slot is held until it
        is really done, even when the caller is cancelled)."""
        work = asyncio.ensure_future(
            asyncio.to_thread(
                checker.check, lease.project_dir, lease.test_file,
                module=lease.project.module, app_dir=lease.project.path, timeout_s=budget_s,
            )
        )
        lease.hold(work)
        try:
            return await asyncio.shield(work)
        except RpcError:
            raise
        except Exception as exc:
            from device_bridge.kotlinc import CompilerBusy, CompilerError, SetupError

            if isinstance(exc, CompilerBusy):
                raise RpcError(ErrorCode.BUSY, f"kotlinc: {exc}") from exc
            if isinstance(exc, CompilerError | SetupError):
                raise RpcError(
                    ErrorCode.UNAVAILABLE, f"kotlinc: {exc}", {"reason": "kotlinc"}
                ) from exc
            log.exception("the kotlinc check failed on %s", lease.test_class)
            raise RpcError(
                ErrorCode.INTERNAL, f"the kotlinc check failed: {type(exc).__name__}: {exc}"
            ) from exc

    async def _simulate(self, lease: Lease, test_code: str) -> CompileOutcome:
        compiler = self.simulated
        assert compiler is not None  # toolchain_for checked it
        work = asyncio.ensure_future(
            asyncio.to_thread(
                compiler.compile, lease.project_dir, test_code, test_path=lease.test_file
            )
        )
        lease.hold(work)
        try:
            result = await asyncio.shield(work)
            if inspect.isawaitable(result):
                result = await result
        except RpcError:
            raise
        except Exception as exc:  # a bug in the simulator must not take the bridge down
            log.exception("simulated toolchain failed on %s", lease.test_class)
            raise RpcError(
                ErrorCode.INTERNAL, f"the simulated toolchain failed: {type(exc).__name__}: {exc}"
            ) from exc
        ok = bool(result.ok)
        app_apk = test_apk = None
        if ok:
            app_apk, test_apk = await asyncio.to_thread(
                lambda: (_as_bytes(result.app_apk), _as_bytes(result.test_apk))
            )
            if not app_apk or not test_apk:
                raise RpcError(
                    ErrorCode.INTERNAL,
                    "the simulated toolchain reported success without both APKs",
                )
        return self._outcome(lease, ok, str(result.output), "simulated", app_apk, test_apk)

    def _outcome(
        self,
        lease: Lease,
        ok: bool,
        output: str,
        toolchain: Toolchain,
        app_apk: bytes | None,
        test_apk: bytes | None,
    ) -> CompileOutcome:
        hashes = {}
        if app_apk is not None and test_apk is not None:
            hashes = {"app": _sha256(app_apk), "test": _sha256(test_apk)}
        return CompileOutcome(
            ok=ok,
            output=output,
            toolchain=toolchain,
            app_apk=app_apk if ok else None,
            test_apk=test_apk if ok else None,
            apk_hashes=hashes if ok else {},
            project=lease.project.name,
            test_class=lease.test_class,
            workspace=lease.branch.value,
        )

    async def _gradle(self, lease: Lease, test_code: str, deadline: float) -> CompileOutcome:
        launcher = self._launcher(lease.project)
        if launcher is None:  # the wrapper vanished since toolchain_for looked
            raise RpcError(ErrorCode.UNAVAILABLE, "no Gradle launcher", {"reason": "no_gradle"})
        argv = [*launcher, "--console=plain", *GRADLE_TASKS]
        env = dict(self._env)
        if self.host.sdk is not None:
            env["ANDROID_HOME"] = str(self.host.sdk)
        if self.host.java is not None and "JAVA_HOME" not in env:
            env["JAVA_HOME"] = str(self.host.java.parent.parent)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=lease.project_dir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout kills the whole tree
            )
        except OSError as exc:
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                f"cannot start Gradle ({' '.join(argv[:2])}): {exc.strerror or exc}",
                {"reason": "gradle_start"},
            ) from exc
        assert proc.stdout is not None
        tail = _Tail(self.max_output_bytes)
        reader = asyncio.ensure_future(tail.read_from(proc.stdout))
        waiter = asyncio.ensure_future(proc.wait())
        lease.hold(waiter)  # the slot stays taken until Gradle is really gone
        try:
            rc = await asyncio.shield(waiter)
            # A grandchild that kept the pipe open must not hold the build hostage.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader, _DRAIN_AFTER_KILL_S)
        except BaseException:
            _kill_group(proc)
            reader.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(waiter), _DRAIN_AFTER_KILL_S)
            raise
        output = tail.text()
        ok = rc == 0
        app_apk = test_apk = None
        if ok:
            app_apk, test_apk = await asyncio.to_thread(_read_apks, lease)
        log.info("gradle exited %s for %s", rc, lease.test_class)
        return self._outcome(lease, ok, output, "gradle", app_apk, test_apk)


def _cache_key(toolchain: str, project: Project, fingerprint: str, test_code: str) -> str:
    h = hashlib.sha256(f"{toolchain}\0{project.identity}\0{fingerprint}\0".encode())
    h.update(test_code.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


class _ApkCache:
    """Successful compiles by sha256(toolchain + project identity + its files + test code),
    least recently used evicted first, bounded by the APK bytes held."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, CompileOutcome] = OrderedDict()

    @staticmethod
    def _size(outcome: CompileOutcome) -> int:
        return len(outcome.app_apk or b"") + len(outcome.test_apk or b"")

    def get(self, key: str) -> CompileOutcome | None:
        outcome = self._entries.get(key)
        if outcome is not None:
            self._entries.move_to_end(key)
        return outcome

    def put(self, key: str, outcome: CompileOutcome) -> None:
        size = self._size(outcome)
        if size > self.max_bytes or key in self._entries:
            return
        while self._entries and self.bytes + size > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= self._size(old)
        self._entries[key] = outcome
        self.bytes += size


_CONFIG_KEYS = frozenset(
    {
        "state_dir",
        "roots",
        "projects",
        "default_project",
        "slots_per_project",
        "toolchain",
        "serve_demo",
    }
)


def from_config(
    section: Mapping[str, Any] | None,
    *,
    base: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> BuildService:
    """A build service from the ``build`` section of a bridge's config file.

    ::

        [build]
        toolchain = "auto"            # or "gradle", "simulated"
        roots = ["/srv/android"]      # every project must live under one of them
        default_project = "shop"      # default: the first project (the demo if none)
        slots_per_project = 2         # concurrent builds of one project
        serve_demo = true             # also serve the shipped demo project as "demo"
        state_dir = "/var/lib/droidwire/workspaces"
        [build.projects]
        shop = "/srv/android/shop"    # or { path = "…", module = "app" }

    Paths are relative to ``base`` (the config file's directory). Any problem is an
    ``RpcError`` (``bad_request``, or ``forbidden`` for a project outside the roots).
    """
    section = dict(section or {})
    unknown = sorted(set(section) - _CONFIG_KEYS)
    if unknown:
        raise RpcError(ErrorCode.BAD_REQUEST, f"unknown build settings: {', '.join(unknown)}")

    def bad(key: str, expected: str) -> RpcError:
        return RpcError(ErrorCode.BAD_REQUEST, f"build.{key} must be {expected}")

    roots = section.get("roots", [])
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise bad("roots", "a list of paths")
    projects = section.get("projects", {})
    if not isinstance(projects, Mapping):
        raise bad("projects", "a table of name = path")
    default = section.get("default_project")
    if default is not None and not isinstance(default, str):
        raise bad("default_project", "a project name")
    slots = section.get("slots_per_project", DEFAULT_SLOTS_PER_PROJECT)
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= 64:
        raise bad("slots_per_project", "an integer from 1 to 64")
    prefer = section.get("toolchain", "auto")
    if prefer not in PREFER_CHOICES:
        raise bad("toolchain", '"auto", "gradle", "simulated" or "kotlinc"')
    state_dir = section.get("state_dir")
    if state_dir is not None and not isinstance(state_dir, str):
        raise bad("state_dir", "a path")
    serve_demo = section.get("serve_demo", True)
    if not isinstance(serve_demo, bool):
        raise bad("serve_demo", "true or false")
    base = base or Path.cwd()
    registry = ProjectRegistry.from_config(
        projects, roots=roots, default=default, base=base, include_demo=serve_demo
    )
    manager = WorkspaceManager(
        registry,
        state_dir=(base / Path(state_dir).expanduser()) if state_dir else default_state_dir(),
        slots_per_project=slots,
    )
    return BuildService(manager, prefer=prefer, env=env)


class _Tail:
    """The last ``limit`` bytes of a stream, readable even if the reading is cut short."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.dropped = 0

    async def read_from(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(64 * 1024):
            self.buf += chunk
            if len(self.buf) > self.limit:
                self.dropped += len(self.buf) - self.limit
                del self.buf[: len(self.buf) - self.limit]

    def text(self) -> str:
        text = self.buf.decode("utf-8", "replace")
        if self.dropped:
            text = f"[droidwire: {self.dropped} earlier bytes of output dropped]\n{text}"
        return text


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _find_apk(directory: Path, root: Path) -> bytes | None:
    try:
        apks = [p for p in directory.glob("*.apk") if p.is_file()]
    except OSError:
        return None
    if not apks:
        return None
    newest = max(apks, key=lambda p: p.stat().st_mtime_ns)
    if not is_within(newest.resolve(), root):
        raise RpcError(ErrorCode.FORBIDDEN, "refused: an APK path leaves the working copy")
    return newest.read_bytes()


def _read_apks(lease: Lease) -> tuple[bytes, bytes]:
    root = lease.project_dir.resolve()
    outputs = lease.project_dir / lease.project.module / "build" / "outputs" / "apk"
    try:
        app = _find_apk(outputs / "debug", root)
        test = _find_apk(outputs / "androidTest" / "debug", root)
    except OSError as exc:
        raise RpcError(ErrorCode.UNAVAILABLE, f"cannot read the built APKs: {exc}") from exc
    if app is None or test is None:
        raise RpcError(
            ErrorCode.INTERNAL,
            f"Gradle succeeded but left no {'app' if app is None else 'test'} APK under {outputs}",
        )
    return app, test
