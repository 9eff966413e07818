"""The live screen and remote control on the bridge (docs/screen.md).

:class:`ScreenService` serves ``device.screen.subscribe``/``unsubscribe`` and ``device.input``
(merged into the dispatcher's table, which has applied the exposure and pause checks).

Screen streams (one per subscription; the controller subscribes once per device and codec and
fans the frames out to every viewer):

* **source** — ``codec: h264``: ``screenrecord --output-format=h264 -`` over ``exec:`` (the
  phone's own encoder), cut into access units on the bridge
  (:class:`~device_bridge.screen_media.AnnexB`, read by
  :class:`~device_bridge.screen_media.H264Reader`); when the device
  gives no H.264 picture within ``probe_s`` (no ``screenrecord``, an old Android, a refusal) the
  stream falls back to ``screencap`` pictures as JPEG, and the subscribe result says so
  (``codec``, ``source``). ``jpeg``/``png``: ``screencap -p`` polled at most ``max_fps`` times a
  second, scaled to ``max_side``; a picture identical to the last one sent is not sent again
  (a still screen costs the link nothing);
* **back-pressure** — a frame is sent only when the link's send queue is empty
  (:meth:`device_bridge.connection.Link.idle`): RPC results and logcat batches never wait
  behind a queue of pictures, at most behind the one being written. A screencap source reads
  the next picture only then (the frame rate follows the link); an H.264 source keeps reading
  the device and *skips* what the link cannot take — and since a skipped picture breaks the
  ones that refer to it, it then skips up to the next key frame. Stale frames are never queued.

Remote control: every ``device.input`` passes ``Policy.check_ui`` and then the very argv
checks an agent's ``ui.*`` action meets (:meth:`AgentToolkit._command`: the ``standard``
allow-list with the screen's bounds, or the ``full`` profile's own), then goes down **one
persistent shell per device** (:class:`~device_bridge.input_shell.InputShell`, a
``shell,v2,raw:`` session kept open), not one adb connection per event. Coordinates arrive as
fractions of the screen as shown and are mapped with ``wm size`` and the current rotation (``dumpsys window``). ``power`` is a key
like the others: the profile's allow-list decides (``standard`` allows ``input keyevent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import shlex
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from device_bridge.agent.state import parse_rotation
from device_bridge.input_shell import InputShell
from device_bridge.screen_media import AnnexB, H264Reader, to_picture
from protocol.errors import ErrorCode, RpcError
from protocol.screen_methods import (
    INPUT,
    INPUT_KEYS,
    SCREEN_SUBSCRIBE,
    SCREEN_UNSUBSCRIBE,
    InputParams,
    ScreenFrame,
    ScreenSubscribeParams,
    ScreenUnsubscribeParams,
)

if TYPE_CHECKING:
    from device_bridge.adb import ShellSocket
    from device_bridge.agent.toolkit import AgentToolkit
    from device_bridge.rpc import Dispatcher

# AnnexB, InputShell and to_picture live in screen_media / input_shell; importable from here too.
__all__ = ["AnnexB", "InputShell", "ScreenService", "to_picture"]

log = logging.getLogger("droidwire.bridge.screen")

MAX_SCREEN_STREAMS = 8
LONG_PRESS_MS = 800
PROBE_S = 5.0


class IdleSink(Protocol):
    """The link as a screen stream sees it (:class:`~device_bridge.connection.Link`)."""

    async def emit(self, channel: str, data: Any) -> bool: ...
    async def idle(self) -> bool: ...


# -- screen streams --------------------------------------------------------------------------


@dataclass(eq=False)
class _Stream:
    channel: str
    serial: str
    codec: str
    max_fps: int
    max_side: int
    task: asyncio.Task[None] | None = None
    sock: ShellSocket | None = None
    reason: str | None = None
    sent: int = 0
    skipped: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ScreenService:
    """The bridge's screen streams and input shells (see the module docstring)."""

    def __init__(self, rpc: Dispatcher, toolkit: AgentToolkit, *, probe_s: float = PROBE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.rpc = rpc
        self.toolkit = toolkit
        self.probe_s = probe_s
        self._clock = clock
        self._streams: dict[str, _Stream] = {}
        self._shells: dict[str, InputShell] = {}
        self._shell_locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def install(cls, rpc: Dispatcher, toolkit: AgentToolkit, **options: Any) -> ScreenService:
        service = cls(rpc, toolkit, **options)
        rpc.serve(SCREEN_SUBSCRIBE, service._subscribe, replace=True)
        rpc.serve(SCREEN_UNSUBSCRIBE, service._unsubscribe, replace=True)
        rpc.serve(INPUT, service._input, replace=True)
        rpc.stream_enders.append(service.end_streams)
        rpc.forgetters.append(service.forget)
        return service

    @property
    def streams(self) -> list[str]:
        return list(self._streams)

    # -- subscribe -------------------------------------------------------------------------

    async def _subscribe(self, p: ScreenSubscribeParams) -> dict[str, Any]:
        self.rpc.policy.check_ui(p.serial)
        self.rpc.policy.check_screenshot(p.serial)
        sink = self.rpc.sink
        if sink is None or not hasattr(sink, "idle"):
            raise RpcError(ErrorCode.UNAVAILABLE, "streams need an open link")
        if len(self._streams) >= MAX_SCREEN_STREAMS:
            raise RpcError(ErrorCode.BUSY, f"at most {MAX_SCREEN_STREAMS} screen streams")
        stream = _Stream(f"sc-{uuid.uuid4().hex}", p.serial, p.codec, p.max_fps, p.max_side)
        source = "screencap"
        reader: H264Reader | None = None
        if p.codec == "h264":
            reader = await self._start_h264(stream)
            if reader is None:
                stream.codec = "jpeg"
            else:
                source = "screenrecord"
        self._streams[stream.channel] = stream
        loop = asyncio.get_running_loop()
        pump = self._pump_h264(stream, sink, reader) if reader is not None else (
            self._pump_pictures(stream, sink))
        stream.task = loop.create_task(pump, name=f"droidwire-screen-{p.serial}")
        log.info("screen of %s streaming on %s (%s, %s)", p.serial, stream.channel,
                 stream.codec, source)
        return {"channel": stream.channel, "codec": stream.codec, "source": source}

    async def _start_h264(self, stream: _Stream) -> H264Reader | None:
        """Start ``screenrecord``; None when it gives no picture within ``probe_s``."""
        size = await self._oriented_size(stream.serial)
        scale = min(1.0, stream.max_side / max(size))
        w, h = (max(2, int(size[0] * scale)) & ~1, max(2, int(size[1] * scale)) & ~1)
        argv = ["screenrecord", "--output-format=h264", f"--size={w}x{h}",
                "--bit-rate=2000000", "--time-limit=180", "-"]
        try:
            sock = await self.rpc.adb().open_socket(
                stream.serial, "exec:" + shlex.join(argv), what="screenrecord")
        except RpcError as exc:
            log.info("screenrecord on %s unavailable: %s", stream.serial, exc)
            return None
        reader = H264Reader(sock, asyncio.get_running_loop(), w, h, self._clock)
        try:
            async with asyncio.timeout(self.probe_s):
                await reader.first.wait()
        except TimeoutError:
            pass
        if not reader.units:
            reader.close()
            log.info("screenrecord on %s gave no H.264 picture: screencap instead", stream.serial)
            return None
        stream.sock = sock
        return reader

    async def _pump_pictures(self, stream: _Stream, sink: Any) -> None:
        last_digest = b""
        n = 0
        interval = 1.0 / stream.max_fps
        try:
            while True:
                if not await sink.idle():
                    return
                if self.rpc.policy.paused:
                    stream.reason = "paused"  # the owner's kill switch ends live streams too
                    return
                started = time.monotonic()
                png = await self.rpc.adb().screenshot(stream.serial)
                n += 1
                digest = hashlib.sha256(png).digest()
                if digest != last_digest:
                    data, w, h = await asyncio.to_thread(to_picture, png, stream.codec,
                                                         stream.max_side)
                    last_digest = digest
                    frame = ScreenFrame(codec=stream.codec, data=data, key=True, w=w, h=h, n=n,
                                        ts=self._clock() * 1000)
                    if not await sink.emit(stream.channel, frame.to_wire()):
                        return
                    stream.sent += 1
                rest = interval - (time.monotonic() - started)
                if rest > 0:
                    await asyncio.sleep(rest)
        except RpcError as exc:
            stream.reason = f"{exc.code.value}: {exc.message}"[:200]
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("screen stream %s failed", stream.channel)
            stream.reason = "internal"
        finally:
            await self._finish(stream, sink)

    async def _pump_h264(self, stream: _Stream, sink: Any, reader: H264Reader) -> None:
        need_key = False
        try:
            while True:
                unit = await reader.next()
                if unit is None:
                    # screenrecord stops at its time limit (3 minutes on a phone): start it
                    # again while someone watches; a start that fails ends the stream.
                    reader.close()
                    again = await self._start_h264(stream) if reader.sent else None
                    if again is None:
                        stream.reason = reader.reason or "closed"
                        return
                    reader = again
                    need_key = True
                    continue
                reader.sent += 1
                data, key, n, ts = unit
                if need_key and not key:
                    stream.skipped += 1
                    continue
                if reader.backlog() > 0 and not key:
                    # The link fell behind the device: skip to the next key frame.
                    need_key = True
                    stream.skipped += 1
                    continue
                if not await sink.idle():
                    return
                if self.rpc.policy.paused:
                    stream.reason = "paused"  # the owner's kill switch ends live streams too
                    return
                need_key = False
                frame = ScreenFrame(codec="h264", data=data, key=key, w=reader.w, h=reader.h,
                                    n=n, ts=ts)
                if not await sink.emit(stream.channel, frame.to_wire()):
                    return
                stream.sent += 1
        finally:
            reader.close()
            await self._finish(stream, sink)

    async def _finish(self, stream: _Stream, sink: Any) -> None:
        if self._streams.pop(stream.channel, None) is not None and stream.reason != "link":
            with contextlib.suppress(Exception):
                end = ScreenFrame(eof=True, reason=stream.reason or "closed")
                await sink.emit(stream.channel, end.to_wire())
        stream.done.set()

    async def _unsubscribe(self, p: ScreenUnsubscribeParams) -> dict[str, Any]:
        stream = self._streams.get(p.channel)
        if stream is None:
            return {}
        stream.reason = "unsubscribed"
        await self._stop(stream)
        return {}

    async def _stop(self, stream: _Stream) -> None:
        if stream.sock is not None:
            stream.sock.close()
        if stream.task is not None and not stream.task.done():
            stream.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await stream.task

    async def end_streams(self) -> None:
        """The link dropped: end every stream (the controller subscribes again)."""
        for stream in list(self._streams.values()):
            stream.reason = "link"
            self._streams.pop(stream.channel, None)
            await self._stop(stream)
        for shell in self._shells.values():
            shell.close()
        self._shells.clear()

    def forget(self, serial: str) -> None:
        shell = self._shells.pop(serial, None)
        if shell is not None:
            shell.close()

    # -- input -----------------------------------------------------------------------------

    async def _oriented_size(self, serial: str) -> tuple[int, int]:
        size = await self.toolkit.screen_size(serial)
        window = await self.rpc.adb().shell(serial, ["dumpsys", "window"])
        rotation = parse_rotation(window.stdout)
        return size if rotation % 2 == 0 else (size[1], size[0])

    def argv_for(self, p: InputParams, size: tuple[int, int]) -> list[str]:
        """The ``input`` argv of one remote-control event, in pixels of the rotated screen."""
        w, h = size

        def px(fx: float | None, fy: float | None) -> list[str]:
            assert fx is not None and fy is not None
            return [str(min(int(fx * w), w - 1)), str(min(int(fy * h), h - 1))]

        if p.action == "tap":
            return ["input", "tap", *px(p.x, p.y)]
        if p.action == "long_press":
            at = px(p.x, p.y)
            return ["input", "swipe", *at, *at, str(p.duration_ms or LONG_PRESS_MS)]
        if p.action == "swipe":
            return ["input", "swipe", *px(p.x, p.y), *px(p.x2, p.y2), str(p.duration_ms or 300)]
        if p.action == "text":
            assert p.text is not None
            return ["input", "text", p.text.replace(" ", "%s")]
        assert p.key is not None
        return ["input", "keyevent", INPUT_KEYS[p.key]]

    async def _input(self, p: InputParams) -> dict[str, Any]:
        self.rpc.policy.check_ui(p.serial)
        size = await self._oriented_size(p.serial) if p.x is not None else (1, 1)
        argv = await self.toolkit._command(p.serial, self.argv_for(p, size))
        shell = await self._shell(p.serial)
        code = await shell.run(argv)
        return {"ok": code == 0, "exit_code": code, "argv": argv}

    async def _shell(self, serial: str) -> InputShell:
        lock = self._shell_locks.setdefault(serial, asyncio.Lock())
        async with lock:
            shell = self._shells.get(serial)
            if shell is None or shell.closed:
                sock = await self.rpc.adb().open_socket(serial, "shell,v2,raw:", what="input shell")
                shell = self._shells[serial] = InputShell(sock, serial=serial)
            return shell
