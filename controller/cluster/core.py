"""What every part of a replica's :class:`~controller.cluster.Cluster` shares: its Redis
client and scripts, its keys and channel, its state, and the two ways of talking to another
replica (:meth:`ClusterCore._ask` waits for an answer, :meth:`ClusterCore._tell` does not).

The parts (:mod:`~controller.cluster.ownership`, :mod:`~controller.cluster.waits`,
:mod:`~controller.cluster.forwarding`, :mod:`~controller.cluster.streams`,
:mod:`~controller.cluster.tunnels`, :mod:`~controller.cluster.screens`,
:mod:`~controller.cluster.turns`) each add their methods on top of this core;
:mod:`controller.cluster.cluster` joins them with the lifecycle, the heartbeat and the
listener that dispatches messages to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from controller.auth.authorization import DeviceRef
from controller.cluster.scripts import (
    ADOPT_SCRIPT,
    AWAIT_TTLS,
    CLAIM_SCRIPT,
    INVENTORY_SCRIPT,
    LOSE_SCRIPT,
    RELEASE_SCRIPT,
    RENEW_SCRIPT,
)
from controller.cluster.wire import pack, parse_redis_url
from controller.hub.hub import Hub
from protocol.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from controller.cluster.ownership import Claiming
    from controller.cluster.screens import RemoteViewer, ServedScreen
    from controller.cluster.streams import RemoteLogStream, Served
    from controller.cluster.tunnels import RemoteTunnel
    from controller.hub.tunnel import Tunnel

log = logging.getLogger("droidwire.controller.cluster")


def device_in(body: dict[str, Any], what: str) -> DeviceRef:
    """The device another replica's request names (``bridge``, ``serial``, and ``owner_id`` and
    ``name`` where it has them); a request without a bridge and serial is ``bad_request``."""
    bridge_id, serial = body.get("bridge"), body.get("serial")
    if not isinstance(bridge_id, str) or not isinstance(serial, str):
        raise RpcError(ErrorCode.BAD_REQUEST, f"malformed {what} request")
    name = body.get("name")
    return DeviceRef(bridge_id, serial, str(body.get("owner_id", "")),
                     name if isinstance(name, str) else None)


@contextlib.contextmanager
def answering(reply: dict[str, Any], what: str, sender: str) -> Iterator[None]:
    """Serve another replica's request: what the block raises becomes ``reply``'s error — a
    typed error as it is, anything else logged and answered ``internal``."""
    try:
        yield
    except RpcError as exc:
        reply["e"] = exc.to_wire()
    except Exception:
        log.exception("cluster: %s for replica %s failed", what, sender)
        reply["e"] = RpcError(ErrorCode.INTERNAL, "internal error").to_wire()


class ClusterCore:
    """One replica's membership state; the parts of :class:`~controller.cluster.Cluster`
    extend it."""

    def __init__(
        self,
        redis_url: str,
        *,
        hub: Hub,
        replica_id: str | None = None,
        on_replica_lost: Callable[[list[str]], Awaitable[Any]] | None = None,
    ) -> None:
        parsed = parse_redis_url(redis_url)
        self.prefix = parsed.prefix
        # socket_timeout=None (redis-py 8 defaults to 5 s): with a timeout every command goes
        # through asyncio.wait_for, which on Python 3.11 can swallow a cancellation that
        # arrives as the reply does (CPython gh-86296) — a cancelled task then runs on. A
        # ``?socket_timeout=`` in the URL still wins. Our own waits are bounded by their
        # callers' deadlines and the heartbeat.
        self.redis: Redis = Redis.from_url(parsed.url, socket_timeout=None)
        self.hub = hub
        # Re-checks work (runs, streams) when a revocation elsewhere may end it (the app
        # sets it: controller.access.AccessWatch).
        self.access: Any = None
        self.settings = hub.settings
        self.replica_id = replica_id or uuid.uuid4().hex
        if self.settings.cluster_ttl_s <= self.settings.cluster_heartbeat_s:
            raise ValueError("cluster_ttl_s must be longer than cluster_heartbeat_s")
        self._claims: dict[str, tuple[object, str]] = {}  # bridge id → (connection, claim)
        self._claiming: dict[str, Claiming] = {}  # bridge id → its claims in flight
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._awaits: dict[str, str] = {}  # request id → bridge id: ours in P:awaits:BID
        self._serving: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._streams: dict[str, RemoteLogStream] = {}  # stream id → relayed to us
        self._served: dict[tuple[str, str], Served] = {}  # (requester, stream id) → ours
        self._tunnels: dict[str, RemoteTunnel] = {}  # relay id → a tunnel relayed to us
        self._served_tunnels: dict[tuple[str, str], Tunnel] = {}  # (requester, relay id)
        self._tunnel_seq: dict[tuple[str, str], int] = {}  # the next tin's number, served
        self._screens: dict[str, RemoteViewer] = {}  # relay id → a viewer relayed to us
        self._served_screens: dict[tuple[str, str], ServedScreen] = {}  # (requester, id)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._closed = False
        self._on_replica_lost = on_replica_lost
        self._claim = self.redis.register_script(CLAIM_SCRIPT)
        self._renew = self.redis.register_script(RENEW_SCRIPT)
        self._inventory = self.redis.register_script(INVENTORY_SCRIPT)
        self._release = self.redis.register_script(RELEASE_SCRIPT)
        self._adopt = self.redis.register_script(ADOPT_SCRIPT)
        self._lose = self.redis.register_script(LOSE_SCRIPT)

    # -- keys

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def channel(self, replica_id: str) -> str:
        return self._k("rpc", replica_id)

    def _awaits_key(self, bridge_id: str) -> str:
        return self._k("awaits", bridge_id)

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.settings.cluster_ttl_s * 1000))

    @property
    def _await_ttl_ms(self) -> int:
        return self._ttl_ms * AWAIT_TTLS

    def _dispatch(self, body: dict[str, Any]) -> None:
        """Handle one message from another replica (or a result for ourselves)."""
        raise NotImplementedError

    async def replica_alive(self, replica_id: str) -> bool:
        """Whether ``replica_id``'s liveness key is still there (it heartbeats, or died less
        than a TTL ago)."""
        return bool(await self.redis.exists(self._k("replica", replica_id)))

    async def _ask(self, replica: str, message: dict[str, Any],
                   future: asyncio.Future[dict[str, Any]], deadline: float,
                   gone: RpcError, what: str) -> dict[str, Any]:
        """Publish ``message`` to ``replica`` and wait up to ``deadline`` seconds for
        ``future``, its answer. Raises ``gone`` when nobody listens on its channel or its
        liveness key expires meanwhile (checked every heartbeat); :class:`RpcError`
        ``timeout`` ("``what`` timed out") or ``unavailable`` (Redis unreachable)."""
        try:
            if await self.redis.publish(self.channel(replica), pack(message)) == 0:
                raise gone  # nobody subscribed: the replica is dead, its keys not yet expired
            async with asyncio.timeout(deadline):
                while True:
                    done, _ = await asyncio.wait({future},
                                                 timeout=self.settings.cluster_heartbeat_s)
                    if done:
                        return future.result()
                    if not await self.replica_alive(replica):
                        raise gone
        except TimeoutError:
            raise RpcError(ErrorCode.TIMEOUT, f"{what} timed out") from None
        except (RedisError, OSError) as exc:
            raise RpcError(ErrorCode.UNAVAILABLE, f"cluster routing failed: {exc}",
                           {"reason": "redis_unavailable"}) from exc

    def _tell(self, replica: str, body: dict[str, Any]) -> None:
        """Publish ``body`` to ``replica`` in the background, best effort."""
        if self._closed:
            return

        async def publish() -> None:
            with contextlib.suppress(RedisError, OSError):
                await self.redis.publish(self.channel(replica), pack(body))

        task = asyncio.get_running_loop().create_task(publish())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
