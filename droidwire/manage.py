"""``droidwire app …`` and ``droidwire file …``: apps and files on a device without a shell
(REST ``/v1/devices/{device}/apps`` and ``/files``; docs/cli.md, "Apps and files").

``app install DEVICE APK`` streams the APK (progress on stderr), ``app list DEVICE``, ``app
launch|stop|clear|uninstall DEVICE PACKAGE``; ``file push DEVICE LOCAL REMOTE`` and ``file
pull DEVICE REMOTE LOCAL`` (``-`` for stdout). A borrower's REMOTE may be relative: it is taken
inside their loan's working folder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
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
    print_json,
)
from droidwire.output import print_id_table

__all__ = ["apps", "files"]

apps = typer.Typer(help="Install, list, launch, stop, clear and uninstall apps.",
                   no_args_is_help=True)
files = typer.Typer(help="Push files to a device and pull them back.", no_args_is_help=True)

CHUNK = 256 * 1024
Device = Annotated[str, typer.Argument(help="SERIAL or BRIDGE~SERIAL.")]
Package = Annotated[str, typer.Argument(help="The app's package name.")]


def _dev(device: str) -> str:
    return f"/v1/devices/{quote(device, safe='~')}"


def _read(path: Path, size: int, label: str) -> Iterator[bytes]:
    """``path``'s bytes in chunks, with a progress line on stderr when it is a terminal."""
    sent = 0
    show = sys.stderr.isatty()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            sent += len(chunk)
            if show:
                pct = 100 * sent // size if size else 100
                print(f"\r{label}: {sent}/{size} bytes ({pct}%)", end="", file=sys.stderr)
            yield chunk
    if show:
        print(file=sys.stderr)


def _local(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise ApiError(0, "usage", f"cannot read {path}: {exc.strerror}") from exc


@apps.command("list")
def list_(device: Device, json_out: JsonOption = False,
          controller: ControllerOption = None, token: TokenOption = None) -> None:
    """Third-party apps (a borrower: the ones they installed)."""
    with cli_errors(), Client(controller, token) as client:
        out: dict[str, Any] = client.get(f"{_dev(device)}/apps")
    if json_out:
        print_json(out)
        return
    print_id_table(
        ("managed", "yours"),
        ((a["package"], "yes" if a["managed"] else "-", "yes" if a["yours"] else "-")
         for a in out["apps"]),
    )


@apps.command()
def install(device: Device, apk: Annotated[Path, typer.Argument(help="The APK file.")],
            json_out: JsonOption = False,
            controller: ControllerOption = None, token: TokenOption = None) -> None:
    """Install APK (streamed, with progress); prints the package the device reported."""
    with cli_errors():
        size = _local(apk)
        with Client(controller, token) as client:
            out = client.upload("POST", f"{_dev(device)}/apps", _read(apk, size, "upload"), size)
    if json_out:
        print_json(out)
        return
    typer.echo(out["package"])


def _act(action: str) -> Any:
    def command(device: Device, package: Package,
                controller: ControllerOption = None, token: TokenOption = None) -> None:
        with cli_errors(), Client(controller, token) as client:
            client.post(f"{_dev(device)}/apps/{quote(package, safe='')}", {"action": action})
        print(f"{action}: {package}", file=sys.stderr)

    command.__doc__ = {"launch": "Start the app's launcher activity.",
                       "stop": "Force-stop the app.",
                       "clear": "Clear the app's data."}[action]
    return command


for _name in ("launch", "stop", "clear"):
    apps.command(_name)(_act(_name))


@apps.command()
def uninstall(device: Device, package: Package,
              controller: ControllerOption = None, token: TokenOption = None) -> None:
    """Uninstall the app."""
    with cli_errors(), Client(controller, token) as client:
        client.delete(f"{_dev(device)}/apps/{quote(package, safe='')}")
    print(f"uninstalled {package}", file=sys.stderr)


@files.command()
def push(device: Device, local: Annotated[Path, typer.Argument(help="The file to send.")],
         remote: Annotated[str, typer.Argument(help="Where on the device.")],
         json_out: JsonOption = False,
         controller: ControllerOption = None, token: TokenOption = None) -> None:
    """Send LOCAL to REMOTE on the device (streamed, with progress)."""
    with cli_errors():
        size = _local(local)
        with Client(controller, token) as client:
            out = client.upload("PUT", f"{_dev(device)}/files", _read(local, size, "push"), size,
                                params={"path": remote})
    if json_out:
        print_json(out)
        return
    print(f"pushed {out['size']} bytes to {out['path']}", file=sys.stderr)


@files.command()
def pull(device: Device, remote: Annotated[str, typer.Argument(help="The file on the device.")],
         local: Annotated[str, typer.Argument(help="Where to write it; - for stdout.")],
         controller: ControllerOption = None, token: TokenOption = None) -> None:
    """Fetch REMOTE from the device into LOCAL (streamed)."""
    with cli_errors(), Client(controller, token) as client:
        if local == "-":
            out = sys.stdout.buffer
            size = client.download(f"{_dev(device)}/files", out.write, params={"path": remote})
            out.flush()
        else:
            partial = Path(f"{local}.part")
            try:
                with partial.open("wb") as f:
                    size = client.download(f"{_dev(device)}/files", f.write,
                                           params={"path": remote})
                os.replace(partial, local)
            except OSError as exc:
                raise ApiError(0, "usage", f"cannot write {local}: {exc.strerror}") from exc
            finally:
                partial.unlink(missing_ok=True)
    print(f"pulled {size} bytes", file=sys.stderr)
