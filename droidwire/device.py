"""``droidwire device list|shell|logcat|state|screenshot|view|label|forget``: devices behind
any bridge (§9).

``DEVICE`` is a device's id (``BRIDGE~SERIAL``) or its serial when only one bridge has it.
``device shell`` exits with the command's own exit code (like ``adb shell``); a refusal by
the device's policy exits 3 and names the rule. Every command takes ``--json``: ``device
logcat --json`` prints ``{"lines": [...]}``, and with ``-f`` one JSON object per stream chunk
(``{"lines", "dropped"?, "eof"?, "reason"?}``, a line of its own each); ``device screenshot
--json`` prints ``{"path", "bytes"}``; ``device view --json`` prints ``{"url", "opened"}``.
``logcat -f`` runs until Ctrl-C (exit 0); a stream the controller ends exits 3 when the caller's access ended (``forbidden: …``) and 5 for any
other reason (``bridge_moved``, the bridge gone, sharing paused, a shutdown).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit, urlunsplit

import typer
from rich.text import Text

from droidwire.client import (
    DEFAULT_TIMEOUT_S,
    ApiError,
    Client,
    ControllerOption,
    JsonOption,
    TokenOption,
    call,
    cli_errors,
    list_command,
    print_json,
    show,
)
from droidwire.output import console, id_table
from droidwire.tunnel import tunnel as _tunnel

__all__ = ["app"]

app = typer.Typer(help="List devices, run shell commands, read logcat.", no_args_is_help=True)

DeviceArg = Annotated[str, typer.Argument(metavar="DEVICE", help="BRIDGE~SERIAL, or SERIAL.")]

app.command("tunnel")(_tunnel)  # remote adb: droidwire/tunnel.py, docs/tunnel.md


def _path(device: str, *rest: str) -> str:
    return "/".join(["/v1/devices", quote(device, safe="~:"), *rest])


def _print_devices(devices: list[dict[str, Any]]) -> None:
    table = id_table(
        ("state", "model", "android", "sdk", "abi", "battery", "profile"),
        (str(d["id"]) for d in devices),
    )
    for d in devices:
        table.add_row(*(Text(str(cell)) for cell in _row(d)))
    console().print(table)


def _row(d: dict[str, Any]) -> tuple[object, ...]:
    return (
        d["id"],
        d["state"],
        d.get("model") or "-",
        d.get("release") or "-",
        _dash(d.get("sdk")),
        d.get("abi") or "-",
        "-" if d.get("battery") is None else f"{d['battery']}%",
        d.get("profile") or "standard",
    )


list_command(app, "/v1/devices", _print_devices, "List the devices you can use, on every bridge.")


@app.command()
def shell(
    device: DeviceArg,
    args: Annotated[list[str], typer.Argument(metavar="-- ARGS…", help="The command's argv.")],
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Seconds the command may run.")
    ] = None,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Run a command on the device (under its profile's allow-list); exit with its code."""
    body: dict[str, Any] = {"argv": args}
    if timeout is not None:
        body["timeout_s"] = timeout
    read_timeout = DEFAULT_TIMEOUT_S + (timeout or 60.0)
    result = call(controller, token, "POST", _path(device, "shell"), body=body,
                  timeout=read_timeout)
    if json_out:
        print_json(result)
    else:
        sys.stdout.write(result.get("stdout", ""))
        sys.stderr.write(result.get("stderr", ""))
    raise typer.Exit(int(result.get("exit_code", 1)) & 0xFF)


