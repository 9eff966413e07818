"""The dashboard's booking and audit pages: lend, extend and revoke loans, see who
holds what and what one holds, and read the audit log.

- ``GET /loans``: a lend form (your devices; every device for an admin) with an end time;
  the loans of your devices with *Extend* (a new end time) and *Revoke*; the loans you hold.
- ``POST /loans/lend``, ``POST /loans/{grant}/extend``, ``POST /loans/{grant}/revoke``: forms
  (same-origin only, like sign-in; the session cookie is SameSite=Strict), served by the REST
  handlers of :mod:`controller.api.grants` with the session's principal — the same rules, the
  same audit entries. A refusal comes back as the page with the message.
- ``GET /manage/{device}``: a device's health (with *Read now*, and the owner's thresholds
  form) and apps (launch, stop, clear, uninstall; an install form whose upload shows its
  progress, ``/static/manage.js``), through the REST handlers of :mod:`controller.api.manage`.
- ``GET /audit``: the audit log through ``GET /v1/audit``'s handler (admins: everything;
  owners: their devices' entries and their own acts), filtered by user, device and action,
  with an *Older* link for the next page.

Times in the forms are UTC (``datetime-local`` inputs carry no zone; the page says so).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import ValidationError

from controller.api import audit as audit_api
from controller.api import grants as grants_api
from controller.api import manage as manage_api
from controller.api import reservations as reservations_api
from controller.api.errors import error_body
from controller.auth.authorization import Action, Principal, may
from controller.hub import list_devices, resolve_device
from controller.services import services_of
from controller.web.common import html_response, message, read_form, signed_in, to_login
from controller.web.html import Markup, esc, link, page, path_segment, table
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
    hub = services_of(request).hub
    store = services_of(request).store
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
    return html_response(page("Loans", Markup("".join(parts)), principal=principal, active="/loans"),
                 status)


@router.get("/loans")
async def loans_page(request: Request) -> Response:
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    return await _loans_page(request, principal)


async def _poster(request: Request, title: str) -> Principal | Response:
    """Who posted a dashboard form, or the answer that refuses it: not signed in (to the
    login), or not from this site's own pages."""
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    if not same_origin(request):
        return message(title, "cross-site form refused", 403, principal)
    return principal


def _why(exc: ValueError | RpcError) -> str:
    """What a page says of a refused form: the first thing wrong with it, or the refusal."""
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"])
    return exc.message if isinstance(exc, RpcError) else str(exc)


#: What a form does once it is known who posted it and what: None when done, or the answer.
_LoansAct = Callable[[Principal, dict[str, str]], Awaitable[Response | None]]
_DeviceAct = Callable[[Principal], Awaitable[Response | None]]


async def _loans_form(request: Request, failed: str, act: _LoansAct) -> Response:
    """A loans form: ``act`` on it, then back to the loans page — or that page saying why not
    (``failed: …``), or the answer that refuses the form."""
    principal = await _poster(request, "Loans")
    if isinstance(principal, Response):
        return principal
    form = await read_form(request)
    if form is None:
        return message("Loans", "a malformed form", 400, principal)
    try:
        answer = await act(principal, form)
    except (ValueError, RpcError) as exc:  # a ValidationError is a ValueError
        return await _loans_page(request, principal, f"{failed}: {_why(exc)}", 400)
    return answer or RedirectResponse("/loans", status_code=303)


async def _lend(request: Request, principal: Principal, device: str, user: str,
                until_text: str) -> None:
    body = grants_api.GrantCreate(device=device, user=user, until=_parse_until(until_text))
    await grants_api.post_grant(body, principal, request)


@router.post("/loans/lend")
async def lend(request: Request) -> Response:
    async def act(principal: Principal, form: dict[str, str]) -> None:
        await _lend(request, principal, form.get("device", ""), form.get("user", ""),
                    form.get("until", ""))

    return await _loans_form(request, "Not lent", act)


async def _grant(request: Request, principal: Principal, grant_id: str) -> Any:
    for g in await grants_api.list_grants(services_of(request).store, principal):
        if g.id == grant_id:
            return g
    return None


