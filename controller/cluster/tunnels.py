"""Relayed tunnels: a remote adb tunnel (docs/tunnel.md) whose WebSocket reached a replica other
than the one holding the device's bridge (``topen``, ``tin``, ``tout``, ``tend``, ``tfin`` on
pub/sub: :mod:`controller.cluster.wire`; docs/cluster.md, "Tunnels").

The tunnel itself — its streams, windows, per-``OPEN`` authorization and audit — runs on the
holder, as an ordinary :class:`~controller.hub.tunnel.Tunnel`: its bridge calls and the
``evt`` frames of its streams stay local there. Between the client's replica and the holder go
only the tunnel's frames, unchanged, in two ordered pipes:

* the requesting side (:meth:`TunnelRelays.tunnel`, a :class:`RemoteTunnel`) publishes each
  client frame as a ``tin``, one at a time and awaited, so the client's WebSocket is read no
  faster than Redis takes them;
* the holding side (:meth:`TunnelRelays._serve_tunnel`) publishes each frame its tunnel hands
  out as a ``tout``, one at a time and awaited, then a ``tfin`` with how the tunnel ended.

Each pipe numbers its messages from 0: a gap (a message lost while a subscription to Redis was
being re-established) ends the tunnel (``relay_lost``) — an adb stream with a hole in it would
be corrupt, not late. Nothing here adds a buffer the tunnel's own flow control does not
bound: the client never has more than ``window`` bytes of a stream unacknowledged, nor the
bridge, so what waits in a :class:`RemoteTunnel` for the client is at most what the holder's
tunnel would have queued for it (past that, the tunnel ends, as the holder's would).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from redis.exceptions import RedisError

from controller.auth.authorization import DeviceRef, Principal
from controller.cluster.core import ClusterCore, answering, device_in
from controller.cluster.wire import as_text, pack
from controller.hub.channels import FrameOutbox
from controller.store import TokenKind
from protocol.alloc import keep_freed_memory
from protocol.errors import ErrorCode, RpcError
from protocol.methods import timeout_for
from protocol.tunnel_methods import TUNNEL_START, decode_frame, encode_frame, parse_data_frame

log = logging.getLogger("droidwire.controller.cluster")


def principal_wire(principal: Principal) -> dict[str, Any]:
    """What the holder needs of the caller to run its tunnel (never a token: its id only)."""
    return {"token_id": principal.token_id, "kind": principal.kind.value,
            "name": principal.name, "user_id": principal.user_id,
            "user_name": principal.user_name, "is_admin": principal.is_admin,
            "bridge_id": principal.bridge_id, "scopes": list(principal.scopes)}


def principal_from(data: Any) -> Principal:
    """The caller a ``topen`` names; ``bad_request`` when malformed."""
    try:
        assert isinstance(data, dict)
        texts = [data[k] for k in ("token_id", "name", "user_id", "user_name")]
        assert all(isinstance(t, str) for t in texts) and isinstance(data["is_admin"], bool)
        bridge_id, scopes = data.get("bridge_id"), data.get("scopes") or []
        assert bridge_id is None or isinstance(bridge_id, str)
        assert isinstance(scopes, list) and all(isinstance(s, str) for s in scopes)
        return Principal(data["token_id"], TokenKind(data["kind"]), data["name"],
                         data["user_id"], data["user_name"], data["is_admin"], bridge_id,
                         tuple(scopes))
    except (AssertionError, KeyError, ValueError):
        raise RpcError(ErrorCode.BAD_REQUEST, "malformed relayed tunnel caller") from None


class RemoteTunnel:
    """A tunnel running on ``replica`` (which holds the device's bridge), read and written here
    like a local :class:`~controller.hub.tunnel.Tunnel`, so the WebSocket handler need not know.
    """

    def __init__(self, relays: TunnelRelays, replica: str, principal: Principal,
                 device: DeviceRef, limit: int) -> None:
        keep_freed_memory()  # this replica relays megabyte frames from now on: protocol/alloc.py
        self.relays = relays
        self.replica = replica
        self.principal = principal
        self.device = device
        self.relay = uuid.uuid4().hex  # the pipe's id on Redis
        self.id = self.relay[:12]  # the holder's tunnel's id once it answered (the audit's)
        self.opened = 0
        self.refused = 0
        self.ended: str | None = None
        self._out = FrameOutbox(limit)
        self._finished = asyncio.Event()  # the holder's tfin came (or will not)
        self._seq_in = 0  # the next tout's number
        self._seq_out = 0  # the next tin's number
        self._watch: asyncio.Task[None] | None = None

    # -- the handler's side (as Tunnel)

    async def start(self) -> bytes:
        """Ask the holder to start the tunnel; its ``hello`` frame. Raises :class:`RpcError`:
        the holder's typed refusal, or ``unavailable`` when it is unreachable."""
        return await self.relays._open_tunnel(self)

    async def receive(self, data: bytes) -> None:
        """One client frame: checked here (``bad_request``), then sent to the holder, in
        order; returns once Redis took it (the client's back-pressure)."""
        if parse_data_frame(data) is None:  # a push's data frames: their head is enough
            decode_frame(data)
        if self.ended is not None:
            return
        seq, self._seq_out = self._seq_out, self._seq_out + 1
        try:
            reached = await self.relays.redis.publish(self.relays.channel(self.replica), pack(
                {"k": "tin", "id": self.relay, "from": self.relays.replica_id, "seq": seq,
                 "f": data}))
        except (RedisError, OSError) as exc:
            log.warning("cluster: tunnel %s: %s", self.id, exc)
            self.end("unavailable: redis_unavailable")
            return
        if not reached:
            self.end("unavailable: replica_lost")

    async def next_frame(self) -> bytes | None:
        return await self._out.next_frame()

    def end(self, reason: str) -> None:
        """End here: the client gets ``end`` after what is queued, the holder ends its tunnel."""
        if self.ended is not None:
            return
        self.ended = reason
        log.info("cluster: tunnel %s relayed from replica %s ends: %s", self.id, self.replica,
                 reason)
        self._out.finish(encode_frame("end", reason=reason[:200]))
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()
        self.relays._tell(self.replica, {"k": "tend", "id": self.relay,
                                         "from": self.relays.replica_id, "reason": reason[:200]})
        if self._finished.is_set():
            self._forget()
        else:
            # The holder's counts come with its tfin, shortly (we listen for it till then);
            # never wait past a TTL.
            asyncio.get_running_loop().call_later(self.relays.settings.cluster_ttl_s,
                                                  self._finish)

    def _finish(self) -> None:
        self._finished.set()
        self._forget()

    def _forget(self) -> None:
        if self.relays._tunnels.get(self.relay) is self:
            del self.relays._tunnels[self.relay]

    async def finished(self) -> None:
        """Wait until the holder said how its tunnel ended (its counts), at most a TTL."""
        await self._finished.wait()

    # -- the holder's messages (from the listener; never blocks)

    def take(self, body: dict[str, Any]) -> None:
        """A ``tout`` (a frame for the client) or the ``tfin`` from the holder."""
        if body.get("k") == "tfin":
            opened, refused = body.get("opened"), body.get("refused")
            self.opened = opened if type(opened) is int else self.opened
            self.refused = refused if type(refused) is int else self.refused
            if self.ended is None:
                if body.get("seq") != self._seq_in:
                    self.end("unavailable: relay_lost")  # its end frame is what was lost
                else:
                    # The holder's tunnel ended: its ``end`` frame is queued already.
                    self.ended = str(body.get("reason") or "closed")[:200]
                    if self._watch is not None:
                        self._watch.cancel()
                    self._out.finish(None)
            self._finish()
            return
        if self.ended is not None:
            return  # frames after our end: nobody reads them
        seq = body.get("seq")
        if seq != self._seq_in or type(seq) is not int:
            log.warning("cluster: tunnel %s: relayed frame %s lost (expected %d)", self.id,
                        seq, self._seq_in)
            self.end("unavailable: relay_lost")
            return
        self._seq_in += 1
        frame = body.get("f")
        if not isinstance(frame, bytes):
            return
        if not self._out.put(frame, len(frame)):
            self.end("the bridge overran the tunnel's windows")


class TunnelRelays(ClusterCore):
    """Tunnels relayed between replicas, both sides."""

    def tunnel(self, replica: str, principal: Principal, device: DeviceRef) -> RemoteTunnel:
        """A tunnel to ``device`` on ``replica`` (which holds its bridge), for ``principal``
        (authorized here already); :meth:`RemoteTunnel.start` opens it."""
        # Whole frames are counted here (the holder counts their device bytes): 1 KiB of
        # framing per stream more.
        limit = self.hub.tunnels.queue_limit(per_frame=1024)
        return RemoteTunnel(self, replica, principal, device, limit)

    @property
    def tunnels_relayed(self) -> int:
        """Tunnels whose client is here, relayed from another replica's bridge."""
        return len(self._tunnels)

    @property
    def tunnels_served(self) -> int:
        """Tunnels this replica runs for clients of other replicas."""
        return len(self._served_tunnels)

    async def _open_tunnel(self, tunnel: RemoteTunnel) -> bytes:
        device = tunnel.device
        message: dict[str, Any] = {"k": "topen", "id": tunnel.relay, "from": self.replica_id,
                                   "principal": principal_wire(tunnel.principal),
                                   "bridge": device.bridge_id, "serial": device.serial,
                                   "owner_id": device.owner_id, "name": device.bridge_name}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[tunnel.relay] = future
        self._tunnels[tunnel.relay] = tunnel  # before the topen: its frames follow the answer
        gone = RpcError(ErrorCode.UNAVAILABLE, f"the replica holding the bridge of {device} "
                        "is unreachable", {"reason": "replica_unreachable"})
        deadline = timeout_for(TUNNEL_START.name, self.settings) + self.settings.cluster_ttl_s
        opened = False
        try:
            answer = await self._ask(tunnel.replica, message, future, deadline, gone,
                                     f"tunnel on replica {tunnel.replica}")
            hello = answer.get("hello")
            if not isinstance(hello, bytes):
                raise RpcError(ErrorCode.INTERNAL, "the holder answered without a hello")
            holder_id = answer.get("tunnel")
            if isinstance(holder_id, str) and holder_id:
                tunnel.id = holder_id[:64]
            watch = tunnel._watch = asyncio.get_running_loop().create_task(
                self._watch_tunnel(tunnel), name=f"cluster-tunnel-{tunnel.id[:8]}")
            self._tasks.add(watch)
            watch.add_done_callback(self._tasks.discard)
            opened = True
            log.info("cluster: tunnel to %s relayed from replica %s (tunnel %s)", device,
                     tunnel.replica, tunnel.id)
            return hello
        finally:
            self._waiting.pop(tunnel.relay, None)
            if not opened:  # failed or cancelled: the holder may have started it already
                tunnel.end("refused")
                tunnel._finish()

    async def _watch_tunnel(self, tunnel: RemoteTunnel) -> None:
        """Every heartbeat: is the holder alive, and does it still hold the bridge? (Pub/sub
        says nothing when a publisher dies.)"""
        unreachable: float | None = None
        loop = asyncio.get_running_loop()
        key = self._k("bridge", tunnel.device.bridge_id)
        while tunnel.ended is None:
            await asyncio.sleep(self.settings.cluster_heartbeat_s)
            try:
                alive = await self.replica_alive(tunnel.replica)
                holder = await self.redis.hget(key, "replica")
            except (RedisError, OSError) as exc:
                now = loop.time()
                unreachable = now if unreachable is None else unreachable
                if now - unreachable >= self.settings.cluster_ttl_s:
                    log.warning("cluster: tunnel %s ends: %s", tunnel.id, exc)
                    tunnel.end("unavailable: redis_unavailable")
                continue
            unreachable = None
            if not alive:
                tunnel.end("unavailable: replica_lost")
                tunnel._finish()  # no tfin will come
            elif holder is not None and as_text(holder) != tunnel.replica:
                tunnel.end("unavailable: bridge_moved")

    def _tunnel_frame(self, body: dict[str, Any]) -> None:
        """A ``tout`` or ``tfin`` from a holder."""
        tunnel = self._tunnels.get(str(body.get("id")))
        if tunnel is None:
            sender = body.get("from")
            if isinstance(sender, str) and body.get("k") == "tout":
                # A tunnel we no longer relay (its end was lost): say so again.
                self._tell(sender, {"k": "tend", "id": str(body.get("id")),
                                    "from": self.replica_id, "reason": "client gone"})
            return
        tunnel.take(body)

    # -- the holding side

    async def _serve_tunnel(self, body: dict[str, Any]) -> None:
        """Run a tunnel for another replica's client: start it, answer with its ``hello``,
        then publish each frame it hands out, in order, each once; ends with the tunnel (a
        ``tfin`` after its ``end`` frame), when the requester says ``tend``, when a
        ``PUBLISH`` reaches nobody (the requester is gone), or when the requester's liveness
        key expires (checked every heartbeat while the tunnel is quiet)."""
        sender, relay_id = str(body["from"]), str(body["id"])
        key = (sender, relay_id)
        channel = self.channel(sender)
        reply: dict[str, Any] = {"k": "res", "id": relay_id}
        tunnel = None
        with answering(reply, "tunnel", sender):
            principal = principal_from(body.get("principal"))
            tunnel = self.hub.tunnels.open(principal, device_in(body, "tunnel"))
            self._served_tunnels[key] = tunnel
            reply["r"] = {"hello": await tunnel.start(), "tunnel": tunnel.id}
        seq = 0
        try:
            if "e" in reply and tunnel is not None:
                tunnel.end("refused")
                tunnel = None
            if not await self.redis.publish(channel, pack(reply)) or tunnel is None:
                return
            log.info("cluster: serving tunnel %s to %s for replica %s", tunnel.id,
                     tunnel.device, sender)
            while True:
                try:
                    async with asyncio.timeout(self.settings.cluster_heartbeat_s):
                        frame = await tunnel.next_frame()
                except TimeoutError:
                    if not await self.replica_alive(sender):
                        log.info("cluster: tunnel %s: replica %s is gone", tunnel.id, sender)
                        tunnel.end("client gone")
                        return
                    continue
                if frame is None:
                    break
                reached = await self.redis.publish(channel, pack(
                    {"k": "tout", "id": relay_id, "from": self.replica_id, "seq": seq,
                     "f": frame}))
                seq += 1
                if not reached:
                    log.info("cluster: tunnel %s: nobody listens for replica %s any more",
                             tunnel.id, sender)
                    tunnel.end("client gone")
                    return
            await self.redis.publish(channel, pack(
                {"k": "tfin", "id": relay_id, "from": self.replica_id, "seq": seq,
                 "reason": (tunnel.ended or "closed")[:200], "opened": tunnel.opened,
                 "refused": tunnel.refused}))
        except (RedisError, OSError) as exc:
            log.warning("cluster: tunnel for replica %s ends: %s", sender, exc)
        finally:
            if tunnel is not None:
                tunnel.end("relay ended")
            self._served_tunnels.pop(key, None)
            self._tunnel_seq.pop(key, None)

    def _tunnel_in(self, body: dict[str, Any]) -> None:
        """A client frame (``tin``) for a tunnel we serve."""
        key = (str(body.get("from")), str(body.get("id")))
        tunnel = self._served_tunnels.get(key)
        if tunnel is None or tunnel.ended is not None:
            return
        seq, expected = body.get("seq"), self._tunnel_seq.get(key, 0)
        if type(seq) is not int or seq != expected:
            log.warning("cluster: tunnel %s: client frame %s lost (expected %d)", tunnel.id,
                        seq, expected)
            tunnel.end("unavailable: relay_lost")
            return
        self._tunnel_seq[key] = expected + 1
        data = body.get("f")
        try:
            tunnel.take(data if isinstance(data, bytes) else b"")
        except RpcError as exc:
            tunnel.end(f"bad_request: {exc.message}")

    def _tunnel_end(self, body: dict[str, Any]) -> None:
        """The requester ended a tunnel we serve (its client left, its access lapsed…)."""
        tunnel = self._served_tunnels.get((str(body.get("from")), str(body.get("id"))))
        if tunnel is not None:
            tunnel.end(str(body.get("reason") or "client gone")[:200])

    def _end_tunnels(self, reason: str) -> list[asyncio.Task[None]]:
        """Leaving: end the tunnels relayed to us, and those we serve (their clients told
        ``reason``); the relays of the latter, which publish the ends, then finish."""
        for relayed in list(self._tunnels.values()):
            relayed.end("shutdown")
            relayed._finish()
        relays = []
        for key, served in list(self._served_tunnels.items()):
            served.end(reason)
            if (relay := self._serving.get(key)) is not None:
                relays.append(relay)
        return relays
