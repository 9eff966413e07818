"""The CLI client given several controller URLs (``DROIDWIRE_CONTROLLER=url1,url2``): a call
that cannot reach one replica goes to the next, which is then kept; a POST moves on only when
its connection failed, so nothing is submitted twice."""

from __future__ import annotations

import httpx
import pytest

from droidwire.client import ApiError, Client

A, B = "http://127.0.0.1:1", "http://127.0.0.1:2"


def transport(down: set[str], *, read_error: bool = False) -> tuple[httpx.MockTransport,
                                                                    list[str]]:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        origin = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        seen.append(f"{request.method} {origin}")
        if origin in down:
            if read_error:
                raise httpx.ReadError("connection reset", request=request)
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"from": origin})

    return httpx.MockTransport(handle), seen


def test_a_get_moves_to_the_next_replica_and_stays_there() -> None:
    mock, seen = transport({A})
    with Client(f"{A},{B}", "t", transport=mock) as client:
        assert client.get("/v1/runs/x") == {"from": B}
        assert client.get("/v1/runs/x") == {"from": B}
        assert client.base_url == B
    assert seen == [f"GET {A}", f"GET {B}", f"GET {B}"]


def test_a_post_moves_on_only_when_it_never_reached_a_controller() -> None:
    mock, _ = transport({A})
    with Client(f"{A},{B}", "t", transport=mock) as client:
        assert client.post("/v1/sandbox/execute", {}) == {"from": B}
    mock, seen = transport({A}, read_error=True)
    with Client(f"{A},{B}", "t", transport=mock) as client, pytest.raises(ApiError) as info:
        client.post("/v1/sandbox/execute", {})
    assert info.value.code == "unavailable" and seen == [f"POST {A}"]


def test_every_replica_down_is_unavailable_and_bad_lists_are_usage_errors() -> None:
    mock, _ = transport({A, B})
    with Client(f"{A},{B}", "t", transport=mock) as client, pytest.raises(ApiError) as info:
        client.get("/v1/devices")
    assert info.value.code == "unavailable" and B in info.value.message
    for bad in (",", f"{A},ftp://x", ",".join([A] * 17)):
        with pytest.raises(ApiError) as usage:
            Client(bad, "t")
        assert usage.value.code == "usage"
