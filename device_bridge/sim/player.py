"""Plays a simulated test package back as ``am instrument -w -r`` output and logcat lines.

The simulated device calls :meth:`SimInstrumentationPlayer.play` on ``am instrument`` and
streams the lines it yields. While yielding, the player writes the logcat a real device would
show through :class:`~device_bridge.sim.apk.DeviceHooks` and moves the device clock by the
simulated durations (``device.advance``), never by sleeping.

What a run looks like (AOSP ``StrictMode``, AndroidJUnitRunner):

* the target app's process starts (``device.start_process``); the runner logs
  ``TestRunner: run started`` / ``started: m(cls)`` / ``finished: m(cls)``;
* a StrictMode violation is logged only when the *calling thread's* policy detects it with
  ``penaltyLog()``: a policy set on the test thread does not cover code run inside
  ``onActivity {}`` (the main thread), exactly as on a phone. Violations on the main thread are
  logged when its current message ends, with ``~duration=``; on threads without a Looper at
  once, without it. The same violation is logged at most once a second (StrictMode's
  ``MIN_LOG_INTERVAL_MS``). The main thread's default policy has ``penaltyDeathOnNetwork``:
  network I/O there without a custom policy throws ``NetworkOnMainThreadException``;
* ``DroidUnblocker: elapsed=Xms`` (and any other ``Log`` call of the test) with the simulated
  elapsed time; durations carry a small jitter, seeded per test, so runs are reproducible;
* one main-thread message blocked past 5 s is an ANR: ``ActivityManager: ANR in …``, the
  process is killed, the started test never finishes, and the output ends with
  ``INSTRUMENTATION_RESULT: shortMsg=Process crashed.``;
* an exception escaping on the main thread or a background thread crashes the process
  (``FATAL EXCEPTION: main``), the test is reported as ``Process crashed while executing …``
  and the remaining tests do not run; one on the test thread is an ordinary JUnit failure.

The text shapes — ``am instrument -r`` status records and result, the stack frames above a
test's code on each thread — are :mod:`device_bridge.sim.instrument_output`'s.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from device_bridge.sim.apk import DeviceHooks, InstrumentationPlayer, SimPackage, SimTest
from device_bridge.sim.behaviour import (
    ACTIVITY_CLASS,
    ANR_THRESHOLD_MS,
    APP_PACKAGE,
    DEFAULT_EFFECT,
    VIOLATIONS,
    DemoApp,
    DemoAppError,
    MethodBehaviour,
    demo_app,
    strictmode_lines,
)
from device_bridge.sim.instrument_output import (
    caller_frames,
    failed_to_start,
    failure_stream,
    run_result,
    select_tests,
    status_bundle,
)

__all__ = ["SimInstrumentationPlayer", "default_player"]

log = logging.getLogger("droidwire.bridge.sim.player")

DEFAULT_SYSTEM_PID = 1473  # used when the device does not say (``device.system_pid``)
_INSTR_TID_OFFSET = 26
_BACKGROUND_TID_OFFSET = 40
_STRICTMODE_MIN_LOG_INTERVAL_MS = 1_000.0
# The main thread's policy in an app process (ActivityThread.handleBindApplication, targetSdk>=11)
_MAIN_DEFAULT_POLICY: dict[str, Any] = {
    "detect": ["Network"], "penalty_log": False, "death_on_network": True,
}



class _Crash(Exception):
    """The app process died (uncaught exception or ANR kill) while running a test."""

    def __init__(self, exception: str, message: str | None, stack: str, *, anr: bool = False):
        super().__init__(exception)
        self.exception = exception
        self.message = message
        self.stack = stack
        self.anr = anr


class _Failure(Exception):
    """A JUnit failure on the test thread: the test fails, the run goes on."""

    def __init__(self, stack: str):
        super().__init__(stack.splitlines()[0] if stack else "failure")
        self.stack = stack


@dataclass
class _Dispatch:
    id: int
    started: float
    blocked: float = 0.0
    pending: list[tuple[str, float, list[str]]] = field(default_factory=list)


class _Run:
    """One ``am instrument`` invocation's state."""

    def __init__(self, test_pkg: SimPackage, device: DeviceHooks, app: DemoApp):
        self.test_pkg = test_pkg
        self.device = device
        self.app = app
        self.target = test_pkg.target_package or app.package
        self.system_pid = int(getattr(device, "system_pid", DEFAULT_SYSTEM_PID))
        self.now = 0.0
        self.pid = 0
        self.policies: dict[str, dict[str, Any] | None] = {}
        self.rule_threads: set[str] = set()
        self.background_tids: dict[str, int] = {}
        self.last_logged: dict[str, float] = {}
        self.launched = False

    # --- time and logging
    def advance(self, ms: float) -> None:
        if ms > 0:
            self.now += ms
            self.device.advance(ms)

    def tid(self, step: dict[str, Any]) -> int:
        thread = step.get("thread", "test")
        if thread == "main":
            return self.pid
        if thread == "background":
            name = str(step.get("thread_name") or "Thread-1")
            if name not in self.background_tids:
                self.background_tids[name] = (
                    self.pid + _BACKGROUND_TID_OFFSET + len(self.background_tids)
                )
            return self.background_tids[name]
        return self.pid + _INSTR_TID_OFFSET

    def log(self, priority: str, tag: str, message: str, tid: int | None = None) -> None:
        self.device.log(priority, tag, message, pid=self.pid, tid=self.pid if tid is None else tid)

    def runner_log(self, priority: str, message: str) -> None:
        self.log(priority, "TestRunner", message, self.pid + _INSTR_TID_OFFSET)

    def system_log(self, priority: str, tag: str, message: str) -> None:
        self.device.log(priority, tag, message, pid=self.system_pid, tid=self.system_pid + 33)


