"""The app's services: built once by the lifespan as one typed object, gone with it; and the
hub's cluster hooks, a lone controller's by default."""

from __future__ import annotations

import pytest

from controller.app import create_app
from controller.config import ControllerConfig
from controller.executor.hub_gateway import HubGateway
from controller.hub import LocalHooks
from controller.services import Services, services_of
from protocol.errors import ErrorCode, RpcError
from tests.controller.conftest import ADMIN_TOKEN, Api, _api


async def test_the_lifespan_builds_the_services_once_and_takes_them_down(
    sqlite_url: str,
) -> None:
    app = create_app(ControllerConfig(db_url=sqlite_url, bootstrap_token=ADMIN_TOKEN))
    with pytest.raises(RpcError) as before:
        services_of(app)
    assert before.value.code is ErrorCode.UNAVAILABLE
    async for api in _api(app):
        services = services_of(api.app)
        assert isinstance(services, Services)
        # The one way to them: no service is also an attribute of its own on the app's state.
        for name in ("store", "audit", "web_sessions", "hub", "access", "loans", "health",
                     "executor", "cluster"):
            assert not hasattr(app.state, name), name
        # The one executor, over the hub, is there before any request asked for it.
        assert isinstance(services.executor.gateway, HubGateway)
        assert services.executor.gateway.hub is services.hub
        assert services.cluster is None and services.hub.cluster is None
        assert (await api.client.get("/healthz")).status_code == 200
        assert services_of(api.app) is services
    with pytest.raises(RpcError) as after:
        services_of(app)
    assert after.value.code is ErrorCode.UNAVAILABLE


async def test_a_lone_hub_talks_to_local_hooks(api: Api) -> None:
    hub = services_of(api.app).hub
    assert isinstance(hub.hooks, LocalHooks)
    assert await hub.hooks.owner_elsewhere("any-bridge") is None
    assert await hub.hooks.remote_devices() == [] and await hub.hooks.remote_bridges() == {}
    attached = object()  # stands in for a Cluster: the hub only stores it here
    hub.cluster = attached  # type: ignore[assignment]
    assert hub.hooks is attached and hub.cluster is attached
    hub.cluster = None
    assert isinstance(hub.hooks, LocalHooks) and hub.cluster is None


def test_before_the_services_are_published_a_bridge_and_a_request_are_refused(
    sqlite_url: str,
) -> None:
    from starlette.testclient import TestClient, WebSocketDenialResponse

    from protocol.envelope import SUBPROTOCOL

    app = create_app(ControllerConfig(db_url=sqlite_url, bootstrap_token=ADMIN_TOKEN))
    client = TestClient(app)  # outside ``with``: the lifespan never starts
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with pytest.raises(WebSocketDenialResponse) as bridge:
        with client.websocket_connect("/v1/bridge", headers=auth, subprotocols=[SUBPROTOCOL]):
            pass
    assert bridge.value.status_code == 503
    assert bridge.value.json()["error"]["code"] == "unavailable"
    devices = client.get("/v1/devices", headers=auth)
    assert devices.status_code == 503 and devices.json()["error"]["code"] == "unavailable"
