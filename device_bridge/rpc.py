"""RPC handlers of the bridge: method → handler, each behind the owner's policy.

:class:`Dispatcher` is the link's ``dispatch`` callback (``await dispatcher(method, params)``
→ result dict, or :class:`RpcError`); the handlers that never wait (``ping``, ``bridge.info``,
``devices.list``) are also its ``immediate`` lookup, plain functions the link runs without a
task (:meth:`Dispatcher.immediate`). For every method, in this order:

1. the method must be known and served here (``build`` methods need a build service,
   ``device`` methods an adb layer) — else ``bad_request`` / ``unavailable``;
2. a device-bound method passes the policy's exposure and pause checks **first**, before its
   params are even validated (a hidden device answers ``not_found`` whatever was asked);
3. params are validated by the protocol's models (``bad_request`` with the field errors);
4. the profile's check for this kind of call (shell allow-list, paths, packages …);
5. the device layer runs it; adb errors arrive already translated to typed ``RpcError``.

The dispatcher remembers which packages it installed on each device: ``am start|force-stop|
instrument`` and ``pm clear`` are allowed for them (the policy's ``CommandContext``), and
:meth:`Dispatcher.cleanup` uninstalls what is left when the bridge stops (docs/design.md §6).

Logcat subscriptions stream ``evt`` batches on a channel of their own, at most
``logcat_batch_lines`` lines per batch, flushed after ``logcat_flush_s``
(:mod:`device_bridge.logcat_stream`: the bounded buffer, the ``dropped`` count, how a
subscription ends); the link's drop ends them all (:meth:`Dispatcher.end_streams`).
``source.lookup`` reads the project's sources through :mod:`device_bridge.source_lookup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from device_bridge.logcat_stream import EventSink, LogcatStreams, StreamStats, only_pids
from device_bridge.policy import CommandContext, LogcatScope, Policy, Rule
from device_bridge.source_lookup import lookup_methods, open_index
from protocol.envelope import PROTOCOL_VERSION, Capabilities, DeviceInfo
from protocol.errors import ErrorCode, RpcError
from protocol.methods import (
    BRIDGE_INFO,
    COMPILE,
    DEVICES_LIST,
    INSTALL,
    INSTRUMENT,
    LOGCAT_CLEAR,
    LOGCAT_DUMP,
    LOGCAT_SUBSCRIBE,
    LOGCAT_UNSUBSCRIBE,
    METHODS,
    PING,
    PULL,
    PUSH,
    SCREENSHOT,
    SHELL,
    SOURCE_LOOKUP,
    UNINSTALL,
    BridgeInfoResult,
    CompileParams,
    DeviceParams,
    Empty,
    InstallParams,
    InstallResult,
    InstrumentParams,
    LogcatClearParams,
    LogcatDumpParams,
    LogcatSubscribeParams,
    LogcatUnsubscribeParams,
    Method,
    PingParams,
    PullParams,
    PushParams,
    ShellParams,
    SourceLookupParams,
    SourceLookupResult,
    UninstallParams,
    dump,
)
from protocol.settings import DEFAULTS

if TYPE_CHECKING:
    from device_bridge.adb import AdbDevices
    from device_bridge.build import BuildService

__all__ = ["DEVICE_METHODS", "Dispatcher", "EventSink", "Immediate", "StreamStats"]

log = logging.getLogger("droidwire.bridge.rpc")

#: The core device methods this module serves when the bridge has an adb layer (later
#: toolkits add theirs with :meth:`Dispatcher.add`).
DEVICE_METHODS = frozenset(
    m.name
    for m in (
        DEVICES_LIST, SHELL, LOGCAT_CLEAR, LOGCAT_DUMP, LOGCAT_SUBSCRIBE, LOGCAT_UNSUBSCRIBE,
        SCREENSHOT, PUSH, PULL, INSTALL, UNINSTALL, INSTRUMENT,
    )
)
# The answer to a device method on a bridge without an adb layer (build only).
NO_DEVICES = "this bridge serves no devices"
# Whether the request being served comes from the device's owner (``as_owner``, vouched for by
# the controller): set per request, in the task that serves it.
_AS_OWNER: contextvars.ContextVar[bool] = contextvars.ContextVar("as_owner", default=False)

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: A handler that never waits: params → result dict, or raise :class:`RpcError`.
Immediate = Callable[[dict[str, Any]], dict[str, Any]]
P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
#: A typed handler: the params model (validated by the dispatcher) → the result model, or
#: the result's plain map where building the model would cost (a logcat dump's lines).
Typed = Callable[[P], Awaitable[R | dict[str, Any]]]


class Dispatcher:
    """The bridge's RPC handlers. ``devices``/``build`` may be ``None`` (not served here).

    ``inventory`` returns the exposed devices (for ``devices.list`` and ``bridge.info``);
    ``info`` returns ``bridge.info``'s software/session fields; ``sink`` is set by the runner
    once the link exists (streams need it).
    """

    def __init__(
        self,
        *,
        policy: Policy,
        devices: AdbDevices | None = None,
        build: BuildService | None = None,
        inventory: Callable[[], Sequence[DeviceInfo]] = lambda: (),
        info: Callable[[], dict[str, Any]] = lambda: {},
        sink: EventSink | None = None,
        # Streams
        batch_lines: int | None = None,
        flush_s: float | None = None,
        stream_max_lines: int | None = None,
        queue_batches: int = DEFAULTS.stream_queue_batches,
    ) -> None:
        self._policy = policy
        self.devices = devices
        self.build = build
        self.inventory = inventory
        self.info = info
        self.sink = sink
        self.batch_lines = batch_lines
        self.flush_s = flush_s
        self.stream_max_lines = stream_max_lines
        self.queue_batches = queue_batches
        self.installed: dict[str, set[str]] = {}  # serial -> packages installed through us
        # serial -> packages that were on the device before we installed over them: usable by
        # the run, never cleared or uninstalled by us (what the device told us, not the APK)
        self.updated: dict[str, set[str]] = {}
        self._screens: dict[str, tuple[int, int] | None] = {}
        self.logcat = LogcatStreams(queue_batches=queue_batches, paused=lambda: self.policy.paused)
        self._indexes: dict[str, Any] = {}  # project name -> fixer SourceCodeIndex
        # Other services' streams end with the link too; cached facts go with a device.
        self.stream_enders: list[Callable[[], Awaitable[None]]] = []
        self.forgetters: list[Callable[[str], None]] = []
        # The handlers that never wait (no I/O, no await): the link may run them in the step
        # that read the request (:meth:`immediate`). Each is also served the ordinary way.
        self._immediate: dict[str, Immediate] = {}
        self._handlers: dict[str, Handler] = {}
        self._serve_now(PING, self._ping)
        self._serve_now(BRIDGE_INFO, self._bridge_info)
        self._serve_now(DEVICES_LIST, self._devices_list)
        self.serve(SHELL, self._shell)
        self.serve(LOGCAT_CLEAR, self._logcat_clear)
        self.serve(LOGCAT_DUMP, self._logcat_dump)
        self.serve(LOGCAT_SUBSCRIBE, self._logcat_subscribe)
        self.serve(LOGCAT_UNSUBSCRIBE, self._logcat_unsubscribe)
        self.serve(SCREENSHOT, self._screenshot)
        self.serve(PUSH, self._push)
        self.serve(PULL, self._pull)
        self.serve(INSTALL, self._install)
        self.serve(UNINSTALL, self._uninstall)
        self.serve(INSTRUMENT, self._instrument)
        self.serve(COMPILE, self._compile)
        self.serve(SOURCE_LOOKUP, self._source_lookup)

    @property
    def policy(self) -> Policy:
        """The owner's policy as it applies to the caller of the request being served: the
        controller vouches for the device's owner with ``as_owner`` (``full`` is theirs
        alone; anyone else gets at most ``standard``)."""
        return self._policy.for_caller(as_owner=_AS_OWNER.get())

    @policy.setter
    def policy(self, value: Policy) -> None:
        self._policy = value

    # -- what this bridge serves ---------------------------------------------------------------

    def add(self, method: Method[Any, Any], handler: Handler, *, replace: bool = False) -> None:
        """Serve another registered method (e.g. the agent toolkit's ``ui.*``) with a handler
        of the raw params (:meth:`serve` validates them first).

        ``handler(params)`` gets the raw params; for a device-bound method the exposure and
        pause checks have already run (validate the params and apply the profile's check
        inside). It is listed in the capabilities from then on.
        """
        name = method.name
        if METHODS.get(name) is not method:
            raise ValueError(f"method {name!r} is not registered in protocol.methods")
        if name in self._handlers and not replace:
            raise ValueError(f"method {name!r} is already served")
        self._handlers[name] = handler
        self._immediate.pop(name, None)  # the new handler may wait

    def serve(self, method: Method[P, R], handler: Typed[P, R], *, replace: bool = False) -> None:
        """Serve ``method`` with a typed handler: it gets the params model (validated here,
        after the exposure and pause checks: ``bad_request`` with the field errors) and
        returns the result model (or its plain map)."""

        async def run(params: dict[str, Any]) -> dict[str, Any]:
            out = await handler(method.parse_params(params))
            return out if isinstance(out, dict) else dump(out)

        self.add(method, run, replace=replace)

    def _serve_now(
        self, method: Method[P, R], handler: Callable[[P], R | dict[str, Any]]
    ) -> None:
        """A typed handler that never waits: served both ways (see :meth:`immediate`)."""

        def now(params: dict[str, Any]) -> dict[str, Any]:
            out = handler(method.parse_params(params))
            return out if isinstance(out, dict) else dump(out)

        self._handlers[method.name] = _waits_not(now)
        self._immediate[method.name] = self._checked(method.name, now)

    def methods(self) -> list[str]:
        """Exactly the methods that work here (capabilities never lie)."""
        out = []
        for name in self._handlers:
            capability = METHODS[name].capability
            if capability == "devices" and self.devices is None:
                continue
            if capability == "build" and self.build is None:
                continue
            out.append(name)
        return out

    def capabilities(self) -> Capabilities:
        build: dict[str, Any] = {}
        if self.build is not None:
            build = self.build.capabilities()
        return Capabilities(
            build=bool(build.get("build", False)),
            devices=self.devices is not None,
            toolchain=build.get("toolchain"),
            checker=build.get("checker"),
            projects=list(build.get("projects", [])),
            methods=self.methods(),
        )

    # -- dispatch ------------------------------------------------------------------------------

    async def __call__(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        handler = self._handlers.get(method)
        if handler is None:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"unknown method {method[:128]!r}",
                {"reason": "unknown_method"},
            )
        token = _AS_OWNER.set(params.get("as_owner") is True)
        try:
            self._check(method, params)
            return await handler(params)
        finally:
            _AS_OWNER.reset(token)

    def immediate(self, method: str) -> Immediate | None:
        """``method``'s handler as a plain function if it never waits (``ping``,
        ``bridge.info``, ``devices.list``), else None.

        It runs the same checks as :meth:`__call__` and gives the same result or
        :class:`RpcError`; the link calls it in the step that read the request, so a ping
        costs no task and no trip through the event loop (docs/benchmarks.md). A method
        served through :meth:`add` is never immediate.
        """
        return self._immediate.get(method)

    def _checked(self, method: str, handler: Immediate) -> Immediate:
        def run(params: dict[str, Any]) -> dict[str, Any]:
            token = _AS_OWNER.set(params.get("as_owner") is True)
            try:
                self._check(method, params)
                return handler(params)
            finally:
                _AS_OWNER.reset(token)

        return run

    def _check(self, method: str, params: dict[str, Any]) -> None:
        """What every call passes before its handler: served here, exposure and pause."""
        spec = METHODS[method]
        if spec.capability == "devices" and self.devices is None:
            raise RpcError(ErrorCode.UNAVAILABLE, NO_DEVICES)
        if spec.capability == "build" and self.build is None:
            raise RpcError(ErrorCode.UNAVAILABLE, "this bridge does not build")
        if spec.device_bound:
            serial = params.get("serial")
            if isinstance(serial, str):
                # Exposure and the pause switch before anything else (docs/design.md §6).
                self.policy.check_exposed(serial)

    def adb(self) -> AdbDevices:
        """The adb layer, for this dispatcher's handlers and the toolkits over it; on a
        bridge that serves no devices (build only), ``unavailable``."""
        if self.devices is None:
            raise RpcError(ErrorCode.UNAVAILABLE, NO_DEVICES)
        return self.devices

    def context(self, serial: str, *, screen: tuple[int, int] | None = None) -> CommandContext:
        """The policy's view of the run on ``serial``: the packages we installed there."""
        updated = frozenset(self.updated.get(serial, ()))
        return CommandContext(
            installed_packages=frozenset(self.installed.get(serial, ())) | updated,
            preexisting=updated, screen=screen,
        )

    def forget(self, serial: str) -> None:
        """A device changed state: cached facts about it are stale."""
        self._screens.pop(serial, None)
        for forget in self.forgetters:
            forget(serial)

    # -- bridge --------------------------------------------------------------------------------

    def _ping(self, p: PingParams) -> dict[str, Any]:
        return {"payload": p.payload}

    def _bridge_info(self, p: Empty) -> BridgeInfoResult:
        info = {
            "software": "",
            "protocol": PROTOCOL_VERSION,
            "session": "",
            **self.info(),
            "caps": self.capabilities(),
            "devices": list(self.inventory()),
        }
        return BRIDGE_INFO.result.model_validate(info)

    def _devices_list(self, p: Empty) -> dict[str, Any]:
        return {"devices": [_device(d) for d in self.inventory()]}

    # -- shell ---------------------------------------------------------------------------------

    async def _shell(self, p: ShellParams) -> dict[str, Any]:
        command: str | list[str] = p.argv if p.argv is not None else p.command or ""
        screen = await self._screen(p.serial) if _first_word(command) == "input" else None
        argv = self.policy.check_shell(p.serial, command, self.context(p.serial, screen=screen))
        result = await self.adb().shell(p.serial, argv, timeout_s=p.timeout_s)
        return dump(result)

    async def _screen(self, serial: str) -> tuple[int, int] | None:
        if serial not in self._screens:
            facts = await self.adb().info(serial)
            self._screens[serial] = facts.screen
        return self._screens[serial]

    # -- logcat --------------------------------------------------------------------------------

    async def _scope(
        self, serial: str, buffers: Sequence[str] | None, fmt: str
    ) -> frozenset[int] | None:
        """The pids a logcat read is limited to, or None for every line."""
        scope: LogcatScope = self.policy.check_logcat(
            serial, self.context(serial), buffers=buffers or ("main",)
        )
        if scope.unrestricted:
            return None
        if fmt != "threadtime":
            raise RpcError(
                ErrorCode.FORBIDDEN,
                "a logcat limited to the app under test needs the threadtime format",
                {"rule": Rule.LOGCAT_SCOPE.value},
            )
        assert scope.packages is not None
        result = await self.adb().shell(serial, ["pidof", *sorted(scope.packages)])
        pids = frozenset(int(x) for x in result.stdout.split() if x.isdigit())
        if not pids:
            raise RpcError(
                ErrorCode.FORBIDDEN,
                "the app under test is not running: its logs are the only ones shown here",
                {"rule": Rule.LOGCAT_SCOPE.value},
            )
        return pids

    async def _logcat_clear(self, p: LogcatClearParams) -> dict[str, Any]:
        # Clearing reveals nothing, and a run starts with it (docs/design.md §5), so every profile
        # may clear once the device is exposed and sharing is not paused.
        self.policy.check_exposed(p.serial)
        await self.adb().logcat_clear(p.serial, buffers=p.buffers)
        return {}

    async def _logcat_dump(self, p: LogcatDumpParams) -> dict[str, Any]:
        pids = await self._scope(p.serial, p.buffers, p.format)
        lines = await self.adb().logcat_dump(
            p.serial, format=p.format, lines=p.lines, buffers=p.buffers, pid=p.pid
        )
        return {"lines": only_pids(lines, pids)}

    async def _logcat_subscribe(self, p: LogcatSubscribeParams) -> dict[str, Any]:
        pids = await self._scope(p.serial, p.buffers, p.format)
        sink = self.sink
        if sink is None:
            raise RpcError(ErrorCode.UNAVAILABLE, "streams need an open link")
        self.logcat.check_room()
        stream = await self.adb().logcat_follow(
            p.serial,
            format=p.format,
            buffers=p.buffers,
            pid=p.pid,
            tail=p.tail,
            batch_lines=self.batch_lines,
            flush_s=self.flush_s,
            max_lines=self.stream_max_lines,
        )
        return {"channel": self.logcat.start(p.serial, stream, pids, sink)}

    async def _logcat_unsubscribe(self, p: LogcatUnsubscribeParams) -> dict[str, Any]:
        await self.logcat.unsubscribe(p.channel)
        return {}

    async def end_streams(self) -> None:
        """The link dropped: end every subscription (the controller subscribes again)."""
        await self.logcat.end_all()
        for end in self.stream_enders:
            with contextlib.suppress(Exception):
                await end()

    @property
    def subscriptions(self) -> list[str]:
        return self.logcat.channels

    def stream_stats(self, channel: str) -> StreamStats | None:
        return self.logcat.stats(channel)

    # -- screen, files -------------------------------------------------------------------------

    async def _screenshot(self, p: DeviceParams) -> dict[str, Any]:
        self.policy.check_screenshot(p.serial)
        return {"png": await self.adb().screenshot(p.serial)}

    async def _push(self, p: PushParams) -> dict[str, Any]:
        path = self.policy.check_push(p.serial, p.path)
        size = await self.adb().push(p.serial, path, p.data, mode=p.mode)
        return {"size": size}

    async def _pull(self, p: PullParams) -> dict[str, Any]:
        path = self.policy.check_pull(p.serial, p.path)
        return {"data": await self.adb().pull(p.serial, path, max_bytes=p.max_bytes)}

    # -- packages ------------------------------------------------------------------------------

    async def _install(self, p: InstallParams) -> InstallResult:
        self.policy.check_install(p.serial)
        if p.apk is None:
            # Only APKs sent through droidwire are installed (docs/design.md §6): a path would let
            # the controller name any file on this host.
            raise RpcError(
                ErrorCode.FORBIDDEN,
                "install takes APK bytes sent through droidwire, not a path on the bridge host",
                {"rule": Rule.INSTALL_NOT_ALLOWED.value},
            )
        installed = await self.adb().install(
            p.serial,
            p.apk,
            replace=p.replace,
            allow_test=p.allow_test,
            grant_permissions=p.grant_permissions and p.as_owner,
        )
        package = installed.package
        if package and installed.existed:
            # An update of what was there before: the run may use it, never remove it.
            self.updated.setdefault(p.serial, set()).add(package)
        elif package:
            self.installed.setdefault(p.serial, set()).add(package)
        return InstallResult(package=package, existed=installed.existed)

    async def _uninstall(self, p: UninstallParams) -> dict[str, Any]:
        self.policy.check_uninstall(p.serial, p.package, self.context(p.serial))
        await self.adb().uninstall(p.serial, p.package)
        self.installed.get(p.serial, set()).discard(p.package)
        return {}

    async def _instrument(self, p: InstrumentParams) -> dict[str, Any]:
        self.policy.check_instrument(p.serial, f"{p.package}/{p.runner}", self.context(p.serial))
        result = await self.adb().instrument(
            p.serial, p.package, p.runner, args=dict(p.args), timeout_s=p.timeout_s
        )
        return dump(result)

    async def cleanup(self, *, timeout_s: float = 30.0) -> list[str]:
        """Uninstall what this bridge installed and is still there (bridge stopping)."""
        removed: list[str] = []
        if self.devices is None:
            return removed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                for serial, packages in list(self.installed.items()):
                    for package in sorted(packages):
                        try:
                            await self.devices.uninstall(serial, package)
                            removed.append(f"{serial}:{package}")
                        except RpcError as exc:
                            log.info("cleanup: uninstall %s on %s: %s", package, serial, exc)
                    packages.clear()
        return removed

    # -- build and sources ---------------------------------------------------------------------

    async def _compile(self, p: CompileParams) -> dict[str, Any]:
        assert self.build is not None
        kwargs = {"timeout_s": p.timeout_s} if p.timeout_s is not None else {}
        outcome = await self.build.compile(p.project, p.test_code, **kwargs)
        return dump(outcome.to_result())

    async def _source_lookup(self, p: SourceLookupParams) -> SourceLookupResult:
        assert self.build is not None
        project = self.build.workspaces.projects.get(p.project)
        index = self._indexes.get(project.name)
        if index is None:
            index = await asyncio.to_thread(open_index, project.path)
            self._indexes[project.name] = index
        found = await asyncio.to_thread(lookup_methods, index, list(p.names))
        return SourceLookupResult(methods=found)


# -- helpers -------------------------------------------------------------------------------------


def _waits_not(handler: Immediate) -> Handler:
    """A handler that never waits, served the ordinary way (awaited by the link's task)."""

    async def run(params: dict[str, Any]) -> dict[str, Any]:
        return handler(params)

    return run


def _device(info: DeviceInfo) -> dict[str, Any]:
    return info.model_dump(mode="json", exclude_none=True)


def _first_word(command: str | Sequence[str]) -> str:
    if isinstance(command, str):
        return command.strip().split(" ", 1)[0]
    return command[0] if command else ""