@router.post("/loans/{grant_id}/extend")
async def extend(grant_id: str, request: Request) -> Response:
    """A new end time: a new grant to the same user, replacing this one."""
    async def act(principal: Principal, form: dict[str, str]) -> Response | None:
        grant = await _grant(request, principal, grant_id)
        if grant is None:
            return await _loans_page(request, principal, "No such loan.", 404)
        await _lend(request, principal, grant.device, grant.user, form.get("until", ""))
        return None

    return await _loans_form(request, "Not lent", act)


@router.post("/loans/{grant_id}/revoke")
async def revoke(grant_id: str, request: Request) -> Response:
    async def act(principal: Principal, _form: dict[str, str]) -> None:
        await grants_api.delete_grant(grant_id, principal, request)

    return await _loans_form(request, "Not revoked", act)


@router.get("/audit")
async def audit_page(request: Request) -> Response:
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    q = request.query_params
    filters = {k: q.get(k) or None for k in ("user", "device", "action")}
    try:
        result = await audit_api.get_audit(
            principal, request, limit=str(AUDIT_PAGE), before=q.get("before") or None, **filters
        )
    except RpcError as exc:
        return message("Audit", exc.message, 400, principal)
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
    return html_response(page("Audit", body, principal=principal, active="/audit"))


@router.post("/loans/reserve")
async def reserve(request: Request) -> Response:
    async def act(principal: Principal, form: dict[str, str]) -> None:
        body = reservations_api.ReservationIn.model_validate({
            "device": form.get("device", ""), "user": form.get("user", ""),
            "from": _parse_until(form.get("from", "")), "until": _parse_until(form.get("until", "")),
        })
        await reservations_api.post_reservation(body, principal, request)

    return await _loans_form(request, "Not reserved", act)


@router.post("/loans/reservations/{reservation_id}/cancel")
async def cancel(reservation_id: str, request: Request) -> Response:
    async def act(principal: Principal, _form: dict[str, str]) -> None:
        await reservations_api.delete_reservation(reservation_id, principal, request)

    return await _loans_form(request, "Not cancelled", act)


# -- a device's apps and health -------------------------------------------------------------


def _fmt_bytes(n: object) -> str:
    if not isinstance(n, int):
        return ""
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"


@router.get("/manage/{device}")
async def manage_page(device: str, request: Request) -> Response:
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    hub = services_of(request).hub
    try:
        record = await resolve_device(hub, principal, device)
    except RpcError:
        return message("Device", "No such device.", 404, principal)
    base = "/manage/" + path_segment(record.id)
    parts: list[str] = []
    notice = request.query_params.get("error")
    if notice:
        parts.append(f'<p class="error" role="alert">{esc(notice[:300])}</p>')
    health = services_of(request).health
    reading = health.latest(record.ref)
    h = reading.to_json() if reading is not None else {}
    parts.append("<h2>Health</h2>")
    parts.append(table(
        ["Battery", "Temperature", "Charging", "Free storage", "CPU load", "Memory", "Serving"],
        [[f"{h['battery_level']}%" if h.get("battery_level") is not None else "",
          f"{h['battery_temperature_c']:g} °C" if h.get("battery_temperature_c") is not None
          else "",
          "" if h.get("charging") is None else ("yes" if h["charging"] else "no"),
          f"{_fmt_bytes(h.get('storage_free_bytes'))} of {_fmt_bytes(h.get('storage_total_bytes'))}"
          if h.get("storage_total_bytes") else "",
          h.get("cpu_load", ""),
          f"{100 * h['memory_used_ratio']:.0f}%" if h.get("memory_used_ratio") is not None else "",
          ("yes" if h.get("serving") else f"no: {h.get('reason')}") if h else "not read yet"]],
        cls="grid health",
    ))
    parts.append(_button(f"{base}/health", "Read now", "read"))
    store = services_of(request).store
    if await may(principal, record.ref, Action.LEND, store=store):
        limits = await health.thresholds(record.ref)
        parts.append(
            f'<form class="thresholds" method="post" action="{esc(base)}/thresholds">'
            '<label for="max-temp">Stop serving above (°C)</label>'
            f'<input id="max-temp" name="max_temperature_c" type="number" step="0.5" min="0" '
            f'max="100" value="{esc(limits.max_temperature_c if limits.max_temperature_c is not None else "")}">'
            '<label for="min-battery">or below battery (%)</label>'
            f'<input id="min-battery" name="min_battery" type="number" min="0" max="100" '
            f'value="{esc(limits.min_battery if limits.min_battery is not None else "")}">'
            '<button type="submit">Save thresholds</button></form>'
        )
    parts.append("<h2>Apps</h2>")
    try:
        apps = (await manage_api.list_apps(record.id, principal, request)).apps
    except RpcError as exc:
        apps = []
        parts.append(f'<p class="notice">{esc(exc.message)}</p>')
    rows = []
    for app in apps:
        actions = Markup("".join(
            _button(f"{base}/apps/{app.package}/{verb}", verb.title(), f"{verb}")
            for verb in ("launch", "stop", "clear", "uninstall")
        ))
        rows.append([app.package, "yes" if app.managed else "", "yes" if app.yours else "",
                     actions])
    parts.append(table(["Package", "Through droidwire", "Yours", ""], rows, cls="grid apps",
                       empty="No apps you may see."))
    parts.append(
        f'<form class="upload" data-target="{esc(base)}/apps">'
        '<label for="apk">Install an APK</label>'
        '<input id="apk" name="apk" type="file" accept=".apk" required>'
        '<button type="submit">Install</button>'
        '<progress value="0" max="1"></progress><span class="upload-status"></span></form>'
    )
    return html_response(page(f"{record.id}: apps and health", Markup("".join(parts)),
                      principal=principal, active="/devices", scripts=("/static/manage.js",)))


