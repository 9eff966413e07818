"""The ``droidwire`` command line: a thin layer of nouns over settings and runners.

Each noun lives in its own module and exposes a ``typer.Typer`` (or a single command)
registered here. This module is the composition root of the CLI: the commands that run a
bridge or a simulated device import ``device_bridge`` lazily, inside the command body, so the
controller package itself never depends on the bridge.
"""

from __future__ import annotations

import importlib

import typer

from droidwire.help import install as _install_help

__all__ = ["app", "main"]

_install_help()

app = typer.Typer(
    name="droidwire",
    help="Run code on Android devices anywhere: bridges dial out to one controller.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# (module, attribute, group name or None for a top-level command). A module that is not
# there yet is skipped, so a partial checkout still has a working CLI.
_NOUNS: tuple[tuple[str, str, str | None], ...] = (
    ("droidwire.serve", "controller", None),
    ("droidwire.bridge", "bridge", None),
    ("droidwire.sim", "sim_device", None),
    ("droidwire.device", "app", "device"),
    ("droidwire.run", "run", None),
    ("droidwire.runs", "app", "runs"),
    ("droidwire.demo", "demo", None),
    ("droidwire.logcat", "app", "logcat"),
    ("droidwire.instrumentation", "app", "instrumentation"),
    ("droidwire.fixer", "app", "fixer"),
    ("droidwire.token", "app", "token"),
    ("droidwire.grant", "app", "grant"),
    ("droidwire.audit", "audit", None),
    ("droidwire.manage", "apps", "app"),
    ("droidwire.manage", "files", "file"),
    ("droidwire.users", "app", "user"),
    ("droidwire.reserve", "app", "reserve"),
)


def _register() -> None:
    for module_name, attr, group in _NOUNS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        target = getattr(module, attr)
        if group is None:
            app.command(name=attr.replace("_", "-"))(target)
        else:
            app.add_typer(target, name=group)


@app.callback()
def _root() -> None:
    """Run code on Android devices anywhere: bridges dial out to one controller."""


@app.command()
def version() -> None:
    """Print droidwire's version."""
    from importlib.metadata import version as _version

    typer.echo(_version("droidwire"))


_register()


def main() -> None:
    app(prog_name="droidwire")  # the same name in messages however it was started
