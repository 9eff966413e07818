"""``/healthz`` and ``/metrics``: unauthenticated, and free of secrets and serials."""

from __future__ import annotations

from tests.controller.conftest import ADMIN_TOKEN, Api, bearer


async def test_healthz_needs_no_token(api: Api) -> None:
    response = await api.client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_metrics_use_route_templates_and_no_secrets(api: Api) -> None:
    created = await api.new_token("bridge", "secret-bridge-name")
    await api.client.delete(f"/v1/tokens/{created['id']}", headers=bearer(ADMIN_TOKEN))
    response = await api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert (
        'droidwire_http_requests_total{method="DELETE",route="/v1/tokens/{token_id}",status="204"} 1.0'
        in text
    )
    assert 'droidwire_build_info{version="' in text
    for secret in (created["id"], created["token"], ADMIN_TOKEN, "secret-bridge-name"):
        assert secret not in text
    names = [
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    ]
    assert names and all(name.startswith("droidwire_") for name in names)


async def test_openapi_is_served_and_api_browsers_are_not(api: Api) -> None:
    assert (await api.client.get("/openapi.json")).status_code == 200
    assert (await api.client.get("/docs")).status_code == 404
