"""Pure session objects for both ends: frames in, frames and outcomes out.

No sockets, no asyncio, no clock reads: every method that depends on time takes ``now``
(seconds on the caller's monotonic clock). The I/O layer (the bridge's connection, the
controller's hub) decodes a frame, hands it to :meth:`receive` (or the per-kind method),
acts on the returned outcome, then sends whatever :meth:`frames_to_send` drains — the shape of
websockets' ``receive_data()`` / ``data_to_send()``.

A session outlives its connections: it is created once per bridge process (bridge side) or per
bridge (controller side), and each WebSocket connection runs it through::

    DISCONNECTED ──connection_made──▶ HANDSHAKE ──hello/welcome──▶ OPEN
         ▲                               │                          │
         └──────────connection_lost──────┴──────────────────────────┘
    any state ──close()──▶ CLOSED (final)

Delivery theory (docs/design.md §3): the controller keeps every request *pending* until its result
arrives; the bridge keeps every result in an *outbox* until it is acked, and remembers
*finished* ids for a while. On reconnect the bridge's ``hello`` lists the ids it holds
(running or in the outbox); the controller re-sends the pending requests that are not among
them and answers with ``welcome`` listing all it still waits for; the bridge then re-sends the
outbox results the controller waits for and drops the rest. A re-sent request that is
running is ignored (its result will come), one that is done is answered from the outbox, one
already acked is ignored: exactly-once effect, at-least-once delivery, dedupe by id.

If the bridge *process* restarted (``hello.session`` differs from the one a request was sent
on), its memory is gone: idempotent methods are re-sent, the others fail with
``unavailable`` rather than risk running twice.

The controller's end is :mod:`protocol.session_controller`, the bridge's
:mod:`protocol.session_bridge`, both over :mod:`protocol.session_base`'s state machine; every
public name is importable from here.
"""

from __future__ import annotations

from protocol.session_base import State
from protocol.session_bridge import Admission, BridgeSession, WelcomeOutcome
from protocol.session_controller import (
    ACK_BATCH,
    Completion,
    ControllerSession,
    Duplicate,
    Liveness,
    Pending,
    Relay,
    Resume,
)

__all__ = [
    "ACK_BATCH",
    "Admission",
    "BridgeSession",
    "Completion",
    "ControllerSession",
    "Duplicate",
    "Liveness",
    "Pending",
    "Relay",
    "Resume",
    "State",
    "WelcomeOutcome",
]
