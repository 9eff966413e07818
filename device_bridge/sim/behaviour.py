"""The demo app's behaviour model: what calling each ``MainActivity`` method does on a device.

The *set* of methods comes from the Kotlin sources of ``gradle-workspace/`` (read with the
fixer's tree-sitter :class:`~fixer.source_index.SourceCodeIndex`), never from a list kept here:
a method added to ``MainActivity.kt`` is callable at once (with the default, fast behaviour),
and a method removed from it stops resolving in the simulated compiler. What each method
*does* is the effect table below, keyed by method name, because that is knowledge about the
code's run-time behaviour that no parser can read off the source.

Line numbers in the app frames of stack traces are the real lines of ``MainActivity.kt``:
each effect names the token (``exists(``, ``commit(``, …) whose line the frame points at.

The StrictMode text follows the modern (Android 9+) logcat shape::

    StrictMode policy violation; ~duration=847 ms: android.os.strictmode.DiskReadViolation
    \tat android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1666)
    ...
    \tat com.droidwire.demo.MainActivity.loadSettingsFromDisk(MainActivity.kt:56)
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from fixer.source_index import MethodRecord, SourceCodeIndex

__all__ = [
    "ACTIVITY_CLASS",
    "ANR_THRESHOLD_MS",
    "APP_PACKAGE",
    "DEFAULT_EFFECT",
    "EFFECTS",
    "VIOLATIONS",
    "DemoApp",
    "DemoAppError",
    "Effect",
    "MethodBehaviour",
    "ViolationKind",
    "demo_app",
    "strictmode_lines",
]

APP_PACKAGE = "com.droidwire.demo"
ACTIVITY_CLASS = "MainActivity"
# Input dispatching times out after 5 s (ActivityManagerService KEY_DISPATCHING_TIMEOUT).
ANR_THRESHOLD_MS = 5_000.0


class DemoAppError(RuntimeError):
    """The project does not contain the demo app the behaviour model describes."""


@dataclass(frozen=True)
class ViolationKind:
    """One StrictMode violation class and the framework frames above the app's own frame."""

    name: str  # as the verdict summary names it: "DiskRead"
    exception: str  # android.os.strictmode.DiskReadViolation
    detect: str  # the ThreadPolicy.Builder switch that enables it: "detectDiskReads"
    frames: tuple[str, ...]
    # Thrown instead of logged when the thread's policy has the matching death penalty
    # (the main thread's default policy has penaltyDeathOnNetwork for targetSdk >= 11).
    death_exception: str | None = None


VIOLATIONS: dict[str, ViolationKind] = {
    v.name: v
    for v in (
        ViolationKind(
            name="DiskRead",
            exception="android.os.strictmode.DiskReadViolation",
            detect="detectDiskReads",
            frames=(
                "android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1666)",
                "libcore.io.BlockGuardOs.access(BlockGuardOs.java:74)",
                "libcore.io.ForwardingOs.access(ForwardingOs.java:128)",
                "android.app.ActivityThread$AndroidOs.access(ActivityThread.java:8473)",
                "java.io.UnixFileSystem.checkAccess(UnixFileSystem.java:332)",
                "java.io.File.exists(File.java:829)",
            ),
        ),
        ViolationKind(
            name="DiskWrite",
            exception="android.os.strictmode.DiskWriteViolation",
            detect="detectDiskWrites",
            frames=(
                "android.os.StrictMode$AndroidBlockGuardPolicy.onWriteToDisk(StrictMode.java:1640)",
                "libcore.io.BlockGuardOs.open(BlockGuardOs.java:250)",
                "libcore.io.ForwardingOs.open(ForwardingOs.java:563)",
                "android.app.ActivityThread$AndroidOs.open(ActivityThread.java:8493)",
                "java.io.FileOutputStream.<init>(FileOutputStream.java:235)",
                "java.io.FileOutputStream.<init>(FileOutputStream.java:186)",
                "android.app.SharedPreferencesImpl.createFileOutputStream(SharedPreferencesImpl.java:622)",
                "android.app.SharedPreferencesImpl.writeToFile(SharedPreferencesImpl.java:784)",
                "android.app.SharedPreferencesImpl$2.run(SharedPreferencesImpl.java:677)",
                "android.app.SharedPreferencesImpl.enqueueDiskWrite(SharedPreferencesImpl.java:696)",
                "android.app.SharedPreferencesImpl$EditorImpl.commit(SharedPreferencesImpl.java:612)",
            ),
        ),
        ViolationKind(
            name="Network",
            exception="android.os.strictmode.NetworkViolation",
            detect="detectNetwork",
            frames=(
                "android.os.StrictMode$AndroidBlockGuardPolicy.onNetwork(StrictMode.java:1679)",
                "java.net.Inet6AddressImpl.lookupHostByName(Inet6AddressImpl.java:115)",
                "java.net.Inet6AddressImpl.lookupAllHostAddr(Inet6AddressImpl.java:103)",
                "java.net.InetAddress.getAllByName(InetAddress.java:1152)",
                "com.android.okhttp.Dns$1.lookup(Dns.java:41)",
                "com.android.okhttp.internal.http.RouteSelector.resetNextInetSocketAddress(RouteSelector.java:178)",
                "com.android.okhttp.internal.http.RouteSelector.next(RouteSelector.java:86)",
                "com.android.okhttp.internal.http.StreamAllocation.findConnection(StreamAllocation.java:176)",
                "com.android.okhttp.internal.http.StreamAllocation.newStream(StreamAllocation.java:97)",
                "com.android.okhttp.internal.http.HttpEngine.connect(HttpEngine.java:289)",
                "com.android.okhttp.internal.http.HttpEngine.sendRequest(HttpEngine.java:232)",
                "com.android.okhttp.internal.huc.HttpURLConnectionImpl.execute(HttpURLConnectionImpl.java:465)",
                "com.android.okhttp.internal.huc.HttpURLConnectionImpl.getResponse(HttpURLConnectionImpl.java:411)",
                "com.android.okhttp.internal.huc.HttpURLConnectionImpl.getInputStream(HttpURLConnectionImpl.java:248)",
                "com.android.okhttp.internal.huc.DelegatingHttpsURLConnection.getInputStream(DelegatingHttpsURLConnection.java:211)",
                "com.android.okhttp.internal.huc.HttpsURLConnectionImpl.getInputStream(HttpsURLConnectionImpl.java:30)",
            ),
            death_exception="android.os.NetworkOnMainThreadException",
        ),
    )
}


