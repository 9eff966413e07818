"""What replicas share in Redis: the key layout, the ``--redis`` URL, and the messages.

Keys (all under the run's prefix ``P``, default ``droidwire``; TTLs from
``settings.cluster_ttl_s``, renewed every ``settings.cluster_heartbeat_s``):

* ``P:replica:RID`` — the replica is alive (a string, with TTL);
* ``P:replicas`` — the set of replica ids that joined; a member whose liveness key is gone
  died: the one replica whose ``SREM`` removes it runs ``on_replica_lost`` (e.g. ending the
  dead replica's unfinished runs in the shared store);
* ``P:bridge:BID`` — a hash: ``owner`` (``RID/CLAIM``, the replica and the connection that
  hold the bridge's one session), ``replica``, ``name``, ``owner_id``, ``devices`` (JSON
  inventory); with TTL, so a dead replica's bridges vanish from listings on their own
  (:mod:`controller.cluster.ownership`);
* ``P:bridges`` — the set of bridge ids that may have a hash (pruned when one is missing);
* ``P:device:DID`` — a device's turn across replicas: a redis-py lock whose token is the run
  holding it, with TTL (renewed while held), so a dead replica's turn frees itself
  (:mod:`controller.cluster.turns`);
* ``P:awaits:BID`` — a hash: request id → ``RID SESSION`` (replica ``RID`` waits for that
  request's result, sent on bridge session ``SESSION``) or ``lost REASON`` (the bridge came
  back without it). Written for requests a run may be resumed from (the executor's
  instrumentation) and by the replica adopting such a run; its TTL
  (``AWAIT_TTLS`` × ``cluster_ttl_s``) is renewed by the heartbeat of every replica waiting
  in it, and outlives a dead waiter long enough for a survivor to adopt its run
  (:mod:`controller.cluster.waits`).

Messages travel on pub/sub, one channel per replica, ``P:rpc:RID``, msgpack maps
(:func:`pack`/:func:`unpack`): ``req`` (forwarded call) → ``res`` (its result, to the caller's
channel), ``cancel`` (the caller gave up), ``replace`` (a newer session of a bridge took over
elsewhere: close ours with 4409). A held result the bridge delivers to a replica other than the
one waiting for it (``P:awaits:BID``) travels as a ``res`` too, and is acked to the bridge only
once the ``PUBLISH`` reached the waiter (else the bridge keeps it, and it is tried again).
A logcat stream on a bridge held elsewhere: ``sub`` (subscribe, answered by a ``res``), then
the holder's ``chunk`` messages (numbered: a gap becomes ``lost_batches``), ``unsub`` when the
consumer leaves (:mod:`controller.cluster.streams`).
A remote adb tunnel whose client reached a replica other than the bridge's holder: ``topen``
(answered by a ``res`` with the tunnel's ``hello``), then the client's frames as ``tin`` and
the tunnel's as ``tout`` (each pipe numbered: a gap ends the tunnel), ``tend`` when the
client's side ends it, ``tfin`` when the holder's tunnel ended (:mod:`controller.cluster.tunnels`).
A live screen whose viewer reached a replica other than the bridge's holder: ``vopen``
(answered by a ``res`` with the codec and source), then the holder's ``vframe`` messages
(numbered: a gap makes an H.264 viewer wait for the next key frame), ``vend`` when the
viewer leaves; ``vlatest`` asks for the newest picture of a live screen, answered by a ``res``
(:mod:`controller.cluster.screens`).
Why pub/sub and not streams: docs/cluster.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgpack

from protocol.errors import ErrorCode, RpcError

DEFAULT_PREFIX = "droidwire"
# Prefixes are key material: keep them to a safe alphabet and length.
_PREFIX_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
_PREFIX_MAX = 64


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


def json_map(text: str | None) -> dict[str, Any]:
    """A JSON object from the registry, or ``{}`` for a missing or malformed one."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def pack(message: dict[str, Any]) -> bytes:
    """One message for a replica's channel."""
    return msgpack.packb(message, use_bin_type=True)


def unpack(data: Any) -> dict[str, Any] | None:
    """A message from our channel, or None for anything but a msgpack map."""
    if not isinstance(data, bytes | bytearray):
        return None
    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException):
        return None
    return message if isinstance(message, dict) else None


def as_text(value: bytes | str) -> str:
    """A Redis reply as text (replies are bytes: the client does not decode)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def wire_error(e: Any) -> RpcError:
    """The typed error another replica sent (``e`` of a ``res``), bounded."""
    if not isinstance(e, dict):
        return RpcError(ErrorCode.INTERNAL, "a replica sent a malformed error")
    data = e.get("data")
    return RpcError(str(e.get("code", "internal")), str(e.get("message", ""))[:2000],
                    data if isinstance(data, dict) else None)
