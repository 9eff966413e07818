"""Readers for the files under ``deploy/``: YAML, Dockerfiles, ``.env`` files, CLI lines.

Nothing here builds an image or talks to a cluster (none runs in CI); the checks are static,
but they read the project's own code where it has the answer (the CLI's options, the bridge's
config loader, its exit codes) so a deploy file cannot drift from what it deploys.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import require_or_skip

try:
    import yaml
except ImportError:  # pragma: no cover - reported by require_yaml
    yaml = None  # type: ignore[assignment]

__all__ = [
    "DEPLOY",
    "REPO",
    "Dockerfile",
    "cli_context",
    "dockerignored",
    "load_yaml",
    "load_yaml_all",
    "read_env_file",
]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _require_yaml() -> Any:
    require_or_skip(yaml is not None, "PyYAML is not installed (pip install pyyaml)")
    return yaml


def load_yaml(path: Path) -> Any:
    return _require_yaml().safe_load(path.read_text(encoding="utf-8"))


def load_yaml_all(path: Path) -> list[Any]:
    return [d for d in _require_yaml().safe_load_all(path.read_text(encoding="utf-8")) if d]


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (docker ``--env-file`` / systemd ``EnvironmentFile=``); # comments."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
            raise ValueError(f"{path}:{number}: not KEY=VALUE: {line!r}")
        values[key] = value
    return values


def cli_context(argv: list[str]) -> Any:
    """Parse ``droidwire ARGV…`` with the real CLI (no command runs); a bad flag raises.

    Returns the click context (typer vendors its own click: duck-typed here).
    """
    from droidwire import command_tree

    command: Any = command_tree()
    args = list(argv)
    while hasattr(command, "commands"):
        if getattr(command, "invoke_without_command", False) and (
                not args or args[0].startswith("-")):
            break  # a group that runs itself (`droidwire bridge --controller …`)
        assert args, f"{argv}: no command after the group {command.name!r}"
        name = args.pop(0)
        assert name in command.commands, f"{argv}: unknown command {name!r}"
        command = command.commands[name]
    return command.make_context(command.name or "droidwire", args)


# -- Dockerfiles --------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str
    stage: int  # -1 before the first FROM

    @property
    def exec_form(self) -> list[str]:
        """The JSON array form (``CMD ["a", "b"]``), or a ValueError."""
        value = json.loads(self.args)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(f"{self.keyword} is not in exec form: {self.args}")
        return value

    @property
    def flags(self) -> dict[str, str]:
        return dict(
            w[2:].partition("=")[::2] for w in self.args.split() if w.startswith("--")
        )

    @property
    def words(self) -> list[str]:
        return [w for w in self.args.split() if not w.startswith("--")]


@dataclass
class Dockerfile:
    path: Path
    instructions: list[Instruction] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Dockerfile:
        logical: list[str] = []
        pending = ""
        for raw in path.read_text(encoding="utf-8").splitlines():
            stripped = raw.strip()
            if stripped.startswith("#") or (not stripped and not pending):
                continue  # comments go, even inside a continuation (Docker does the same)
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            logical.append(pending + stripped)
            pending = ""
        assert not pending, f"{path}: the last instruction ends with a line continuation"
        out = cls(path)
        stage = -1
        for line in logical:
            keyword, _, args = line.partition(" ")
            keyword = keyword.upper()
            if keyword == "FROM":
                stage += 1
            out.instructions.append(Instruction(keyword, args.strip(), stage))
        return out

    def all(self, keyword: str, *, stage: int | None = None) -> list[Instruction]:
        return [
            i for i in self.instructions
            if i.keyword == keyword and (stage is None or i.stage == stage)
        ]

    @property
    def last_stage(self) -> int:
        return max(i.stage for i in self.instructions)

    def global_args(self) -> dict[str, str]:
        """``ARG NAME=default`` declared before the first FROM."""
        return dict(i.args.partition("=")[::2] for i in self.all("ARG", stage=-1))

    def env(self, stage: int) -> dict[str, str]:
        values: dict[str, str] = {}
        for i in self.all("ENV", stage=stage):
            for word in shlex.split(i.args):
                key, _, value = word.partition("=")
                values[key] = value
        return values


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


def dockerignored(path: str, ignore_file: Path) -> bool:
    """Whether ``.dockerignore`` rules keep ``path`` (relative to the context) out.

    The last matching rule wins; ``!`` re-includes; a rule matching a folder covers what is in
    it (Docker's semantics, enough of them for the rules we write).
    """
    rules = [
        line.strip() for line in ignore_file.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for rule in rules:
        negate = rule.startswith("!")
        regex = _ignore_regex(rule.lstrip("!").strip("/"))
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negate
    return excluded