@dataclass(frozen=True)
class Effect:
    """What one call does. Durations are milliseconds of the calling thread's time.

    ``worker`` effects hand their work to the app's own background executor: the caller only
    pays ``duration_ms`` (microseconds), the work (``worker_ms``, ``violations``) happens on the
    app's ``pool-N-thread-1`` thread, which has no StrictMode policy.
    """

    duration_ms: float
    jitter_ms: float = 0.0
    violations: tuple[str, ...] = ()
    trigger: str | None = None  # source token whose line the app frame points at
    worker: bool = False
    worker_ms: float = 0.0


# The effect table: behaviour at run time, keyed by method name (docs/design.md §8).
EFFECTS: dict[str, Effect] = {
    "loadSettingsFromDisk": Effect(850.0, 12.0, ("DiskRead",), trigger="file.exists()"),
    "saveDraftSync": Effect(46.0, 6.0, ("DiskWrite",), trigger=".commit()"),
    "fetchGreetingBlocking": Effect(240.0, 18.0, ("Network",), trigger="connection.inputStream"),
    "computeLayoutHash": Effect(450.0, 8.0, trigger="hashUntil("),
    "decodeThumbnail": Effect(120.0, 4.0, trigger="hashUntil("),
    "formatTitle": Effect(0.2, 0.1),
    "loadAvatarAsync": Effect(
        0.4, 0.1, ("DiskRead",), trigger="file.exists()", worker=True, worker_ms=35.0
    ),
}
# A MainActivity method the table does not know (one a user added): fast and quiet.
DEFAULT_EFFECT = Effect(0.3, 0.1)


@dataclass(frozen=True)
class MethodBehaviour:
    name: str
    effect: Effect
    signature: str
    params: tuple[tuple[str, bool], ...]  # (name, has_default), in order
    line: int  # the line app frames point at
    start_line: int

    @property
    def app_frame(self) -> str:
        return f"{APP_PACKAGE}.{ACTIVITY_CLASS}.{self.name}(MainActivity.kt:{self.line})"

    @property
    def worker_frame(self) -> str:
        return f"{APP_PACKAGE}.{ACTIVITY_CLASS}.{self.name}$lambda$0(MainActivity.kt:{self.line})"

    def duration(self, rng: random.Random) -> float:
        """The call's duration with its jitter (uniform, never below 0.05 ms)."""
        jitter = rng.uniform(-self.effect.jitter_ms, self.effect.jitter_ms)
        return max(0.05, self.effect.duration_ms + jitter)


