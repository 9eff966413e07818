"""A real Kotlin compiler for the build bridge: the ``kotlinc`` check (docs: sandbox.md).

* :mod:`.install` — fetch the pinned compiler (npm ``kotlin-compiler``) and build the class
  path into the cache (``make setup``: ``python -m device_bridge.kotlinc``);
* :mod:`.service` — :class:`WarmCompiler`, one long-lived JVM compiling in-process;
* :mod:`.check` — :class:`KotlincChecker`, a generated test type-checked against the app's
  classes and the test libraries, with real GradleStyle diagnostics.
"""

from .check import API_LEVEL, CheckResult, KotlincChecker
from .install import KOTLIN_VERSION, Layout, SetupError, ensure_layout
from .service import CompilerBusy, CompilerError, CompileRun, WarmCompiler

__all__ = [
    "API_LEVEL",
    "KOTLIN_VERSION",
    "CheckResult",
    "CompileRun",
    "CompilerBusy",
    "CompilerError",
    "KotlincChecker",
    "Layout",
    "SetupError",
    "WarmCompiler",
    "ensure_layout",
]
