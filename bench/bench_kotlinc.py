"""``fix_round_s`` and ``kotlinc_check_rss_mb``: a fix round on the real Kotlin compiler.

* ``fix_round_s``: one fix round as the build bridge runs it — the warm compiler checks a
  generated test that lacks an import (:class:`device_bridge.kotlinc.KotlincChecker`), the
  fixer repairs it from kotlinc's diagnostics (rules, no LLM) — median over the rounds
  (10 full, 3 quick). Baseline: a cold ``kotlinc`` (the distribution's own launcher, a fresh
  JVM) compiling the same file against the same class path, median of 3 (1 quick). Target:
  ratio ≤ 0.2.
* ``kotlinc_check_rss_mb``: the warm compiler JVM's peak resident memory (``VmHWM``) after
  the rounds; baseline: the peak RSS of the cold ``kotlinc`` runs.

Needs ``make setup`` (the pinned compiler) and a JDK; without them it says so and gives no
figures.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import figure, median
from bench.stack import noted

__all__ = ["run"]


def _draft() -> str:
    from droidwire.demo import DEMO_TESTS

    return DEMO_TESTS[1].code  # the demo's draft that forgot `import android.util.Log`


def _vm_hwm_mb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(quick: bool, *, rounds: int | None = None, colds: int | None = None
        ) -> list[dict[str, Any]]:
    from device_bridge.kotlinc import KotlincChecker, SetupError, ensure_layout
    from device_bridge.kotlinc.install import base_args
    from device_bridge.workspace_template import template_dir
    from fixer import fix_detailed
    from fixer.errors import parse_errors

    try:
        layout = ensure_layout(fetch=False)
    except SetupError as exc:
        print(f"bench_kotlinc: skipped, kotlinc is not set up: {exc}", file=sys.stderr)
        return []
    rounds = rounds or (3 if quick else 10)
    colds = colds or (1 if quick else 3)
    template = Path(template_dir())
    checker = KotlincChecker(layout)
    with tempfile.TemporaryDirectory(prefix="droidwire-bench-kotlinc-") as tmp:
        root = Path(tmp)
        project = root / "p"
        shutil.copytree(template, project, ignore=shutil.ignore_patterns("stubs"))
        test = project / "app/src/androidTest/java/com/droidwire/demo/test/LayoutHashTest.kt"
        test.parent.mkdir(parents=True, exist_ok=True)
        draft = _draft()
        try:
            apps = checker.app_classes(template)  # once, like a bridge's first compile
            # the baseline first, so RUSAGE_CHILDREN holds only the cold compilers' peak
            test.write_text(draft)
            kotlinc = layout.compiler_lib.parent / "bin" / "kotlinc"
            classpath = os.pathsep.join(map(str, [*layout.test_classpath, apps]))
            env = dict(os.environ, JAVA_OPTS="-Xmx768m -Dorg.jetbrains.kotlin."
                       "cliMessageRenderer=GradleStyle",
                       JAVA_HOME=str(layout.java.resolve().parent.parent))
            cold: list[float] = []
            for _ in range(colds):
                started = time.perf_counter()
                proc = subprocess.run(
                    ["bash", str(kotlinc), *base_args(), "-cp", classpath,
                     "-d", str(root / "cold"), str(test)],
                    env=env, capture_output=True, text=True, timeout=600, check=False,
                )
                cold.append(time.perf_counter() - started)
                if "Unresolved reference 'Log'" not in proc.stdout + proc.stderr:
                    raise RuntimeError(f"cold kotlinc did not report the error: {proc.stderr}")
            cold_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            for _ in range(2):  # warm-up: the JVM starts, the JIT compiles the compiler
                checker.check(project, test, app_dir=template)
            per_round: list[float] = []
            for _ in range(rounds):
                test.write_text(draft)
                started = time.perf_counter()
                result = checker.check(project, test, app_dir=template)
                fixed = fix_detailed(draft, result.output, None, None, test_path=str(test))
                per_round.append(time.perf_counter() - started)
                if result.ok or "import android.util.Log" not in fixed.code:
                    raise RuntimeError(f"the round did not fix the draft: {result.output}")
                if parse_errors(result.output).failure != "compile":
                    raise RuntimeError("kotlinc's output was not read as a compile failure")
            warm_rss_mb = _vm_hwm_mb(checker.compiler.pid())
        finally:
            checker.close()
    return [
        noted(figure("fix_round_s", median(per_round), "s", median(cold)),
              f"{rounds} fix rounds (warm kotlinc check of the demo's draft missing an import +"
              f" the rules fix) vs a cold kotlinc of the same file, {colds} run(s); target ratio"
              f" <= 0.2; rounds {[round(x, 3) for x in per_round]} s, cold"
              f" {[round(x, 2) for x in cold]} s"),
        noted(figure("kotlinc_check_rss_mb", warm_rss_mb, "MB", cold_rss_mb),
              "peak RSS (VmHWM) of the warm compiler JVM after the rounds vs the peak RSS of"
              " the cold kotlinc runs"),
    ]
