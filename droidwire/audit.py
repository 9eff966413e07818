"""``droidwire audit``: read the audit log (``GET /v1/audit``; docs/cli.md, "Audit").

Filters map to the API's: ``--user``, ``--device``, ``--action`` (``grant.*`` for a prefix),
``--outcome``, ``--since``/``--until`` (ISO 8601, or a duration back from now: ``--since
2h``). ``--limit`` entries, newest first; ``--all`` follows the pages to the end.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from droidwire.client import (
    ApiError,
    Client,
    ControllerOption,
    JsonOption,
    TokenOption,
    cli_errors,
    print_json,
)
from droidwire.grant import parse_duration, parse_until

__all__ = ["audit"]

MAX_ENTRIES = 100_000  # ``--all`` stops here: a terminal is not an export tool


def _time(text: str | None, name: str) -> str | None:
    if text is None:
        return None
    try:
        return (datetime.now(UTC) - parse_duration(text)).isoformat()
    except ValueError:
        pass
    try:
        return parse_until(text).isoformat()
    except ValueError as exc:
        raise ApiError(0, "usage", f"--{name}: {exc} (or a duration back from now: 2h)") from exc


def audit(
    user: Annotated[str | None, typer.Option("--user", help="Who acted (a user's name).")] = None,
    device: Annotated[
        str | None, typer.Option("--device", help="SERIAL or BRIDGE~SERIAL.")
    ] = None,
    action: Annotated[
        str | None, typer.Option("--action", help="e.g. apps.install, or grant.* for a prefix.")
    ] = None,
    outcome: Annotated[
        str | None, typer.Option("--outcome", help="ok, forbidden, not_found, …")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="ISO 8601, or a duration back: 2h.")
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO 8601, or a duration back.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="Entries per page.")] = 50,
    all_: Annotated[bool, typer.Option("--all", help="Follow every page.")] = False,
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Read the audit log, newest first (admins: everything; owners: their devices)."""
    with cli_errors():
        params: dict[str, Any] = {
            k: v
            for k, v in {
                "user": user,
                "device": device,
                "action": action,
                "outcome": outcome,
                "since": _time(since, "since"),
                "until": _time(until, "until"),
                "limit": limit,
            }.items()
            if v is not None
        }
        entries: list[dict[str, Any]] = []
        with Client(controller, token) as client:
            while True:
                page = client.get("/v1/audit", **params)
                entries += page["entries"]
                if not all_ or page["next"] is None or len(entries) >= MAX_ENTRIES:
                    break
                params["before"] = page["next"]
    if json_out:
        print_json({"entries": entries})
        return
    table = Table()
    for header in ("at", "actor", "action", "device", "outcome", "detail"):
        table.add_column(header)
    for e in entries:
        at = datetime.fromisoformat(e["at"]).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        detail = json.dumps(e["detail"], sort_keys=True) if e["detail"] else ""
        table.add_row(at, e["actor"], e["action"], e["device"] or "-", e["outcome"], detail)
    Console(width=200).print(table)
