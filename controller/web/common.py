"""What every dashboard page shares (:mod:`controller.web.pages`,
:mod:`controller.web.manage_pages`): the HTML response and its security headers, the sign-in
check and its redirect, a plain message page, the small form reader, and the app's hub and
dashboard sessions."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse

from controller.auth.authorization import Principal
from controller.services import services_of
from controller.web.html import CSP, Markup, esc, page
from controller.web.sessions import SessionStore, session_principal

__all__ = [
    "MAX_FORM_BYTES",
    "html_response",
    "message",
    "read_form",
    "sessions_of",
    "signed_in",
    "to_login",
]

MAX_FORM_BYTES = 4096


def sessions_of(app: Any) -> SessionStore:
    """The app's dashboard sessions (in its store)."""
    return services_of(app).web_sessions


def html_response(content: str, status: int = 200) -> HTMLResponse:
    """A dashboard page, with the headers every one of them carries."""
    return HTMLResponse(
        content,
        status_code=status,
        headers={
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            # Not no-referrer: that makes browsers send "Origin: null" on form posts, which
            # the CSRF check must refuse.
            "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store",
        },
    )


def to_login() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303)


def message(title: str, text: str, status: int, principal: Principal | None = None) -> HTMLResponse:
    """A page that says one thing (a refusal, a missing record)."""
    body = Markup(f'<p class="notice">{esc(text)}</p>')
    return html_response(page(title, body, principal=principal), status)


async def signed_in(request: Request) -> Principal | None:
    """The signed-in principal of a page request, or None (then: :func:`to_login`)."""
    sessions_of(request.app)
    return await session_principal(request)


async def read_form(request: Request) -> dict[str, str] | None:
    """A small urlencoded form body, or None (too large, wrong type, undecodable)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        return None
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_FORM_BYTES:
            return None
    try:
        return dict(parse_qsl(data.decode("ascii"), max_num_fields=8))
    except (UnicodeDecodeError, ValueError):
        return None
