"""``droidwire user list|disable|enable``: accounts, for admins (``/v1/users``; docs/cli.md,
"Accounts")."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote

import typer

from droidwire.client import (
    Client,
    ControllerOption,
    JsonOption,
    TokenOption,
    cli_errors,
    print_json,
)
from droidwire.output import print_id_table

__all__ = ["app"]

app = typer.Typer(help="List, disable and re-enable user accounts (admins).", no_args_is_help=True)
Name = Annotated[str, typer.Argument(help="The user's name.")]


def _when(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command("list")
def list_(json_out: JsonOption = False, controller: ControllerOption = None,
          token: TokenOption = None) -> None:
    """Every user: admin or not, disabled or not, live tokens."""
    with cli_errors(), Client(controller, token) as client:
        users: list[dict[str, Any]] = client.get("/v1/users")
    if json_out:
        print_json(users)
        return
    print_id_table(
        ("name", "admin", "status", "tokens", "since"),
        ((u["id"], u["name"], "yes" if u["is_admin"] else "-",
          f"disabled {_when(u['disabled_at'])}" if u["disabled"] else "active",
          str(u["tokens"]), _when(u["created_at"])) for u in users),
    )


def _set(name: str, verb: str, json_out: bool, controller: str | None, token: str | None) -> None:
    with cli_errors(), Client(controller, token) as client:
        user = client.post(f"/v1/users/{quote(name, safe='')}/{verb}")
    if json_out:
        print_json(user)
    else:
        print(f"{verb}d {user['name']}", file=sys.stderr)


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
