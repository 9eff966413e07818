"""(Support, no tests.) Signing in as a browser does, and reading cookies as sent."""

from __future__ import annotations

import httpx

from controller.web import COOKIE_NAME


async def sign_in(client: httpx.AsyncClient, token: str, **headers: str) -> httpx.Response:
    """Submit the sign-in form: the token in an urlencoded body, nothing in the URL."""
    return await client.post("/login", data={"token": token}, headers=headers)


def set_cookie_header(response: httpx.Response) -> str:
    [header] = [v for v in response.headers.get_list("set-cookie") if v.startswith(COOKIE_NAME)]
    return header


def attributes(header: str) -> dict[str, str]:
    """``name=value; Attr; Key=Value`` → lower-cased attribute names → values ('' if bare)."""
    out = {}
    for part in header.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        out[key.lower()] = value
    return out
