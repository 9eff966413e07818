"""Cluster mode: several controller replicas sharing Redis (routing) and PostgreSQL (state).

docs/design.md §7, docs/cluster.md. One :class:`Cluster` per replica, attached to its hub as
``hub.cluster`` (the hub calls the hooks of :class:`controller.hub.hub.ClusterHooks`).

Keys (all under the run's prefix ``P``, default ``droidwire``; TTLs from
``settings.cluster_ttl_s``, renewed every ``settings.cluster_heartbeat_s``):

* ``P:replica:RID`` — the replica is alive (a string, with TTL);
* ``P:replicas`` — the set of replica ids that joined; a member whose liveness key is gone
  died: the one replica whose ``SREM`` removes it runs ``on_replica_lost`` (e.g. ending the
  dead replica's unfinished runs in the shared store);
* ``P:bridge:BID`` — a hash: ``owner`` (``RID/CLAIM``, the replica and the connection that
  hold the bridge's one session), ``replica``, ``name``, ``owner_id``, ``devices`` (JSON
  inventory); with TTL, so a dead replica's bridges vanish from listings on their own;
* ``P:bridges`` — the set of bridge ids that may have a hash (pruned when one is missing);
* ``P:device:DID`` — a device's turn across replicas: a redis-py lock whose token is the run
  holding it, with TTL (renewed while held), so a dead replica's turn frees itself
  (:meth:`Cluster.device_turn`);
* ``P:awaits:BID`` — a hash: request id → ``RID SESSION`` (replica ``RID`` waits for that
  request's result, sent on bridge session ``SESSION``) or ``lost REASON`` (the bridge came
  back without it). Written for requests a run may be resumed from (the executor's
  instrumentation) and by the replica adopting such a run; its TTL
  (``_AWAIT_TTLS`` × ``cluster_ttl_s``) is renewed by the heartbeat of every replica waiting
  in it, and outlives a dead waiter long enough for a survivor to adopt its run.

Messages travel on pub/sub, one channel per replica, ``P:rpc:RID``, msgpack maps:
``req`` (forwarded call) → ``res`` (its result, to the caller's channel), ``cancel`` (the
caller gave up), ``replace`` (a newer session of a bridge took over elsewhere: close ours
with 4409). A held result the bridge delivers to a replica other than the one waiting for
it (``P:awaits:BID``) travels as a ``res`` too, and is acked to the bridge only once the
``PUBLISH`` reached the waiter (else the bridge keeps it, and it is tried again).
A logcat stream on a bridge held elsewhere: ``sub`` (subscribe, answered by a ``res``), then
the holder's ``chunk`` messages (numbered: a gap becomes ``lost_batches``), ``unsub`` when the
consumer leaves (:class:`RemoteLogStream`).
Why pub/sub and not streams: docs/cluster.md.

Ownership changes are atomic Lua scripts: a claim returns the previous owner, renewals and
releases only touch a hash that still names the caller's claim, so a slow replica can never
take a bridge back from the replica that holds its newer session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgpack
from redis.asyncio import Redis
from redis.asyncio.lock import Lock
from redis.exceptions import LockNotOwnedError, RedisError

from controller.auth import DeviceRef
from controller.hub.devices import DeviceRecord
from controller.hub.hub import BridgeEntry, Hub
from controller.hub.streams import LogChunk, LogStream
from protocol.closecodes import CloseCode
from protocol.envelope import Hello, Res
from protocol.errors import ErrorCode, RpcError
from protocol.methods import LogBatch, parse_log_batch, timeout_for
from protocol.session import Completion

__all__ = [
    "DEFAULT_PREFIX", "Cluster", "ClusterUrl", "RemoteBridge", "RemoteLogStream",
    "parse_redis_url",
]

log = logging.getLogger("droidwire.controller.cluster")

DEVICE_TURN_POLL_S = 0.1  # how often a run waiting for a device held elsewhere asks again

DEFAULT_PREFIX = "droidwire"
# Prefixes are key material: keep them to a safe alphabet and length.
_PREFIX_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
_PREFIX_MAX = 64

# KEYS[1] bridge hash, KEYS[2] bridges set. ARGV: claim, ttl_ms, replica, name, owner_id, bid.
# Returns the previous owner (or false).
_CLAIM = """
local old = redis.call('HGET', KEYS[1], 'owner')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'replica', ARGV[3], 'name', ARGV[4],
           'owner_id', ARGV[5], 'devices', '{}')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[6])
return old
"""
# KEYS[1] bridge hash. ARGV: claim, ttl_ms. 1 renewed, 0 someone else's, -1 gone.
_RENEW = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif owner then
  return 0
end
return -1
"""
# KEYS[1] bridge hash. ARGV: claim, devices JSON. 1 written, 0 not ours.
_INVENTORY = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'devices', ARGV[2], 'caps', ARGV[3])
  return 1
end
return 0
"""
# KEYS[1] bridge hash, KEYS[2] bridges set. ARGV: claim, bid.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
return 0
"""
# KEYS[1] awaits hash. ARGV: request id, "RID SESSION", ttl_ms. Takes the wait over, unless
# the request is known lost: then returns that marker ("lost REASON"). A request nobody waits
# for is lost too: its wait is shared before it is sent, so the dead replica never sent it, or
# its result was delivered (the wait settled), or the wait expired and the bridge dropped it —
# in no case will a result come.
_ADOPT = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then
  return 'lost result_lost'
