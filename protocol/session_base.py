"""The connection state machine and outgoing queue both ends of a session share.

::

    DISCONNECTED ──connection_made──▶ HANDSHAKE ──hello/welcome──▶ OPEN
         ▲                               │                          │
         └──────────connection_lost──────┴──────────────────────────┘
    any state ──close()──▶ CLOSED (final)

:class:`BaseSession` is what :class:`~protocol.session_controller.ControllerSession` and
:class:`~protocol.session_bridge.BridgeSession` build on; the delivery theory they implement
together is in :mod:`protocol.session`. Pure: no sockets, no asyncio, no clock reads.
"""

from __future__ import annotations

from enum import IntEnum

from protocol.envelope import Frame, Ping, Pong
from protocol.errors import InvalidState, UnexpectedFrame
from protocol.settings import Settings

__all__ = ["BaseSession", "State"]


class State(IntEnum):
    DISCONNECTED = 0
    HANDSHAKE = 1
    OPEN = 2
    CLOSED = 3


_TRANSITIONS: dict[State, frozenset[State]] = {
    State.DISCONNECTED: frozenset({State.HANDSHAKE, State.CLOSED}),
    State.HANDSHAKE: frozenset({State.OPEN, State.DISCONNECTED, State.CLOSED}),
    State.OPEN: frozenset({State.DISCONNECTED, State.CLOSED}),
    State.CLOSED: frozenset(),
}


class BaseSession:
    """State machine and outgoing queue shared by both ends."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state = State.DISCONNECTED
        self._out: list[Frame] = []

    def _move(self, to: State) -> None:
        if to not in _TRANSITIONS[self.state]:
            raise InvalidState(f"cannot go from {self.state.name} to {to.name}")
        self.state = to

    def _require(self, action: str, *states: State) -> None:
        if self.state not in states:
            raise InvalidState(f"cannot {action} in state {self.state.name}")

    def _expect(self, frame: Frame, *states: State) -> None:
        """The peer may only send ``frame`` in ``states``."""
        if self.state not in states:
            raise UnexpectedFrame(
                f"unexpected {frame.t} frame in state {self.state.name}",
                kind=frame.t,
                frame_id=getattr(frame, "id", None),
            )

    @property
    def is_open(self) -> bool:
        return self.state is State.OPEN

    def connection_made(self) -> None:
        """A transport connection is up (after the WebSocket handshake)."""
        self._move(State.HANDSHAKE)

    def connection_lost(self) -> None:
        """The connection dropped. Frames not yet drained are discarded; resume re-sends.

        A no-op when already disconnected or closed (a close then the socket's end)."""
        if self.state in (State.DISCONNECTED, State.CLOSED):
            return
        self._move(State.DISCONNECTED)
        self._out.clear()

    @property
    def has_frames(self) -> bool:
        """Whether :meth:`frames_to_send` has anything (without draining it)."""
        return bool(self._out)

    def frames_to_send(self) -> list[Frame]:
        """Drain the frames the I/O layer must send now, in order."""
        out, self._out = self._out, []
        return out

    def _on_ping(self, ping: Ping) -> None:
        self._out.append(Pong(id=ping.id))
