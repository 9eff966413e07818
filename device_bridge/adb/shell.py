"""Commands on a device: ``shell`` (protocol v2, else the legacy shell), raw ``exec:`` output,
``screencap``, logcat (clear, dump, follow), any command's output streamed in batches, raw
stream sockets, and the device facts read with them (:meth:`ShellCalls.info`)."""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Iterable, Sequence

from device_bridge.adb.connection import _Abort
from device_bridge.adb.errors import translate
from device_bridge.adb.host import HostCalls
from device_bridge.adb.models import DeviceFacts, ShellSocket
from device_bridge.adb.streams import LineStream, RawDecoder, ShellV2Decoder
from protocol.errors import ErrorCode, RpcError
from protocol.methods import ShellResult
from protocol.settings import DEFAULTS

__all__ = ["ShellCalls"]

_PROP_LINE = re.compile(r"^\[([^\]]+)\]: \[(.*)\]$")
_WM_SIZE = re.compile(r"(Physical|Override) size: (\d+)x(\d+)")
_BATTERY_LEVEL = re.compile(r"^\s*level: (\d+)\s*$", re.M)
_V1_EXIT = "X4EXIT:"


class ShellCalls(HostCalls):
    """Commands run on a device, to their end or streamed."""

    async def info(self, serial: str) -> DeviceFacts:
        """Model, manufacturer, release, SDK, ABI, battery level and screen size."""
        props_out, battery_out, wm_out = await asyncio.gather(
            self.shell(serial, ["getprop"]),
            self.shell(serial, ["dumpsys", "battery"]),
            self.shell(serial, ["wm", "size"]),
        )
        props: dict[str, str] = {}
        for line in props_out.stdout.splitlines():
            match = _PROP_LINE.match(line.strip())
            if match:
                props[match[1]] = match[2]
        sizes = {m[1]: (int(m[2]), int(m[3])) for m in _WM_SIZE.finditer(wm_out.stdout)}
        level = _BATTERY_LEVEL.search(battery_out.stdout)
        sdk = props.get("ro.build.version.sdk", "")
        return DeviceFacts(
            serial=serial,
            model=props.get("ro.product.model") or None,
            manufacturer=props.get("ro.product.manufacturer") or None,
            release=props.get("ro.build.version.release") or None,
            sdk=int(sdk) if sdk.isdigit() else None,
            abi=props.get("ro.product.cpu.abi") or None,
            battery=int(level[1]) if level else None,
            screen=sizes.get("Override") or sizes.get("Physical"),
            props=props,
        )

    # -- shell ---------------------------------------------------------------------------------

    async def shell(
        self,
        serial: str,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
    ) -> ShellResult:
        """Run ``argv`` (quoted with ``shlex.join``) and return its exit code and output.

        Uses the shell protocol v2 (separate stderr, real exit code) when the device has it,
        else the legacy shell with adbutils' ``; echo X4EXIT:$?`` trick (stderr then arrives
        mixed into stdout). Output over ``max_output_bytes`` is dropped and ``truncated`` set;
        the command still runs to its end or to ``timeout``.
        """
        self._check_serial(serial)
        if not argv:
            raise RpcError(ErrorCode.BAD_REQUEST, "empty command")
        command = shlex.join(argv)
        limit = self.call_timeout_s if timeout_s is None else timeout_s
        cap = self.max_output_bytes if max_output_bytes is None else max_output_bytes
        v2 = "shell_v2" in await self.features(serial)

        def run(abort: _Abort) -> ShellResult:
            if v2:
                return self._shell_v2(abort, serial, command, limit, cap)
            return self._shell_v1(abort, serial, command, limit, cap)

        return await self._call(run, serial=serial, timeout_s=limit, what=f"shell {argv[0]}")

    def _shell_v2(
        self, abort: _Abort, serial: str, command: str, limit: float, cap: int
    ) -> ShellResult:
        conn = self._open(abort, serial, f"shell,v2,raw:{command}", limit)
        stdout, stderr = bytearray(), bytearray()
        truncated = False
        exit_code: int | None = None
        with conn:
            while exit_code is None:
                header = conn.read_exact(5)
                kind, length = header[0], int.from_bytes(header[1:5], "little")
                payload = conn.read_exact(length) if length else b""
                if kind == 3:
                    exit_code = payload[0] if payload else 255
                elif kind in (1, 2):
                    target = stdout if kind == 1 else stderr
                    room = cap - len(stdout) - len(stderr)
                    if len(payload) > room:
                        truncated = True
                        payload = payload[: max(room, 0)]
                    target += payload
        return ShellResult(
            exit_code=exit_code,
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=stderr.decode("utf-8", errors="replace"),
            truncated=truncated,
        )

    def _shell_v1(
        self, abort: _Abort, serial: str, command: str, limit: float, cap: int
    ) -> ShellResult:
        conn = self._open(abort, serial, f"shell:{command}; echo {_V1_EXIT}$?", limit)
        out = bytearray()
        tail = b""  # the marker must survive truncation: keep the last bytes apart
        truncated = False
        with conn:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data = tail + chunk
                tail = data[-64:]
                data = data[:-64]
                room = cap - len(out)
                if len(data) > room:
                    truncated = True
                    data = data[: max(room, 0)]
                out += data
        out += tail
        marker = out.rfind(_V1_EXIT.encode())
        if marker < 0:
            raise RpcError(
                ErrorCode.DEVICE_OFFLINE,
                f"shell on {serial} ended without an exit status",
                {"serial": serial},
            )
        code_text = out[marker + len(_V1_EXIT) :].strip()
        exit_code = int(code_text) if code_text.isdigit() else 255
        return ShellResult(
            exit_code=exit_code,
            stdout=out[:marker].decode("utf-8", errors="replace"),
            truncated=truncated,
        )

    async def exec_out(
        self,
        serial: str,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """Raw stdout of ``argv`` over ``exec:`` (binary safe, no PTY, no exit code)."""
        self._check_serial(serial)
        command = shlex.join(argv)
        limit = self.call_timeout_s if timeout_s is None else timeout_s
        cap = self.max_output_bytes if max_bytes is None else max_bytes

        def run(abort: _Abort) -> bytes:
            conn = self._open(abort, serial, f"exec:{command}", limit)
            out = bytearray()
            with conn:
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return bytes(out)
                    out += chunk
                    if len(out) > cap:
                        raise RpcError(
                            ErrorCode.BAD_REQUEST,
                            f"{argv[0]} output exceeds {cap} bytes",
                            {"serial": serial},
                        )

        return await self._call(run, serial=serial, timeout_s=limit, what=f"exec {argv[0]}")

    async def screenshot(self, serial: str, *, timeout_s: float | None = None) -> bytes:
        """``screencap -p``: PNG bytes, checked for the PNG signature."""
        # A PNG must fit in one frame (docs/design.md §3 limits), whatever the shell output cap is.
        cap = DEFAULTS.max_frame_bytes - 64 * 1024
        png = await self.exec_out(serial, ["screencap", "-p"], timeout_s=timeout_s, max_bytes=cap)
        if not png.startswith(b"\x89PNG\r\n\x1a\n"):
            raise RpcError(
                ErrorCode.UNAVAILABLE, f"screencap on {serial} returned no PNG", {"serial": serial}
            )
        return png

    # -- logcat --------------------------------------------------------------------------------

    @staticmethod
    def _logcat_args(
        *,
        format: str = "threadtime",
        buffers: Iterable[str] | None = None,
        pid: int | None = None,
    ) -> list[str]:
        args = ["-v", format]
        if buffers:
            args += ["-b", ",".join(buffers)]
        if pid is not None:
            args += ["--pid", str(int(pid))]
        return args

    async def logcat_clear(self, serial: str, *, buffers: Iterable[str] | None = None) -> None:
        argv = ["logcat", "-c"] + (["-b", ",".join(buffers)] if buffers else [])
        result = await self.shell(serial, argv)
        if result.exit_code != 0:
            raise RpcError(
                ErrorCode.INTERNAL,
                f"logcat -c on {serial} failed: {result.stderr.strip()}",
                {"serial": serial, "exit_code": result.exit_code},
            )

    async def logcat_dump(
        self,
        serial: str,
        *,
        format: str = "threadtime",
        lines: int | None = None,
        buffers: Iterable[str] | None = None,
        pid: int | None = None,
        timeout_s: float | None = None,
    ) -> list[str]:
        """``logcat -d`` (``-t N`` for the last N lines): the buffer's lines, in order."""
        argv = ["logcat", "-d", *self._logcat_args(format=format, buffers=buffers, pid=pid)]
        if lines is not None:
            argv += ["-t", str(int(lines))]
        result = await self.shell(serial, argv, timeout_s=timeout_s)
        if result.exit_code != 0:
            raise RpcError(
                ErrorCode.INTERNAL,
                f"logcat -d on {serial} failed: {result.stderr.strip()}",
                {"serial": serial, "exit_code": result.exit_code},
            )
        return [line.rstrip("\r") for line in result.stdout.splitlines()]

    async def logcat_follow(
        self,
        serial: str,
        *,
        format: str = "threadtime",
        buffers: Iterable[str] | None = None,
        pid: int | None = None,
        tail: int | None = None,
        batch_lines: int | None = None,
        flush_s: float | None = None,
        max_lines: int | None = None,
        lossless: bool = False,
    ) -> LineStream:
        """Follow logcat live: an async iterator of :class:`~protocol.methods.LogBatch`.

        Without ``tail`` it starts with the whole buffer, as ``logcat`` does; ``tail=N`` (N ≥ 1)
        starts with the last N lines (``-T N``). ``lossless`` never drops lines (the device
        waits instead). Close it with ``aclose()`` (``async with``), which also ends the
        ``logcat`` on the device.
        """
        argv = ["logcat", *self._logcat_args(format=format, buffers=buffers, pid=pid)]
        if tail:
            argv += ["-T", str(int(tail))]
        return await self.stream(
            serial,
            argv,
            v2=False,
            batch_lines=batch_lines,
            flush_s=flush_s,
            max_lines=max_lines,
            lossless=lossless,
            name=f"logcat {serial}",
        )

    async def stream(
        self,
        serial: str,
        argv: Sequence[str],
        *,
        v2: bool = True,
        batch_lines: int | None = None,
        flush_s: float | None = None,
        max_lines: int | None = None,
        lossless: bool = False,
        name: str | None = None,
    ) -> LineStream:
        """Run ``argv`` and stream its output lines in batches (see :class:`LineStream`).

        ``v2`` uses the shell protocol when the device has it, so the stream ends with the
        command's ``exit_code``.
        """
        self._check_serial(serial)
        command = shlex.join(argv)
        use_v2 = v2 and "shell_v2" in await self.features(serial)
        service = f"shell,v2,raw:{command}" if use_v2 else f"shell:{command}"
        if not self._streams.acquire(blocking=False):
            raise RpcError(ErrorCode.BUSY, "too many device streams open on this bridge")
        try:
            conn = await self._call(
                lambda abort: self._open(abort, serial, service, self.connect_timeout_s),
                serial=serial,
                what=f"open {argv[0]}",
                release=lambda abandoned: abandoned.close(),
            )
        except BaseException:
            self._streams.release()
            raise
        sock = conn.conn
        sock.settimeout(None)  # the reader blocks; aclose() shuts the socket to stop it
        decoder: RawDecoder | ShellV2Decoder = ShellV2Decoder() if use_v2 else RawDecoder()

        def done() -> None:
            self._live.discard(stream)
            self._streams.release()

        stream = LineStream(
            sock,
            decoder=decoder,
            batch_lines=batch_lines or self.batch_lines,
            flush_s=flush_s if flush_s is not None else self.flush_s,
            max_lines=max_lines or self.stream_max_lines,
            stall_s=None if lossless else self.stall_s,
            name=name or f"{argv[0]} {serial}",
            on_done=done,
        )
        self._live.add(stream)
        return stream.start()

    async def open_socket(self, serial: str, service: str, *, what: str) -> ShellSocket:
        """A raw socket on ``service`` of ``serial`` (a persistent shell, ``exec:`` output
        read as bytes, a tunnel's stream), in blocking mode. It counts as one of the bridge's
        device streams until closed. Opened on the event loop, not in the pool: a stream's
        open is on the path of its client's first answer, and a pool thread waiting for the
        interpreter behind a busy loop took milliseconds more (docs/benchmarks.md)."""
        self._check_serial(serial)
        if self._closed:
            raise RpcError(ErrorCode.UNAVAILABLE, "the device layer is closed")
        if not self._streams.acquire(blocking=False):
            raise RpcError(ErrorCode.BUSY, "too many device streams open on this bridge")
        try:
            async with asyncio.timeout(self.call_timeout_s):
                sock = await self._open_on_loop(serial, service)
        except TimeoutError as exc:
            self._streams.release()
            raise RpcError(ErrorCode.TIMEOUT,
                           f"{what} on {serial} took longer than {self.call_timeout_s:g} s",
                           {"serial": serial}) from exc
        except Exception as exc:
            self._streams.release()
            raise translate(exc, serial) from exc
        except BaseException:
            self._streams.release()
            raise
        if self._closed:  # closed meanwhile: nothing may outlive aclose()
            sock.close()
            self._streams.release()
            raise RpcError(ErrorCode.UNAVAILABLE, "the device layer is closed")
        sock.setblocking(True)
        return ShellSocket(sock, self._streams.release)
