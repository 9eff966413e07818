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
killed as a group on timeout or cancellation (:mod:`device_bridge.build_gradle`). What the host
offers — a JDK, an SDK, the kotlinc check, the simulated toolchain — is found by
:mod:`device_bridge.build_host`; its names are importable from here too.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from protocol.errors import ErrorCode, RpcError
from protocol.methods import Apk, CompileResult

from .build_gradle import read_apks, run_gradle
from .build_host import (
    Checker,
    HostToolchain,
    SimulatedCompiler,
    detect_host,
    kotlinc_ready,
    load_kotlinc,
    load_simulated,
)
from .workspace import (
    DEFAULT_SLOTS_PER_PROJECT,
    Lease,
    Project,
    ProjectRegistry,
    WorkspaceManager,
    default_state_dir,
    source_fingerprint,
)

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
            self._simulated = load_simulated()
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
                    self._checker = await asyncio.to_thread(load_kotlinc, self._env)
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
        rc, output = await run_gradle(argv, lease, env, max_output_bytes=self.max_output_bytes)
        ok = rc == 0
        app_apk = test_apk = None
        if ok:
            app_apk, test_apk = await asyncio.to_thread(read_apks, lease)
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
