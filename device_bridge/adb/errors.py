"""adb failures → the protocol's typed errors (errors are translated at the boundary).

The adb client (:mod:`.wire`) raises ``AdbError`` with the adb server's ``FAIL`` text,
``AdbTimeout`` on a socket timeout, ``AdbConnectionError`` when the server cannot be reached,
and plain ``OSError`` / ``EOFError`` when a stream dies under it. The server's texts are stable (AOSP
``adb/transport.cpp`` ``acquire_one_transport``, ``adb/client/commandline.cpp``):

* ``device 'SERIAL' not found`` — no such transport;
* ``device offline`` / ``device still connecting`` / ``device still authorizing``;
* ``device unauthorized.`` followed by advice about the RSA key;
* ``more than one device/emulator``;
* sync ``FAIL`` texts: ``open failed: No such file or directory``, ``… Permission denied``.

A connection that dies is blamed on whoever was on its other end. Before a request is
switched to a device's transport (``host:…`` requests, and the ``host:transport:SERIAL`` step
itself) that is the adb server: it exited or was killed, so the error is ``unavailable``, the
same as a server that refuses connections. After the switch it is the device's stream, and
the error is ``device_offline``. Callers say which by passing ``serial`` (a device call) or
not (a host call), or by raising :class:`AdbServerLost`.

Most specific first; anything unknown is ``internal`` and keeps the original text.
"""

from __future__ import annotations

import socket

from device_bridge.adb.wire import AdbConnectionError, AdbError, AdbTimeout
from protocol.errors import ErrorCode, RpcError

__all__ = ["AdbServerLost", "translate"]


class AdbServerLost(ConnectionError):
    """The adb server closed a connection in the middle of a host request (it exited)."""


def _text(exc: BaseException) -> str:
    parts = [str(a) for a in exc.args if not isinstance(a, bytes)]
    return " ".join(parts) or type(exc).__name__


def translate(exc: BaseException, serial: str | None = None) -> RpcError:
    """Map an adb-side exception to an :class:`RpcError` (the caller raises it ``from exc``)."""
    if isinstance(exc, RpcError):
        return exc
    text = _text(exc)
    lower = text.lower()
    data: dict[str, object] = {"adb": text[:500]}
    if serial is not None:
        data["serial"] = serial
    where = f" ({serial})" if serial else ""
    if isinstance(exc, AdbTimeout | socket.timeout | TimeoutError):
        return RpcError(ErrorCode.TIMEOUT, f"adb timed out{where}: {text}", data)
    if isinstance(exc, AdbConnectionError | ConnectionRefusedError):
        return RpcError(ErrorCode.UNAVAILABLE, f"the adb server is not reachable: {text}", data)
    host = serial is None or isinstance(exc, AdbServerLost)
    if host and (
        isinstance(exc, ConnectionError | EOFError)
        or (isinstance(exc, AdbError) and lower in ("closed", "connection closed"))
    ):
        return RpcError(ErrorCode.UNAVAILABLE, "the adb server closed the connection", data)
    if isinstance(exc, AdbError):
        if "not found" in lower and "device" in lower:
            return RpcError(ErrorCode.NOT_FOUND, f"no device {serial or ''}".strip(), data)
        if "unauthorized" in lower:
            data["state"] = "unauthorized"
            return RpcError(ErrorCode.DEVICE_OFFLINE, f"device{where} is unauthorized", data)
        if "offline" in lower or "still connecting" in lower or "still authorizing" in lower:
            data["state"] = "offline"
            return RpcError(ErrorCode.DEVICE_OFFLINE, f"device{where} is offline", data)
        if "more than one device" in lower:
            return RpcError(ErrorCode.BAD_REQUEST, "more than one device: name a serial", data)
        if "no such file" in lower:
            return RpcError(ErrorCode.NOT_FOUND, f"no such file{where}: {text}", data)
        if "permission denied" in lower or "read-only file system" in lower:
            return RpcError(ErrorCode.FORBIDDEN, f"the device refused{where}: {text}", data)
        if lower.startswith("unknown data: b''"):
            # check_okay() read nothing: the adb server hung up mid-request.
            return RpcError(
                ErrorCode.UNAVAILABLE, f"the adb server closed the connection{where}", data
            )
        if lower in ("closed", "connection closed"):
            # The device closed the service: it refused it, or it went away under us.
            return RpcError(ErrorCode.DEVICE_OFFLINE, f"the device closed the stream{where}", data)
        return RpcError(ErrorCode.INTERNAL, f"adb error{where}: {text}", data)
    if isinstance(exc, ConnectionError | EOFError | BrokenPipeError):
        return RpcError(ErrorCode.DEVICE_OFFLINE, f"connection to the device lost{where}", data)
    if isinstance(exc, OSError):
        return RpcError(ErrorCode.UNAVAILABLE, f"adb I/O error{where}: {text}", data)
    return RpcError(ErrorCode.INTERNAL, f"{type(exc).__name__}{where}: {text}", data)
