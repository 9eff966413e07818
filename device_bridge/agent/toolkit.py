"""The agent toolkit's RPC handlers on the bridge, behind the owner's policy.

:class:`AgentToolkit` serves ``device.state``, ``ui.dump``, ``ui.screenshot``, the actions
(``ui.tap``, ``ui.swipe``, ``ui.text``, ``ui.key``, ``app.start``, ``app.stop``) and the dry
run ``agent.check``; :meth:`AgentToolkit.handlers` is merged into the dispatcher's table
(:mod:`device_bridge.rpc`, :meth:`AgentToolkit.install`), which has already applied the
exposure and pause checks.

Policy (docs/design.md §6: a profile governs every RPC kind): every call passes
``Policy.check_ui`` first (``instrument-only`` has no UI). An action then becomes one shell
argv (``input tap X Y``, ``am start -n PKG/CLS`` …) that must pass the ``standard``
allow-list with the device's screen size as bounds — whatever the profile, since ``no-shell``
allows UI but no shell, so the UI's argv are the allow-list's and nothing else — except under
``full``, the owner's own devices, where the profile's own shell check applies (no package
scope), and under ``agent``, whose allow-list is the standard one plus any app's activity.
Only then is anything sent. Reads (``dumpsys``, ``wm size``, ``uiautomator dump``,
``screencap``) are the bridge's own fixed commands.

Evidence: after an action the bridge waits ``at_action_delay_s`` (0.35 s: toasts and ripples
are still up) and takes the at-action frame; with ``settled`` it then takes a frame every
``settle_poll_s`` until the screen has not changed for ``settle_quiet_s`` or
``settle_timeout_s`` passed, and returns that frame and a side-by-side composite. Waiting goes
through an injectable ``sleep`` so tests can drive a simulated UI clock instead of real time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from device_bridge.agent.state import (
    ActivityTrail,
    parse_battery,
    parse_focus,
    parse_keyboard,
    parse_rotation,
    state_text,
)
from device_bridge.agent.uitree import extract_xml, find, parse_ui
from device_bridge.policy import Policy, PolicyConfig, Profile
from protocol.agent_methods import (
    ACTION_METHODS,
    ACTIONS,
    AGENT_CHECK,
    DEVICE_STATE,
    UI_DUMP,
    UI_SCREENSHOT,
    ActionParams,
    ActionResult,
    AgentCheckParams,
    AppStartParams,
    AppStopParams,
    CheckOutcome,
    DeviceStateResult,
    KeyParams,
    ScreenSize,
    SwipeParams,
    TapParams,
    TextParams,
    UiElement,
    UiScreenshotParams,
)
from protocol.errors import ErrorCode, RpcError
from protocol.methods import DeviceParams, ShellParams, dump, validate_params

if TYPE_CHECKING:
    from device_bridge.rpc import Dispatcher

__all__ = ["AgentSettings", "AgentToolkit", "Sleep"]

log = logging.getLogger("droidwire.bridge.agent")

Sleep = Callable[[float], Awaitable[None]]
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

_WM_SIZE = re.compile(r"(Physical|Override) size: (\d+)x(\d+)")
_STANDARD = Policy(PolicyConfig(profile=Profile.STANDARD))
# `wm_set_resumed_activity` (Android 10+) / `am_set_resumed_activity` (≤ 9) in the event log:
# "[USER,PKG/CLASS,REASON]" (AOSP services/core/java/com/android/server/wm/EventLogTags.logtags).
_RESUMED_EVENT = re.compile(
    r"[wa]m_set_resumed_activity\s*: \[\d+,(?P<pkg>[A-Za-z0-9_.]+)/(?P<cls>[A-Za-z0-9_.$]+)"
)
_EVENT_LINES = 200
_MAX_DUMP_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AgentSettings:
    # Evidence frames
    at_action_delay_s: float = 0.35
    settle_poll_s: float = 0.25
    settle_quiet_s: float = 1.0
    settle_timeout_s: float = 6.0
    composite_scale: float = 0.5
    # Limits
    max_output_chars: int = 2000


class AgentToolkit:
    """Handlers over the dispatcher's policy and adb layer; one instance per bridge."""

    def __init__(
        self,
        rpc: Dispatcher,
        *,
        settings: AgentSettings | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.rpc = rpc
        self.settings = settings or AgentSettings()
        self.sleep = sleep
        self.trail = ActivityTrail()
        self._sizes: dict[str, tuple[int, int]] = {}
        self._last_event: dict[str, str] = {}  # the last resume event read, per device
        self._rotations: dict[str, int] = {}  # the last rotation read, per device

    @classmethod
    def install(cls, rpc: Dispatcher, **options: Any) -> AgentToolkit:
        """A toolkit over ``rpc`` whose methods ``rpc`` then serves (``Dispatcher.add``)."""
        toolkit = cls(rpc, **options)
        toolkit.serve_on(rpc)
        return toolkit

    def serve_on(self, rpc: Dispatcher) -> None:
        """``rpc`` serves the toolkit's methods with these handlers."""
        rpc.serve(DEVICE_STATE, self._device_state)
        rpc.serve(UI_DUMP, self._ui_dump)
        rpc.serve(UI_SCREENSHOT, self._ui_screenshot)
        rpc.serve(AGENT_CHECK, self._check)
        for method in ACTIONS.values():  # validated by act(), which also serves the planner
            rpc.add(method, functools.partial(self._action, method.name))

    # -- reads ---------------------------------------------------------------------------------

    async def _device_state(self, p: DeviceParams) -> DeviceStateResult:
        self.rpc.policy.check_ui(p.serial)
        return await self.state(p.serial)

    async def state(self, serial: str) -> DeviceStateResult:
        adb = self.rpc.adb()
        activities, window, ime, battery, events = await asyncio.gather(
            adb.shell(serial, ["dumpsys", "activity", "activities"]),
            adb.shell(serial, ["dumpsys", "window"]),
            adb.shell(serial, ["dumpsys", "input_method"]),
            adb.shell(serial, ["dumpsys", "battery"]),
            self._events(serial),
        )
        size = await self.screen_size(serial)
        rotation = parse_rotation(window.stdout)
        focus = parse_focus(activities.stdout, window.stdout)
        # Resumes since the last read, from the device's own event log: pages visited between
        # two agent calls (by a script, a test, a hand on the phone) are in the trail too.
        for activity in self._resumed_since(serial, events):
            self.trail.observe(serial, activity)
        trail = self.trail.observe(serial, focus.activity if focus else None)
        keyboard = parse_keyboard(ime.stdout, window.stdout)
        self._rotations[serial] = rotation
        width, height = self._oriented(serial, size)
        return DeviceStateResult(
            package=focus.package if focus else None,
            activity=focus.activity if focus else None,
            activity_short=focus.short if focus else None,
            recent_activities=trail,
            keyboard=keyboard,
            screen=ScreenSize(width=width, height=height),
            orientation=rotation,
            battery=parse_battery(battery.stdout),
            text=state_text(focus, trail, keyboard=keyboard),
        )

    async def _events(self, serial: str) -> list[str]:
        """The tail of the event log; none when the device will not give it (the trail then
        has only what the state reads saw)."""
        try:
            return await self.rpc.adb().logcat_dump(serial, lines=_EVENT_LINES, buffers=["events"])
        except RpcError as exc:
            log.info("event log of %s unavailable: %s", serial, exc)
            return []

    def _oriented(self, serial: str, size: tuple[int, int]) -> tuple[int, int]:
        """``wm size`` is the natural orientation's; input coordinates follow the rotation."""
        return size if self._rotations.get(serial, 0) % 2 == 0 else (size[1], size[0])

    def _resumed_since(self, serial: str, lines: list[str]) -> list[str]:
        last = self._last_event.get(serial)
        start = 0
        if last is not None:
            for i in range(len(lines) - 1, -1, -1):
                if lines[i] == last:
                    start = i + 1
                    break
        out = []
        for line in lines[start:]:
            match = _RESUMED_EVENT.search(line)
            if match is not None:
                self._last_event[serial] = line
                pkg, cls = match["pkg"], match["cls"]
                out.append(pkg + cls if cls.startswith(".") else cls)
        return out

    async def screen_size(self, serial: str) -> tuple[int, int]:
        if serial not in self._sizes:
            out = await self.rpc.adb().shell(serial, ["wm", "size"])
            sizes = {m[1]: (int(m[2]), int(m[3])) for m in _WM_SIZE.finditer(out.stdout)}
            size = sizes.get("Override") or sizes.get("Physical")
            if size is None:
                raise RpcError(ErrorCode.UNAVAILABLE, f"cannot read the screen size of {serial}")
            self._sizes[serial] = size
        return self._sizes[serial]

    async def elements(self, serial: str) -> list[UiElement]:
        out = await self.rpc.adb().shell(
            serial, ["uiautomator", "dump", "/dev/tty"], max_output_bytes=_MAX_DUMP_BYTES
        )
        return parse_ui(extract_xml(out.stdout))

    async def _ui_dump(self, p: DeviceParams) -> dict[str, Any]:
        self.rpc.policy.check_ui(p.serial)
        return {"elements": [dump(e) for e in await self.elements(p.serial)]}

    async def _ui_screenshot(self, p: UiScreenshotParams) -> dict[str, Any]:
        self.rpc.policy.check_ui(p.serial)
        self.rpc.policy.check_screenshot(p.serial)
        if not p.marks:
            return {"png": await self.rpc.adb().screenshot(p.serial)}
        png, elements = await asyncio.gather(
            self.rpc.adb().screenshot(p.serial), self.elements(p.serial)
        )
        from device_bridge.agent.frames import draw_marks  # Pillow, on first use

        return {"png": await asyncio.to_thread(draw_marks, png, elements)}

    # -- actions -------------------------------------------------------------------------------

    async def _command(self, serial: str, argv: list[str]) -> list[str]:
        """The argv to send, after the policy (see the module docstring)."""
        policy = self.rpc.policy
        policy.check_ui(serial)
        screen = self._sizes.get(serial)
        if argv[:2] in (["input", "tap"], ["input", "swipe"]) and screen is None:
            screen = await self.screen_size(serial)
        if screen is not None:
            screen = self._oriented(serial, screen)
        context = self.rpc.context(serial, screen=screen)
        if policy.profile_for(serial) in (Profile.FULL, Profile.AGENT):
            return policy.check_shell(serial, argv, context)
        return _STANDARD.check_shell(serial, argv, context)

    async def _resolve(self, p: TapParams) -> tuple[list[str], UiElement | None]:
        if p.x is not None and p.y is not None:
            return ["input", "tap", str(p.x), str(p.y)], None
        elements = await self.elements(p.serial)
        if p.index is not None:
            if p.index >= len(elements):
                raise RpcError(
                    ErrorCode.NOT_FOUND,
                    f"no element {p.index}: the screen has {len(elements)}",
                    {"reason": "no_such_element"},
                )
            target: UiElement | None = elements[p.index]
        else:
            target = find(elements, text=p.text, desc=p.desc, resource_id=p.resource_id)
            if target is None:
                what = p.text or p.desc or p.resource_id
                raise RpcError(
                    ErrorCode.NOT_FOUND,
                    f"no element matching {what!r} on the screen",
                    {"reason": "no_such_element"},
                )
        assert target is not None
        x, y = target.center
        return ["input", "tap", str(x), str(y)], target

    @staticmethod
    def argv_for(method: str, p: BaseModel) -> list[str] | None:
        """The shell argv of an action whose target needs no UI lookup (else None)."""
        if isinstance(p, TapParams):
            return ["input", "tap", str(p.x), str(p.y)] if p.x is not None else None
        if isinstance(p, SwipeParams):
            return ["input", "swipe", *map(str, (p.x1, p.y1, p.x2, p.y2, p.duration_ms))]
        if isinstance(p, TextParams):
            # `input text` reads %s as a space; anything the allow-list screens stays refused.
            return ["input", "text", p.text.replace(" ", "%s")]
        if isinstance(p, KeyParams):
            key = p.key if p.key.isdigit() or p.key.startswith("KEYCODE_") else f"KEYCODE_{p.key}"
            return ["input", "keyevent", key]
        if isinstance(p, AppStartParams):
            activity = p.activity or ".MainActivity"
            return ["am", "start", "-n", f"{p.package}/{activity}"]
        if isinstance(p, AppStopParams):
            return ["am", "force-stop", p.package]
        raise RpcError(ErrorCode.BAD_REQUEST, f"{method} is not an action")

    async def _action(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return dump(await self.act(method, params))

    async def act(self, method: str, params: dict[str, Any]) -> ActionResult:
        model = ACTION_METHODS.get(method)
        if model is None:
            raise RpcError(ErrorCode.BAD_REQUEST, f"{method} is not an action")
        p = _valid(method, params, model)
        assert isinstance(p, ActionParams)
        self.rpc.policy.check_ui(p.serial)
        target: UiElement | None = None
        if isinstance(p, TapParams):
            raw, target = await self._resolve(p)
        else:
            raw = self.argv_for(method, p) or []
        argv = await self._command(p.serial, raw)
        started = time.monotonic()
        result = await self.rpc.adb().shell(p.serial, argv)
        duration_ms = int((time.monotonic() - started) * 1000)
        frames = await self.evidence(p.serial, settled=p.settled, timeout_s=p.settle_timeout_s)
        state = await self.state(p.serial)
        output = (result.stdout + result.stderr)[: self.settings.max_output_chars]
        log.info("%s on %s: %s → %d", method, p.serial, " ".join(argv), result.exit_code)
        return ActionResult(
            ok=result.exit_code == 0,
            action=method,
            command=argv,
            exit_code=result.exit_code,
            output=output,
            duration_ms=duration_ms,
            target=target,
            state=state,
            **frames,
        )

    async def evidence(
        self, serial: str, *, settled: bool, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """The at-action frame, and with ``settled`` the settled frame and the composite."""
        s = self.settings
        await self.sleep(s.at_action_delay_s)
        at_action = await self.rpc.adb().screenshot(serial)
        if not settled:
            return {"at_action_png": at_action}
        from device_bridge.agent.frames import composite, same_frame  # Pillow, on first use

        cap = timeout_s if timeout_s is not None else s.settle_timeout_s
        loop = asyncio.get_running_loop()
        started = loop.time()
        waited = quiet = 0.0
        previous = at_action
        calm = False
        while waited < cap and loop.time() - started < cap:
            await self.sleep(s.settle_poll_s)
            waited += s.settle_poll_s
            frame = await self.rpc.adb().screenshot(serial)
            same = await asyncio.to_thread(same_frame, previous, frame)
            quiet = quiet + s.settle_poll_s if same else 0.0
            previous = frame
            if quiet >= s.settle_quiet_s:
                calm = True
                break
        both = await asyncio.to_thread(composite, at_action, previous, scale=s.composite_scale)
        return {
            "at_action_png": at_action,
            "settled_png": previous,
            "composite_png": both,
            "settled": calm,
        }

    # -- dry run -------------------------------------------------------------------------------

    async def _check(self, p: AgentCheckParams) -> dict[str, Any]:
        outcomes: list[CheckOutcome] = []
        for step in p.steps:
            outcomes.append(await self._check_one(p.serial, step.method, step.params))
        return {"ok": all(o.ok for o in outcomes), "results": [dump(o) for o in outcomes]}

    async def _check_one(self, serial: str, method: str, params: dict[str, Any]) -> CheckOutcome:
        """What the step would meet if sent now; sends nothing to the device."""
        try:
            model = validate_params(method, {**params, "serial": serial})
            if isinstance(model, ShellParams):
                command = model.argv if model.argv is not None else model.command or ""
                size = self._sizes.get(serial)
                screen = self._oriented(serial, size) if size is not None else None
                context = self.rpc.context(serial, screen=screen)
                argv = self.rpc.policy.check_shell(serial, command, context)
                return CheckOutcome(ok=True, command=argv)
            self.rpc.policy.check_ui(serial)
            raw = self.argv_for(method, model)
            if raw is None:  # a tap on an element: its bounds are checked when it is sent
                return CheckOutcome(ok=True)
            if raw[:2] in (["input", "tap"], ["input", "swipe"]) and serial not in self._sizes:
                return CheckOutcome(ok=True, command=raw)  # bounds checked when it is sent
            return CheckOutcome(ok=True, command=await self._command(serial, raw))
        except RpcError as exc:
            data = exc.data or {}
            rule = data.get("rule")
            return CheckOutcome(
                ok=False,
                code=exc.code.value,
                rule=str(rule) if rule is not None else None,
                message=exc.message,
            )


def _valid(method: str, params: dict[str, Any], model: type[BaseModel]) -> Any:
    parsed = validate_params(method, params)
    if not isinstance(parsed, model):  # pragma: no cover - the registry maps them
        raise RpcError(ErrorCode.INTERNAL, f"{method}: unexpected params model")
    return parsed
