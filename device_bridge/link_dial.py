"""How the link reaches the controller: the bridge endpoint's URL, the dial, and the connection
class it makes.

docs/design.md §3–4, §4.1: dial ``URL/v1/bridge`` with subprotocol ``droidwire.v1``, the token
in an ``Authorization: Bearer`` header (never in the URL), compression off (it costs 3× on log
streams), websockets' own keepalive (``ping_interval``/``ping_timeout``/``close_timeout`` from
the settings) and ``max_size`` = the protocol's frame cap. The connection is a
:class:`LinkConnection`, whose read callback may hand a small frame straight to the link.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.frames import Frame, Opcode
from websockets.protocol import Event

from protocol.envelope import SUBPROTOCOL
from protocol.settings import Settings
from protocol.tunnel_methods import MAX_WRITE

__all__ = ["BRIDGE_PATH", "FAST_FRAME_BYTES", "READ_BYTES", "LinkConnection", "bridge_url", "dial"]

BRIDGE_PATH = "/v1/bridge"
# Frames up to this size may be handled in the read callback (Link._frame_now): up to a tunnel's
# write (MAX_WRITE bytes and its envelope), decoded there rather than one wake-up later by the
# reader, which would decode it the same way on the same thread.
FAST_FRAME_BYTES = MAX_WRITE + 64 * 1024
# The most one read of the link's socket takes (a tunnel write is up to 1 MiB and its envelope).
READ_BYTES = 1 << 20


def bridge_url(url: str) -> str:
    """``http(s)://``/``ws(s)://HOST[:PORT][/prefix]`` → the bridge endpoint's ``ws(s)`` URL."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"controller URL {url!r} has no scheme (use wss:// or https://)")
    scheme = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme.lower())
    if scheme not in ("ws", "wss"):
        raise ValueError(f"controller URL {url!r}: scheme must be ws, wss, http or https")
    if "?" in rest or "#" in rest or "@" in rest.split("/", 1)[0]:
        # Credentials travel in the Authorization header only, never in a URL (docs/design.md §6).
        raise ValueError(f"controller URL {url!r} must not carry a query, fragment or user info")
    rest = rest.rstrip("/")
    if not rest.endswith(BRIDGE_PATH):
        rest += BRIDGE_PATH
    return f"{scheme}://{rest}"



async def dial(
    url: str, *, token: str, settings: Settings, ssl: _ssl.SSLContext | None, software: str
) -> ClientConnection:
    """Open one WebSocket to the bridge endpoint ``url`` (a :class:`LinkConnection`)."""
    s = settings
    return await connect(
        url,
        subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
        additional_headers={"Authorization": f"Bearer {token}"},
        compression=None,  # permessage-deflate costs 3x on log streams
        open_timeout=s.handshake_timeout_s,
        ping_interval=s.ping_interval_s,
        ping_timeout=s.ping_timeout_s,
        close_timeout=s.close_timeout_s,
        max_size=s.max_frame_bytes,
        max_queue=64,
        proxy=None,
        ssl=ssl if url.startswith("wss://") else None,
        user_agent_header=f"droidwire-bridge/{software}",
        create_connection=LinkConnection,
    )


class LinkConnection(ClientConnection):
    """websockets' client connection, with one hook: a complete binary frame that arrives
    while the link's reader waits with nothing queued is offered to ``frame_hook`` in the
    read callback (True: handled, not queued). Saves the reader's wake-up — a trip through
    the event loop — per request on the RPC path (docs/benchmarks.md).

    Its socket is read :data:`READ_BYTES` at a time (asyncio's default: 256 KiB), so a tunnel's
    1 MiB write arrives in one or two reads instead of four or five — each read a pass through
    the event loop and websockets' parser (docs/benchmarks.md, the tunnel's section)."""

    frame_hook: Callable[[bytes], bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if hasattr(transport, "max_size"):  # asyncio's socket transport reads that much at most
            transport.max_size = READ_BYTES

    def process_event(self, event: Event) -> None:
        hook = self.frame_hook
        if (hook is not None and isinstance(event, Frame) and event.opcode is Opcode.BINARY
                and event.fin):
            queue = self.recv_messages
            if queue.get_in_progress and not queue.frames.queue and not queue.paused:
                data = event.data
                if hook(data if isinstance(data, bytes) else bytes(data)):
                    return
        super().process_event(event)

