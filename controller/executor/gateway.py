"""What the executor needs from the bridge hub: who is connected, and one verb, ``call``.

The executor never talks to a socket. It sees the bridges and devices the controller knows
about through :class:`Gateway` and sends RPCs (``protocol.methods``) through
:meth:`Gateway.call`; the hub implements it over the bridges' WebSockets
(:class:`controller.executor.hub_gateway.HubGateway`), tests may implement it in-process.

Errors are :class:`protocol.errors.RpcError` with the wire's codes: ``unavailable`` for a
bridge that is not connected, ``device_offline``, ``timeout``, ``forbidden`` (the bridge's
policy refused), … The executor turns them into PENDING reason codes (docs/design.md §5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from controller.auth.authorization import DeviceRef
from protocol.envelope import Capabilities
from protocol.methods import Method

__all__ = ["BridgeView", "DeviceView", "Gateway", "Target", "all_bridges", "all_devices"]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)

#: Where an RPC goes: a device (``DeviceRef``) or a bridge (its id), as ``Hub.call`` takes it.
Target = DeviceRef | str


@dataclass(frozen=True, slots=True)
class BridgeView:
    """A bridge as the executor sees it."""

    id: str
    name: str
    owner_id: str
    caps: Capabilities
    connected: bool = True
    shared: bool = False  # an admin marked it shared: it may build for every user
    # Dropped less than the grace period ago: expected back (its calls wait for it).
    reconnecting: bool = False

    @property
    def can_build(self) -> bool:
        return self.connected and self.caps.build


@dataclass(frozen=True, slots=True)
class DeviceView:
    """A device: where it hangs, whose it is, and what its bridge last said about it."""

    bridge_id: str
    bridge_name: str
    owner_id: str
    serial: str
    state: str  # adb's (``device``, ``offline``, ``unauthorized``) or ``disconnected``
    info: Mapping[str, Any] = field(default_factory=dict)  # DeviceInfo fields

    @property
    def id(self) -> str:
        """The unambiguous name, ``BRIDGE~SERIAL`` (docs/design.md §9)."""
        return f"{self.bridge_name}~{self.serial}"

    @property
    def sdk(self) -> int | None:
        value = self.info.get("sdk")
        return value if isinstance(value, int) else None

    @property
    def ready(self) -> bool:
        return self.state == "device"

    @property
    def ref(self) -> DeviceRef:
        return DeviceRef(self.bridge_id, self.serial, self.owner_id, self.bridge_name)

    def describe(self) -> dict[str, Any]:
        """The result's ``device`` field."""
        out: dict[str, Any] = {"id": self.id, "serial": self.serial, "bridge": self.bridge_name}
        for key in ("model", "release", "sdk"):
            if self.info.get(key) is not None:
                out[key] = self.info[key]
        return out


class Gateway(Protocol):
    """The hub, as the executor uses it."""

    def bridges(self) -> Sequence[BridgeView]:
        """Every bridge the controller knows of (connected or within its grace period)."""
        ...

    def devices(self) -> Sequence[DeviceView]:
        """Every device of those bridges."""
        ...

    async def call(
        self,
        target: Target,
        method: Method[P, R],
        params: P,
        *,
        timeout_s: float | None = None,
    ) -> R:
        """Send one RPC and return its result model, or raise ``RpcError`` (``internal``
        with ``data["reason"]`` ``invalid_result`` when the result does not fit its model).

        For a device, the gateway sets the params' ``serial`` to it (as ``Hub.call`` does).
        """
        ...


async def all_devices(gateway: Gateway) -> Sequence[DeviceView]:
    """The gateway's devices; in cluster mode (a gateway with ``cluster_devices``, such as
    :class:`~controller.executor.hub_gateway.HubGateway`), those of every replica's bridges."""
    everywhere = getattr(gateway, "cluster_devices", None)
    return await everywhere() if callable(everywhere) else gateway.devices()


async def all_bridges(gateway: Gateway) -> Sequence[BridgeView]:
    """The gateway's bridges; in cluster mode (``cluster_bridges``), every replica's."""
    everywhere = getattr(gateway, "cluster_bridges", None)
    return await everywhere() if callable(everywhere) else gateway.bridges()
