"""Device turns across replicas (``P:device:DID``: :mod:`controller.cluster.wire`): a run
holds its device's turn cluster-wide while it uses it, so two replicas never run on one
device at once (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from redis.asyncio.lock import Lock
from redis.exceptions import LockNotOwnedError, RedisError

from controller.cluster.core import ClusterCore
from protocol.errors import ErrorCode, RpcError

log = logging.getLogger("droidwire.controller.cluster")

DEVICE_TURN_POLL_S = 0.1  # how often a run waiting for a device held elsewhere asks again


class DeviceTurns(ClusterCore):
    """:meth:`device_turn`: a redis-py lock per device, renewed while held."""

    @contextlib.asynccontextmanager
    async def device_turn(
        self, device_id: str, run_id: str, on_wait: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[None]:
        """Hold ``device_id`` for ``run_id`` across the cluster for the block's duration.

        A run on another replica that holds it makes this wait (``on_wait`` is awaited once
        first), polling every :data:`DEVICE_TURN_POLL_S`; cancel to give up. The turn lives
        ``cluster_ttl_s`` and is renewed every ``cluster_heartbeat_s`` while held: a replica
        that dies frees its devices a TTL later. Raises :class:`RpcError` ``unavailable``
        when Redis cannot be reached to take it.
        """
        name = self._k("device", device_id)
        lock = Lock(self.redis, name, timeout=self.settings.cluster_ttl_s,
                    thread_local=False, raise_on_release_error=False)
        task = asyncio.current_task()
        told = False
        try:
            while not await lock.acquire(blocking=False, token=run_id):
                if task is not None and task.cancelling():
                    # A cancellation a command swallowed (a socket_timeout in the URL, on
                    # Python 3.11: see __init__) is honoured here rather than waited out.
                    raise asyncio.CancelledError
                if not told and on_wait is not None:
                    told = True
                    await on_wait()
                await asyncio.sleep(DEVICE_TURN_POLL_S)
            if task is not None and task.cancelling():
                raise asyncio.CancelledError  # taken as we were cancelled: given back below
        except RedisError as exc:
            raise RpcError(
                ErrorCode.UNAVAILABLE,
                f"cluster: device {device_id}'s turn could not be taken: {exc}",
                {"reason": "cluster_unavailable"},
            ) from exc
        except asyncio.CancelledError:
            # Cancelled as the SET went through: give the turn back rather than hold it a TTL.
            with contextlib.suppress(RedisError, asyncio.CancelledError):
                await asyncio.shield(lock.do_release(run_id.encode()))
            raise
        keeper = asyncio.create_task(self._keep_turn(lock, device_id, run_id))
        try:
            yield
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            try:
                await lock.release()
            except RedisError as exc:  # it expires on its own a TTL later
                log.warning("cluster: device %s: turn of run %s not released: %s",
                            device_id, run_id, exc)

    async def _keep_turn(self, lock: Lock, device_id: str, run_id: str) -> None:
        while True:
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
            try:
                await lock.reacquire()
            except LockNotOwnedError:
                log.error("cluster: device %s: run %s lost its turn (Redis unreachable past "
                          "the TTL?); another run may use the device", device_id, run_id)
                return
            except RedisError as exc:
                log.warning("cluster: device %s: turn of run %s not renewed: %s",
                            device_id, run_id, exc)
