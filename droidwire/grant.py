"""``droidwire grant create|list|revoke``: lend your devices (docs/design.md §6, §9).

``create DEVICE USER`` lends DEVICE (``SERIAL`` or ``BRIDGE~SERIAL``) to USER, until revoked,
``--until`` a time or ``--for`` a while. ``--until`` takes ISO 8601; a time without a zone is
this machine's local time. ``--for`` takes ``90s``, ``30m``, ``2h``, ``1d``, ``1w`` or sums
like ``1h30m``, counted from now on this machine. Without either the loan lasts until revoked,
and the command says so. A time already past (``--until`` yesterday, ``--for -5m``) is a usage
error, exit 2, like any other bad value.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote

import typer

from droidwire.client import (
    ApiError,
    Client,
    ControllerOption,
    JsonOption,
    TokenOption,
    cli_errors,
    fail,
    print_json,
)
from droidwire.output import print_id_table, print_revoked

__all__ = ["app", "parse_duration", "parse_until"]

app = typer.Typer(
    help="Lend devices to other users, list loans, revoke them.", no_args_is_help=True
)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE = re.compile(r"(\d{1,6})([smhdw])")
# Far enough for any loan, near enough that datetime arithmetic never overflows.
MAX_DURATION = timedelta(days=3650)


def parse_duration(text: str) -> timedelta:
    """``2h``, ``1h30m``, ``90s``, … → a positive timedelta; ValueError otherwise."""
    compact = text.strip().lower().replace(" ", "")
    if not compact:
        raise ValueError("empty duration")
    pos, seconds = 0, 0
    for match in _DURATION_RE.finditer(compact):
        if match.start() != pos:
            break
        seconds += int(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(compact):
        raise ValueError(f"not a duration: {text!r} (try 30m, 2h, 1d, 1h30m)")
    duration = timedelta(seconds=seconds)
    if not timedelta(0) < duration <= MAX_DURATION:
        raise ValueError(f"a duration is more than 0 and at most {MAX_DURATION.days} days")
    return duration


def parse_until(text: str) -> datetime:
    """ISO 8601 → an aware datetime; no zone means this machine's local time."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"not an ISO 8601 time: {text!r} (e.g. 2030-12-01T18:00Z)") from exc
    return when.astimezone() if when.tzinfo is None else when


def _usage(message: str) -> ApiError:
    return ApiError(0, "usage", message)


@app.command()
def create(
    device: Annotated[str, typer.Argument(help="SERIAL or BRIDGE~SERIAL.")],
    user: Annotated[str, typer.Argument(help="Who may use it.")],
    until: Annotated[
        str | None, typer.Option("--until", help="ISO 8601 end, e.g. 2030-12-01T18:00Z.")
    ] = None,
    for_: Annotated[
        str | None, typer.Option("--for", help="How long from now: 30m, 2h, 1d, 1h30m.")
    ] = None,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Lend DEVICE to USER until revoked, or --until a time, or --for a while (you must own
    it, or be an admin)."""
    body: dict[str, Any] = {"device": device, "user": user}
    with cli_errors():
        if until is not None and for_ is not None:
            raise _usage("give --until or --for, not both")
        try:
            if until is not None:
                ends = parse_until(until)
                if ends <= datetime.now(UTC):
                    raise ValueError(f"--until {until} is already past: give a future time")
                body["until"] = ends.isoformat()
            elif for_ is not None:
                body["until"] = (datetime.now(UTC) + parse_duration(for_)).isoformat()
        except ValueError as exc:
            raise _usage(str(exc)) from exc
        with Client(controller, token) as client:
            grant = client.post("/v1/grants", body)
    if json_out:
        print_json(grant)
        return
    end = (
        f"until {_when(grant['until'])} UTC" if grant.get("until")
        else f"until revoked (no --for/--until: end it with `droidwire grant revoke {grant['id']}`)"
    )
    replaced = f" (replaces {', '.join(grant['replaces'])})" if grant.get("replaces") else ""
    print(f"lent {grant['device']} to {grant['user']} {end}{replaced}", file=sys.stderr)
    typer.echo(grant["id"])


@app.command("list")
def list_(
    all_: Annotated[
        bool, typer.Option("--all", help="Include expired and revoked grants.")
    ] = False,
    to_me: Annotated[
        bool, typer.Option("--to-me", help="Only the devices lent to you (use their full id).")
    ] = False,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Loans on your devices and loans you hold (every loan for an admin)."""
    params = {**({"all": "true"} if all_ else {}), **({"to": "me"} if to_me else {})}
    with cli_errors(), Client(controller, token) as client:
        grants: list[dict[str, Any]] = client.get("/v1/grants", **params)
    if json_out:
        print_json(grants)
        return
    print_id_table(
        ("device", "owner", "user", "since", "until", "status"),
        (
            (
                g["id"],
                g["device"],
                g["owner"],
                g["user"],
                _when(g["created_at"]),
                _when(g["until"]) if g["until"] else "-",
                g["status"],
            )
            for g in grants
        ),
    )


@app.command()
def revoke(
    grant_id: Annotated[str, typer.Argument(metavar="ID", help="The grant's id (see list).")],
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """End a loan now: the borrower loses the device at once."""
    if not grant_id.strip():
        fail(_usage("a grant ID is required"))
    with cli_errors(), Client(controller, token) as client:
        client.delete(f"/v1/grants/{quote(grant_id, safe='')}")
    print_revoked("grant", grant_id, json_out)


def _when(value: str | None) -> str:
    if not value:
        return "-"
    try:
        return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return value[:19]
