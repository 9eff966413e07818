"""The dashboard's routes: sign-in, devices, runs, a run, a device's live logcat.

Every page is for the signed-in principal (:mod:`controller.web.sessions`) and shows only
what the REST API would show that principal: devices through
:func:`controller.hub.list_devices` (THE authorization check, ``view``), the live tail through
the same stream handler as ``/v1/devices/{device}/logcat/stream`` (``use``, audited), runs
owned by the caller (every run for an admin), as ``GET /v1/runs`` does. A page the caller may
not see is a 404 that does not say whether it exists.

None of these routes is in the OpenAPI schema: they are HTML for people, not an API.
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select

from controller.api import devices as devices_api
from controller.api.grants import list_grants
from controller.api.screen import may_control, serve_screen
from controller.auth.authorization import Action, Principal, Scope, may
from controller.auth.http import QUERY_TOKEN_PARAMS
from controller.auth.tokens import Unauthenticated, authenticate
from controller.hub import Hub, list_devices, resolve_device
from controller.services import services_of
from controller.store import Run, RunStatus, RunStep, TestResult, TokenKind, User
from controller.web.common import (
    html_response,
    message,
    read_form,
    sessions_of,
    signed_in,
    to_login,
)
from controller.web.health_view import health_summary
from controller.web.html import Markup, esc, link, page, path_segment, table
from controller.web.sessions import (
    COOKIE_NAME,
    same_origin,
    secure_context,
    session_principal,
)
from protocol.errors import ErrorCode, RpcError

__all__ = ["router"]

log = logging.getLogger("droidwire.controller.web")

router = APIRouter(include_in_schema=False)

STATIC_DIR = Path(__file__).with_name("static")
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
MAX_RUNS = 100
LIVE_TAIL_LINES = 50
RUNNING_REFRESH_S = 3  # a run's page reloads itself while the run is going
# Logcat lines worth a highlight even when the analysis did not name them.
_HIGHLIGHT_MARKERS = ("StrictMode", "ANR in ", "FATAL EXCEPTION")


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at is not None else ""


def _verdict_badge(verdict: str | None) -> Markup:
    if not verdict:
        return Markup("")
    return Markup(f'<span class="badge v-{esc(verdict.lower())}">{esc(verdict)}</span>')


# --- sign-in -------------------------------------------------------------------------------


def _login_page(error: str | None = None, status: int = 200) -> HTMLResponse:
    notice = f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
    body = Markup(
        f"{notice}"
        '<form class="login" method="post" action="/login">'
        '<label for="token">API token</label>'
        '<input id="token" name="token" type="password" autocomplete="off" required '
        'spellcheck="false" maxlength="256">'
        '<button type="submit">Sign in</button></form>'
        '<p class="hint">Your token is sent once, in this form\'s body; the dashboard then '
        "keeps a session cookie, never the token.</p>"
    )
    return html_response(page("Sign in", body), status)


def _token_in_url(request: Request) -> bool:
    return bool(QUERY_TOKEN_PARAMS.intersection(k.lower() for k in request.query_params))


def _url_token_refusal() -> HTMLResponse:
    # Never echo it: the URL already went to logs; the person should revoke that token.
    return message(
        "Sign in",
        "A token was put in the URL. Tokens never go in a URL: revoke that token and sign "
        "in with a new one through the form.",
        400,
    )


@router.get("/login")
async def login_form(request: Request) -> Response:
    if _token_in_url(request):
        return _url_token_refusal()
    if await signed_in(request) is not None:
        return RedirectResponse("/", status_code=303)
    return _login_page()


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token from the form body; on success, a new session cookie."""
    if _token_in_url(request):
        return _url_token_refusal()
    if not same_origin(request):
        return message("Sign in", "cross-site sign-in refused", 403)
    form = await read_form(request)
    token = (form or {}).get("token", "").strip()
    if not token:
        return _login_page("Paste an API token to sign in.", 400)
    store = services_of(request).store
    try:
        principal = await authenticate(store, f"Bearer {token}")
    except Unauthenticated:
        # A refused sign-in is a decision too (never the token itself).
        with contextlib.suppress(Exception):
            await services_of(request).audit.record(None, "web.login", outcome="unauthorized",
                                                    actor="anonymous")
        return _login_page("That token is not valid (unknown, revoked or malformed).", 401)
    if principal.kind is TokenKind.BRIDGE:
        return _login_page("A bridge token only connects a bridge: sign in with a user token.", 403)
    sessions = sessions_of(request.app)
    # Never keep a session id across sign-ins: the browser's old one is closed.
    session_id = await sessions.open(principal.token_id, replacing=request.cookies.get(COOKIE_NAME))
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE_NAME,
        session_id,
        max_age=int(sessions.ttl.total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure_context(request),
    )
    log.info("dashboard sign-in by %s", principal.actor)
    try:
        await services_of(request).audit.record(principal, "web.login")
    except Exception:  # the audit write never blocks a sign-in; the failure is logged
        log.exception("audit write failed for a dashboard sign-in")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    if not same_origin(request):
        return message("Sign out", "cross-site sign-out refused", 403)
    await sessions_of(request.app).close(request.cookies.get(COOKIE_NAME))
    response = to_login()
    response.delete_cookie(
        COOKIE_NAME, path="/", httponly=True, samesite="strict",
        secure=secure_context(request),
    )
    return response


