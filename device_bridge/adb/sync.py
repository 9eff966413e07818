"""Files on a device over the sync protocol: push and pull, in memory or streamed to and from
host files."""

from __future__ import annotations

from typing import BinaryIO

from device_bridge.adb.connection import AdbCore, _Abort
from device_bridge.adb.wire import sync_pull, sync_push
from protocol.errors import ErrorCode, RpcError

__all__ = ["SyncCalls"]


class SyncCalls(AdbCore):
    """``sync:`` SEND and RECV, bounded by size and deadline."""

    async def push(
        self,
        serial: str,
        path: str,
        data: bytes,
        *,
        mode: int = 0o644,
        timeout_s: float | None = None,
    ) -> int:
        """Write ``data`` to ``path`` on the device (sync SEND); returns the size written."""
        self._check_serial(serial)

        def run(abort: _Abort) -> int:
            with self._open(abort, serial, "sync:", None) as conn:
                return sync_push(conn, data, path, mode)

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"push {path}")

    async def pull(
        self,
        serial: str,
        path: str,
        *,
        max_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> bytes:
        """Read ``path`` from the device (sync RECV); ``not_found`` if it does not exist."""
        self._check_serial(serial)
        cap = self.max_pull_bytes if max_bytes is None else max_bytes

        def run(abort: _Abort) -> bytes:
            out = bytearray()
            with self._open(abort, serial, "sync:", None) as conn:
                for chunk in sync_pull(conn, path):
                    out += chunk
                    if len(out) > cap:
                        raise RpcError(
                            ErrorCode.BAD_REQUEST,
                            f"{path} is larger than {cap} bytes",
                            {"serial": serial, "path": path},
                        )
            return bytes(out)

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"pull {path}")

    async def push_file(
        self,
        serial: str,
        local: str | BinaryIO,
        path: str,
        *,
        mode: int = 0o644,
        timeout_s: float | None = None,
    ) -> int:
        """Stream the host file ``local`` (a name, or a readable binary file) to ``path`` on
        the device (sync SEND, chunk by chunk: never whole in memory); the size written."""
        self._check_serial(serial)

        def run(abort: _Abort) -> int:
            # A directory at ``path`` is an error (sync_push), never a file quietly written
            # inside it under the host file's name.
            with self._open(abort, serial, "sync:", None) as conn:
                if not isinstance(local, str):
                    return sync_push(conn, local, path, mode)
                with open(local, "rb") as src:
                    return sync_push(conn, src, path, mode)

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"push {path}")

    async def pull_file(
        self,
        serial: str,
        path: str,
        local: str,
        *,
        max_bytes: int,
        timeout_s: float | None = None,
    ) -> int:
        """Stream ``path`` from the device into the host file ``local`` (sync RECV); returns
        its size; ``bad_request`` past ``max_bytes`` (the file is left partial)."""
        self._check_serial(serial)

        def run(abort: _Abort) -> int:
            size = 0
            with open(local, "wb") as out, self._open(abort, serial, "sync:", None) as conn:
                for chunk in sync_pull(conn, path):
                    size += len(chunk)
                    if size > max_bytes:
                        raise RpcError(
                            ErrorCode.BAD_REQUEST,
                            f"{path} is larger than {max_bytes} bytes",
                            {"serial": serial, "path": path, "reason": "too_large"},
                        )
                    out.write(chunk)
            return size

        limit = self.long_timeout_s if timeout_s is None else timeout_s
        return await self._call(run, serial=serial, timeout_s=limit, what=f"pull {path}")
