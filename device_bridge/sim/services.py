"""adbd's services other than shell, exec and sync, as a user-build phone answers them.

* ``reverse:forward[:norebind]:LOCAL;REMOTE``, ``reverse:killforward:LOCAL``,
  ``reverse:killforward-all``, ``reverse:list-forward``: adbd's ``handle_forward_request`` on
  the device side — one ``OKAY`` (the server adds the first), ``FAIL`` + hex length + message on
  error, the listing as one hex-length-prefixed string. A reverse listener belongs to the
  transport that made it and goes with it.
* ``tcp:PORT`` (also ``tcp:localhost:PORT``), ``localabstract:NAME``…: a connection to a
  listener on the phone's own loopback (:mod:`device_bridge.sim.net`), refused like a closed
  port when nothing listens there.
* ``jdwp``: the pids of debuggable processes, then close; ``track-jdwp``: the same list as a
  hex-length-prefixed message, kept open. A user build runs no debuggable process: both are
  empty. ``jdwp:PID`` is refused.
* ``root:``, ``unroot:``, ``remount:``: the user-build answers (adbd cannot run as root).
* ``tcpip:PORT``, ``usb:``: adbd's answer; the simulated phone keeps serving where it is.
* ``reboot:[TARGET]``: accepted; the phone drops its connections and boots again (back into
  Android whatever the target: there is no bootloader or recovery to simulate).
* ``sideload:``/``sideload-host:`` exist only in recovery: refused, as Android refuses them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from device_bridge.sim.net import DevSocket, normalize, pump_both

if TYPE_CHECKING:
    from device_bridge.sim.adbd import Connection, Handler, Stream

__all__ = ["USER_BUILD_REMOUNT", "USER_BUILD_ROOT", "adbd_service"]

USER_BUILD_ROOT = "adbd cannot run as root in production builds\n"
USER_BUILD_UNROOT = "adbd not running as root\n"
USER_BUILD_REMOUNT = 'Not running as root. Try "adb root" first.\n'


def _protocol_string(text: str) -> bytes:
    body = text.encode()
    return f"{len(body):04x}".encode() + body


def _fail(message: str) -> bytes:
    return b"FAIL" + _protocol_string(message)


async def bridge(stream: Stream, sock: DevSocket) -> None:
    """Join an adb stream and a device socket until either side closes."""
    try:
        await pump_both(stream.read, stream.write, sock.read, sock.write)
    finally:
        await sock.close()


def _host_target_ok(spec: str) -> bool:
    """What the host side of ``reverse`` may name (the server resolves it)."""
    return bool(re.fullmatch(r"tcp:\d{1,5}|(localabstract|localreserved|localfilesystem):[^\0]{1,256}"
                             r"|jdwp:\d+", spec))


class _Reverse:
    """``adb reverse`` requests on one transport."""

    def __init__(self, device: Any, conn: Connection) -> None:
        self.device = device
        self.conn = conn

    async def serve(self, stream: Stream, request: str) -> None:
        await stream.write(self.answer(request))

    def answer(self, request: str) -> bytes:
        if request == "list-forward":
            lines = "".join(f"host-{id(self.conn) % 100000} {name} {target}\n"
                            for name, target in sorted(self.device.reverse_targets(self.conn)))
            return _protocol_string(lines)
        if request == "killforward-all":
            self.device.reverse_remove_all(self.conn)
            return b"OKAY"
        if request.startswith("killforward:"):
            spec = request[len("killforward:"):]
            if not self.device.reverse_remove(self.conn, spec):
                return _fail(f"listener '{spec}' not found")
            return b"OKAY"
        if request.startswith("forward:"):
            rest = request[len("forward:"):]
            rebind = True
            if rest.startswith("norebind:"):
                rebind, rest = False, rest[len("norebind:"):]
            pieces = rest.split(";")
            if (len(pieces) != 2 or not pieces[0] or not pieces[1] or pieces[1][0] == "*"
                    or normalize(pieces[0]) is None or not _host_target_ok(pieces[1])):
                return _fail(f"bad forward: {request}")
            local, remote = pieces
            try:
                bound = self.device.reverse_add(self.conn, local, remote, rebind=rebind)
            except OSError as exc:
                return _fail(str(exc))
            if normalize(local) == "tcp:0":
                return b"OKAY" + _protocol_string(bound.removeprefix("tcp:"))
            return b"OKAY"
        return _fail(f"unknown reverse service: {request[:80]}")


def adbd_service(device: Any, service: str, conn: Connection) -> Handler | None:
    """The handler for a non-shell, non-sync service, or None to refuse it (CLSE)."""
    if service.startswith("reverse:"):
        request = service[len("reverse:"):]
        rev = _Reverse(device, conn)
        return lambda s: rev.serve(s, request)
    if normalize(service) is not None:
        if not device.net.is_listening(service):
            return None  # connection refused
        spec = service

        async def connect(stream: Stream) -> None:
            sock = device.net.connect(spec)
            if sock is not None:
                await bridge(stream, sock)

        return connect
    if service == "jdwp":
        async def jdwp(stream: Stream) -> None:
            return None  # no debuggable process on a user build: an empty list, then close

        return jdwp
    if service == "track-jdwp":
        async def track(stream: Stream) -> None:
            await stream.write(b"0000")
            while await stream.read():  # the list never changes; wait for the host to close
                pass

        return track
    if service in ("root:", "unroot:") or service.startswith("remount"):
        text = {"root:": USER_BUILD_ROOT, "unroot:": USER_BUILD_UNROOT}.get(service,
                                                                           USER_BUILD_REMOUNT)

        async def refuse(stream: Stream) -> None:
            await stream.write(text.encode())

        return refuse
    if service.startswith("tcpip:"):
        port = service[len("tcpip:"):]
        if not re.fullmatch(r"\d{1,5}", port) or not 0 < int(port) <= 65535:
            msg = f"invalid port for tcpip: {port[:20]}\n"
        else:
            msg = f"restarting in TCP mode port: {int(port)}\n"

        async def tcpip(stream: Stream) -> None:
            await stream.write(msg.encode())

        return tcpip
    if service == "usb:":
        async def usb(stream: Stream) -> None:
            await stream.write(b"restarting in USB mode\n")

        return usb
    if service == "reboot:" or service.startswith("reboot:"):
        target = service[len("reboot:"):]

        async def reboot(stream: Stream) -> None:
            device.reboot(target or "adb")

        return reboot
    return None
