"""The bridge runner: config → devices, policy, build, RPC handlers and the link, with a staged
shutdown (thin CLI → settings object → runner).

In-process use (tests, ``droidwire demo``)::

    async with Bridge(config, token="…", settings=DEFAULTS.scaled(0.1)) as bridge:
        await bridge.wait_open()
        ...                         # the controller sees the bridge and its devices

or ``await Bridge(config).run(stop_event)``, which returns when ``stop_event`` is set and raises
:class:`~device_bridge.link_failure.LinkError` (``exit_code`` ≠ 0) when the link ends for good.

What runs while the bridge is up:

* the link (:class:`~device_bridge.connection.Link`): hello with the inventory and capabilities
  on every connect, RPCs through the :class:`~device_bridge.rpc.Dispatcher`;
* a device watcher (``adb track-devices``): every change refreshes the inventory and is
  announced as an ``evt`` on ``$devices`` with the full inventory (exposed devices only);
* a network keeper that keeps ``adb connect``-ed devices connected (``[adb] connect``).

Staged shutdown, in order: stop admitting requests and give running ones ``close_timeout_s``
(the link), close the WebSocket with 1001; end logcat streams; uninstall what this bridge
installed; stop the watcher and keeper; close the device layer and the build workspaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from device_bridge.agent.toolkit import AgentToolkit
from device_bridge.config import ConfigError, HostConfig
from device_bridge.connection import Link
from device_bridge.manage import ManageToolkit
from device_bridge.policy import Policy
from device_bridge.rpc import Dispatcher
from device_bridge.screen import ScreenService
from device_bridge.tunnel import TunnelService
from protocol import redact
from protocol.envelope import DEVICES_CHANNEL, Capabilities, DeviceInfo
from protocol.errors import RpcError
from protocol.settings import DEFAULTS, Settings

__all__ = ["Bridge", "software_version", "ssl_context"]

log = logging.getLogger("droidwire.bridge")

# A device's state in the inventory while its owner has paused sharing (not adb's).
PAUSED_STATE = "paused"
# How often the pause switch (a file that may come and go) is looked at, in seconds.
PAUSE_CHECK_S = 1.0

_UNSET: Any = object()


def software_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("droidwire")
    except PackageNotFoundError:
        return "0+unknown"


def ssl_context(config: HostConfig) -> ssl.SSLContext | None:
    """TLS for ``wss://``: the system's trust store, or ``ca``; verification on unless the
    owner turned it off (then loudly)."""
    cfg = config.controller
    if not any(u.startswith(("wss://", "https://")) for u in cfg.urls):
        return None
    try:
        context = ssl.create_default_context(cafile=cfg.ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"controller.ca {cfg.ca}: cannot load: {exc}") from exc
    if not cfg.verify:
        log.warning("TLS verification of the controller is OFF: anyone on the path can pose as it")
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class Bridge:
    """One bridge process: ``run(stop)`` or ``async with``.

    Pieces may be injected (tests, the demo): ``devices`` (an ``AdbDevices``, not closed here
    when given; ``None`` serves no devices), ``build`` (a ``BuildService``; default: one from
    the config's ``[build]`` table, none without it), ``token`` (default: the config's).
    """

    def __init__(
        self,
        config: HostConfig,
        *,
        settings: Settings | None = None,
        token: str | None = None,
        devices: Any = _UNSET,
        build: Any = _UNSET,
        policy: Policy | None = None,
        software: str | None = None,
        rng: Callable[[], float] | None = None,
    ) -> None:
        self.config = config
        self.settings = config.link.settings(settings or DEFAULTS)
        self.policy = policy or Policy(config.policy)
        self.software = software or software_version()
        self._token = token
        self._rng = rng
        # Seconds a controller that was never reached is retried before giving up (None: the
        # reconnect budget from the start); ``droidwire bridge --start-budget``.
        self.start_budget_s: float | None = None
        self._own_devices = devices is _UNSET
        self.devices = self._make_devices() if devices is _UNSET else devices
        self._own_build = build is _UNSET
        self.build = self._make_build() if build is _UNSET else build
        self.dispatcher = Dispatcher(
            policy=self.policy,
            devices=self.devices,
            build=self.build,
            inventory=self.inventory,
            info=self._info,
            batch_lines=self.settings.logcat_batch_lines,
            flush_s=self.settings.logcat_flush_s,
            stream_max_lines=self.settings.logcat_batch_lines * self.settings.stream_queue_batches,
            queue_batches=self.settings.stream_queue_batches,
        )
        self.agent = AgentToolkit.install(self.dispatcher)  # device.state, ui.*, app.*
        # device.screen.*, device.input
        self.screen = ScreenService.install(self.dispatcher, self.agent)
        self.tunnel = TunnelService.install(self.dispatcher)  # device.tunnel.* (docs/tunnel.md)
        self.manage = ManageToolkit.install(self.dispatcher)  # stage.*, files.*, apps.*, health
        self.link: Link | None = None
        self.opened = asyncio.Event()
        self._devices: dict[str, DeviceInfo] = {}
        self._announced: list[DeviceInfo] = []  # the inventory the controller last heard
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    # -- pieces --------------------------------------------------------------------------------

    def _make_devices(self) -> Any:
        from device_bridge.adb import AdbDevices

        s = self.settings
        return AdbDevices(
            host=self.config.adb.host,
            port=self.config.adb.server_port,  # None: $ANDROID_ADB_SERVER_PORT, else 5037
            call_timeout_s=s.rpc_timeout_s,
            long_timeout_s=s.rpc_long_timeout_s,
            max_workers=s.handler_concurrency,
            batch_lines=s.logcat_batch_lines,
            flush_s=s.logcat_flush_s,
            stream_max_lines=s.logcat_batch_lines * s.stream_queue_batches,
        )

    def _make_build(self) -> Any:
        if self.config.build is None:
            return None
        from device_bridge.build import from_config

        try:
            return from_config(self.config.build, base=self.config.base)
        except RpcError as exc:
            raise ConfigError(f"[build]: {exc.message}") from exc

    def _info(self) -> dict[str, Any]:
        session = self.link.session.session_id if self.link is not None else ""
        return {"software": self.software, "session": session}

    # -- inventory -----------------------------------------------------------------------------

    def inventory(self) -> list[DeviceInfo]:
        """The devices the controller may see (the owner's exposure rules applied, with the
        labels and pool the owner's config gives them); while sharing is paused each says so
        as its state, ``paused`` (docs/security.md)."""
        exposed = []
        for serial, info in sorted(self._devices.items()):
            if self.policy.is_exposed(serial):
                labels, pool = self.policy.config.labels_for(serial)
                if labels or pool is not None:
                    info = info.model_copy(update={"labels": labels, "pool": pool})
                exposed.append(info)
        if self.policy.paused:
            return [d.model_copy(update={"state": PAUSED_STATE}) for d in exposed]
        return exposed

    async def _watch_pause(self) -> None:
        """Say in the log when sharing is paused or resumed (a pause file may come and go at
        any time), and tell the controller: its devices show ``paused``."""
        paused = self.policy.paused
        if paused:
            log.warning("sharing is paused: %s", self._pause_why())
        while True:
            await asyncio.sleep(PAUSE_CHECK_S)
            now = self.policy.paused
            if now == paused:
                continue
            paused = now
            if now:
                log.warning("sharing paused: %s", self._pause_why())
            else:
                log.info("sharing resumed: devices are served again")
            await self._announce()

    def _pause_why(self) -> str:
        pause_file = self.policy.config.pause_file
        if pause_file is not None and os.path.exists(pause_file):
            return (f"the pause file {pause_file} exists (remove it to resume); every request "
                    "for this host's devices is refused")
        return "started with --paused; every request for this host's devices is refused"

    async def _describe(self) -> tuple[Capabilities, list[DeviceInfo]]:
        self._announced = self.inventory()
        return self.dispatcher.capabilities(), self._announced

    async def _device_info(self, serial: str, state: str) -> DeviceInfo:
        profile = self.policy.profile_for(serial)
        if state == "device" and self.devices is not None:
            try:
                facts = await self.devices.info(serial)
                info: DeviceInfo = facts.to_device_info(profile)
                return info
            except (RpcError, ValueError) as exc:
                log.info("device %s: facts unavailable: %s", serial, exc)
        return DeviceInfo(serial=serial, state=state[:32] or "unknown", profile=profile)

    async def _load_inventory(self) -> None:
        if self.devices is None:
            return
        try:
            listed = await self.devices.devices()
        except RpcError as exc:
            log.warning("adb server not reachable yet (%s): starting with no devices", exc.message)
            return
        infos = await asyncio.gather(*(self._device_info(d.serial, d.state) for d in listed))
        self._devices = {i.serial: i for i in infos}

    async def _watch(self) -> None:
        from device_bridge.adb import ABSENT

        assert self.devices is not None
        async with self.devices.watch() as watcher:
            async for change in watcher:
                self.dispatcher.forget(change.serial)
                if change.state == ABSENT:
                    if self._devices.pop(change.serial, None) is None:
                        continue
                else:
                    info = await self._device_info(change.serial, change.state)
                    if self._devices.get(change.serial) == info:
                        continue
                    self._devices[change.serial] = info
                log.info("device %s: %s", change.serial, change.state)
                await self._announce()

    async def _announce(self) -> None:
        link = self.link
        if link is not None and link.is_open:
            current = self.inventory()
            self._announced = current
            devices = [d.model_dump(mode="json", exclude_none=True) for d in current]
            await link.emit(DEVICES_CHANNEL, {"devices": devices})

    # -- running -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set; :class:`LinkError` when the link gives up for good."""
        stop = stop or asyncio.Event()
        cfg = self.config
        if not cfg.controller.urls:
            raise ConfigError("no controller URL: pass --controller or set controller.url")
        token = self._token or cfg.controller.resolve_token()
        redact.add_secret(token)  # never in a log line, whatever logs it (docs/security.md)
        redact.install()
        link = Link(
            cfg.controller.urls,
            token,
            dispatch=self.dispatcher,
            describe=self._describe,
            immediate=self.dispatcher.immediate,
            software=self.software,
            settings=self.settings,
            ssl=ssl_context(cfg),
            random=self._rng or random.SystemRandom().random,
            on_open=self._on_open,
            on_lost=self._on_lost,
            start_budget_s=self.start_budget_s,
        )
        self.link = link
        self.dispatcher.sink = link
        background: list[asyncio.Task[Any]] = []
        try:
            if self.devices is not None:
                if cfg.adb.start_server and self._own_devices:
                    try:
                        await self.devices.start_server()
                    except RpcError as exc:
                        log.warning("%s; the bridge waits for an adb server", exc.message)
                await self._load_inventory()
                background.append(asyncio.create_task(self._watch(), name="droidwire-watch"))
                if cfg.adb.connect:
                    from device_bridge.adb import NetworkKeeper

                    keeper = NetworkKeeper(self.devices, cfg.adb.connect)
                    background.append(asyncio.create_task(keeper.run(), name="droidwire-keeper"))
            background.append(asyncio.create_task(self._watch_pause(), name="droidwire-pause"))
            log.info(
                "bridge %s dialling %s (%d device(s) exposed)",
                self.software,
                ", ".join(link.urls),
                len(self.inventory()),
            )
            await link.run(stop)
        finally:
            await self._shutdown(background)

    async def _shutdown(self, background: list[asyncio.Task[Any]]) -> None:
        self.opened.clear()
        await self.dispatcher.end_streams()
        removed = await self.dispatcher.cleanup(timeout_s=max(5.0, self.settings.close_timeout_s))
        self.manage.close()
        if removed:
            log.info("uninstalled what this bridge installed: %s", ", ".join(removed))
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.devices is not None and self._own_devices:
            await self.devices.aclose()
        if self.build is not None and self._own_build:
            with contextlib.suppress(Exception):
                await self.build.workspaces.stop()

    def _on_open(self, link: Link) -> Coroutine[Any, Any, None] | None:
        # Streams follow the batching the controller asked for in welcome.
        self.dispatcher.batch_lines = link.settings.logcat_batch_lines
        self.dispatcher.flush_s = link.settings.logcat_flush_s
        self.opened.set()
        if self.inventory() != self._announced:
            # A change landed between hello and welcome: the controller must hear of it.
            return self._announce()
        return None

    async def _on_lost(self, link: Link) -> None:
        self.opened.clear()
        await self.dispatcher.end_streams()

    async def wait_open(self, timeout_s: float = 10.0) -> None:
        """Wait until the controller welcomed this bridge (``TimeoutError`` otherwise)."""
        async with asyncio.timeout(timeout_s):
            while not self.opened.is_set():
                if self._task is not None and self._task.done():
                    self._task.result()  # raises the link's error
                    raise RuntimeError("the bridge stopped")
                waiter = asyncio.create_task(self.opened.wait())
                tasks: set[asyncio.Task[Any]] = {waiter}
                if self._task is not None:
                    tasks.add(self._task)
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()

    async def __aenter__(self) -> Bridge:
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self.run(self._stop), name="droidwire-bridge")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Staged shutdown of a bridge started with ``async with``; re-raises its error."""
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            await task
