"""What the hub asks of cluster mode: :class:`ClusterHooks`, and :class:`LocalHooks`, the
single-controller answer to each question (no other replica, nothing to share).

The hub always talks to its hooks (``hub.hooks``) and never asks whether it is in a cluster:
:class:`controller.cluster.Cluster` is the implementation for several replicas
(docs/cluster.md), set by the app in cluster mode.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from protocol.envelope import Hello, Res
from protocol.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from controller.auth.authorization import DeviceRef, Principal
    from controller.hub.devices import DeviceRecord
    from controller.hub.entry import BridgeEntry
    from controller.hub.screen import ScreenView
    from controller.hub.streams import LogStream
    from controller.hub.tunnel import TunnelSession
    from protocol.screen_methods import ScreenFrame

__all__ = ["ClusterHooks", "LocalHooks", "RemoteBridge"]


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


class ClusterHooks(Protocol):
    """What the hub (and the hub package) asks of the other replicas.

    ``claimed``/``inventory``/``released`` tell them about this replica's bridges;
    ``owner_elsewhere`` and ``forward`` route a call to the replica holding the bridge;
    ``awaiting``/``settled``/``adopt``/``foreign``/``relay`` share the waits for held results
    (a run resumed on another replica, a bridge that moved); ``stream``/``stop_stream`` relay
    a logcat stream from the replica holding the bridge, ``tunnel`` a remote adb tunnel's
    frames, ``screen`` a live screen's frames, ``latest_picture`` its newest picture;
    ``remote_devices``/``remote_bridges`` list what other replicas hold, and ``forgotten``
    tells them a bridge or device was forgotten here: docs/cluster.md.
    """

    async def claimed(self, entry: BridgeEntry) -> None: ...
    async def inventory(self, entry: BridgeEntry) -> None: ...
    async def released(self, entry: BridgeEntry) -> None: ...
    async def owner_elsewhere(self, bridge_id: str) -> str | None: ...
    async def forward(
        self, replica: str, target: DeviceRef | str, method: str, params: dict[str, Any],
        *, timeout_s: float | None = None,
    ) -> dict[str, Any]: ...
    async def awaiting(self, bridge_id: str, request_id: str, session: str | None) -> None: ...
    async def settled(self, bridge_id: str, request_id: str) -> None: ...
    def adopt(
        self, device: DeviceRef, request_id: str, method: str, params: dict[str, Any],
        *, sent_session: str, timeout_s: float | None = None,
    ) -> Awaitable[dict[str, Any]] | None:
        """The cluster's wait for a dead process's request, or None: the hub waits itself."""
        ...
    async def foreign(self, entry: BridgeEntry, hello: Hello) -> set[str]: ...
    async def relay(self, entry: BridgeEntry, res: Res) -> bool: ...
    async def stream(
        self, replica: str, device: DeviceRef, params: dict[str, Any]
    ) -> LogStream: ...
    def stop_stream(self, stream: LogStream) -> bool: ...
    def tunnel(
        self, replica: str, principal: Principal, device: DeviceRef
    ) -> TunnelSession: ...
    async def screen(
        self, replica: str, principal: Principal, device: DeviceRef, codec: str
    ) -> ScreenView: ...
    async def latest_picture(
        self, replica: str, device: DeviceRef
    ) -> ScreenFrame | None: ...
    async def remote_devices(self) -> list[DeviceRecord]: ...
    async def remote_bridges(self) -> dict[str, RemoteBridge]: ...
    async def forgotten(self, bridge_id: str, serial: str | None) -> None: ...


def _elsewhere(what: str) -> RpcError:
    return RpcError(ErrorCode.UNAVAILABLE, f"{what}: no other replica (not in cluster mode)",
                    {"reason": "bridge_disconnected"})


class LocalHooks:
    """One controller alone: every bridge it can reach is connected here, every wait is its
    own, and there is nobody to tell anything."""

    async def claimed(self, entry: BridgeEntry) -> None:
        return None

    async def inventory(self, entry: BridgeEntry) -> None:
        return None

    async def released(self, entry: BridgeEntry) -> None:
        return None

    async def owner_elsewhere(self, bridge_id: str) -> str | None:
        return None

    async def forward(
        self, replica: str, target: DeviceRef | str, method: str, params: dict[str, Any],
        *, timeout_s: float | None = None,
    ) -> dict[str, Any]:
        raise _elsewhere(f"bridge of {target}")  # never asked: owner_elsewhere is None

    async def awaiting(self, bridge_id: str, request_id: str, session: str | None) -> None:
        return None

    async def settled(self, bridge_id: str, request_id: str) -> None:
        return None

    def adopt(
        self, device: DeviceRef, request_id: str, method: str, params: dict[str, Any],
        *, sent_session: str, timeout_s: float | None = None,
    ) -> Awaitable[dict[str, Any]] | None:
        return None

    async def foreign(self, entry: BridgeEntry, hello: Hello) -> set[str]:
        return set()

    async def relay(self, entry: BridgeEntry, res: Res) -> bool:
        return False  # never asked: nothing is foreign to a lone controller

    async def stream(
        self, replica: str, device: DeviceRef, params: dict[str, Any]
    ) -> LogStream:
        raise _elsewhere(f"logcat of {device}")  # never asked: owner_elsewhere is None

    def stop_stream(self, stream: LogStream) -> bool:
        return False

    def tunnel(
        self, replica: str, principal: Principal, device: DeviceRef
    ) -> TunnelSession:
        raise _elsewhere(f"tunnel to {device}")  # never asked: owner_elsewhere is None

    async def screen(
        self, replica: str, principal: Principal, device: DeviceRef, codec: str
    ) -> ScreenView:
        raise _elsewhere(f"screen of {device}")  # never asked: owner_elsewhere is None

    async def latest_picture(
        self, replica: str, device: DeviceRef
    ) -> ScreenFrame | None:
        raise _elsewhere(f"screen of {device}")  # never asked: owner_elsewhere is None

    async def remote_devices(self) -> list[DeviceRecord]:
        return []

    async def remote_bridges(self) -> dict[str, RemoteBridge]:
        return {}

    async def forgotten(self, bridge_id: str, serial: str | None) -> None:
        return None
