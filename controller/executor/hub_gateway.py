"""The executor's :class:`~controller.executor.gateway.Gateway` over the controller's hub.

``Hub.call`` is the gateway's ``call`` as is; this adds the two views the executor needs,
read from the hub's live registry: bridges with their capabilities, and devices with the
state adb reports (``disconnected`` while their bridge is away). In cluster mode,
``cluster_bridges`` and ``cluster_devices`` add those of bridges other replicas hold.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from pydantic import ValidationError

from controller.auth.authorization import DeviceRef
from controller.executor.gateway import BridgeView, DeviceView, P, R, Target
from controller.hub import Hub
from controller.hub.entry import BridgeState
from protocol.envelope import Capabilities
from protocol.methods import Method

__all__ = ["HubGateway"]


class HubGateway:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def bridges(self) -> list[BridgeView]:
        return [
            BridgeView(
                id=entry.id,
                name=entry.name,
                owner_id=entry.owner_id,
                caps=entry.caps or Capabilities(),
                connected=entry.is_open,
                reconnecting=entry.state is BridgeState.RECONNECTING,
            )
            for entry in self.hub.entries()
        ]

    def devices(self) -> list[DeviceView]:
        out = []
        for entry in self.hub.entries():
            for serial, info in sorted(entry.devices.items()):
                out.append(
                    DeviceView(
                        bridge_id=entry.id,
                        bridge_name=entry.name,
                        owner_id=entry.owner_id,
                        serial=serial,
                        state=info.state if entry.is_open else "disconnected",
                        info=info.model_dump(mode="json"),
                    )
                )
        return out

    async def cluster_devices(self) -> list[DeviceView]:
        """:meth:`devices`, plus in cluster mode the live devices of bridges other replicas
        hold (a call to those is forwarded by the hub)."""
        out = self.devices()
        out += [DeviceView(r.bridge_id, r.bridge, r.owner_id, r.serial, r.state, r.info)
                for r in await self.hub.hooks.remote_devices()]
        return out

    async def cluster_bridges(self) -> list[BridgeView]:
        """:meth:`bridges`, plus in cluster mode those other replicas hold (connected: a call
        to one is forwarded by the hub), with the capabilities their ``hello`` published."""
        out = self.bridges()
        for bridge_id, held in sorted((await self.hub.hooks.remote_bridges()).items()):
            try:
                caps = Capabilities.model_validate(held.caps)
            except ValidationError:
                caps = Capabilities()  # not a builder we can trust: never chosen to build
            out.append(BridgeView(bridge_id, held.name or bridge_id, held.owner_id, caps))
        return out

    async def call(
        self,
        target: Target,
        method: Method[P, R],
        params: P,
        *,
        timeout_s: float | None = None,
        request_id: str | None = None,
    ) -> R:
        # A call recorded for resuming keeps its shared wait until the executor has
        # recorded its result (settle()): a replica dying in between loses nothing.
        return await self.hub.call(
            target, method, params, timeout_s=timeout_s, request_id=request_id,
            settle=request_id is None,
        )

    async def settle(self, bridge_id: str, request_id: str) -> None:
        await self.hub.settle(bridge_id, request_id)

    def session_of(self, bridge_id: str) -> str | None:
        """The bridge's session id: with a request id, what lets a restarted controller
        wait for a result the bridge still holds (:meth:`adopt`)."""
        return self.hub.session_of(bridge_id)

    def adopt(
        self,
        device: DeviceRef,
        request_id: str,
        method: str,
        params: Mapping[str, Any],
        *,
        sent_session: str,
        timeout_s: float | None = None,
    ) -> Awaitable[dict[str, Any]]:
        return self.hub.adopt(
            device, request_id, method, dict(params), sent_session=sent_session,
            timeout_s=timeout_s,
        )
