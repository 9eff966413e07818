"""``droidwire reserve create|list|cancel``: book a device in advance, e.g. for a CI window
(``/v1/reservations``; docs/security.md, "Reservations")."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from droidwire.client import (
    ApiError,
    ControllerOption,
    JsonOption,
    TokenOption,
    call,
    cli_errors,
    show,
)
from droidwire.grant import parse_duration, parse_until
from droidwire.output import print_id_table, print_revoked

__all__ = ["app"]

app = typer.Typer(help="Book devices in advance (from–until), list and cancel bookings.",
                  no_args_is_help=True)


def _time(text: str, name: str) -> datetime:
    try:
        return parse_until(text)
    except ValueError as exc:
        raise ApiError(0, "usage", f"--{name}: {exc}") from exc


def _when(value: str) -> str:
    return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M")


@app.command()
def create(
    device: Annotated[str, typer.Argument(help="SERIAL or BRIDGE~SERIAL.")],
    user: Annotated[str, typer.Argument(help="For whom.")],
    from_: Annotated[str, typer.Option("--from", help="ISO 8601 start.")],
    until: Annotated[str | None, typer.Option("--until", help="ISO 8601 end.")] = None,
    for_: Annotated[str | None, typer.Option("--for", help="Length: 2h, 1h30m.")] = None,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Reserve DEVICE for USER from --from until --until (or --for a while)."""
    with cli_errors():
        start = _time(from_, "from")
        if (until is None) == (for_ is None):
            raise ApiError(0, "usage", "give --until or --for (one of them)")
        try:
            end = _time(until, "until") if until is not None else start + parse_duration(for_ or "")
        except ValueError as exc:
            raise ApiError(0, "usage", str(exc)) from exc
    out = call(controller, token, "POST", "/v1/reservations",
               body={"device": device, "user": user, "from": start.isoformat(),
                     "until": end.isoformat()})

    def human(out: dict[str, Any]) -> None:
        print(f"reserved {out['device']} for {out['user']} {_when(out['starts_at'])}–"
              f"{_when(out['ends_at'])} UTC", file=sys.stderr)
        typer.echo(out["id"])

    show(out, json_out, human)


@app.command("list")
def list_(
    all_: Annotated[bool, typer.Option("--all", help="Include ended and cancelled.")] = False,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Reservations of your devices and yours."""
    rows: list[dict[str, Any]] = call(controller, token, "GET", "/v1/reservations",
                                      params={"all": "true"} if all_ else None)
    show(rows, json_out, lambda _: print_id_table(
        ("device", "user", "from", "until", "status"),
        ((r["id"], r["device"], r["user"], _when(r["starts_at"]), _when(r["ends_at"]),
          r["status"]) for r in rows)))


@app.command()
def cancel(
    reservation_id: Annotated[str, typer.Argument(metavar="ID")],
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel a reservation (a started one's loan ends)."""
    call(controller, token, "DELETE", "/v1/reservations/{}", reservation_id)
    print_revoked("reservation", reservation_id, json_out)
