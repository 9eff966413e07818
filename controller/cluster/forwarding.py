"""Forwarded calls: a call for a bridge another replica holds runs there (``req`` → ``res``
on pub/sub: :mod:`controller.cluster.wire`). :meth:`Forwarding.forward` is the calling side,
:meth:`Forwarding._serve` the holding side, which calls its hub with ``route=False``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from redis.exceptions import RedisError

from controller.auth.authorization import DeviceRef
from controller.cluster.core import ClusterCore
from controller.cluster.wire import pack
from protocol.errors import ErrorCode, RpcError
from protocol.methods import timeout_for

log = logging.getLogger("droidwire.controller.cluster")


class Forwarding(ClusterCore):
    """``hub.call`` across replicas."""

    async def forward(
        self,
        replica: str,
        target: DeviceRef | str,
        method: str,
        params: dict[str, Any],
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Run ``hub.call`` on ``replica`` (which holds the bridge) and return its result.

        Raises :class:`RpcError`: the call's own typed error, or ``unavailable`` when the
        replica is unreachable or dies while we wait (its liveness key expires).
        """
        request_id = uuid.uuid4().hex
        message: dict[str, Any] = {"k": "req", "id": request_id, "from": self.replica_id,
                                   "m": method, "p": params, "timeout": timeout_s}
        if isinstance(target, DeviceRef):
            message.update(bridge=target.bridge_id, serial=target.serial,
                           owner_id=target.owner_id, name=target.bridge_name)
        else:
            message["bridge"] = target
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        gone = RpcError(ErrorCode.UNAVAILABLE, f"the replica holding the bridge of {target} "
                        "is unreachable", {"reason": "replica_unreachable"})
        deadline = timeout_for(method, self.settings, timeout_s) + self.settings.cluster_ttl_s
        try:
            return await self._ask(replica, message, future, deadline, gone,
                                   f"{method} forwarded to replica {replica}")
        except asyncio.CancelledError:
            with contextlib.suppress(RedisError, OSError):
                await self.redis.publish(self.channel(replica), pack(
                    {"k": "cancel", "id": request_id, "from": self.replica_id}))
            raise
        finally:
            self._waiting.pop(request_id, None)

    async def _serve(self, body: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"k": "res", "id": body["id"]}
        try:
            method, params = body.get("m"), body.get("p")
            bridge_id = body.get("bridge")
            if not isinstance(method, str) or not isinstance(params, dict) \
                    or not isinstance(bridge_id, str):
                raise RpcError(ErrorCode.BAD_REQUEST, "malformed forwarded request")
            timeout = body.get("timeout")
            timeout_s = float(timeout) if isinstance(timeout, int | float) else None
            target: DeviceRef | str = bridge_id
            if isinstance(body.get("serial"), str):
                target = DeviceRef(bridge_id, body["serial"], str(body.get("owner_id", "")),
                                   body.get("name") if isinstance(body.get("name"), str)
                                   else None)
            reply["r"] = await self.hub.call_wire(target, method, params, timeout_s=timeout_s,
                                                  route=False)
        except RpcError as exc:
            reply["e"] = exc.to_wire()
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("cluster: forwarded %s failed", body.get("m"))
            reply["e"] = RpcError(ErrorCode.INTERNAL, "internal error").to_wire()
        try:
            await self.redis.publish(self.channel(str(body["from"])), pack(reply))
        except (RedisError, OSError, TypeError, ValueError) as exc:
            log.warning("cluster: result of %s not returned: %s", body.get("id"), exc)