class SimInstrumentationPlayer:
    """The default :class:`~device_bridge.sim.apk.InstrumentationPlayer` of the simulated device."""

    def __init__(self, app: DemoApp | None = None):
        self._app = app

    @property
    def app(self) -> DemoApp:
        if self._app is None:
            try:
                self._app = demo_app()
            except (OSError, DemoAppError) as exc:  # TemplateNotFound is an OSError
                # without the model every call is fast and quiet; the run itself still works
                log.warning("demo app model unavailable, calls play as no-ops: %s", exc)
                self._app = DemoApp(
                    package=APP_PACKAGE, activity=f"{APP_PACKAGE}.{ACTIVITY_CLASS}",
                    methods={}, all_members=frozenset(), private_members=frozenset(),
                    source_hash="",
                )
        return self._app

    def play(
        self,
        test_pkg: SimPackage,
        app_pkg: SimPackage | None,
        *,
        class_filter: str | None,
        device: DeviceHooks,
    ) -> Iterator[str]:
        instrumentation = f"{test_pkg.package}/{test_pkg.runner}"
        target = test_pkg.target_package
        if test_pkg.kind != "test" or target is None or app_pkg is None \
                or app_pkg.package != target:
            yield from failed_to_start(instrumentation, target)
            return
        tests = select_tests(test_pkg.tests, class_filter)
        run = _Run(test_pkg, device, self.app)
        run.pid = device.start_process(target)
        run.policies = {"main": dict(_MAIN_DEFAULT_POLICY)}
        run.runner_log("I", f"run started: {len(tests)} test{'s' if len(tests) != 1 else ''}")
        failures: list[tuple[SimTest, str]] = []
        ignored = 0
        previous_class = None
        started_at = run.now
        for index, test in enumerate(tests, start=1):
            stream = f"\n{test.class_name}:" if test.class_name != previous_class else ""
            previous_class = test.class_name
            base = {
                "class": test.class_name, "current": str(index), "id": "AndroidJUnitRunner",
                "numtests": str(len(tests)), "test": test.method,
            }
            yield from status_bundle({**base, "stream": stream}, 1)
            run.runner_log("I", f"started: {test.method}({test.class_name})")
            if test.ignored:
                ignored += 1
                run.runner_log("I", f"ignored: {test.method}({test.class_name})")
                yield from status_bundle({**base, "stream": ""}, -3)
                continue
            run.advance(3.0)
            try:
                _play_test(run, test)
            except _Failure as failure:
                failures.append((test, failure.stack))
                run.runner_log("E", f"failed: {test.method}({test.class_name})")
                run.runner_log("E", "----- begin exception -----")
                run.runner_log("E", failure.stack)
                run.runner_log("E", "----- end exception -----")
                run.runner_log("I", f"finished: {test.method}({test.class_name})")
                stream = failure_stream(test, failure.stack)
                yield from status_bundle({**base, "stack": failure.stack, "stream": stream}, -2)
                continue
            except _Crash as crash:
                if not crash.anr:
                    stream = (f"\nProcess crashed while executing {test.method}"
                              f"({test.class_name}):\n{crash.stack}")
                    yield from status_bundle({**base, "stack": crash.stack, "stream": stream}, -2)
                run.device.kill_process(target, reason="anr" if crash.anr else "crash")
                yield "INSTRUMENTATION_RESULT: shortMsg=Process crashed."
                yield "INSTRUMENTATION_CODE: 0"
                return
            run.runner_log("I", f"finished: {test.method}({test.class_name})")
            yield from status_bundle({**base, "stream": "."}, 0)
        ran = len(tests) - ignored
        run.runner_log("I", f"run finished: {ran} tests, {len(failures)} failed, {ignored} ignored")
        elapsed_s = (run.now - started_at) / 1000.0
        yield from run_result(elapsed_s, ran, failures)
        device.kill_process(target, reason="finished inst")


