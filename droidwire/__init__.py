"""The ``droidwire`` command line: a thin layer of nouns over settings and runners.

This package is the composition root (docs/design.md §2): the one package that may import both
``controller`` and ``device_bridge``. Each noun lives in its own module and exposes a
``typer.Typer`` (or a single command) listed in :data:`NOUNS`; a noun's module is imported only
when that noun runs (or ``--help`` lists them all), so ``droidwire bridge`` and the client
commands never import the controller's packages, and a bridge-only install (``pip install
droidwire``, without the ``controller`` extra) runs them. A noun whose extra is not installed
says which one to install instead of failing on an import (docs/cli.md, "Installing").
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, NamedTuple

import typer
import typer.core
import typer.main

from droidwire.help import install as _install_help

__all__ = ["EXTRAS", "NOUNS", "Noun", "app", "command_tree", "main", "missing_extra"]

_install_help()

# What each optional extra of the distribution brings (pyproject.toml), by the modules it
# makes importable; an extra that includes another lists that one's modules too.
_SOURCES = ("tree_sitter", "tree_sitter_kotlin", "tree_sitter_java")
_SIM = (*_SOURCES, "av", "cryptography")
_METRICS = ("prometheus_client",)
EXTRAS: dict[str, tuple[str, ...]] = {
    "sources": _SOURCES,
    "sim": _SIM,
    "metrics": _METRICS,
    "controller": (*_SIM, *_METRICS, "fastapi", "uvicorn", "tenacity", "openai", "sqlalchemy",
                   "alembic", "aiosqlite", "asyncpg", "redis", "mcp"),
}


class Noun(NamedTuple):
    module: str
    attr: str
    group: str | None  # None: a top-level command named after ``attr``
    extras: tuple[str, ...] = ()  # the extras it needs beyond the base install
    summary: str = ""  # its one line in ``droidwire --help`` when its extra is missing

    @property
    def name(self) -> str:
        return self.group or self.attr.replace("_", "-")


NOUNS: tuple[Noun, ...] = (
    Noun("droidwire.serve", "controller", None, ("controller",),
         "Serve the controller: REST, the bridge endpoint, metrics."),
    Noun("droidwire.bridge", "app", "bridge"),
    Noun("droidwire.sim", "sim_device", None, ("sim",),
         "Serve a simulated Android phone that `adb connect HOST:PORT` accepts."),
    Noun("droidwire.device", "app", "device"),
    Noun("droidwire.run", "run", None),
    Noun("droidwire.runs", "app", "runs"),
    Noun("droidwire.demo", "demo", None, ("controller",),
         "Controller + bridge + simulated device + three sample runs; no phone needed."),
    Noun("droidwire.logcat", "app", "logcat"),
    Noun("droidwire.instrumentation", "app", "instrumentation"),
    Noun("droidwire.fixer", "app", "fixer"),
    Noun("droidwire.token", "app", "token"),
    Noun("droidwire.grant", "app", "grant"),
    Noun("droidwire.audit", "audit", None),
    Noun("droidwire.manage", "apps", "app"),
    Noun("droidwire.manage", "files", "file"),
    Noun("droidwire.users", "app", "user"),
    Noun("droidwire.reserve", "app", "reserve"),
)


def missing_extra(*extras: str) -> str | None:
    """The first of ``extras`` whose modules are not all installed, or None."""
    for extra in extras:
        if any(importlib.util.find_spec(module) is None for module in EXTRAS[extra]):
            return extra
    return None


def _needs_extra(noun: Noun, extra: str) -> Any:
    """A stand-in for a noun whose extra is missing: it says what to install (exit 2)."""

    def stand_in(ctx: typer.Context) -> None:
        print(f"error: droidwire {noun.name} needs the {extra} extra: "
              f"pip install 'droidwire[{extra}]'", file=sys.stderr)
        raise typer.Exit(2)

    stub = typer.Typer(add_completion=False)
    stub.command(name=noun.name, help=f"{noun.summary} (needs the {extra} extra)",
                 context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                 add_help_option=False)(stand_in)
    return typer.main.get_command(stub)


def _load(noun: Noun) -> Any:
    """The noun's command, its module imported now; None for a module not in this tree."""
    extra = missing_extra(*noun.extras)
    if extra is not None:
        return _needs_extra(noun, extra)
    try:
        module = importlib.import_module(noun.module)
    except ModuleNotFoundError as exc:
        if exc.name == noun.module:
            return None  # a partial checkout still has a working CLI
        raise
    target = getattr(module, noun.attr)
    if noun.group is None:
        single = typer.Typer(add_completion=False)
        single.command(name=noun.name)(target)
        command = typer.main.get_command(single)
    else:
        command = typer.main.get_command(target)
    command.name = noun.name
    return command


class _Nouns(typer.core.TyperGroup):
    """The root group: commands registered here, then the nouns, each loaded on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return names + [n.name for n in NOUNS if n.name not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands:
            for noun in NOUNS:
                if noun.name == cmd_name:
                    command = _load(noun)
                    if command is None:
                        return None
                    self.add_command(command, cmd_name)
                    break
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    name="droidwire",
    cls=_Nouns,
    help="Run code on Android devices anywhere: bridges dial out to one controller.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Run code on Android devices anywhere: bridges dial out to one controller."""


@app.command()
def version() -> None:
    """Print droidwire's version."""
    from importlib.metadata import version as _version

    typer.echo(_version("droidwire"))


def command_tree() -> Any:
    """The root click command with every noun loaded (its ``commands`` complete): for tools
    and tests that walk the whole CLI. Running a command never needs it."""
    root: Any = typer.main.get_command(app)
    for name in root.list_commands(None):
        root.get_command(None, name)
    return root


def main() -> None:
    app(prog_name="droidwire")  # the same name in messages however it was started