@dataclass(frozen=True)
class DemoApp:
    """The demo app as the simulated toolchain and device see it."""

    package: str
    activity: str  # fully qualified
    methods: dict[str, MethodBehaviour]
    all_members: frozenset[str]  # every member name declared in MainActivity (incl. private)
    private_members: frozenset[str]
    source_hash: str
    helpers: dict[str, frozenset[str]] = field(default_factory=dict)  # androidTest objects
    signatures: dict[str, str] = field(default_factory=dict)  # name → ``fun name(...): T``
    # what ``MainActivity.X`` may name: its companion object's members (empty: unknown)
    static_members: frozenset[str] = frozenset()

    @classmethod
    def from_project(cls, project_dir: Path) -> DemoApp:
        main_dir = project_dir / "app" / "src" / "main"
        if not main_dir.is_dir():
            raise DemoAppError(f"no app/src/main in {project_dir}")
        index = SourceCodeIndex(main_dir)
        records = [
            m for m in index.methods_of(f"{APP_PACKAGE}.{ACTIVITY_CLASS}") if m.kind == "method"
        ]
        if not records:
            raise DemoAppError(f"{APP_PACKAGE}.{ACTIVITY_CLASS} not found in {main_dir}")
        methods: dict[str, MethodBehaviour] = {}
        private: set[str] = set()
        digest = hashlib.sha256()
        for rec in sorted(records, key=lambda r: r.start_line):
            digest.update(rec.body.encode())
            words = rec.signature.split("fun ", 1)[0].split()
            if "private" in words or "protected" in words:
                private.add(rec.name)
                continue
            if "override" in words:
                continue
            effect = EFFECTS.get(rec.name, DEFAULT_EFFECT)
            methods[rec.name] = MethodBehaviour(
                name=rec.name,
                effect=effect,
                signature=rec.signature,
                params=_params(rec.signature),
                line=_trigger_line(rec, effect.trigger),
                start_line=rec.start_line,
            )
        helpers: dict[str, frozenset[str]] = {}
        test_dir = project_dir / "app" / "src" / "androidTest"
        if test_dir.is_dir():
            test_index = SourceCodeIndex(test_dir)
            for klass in test_index.classes:
                if klass.package == APP_PACKAGE and "." not in klass.name:
                    names = {m.name for m in test_index.methods_of(klass.qualified_name)}
                    helpers[klass.name] = frozenset(names | {"TAG"})
        signatures = {
            r.name: "fun " + r.signature.split("fun ", 1)[-1].replace("\n", " ")
            for r in records
        }
        return cls(
            package=APP_PACKAGE,
            signatures=signatures,
            activity=f"{APP_PACKAGE}.{ACTIVITY_CLASS}",
            methods=methods,
            all_members=frozenset({r.name for r in records}),
            private_members=frozenset(private),
            source_hash=digest.hexdigest()[:16],
            helpers=helpers,
            static_members=_companion_members(main_dir),
        )


def _companion_members(main_dir: Path) -> frozenset[str]:
    """The names declared in ``MainActivity``'s companion object (by the text of its source)."""
    for source in sorted(main_dir.rglob(f"{ACTIVITY_CLASS}.kt")):
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        start = text.find("companion object")
        brace = text.find("{", start) if start >= 0 else -1
        if brace < 0:
            continue
        depth, end = 0, len(text)
        for i in range(brace, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                end = i
                break
        body = text[brace + 1 : end]
        return frozenset(re.findall(r"\b(?:val|var|fun)\s+(?:<[^>]*>\s*)?([A-Za-z_]\w*)", body))
    return frozenset()


def _trigger_line(rec: MethodRecord, trigger: str | None) -> int:
    lines = rec.body.splitlines()
    if trigger:
        for offset, text in enumerate(lines):
            if trigger in text:
                return rec.start_line + offset
    # the first line of the body proper (after the signature line)
    return rec.start_line + (1 if len(lines) > 1 else 0)


def _params(signature: str) -> tuple[tuple[str, bool], ...]:
    """``fun f(a: Int, b: String = "x")`` → (("a", False), ("b", True)); lambdas types kept whole."""
    start = signature.find("(")
    if start < 0:
        return ()
    depth = 0
    chunks: list[str] = []
    current = ""
    for ch in signature[start + 1 :]:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            if depth == 0 and ch == ")":
                break
            depth -= 1
        if ch == "," and depth == 0:
            chunks.append(current)
            current = ""
            continue
        current += ch
    if current.strip():
        chunks.append(current)
    out = []
    for chunk in chunks:
        name = chunk.split(":", 1)[0].split()[-1] if ":" in chunk else chunk.strip()
        out.append((name, "=" in chunk.split(":", 1)[-1]))
    return tuple(out)


_cache: dict[Path, tuple[float, DemoApp]] = {}
_cache_lock = threading.Lock()


def demo_app(project_dir: Path | None = None) -> DemoApp:
    """The demo app of ``project_dir`` (default: the shipped template), cached by mtime."""
    if project_dir is None:
        from device_bridge.workspace_template import template_dir

        project_dir = template_dir()
    project_dir = project_dir.resolve()
    source = project_dir / "app" / "src" / "main" / "java" / "com" / "droidwire" / "demo"
    try:
        stamp = max(p.stat().st_mtime_ns for p in source.rglob("*.kt"))
    except (OSError, ValueError):
        stamp = -1
    with _cache_lock:
        hit = _cache.get(project_dir)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    app = DemoApp.from_project(project_dir)
    with _cache_lock:
        _cache[project_dir] = (stamp, app)
    return app


def strictmode_lines(kind: ViolationKind, duration_ms: int | None, frames: list[str]) -> str:
    """One violation as ``penaltyLog`` writes it (a multi-line message, tag ``StrictMode``).

    ``duration_ms`` is None for violations on a thread without a Looper, which StrictMode
    reports at once, without timing (AOSP ``handleViolationWithTimingAttempt``).
    """
    if duration_ms is None:
        head = f"StrictMode policy violation: {kind.exception}"
    else:
        head = f"StrictMode policy violation; ~duration={duration_ms} ms: {kind.exception}"
    return "\n".join([head, *(f"\tat {f}" for f in (*kind.frames, *frames))])