end
if string.sub(old, 1, 5) == 'lost ' then
  return old
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return false
"""
# KEYS[1] awaits hash. ARGV: request id, "lost REASON". Marks a waited-for request lost and
# returns who waited ("RID SESSION"); false if nobody did.
_LOSE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old or string.sub(old, 1, 5) == 'lost ' then
  return false
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return old
"""
# A dead replica's waits outlive it this many TTLs: it takes one TTL to notice the death and
# one heartbeat to adopt its runs; the rest is margin for a loaded store.
_AWAIT_TTLS = 3


@dataclass(slots=True)
class _Claiming:
    """A bridge's claims in flight on this replica: one at a time, counted."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


@dataclass(frozen=True, slots=True)
class RemoteBridge:
    """A bridge connected to another replica: which one, how many live devices, and (for the
    executor's choice of a build bridge) its name, owner and capabilities as its ``hello``
    said (``caps``, JSON; empty before its inventory was published)."""

    replica: str
    devices: int
    name: str = ""
    owner_id: str = ""
    caps: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterUrl:
    """``--redis`` split in two: the URL for redis-py, and our key prefix (``?prefix=``)."""

    url: str
    prefix: str


def parse_redis_url(text: str) -> ClusterUrl:
    """``redis://[:PASSWORD@]HOST:PORT/DB[?prefix=NAME]`` (``rediss://`` for TLS)."""
    parts = urlsplit(text)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"--redis takes redis://, rediss:// or unix:// URLs, not {parts.scheme!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = DEFAULT_PREFIX
    rest = []
    for key, value in query:
        if key == "prefix":
            prefix = value
        else:
            rest.append((key, value))
    if not prefix or len(prefix) > _PREFIX_MAX or not set(prefix) <= _PREFIX_CHARS:
        raise ValueError(f"a cluster prefix is 1–{_PREFIX_MAX} of [A-Za-z0-9-_.:]")
    return ClusterUrl(urlunsplit(parts._replace(query=urlencode(rest))), prefix)


class RemoteLogStream(LogStream):
    """A logcat stream on a bridge another replica (``replica``) holds: that replica runs an
    ordinary local subscription and publishes each of its chunks here, numbered from 0
    (``chunk`` messages); this object reads like a local :class:`LogStream` (same bounded
    queue, same markers), so the API handler and the dashboard need not know.

    A chunk's number is its ``seq``: a gap (a message lost on the way, e.g. while our
    subscription to Redis was being re-established) becomes ``lost_batches``, never silent
    loss; the holder's own ``dropped`` and ``lost_batches`` are passed on."""

    def __init__(self, *, stream_id: str, replica: str, bridge_id: str, serial: str,
                 max_batches: int, params: dict[str, Any]) -> None:
        super().__init__(channel="", bridge_id=bridge_id, serial=serial,
                         max_batches=max_batches, params=params)
        self.stream_id = stream_id
        self.replica = replica
        self.watch: asyncio.Task[None] | None = None

    def take(self, body: dict[str, Any]) -> None:
        """One ``chunk`` message from the holder (never raises). A malformed one with a
        usable number counts as one lost batch; one without is dropped (the next number
        shows the gap)."""
        seq = body.get("seq")
        if type(seq) is not int or seq < 0:
            log.warning("cluster: stream %s: dropped a chunk without a sequence number",
                        self.stream_id)
            return
        lost = body.get("lost")
        try:
            batch = parse_log_batch(body.get("d"), seq=seq)
        except RpcError:
            log.warning("cluster: stream %s: malformed chunk %d", self.stream_id, seq)
            self.feed(LogBatch([], seq=seq), lost_batches=1)
            return
        self.feed(batch, lost_batches=lost if type(lost) is int else 0)


def _chunk_body(stream_id: str, sender: str, seq: int, chunk: LogChunk) -> dict[str, Any]:
    d: dict[str, Any] = {"lines": chunk.lines, "dropped": chunk.dropped}
    if chunk.eof:
        d["eof"] = True
        d["reason"] = chunk.reason or "eof"
    return {"k": "chunk", "id": stream_id, "from": sender, "seq": seq, "d": d,
            "lost": chunk.lost_batches}


@dataclass(slots=True)
class _Served:
    """A stream this replica runs for another one (the holding side)."""

    stream: LogStream | None = None
    stopped: bool = False


def _json_map(text: str | None) -> dict[str, Any]:
    """A JSON object from the registry, or ``{}`` for a missing or malformed one."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _pack(message: dict[str, Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def _unpack(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, bytes | bytearray):
        return None
    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException):
        return None
    return message if isinstance(message, dict) else None


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _error(e: Any) -> RpcError:
    if not isinstance(e, dict):
        return RpcError(ErrorCode.INTERNAL, "a replica sent a malformed error")
    data = e.get("data")
    return RpcError(str(e.get("code", "internal")), str(e.get("message", ""))[:2000],
                    data if isinstance(data, dict) else None)


class Cluster:
    """One replica's membership: heartbeat, bridge ownership, forwarding. An async context."""

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
        self._claiming: dict[str, _Claiming] = {}  # bridge id → its claims in flight
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._awaits: dict[str, str] = {}  # request id → bridge id: ours in P:awaits:BID
        self._serving: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._streams: dict[str, RemoteLogStream] = {}  # stream id → relayed to us
        self._served: dict[tuple[str, str], _Served] = {}  # (requester, stream id) → ours
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._closed = False
        self._on_replica_lost = on_replica_lost
        self._claim = self.redis.register_script(_CLAIM)
        self._renew = self.redis.register_script(_RENEW)
        self._inventory = self.redis.register_script(_INVENTORY)
        self._release = self.redis.register_script(_RELEASE)
        self._adopt = self.redis.register_script(_ADOPT)
        self._lose = self.redis.register_script(_LOSE)

    # -- keys

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def channel(self, replica_id: str) -> str:
        return self._k("rpc", replica_id)

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.settings.cluster_ttl_s * 1000))

    @property
    def _await_ttl_ms(self) -> int:
        return self._ttl_ms * _AWAIT_TTLS

    # -- lifecycle

    async def __aenter__(self) -> Cluster:
        await self.redis.ping()  # fail the start-up loudly when Redis is unreachable
        self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.subscribe(self.channel(self.replica_id))
        await self._beat()
        loop = asyncio.get_running_loop()
        self._listener = loop.create_task(self._listen(), name="cluster-listen")
        self._heartbeat = loop.create_task(self._heartbeat_loop(), name="cluster-heartbeat")
        log.info("cluster: replica %s joined (prefix %s)", self.replica_id, self.prefix)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Leave: end the streams we relay (their readers get ``eof`` ``replica_shutdown``),
        stop the loops, fail what waits on other replicas, drop our keys."""
        if self._closed:
            return
        self._closed = True
        relays = []
        for key, served in self._served.items():
            if served.stream is not None and (relay := self._serving.get(key)) is not None:
                served.stream.end("replica_shutdown")
                relays.append(relay)
        if relays:  # each relay publishes its eof, then ends; bounded, as the whole shutdown
            await asyncio.wait(relays, timeout=self.settings.cluster_heartbeat_s)
        tasks = [t for t in (self._listener, self._heartbeat, *self._tasks,
                             *self._serving.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        error = RpcError(ErrorCode.UNAVAILABLE, "the controller is shutting down",
                         {"reason": "shutdown"})
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        for stream in self._streams.values():
            stream.end("shutdown")  # its holder sees our channel go (PUBLISH → 0) and stops
        self._streams.clear()
        with contextlib.suppress(RedisError, OSError):
            for bridge_id, (_conn, claim) in list(self._claims.items()):
                await self._release(keys=[self._k("bridge", bridge_id), self._k("bridges")],
                                    args=[claim, bridge_id])
            await self.redis.delete(self._k("replica", self.replica_id))
            await self.redis.srem(self._k("replicas"), self.replica_id)
        self._claims.clear()
        with contextlib.suppress(RedisError, OSError, RuntimeError):
            await self._pubsub.aclose()
        with contextlib.suppress(RedisError, OSError, RuntimeError):
            await self.redis.aclose()
        log.info("cluster: replica %s left", self.replica_id)

    # -- heartbeat

    async def replica_alive(self, replica_id: str) -> bool:
        """Whether ``replica_id``'s liveness key is still there (it heartbeats, or died less
        than a TTL ago)."""
        return bool(await self.redis.exists(self._k("replica", replica_id)))

    async def reports_cluster(self) -> bool:
        """Whether this replica is the one that reports the cluster-wide metrics (runs in the
        store, devices no replica holds): the live replica with the smallest id. False when
        Redis cannot tell: a missing series is noticed, a doubled one is not."""
        if self._closed:
            return False
        try:
            members = sorted(_text(m) for m in await self.redis.smembers(self._k("replicas")))
            for replica in members:
                if replica == self.replica_id:
                    return True
                if await self.replica_alive(replica):
                    return False
            return True  # not a member yet (before the first heartbeat): alone so far
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the replicas (metrics): %s", exc)
            return False

    async def _beat(self) -> None:
        await self.redis.set(self._k("replica", self.replica_id),
                             json.dumps({"pid": os.getpid()}), px=self._ttl_ms)
        await self.redis.sadd(self._k("replicas"), self.replica_id)
        for bridge_id in set(self._awaits.values()):
            await self.redis.pexpire(self._k("awaits", bridge_id), self._await_ttl_ms)
        for bridge_id, (conn, claim) in list(self._claims.items()):
            if bridge_id in self._claiming:
                continue  # a claim is on its way: renewing now could race it (claimed())
            entry = self.hub.entry(bridge_id)
            if entry is None or entry.conn is not conn:
                self._claims.pop(bridge_id, None)
                continue
            renewed = await self._renew(keys=[self._k("bridge", bridge_id)],
                                        args=[claim, self._ttl_ms])
            if renewed == 0:
                log.info("cluster: bridge %s is held elsewhere now: closing ours (4409)",
                         entry.name)
                self._claims.pop(bridge_id, None)
                conn_obj = entry.conn
                if conn_obj is not None:
                    conn_obj.kick(CloseCode.REPLACED, "replaced by a newer session of this bridge")
            elif renewed == -1:  # expired (we stalled past the TTL) but still ours: claim again
                await self.claimed(entry)
                await self.inventory(entry)

    async def _heartbeat_loop(self) -> None:
        # ``not self._closed``, not ``True``: redis-py may turn a cancellation in the middle
        # of a command into a connection error, which must not keep a leaving replica beating.
        while not self._closed:
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
            try:
                await self._beat()
                lost = await self._reap()
            except (RedisError, OSError) as exc:
                log.warning("cluster: heartbeat failed: %s", exc)
                continue
            if lost and self._on_replica_lost is not None:
                try:
                    await self._on_replica_lost(lost)
                except Exception:  # a failing clean-up must not stop the heartbeat
                    log.exception("cluster: clean-up after lost replicas %s failed", lost)

    async def _reap(self) -> list[str]:
        """Replicas whose liveness key expired, each reported by exactly one survivor (the
        one whose ``SREM`` removed it)."""
        members = [_text(m) for m in await self.redis.smembers(self._k("replicas"))]
        lost = []
        for replica in members:
            if replica == self.replica_id or await self.replica_alive(replica):
                continue
            if await self.redis.srem(self._k("replicas"), replica):
                log.warning("cluster: replica %s is gone (no heartbeat for %gs)", replica,
                            self.settings.cluster_ttl_s)
                lost.append(replica)
        return lost

    # -- device turns

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

    # -- revocation

    async def revoked(self, token: Any) -> None:
        """A token was revoked (or rotated) on this replica: every other live replica closes
        the bridge sessions it holds with that token (4401), as this replica's hub does.
        Best effort — a replica that misses it refuses the bridge's next handshake anyway."""
        if self._closed:
            return
        body = _pack({"k": "revoked", "token": str(token.id), "from": self.replica_id})
        try:
            members = [_text(m) for m in await self.redis.smembers(self._k("replicas"))]
            for replica in members:
                if replica != self.replica_id:
                    await self.redis.publish(self.channel(replica), body)
        except (RedisError, OSError) as exc:
            log.warning("cluster: could not tell the other replicas of a revocation: %s", exc)

    async def forgotten(self, bridge_id: str, serial: str | None) -> None:
        """A bridge (``serial`` None) or one of its devices was forgotten here: every other
        live replica drops what its hub remembers of it. Best effort, like ``revoked``."""
        await self._tell_all({"k": "forget", "bridge": bridge_id, "serial": serial,
                              "from": self.replica_id}, "a forget")

    async def grant_revoked(self, user_id: str) -> None:
        """A grant to ``user_id`` was revoked on this replica: every other live replica
        re-checks that user's runs and streams (their next periodic check would, later)."""
        await self._tell_all({"k": "revoked", "user": user_id, "from": self.replica_id},
                             "a revocation")

    async def _tell_all(self, message: dict[str, Any], what: str) -> None:
        if self._closed:
            return
        body = _pack(message)
        try:
            members = [_text(m) for m in await self.redis.smembers(self._k("replicas"))]
            for replica in members:
                if replica != self.replica_id:
                    await self.redis.publish(self.channel(replica), body)
        except (RedisError, OSError) as exc:
            log.warning("cluster: could not tell the other replicas of %s: %s", what, exc)

    # -- hooks called by the hub

    async def claimed(self, entry: BridgeEntry) -> None:
        """A connection of ``entry`` was accepted here: it holds the bridge's one session."""
        if self._closed or entry.conn is None:
            return
        # One claim of a bridge in flight at a time, and no heartbeat renewal meanwhile: two
        # claim scripts (or a claim and the heartbeat's re-claim of a "missing" hash) may reach
        # Redis in either order over the pool's connections, and the hash would then name a
        # claim we no longer hold — the next heartbeat would close our own bridge with 4409.
        held = self._claiming.setdefault(entry.id, _Claiming())
        held.users += 1
        try:
            async with held.lock:
                if entry.conn is None:
                    return
                claim = f"{self.replica_id}/{uuid.uuid4().hex}"
                self._claims[entry.id] = (entry.conn, claim)
                old = await self._claim(
                    keys=[self._k("bridge", entry.id), self._k("bridges")],
                    args=[claim, self._ttl_ms, self.replica_id, entry.name, entry.owner_id,
                          entry.id],
                )
        finally:
            held.users -= 1
            if not held.users:
                del self._claiming[entry.id]
        if isinstance(old, bytes):
            old_replica = old.decode(errors="replace").partition("/")[0]
            if old_replica and old_replica != self.replica_id:
                log.info("cluster: bridge %s moved here from replica %s", entry.name,
                         old_replica)
                await self.redis.publish(self.channel(old_replica),
                                         _pack({"k": "replace", "bridge": entry.id,
                                                "by": self.replica_id}))

    async def inventory(self, entry: BridgeEntry) -> None:
        """The bridge's device inventory changed: publish it for the other replicas."""
        held = self._claims.get(entry.id)
        if self._closed or held is None:
            return
        devices = {s: d.model_dump(mode="json") for s, d in entry.devices.items()}
        caps = entry.caps.model_dump(mode="json") if entry.caps is not None else {}
        await self._inventory(keys=[self._k("bridge", entry.id)],
                              args=[held[1], json.dumps(devices), json.dumps(caps)])

    async def released(self, entry: BridgeEntry) -> None:
        """The bridge's connection here ended (it may be reconnecting elsewhere): the calls it
        leaves in flight are shared in ``P:awaits:BID`` (for ``_AWAIT_TTLS`` TTLs), so that
        a replica it reconnects to relays their results here."""
        held = self._claims.pop(entry.id, None)
        if self._closed or held is None:
            return
        sent = {rid: f"{self.replica_id} {p.sent_session}" for rid in entry.session.pending_ids()
                if rid not in self._awaits and (p := entry.session.pending(rid)) is not None
                and p.sent_session is not None}
        if sent:
            key = self._awaits_key(entry.id)
            async with self.redis.pipeline(transaction=True) as pipe:
                for request_id, value in sent.items():
                    pipe.hset(key, request_id, value)
                pipe.pexpire(key, self._await_ttl_ms)
                await pipe.execute()
        await self._release(keys=[self._k("bridge", entry.id), self._k("bridges")],
                            args=[held[1], entry.id])

    async def owner_elsewhere(self, bridge_id: str) -> str | None:
        """The live replica holding ``bridge_id``'s session, when it is not this one."""
        if self._closed:
            return None
        try:
            replica = await self.redis.hget(self._k("bridge", bridge_id), "replica")
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the registry (routing locally): %s", exc)
            return None
        if not isinstance(replica, bytes):
            return None
        text = replica.decode(errors="replace")
        return None if text == self.replica_id else text

    async def remote_devices(self) -> list[DeviceRecord]:
        """Live devices of bridges held by other replicas (the cluster-wide overlay); none
        while Redis is unreachable (the store's list, all ``disconnected``, still answers)."""
        if self._closed:
            return []
        try:
            return await self._remote_devices()
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the registry: %s", exc)
            return []

    async def _remote_devices(self) -> list[DeviceRecord]:
        records: list[DeviceRecord] = []
        for bridge_id, fields, devices in await self._held_elsewhere():
            for serial, info in devices.items():
                if not isinstance(info, dict):
                    continue
                records.append(DeviceRecord(
                    bridge_id, fields.get("name", bridge_id), fields.get("owner_id", ""),
                    str(serial), str(info.get("state", "unknown")), info,
                ))
        return records

    async def remote_bridges(self) -> dict[str, RemoteBridge]:
        """Bridges whose one session another live replica holds, by bridge id (for
        ``GET /v1/bridges``); none while Redis is unreachable."""
        if self._closed:
            return {}
        try:
            held = await self._held_elsewhere()
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the registry: %s", exc)
            return {}
        return {
            bridge_id: RemoteBridge(fields.get("replica", ""), len(devices),
                                    fields.get("name", bridge_id), fields.get("owner_id", ""),
                                    _json_map(fields.get("caps")))
            for bridge_id, fields, devices in held
        }

    async def _held_elsewhere(self) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
        """(bridge id, its registry fields, its live inventory) for each bridge held by
        another replica; ids whose hash expired are pruned from ``P:bridges``."""
        ids = sorted(_text(b) for b in await self.redis.smembers(self._k("bridges")))
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for bridge_id in ids:
                pipe.hgetall(self._k("bridge", bridge_id))
            rows = await pipe.execute()
        held: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        missing = []
        for bridge_id, row in zip(ids, rows, strict=True):
            if not row:
                missing.append(bridge_id)
                continue
            fields = {k.decode(): v.decode(errors="replace") for k, v in row.items()}
            if fields.get("replica") == self.replica_id:
                continue  # ours: the hub's own live view covers it
            held.append((bridge_id, fields, _json_map(fields.get("devices"))))
        if missing:
            await self.redis.srem(self._k("bridges"), *missing)
        return held

    # -- held results: who waits for a request, whichever replica its bridge reaches

    def _awaits_key(self, bridge_id: str) -> str:
        return self._k("awaits", bridge_id)

    async def awaiting(self, bridge_id: str, request_id: str, session: str | None) -> None:
        """This replica waits for ``request_id``, sent on the bridge's ``session``: a replica
        the bridge reconnects to lists it in its ``welcome`` and relays the result here, and a
        survivor adopting our run after our death takes the wait over."""
        if self._closed:
            return
        self._awaits[request_id] = bridge_id
        key = self._awaits_key(bridge_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, request_id, f"{self.replica_id} {session or '-'}")
            pipe.pexpire(key, self._await_ttl_ms)
            await pipe.execute()

    async def settled(self, bridge_id: str, request_id: str) -> None:
        """The wait for ``request_id`` ended (result, error, or given up)."""
        self._awaits.pop(request_id, None)
        if not self._closed:
            await self.redis.hdel(self._awaits_key(bridge_id), request_id)

    def adopt(
        self,
        device: DeviceRef,
        request_id: str,
        method: str,
        params: dict[str, Any],
        *,
        sent_session: str,
        timeout_s: float | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """Wait for the result of a request a dead replica sent (``Hub.adopt`` in cluster
        mode): whichever replica the bridge reaches relays it here. Fails ``unavailable`` when
        the bridge came back without it (``bridge_restarted``/``result_lost``), or was held by
        no replica for ``grace_period_s`` (``bridge_disconnected``)."""
        del params  # never sent again: the bridge's outbox is the only source of the result
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self._awaits[request_id] = device.bridge_id
        return asyncio.get_running_loop().create_task(
            self._adopted(device, request_id, method, sent_session, timeout_s, future))

    async def _adopted(
        self, device: DeviceRef, request_id: str, method: str, sent_session: str,
        timeout_s: float | None, future: asyncio.Future[dict[str, Any]],
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        bridge_id = device.bridge_id
        try:
            lost = await self._adopt(keys=[self._awaits_key(bridge_id)],
                                     args=[request_id, f"{self.replica_id} {sent_session}",
                                           self._await_ttl_ms])
            if isinstance(lost, bytes):
                reason = lost.decode(errors="replace").partition(" ")[2] or "result_lost"
                raise RpcError(ErrorCode.UNAVAILABLE, f"the bridge of {device} came back "
                               "without the request's result", {"reason": reason})
            log.info("cluster: adopted request %s %s on %s", request_id, method, device)
            away: float | None = None
            async with asyncio.timeout(timeout_for(method, self.settings, timeout_s)):
                while True:
                    done, _ = await asyncio.wait({future},
                                                 timeout=self.settings.cluster_heartbeat_s)
                    if done:
                        return future.result()
                    local = self.hub.entry(bridge_id)
                    held = (local is not None and local.conn is not None) or bool(
                        await self.redis.exists(self._k("bridge", bridge_id)))
                    if held:
                        away = None
                    elif away is None:
                        away = loop.time()
                    elif loop.time() - away >= self.settings.grace_period_s:
                        raise RpcError(ErrorCode.UNAVAILABLE, f"the bridge of {device} did not "
                                       "come back", {"reason": "bridge_disconnected"})
        except TimeoutError:
            raise RpcError(ErrorCode.TIMEOUT, f"{method} on {device} timed out",
                           {"request": request_id}) from None
        except (RedisError, OSError) as exc:
            raise RpcError(ErrorCode.UNAVAILABLE, f"cluster routing failed: {exc}",
                           {"reason": "redis_unavailable"}) from exc
        finally:
            self._waiting.pop(request_id, None)
            with contextlib.suppress(RedisError, OSError):
                await self.settled(bridge_id, request_id)

    async def foreign(self, entry: BridgeEntry, hello: Hello) -> set[str]:
        """The ids other replicas (or our adopted runs) wait for on this bridge, which its
        ``hello`` says it holds: the ``welcome`` lists them so the bridge keeps and re-sends
        their results. One it does not hold is marked lost, and its waiter told."""
        if self._closed:
            return set()
        try:
            rows = await self.redis.hgetall(self._awaits_key(entry.id))
            held = set(hello.held)
            listed: set[str] = set()
            for raw_id, raw in rows.items():
                request_id, value = _text(raw_id), _text(raw)
                replica, _, session = value.partition(" ")
                if replica == "lost" or (replica == self.replica_id
                                         and entry.session.pending(request_id) is not None):
                    continue  # gone, or our own call: the session decides for those
                if request_id in held:
                    listed.add(request_id)
                    continue
                reason = "result_lost" if session == hello.session else "bridge_restarted"
                waiter = await self._lose(keys=[self._awaits_key(entry.id)],
                                          args=[request_id, f"lost {reason}"])
                if isinstance(waiter, bytes):
                    error = RpcError(ErrorCode.UNAVAILABLE, "the bridge no longer holds the "
                                     "request's result", {"reason": reason})
                    await self._send_res(_text(waiter).partition(" ")[0], {
                        "k": "res", "id": request_id, "bridge": entry.id, "e": error.to_wire()})
            return listed
        except (RedisError, OSError) as exc:
            log.warning("cluster: cannot read the waits on bridge %s: %s", entry.name, exc)
            return set()

    async def relay(self, entry: BridgeEntry, res: Res) -> bool:
        """Pass a held result to the replica waiting for it. True once it reached it (a
        subscriber got the message, or it is us): the caller acks it to the bridge. While the
        waiter is dead and not yet replaced by an adopter, tried again every heartbeat;
        False (not acked: the bridge keeps it) when nobody waits any more."""
        conn = entry.conn
        body: dict[str, Any] = {"k": "res", "id": res.id, "bridge": entry.id}
        if res.error is not None:
            body["e"] = res.error.to_error().to_wire()
        else:
            body["r"] = res.result
        loop = asyncio.get_running_loop()
        unreached: float | None = None
        while not self._closed and entry.conn is conn:
            try:
                value = await self.redis.hget(self._awaits_key(entry.id), res.id)
                replica = _text(value).partition(" ")[0] if value is not None else "lost"
                if replica == "lost":
                    return False
                if await self._send_res(replica, body):
                    log.info("cluster: bridge %s: result %s relayed to replica %s", entry.name,
                             res.id, replica)
                    return True
            except (RedisError, OSError, TypeError, ValueError) as exc:
                log.warning("cluster: result %s not relayed: %s", res.id, exc)
            now = loop.time()
            if unreached is None:
                unreached = now
            elif now - unreached >= self._await_ttl_ms / 1000:
                return False
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
        return False

    async def _send_res(self, replica: str, body: dict[str, Any]) -> bool:
        if replica == self.replica_id:
            self._dispatch(body)
            return True
        return bool(await self.redis.publish(self.channel(replica), _pack(body)))

    # -- forwarding: the calling side

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
                await self.redis.publish(self.channel(replica), _pack(
                    {"k": "cancel", "id": request_id, "from": self.replica_id}))
            raise
        finally:
            self._waiting.pop(request_id, None)

    async def _ask(self, replica: str, message: dict[str, Any],
                   future: asyncio.Future[dict[str, Any]], deadline: float,
                   gone: RpcError, what: str) -> dict[str, Any]:
        """Publish ``message`` to ``replica`` and wait up to ``deadline`` seconds for
        ``future``, its answer. Raises ``gone`` when nobody listens on its channel or its
        liveness key expires meanwhile (checked every heartbeat); :class:`RpcError`
        ``timeout`` ("``what`` timed out") or ``unavailable`` (Redis unreachable)."""
        try:
            if await self.redis.publish(self.channel(replica), _pack(message)) == 0:
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

    # -- logcat streams: the requesting side

    async def stream(self, replica: str, device: DeviceRef,
                     params: dict[str, Any]) -> RemoteLogStream:
        """Ask ``replica`` (which holds the device's bridge) to subscribe to its logcat and
        relay the chunks here. The caller authorized the user already.

        Raises :class:`RpcError`: the subscription's own typed error, or ``unavailable`` when
        the replica is unreachable or dies before it answers. Once open, the stream ends with
        an ``eof`` of its own when the holder dies (``replica_lost``) or shuts down
        (``replica_shutdown``, sent by it), the bridge moves to
        another replica (``bridge_moved``) or Redis stays unreachable for ``cluster_ttl_s``
        (``redis_unavailable``), checked every heartbeat; :meth:`stop_stream` ends it here and
        tells the holder."""
        stream_id = uuid.uuid4().hex
        stream = RemoteLogStream(stream_id=stream_id, replica=replica, bridge_id=device.bridge_id,
                                 serial=device.serial,
                                 max_batches=self.settings.stream_queue_batches, params=params)
        message: dict[str, Any] = {"k": "sub", "id": stream_id, "from": self.replica_id,
                                   "p": params, "bridge": device.bridge_id,
                                   "serial": device.serial, "owner_id": device.owner_id,
                                   "name": device.bridge_name}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[stream_id] = future
        self._streams[stream_id] = stream  # before the sub: chunks follow its answer at once
        gone = RpcError(ErrorCode.UNAVAILABLE, f"the replica holding the bridge of {device} "
                        "is unreachable", {"reason": "replica_unreachable"})
        deadline = (timeout_for("device.logcat.subscribe", self.settings)
                    + self.settings.cluster_ttl_s)
        opened = False
        try:
            answer = await self._ask(replica, message, future, deadline, gone,
                                     f"logcat subscription on replica {replica}")
            channel = answer.get("channel")
            stream.channel = channel if isinstance(channel, str) else ""
            watch = stream.watch = asyncio.get_running_loop().create_task(
                self._watch(stream), name=f"cluster-stream-{stream_id[:8]}")
            self._tasks.add(watch)
            watch.add_done_callback(self._tasks.discard)
            opened = True
            log.info("cluster: logcat of %s relayed from replica %s (stream %s)", device,
                     replica, stream_id)
            return stream
        finally:
            self._waiting.pop(stream_id, None)
            if not opened:  # failed or cancelled: the holder may have subscribed already
                self._streams.pop(stream_id, None)
                stream.end("unsubscribed")
                self._tell(replica, {"k": "unsub", "id": stream_id, "from": self.replica_id})

    @property
    def streams_relayed(self) -> int:
        """Logcat streams read here from bridges other replicas hold."""
        return len(self._streams)

    @property
    def streams_served(self) -> int:
        """Logcat streams this replica subscribes to for other replicas."""
        return len(self._served)

    def stop_stream(self, stream: LogStream) -> bool:
        """``hub.unsubscribe`` of a relayed stream: ended here, and the holder told to stop
        (in the background: the consumer's handler never waits for Redis). False for a
        local stream."""
        if not isinstance(stream, RemoteLogStream):
            return False
        stream.end("unsubscribed")
        if self._streams.pop(stream.stream_id, None) is not None:
            self._tell(stream.replica,
                       {"k": "unsub", "id": stream.stream_id, "from": self.replica_id})
        if stream.watch is not None:
            stream.watch.cancel()
        return True

    def _tell(self, replica: str, body: dict[str, Any]) -> None:
        """Publish ``body`` to ``replica`` in the background, best effort."""
        if self._closed:
            return

        async def publish() -> None:
            with contextlib.suppress(RedisError, OSError):
                await self.redis.publish(self.channel(replica), _pack(body))

        task = asyncio.get_running_loop().create_task(publish())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, stream: RemoteLogStream) -> None:
        """Every heartbeat: is the holder alive, and does it still hold the bridge? Pub/sub
        says nothing when a publisher dies, so without this a consumer would wait forever."""
        unreachable: float | None = None
        loop = asyncio.get_running_loop()
        key = self._k("bridge", stream.bridge_id)
        reason: str | None = None
        while reason is None:
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
            if stream.ended or self._streams.get(stream.stream_id) is not stream:
                return
            try:
                alive = await self.replica_alive(stream.replica)
                holder = await self.redis.hget(key, "replica")
            except (RedisError, OSError) as exc:
                now = loop.time()
                unreachable = now if unreachable is None else unreachable
                if now - unreachable >= self.settings.cluster_ttl_s:
                    log.warning("cluster: stream %s ends: %s", stream.stream_id, exc)
                    reason = "redis_unavailable"
                continue
            unreachable = None
            if not alive:
                reason = "replica_lost"
            elif holder is not None and _text(holder) != stream.replica:
                reason = "bridge_moved"  # the old holder ends it after its grace; we end now
        if self._streams.pop(stream.stream_id, None) is not None:
            log.info("cluster: logcat stream %s from replica %s ends: %s", stream.stream_id,
                     stream.replica, reason)
            stream.end(reason)
            self._tell(stream.replica,
                       {"k": "unsub", "id": stream.stream_id, "from": self.replica_id})

    def _chunk(self, body: dict[str, Any]) -> None:
        stream = self._streams.get(str(body.get("id")))
        if stream is None:
            # A stream we no longer read (its stop was lost, or we gave up on it): say so.
            sender = body.get("from")
            if isinstance(sender, str):
                self._tell(sender, {"k": "unsub", "id": str(body.get("id")),
                                    "from": self.replica_id})
            return
        stream.take(body)
        if stream.ended:
            self._streams.pop(stream.stream_id, None)
            if stream.watch is not None:
                stream.watch.cancel()

    # -- logcat streams: the holding side

    async def _serve_stream(self, body: dict[str, Any], served: _Served) -> None:
        """Subscribe locally for another replica and publish the chunks to it, each once, in
        order. Bounded: the next chunk is taken only when the last ``PUBLISH`` returned, so a
        slow requester (or Redis) costs lines in our local stream's bounded queue, counted
        there as ``dropped``, never memory. Ends when the requester says ``unsub``, when a
        ``PUBLISH`` reaches nobody (the requester is gone), when its liveness key expires
        (checked every heartbeat while no line comes), or at the stream's ``eof``."""
        sender, stream_id = str(body["from"]), str(body["id"])
        channel = self.channel(sender)
        reply: dict[str, Any] = {"k": "res", "id": stream_id}
        stream: LogStream | None = None
        try:
            params, bridge_id, serial = body.get("p"), body.get("bridge"), body.get("serial")
            if not isinstance(params, dict) or not isinstance(bridge_id, str) \
                    or not isinstance(serial, str):
                raise RpcError(ErrorCode.BAD_REQUEST, "malformed stream request")
            name = body.get("name")
            device = DeviceRef(bridge_id, serial, str(body.get("owner_id", "")),
                               name if isinstance(name, str) else None)
            stream = served.stream = await self.hub.subscribe_logcat(device, params,
                                                                     route=False)
            reply["r"] = {"channel": stream.channel}
        except RpcError as exc:
            reply["e"] = exc.to_wire()
        except Exception:
            log.exception("cluster: logcat stream for replica %s failed", sender)
            reply["e"] = RpcError(ErrorCode.INTERNAL, "internal error").to_wire()
        try:
            if served.stopped or not await self.redis.publish(channel, _pack(reply)) \
                    or stream is None:
                return
            log.info("cluster: relaying logcat of %s to replica %s (stream %s)", stream.serial,
                     sender, stream_id)
            seq = 0
            while True:
                try:
                    async with asyncio.timeout(self.settings.cluster_heartbeat_s):
                        chunk = await stream.get()
                except TimeoutError:
                    if served.stopped:
                        return
                    if not await self.replica_alive(sender):
                        log.info("cluster: stream %s: replica %s is gone", stream_id, sender)
                        return
                    continue
                if served.stopped:
                    return
                reached = await self.redis.publish(
                    channel, _pack(_chunk_body(stream_id, self.replica_id, seq, chunk)))
                seq += 1
                if chunk.eof:
                    return
                if not reached:
                    log.info("cluster: stream %s: nobody listens for replica %s any more",
                             stream_id, sender)
                    return
        except (RedisError, OSError, TypeError, ValueError) as exc:
            log.warning("cluster: stream %s for replica %s ends: %s", stream_id, sender, exc)
        finally:
            if stream is not None:
                await self.hub.unsubscribe(stream)

    def _stop_serving(self, body: dict[str, Any]) -> None:
        served = self._served.get((str(body.get("from")), str(body.get("id"))))
        if served is None:
            return
        served.stopped = True
        if served.stream is not None:
            served.stream.end("unsubscribed")  # wakes the relay, which unsubscribes

    # -- the listening side

    async def _listen(self) -> None:
        while not self._closed:  # see _heartbeat_loop
            try:
                message = await self._pubsub.get_message(timeout=None)
            except (RedisError, OSError) as exc:
                log.warning("cluster: subscription failed (%s); resubscribing", exc)
                await asyncio.sleep(self.settings.cluster_heartbeat_s)
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.subscribe(self.channel(self.replica_id))
                continue
            if message is None or message.get("type") != "message":
                continue
            body = _unpack(message.get("data"))
            if body is None:
                log.warning("cluster: dropped a malformed message")
                continue
            self._dispatch(body)

    def _dispatch(self, body: dict[str, Any]) -> None:
        kind = body.get("k")
        if kind == "res":
            future = self._waiting.get(str(body.get("id")))
            if future is None and isinstance(body.get("bridge"), str):
                self._relayed(body)  # a held result for a call of ours whose bridge moved
                return
            if future is None or future.done():
                return
            if body.get("e") is not None:
                future.set_exception(_error(body["e"]))
            else:
                result = body.get("r")
                future.set_result(result if isinstance(result, dict) else {})
        elif kind == "req":
            sender, request_id = body.get("from"), body.get("id")
            if not isinstance(sender, str) or not isinstance(request_id, str):
                return
            task = asyncio.get_running_loop().create_task(self._serve(body))
            key = (sender, request_id)
            self._serving[key] = task
            task.add_done_callback(lambda _t: self._serving.pop(key, None))
        elif kind == "cancel":
            serving = self._serving.get((str(body.get("from")), str(body.get("id"))))
            if serving is not None:
                serving.cancel()
        elif kind == "chunk":
            self._chunk(body)
        elif kind == "sub":
            sender, stream_id = body.get("from"), body.get("id")
            if not isinstance(sender, str) or not isinstance(stream_id, str):
                return
            key = (sender, stream_id)
            served = self._served[key] = _Served()
            task = asyncio.get_running_loop().create_task(self._serve_stream(body, served))
            self._serving[key] = task

            def done(_t: asyncio.Task[None]) -> None:
                self._serving.pop(key, None)
                self._served.pop(key, None)

            task.add_done_callback(done)
        elif kind == "unsub":
            self._stop_serving(body)
        elif kind == "replace":
            self._replaced(str(body.get("bridge")), str(body.get("by")))
        elif kind == "revoked":
            token_id, user_id = body.get("token"), body.get("user")
            if isinstance(token_id, str):
                self.hub.kick_token(token_id)
                if self.access is not None:
                    self.access.token_changed(token_id)
            if isinstance(user_id, str) and self.access is not None:
                self.access.user_changed(user_id)
        elif kind == "forget":
            bridge_id, serial = body.get("bridge"), body.get("serial")
            if isinstance(bridge_id, str) and (serial is None or isinstance(serial, str)):
                self.hub.forget(bridge_id, serial)

    def _relayed(self, body: dict[str, Any]) -> None:
        request_id = str(body.get("id"))
        if body.get("e") is not None:
            completion = Completion(request_id, "", error=_error(body["e"]))
        else:
            result = body.get("r")
            completion = Completion(request_id, "", result if isinstance(result, dict) else {})
        self.hub.deliver(str(body["bridge"]), completion)

    def _replaced(self, bridge_id: str, by: str) -> None:
        held = self._claims.pop(bridge_id, None)
        entry = self.hub.entry(bridge_id)
        if entry is None or entry.conn is None or (held is not None and held[0] is not entry.conn):
            return
        log.info("cluster: bridge %s: a newer session on replica %s replaces ours (4409)",
                 entry.name, by)
        entry.conn.kick(CloseCode.REPLACED, "replaced by a newer session of this bridge")

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
            await self.redis.publish(self.channel(str(body["from"])), _pack(reply))
        except (RedisError, OSError, TypeError, ValueError) as exc:
            log.warning("cluster: result of %s not returned: %s", body.get("id"), exc)
