"""The dashboard's booking and audit pages (issue 18): lend, extend and revoke loans, see who
holds what and what one holds, and read the audit log.

- ``GET /loans``: a lend form (your devices; every device for an admin) with an end time;
  the loans of your devices with *Extend* (a new end time) and *Revoke*; the loans you hold.
- ``POST /loans/lend``, ``POST /loans/{grant}/extend``, ``POST /loans/{grant}/revoke``: forms
  (same-origin only, like sign-in; the session cookie is SameSite=Strict), served by the REST
  handlers of :mod:`controller.api.grants` with the session's principal — the same rules, the
  same audit entries. A refusal comes back as the page with the message.
- ``GET /audit``: the audit log through ``GET /v1/audit``'s handler (admins: everything;
  owners: their devices' entries and their own acts), filtered by user, device and action,
  with an *Older* link for the next page.

Times in the forms are UTC (``datetime-local`` inputs carry no zone; the page says so).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from controller.api import audit as audit_api
from controller.api import grants as grants_api
from controller.api import reservations as reservations_api
from controller.auth import Action, Principal, may
from controller.hub import list_devices
from controller.web.html import Markup, esc, link, page, table
from controller.web.pages import _html, _hub, _message, _read_form, _signed_in, _to_login
from controller.web.sessions import same_origin
from protocol.errors import RpcError

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

AUDIT_PAGE = 50


def _when(at: datetime | None) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if at is not None else "until revoked"


def _parse_until(text: str) -> datetime | None:
    value = text.strip()
    if not value:
        return None
    when = datetime.fromisoformat(value)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _button(action: str, label: str, cls: str, extra: str = "") -> Markup:
    return Markup(
        f'<form class="inline" method="post" action="{esc(action)}">{extra}'
        f'<button type="submit" class="{esc(cls)}">{esc(label)}</button></form>'
    )


async def _loans_page(request: Request, principal: Principal, error: str | None = None,
                      status: int = 200) -> Response:
    hub = _hub(request)
    store = request.app.state.store
    grants = await grants_api.list_grants(store, principal)
    records = await list_devices(hub, principal)
    lendable = [r for r in records if await may(principal, r.ref, Action.LEND, store=store)]
    parts: list[str] = []
    if error:
        parts.append(f'<p class="error" role="alert">{esc(error)}</p>')
    if lendable:
        options = "".join(f'<option value="{esc(r.id)}">{esc(r.id)}</option>' for r in lendable)
        parts.append(
            '<h2>Lend a device</h2>'
            '<form class="lend" method="post" action="/loans/lend">'
            f'<label for="lend-device">Device</label><select id="lend-device" name="device">'
            f'{options}</select>'
            '<label for="lend-user">To user</label>'
            '<input id="lend-user" name="user" required maxlength="64" autocomplete="off">'
            '<label for="lend-until">Until (UTC; empty: until revoked)</label>'
            '<input id="lend-until" name="until" type="datetime-local">'
            '<button type="submit">Lend</button></form>'
        )
    if lendable:
        parts.append(
            '<h2>Reserve a device</h2>'
            '<form class="lend reserve" method="post" action="/loans/reserve">'
            f'<label for="res-device">Device</label><select id="res-device" name="device">'
            f'{options}</select>'
            '<label for="res-user">For user</label>'
            '<input id="res-user" name="user" required maxlength="64" autocomplete="off">'
            '<label for="res-from">From (UTC)</label>'
            '<input id="res-from" name="from" type="datetime-local" required>'
            '<label for="res-until">Until (UTC)</label>'
            '<input id="res-until" name="until" type="datetime-local" required>'
            '<button type="submit">Reserve</button></form>'
        )
    booked = await reservations_api.list_reservations(store, principal)
    parts.append("<h2>Reservations</h2>")
    parts.append(table(
        ["Device", "For", "From", "Until", "Status", ""],
        [[b.device, b.user, _when(b.starts_at), _when(b.ends_at), b.status,
          _button(f"/loans/reservations/{b.id}/cancel", "Cancel", "revoke cancel")]
         for b in booked],
        cls="grid reservations", empty="No reservations.",
    ))
    mine = {r.id for r in lendable}
    lent = [g for g in grants if g.device in mine]
    held = [g for g in grants if g.user == principal.user_name]
    rows: list[list[object]] = []
    for g in lent:
        extend = _button(
            f"/loans/{g.id}/extend", "Extend", "extend",
            '<input name="until" type="datetime-local" aria-label="New end (UTC)" required>',
        )
        revoke = _button(f"/loans/{g.id}/revoke", "Revoke", "revoke")
        rows.append([g.device, g.user, _when(g.created_at), _when(g.until), g.status,
                     Markup(extend + revoke)])
    parts.append("<h2>Loans of your devices</h2>")
    parts.append(table(["Device", "Lent to", "Since", "Until", "Status", ""], rows,
                       cls="grid loans", empty="You have not lent any device."))
    parts.append("<h2>Lent to you</h2>")
    parts.append(table(
        ["Device", "Owner", "Since", "Until", "Status"],
        [[link("/devices/" + g.device, g.device), g.owner, _when(g.created_at), _when(g.until),
          g.status] for g in held],
        cls="grid held", empty="Nobody lends you a device right now.",
    ))
    return _html(page("Loans", Markup("".join(parts)), principal=principal, active="/loans"),
                 status)


@router.get("/loans")
async def loans_page(request: Request) -> Response:
    principal = await _signed_in(request)
    if principal is None:
        return _to_login()
    return await _loans_page(request, principal)


async def _form(request: Request) -> tuple[Principal | None, dict[str, str] | None, Response | None]:
    principal = await _signed_in(request)
    if principal is None:
        return None, None, _to_login()
    if not same_origin(request):
        return principal, None, _message("Loans", "cross-site form refused", 403, principal)
    form = await _read_form(request)
    if form is None:
        return principal, None, _message("Loans", "a malformed form", 400, principal)
    return principal, form, None


async def _lend(request: Request, principal: Principal, device: str, user: str,
                until_text: str) -> Response:
    try:
        body = grants_api.GrantCreate(device=device, user=user, until=_parse_until(until_text))
        await grants_api.post_grant(body, principal, request)
    except (ValueError, ValidationError) as exc:
        message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        return await _loans_page(request, principal, f"Not lent: {message}", 400)
    except RpcError as exc:
        return await _loans_page(request, principal, f"Not lent: {exc.message}", 400)
    return RedirectResponse("/loans", status_code=303)


@router.post("/loans/lend")
async def lend(request: Request) -> Response:
    principal, form, refusal = await _form(request)
    if refusal is not None or principal is None or form is None:
        return refusal or _to_login()
    return await _lend(request, principal, form.get("device", ""), form.get("user", ""),
                       form.get("until", ""))


async def _grant(request: Request, principal: Principal, grant_id: str) -> Any:
    for g in await grants_api.list_grants(request.app.state.store, principal):
        if g.id == grant_id:
            return g
    return None


@router.post("/loans/{grant_id}/extend")
async def extend(grant_id: str, request: Request) -> Response:
    """A new end time: a new grant to the same user, replacing this one."""
    principal, form, refusal = await _form(request)
    if refusal is not None or principal is None or form is None:
        return refusal or _to_login()
    grant = await _grant(request, principal, grant_id)
    if grant is None:
        return await _loans_page(request, principal, "No such loan.", 404)
    return await _lend(request, principal, grant.device, grant.user, form.get("until", ""))


@router.post("/loans/{grant_id}/revoke")
async def revoke(grant_id: str, request: Request) -> Response:
    principal, _form_data, refusal = await _form(request)
    if refusal is not None or principal is None:
        return refusal or _to_login()
    try:
        await grants_api.delete_grant(grant_id, principal, request)
    except RpcError as exc:
        return await _loans_page(request, principal, f"Not revoked: {exc.message}", 400)
    return RedirectResponse("/loans", status_code=303)


@router.get("/audit")
async def audit_page(request: Request) -> Response:
    principal = await _signed_in(request)
    if principal is None:
        return _to_login()
    q = request.query_params
    filters = {k: q.get(k) or None for k in ("user", "device", "action")}
    try:
        result = await audit_api.get_audit(
            principal, request, limit=str(AUDIT_PAGE), before=q.get("before") or None, **filters
        )
    except RpcError as exc:
        return _message("Audit", exc.message, 400, principal)
    inputs = "".join(
        f'<label for="f-{k}">{k.title()}</label>'
        f'<input id="f-{k}" name="{k}" value="{esc(v or "")}" maxlength="255">'
        for k, v in filters.items()
    )
    form = Markup(f'<form class="filters" method="get" action="/audit">{inputs}'
                  '<button type="submit">Filter</button></form>')
    rows = [
        [e.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"), e.actor, e.action, e.device or "",
         Markup(f'<span class="outcome o-{esc(e.outcome)}">{esc(e.outcome)}</span>'),
         ", ".join(f"{k}={v}" for k, v in sorted(e.detail.items()))]
        for e in result.entries
    ]
    body = form + table(["At (UTC)", "Who", "Action", "Device", "Outcome", "Detail"], rows,
                        cls="grid audit", empty="No entries.")
    if result.next is not None:
        params = {k: v for k, v in filters.items() if v} | {"before": str(result.next)}
        body = Markup(body + link("/audit?" + urlencode(params), "Older entries", cls="older"))
    scope = "every entry" if principal.is_admin else "your devices and your own acts"
    body = Markup(f'<p class="hint">Showing {esc(scope)}, newest first.</p>' + body)
    return _html(page("Audit", body, principal=principal, active="/audit"))


@router.post("/loans/reserve")
async def reserve(request: Request) -> Response:
    principal, form, refusal = await _form(request)
    if refusal is not None or principal is None or form is None:
        return refusal or _to_login()
    try:
        body = reservations_api.ReservationIn.model_validate({
            "device": form.get("device", ""), "user": form.get("user", ""),
            "from": _parse_until(form.get("from", "")), "until": _parse_until(form.get("until", "")),
        })
        await reservations_api.post_reservation(body, principal, request)
    except ValidationError as exc:
        return await _loans_page(request, principal, f"Not reserved: {exc.errors()[0]['msg']}", 400)
    except ValueError as exc:
        return await _loans_page(request, principal, f"Not reserved: {exc}", 400)
    except RpcError as exc:
        return await _loans_page(request, principal, f"Not reserved: {exc.message}", 400)
    return RedirectResponse("/loans", status_code=303)


@router.post("/loans/reservations/{reservation_id}/cancel")
async def cancel(reservation_id: str, request: Request) -> Response:
    principal, _form_data, refusal = await _form(request)
    if refusal is not None or principal is None:
        return refusal or _to_login()
    try:
        await reservations_api.delete_reservation(reservation_id, principal, request)
    except RpcError as exc:
        return await _loans_page(request, principal, f"Not cancelled: {exc.message}", 400)
    return RedirectResponse("/loans", status_code=303)
