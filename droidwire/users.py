"""``droidwire user list|disable|enable|limits``: accounts and their quotas, for admins
(``/v1/users``; docs/cli.md, "Accounts")."""

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
    list_command,
    show,
)
from droidwire.output import print_id_table

__all__ = ["app"]

app = typer.Typer(help="List, disable and re-enable user accounts; their quotas (admins).",
                  no_args_is_help=True)
Name = Annotated[str, typer.Argument(help="The user's name.")]


def _when(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _print_users(users: list[dict[str, Any]]) -> None:
    print_id_table(
        ("name", "admin", "status", "tokens", "since"),
        ((u["id"], u["name"], "yes" if u["is_admin"] else "-",
          f"disabled {_when(u['disabled_at'])}" if u["disabled"] else "active",
          str(u["tokens"]), _when(u["created_at"])) for u in users),
    )


list_command(app, "/v1/users", _print_users, "Every user: admin or not, disabled or not, live tokens.")


def _set(name: str, verb: str, json_out: bool, controller: str | None, token: str | None) -> None:
    user = call(controller, token, "POST", "/v1/users/{}/" + verb, name)
    show(user, json_out, lambda u: print(f"{verb}d {u['name']}", file=sys.stderr))


@app.command()
def disable(name: Name, json_out: JsonOption = False, controller: ControllerOption = None,
            token: TokenOption = None) -> None:
    """Disable NAME: their tokens, sessions, bridges, streams and runs stop at once."""
    _set(name, "disable", json_out, controller, token)


@app.command()
def enable(name: Name, json_out: JsonOption = False, controller: ControllerOption = None,
           token: TokenOption = None) -> None:
    """Re-enable NAME: their (unrevoked) tokens work again."""
    _set(name, "enable", json_out, controller, token)


_LIMIT_HELP = "A number, or 'none' for no limit; unchanged when not given."


def _limit(text: str | None, flag: str, low: int) -> int | None:
    if text is None or text.strip().lower() in ("none", "off", "unlimited"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ApiError(0, "usage", f"{flag}: a number or 'none', not {text!r}") from None
    if value < low:
        raise ApiError(0, "usage", f"{flag}: at least {low}")
    return value


@app.command()
def limits(
    name: Name,
    max_running: Annotated[str | None, typer.Option(
        "--max-running", metavar="N", help=f"Runs NAME may have started at once. {_LIMIT_HELP}",
        show_default=False)] = None,
    max_queued: Annotated[str | None, typer.Option(
        "--max-queued", metavar="N", help=f"Runs NAME may have waiting to start. {_LIMIT_HELP}",
        show_default=False)] = None,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Show NAME's quotas; with --max-running / --max-queued, set them (admins).

    A run over a quota waits, or is refused 429 with the limit (docs/sandbox.md, "Quotas").
    """
    with cli_errors():
        changes = {}
        if max_running is not None:
            changes["max_running"] = _limit(max_running, "--max-running", 1)
        if max_queued is not None:
            changes["max_queued"] = _limit(max_queued, "--max-queued", 0)
    current: dict[str, Any] = call(controller, token, "GET", "/v1/users/{}/limits", name)
    if changes:
        body = {"max_running": current.get("max_running"),
                "max_queued": current.get("max_queued"), **changes}
        current = call(controller, token, "PUT", "/v1/users/{}/limits", name, body=body)

    def human(out: dict[str, Any]) -> None:
        for key in ("max_running", "max_queued"):
            value = out.get(key)
            typer.echo(f"{key.replace('_', '-')}: {'none' if value is None else value}")

    show(current, json_out, human)
