"""What a phone prints around an instrumentation run: ``am instrument -w -r``'s status
records and final result, its refusal when the target is missing, the ``-e class`` filter, and
the stack frames above a test's code on each kind of thread (AndroidJUnitRunner, the main
looper, pools and coroutines).

Text only: :class:`~device_bridge.sim.player.SimInstrumentationPlayer` decides what happens in
a run and writes it in these shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from device_bridge.sim.apk import SimTest

__all__ = [
    "caller_frames",
    "failed_to_start",
    "failure_stream",
    "run_result",
    "select_tests",
    "status_bundle",
]

MAIN_LOOP_FRAMES = (
    "android.os.Handler.handleCallback(Handler.java:958)",
    "android.os.Handler.dispatchMessage(Handler.java:99)",
    "android.os.Looper.loopOnce(Looper.java:205)",
    "android.os.Looper.loop(Looper.java:294)",
    "android.app.ActivityThread.main(ActivityThread.java:8177)",
    "java.lang.reflect.Method.invoke(Native Method)",
    "com.android.internal.os.RuntimeInit$MethodAndArgsCaller.run(RuntimeInit.java:552)",
    "com.android.internal.os.ZygoteInit.main(ZygoteInit.java:971)",
)
VIA_FRAMES: dict[str, tuple[str, ...]] = {
    "onActivity": (
        "androidx.test.core.app.ActivityScenario.lambda$onActivity$2$androidx-test-core-app-ActivityScenario(ActivityScenario.java:792)",
        "androidx.test.core.app.ActivityScenario$$ExternalSyntheticLambda2.run(D8$$SyntheticClass:0)",
        "android.app.Instrumentation$SyncRunnable.run(Instrumentation.java:2583)",
    ),
    "runOnMainSync": ("android.app.Instrumentation$SyncRunnable.run(Instrumentation.java:2583)",),
    "UiThreadTest": (
        "androidx.test.internal.runner.junit4.statement.UiThreadStatement$1.run(UiThreadStatement.java:44)",
        "android.app.Instrumentation$SyncRunnable.run(Instrumentation.java:2583)",
    ),
    "coroutine": (
        "kotlin.coroutines.jvm.internal.BaseContinuationImpl.resumeWith(ContinuationImpl.kt:33)",
        "kotlinx.coroutines.DispatchedTask.run(DispatchedTask.kt:108)",
    ),
}
TEST_THREAD_FRAMES = (
    "java.lang.reflect.Method.invoke(Native Method)",
    "org.junit.runners.model.FrameworkMethod$1.runReflectiveCall(FrameworkMethod.java:59)",
    "org.junit.internal.runners.model.ReflectiveCallable.run(ReflectiveCallable.java:12)",
    "org.junit.runners.model.FrameworkMethod.invokeExplosively(FrameworkMethod.java:56)",
    "org.junit.internal.runners.statements.InvokeMethod.evaluate(InvokeMethod.java:17)",
    "org.junit.runners.ParentRunner$3.evaluate(ParentRunner.java:306)",
    "org.junit.runners.BlockJUnit4ClassRunner$1.evaluate(BlockJUnit4ClassRunner.java:100)",
    "org.junit.runners.ParentRunner.runLeaf(ParentRunner.java:366)",
    "org.junit.runners.BlockJUnit4ClassRunner.runChild(BlockJUnit4ClassRunner.java:103)",
    "org.junit.runners.ParentRunner.run(ParentRunner.java:413)",
    "androidx.test.ext.junit.runners.AndroidJUnit4.run(AndroidJUnit4.java:162)",
    "org.junit.runner.JUnitCore.run(JUnitCore.java:115)",
    "androidx.test.internal.runner.TestExecutor.execute(TestExecutor.java:68)",
    "androidx.test.runner.AndroidJUnitRunner.onStart(AndroidJUnitRunner.java:463)",
    "android.app.Instrumentation$InstrumentationThread.run(Instrumentation.java:2402)",
)
BACKGROUND_FRAMES = {
    "pool": (
        "java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1145)",
        "java.util.concurrent.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:644)",
        "java.lang.Thread.run(Thread.java:1012)",
    ),
    "DefaultDispatcher": (
        "kotlin.coroutines.jvm.internal.BaseContinuationImpl.resumeWith(ContinuationImpl.kt:33)",
        "kotlinx.coroutines.DispatchedTask.run(DispatchedTask.kt:108)",
        "kotlinx.coroutines.scheduling.CoroutineScheduler$Worker.run(CoroutineScheduler.kt:793)",
    ),
    "Thread": ("java.lang.Thread.run(Thread.java:1012)",),
}


def caller_frames(test: SimTest, step: dict[str, Any]) -> list[str]:
    """The stack above a step of ``test``: its own frame, then what runs it on its thread."""
    cls = test.class_name
    file = test.source_file or f"{cls.rsplit('.', 1)[-1]}.kt"
    line = step.get("line", 0)
    frame = str(step.get("frame") or test.method)
    own = f"{cls}.{frame}({file}:{line})"
    thread = step.get("thread", "test")
    if thread == "main":
        return [own, *VIA_FRAMES.get(str(step.get("via")), VIA_FRAMES["runOnMainSync"]),
                *MAIN_LOOP_FRAMES]
    if thread == "background":
        name = str(step.get("thread_name") or "Thread")
        kind = next((k for k in BACKGROUND_FRAMES if name.startswith(k)), "Thread")
        return [own, *BACKGROUND_FRAMES[kind]]
    return [own, *TEST_THREAD_FRAMES]


def status_bundle(values: dict[str, str], code: int) -> Iterator[str]:
    # AndroidJUnitRunner on current releases prints the keys sorted
    for key in sorted(values):
        yield from f"INSTRUMENTATION_STATUS: {key}={values[key]}".split("\n")
    yield f"INSTRUMENTATION_STATUS_CODE: {code}"


def failure_stream(test: SimTest, stack: str) -> str:
    return f"\nError in {test.method}({test.class_name}):\n{stack}\n"


def run_result(elapsed_s: float, ran: int, failures: list[tuple[SimTest, str]]) -> Iterator[str]:
    lines = ["", f"Time: {elapsed_s:.3f}"]
    if failures:
        lines.append(f"There {'was' if len(failures) == 1 else 'were'} {len(failures)} "
                     f"failure{'s' if len(failures) != 1 else ''}:")
        for i, (test, stack) in enumerate(failures, start=1):
            lines.append(f"{i}) {test.method}({test.class_name})")
            lines.extend(stack.split("\n"))
        lines += ["", "FAILURES!!!", f"Tests run: {ran},  Failures: {len(failures)}", "", ""]
    else:
        lines += ["", f"OK ({ran} test{'s' if ran != 1 else ''})", "", ""]
    yield "INSTRUMENTATION_RESULT: stream="
    yield from lines
    yield "INSTRUMENTATION_CODE: -1"


def failed_to_start(instrumentation: str, target: str | None) -> Iterator[str]:
    yield (f"INSTRUMENTATION_STATUS: Error=Unable to find instrumentation target package: "
           f"{target}")
    yield "INSTRUMENTATION_STATUS: id=ActivityManagerService"
    yield "INSTRUMENTATION_STATUS_CODE: -1"
    yield f"android.util.AndroidException: INSTRUMENTATION_FAILED: {instrumentation}"
    yield "\tat com.android.commands.am.Instrument.run(Instrument.java:579)"
    yield "\tat com.android.commands.am.Am.runInstrument(Am.java:201)"
    yield "\tat com.android.commands.am.Am.onRun(Am.java:80)"
    yield "\tat com.android.internal.os.BaseCommand.run(BaseCommand.java:60)"
    yield "\tat com.android.commands.am.Am.main(Am.java:50)"


def select_tests(tests: list[SimTest], class_filter: str | None) -> list[SimTest]:
    """``-e class a.B`` / ``a.B#m`` / a comma-separated list of either."""
    if not class_filter:
        return list(tests)
    wanted = [w.strip() for w in class_filter.split(",") if w.strip()]
    out = []
    for test in tests:
        for w in wanted:
            cls, _, method = w.partition("#")
            if test.class_name == cls and (not method or method == test.method):
                out.append(test)
                break
    return out