@app.command()
def logcat(
    device: DeviceArg,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[
        int | None, typer.Option("--lines", "-t", min=1, max=5000, help="Only the last N lines.")
    ] = None,
    controller: ControllerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """Print the device's log; with -f, follow it (lost lines are reported on stderr)."""
    if not follow:
        dumped = call(controller, token, "GET", _path(device, "logcat"),
                      params={"lines": lines} if lines else None)
        if json_out:
            print_json({"lines": list(dumped.get("lines", []))})
            return
        for line in dumped.get("lines", []):
            typer.echo(line)
        return
    with cli_errors(), Client(controller, token) as client:
        url = _ws_url(client.base_url) + _path(device, "logcat", "stream")
        if lines:
            url += f"?tail={lines}"
        _follow(url, token or "", json_out=json_out)


@app.command()
def state(
    device: DeviceArg,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Where the device is: foreground app and activity, keyboard, screen size."""
    current: dict[str, Any] = call(controller, token, "GET", _path(device, "state"))
    show(current, json_out, _print_state)


def _print_state(current: dict[str, Any]) -> None:
    screen = current.get("screen") or {}
    typer.echo(f"package:  {current.get('package') or '-'}")
    typer.echo(f"activity: {current.get('activity') or '-'}")
    typer.echo(f"keyboard: {'shown' if current.get('keyboard') else 'hidden'}")
    typer.echo(f"screen:   {screen.get('width', '?')}x{screen.get('height', '?')}")


@app.command()
def forget(
    target: Annotated[str, typer.Argument(
        metavar="DEVICE", help="BRIDGE~SERIAL or SERIAL; with --bridge, a bridge's name.")],
    bridge: Annotated[bool, typer.Option(
        "--bridge", help="Forget the bridge named TARGET, its devices and its tokens.")] = False,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Forget a device (or --bridge: a bridge) that is gone for good (owner or admin)."""
    forget_path(target, "bridge" if bridge else "device", json_out, controller, token)


def forget_path(target: str, kind: str, json_out: bool, controller: str | None,
                token: str | None) -> None:
    """``DELETE`` a device or a bridge that is gone for good, and say so."""
    if kind == "bridge":
        call(controller, token, "DELETE", "/v1/bridges/{}", target)
    else:
        call(controller, token, "DELETE", _path(target))
    show({"forgotten": target, "kind": kind}, json_out,
         lambda _: typer.echo(f"forgot {kind} {target}"))


@app.command()
def label(
    device: DeviceArg,
    labels: Annotated[list[str] | None, typer.Argument(
        metavar="[LABEL]…", help="The labels; none: clear them.", show_default=False)] = None,
    pool: Annotated[str | None, typer.Option(
        "--pool", help="The pool the device is in (none: no pool).")] = None,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Set the labels and pool an admin gives DEVICE (they replace the admin's earlier ones;
    the bridge owner's, from its config, stay): selectors label=… and pool=… match them."""
    out = call(controller, token, "PUT", _path(device, "labels"),
               body={"labels": list(labels or []), "pool": pool})

    def human(d: dict[str, Any]) -> None:
        shown = ", ".join(d.get("labels") or []) or "-"
        typer.echo(f"{d['id']}: labels {shown}; pool {d.get('pool') or '-'}")

    show(out, json_out, human)


@app.command()
def screenshot(
    device: DeviceArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file to write.")],
    marks: Annotated[
        bool, typer.Option("--marks", help="Number the actionable elements (Set-of-Marks).")
    ] = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """Save the device's screen as a PNG."""
    import httpx

    with cli_errors(), Client(controller, token) as client:
        # The one binary answer of the API: the shared client speaks JSON, so fetch it here,
        # with the same base URL, header and no redirects.
        try:
            response = httpx.get(
                client.base_url + _path(device, "screenshot"),
                params={"marks": "1"} if marks else None,
                headers={"Authorization": f"Bearer {token}"},
                timeout=DEFAULT_TIMEOUT_S,
                follow_redirects=False,
            )
        except httpx.HTTPError as exc:
            raise ApiError(0, "unavailable", f"cannot reach {client.base_url}: {exc}") from exc
        if not response.is_success:
            raise _api_error(response.status_code, response.content)
        if not response.content.startswith(b"\x89PNG"):
            raise ApiError(response.status_code, "bad_response", "the answer is not a PNG")
        try:
            output.write_bytes(response.content)
        except OSError as exc:
            raise ApiError(0, "usage", f"cannot write {output}: {exc.strerror or exc}") from exc
    if json_out:
        print_json({"path": str(output), "bytes": len(response.content)})
        return
    typer.echo(f"wrote {output} ({len(response.content)} bytes)")


@app.command()
def view(
    device: DeviceArg,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the page's URL; open nothing.")
    ] = False,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Open the device's page in the dashboard: live screen, controls, live logcat.

    Prints the URL (and opens nothing) when there is no browser here. The page signs in with
    your token in its form once; the token never goes into the URL."""
    import webbrowser

    with cli_errors(), Client(controller, token) as client:
        devices: list[dict[str, Any]] = client.get("/v1/devices")
        matches = [d for d in devices if device in (d.get("id"), d.get("serial"))]
        if not matches:
            raise ApiError(404, "not_found", f"no device {device!r} you may use")
        if len(matches) > 1:
            ids = ", ".join(str(d.get("id")) for d in matches)
            raise ApiError(409, "conflict", f"{device!r} is on several bridges: {ids}")
        url = f"{client.base_url}/devices/{quote(str(matches[0]['id']), safe='~:')}"
    opened = False
    if not no_browser:
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
    if json_out:
        print_json({"url": url, "opened": opened})
        return
    typer.echo(url if not opened else f"opened {url}")


def _api_error(status: int, body: bytes) -> ApiError:
    try:
        error = json.loads(body or b"{}")["error"]
        return ApiError(status, str(error["code"]), str(error["message"]),
                        {k: v for k, v in error.items() if k not in ("code", "message")})
    except (ValueError, KeyError, TypeError):
        return ApiError(status, "http_error", f"HTTP {status}")


_POLL_S = 0.25  # how often a followed stream looks whether Ctrl-C was pressed


def _follow(url: str, token: str, *, json_out: bool = False) -> None:
    from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidStatus
    from websockets.sync.client import connect

    try:
        with _ctrl_c() as pressed, connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            compression=None,
            open_timeout=DEFAULT_TIMEOUT_S,
        ) as ws:
            while not pressed():
                try:
                    message = ws.recv(timeout=_POLL_S)
                except TimeoutError:
                    continue
                except ConnectionClosedOK:
                    return
                chunk = json.loads(message)
                if json_out:
                    sys.stdout.write(json.dumps(chunk, sort_keys=True) + "\n")
                    sys.stdout.flush()
                    if chunk.get("eof"):
                        raise _stream_ended(str(chunk.get("reason") or "eof"))
                    continue
                lost = chunk.get("dropped", 0)
                if lost or chunk.get("lost_batches"):
                    batches = chunk.get("lost_batches", 0)
                    more = f" and {batches} batches" if batches else ""
                    print(f"--- droidwire: {lost} lines{more} lost here ---", file=sys.stderr)
                for line in chunk.get("lines", []):
                    sys.stdout.write(line + "\n")
                sys.stdout.flush()
                if chunk.get("eof"):
                    raise _stream_ended(str(chunk.get("reason") or "eof"))
    except InvalidStatus as exc:
        raise _api_error(exc.response.status_code, bytes(exc.response.body or b"")) from exc
    except ConnectionClosed as exc:
        raise ApiError(0, "unavailable", f"the log stream was cut: {exc}") from exc
    except OSError as exc:
        raise ApiError(0, "unavailable", f"cannot reach the controller: {exc}") from exc
    except KeyboardInterrupt:  # before the stream was open, or off the main thread
        return


@contextlib.contextmanager
def _ctrl_c() -> Iterator[Callable[[], bool]]:
    """While in it, Ctrl-C (SIGINT) only sets a flag, which the caller reads between messages.

    The default raises KeyboardInterrupt wherever the main thread happens to be, which can be
    inside websockets between taking its message queue's lock and the ``try`` that frees it:
    its reader thread then blocks on that lock forever, and the closing handshake with it — the
    process hung after Ctrl-C. Off the main thread (a test runner's) signals are not ours to
    take: nothing changes there."""
    pressed = [False]
    if threading.current_thread() is not threading.main_thread():
        yield lambda: pressed[0]
        return

    def press(signum: int, frame: object) -> None:
        pressed[0] = True

    previous = signal.signal(signal.SIGINT, press)
    try:
        yield lambda: pressed[0]
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def _stream_ended(reason: str) -> ApiError:
    """A followed log stream the controller ended: never a success, since ``-f`` is meant to
    run until Ctrl-C. Access that ended is 403 (exit 3), anything else unavailable (exit 5)."""
    if reason.startswith("forbidden"):
        return ApiError(403, "forbidden", f"the log stream ended: {reason}")
    return ApiError(0, "unavailable", f"the log stream ended: {reason}")


def _ws_url(base: str) -> str:
    parts = urlsplit(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _dash(value: object) -> str:
    return "-" if value is None else str(value)