# --- devices -------------------------------------------------------------------------------


@router.get("/")
async def home(request: Request) -> Response:
    if await signed_in(request) is None:
        return to_login()
    return RedirectResponse("/devices", status_code=303)


async def _user_names(request: Request, ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    async with services_of(request).store.session() as session:
        rows = (await session.execute(select(User.id, User.name).where(User.id.in_(ids)))).all()
    return {i: n for i, n in rows}


@router.get("/devices")
async def devices_page(request: Request) -> Response:
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    if not principal.allows(Scope.DEVICES_READ):
        return message("Devices", "This token may not read devices.", 403, principal)
    services = services_of(request)
    hub, store, health = services.hub, services.store, services.health  # health: controller.health
    records = await list_devices(hub, principal)
    owners = await _user_names(request, {r.owner_id for r in records})
    loans: dict[str, list[str]] = defaultdict(list)
    for grant in await list_grants(store, principal):
        until = f" until {_when(grant.until)}" if grant.until else ""
        loans[grant.device].append(f"{grant.user}{until}")
    rows = []
    for r in records:
        info = r.info
        android = " · ".join(
            x for x in (
                f"Android {info['release']}" if info.get("release") else "",
                f"SDK {info['sdk']}" if info.get("sdk") else "",
            ) if x
        )
        battery = f"{info['battery']}%" if isinstance(info.get("battery"), int) else ""
        live = await may(principal, r.ref, Action.USE, store=store)
        name = link(f"/devices/{path_segment(r.id)}", r.id) if live else esc(r.id)
        reading = health.latest(r.ref)
        rows.append([
            name,
            Markup(f'<span class="state s-{esc(r.state)}">{esc(r.state)}</span>'),
            owners.get(r.owner_id, ""),
            ", ".join(loans.get(r.id, [])),
            battery,
            android,
            info.get("model") or "",
            health_summary(reading.to_json() if reading is not None else None),
            link(f"/manage/{path_segment(r.id)}", "apps & health") if live else "",
        ])
    body = table(
        ["Device", "State", "Owner", "Lent to", "Battery", "Android", "Model", "Health", ""],
        rows,
        empty="No devices you may see.",
    )
    return html_response(page("Devices", body, principal=principal, active="/devices"))


@router.get("/devices/{device}")
async def device_page(device: str, request: Request) -> Response:
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    hub = services_of(request).hub
    try:
        record = await resolve_device(hub, principal, device)
    except RpcError as exc:
        if exc.code is ErrorCode.CONFLICT:
            return message("Device", exc.message, 409, principal)
        return message("Device", "No such device.", 404, principal)
    info = record.info
    facts = table(
        ["State", "Model", "Android", "SDK", "Battery", "Profile"],
        [[record.state, info.get("model"), info.get("release"), info.get("sdk"),
          f"{info['battery']}%" if isinstance(info.get("battery"), int) else "",
          info.get("profile") or "standard"]],
    )
    store = services_of(request).store
    owners = await _user_names(request, {record.owner_id})
    loans = [
        f"{grant.user} until {_when(grant.until)}" if grant.until else f"{grant.user} (no end)"
        for grant in await list_grants(store, principal) if grant.device == record.id
    ]
    holders = Markup(
        f'<p class="holders" id="holders">Owner: {esc(owners.get(record.owner_id, "?"))}'
        f' · Lent to: {esc(", ".join(loans) or "nobody")}</p>'
    ) + _tunnels(services_of(request).hub, record.ref)
    if await may(principal, record.ref, Action.USE, store=store):
        base = f"/devices/{path_segment(record.id)}"
        stream = f"{base}/logcat/stream?tail={LIVE_TAIL_LINES}"
        control = await may_control(services_of(request).hub, principal, record.ref)
        screen = Markup(
            '<section class="screen-pane"><h2>Screen</h2>'
            '<p class="status" id="screen-status">connecting…</p>'
            f'<div id="screen" data-stream="{esc(base)}/screen/stream" '
            f'data-control="{"1" if control else "0"}">'
            '<canvas id="screen-canvas" width="360" height="800"></canvas></div>'
            + (_CONTROLS if control else
               Markup('<p class="notice" id="screen-readonly">Read-only: you watch this '
                      'device, you do not hold it.</p>'))
            + '</section>'
        )
        live = Markup(
            '<section class="logcat-pane"><h2>Live logcat</h2>'
            f'<p class="status" id="logcat-status">connecting…</p>'
            f'<pre class="logcat live" id="logcat" data-stream="{esc(stream)}"></pre></section>'
        )
        body = Markup(facts + holders + '<div class="device-live">' + screen + live + "</div>")
        scripts: tuple[str, ...] = ("/static/dashboard.js", "/static/screen.js")
    else:
        body = Markup(facts + holders + Markup(
            '<p class="notice">This token may not read this device\'s log.</p>'))
        scripts = ()
    return html_response(page(record.id, body, principal=principal, active="/devices",
                      scripts=scripts))


_CONTROLS = Markup(
    '<div class="controls" id="screen-controls">'
    + "".join(
        f'<button type="button" data-key="{key}">{label}</button>'
        for key, label in (("back", "Back"), ("home", "Home"), ("recents", "Recents"),
                           ("volume_down", "Vol −"), ("volume_up", "Vol +"),
                           ("power", "Power"))
    )
    + '<form id="screen-text"><input id="screen-text-input" maxlength="500" '
    'placeholder="type on the device"><button type="submit">Send</button></form></div>'
)


def _tunnels(hub: Hub, ref: Any) -> Markup:
    """Live remote adb tunnels to the device (docs/tunnel.md): who, since when, streams."""
    live = hub.tunnels.live(ref)
    if not live:
        return Markup("")
    rows = [[t.principal.user_name, _when(datetime.fromtimestamp(t.started_at).astimezone()),
             str(len(t.streams)), str(t.opened), str(t.refused), _last_refusal(t.steps)]
            for t in live]
    grid = table(["User", "Since", "Streams open", "Opened", "Refused", "Last refused"], rows)
    return Markup('<section class="tunnels" id="tunnels"><h2>adb tunnels</h2>' + grid
                  + "</section>")


def _last_refusal(steps: Any) -> str:
    refused = [step for step in steps if step.get("outcome") != "ok"]
    if not refused:
        return ""
    last = refused[-1]
    what = " ".join(str(last[k]) for k in ("request", "path") if last.get(k))
    return f"{last.get('service')}{' ' + what if what else ''} ({last.get('rule')})"


@router.websocket("/devices/{device}/screen/stream")
async def device_screen_stream(
    websocket: WebSocket,
    device: str,
    codec: Annotated[str, Query(pattern="^(jpeg|png|h264)$")] = "jpeg",
) -> None:
    """The dashboard's live screen and remote control: ``/v1/devices/{device}/screen/stream``
    with the session cookie, refused without a session or from another site's page."""
    sessions_of(websocket.app)
    if not same_origin(websocket):
        raise RpcError(ErrorCode.FORBIDDEN, "cross-site WebSocket refused", {"rule": "origin"})
    principal = await session_principal(websocket)
    if principal is None:
        raise Unauthenticated("sign in to the dashboard first")
    await serve_screen(websocket, services_of(websocket).hub, principal, device, codec)


@router.websocket("/devices/{device}/logcat/stream")
async def device_logcat_stream(
    websocket: WebSocket,
    device: str,
    tail: Annotated[int | None, Query(ge=0, le=devices_api.MAX_DUMP_LINES)] = None,
) -> None:
    """The dashboard's live tail: ``/v1/devices/{device}/logcat/stream`` with the session
    cookie instead of a Bearer header, refused (HTTP 401/403 before the socket opens) without
    a session or from another site's page (cross-site WebSocket hijacking)."""
    sessions_of(websocket.app)
    if not same_origin(websocket):
        raise RpcError(ErrorCode.FORBIDDEN, "cross-site WebSocket refused", {"rule": "origin"})
    principal = await session_principal(websocket)
    if principal is None:
        raise Unauthenticated("sign in to the dashboard first")
    await devices_api.logcat_stream(websocket, device, principal, tail)


# --- runs ----------------------------------------------------------------------------------


def _duration(run: Run) -> str:
    if run.finished_at is None:
        return ""
    return f"{(run.finished_at - run.created_at).total_seconds():.1f} s"


def _run_device(run: Run) -> str:
    result = run.result or {}
    device = result.get("device") if isinstance(result.get("device"), dict) else None
    return str((device or {}).get("id") or (run.request or {}).get("device_id") or "")


def _visible_run_query(principal: Principal) -> Any:
    query = select(Run)
    if not principal.is_admin:
        query = query.where(Run.user_id == principal.user_id)
    return query


@router.get("/runs")
async def runs_page(request: Request) -> Response:
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    if not principal.allows(Scope.RUNS_READ):
        return message("Runs", "This token may not read runs.", 403, principal)
    query = _visible_run_query(principal).order_by(Run.created_at.desc()).limit(MAX_RUNS)
    async with services_of(request).store.session() as session:
        runs = (await session.execute(query)).scalars().all()
    rows = []
    for run in runs:
        timings = (run.result or {}).get("timings") or {}
        rows.append([
            link(f"/runs/{run.id}", run.id[:12], cls="mono"),
            run.status,
            _verdict_badge(run.verdict),
            _run_device(run),
            (run.result or {}).get("summary") or "",
            _when(run.created_at),
            _duration(run),
            " ".join(f"{k.removesuffix('_ms')} {v} ms" for k, v in timings.items()
                     if isinstance(v, int)),
        ])
    body = table(
        ["Run", "Status", "Verdict", "Device", "Summary", "Started", "Took", "Timings"],
        rows,
        empty="No runs yet.",
    )
    return html_response(page("Runs", body, principal=principal, active="/runs"))


def _step_rows(steps: list[RunStep]) -> tuple[list[list[object]], list[str | None]]:
    rows: list[list[object]] = []
    classes: list[str | None] = []
    for s in steps:
        d = s.detail or {}
        error = d.get("error")
        if isinstance(error, dict):
            what = f"{error.get('code', '')}: {error.get('message', '')}"
            if error.get("rule"):
                what += f" (rule {error['rule']})"
        elif s.kind == "fix":
            what = " · ".join(str(x) for x in (
                f"round {d['round']}" if d.get("round") is not None else "",
                f"fixer {d['fixer']}" if d.get("fixer") else "",
                d.get("note") or "",
            ) if x)
        else:
            what = str(error or d.get("detail") or d.get("note") or "")
        ms = d.get("ms")
        rows.append([
            s.seq,
            s.kind,
            Markup(f'<span class="st st-{esc(s.status)}">{esc(s.status)}</span>'),
            d.get("method") or "",
            d.get("target") or d.get("device") or "",
            f"{ms} ms" if isinstance(ms, int) else "",
            what,
        ])
        classes.append(f"step-{s.status}")
    return rows, classes


def _diff(text: str) -> Markup:
    lines = []
    for line in text.splitlines():
        cls = ""
        if line.startswith(("+++", "---")):
            cls = "d-file"
        elif line.startswith("+"):
            cls = "d-add"
        elif line.startswith("-"):
            cls = "d-del"
        elif line.startswith("@@"):
            cls = "d-hunk"
        lines.append(f'<span class="{cls}">{esc(line)}</span>' if cls else str(esc(line)))
    return Markup('<pre class="diff">' + "\n".join(lines) + "</pre>")


def _compile_rounds(rounds: list[Any]) -> Markup:
    parts = []
    for r in rounds:
        if not isinstance(r, dict):
            continue
        errors = r.get("errors") or []
        items = "".join(
            f"<li>{esc(_error_text(e))}</li>" for e in errors[:50]
        )
        verdict = "compiled" if r.get("ok") else f"{len(errors)} error(s)"
        fixer = f" · fixer: {r['fixer']}" if r.get("fixer") else ""
        diff = _diff(str(r["diff"])) if r.get("diff") else Markup("")
        parts.append(
            f'<section class="round"><h3>Round {esc(r.get("round"))}: {esc(verdict)}'
            f"{esc(fixer)}</h3>{diff}"
            + (f'<ul class="errors">{items}</ul>' if items else "")
            + "</section>"
        )
    return Markup("".join(parts) or '<p class="empty">No compile rounds.</p>')


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    where = ":".join(str(error[k]) for k in ("file", "line", "column") if error.get(k))
    return f"{where} {error.get('message', '')}".strip()


def _logcat(result: dict[str, Any]) -> Markup:
    text = str(result.get("systrace") or "")
    if not text:
        return Markup('<p class="empty">No logcat was collected.</p>')
    evidence = set()
    for key in ("violations", "crashes", "anrs"):
        for item in result.get(key) or []:
            if isinstance(item, dict) and item.get("line"):
                evidence.add(str(item["line"]).strip())
    out = []
    for line in text.splitlines():
        hot = line.strip() in evidence or any(m in line for m in _HIGHLIGHT_MARKERS)
        out.append(f'<mark class="violation">{esc(line)}</mark>' if hot else str(esc(line)))
    # The result keeps the log's head only (``systrace``): the evidence lines the
    # analysis found anywhere in the log are listed first, so none is cut off.
    head = ""
    if evidence:
        marks = "\n".join(f'<mark class="violation">{esc(e)}</mark>' for e in sorted(evidence))
        head = f'<h3>Evidence</h3><pre class="logcat evidence">{marks}</pre>'
    return Markup(
        head + f"<h3>Log (first {len(text)} characters)</h3>"
        + '<pre class="logcat">' + "\n".join(out) + "</pre>"
    )


@router.get("/runs/{run_id}")
async def run_page(run_id: str, request: Request) -> Response:
    principal = await signed_in(request)
    if principal is None:
        return to_login()
    if not principal.allows(Scope.RUNS_READ):
        return message("Run", "This token may not read runs.", 403, principal)
    if not run_id.isalnum() or len(run_id) > 64:
        return message("Run", "No such run.", 404, principal)
    async with services_of(request).store.session() as session:
        run = (
            await session.execute(_visible_run_query(principal).where(Run.id == run_id))
        ).scalar_one_or_none()
        if run is None:  # others' runs are not disclosed
            return message("Run", "No such run.", 404, principal)
        steps = list((await session.execute(
            select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.seq)
        )).scalars().all())
        tests = list((await session.execute(
            select(TestResult).where(TestResult.run_id == run_id)
        )).scalars().all())
    result = run.result or {}
    timings = result.get("timings") or {}
    facts = table(
        ["Verdict", "Reason", "Status", "Device", "Toolchain", "Started", "Finished"],
        [[_verdict_badge(run.verdict), result.get("reason_code"), run.status, _run_device(run),
          result.get("toolchain"), _when(run.created_at), _when(run.finished_at)]],
    )
    summary = Markup(f'<p class="summary">{esc(result.get("summary") or "")}</p>')
    timing_table = table(
        [k.removesuffix("_ms") for k in timings],
        [[f"{v} ms" for v in timings.values()]] if timings else [],
        empty="no timings",
    )
    step_rows, step_classes = _step_rows(steps)
    steps_table = table(
        ["#", "Step", "Status", "Method", "Target", "Took", "Detail"],
        step_rows, row_classes=step_classes, cls="grid steps", empty="No steps recorded.",
    )
    test_rows = [
        [t.class_name, t.name,
         Markup(f'<span class="st st-{esc(t.status)}">{esc(t.status)}</span>'),
         Markup(f"<details><summary>stack</summary><pre>{esc(t.stack)}</pre></details>")
         if t.stack else ""]
        for t in tests
    ]
    tests_table = table(["Class", "Test", "Status", ""], test_rows, empty="No test results.")
    violations = [str(v) for v in result.get("strict_mode_violations") or []]
    body = Markup(
        facts + summary
        + Markup("<h2>Timings</h2>") + timing_table
        + Markup("<h2>Steps</h2>") + steps_table
        + Markup("<h2>Compile rounds</h2>") + _compile_rounds(result.get("compile_rounds") or [])
        + Markup("<h2>Tests</h2>") + tests_table
        + Markup("<h2>Logcat</h2>")
        + Markup(f'<p class="violations">StrictMode violations: '
                 f'{esc(", ".join(violations) or "none")}</p>')
        + _logcat(result)
    )
    going = run.status in (RunStatus.QUEUED.value, RunStatus.RUNNING.value)
    return html_response(page(f"Run {run.id[:12]}", body, principal=principal, active="/runs",
                      refresh_s=RUNNING_REFRESH_S if going else None))


# --- static files --------------------------------------------------------------------------


@router.get("/static/{name}")
async def static(name: str) -> Response:
    """The dashboard's own CSS and JS (no CDN): a fixed set of files, nothing else."""
    path = STATIC_DIR / name
    media = STATIC_TYPES.get(path.suffix)
    if media is None or path.name != name or not path.is_file():
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(
        path.read_bytes(),
        media_type=media,
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )
