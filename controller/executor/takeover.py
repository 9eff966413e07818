"""Taking over a dead controller's run (:mod:`controller.executor.recovery`): one whose tests
ran waits for their result again and is finished here (logcat, cleanup, verdict); one that
never reached its tests starts over on this controller."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select, update

from controller.access import ACCESS_REVOKED, check_access
from controller.auth import DeviceRef, Principal, principal_for
from controller.executor.base import Abort, Plan, reason_for
from controller.executor.device_steps import DeviceSteps
from controller.executor.gateway import (
    DeviceView,
    all_devices,
)
from controller.executor.recording import RecordingGateway, ms_since
from controller.executor.recovery import (
    Resumable,
    clean_up,
    end_run,
)
from controller.executor.request import ExecuteRequest
from controller.executor.steps import Step, StepLog
from controller.store import (
    Run,
    RunStep,
    Token,
    User,
    utcnow,
)
from protocol.errors import ErrorCode, RpcError
from protocol.methods import (
    INSTRUMENT,
    InstrumentResult,
)

__all__ = [
    "Takeover",
]

log = logging.getLogger("droidwire.controller.executor")


class Takeover(DeviceSteps):
    """Finishing or restarting a dead controller's runs."""

    # -- resuming after a controller restart (recovery.py) -------------------------------------

    def resume(self, item: Resumable) -> Awaitable[None] | None:
        """Take over a dead controller's run whose instrumentation result its bridge may still
        hold: the request is adopted now (before the bridge is back), and the returned
        awaitable finishes the run — logcat, cleanup, verdict — once the result comes, or ends
        it PENDING ``controller_restarted`` when it cannot. None: not resumable here."""
        adopt = getattr(self.gateway, "adopt", None)
        if not callable(adopt) or self.store is None:
            return None
        if item.done:  # the tests ran and their result was recorded: finish with it
            recorded: asyncio.Future[dict[str, Any]] = (
                asyncio.get_running_loop().create_future())
            recorded.set_result(dict(item.detail["result"]))
            return asyncio.get_running_loop().create_task(self._resume(item, recorded))
        dev = item.context.device
        ref = DeviceRef(dev.bridge_id, dev.serial, dev.owner_id, dev.bridge_name)
        params = dict(item.detail.get("params") or {})
        budget = float(params.get("timeout_s") or self.settings.step_timeout_s)
        try:
            waiter = adopt(
                ref, item.request_id, INSTRUMENT.name, params,
                sent_session=item.bridge_session, timeout_s=budget + self.settings.rpc_grace_s,
            )
        except RpcError as exc:
            log.warning("run %s cannot be resumed: %s", item.run_id, exc.message)
            return None
        return asyncio.get_running_loop().create_task(self._resume(item, waiter))

    async def _resume(self, item: Resumable, waiter: Awaitable[dict[str, Any]]) -> None:
        """Finish a resumed run, holding its device's turn as the run did before the restart,
        so a new run on that device waits until this one has collected its logcat and cleaned
        up. After a restart the turn is free (resume() runs before any new run can queue); a
        survivor adopting a dead replica's run may first finish its own run on that device."""
        dev = item.context.device
        turn = self.scheduler.turn(f"{dev.bridge_name}~{dev.serial}", "", item.run_id)
        held = True
        try:
            await turn.__aenter__()
        except RpcError as exc:  # the cluster's turn could not be taken (Redis away)
            log.warning("run %s: finishing without the device's turn: %s", item.run_id,
                        exc.message)
            held = False
        try:
            await self._finish_resumed(item, waiter)
        finally:
            if held:
                await turn.__aexit__(None, None, None)

    async def _finish_resumed(self, item: Resumable, waiter: Awaitable[dict[str, Any]]) -> None:
        assert self.store is not None
        ctx = item.context
        dev = ctx.device
        steps = StepLog(self.store, [item.run_id], start_seq=item.next_seq)
        step = Step("rpc", item.step_seq, dict(item.detail))
        started = time.monotonic()
        instrument: InstrumentResult | None = None
        partial_output = ""
        abort: Abort | None = None
        try:
            try:
                instrument = InstrumentResult.model_validate(await waiter)
            except RpcError as exc:
                if exc.code in (ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT, ErrorCode.CANCELLED):
                    # The result is not coming: the run ends as any other a restart cut.
                    reason = str((exc.data or {}).get("reason") or exc.code.value)
                    await self._give_up(item, f"its result was not recovered ({reason})")
                    return
                partial_output = str((exc.data or {}).get("output") or "")
                abort = Abort(reason_for(exc, "device"), f"instrument: {exc.message}")
                await steps.end(step, "failed", ms=ms_since(started), resumed=True,
                                error={"code": exc.code.value, "message": exc.message})
            except ValueError as exc:
                abort = Abort("bridge_unavailable", f"instrument: bad result ({exc})")
                await steps.end(step, "failed", ms=ms_since(started), resumed=True,
                                error=repr(exc)[:300])
            else:
                await steps.end(step, "ok", ms=ms_since(started), resumed=True)
            device = next(
                (d for d in self.gateway.devices()
                 if d.bridge_id == dev.bridge_id and d.serial == dev.serial),
                DeviceView(dev.bridge_id, dev.bridge_name, dev.owner_id, dev.serial, "device",
                           dict(dev.info)),
            )
            timings = dict(ctx.timings)
            gw = RecordingGateway(self.gateway, steps)
            retried: list[list[dict[str, Any]]] = []
            # A run whose retries may already have run before its controller died does not
            # retry again: its tests never run twice because of a takeover.
            retries = 0 if item.done else ctx.retries
            test_package = ctx.test_package or ""
            if instrument is not None and abort is None and retries > 0 and test_package:
                deadline_unix = ctx.deadline_unix

                def remaining() -> float:
                    left = deadline_unix - time.time()
                    if left <= 0:
                        raise Abort("timeout", "the run's deadline passed")
                    return left

                t = time.monotonic()
                retried = await self._retry_failed(
                    gw, device.ref, device.serial, test_package, instrument.output, retries,
                    remaining,
                )
                timings["retry_ms"] = ms_since(t)
            result = await self._conclude(
                steps, gw, item.run_id, device,
                app_package=ctx.app_package or None,
                app_new=ctx.app_new,
                installed=ctx.installed,
                instrument=instrument, partial_output=partial_output, abort=abort,
                retried=retried,
                timings=timings, toolchain=ctx.toolchain,
                compile_rounds=ctx.compile_rounds, test_class=ctx.test_class,
            )
            result.resumed = True
            result.builder = ctx.builder
            await self._finish([item.run_id], [result])
            log.info("run %s resumed after a controller restart: %s", item.run_id,
                     result.verification_status)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("resuming run %s failed", item.run_id)
            await self._give_up(item, f"resuming failed ({exc!r})"[:300])

    # -- continuing a dead replica's run that never reached its tests (recovery.py) ----------

    def continue_run(self, run: Run, next_seq: int) -> Awaitable[None] | None:
        """Take over a dead controller's run that never sent its instrumentation
        (:func:`~controller.executor.recovery.restartable`) and run it from the start here,
        on its device, once that device is reachable from this replica; None: cannot."""
        if self.store is None:
            return None
        record = run.request or {}
        try:
            request = ExecuteRequest.model_validate(
                {k: v for k, v in record.items() if k in ExecuteRequest.model_fields})
        except ValidationError:
            return None
        token_id = record.get("token_id")
        return asyncio.get_running_loop().create_task(self._continue(
            run.id, run.user_id, request, str(record["device_id"]), next_seq,
            token_id if isinstance(token_id, str) else None))

    async def _continue(self, run_id: str, user_id: str | None, request: ExecuteRequest,
                        device_id: str, next_seq: int, token_id: str | None) -> None:
        assert self.store is not None
        try:
            async with self.store.session() as session, session.begin():
                await session.execute(
                    update(RunStep).where(RunStep.run_id == run_id, RunStep.status == "running")
                    .values(status="failed", finished_at=utcnow()))
            device = await self._reachable(device_id)
            if device is None:
                await self._end_continued(run_id, f"its device {device_id} was not reachable "
                                          f"within {self.settings.continue_wait_s:g}s")
                return
            principal = None
            if user_id is not None:
                # The caller as the token they submitted with acts now (its scopes, its user's
                # rights), not as when the dead replica accepted the run; every step of the
                # continued run re-checks it again (check_access), like any run's.
                principal = await self._caller(token_id, user_id)
                try:
                    if principal is None:
                        raise RpcError(ErrorCode.FORBIDDEN, "the token was revoked",
                                       {"rule": ACCESS_REVOKED, "why": "token"})
                    await check_access(self.store, principal, device.ref)
                except RpcError as exc:
                    await self._end_continued(
                        run_id, f"no longer allowed ({(exc.data or {}).get('why') or exc.code.value})")
                    return
            steps = StepLog(self.store, [run_id], start_seq=next_seq)
            await steps.record("recovery", "ok", continued_by=self.instance,
                               detail="its controller stopped before its tests ran: "
                               "continued from the start")
            await self.run(Plan(request, principal, [run_id], [device], start_seq=next_seq + 1))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("continuing run %s failed", run_id)
            await self._end_continued(run_id, f"continuing failed ({exc!r})"[:300])

    async def _caller(self, token_id: str | None, user_id: str) -> Principal | None:
        """The principal of a run's recorded token (its user's), or None if the token is gone,
        revoked or not that user's, or the user is disabled (as authentication answers)."""
        if self.store is None or not token_id:
            return None
        async with self.store.session() as session:
            row = (await session.execute(
                select(Token, User).join(User, Token.owner_id == User.id)
                .where(Token.id == token_id, User.id == user_id)
            )).one_or_none()
        if row is None or row[0].revoked_at is not None or row[1].disabled_at is not None:
            return None
        token, user = row
        return principal_for(
            token_id=token.id, kind=token.kind, name=token.name, bridge_id=token.bridge_id,
            scopes=token.scopes, user_id=user.id, user_name=user.name,
            user_is_admin=user.is_admin,
        )

    async def _reachable(self, device_id: str) -> DeviceView | None:
        """The device once it is ready from here (its bridge reconnected to some replica),
        looked at every 0.25 s (no event tells it), for ``continue_wait_s``."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.settings.continue_wait_s
        while True:
            for device in await all_devices(self.gateway):
                if device.id == device_id and device.ready:
                    return device
            if loop.time() >= until:
                return None
            await asyncio.sleep(0.25)

    async def _end_continued(self, run_id: str, why: str) -> None:
        assert self.store is not None
        with contextlib.suppress(Exception):
            await end_run(self.store, run_id, why)

    async def _give_up(self, item: Resumable, why: str) -> None:
        assert self.store is not None
        with contextlib.suppress(Exception):
            recovered = await end_run(self.store, item.run_id, why)
            if recovered is not None and recovered.packages:
                await clean_up(self.gateway, self.store, [recovered],
                               wait_s=self.settings.cleanup_timeout_s * 4)