def default_player() -> InstrumentationPlayer:
    """The player the simulated device uses unless told otherwise (the demo app's model)."""
    return SimInstrumentationPlayer()


# --------------------------------------------------------------------------------------
# playing one test


def _play_test(run: _Run, test: SimTest) -> None:
    rng = random.Random(f"{run.test_pkg.source_hash}:{test.class_name}#{test.method}")
    state = _TestState(rng=rng)
    try:
        _play_steps(run, test, state, list(test.steps))
        _end_dispatch(run, state)
    finally:
        # StrictModeRule restores the previous policies when the test ends
        for thread in list(run.rule_threads):
            run.policies[thread] = dict(_MAIN_DEFAULT_POLICY) if thread == "main" else None
        run.rule_threads.clear()
        run.launched = False


@dataclass
class _TestState:
    rng: random.Random
    marks: dict[str, float] = field(default_factory=dict)
    dispatch: _Dispatch | None = None


def _thread_key(step: dict[str, Any]) -> str:
    thread = str(step.get("thread", "test"))
    return str(step.get("thread_name") or thread) if thread == "background" else thread


def _play_steps(run: _Run, test: SimTest, state: _TestState, steps: list[dict[str, Any]]) -> None:
    for step in steps:
        # a background step the main thread waits for belongs to the main thread's message
        thread = "main" if step.get("waiter") == "main" else step.get("thread", "test")
        if thread != "main" or (state.dispatch is not None
                                and state.dispatch.id != step.get("dispatch")):
            _end_dispatch(run, state)
        if thread == "main" and state.dispatch is None:
            state.dispatch = _Dispatch(id=int(step.get("dispatch") or 0), started=run.now)
        if "launch" in step:
            _launch(run, state)
        elif "policy" in step:
            policy = step["policy"]
            run.policies[_thread_key(step)] = dict(policy) if isinstance(policy, dict) else None
            if step.get("rule"):
                run.rule_threads.add(_thread_key(step))
        elif "permit" in step:
            current = run.policies.get(_thread_key(step))
            if current:
                detect = [k for k in current.get("detect", []) if k != step["permit"]]
                run.policies[_thread_key(step)] = {**current, "detect": detect}
        elif "mark" in step:
            state.marks[str(step["mark"])] = run.now
        elif "call" in step:
            _call(run, test, state, step)
        elif "sleep" in step:
            _spend(run, state, step, float(step["sleep"]))
        elif "log" in step:
            spec = step["log"]
            message = _render(spec.get("parts", []), state)
            run.log(str(spec.get("priority", "I")), str(spec.get("tag", "")), message,
                    run.tid(step))
        elif "throw" in step:
            _throw(run, test, state, step, str(step["throw"]),
                   _render_message(step.get("message"), state), junit_frames=())
        elif "fail" in step:
            _throw(run, test, state, step, "java.lang.AssertionError",
                   _render_message(step.get("fail"), state),
                   junit_frames=("org.junit.Assert.fail(Assert.java:89)",))
        elif "assert" in step:
            _assert(run, test, state, step)
        elif "if" in step:
            branch = "then" if _holds(step["if"], state) else "else"
            _play_steps(run, test, state, list(step.get(branch) or []))


def _launch(run: _Run, state: _TestState) -> None:
    if run.launched:
        return
    run.launched = True
    component = f"{run.app.package}/.{run.app.activity.rsplit('.', 1)[-1]}"
    run.system_log("I", "ActivityTaskManager",
                   f"START u0 {{flg=0x10000000 cmp={component}}} with LAUNCH_MULTIPLE "
                   f"from uid 10{run.pid % 1000:03d} result code=0")
    launch_ms = 180.0 + state.rng.uniform(0, 90)
    run.advance(launch_ms)
    run.system_log("I", "ActivityTaskManager",
                   f"Displayed {component} for user 0: +{int(launch_ms)}ms")


