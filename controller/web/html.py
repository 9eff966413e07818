"""Server-rendered HTML without a template engine: every value goes through :func:`esc`.

Pages are small and few, so plain functions that return strings read more clearly than a
template language would; what matters is that nothing reaches the page unescaped. Each
function here escapes its text arguments itself; :class:`Markup` marks HTML already built
by these functions, so composing them never double-escapes and never forgets to escape.

The page loads one stylesheet and (only where a live view needs it) one script, both from
``/static``: no CDN, no inline script, so the Content-Security-Policy can forbid both.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote

from controller.auth.authorization import Principal

__all__ = [
    "CSP",
    "Markup",
    "esc",
    "link",
    "page",
    "path_segment",
    "table",
]

# Same-origin everything; 'self' in connect-src covers the same-origin WebSocket.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

NAV = (("/devices", "Devices"), ("/runs", "Runs"), ("/loans", "Loans"), ("/audit", "Audit"))


class Markup(str):
    """HTML that is safe as is (built here from escaped parts)."""

    __slots__ = ()


def esc(value: object) -> Markup:
    """``value`` as HTML text: Markup passes through, None is empty, the rest is escaped."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("")
    return Markup(html.escape(str(value), quote=True))


def path_segment(value: str) -> str:
    """One URL path segment (a device id holds ``~`` and ``:``, a serial may hold more)."""
    return quote(value, safe="~:@")  # pchar (RFC 3986 §3.3): these need no escape


def link(href: str, text: object, *, cls: str | None = None) -> Markup:
    attr = f' class="{esc(cls)}"' if cls else ""
    return Markup(f'<a href="{esc(href)}"{attr}>{esc(text)}</a>')


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    cls: str = "grid",
    empty: str = "nothing to show",
    row_classes: Sequence[str | None] | None = None,
) -> Markup:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        row_cls = row_classes[i] if row_classes is not None and i < len(row_classes) else None
        attr = f' class="{esc(row_cls)}"' if row_cls else ""
        body.append(f"<tr{attr}>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}" class="empty">{esc(empty)}</td></tr>')
    return Markup(
        f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def page(
    title: str,
    body: Markup,
    *,
    principal: Principal | None = None,
    active: str | None = None,
    scripts: Sequence[str] = (),
    refresh_s: int | None = None,
) -> str:
    """A whole document: header with navigation and sign-out (when signed in), then ``body``.
    ``refresh_s``: reload every so many seconds (a run still going), no script needed."""
    nav = ""
    if principal is not None:
        active_attr = ' class="active"'
        items = "".join(
            f'<a href="{href}"{active_attr if href == active else ""}>{esc(text)}</a>'
            for href, text in NAV
        )
        who = esc(principal.user_name) + (Markup(" (admin)") if principal.is_admin else "")
        nav = (
            f'<nav>{items}</nav><form class="signout" method="post" action="/logout">'
            f'<span class="who">{who}</span><button type="submit">Sign out</button></form>'
        )
    script_tags = "".join(f'<script src="{esc(s)}" defer></script>' for s in scripts)
    if refresh_s is not None:
        script_tags += f'<meta http-equiv="refresh" content="{int(refresh_s)}">'

    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · droidwire</title>"
        '<link rel="icon" href="data:,">'  # no /favicon.ico request
        '<link rel="stylesheet" href="/static/dashboard.css">'
        f"{script_tags}</head><body>"
        f'<header><a class="brand" href="/">droidwire</a>{nav}</header>'
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )
