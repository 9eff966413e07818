"""``analysis_lines_per_s``: logcat analysis throughput against ``grep -c StrictMode``.

Generates a threadtime log (1,000,000 lines; 100,000 when quick) with the mix a test run
produces — chatty system lines, StrictMode violations with stacks, DroidUnblocker readings,
Displayed lines, an ANR block and a crash — into a temporary file, then times
``analyze(read(file))`` (the file's bytes; the analyzer's patterns compiled beforehand, as in a
running controller) and, in the same run on the same file, ``grep -c StrictMode``.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import figure
from bench.stack import noted
from controller.analysis import analyze

__all__ = ["generate", "run"]

_CHATTER = [
    ("I", "ActivityManager", "Start proc {pid}:com.android.vending/u0a{n} for service"),
    ("D", "ConnectivityService", "NetworkAgentInfo [WIFI () - {n}] validation passed"),
    ("W", "Looper", "Slow dispatch took {n}ms main h=android.app.ActivityThread$H"),
    ("I", "chatty", "uid=1000(system) Binder:{pid}_3 identical {n} lines"),
    ("D", "WifiNative-HAL", "HAL event thread stopped successfully"),
    ("V", "org.demo.app.Settings", "load: key{n}=value"),
    ("E", "libEGL", "validate_display:255 error 3008 (EGL_BAD_DISPLAY)"),
    ("I", "ICU", "No timezone override file found: /data/misc/zoneinfo/tzdata"),
]


def _prefix(i: int, pid: int, tid: int, level: str, tag: str) -> str:
    ms = i % 1000
    s = (i // 1000) % 60
    return f"11-30 10:{(i // 60000) % 60:02d}:{s:02d}.{ms:03d} {pid:5d} {tid:5d} {level} {tag:<8}: "


def generate(path: Path, lines: int, seed: int = 7) -> int:
    """Write a synthetic log of exactly ``lines`` lines; returns the count written."""
    rnd = random.Random(seed)
    written = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write("--------- beginning of main\n")
        written += 1
        fh.write(_prefix(0, 1300, 1320, "I", "ActivityManager")
                 + "Start proc 4321:org.demo.app/u0a77 for activity {org.demo.app/.Main}\n")
        written += 1
        i = 2
        while written < lines:
            r = rnd.random()
            if r < 0.004:
                block = [_prefix(i, 4321, 4321, "D", "StrictMode")
                         + "StrictMode policy violation; ~duration="
                         + f"{rnd.randint(2, 900)} ms: android.os.strictmode.DiskReadViolation"]
                block += [_prefix(i, 4321, 4321, "D", "StrictMode") + f"\tat {f}" for f in (
                    "android.os.StrictMode$AndroidBlockGuardPolicy.onReadFromDisk(StrictMode.java:1596)",
                    "libcore.io.BlockGuardOs.open(BlockGuardOs.java:249)",
                    "java.io.FileInputStream.<init>(FileInputStream.java:160)",
                    "org.demo.app.Store.load(Store.kt:41)",
                    "org.demo.app.Main.onCreate(Main.kt:18)",
                    "android.app.Activity.performCreate(Activity.java:8000)")]
            elif r < 0.006:
                block = [_prefix(i, 4321, 4321, "I", "DroidUnblocker")
                         + f"elapsed={rnd.randint(0, 500)}ms"]
            elif r < 0.007:
                block = [_prefix(i, 1300, 1320, "I", "ActivityTaskManager")
                         + f"Displayed org.demo.app/.Main: +{rnd.randint(0, 3)}s{rnd.randint(0, 999)}ms"]
            elif r < 0.00705:
                block = [_prefix(i, 1300, 1320, "E", "ActivityManager") + m for m in (
                    "ANR in com.other.app (com.other.app/.Main)", "PID: 999",
                    "Reason: Input dispatching timed out", "Load: 1.0 / 1.0 / 1.0")]
            else:
                level, tag, msg = _CHATTER[rnd.randrange(len(_CHATTER))]
                pid = rnd.choice((1300, 2100, 4321, 999))
                block = [_prefix(i, pid, pid + rnd.randrange(40), level, tag)
                         + msg.format(pid=pid, n=rnd.randrange(100000))]
            for line in block[: lines - written]:
                fh.write(line + "\n")
                written += 1
            i += 1
    return written


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run(quick: bool) -> list[dict[str, Any]]:
    lines = 100_000 if quick else 1_000_000
    grep = shutil.which("grep")
    with tempfile.TemporaryDirectory(prefix="droidwire-bench-") as tmp:
        path = Path(tmp) / "logcat.txt"
        n = generate(path, lines)

        def ours() -> None:
            # The file's bytes, as the executor has a pulled log: decoded as lines.decode does.
            analyze(path.read_bytes(), package="org.demo.app")

        # A long-running controller compiles the analyzer's patterns (the pre-filter's
        # Hyperscan database and RE2 program) once: do that before the clock starts.
        analyze(b"11-30 10:00:00.000  1300  1320 I ActivityManager: warm-up\n")

        def baseline() -> None:
            if grep is None:  # no grep: the same count in Python, still a same-run baseline
                path.read_text(encoding="utf-8").count("StrictMode")
                return
            # Capture the count: GNU grep stops at the first match when stdout is /dev/null.
            subprocess.run([grep, "-c", "StrictMode", str(path)], check=False,
                           capture_output=True)

        t_ours = _best(ours, 1 if not quick else 2)
        t_grep = _best(baseline, 3)
    return [noted(figure("analysis_lines_per_s", n / t_ours, "lines/s", n / t_grep),
                  f"{n} lines, analyze(read(file)) against grep -c StrictMode", n=n)]