def _spend(run: _Run, state: _TestState, step: dict[str, Any], ms: float) -> None:
    """Time passes on the step's thread; the main thread's message may turn into an ANR."""
    thread = step.get("thread", "test")
    if thread == "background" and not step.get("waiter"):
        return  # concurrent with the test: no one waits for it
    if (thread == "main" or step.get("waiter") == "main") and state.dispatch is not None:
        remaining = ANR_THRESHOLD_MS - state.dispatch.blocked
        if ms > remaining:
            run.advance(max(0.0, remaining) + 1.0 + state.rng.uniform(0, 40))
            _anr(run, state)
        state.dispatch.blocked += ms
    run.advance(ms)


def _call(run: _Run, test: SimTest, state: _TestState, step: dict[str, Any]) -> None:
    name = str(step["call"])
    method = run.app.methods.get(name)
    effect = method.effect if method is not None else DEFAULT_EFFECT
    duration = method.duration(state.rng) if method is not None else effect.duration_ms
    key = _thread_key(step)
    if not effect.worker:
        policy = run.policies.get(key)
        for kind_name in effect.violations:
            kind = VIOLATIONS[kind_name]
            frames = [_app_frame(method, step)] if method else []
            frames += caller_frames(test, step)
            if policy and kind.death_exception and policy.get("death_on_network") \
                    and kind_name == "Network":
                stack = "\n".join([kind.death_exception,
                                   *(f"\tat {f}" for f in (*kind.frames, *frames))])
                _raise(run, state, step, kind.death_exception, None, stack)
            if policy and kind_name in policy.get("detect", []) and policy.get("penalty_log"):
                _violation(run, state, step, kind_name, frames)
    _spend(run, state, step, duration)
    if effect.worker and method is not None:
        # the app's own executor thread: no StrictMode policy there, so nothing is logged;
        # its tid appears in no line, but it exists (as on a phone).
        run.background_tids.setdefault("pool-2-thread-1",
                                       run.pid + _BACKGROUND_TID_OFFSET + 9)


def _app_frame(method: MethodBehaviour, step: dict[str, Any]) -> str:
    """The app's own frame; the line is the one compiled against (``app_line``), if known."""
    line = step.get("app_line")
    if isinstance(line, int) and line > 0:
        return method.app_frame.rsplit(":", 1)[0] + f":{line})"
    return method.app_frame


def _violation(run: _Run, state: _TestState, step: dict[str, Any], kind_name: str,
               frames: list[str]) -> None:
    fingerprint = f"{kind_name}:{frames[0] if frames else ''}:{_thread_key(step)}"
    last = run.last_logged.get(fingerprint)
    if last is not None and run.now - last < _STRICTMODE_MIN_LOG_INTERVAL_MS:
        return
    run.last_logged[fingerprint] = run.now
    if step.get("thread") == "main" and state.dispatch is not None:
        state.dispatch.pending.append((kind_name, run.now, frames))
        return
    run.log("D", "StrictMode", strictmode_lines(VIOLATIONS[kind_name], None, frames),
            run.tid(step))


def _end_dispatch(run: _Run, state: _TestState) -> None:
    """The main thread's current message is done: log its violations with their duration."""
    dispatch = state.dispatch
    state.dispatch = None
    if dispatch is None:
        return
    for kind_name, at, frames in dispatch.pending:
        duration = max(0, int(run.now - at))
        run.log("D", "StrictMode", strictmode_lines(VIOLATIONS[kind_name], duration, frames),
                run.pid)


def _anr(run: _Run, state: _TestState) -> None:
    component = f"{run.app.package}/{run.app.activity}"
    short = f"{run.app.package}/.{run.app.activity.rsplit('.', 1)[-1]}"
    waited = int(ANR_THRESHOLD_MS) + 1
    error_id = uuid.UUID(int=state.rng.getrandbits(128), version=4)
    window = f"{state.rng.getrandbits(28):07x}"
    lines = [
        f"ANR in {run.app.package} ({short})",
        f"PID: {run.pid}",
        f"Reason: Input dispatching timed out ({window} {component} (server) is not responding. "
        f"Waited {waited}ms for MotionEvent)",
        f"Parent: {short}",
        f"ErrorId: {error_id}",
        "Frozen: false",
        "Load: 1.42 / 1.18 / 0.97",
        "----- Output from /proc/pressure/memory -----",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0",
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0",
        "----- End output from /proc/pressure/memory -----",
        f"CPU usage from 0ms to {waited + 180}ms later:",
        f"  98% {run.pid}/{run.app.package}: 96% user + 2% kernel",
    ]
    run.system_log("E", "ActivityManager", "\n".join(lines))
    state.dispatch = None  # its violations die with the process
    raise _Crash("ANR", None, "", anr=True)


