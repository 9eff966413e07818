"""The device part of a run: logcat -c → install → instrument [→ the failed tests again] →
logcat -d → cleanup → analysis, each an RPC step of the run's log (docs/design.md §5)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from controller.analysis import (
    analyze,
    parse_instrumentation,
)
from controller.auth import Principal
from controller.executor.base import Abort, builder_of, reason_for, test_class_of
from controller.executor.build import BuildSteps
from controller.executor.cache import CompiledTest
from controller.executor.gateway import (
    DeviceView,
    Target,
)
from controller.executor.recording import RecordingGateway, ms_since
from controller.executor.recovery import (
    ResumeContext,
    ResumedDevice,
)
from controller.executor.results import RunResult, analysed_result, pending_result
from controller.executor.slices import slice_by_test
from controller.executor.steps import StepLog
from protocol.errors import RpcError
from protocol.methods import (
    INSTALL,
    INSTRUMENT,
    INVALID_RESULT,
    LOGCAT_CLEAR,
    LOGCAT_DUMP,
    SHELL,
    UNINSTALL,
    InstrumentResult,
    LogcatDumpParams,
    Method,
    ShellParams,
)

__all__ = [
    "DeviceSteps",
    "failed_tests",
    "merge_retries",
]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


def failed_tests(tests: Sequence[Any]) -> list[tuple[str, str]]:
    """(class, method) of the tests that failed or erred, in order, without duplicates."""
    out: list[tuple[str, str]] = []
    for t in tests:
        key = (t.class_name, t.name)
        if t.status in ("failed", "error") and t.name != "null" and key not in out:
            out.append(key)
    return out


def merge_retries(tests: list[dict[str, Any]], attempts: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Each retried test takes its latest status; ``attempts`` counts its runs, and a test
    that passed on a retry is marked ``flaky`` (its first failure kept as ``first_stack``)."""
    by_key = {(t["class"], t["name"]): t for t in tests}
    for records in attempts:
        for record in records:
            test = by_key.get((record["class"], record["name"]))
            if test is None:
                continue
            first = test.get("first_stack", test["stack"])
            test.update(status=record["status"], stack=record["stack"],
                        attempts=test["attempts"] + 1)
            if record["status"] == "passed":
                test["flaky"] = True
                test["first_stack"] = first


