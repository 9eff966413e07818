"""Host services: the adb server itself (start, kill, version), the devices it knows and their
features, and ``adb connect``/``disconnect`` of network devices."""

from __future__ import annotations

import os
import subprocess
import tempfile

from device_bridge.adb.connection import AdbCore, _Abort
from device_bridge.adb.models import DeviceState
from device_bridge.adb.wire import AdbConnectionError, AdbError, adb_path
from protocol.errors import ErrorCode, RpcError

__all__ = ["HostCalls"]


class HostCalls(AdbCore):
    """What the adb server answers by itself (``host:`` requests), without opening a device."""

    # -- devices -------------------------------------------------------------------------------

    async def start_server(self, *, timeout_s: float = 20.0) -> None:
        """``adb start-server`` on this layer's port (a no-op when one is already running)."""
        env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(self.port)}

        def run(_: _Abort) -> None:
            # The server daemon inherits our stdio: a pipe would stay open until it exits, so
            # its messages go to a file instead.
            with tempfile.TemporaryFile() as errors:
                done = subprocess.run(
                    [adb_path(), "start-server"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    timeout=timeout_s,
                    check=False,
                )
                if done.returncode != 0:
                    errors.seek(0)
                    text = errors.read(4096).decode(errors="replace").strip()
                    raise RpcError(ErrorCode.UNAVAILABLE, f"adb start-server failed: {text[:300]}")

        await self._call(run, timeout_s=timeout_s + 1.0, what="adb start-server")

    async def kill_server(self) -> None:
        """``adb kill-server`` for this layer's port; returns once the server has exited.

        Used by tests and ``droidwire demo``. The server answers ``OKAY`` and then exits,
        leaving its sockets to the kernel (AOSP ``adb/adb.cpp`` ``handle_host_request``,
        "kill": "Rely on process exit to close the socket for us"). Until it has exited it
        still accepts connections, so the kill connection is read to its end: only then is
        the next call refused (``unavailable``) rather than accepted and dropped.
        """

        def run(abort: _Abort) -> None:
            try:
                conn = self._connect(abort, self.call_timeout_s)
            except AdbConnectionError:
                return  # nothing listens: no server to kill
            with conn:
                conn.send_command("host:kill")
                conn.check_okay()
                try:
                    while conn.conn.recv(4096):
                        pass  # the server sends nothing more; EOF comes with its exit
                except ConnectionError:
                    pass  # a reset says the same: the process is gone

        await self._call(run, what="adb kill-server")

    async def server_version(self) -> int:
        return await self._call(lambda _: int(self._client.server_version()), what="adb version")

    async def devices(self) -> list[DeviceState]:
        """Every transport the adb server knows, in any state."""
        infos = await self._call(lambda _: self._client.list(), what="adb devices")
        return [DeviceState(serial, state) for serial, state in infos]

    async def state(self, serial: str) -> str:
        """adb's state of one device, ``not_found`` if it is not attached."""
        self._check_serial(serial)
        for device in await self.devices():
            if device.serial == serial:
                return device.state
        raise RpcError(ErrorCode.NOT_FOUND, f"no device {serial!r}", {"serial": serial})

    def forget(self, serial: str) -> None:
        """Drop what is cached about a device (call on every state change)."""
        self._features.pop(serial, None)

    async def features(self, serial: str) -> frozenset[str]:
        self._check_serial(serial)
        cached = self._features.get(serial)
        if cached is not None:
            return cached

        def get(abort: _Abort) -> frozenset[str]:
            conn = self._connect(abort, self.call_timeout_s)
            with conn:
                conn.send_command(f"host-serial:{serial}:features")
                conn.check_okay()
                return frozenset(f for f in conn.read_string_block().split(",") if f)

        found = await self._call(get, serial=serial, what="features")
        self._features[serial] = found
        return found

    async def connect(self, address: str, *, timeout_s: float | None = None) -> str:
        """``adb connect HOST:PORT``; returns the serial; ``unavailable`` when it fails."""
        self._check_serial(address)
        limit = self.connect_timeout_s if timeout_s is None else timeout_s
        text = await self._call(
            lambda _: self._client.host_request(f"host:connect:{address}", timeout=limit),
            timeout_s=limit + 1.0,
            what=f"adb connect {address}",
        )
        if text.startswith(("connected to", "already connected to")):
            self.forget(address)
            return address
        raise RpcError(
            ErrorCode.UNAVAILABLE, f"adb connect {address}: {text.strip()}", {"adb": text}
        )

    async def disconnect(self, address: str) -> bool:
        """``adb disconnect HOST:PORT``; ``True`` if adb knew the address."""
        self._check_serial(address)
        self.forget(address)

        def run(_: _Abort) -> bool:
            try:
                text = self._client.host_request(f"host:disconnect:{address}")
            except AdbError:
                return False
            return bool(text) and str(text).startswith("disconnected")

        return await self._call(run, what=f"adb disconnect {address}")