def _throw(run: _Run, test: SimTest, state: _TestState, step: dict[str, Any], exception: str,
           message: str | None, *, junit_frames: tuple[str, ...]) -> None:
    head = exception if not message else f"{exception}: {message}"
    frames = [*junit_frames, *caller_frames(test, step)]
    stack = "\n".join([head, *(f"\tat {f}" for f in frames)])
    _raise(run, state, step, exception, message, stack)


def _raise(run: _Run, state: _TestState, step: dict[str, Any], exception: str,
           message: str | None, stack: str) -> None:
    thread = step.get("thread", "test")
    if thread == "test":
        raise _Failure(stack)
    name = "main" if thread == "main" else str(step.get("thread_name") or "Thread-1")
    tid = run.tid(step)
    state.dispatch = None
    if thread == "main":
        run.log("D", "AndroidRuntime", "Shutting down VM", tid)
    run.log("E", "AndroidRuntime",
            f"FATAL EXCEPTION: {name}\nProcess: {run.target}, PID: {run.pid}\n{stack}", tid)
    raise _Crash(exception, message, stack)


def _assert(run: _Run, test: SimTest, state: _TestState, step: dict[str, Any]) -> None:
    cond = step["assert"]
    holds = _holds(cond, state)
    if step.get("negate"):
        holds = not holds
    if holds:
        return
    message = _render_message(step.get("message"), state)
    if step.get("style") == "hamcrest":
        value = _value(cond, state)
        words = {"lessThan": "less than", "greaterThan": "greater than",
                 "lessThanOrEqualTo": "less than or equal to",
                 "greaterThanOrEqualTo": "greater than or equal to"}
        expected = f"a value {words.get(str(step.get('matcher')), 'matching')} <{int(cond['value'])}L>"
        text = f"{message or ''}\nExpected: {expected}\n     but: <{value}L> was not"
        _throw(run, test, state, step, "java.lang.AssertionError", text,
               junit_frames=("org.hamcrest.MatcherAssert.assertThat(MatcherAssert.java:20)",
                             "org.junit.Assert.assertThat(Assert.java:964)"))
    frames = ("org.junit.Assert.fail(Assert.java:89)",
              "org.junit.Assert.assertTrue(Assert.java:42)")
    _throw(run, test, state, step, "java.lang.AssertionError", message, junit_frames=frames)


# --------------------------------------------------------------------------------------
# values


def _elapsed_ms(part: dict[str, Any], state: _TestState) -> float:
    start, end = part.get("elapsed", [None, None])
    if start not in state.marks or end not in state.marks:
        return 0.0
    return state.marks[end] - state.marks[start]


def _value(part: dict[str, Any], state: _TestState) -> float | int:
    ms = _elapsed_ms(part, state)
    unit = part.get("unit", "ms")
    scaled = {"ms": ms, "ns": ms * 1e6, "us": ms * 1e3, "s": ms / 1e3}.get(unit, ms)
    if part.get("format") == "float":
        return round(scaled, 6)
    return int(scaled)


def _render(parts: list[Any], state: _TestState) -> str:
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            if part.get("format") == "duration":
                ms = _elapsed_ms(part, state)
                out.append(f"{round(ms, 3):g}ms" if ms < 1000 else f"{round(ms / 1000, 3):g}s")
            else:
                out.append(str(_value(part, state)))
    return "".join(out)


def _render_message(message: Any, state: _TestState) -> str | None:
    if message is None:
        return None
    if isinstance(message, list):
        return _render(message, state)
    return str(message)


def _holds(cond: dict[str, Any], state: _TestState) -> bool:
    value = _value(cond, state)
    limit = float(cond.get("value", 0))
    op = cond.get("op")
    return {"<": value < limit, "<=": value <= limit, ">": value > limit,
            ">=": value >= limit}.get(str(op), True)
