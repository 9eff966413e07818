"""What the hub keeps per bridge (:class:`BridgeEntry`, across its connections) and per
call (:class:`Waiter`), and the states a bridge goes through (:class:`BridgeState`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from controller.hub.connection import Connection
from controller.hub.streams import LogStream
from protocol.envelope import Capabilities, DeviceInfo, Evt
from protocol.session import Completion, ControllerSession

__all__ = ["EXPIRED", "BridgeEntry", "BridgeState", "Handshake", "ScreenChannel", "Waiter"]


class BridgeState(StrEnum):
    CONNECTED = "connected"  # a connection is up (handshake or open)
    RECONNECTING = "reconnecting"  # dropped less than grace_period_s ago: calls wait for it
    DISCONNECTED = "disconnected"  # away for longer: calls fail at once


@dataclass(eq=False, slots=True)
class Handshake:
    """A bridge connection between its accept and its hello (revocation must reach it)."""

    token_id: str | None
    revoked: bool = False



# What a waiter's future gets when its call's deadline passed (Hub._expire).
EXPIRED = Completion(id="", method="")


@dataclass(slots=True)
class Waiter:
    """A call waiting for its one completion (or :data:`EXPIRED`)."""

    future: asyncio.Future[Completion]
    # Runs in the reader, before the caller resumes: e.g. a stream must exist before its
    # first ``evt`` (which the bridge sends right after the result) is read.
    on_result: Callable[[dict[str, Any]], None] | None = None


@dataclass(eq=False)
class BridgeEntry:
    """What the hub knows about one bridge, across its connections."""

    id: str
    name: str
    owner_id: str
    session: ControllerSession
    token_id: str | None = None
    conn: Connection | None = None
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    caps: Capabilities | None = None
    software: str | None = None
    connected_at: datetime | None = None
    last_seen_at: datetime | None = None
    away_since: float | None = None  # loop time of the drop
    gone: bool = False  # away for longer than the grace period
    connections: int = 0
    waiters: dict[str, Waiter] = field(default_factory=dict)
    streams: dict[str, LogStream] = field(default_factory=dict)  # by live channel
    subscriptions: set[LogStream] = field(default_factory=set)  # across reconnects
    # Live screens (controller/hub/screen.py) by channel: each takes its evt frames, and
    # ends with the connection (the bridge ends its screen streams with the link).
    screens: dict[str, ScreenChannel] = field(default_factory=dict)
    grace_task: asyncio.Task[None] | None = None
    # Fires at the earliest deadline of the pending calls (Hub._arm), whatever the connection.
    deadline_timer: asyncio.TimerHandle | None = None
    store_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # inventory writes in order

    @property
    def state(self) -> BridgeState:
        if self.conn is not None:
            return BridgeState.CONNECTED
        return BridgeState.DISCONNECTED if self.gone else BridgeState.RECONNECTING

    @property
    def is_open(self) -> bool:
        return self.conn is not None and self.session.is_open

    def live_devices(self) -> dict[str, DeviceInfo]:
        """The inventory while the session is open, else nothing."""
        return dict(self.devices) if self.is_open else {}


class ScreenChannel(Protocol):
    """A live screen's end of a channel (:class:`controller.hub.screen.ScreenFeed`), or a
    tunnel stream's (:class:`controller.hub.tunnel.RelayStream`)."""

    def on_event(self, evt: Evt) -> None: ...
    def end(self, reason: str) -> None: ...