class DeviceSteps(BuildSteps):
    """A run's work on its device, from logcat -c to the verdict."""

    async def _on_device(
        self,
        steps: StepLog,
        run_id: str,
        device: DeviceView,
        compiled: CompiledTest,
        deadline: float,
        user: str = "",
        retries: int | None = None,
        principal: Principal | None = None,
        *,
        classes: Sequence[str] | None = None,
    ) -> RunResult:
        """One run on one device at a time: two runs installing and clearing the same app
        would spoil each other's evidence. Waiting counts against the run's deadline.
        ``classes``: run only these (``-e class A,B#m``; a shard, or a retry elsewhere)."""
        waited = None
        if self.scheduler.busy(device.id):
            waited = await steps.begin("device_busy", device=device.id)

        async def busy_elsewhere() -> None:
            nonlocal waited
            if waited is None:
                waited = await steps.begin("device_busy", device=device.id)
            steps.progress("waiting for the device (a run on another replica holds it)")

        turn = self.scheduler.turn(
            device.id, user, run_id, on_wait=lambda: steps.progress("waiting for the device"),
            on_shared_wait=busy_elsewhere,
        )
        try:
            async with asyncio.timeout_at(deadline):
                await turn.__aenter__()
        except RpcError as exc:  # the cluster's turn could not be taken (Redis away)
            if waited is not None:
                await steps.end(waited, "failed", detail=exc.message)
            return pending_result(run_id, device, "bridge_unavailable", exc.message)
        except TimeoutError:
            if waited is not None:
                await steps.end(waited, "failed", detail="busy with another run until the deadline")
            return pending_result(run_id, device, "timeout", f"{device.id} stayed busy with another run")
        except asyncio.CancelledError:
            if waited is not None:
                await asyncio.shield(steps.end(waited, "failed", detail="cancelled while waiting"))
            await self._note_cancel(steps, run_id)
            raise
        try:
            if waited is not None:
                await steps.end(waited, "ok")
            return await self._on_device_locked(
                steps, run_id, device, compiled, deadline,
                self.settings.retries if retries is None else retries, principal,
                as_owner=bool(user) and user == device.owner_id, classes=classes,
            )
        except asyncio.CancelledError:
            await self._note_cancel(steps, run_id)
            raise
        finally:
            await turn.__aexit__(None, None, None)

    async def _on_device_locked(
        self,
        steps: StepLog,
        run_id: str,
        device: DeviceView,
        compiled: CompiledTest,
        deadline: float,
        retries: int = 0,
        principal: Principal | None = None,
        *,
        as_owner: bool = False,
        classes: Sequence[str] | None = None,
    ) -> RunResult:
        """One run on one device. ``as_owner``: the run's user owns the device, so its
        installs may grant runtime permissions (``-g``) and the bridge's ``full`` profile
        applies; a borrower's run gets neither (docs/security.md). ``classes``: run only
        these (``-e class A,B#m``)."""
        loop = asyncio.get_running_loop()
        gw = RecordingGateway(self.gateway, steps, self._reauth(principal))
        target: Target = device.ref
        serial = device.serial
        timings: dict[str, int] = {}
        installed: list[str] = []  # what this run put on the device (and must remove)
        app_package: str | None = None
        app_new = False  # the app was not on the device before the run: its data may go
        instrument: InstrumentResult | None = None
        partial_output = ""
        abort: Abort | None = None

        def remaining() -> float:
            left = deadline - loop.time()
            if left <= 0:
                raise Abort("timeout", "the run's deadline passed")
            return left

        async def call(method: Method[P, R], params: dict[str, Any],
                       limit: float | None = None) -> R:
            budget = min(limit or self.settings.step_timeout_s, remaining())
            try:
                typed = method.parse_params(
                    {"serial": serial, **params, **({"as_owner": True} if as_owner else {})}
                )
                return await gw.call(
                    target, method, typed, timeout_s=budget + self.settings.rpc_grace_s,
                )
            except RpcError as exc:
                raise Abort(reason_for(exc, "device"), f"{method.name}: {exc.message}") from exc

        assert compiled.app_apk is not None and compiled.test_apk is not None
        test_package: str | None = None
        retried: list[list[dict[str, Any]]] = []  # each retry's test records
        try:
            t = time.monotonic()
            await call(LOGCAT_CLEAR, {})
            steps.progress("installing")
            # What was installed is what the device says (its package list before and
            # after), never the APK's claim; what was there before is never removed.
            grant = {"grant_permissions": True} if as_owner else {}
            app = await call(
                INSTALL, {"apk": compiled.app_apk.data, **grant}, self.settings.compile_timeout_s,
            )
            app_package = app.package
            app_new = bool(app_package) and not app.existed
            if app_new:
                installed.append(app_package)
            test = await call(
                INSTALL, {"apk": compiled.test_apk.data, **grant}, self.settings.compile_timeout_s,
            )
            test_package = test.package
            if test_package and not test.existed:
                installed.append(test_package)
            timings["install_ms"] = ms_since(t)
            if not test_package:
                raise Abort("adb_unavailable", "the test APK's package is unknown after install")
            steps.progress("running")
            t = time.monotonic()
            args: dict[str, str] = {}
            test_class = test_class_of(compiled.code)
            if classes:
                args["class"] = ",".join(classes)
            elif test_class and compiled.toolchain is not None:
                args["class"] = test_class
            budget = remaining()
            try:
                instrument = await gw.call(
                    target,
                    INSTRUMENT,
                    INSTRUMENT.parse_params(
                        {"serial": serial, "package": test_package,
                         "runner": self.settings.runner, "args": args,
                         "timeout_s": round(budget, 1)}),
                    timeout_s=budget + self.settings.rpc_grace_s,
                    resume=ResumeContext(
                        device=ResumedDevice(
                            bridge_id=device.bridge_id, bridge_name=device.bridge_name,
                            owner_id=device.owner_id, serial=serial, info=dict(device.info)),
                        app_package=app_package, installed=list(installed), app_new=app_new,
                        toolchain=compiled.toolchain, builder=builder_of(compiled),
                        compile_rounds=compiled.compile_rounds,
                        test_class=test_class_of(compiled.code), timings=dict(timings),
                        test_package=test_package, retries=retries,
                        deadline_unix=time.time() + budget,
                    ),
                )
            except RpcError as exc:
                partial_output = str((exc.data or {}).get("output") or "")
                if (exc.data or {}).get("reason") == INVALID_RESULT:
                    abort = Abort("bridge_unavailable", f"instrument: bad result ({exc.message})")
                else:
                    abort = Abort(reason_for(exc, "device"), f"instrument: {exc.message}")
            timings["run_ms"] = ms_since(t)
            if instrument is not None and abort is None and retries > 0:
                t = time.monotonic()
                retried = await self._retry_failed(
                    gw, target, serial, test_package, instrument.output, retries, remaining
                )
                timings["retry_ms"] = ms_since(t)
        except Abort as exc:
            abort = exc
        except asyncio.CancelledError:
            # Cancelled (cancel(), shutdown, a client gone): leave nothing behind on the device.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(self._cleanup(
                        gw, target, serial, app_package if app_new else None, installed)),
                    self.settings.cleanup_timeout_s,
                )
            raise

        return await self._conclude(
            steps, gw, run_id, device, app_package=app_package, app_new=app_new,
            installed=installed,
            instrument=instrument, partial_output=partial_output, abort=abort,
            retried=retried, timings=timings, toolchain=compiled.toolchain,
            compile_rounds=compiled.compile_rounds, test_class=test_class_of(compiled.code),
        )

    async def _conclude(
        self,
        steps: StepLog,
        gw: RecordingGateway,
        run_id: str,
        device: DeviceView,
        *,
        app_package: str | None,
        installed: Sequence[str],
        instrument: InstrumentResult | None,
        app_new: bool = False,
        partial_output: str,
        abort: Abort | None,
        retried: list[list[dict[str, Any]]],
        timings: dict[str, int],
        toolchain: Any,
        compile_rounds: Any,
        test_class: str | None,
    ) -> RunResult:
        """After the instrumentation: logcat, cleanup, analysis — the run's result."""
        target: Target = device.ref
        serial = device.serial
        logcat = ""
        logcat_ok = False
        # Evidence is collected even after a failed or timed-out instrumentation: what the app
        # logged before it is still ground truth. Its own short budget, past the deadline too.
        steps.progress("collecting")
        t = time.monotonic()
        try:
            dumped = await gw.call(
                target, LOGCAT_DUMP, LogcatDumpParams(serial=serial, format="threadtime"),
                timeout_s=self.settings.step_timeout_s,
            )
            logcat = "\n".join(dumped.lines)
            logcat_ok = True
        except RpcError as exc:
            if abort is None:
                abort = Abort(reason_for(exc, "device"), f"logcat: {exc.message}")
        timings["logcat_ms"] = ms_since(t)

        steps.progress("cleaning")
        t = time.monotonic()
        await self._cleanup(gw, target, serial, app_package if app_new else None, installed)
        timings["cleanup_ms"] = ms_since(t)

        output = instrument.output if instrument is not None else partial_output
        parsed = parse_instrumentation(output) if output else None
        if not logcat_ok:
            assert abort is not None
            result = pending_result(run_id, device, abort.reason_code, abort.detail)
        else:
            analysis = analyze(
                logcat,
                package=app_package or None,
                thresholds=self.settings.thresholds,
                instrumentation=parsed,
                completed=None if abort is None else False,
            )
            result = analysed_result(
                run_id, device, analysis, logcat, parsed,
                (abort.reason_code, abort.detail) if abort is not None else None,
            )
        result.toolchain = toolchain
        result.compile_rounds = compile_rounds
        result.test_class = test_class
        result.package = app_package or None
        if parsed is not None:
            tests = [
                {"class": x.class_name, "name": x.name, "status": x.status, "stack": x.stack,
                 "attempts": 1}
                for x in parsed.tests
            ]
            merge_retries(tests, retried)
            slices = slice_by_test(logcat.splitlines()) if logcat_ok else {}
            for test in tests:
                test["logcat"] = slices.get((str(test["class"]), str(test["name"])), "")
            result.tests = tests
            result.run_status = parsed.run_status
        result.timings.update(timings)
        return result

    async def _retry_failed(
        self,
        gw: RecordingGateway,
        target: Target,
        serial: str,
        test_package: str,
        output: str,
        retries: int,
        remaining: Callable[[], float],
    ) -> list[list[dict[str, Any]]]:
        """Run the failed tests again (``-e class Cls#m,Cls#n``), up to ``retries`` times or
        until they pass; each attempt's test records. A failed retry ends the retries, never
        the run: the first attempt's results stand."""
        attempts: list[list[dict[str, Any]]] = []
        failing = failed_tests(parse_instrumentation(output).tests)
        for _ in range(retries):
            if not failing:
                break
            try:
                budget = remaining()
                rerun = await gw.call(
                    target,
                    INSTRUMENT,
                    INSTRUMENT.parse_params(
                        {"serial": serial, "package": test_package,
                         "runner": self.settings.runner,
                         "args": {"class": ",".join(f"{c}#{n}" for c, n in failing)},
                         "timeout_s": round(budget, 1)}),
                    timeout_s=budget + self.settings.rpc_grace_s,
                )
                again = parse_instrumentation(rerun.output)
            except (RpcError, Abort):
                break
            records = [
                {"class": x.class_name, "name": x.name, "status": x.status, "stack": x.stack}
                for x in again.tests
            ]
            attempts.append(records)
            failing = failed_tests(again.tests)
        return attempts

    async def _cleanup(
        self,
        gw: RecordingGateway,
        target: Target,
        serial: str,
        app_package: str | None,
        installed: Sequence[str],
    ) -> None:
        """Clear the app's data and uninstall what this run installed (docs/design.md §6).
        ``app_package`` only when the run installed it new, ``installed`` only what the run
        put there: a package the device had before the run is never cleared nor removed."""
        limit = self.settings.cleanup_timeout_s
        with contextlib.suppress(RpcError):
            if app_package:
                await gw.call(
                    target, SHELL, ShellParams(serial=serial, argv=["pm", "clear", app_package]),
                    timeout_s=limit, check=False,
                )
        for package in reversed(installed):  # the test package first: it targets the app
            with contextlib.suppress(RpcError):
                await gw.call(
                    target, UNINSTALL,
                    UNINSTALL.parse_params({"serial": serial, "package": package}),
                    timeout_s=limit, check=False,
                )
