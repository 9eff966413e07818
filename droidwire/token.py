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

import typer

from droidwire.client import ControllerOption, JsonOption, TokenOption, call, list_command, show
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
    created = call(controller, token, "POST", "/v1/tokens", body=body)
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
    created = call(controller, token, "POST", "/v1/tokens/{}/rotate", token_id)
    _show_secret(created, json_out, "rotated")


def _show_secret(created: dict[str, Any], json_out: bool, verb: str) -> None:
    show(created, json_out, lambda _: _print_secret(created, verb))


def _print_secret(created: dict[str, Any], verb: str) -> None:
    scopes = created.get("scopes") or []
    limited = f", scopes {' '.join(scopes)}" if scopes else ""
    print(
        f"{verb} {created['kind']} token {created['name']!r} (id {created['id']}{limited}); "
        "it is shown only this once",
        file=sys.stderr,
    )
    typer.echo(created["token"])


def _print_tokens(tokens: list[dict[str, Any]]) -> None:
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


list_command(app, "/v1/tokens", _print_tokens,
             "List tokens (all for an admin, your own otherwise). Secrets are never shown.")


@app.command()
def revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (see list).")],
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Revoke a token: it stops working at once."""
    call(controller, token, "DELETE", "/v1/tokens/{}", token_id)
    print_revoked("token", token_id, json_out)


def _when(value: str | None) -> str:
    return "-" if not value else value.replace("T", " ")[:19]