@router.post("/manage/{device}/apps")
async def manage_install(device: str, request: Request) -> Response:
    """The upload of the page's install form: the raw APK body, the session cookie."""
    principal = await signed_in(request)
    if principal is None:
        return JSONResponse(error_body("unauthorized", "sign in first"), status_code=401)
    if not same_origin(request):
        return JSONResponse(error_body("forbidden", "cross-site upload refused"), status_code=403)
    return await manage_api.install_app(device, principal, request)  # type: ignore[no-any-return]


def _back(device: str, error: str | None = None) -> Response:
    url = "/manage/" + path_segment(device)
    if error:
        url += "?" + urlencode({"error": error[:300]})
    return RedirectResponse(url, status_code=303)


async def _device_form(request: Request, device: str, what: str, act: _DeviceAct) -> Response:
    """A form of a device's page: ``act`` on it, then back to that page — saying why not
    (``what: …``) if it failed — or the answer that refuses the form."""
    principal = await _poster(request, "Device")
    if isinstance(principal, Response):
        return principal
    try:
        answer = await act(principal)
    except (ValueError, RpcError) as exc:  # a ValidationError is a ValueError
        return _back(device, f"{what}: {_why(exc)}")
    return answer or _back(device)


@router.post("/manage/{device}/apps/{package}/{verb}")
async def manage_app(device: str, package: str, verb: str, request: Request) -> Response:
    async def act(principal: Principal) -> Response | None:
        if verb == "uninstall":
            await manage_api.uninstall_app(device, package, principal, request)
        elif verb in ("launch", "stop", "clear"):
            await manage_api.act_on_app(device, package, manage_api.AppAction(action=verb),  # type: ignore[arg-type]
                                        principal, request)
        else:
            return _back(device, f"no action {verb!r}")
        return None

    return await _device_form(request, device, f"{verb} {package}", act)


@router.post("/manage/{device}/health")
async def manage_health(device: str, request: Request) -> Response:
    async def act(principal: Principal) -> None:
        await manage_api.get_health(device, principal, request, fresh=True)

    return await _device_form(request, device, "health", act)


@router.post("/manage/{device}/thresholds")
async def manage_thresholds(device: str, request: Request) -> Response:
    async def act(principal: Principal) -> None:
        form = await read_form(request) or {}
        body = manage_api.ThresholdsIn.model_validate({
            k: (form.get(k) or None) for k in ("max_temperature_c", "min_battery")
        })
        await manage_api.put_thresholds(device, body, principal, request)

    return await _device_form(request, device, "thresholds", act)
