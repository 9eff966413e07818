"""``droidwire token create|list|rotate|revoke``: API and bridge tokens (docs/design.md §9).

``create --scope S`` (repeatable) limits a user token to scopes S (``devices:read``,
``devices:use``, ``devices:lend``, ``runs:read``, ``runs:write``, ``admin``); without it the
token has your own token's scopes. ``rotate ID`` replaces a token's secret: the new one is
printed once, the old one stops working at once.
"""

from __future__ import annotations

import sys
from enum import StrEnum
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
from droidwire.output import print_id_table, print_revoked

__all__ = ["app"]

app = typer.Typer(
    help="Create, list, rotate and revoke API and bridge tokens.", no_args_is_help=True
)


class Kind(StrEnum):
    BRIDGE = "bridge"
    USER = "user"


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="Bridge name, or the user the token is for.")],
    kind: Annotated[Kind, typer.Option("--kind", help="bridge or user.")],
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            help="Limit a user token to this scope (repeatable), e.g. devices:read.",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Create a token. The secret is printed once: store it now.

    The secret alone goes to stdout, so T=$(droidwire token create --kind bridge pi) works.
    """
    body: dict[str, Any] = {"kind": kind.value, "name": name}
    if scope:
        body["scopes"] = scope
    with cli_errors(), Client(controller, token) as client:
        created = client.post("/v1/tokens", body)
    _show_secret(created, json_out, "created")


@app.command()
def rotate(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (see list).")],
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Replace a token's secret: the new one is printed once, the old one dies at once.

    A bridge connected with the old token is disconnected: restart it with the new one.
    """
    with cli_errors(), Client(controller, token) as client:
        created = client.post(f"/v1/tokens/{quote(token_id, safe='')}/rotate")
    _show_secret(created, json_out, "rotated")


def _show_secret(created: dict[str, Any], json_out: bool, verb: str) -> None:
    if json_out:
        print_json(created)
        return
    scopes = created.get("scopes") or []
    limited = f", scopes {' '.join(scopes)}" if scopes else ""
    print(
        f"{verb} {created['kind']} token {created['name']!r} (id {created['id']}{limited}); "
        "it is shown only this once",
        file=sys.stderr,
    )
    typer.echo(created["token"])


@app.command("list")
def list_(
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """List tokens (all for an admin, your own otherwise). Secrets are never shown."""
    with cli_errors(), Client(controller, token) as client:
        tokens: list[dict[str, Any]] = client.get("/v1/tokens")
    if json_out:
        print_json(tokens)
        return
    print_id_table(
        ("kind", "name", "owner", "scopes", "created", "last used", "status"),
        (
            (
                t["id"],
                t["kind"],
                t["name"],
                t["owner"],
                " ".join(t.get("scopes") or []) or "all",
                _when(t["created_at"]),
                _when(t["last_used_at"]),
                "revoked" if t["revoked"] else "active",
            )
            for t in tokens
        ),
    )


@app.command()
def revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (see list).")],
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Revoke a token: it stops working at once."""
    with cli_errors(), Client(controller, token) as client:
        client.delete(f"/v1/tokens/{quote(token_id, safe='')}")
    print_revoked("token", token_id, json_out)


def _when(value: str | None) -> str:
    return "-" if not value else value.replace("T", " ")[:19]
