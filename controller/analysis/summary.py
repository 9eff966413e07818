"""L3 issues: what the evidence means, as structured items with a level, title and suggestion.

Built from the app's own evidence: StrictMode violations grouped by kind, "main thread blocked
N ms in X", repeated ANRs in one component, crash loops (one process crashing more than once),
single ANRs and crashes; other processes' evidence is one ``info`` item.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from controller.analysis.models import (
    Anr,
    Crash,
    Death,
    Displayed,
    Issue,
    TestTiming,
    Thresholds,
    Timing,
    Violation,
)

__all__ = ["SLOW_LAUNCH_MS", "SUGGESTIONS", "build_issues"]

SLOW_LAUNCH_MS = 5000   # Android vitals calls a cold start of 5 s or more excessive

SUGGESTIONS: dict[str, str] = {
    "DiskRead": "Move the disk read off the main thread (Dispatchers.IO, an executor, or "
                "preload asynchronously); SharedPreferences and databases count too.",
    "DiskWrite": "Move the disk write off the main thread (apply() instead of commit(), "
                 "Dispatchers.IO, WorkManager for deferrable work).",
    "Network": "Never touch the network on the main thread: use a suspend call on "
               "Dispatchers.IO or an asynchronous client callback.",
    "Custom": "A slow call flagged with StrictMode.noteSlowCall(): run it in the background.",
    "ResourceMismatch": "Request the resource with the type it was declared as.",
    "UnbufferedIo": "Wrap the stream in a BufferedInputStream/BufferedOutputStream.",
    "LeakedClosable": "Close the resource on every path (use {} in Kotlin, try-with-resources "
                      "in Java); the allocation site is in the stack under 'Caused by'.",
    "SqliteObjectLeaked": "Close cursors and databases when done (use {} / try-with-resources).",
    "UntaggedSocket": "Tag the socket with TrafficStats.setThreadStatsTag() before using it.",
    "NonSdkApiUsed": "Replace the hidden (non-SDK) API with a public one; it may be blocked on "
                     "newer Android releases.",
    "IntentReceiverLeaked": "Unregister the receiver in the matching lifecycle callback.",
    "ServiceConnectionLeaked": "Unbind the service in the matching lifecycle callback.",
    "InstanceCount": "Too many live instances of a class: look for a leaked Activity or listener.",
    "ContentUriWithoutPermission": "Grant URI permissions (FLAG_GRANT_READ_URI_PERMISSION) "
                                   "when sharing a content:// URI.",
    "CleartextNetwork": "Use HTTPS, or declare the host in the network security config.",
    "CredentialProtectedWhileLocked": "Do not read credential-protected storage before unlock.",
    "ImplicitDirectBoot": "Declare direct-boot awareness explicitly on the component.",
    "FileUriExposed": "Share files with FileProvider content:// URIs, not file:// URIs.",
    "UnsafeIntentLaunch": "Validate intents taken from extras before launching them.",
    "IncorrectContextUse": "Use a visual (Activity) context for UI work.",
}
_MAIN_THREAD = frozenset({"DiskRead", "DiskWrite", "Network", "Custom", "ResourceMismatch",
                          "UnbufferedIo"})


def _where(frame: str | None) -> str:
    return frame if frame else "platform code"


def build_issues(
    *,
    violations: list[Violation],
    anrs: list[Anr],
    crashes: list[Crash],
    timings: list[Timing],
    tests: list[TestTiming],
    blocking_time_ms: int,
    thresholds: Thresholds,
    other_violations: int = 0,
    other_anrs: int = 0,
    other_crashes: int = 0,
    package: str | None = None,
    damaged_lines: int = 0,
    displayed: list[Displayed] | None = None,
    deaths: list[Death] | None = None,
) -> list[Issue]:
    issues: list[Issue] = []

    # Main thread blocked: the DroidUnblocker reading first, then StrictMode's own duration.
    if blocking_time_ms > thresholds.noise_floor_ms:
        worst = max(timings, key=lambda t: t.elapsed_ms) if timings else None
        where = f" in {worst.test}" if worst and worst.test else ""
        over = blocking_time_ms > thresholds.blocking_ms
        issues.append(Issue(
            "error" if over else "warning",
            f"Main thread blocked {blocking_time_ms} ms{where}"
            + ("" if over else f" (below the {thresholds.blocking_ms} ms threshold)"),
            "Find the blocking call (the StrictMode stacks point at it) and move it off the "
            "main thread; keep main-thread work under one frame (16 ms).",
            "main_thread_blocked"))
    timed = [v for v in violations if v.duration_ms is not None]
    if timed:
        longest = max(timed, key=lambda v: v.duration_ms or 0)
        if (longest.duration_ms or 0) > thresholds.blocking_ms:
            issues.append(Issue(
                "error", f"Main thread blocked {longest.duration_ms} ms in "
                         f"{_where(longest.app_frame)} ({longest.kind})",
                SUGGESTIONS.get(longest.kind, "Move the blocking call off the main thread."),
                "main_thread_blocked"))

    by_kind: dict[str, list[Violation]] = defaultdict(list)
    for v in violations:
        by_kind[v.kind].append(v)
    for kind, items in by_kind.items():
        frames = Counter(v.app_frame for v in items if v.app_frame)
        top = frames.most_common(1)[0][0] if frames else None
        level = "error" if kind in _MAIN_THREAD else "warning"
        times = f" ×{len(items)}" if len(items) > 1 else ""
        issues.append(Issue(level, f"StrictMode {kind} violation{times} in {_where(top)}",
                            SUGGESTIONS.get(kind, "See the StrictMode stack for the call site."),
                            "strict_mode", len(items)))

    by_target: dict[str, list[Anr]] = defaultdict(list)
    for a in anrs:
        by_target[a.component or a.package or "unknown process"].append(a)
    for target, group in by_target.items():
        reason = next((a.reason for a in group if a.reason), None)
        if len(group) > 1:
            title = f"Repeated ANR in {target} ({len(group)} times)"
        else:
            title = f"ANR in {target}" + (f": {reason}" if reason else "")
        issues.append(Issue("error", title,
                            "The main thread did not respond for seconds: look for blocking "
                            "I/O, locks or long loops in the component's callbacks.",
                            "anr", len(group)))

    by_process: dict[str, list[Crash]] = defaultdict(list)
    for c in crashes:
        by_process[c.process or (str(c.pid) if c.pid is not None else "unknown process")].append(c)
    for proc, crashed in by_process.items():
        first = crashed[0]
        at = f" at {first.app_frame}" if first.app_frame else ""
        if len(crashed) > 1:
            title = f"Crash loop: {proc} crashed {len(crashed)} times ({first.exception}{at})"
        else:
            title = f"Crash in {proc}: {first.exception}{at}"
        root = first.cause or (f"{first.exception}: {first.message}" if first.message
                               else first.exception)
        issues.append(Issue("error", title, f"Fix the root cause ({root[:200]}).", "crash",
                            len(crashed)))

    for d in displayed or []:
        if d.ms >= SLOW_LAUNCH_MS and (package is None or d.component.startswith(package + "/")):
            issues.append(Issue("warning", f"Slow launch: {d.component} took {d.ms} ms",
                                "Defer work out of Application/Activity onCreate; profile the "
                                "startup with a baseline profile or Perfetto.", "slow_launch"))
    died: dict[str, list[Death]] = defaultdict(list)
    for death in deaths or []:
        died[death.process or str(death.pid)].append(death)
    for proc, ends in died.items():
        reasons = ", ".join(dict.fromkeys(x.reason for x in ends))
        issues.append(Issue("warning", f"Process {proc} died {len(ends)} time(s): {reasons}",
                            "A process that dies mid-test loses its evidence: check the crash "
                            "or the kill reason.", "process_death", len(ends)))

    failed = [t for t in tests if t.status in ("failed", "error")]
    if failed:
        issues.append(Issue("warning", f"{len(failed)} test(s) failed or did not finish: "
                            + ", ".join(t.id for t in failed[:5]),
                            "Read the test's stack in the instrumentation output.", "tests",
                            len(failed)))

    others = other_violations + other_anrs + other_crashes
    if others and package:
        issues.append(Issue("info", f"Ignored evidence from other processes (not {package}): "
                            f"{other_violations} violation(s), {other_anrs} ANR(s), "
                            f"{other_crashes} crash(es)",
                            "Only the app under test moves the verdict.", "other_processes",
                            others))
    if damaged_lines:
        issues.append(Issue("info", f"{damaged_lines} damaged or truncated line(s) skipped",
                            "The log was cut or wrapped; evidence near those lines may be "
                            "incomplete.", "damaged_lines", damaged_lines))
    return issues
