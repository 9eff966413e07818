"""The projects a build bridge serves: name → directory, confined to configured roots.

The bridge owner configures projects (``{"name": "/path"}``) and the roots they must live
under. A project whose real path (symlinks resolved) lies outside every root is refused when
the configuration is loaded, not when the first build comes. When nothing is configured the
bridge serves one project, ``demo``: the demo workspace shipped with droidwire
(``device_bridge.workspace_template.template_dir()``); it is also served next to configured
projects unless one of them takes its name.

Callers name a project (``project_dir`` of docs/design.md §5). A name is looked up as is; a value
that looks like a path is accepted only when it is exactly a configured project's directory.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import ErrorCode, RpcError

from .fsutil import is_within

__all__ = ["DEMO_PROJECT", "Project", "ProjectRegistry", "demo_template_dir"]

log = logging.getLogger("droidwire.bridge.workspace")

DEMO_PROJECT = "demo"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


@dataclass(frozen=True)
class Project:
    """A buildable project: its real path, the app module, and whether it is the demo."""

    name: str
    path: Path  # resolved (real) path
    module: str = "app"
    demo: bool = False

    @property
    def identity(self) -> str:
        """What a cache key or a snapshot is tied to: the name and the real path."""
        return f"{self.name}@{self.path}"


def demo_template_dir() -> Path | None:
    """The shipped demo workspace, or None when this installation has none."""
    try:
        from device_bridge.workspace_template import template_dir
    except ImportError:
        return None
    try:
        path = Path(template_dir()).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        log.warning("demo workspace unavailable: %s", exc)
        return None
    return path if path.is_dir() else None


def _config_error(message: str, rule: str, **data: object) -> RpcError:
    return RpcError(ErrorCode.FORBIDDEN, message, {"rule": rule, **data})


class ProjectRegistry:
    """Configured projects by name, and the default one."""

    def __init__(self, projects: Mapping[str, Project], *, default: str | None) -> None:
        if default is not None and default not in projects:
            raise RpcError(
                ErrorCode.BAD_REQUEST,
                f"default project {default!r} is not configured",
                {"rule": "unknown_default"},
            )
        self._projects = dict(projects)
        self.default = default

    @classmethod
    def from_config(
        cls,
        projects: Mapping[str, str | os.PathLike[str] | Mapping[str, object]] | None = None,
        *,
        roots: Sequence[str | os.PathLike[str]] = (),
        default: str | None = None,
        base: Path | None = None,
        demo_dir: Path | None = None,
        include_demo: bool = True,
    ) -> ProjectRegistry:
        """Load and check a configuration; every refusal is an ``RpcError`` naming the rule.

        ``projects`` values are a path or ``{"path": …, "module": "app"}``; relative paths are
        taken from ``base`` (the config file's directory). ``demo_dir`` overrides the shipped
        demo workspace (tests, or a bridge that points at a checkout).
        """
        base = (base or Path.cwd()).resolve()
        real_roots = [(base / Path(r).expanduser()).resolve() for r in roots]
        if demo_dir is None and include_demo:
            demo_dir = demo_template_dir()
        demo_real = demo_dir.resolve() if demo_dir is not None else None

        out: dict[str, Project] = {}
        for name, spec in (projects or {}).items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise RpcError(
                    ErrorCode.BAD_REQUEST,
                    f"project name {name!r} must match {_NAME.pattern[:-2]}",
                    {"rule": "project_name"},
                )
            module = "app"
            if isinstance(spec, Mapping):
                raw_path = spec.get("path")
                module = str(spec.get("module", "app"))
            else:
                raw_path = spec
            if not isinstance(raw_path, str | os.PathLike):
                raise RpcError(
                    ErrorCode.BAD_REQUEST,
                    f"project {name}: path missing",
                    {"rule": "project_path"},
                )
            if not _NAME.match(module) or module in (".", ".."):
                raise RpcError(
                    ErrorCode.BAD_REQUEST,
                    f"project {name}: module {module!r} is not a plain directory name",
                    {"rule": "project_module"},
                )
            real = (base / Path(raw_path).expanduser()).resolve()
            if not any(is_within(real, root) for root in real_roots):
                raise _config_error(
                    f"project {name}: {real} lies outside every configured root"
                    f" ({', '.join(map(str, real_roots)) or 'none configured'})",
                    "project_outside_roots",
                    project=name,
                )
            if not real.is_dir():
                raise RpcError(
                    ErrorCode.NOT_FOUND,
                    f"project {name}: {real} is not a directory",
                    {"rule": "project_path"},
                )
            out[name] = Project(name, real, module, demo=real == demo_real)

        if include_demo and demo_real is not None and DEMO_PROJECT not in out:
            out[DEMO_PROJECT] = Project(DEMO_PROJECT, demo_real, "app", demo=True)
        if default is None and out:
            default = next(iter(out))
        return cls(out, default=default)

    @property
    def names(self) -> list[str]:
        return list(self._projects)

    def __iter__(self) -> Iterator[Project]:
        return iter(self._projects.values())

    def get(self, ref: str | None) -> Project:
        """The project that ``ref`` (a name, a configured directory, or None) designates."""
        if ref is None or ref == "":
            if self.default is None:
                raise RpcError(
                    ErrorCode.UNAVAILABLE,
                    "this bridge serves no project (none configured and no demo workspace)",
                    {"reason": "no_project"},
                )
            return self._projects[self.default]
        if not isinstance(ref, str) or len(ref) > 4096 or "\x00" in ref:
            raise RpcError(ErrorCode.BAD_REQUEST, "project_dir must be a short string")
        if ref in self._projects:
            return self._projects[ref]
        if "/" in ref or "\\" in ref or ref.startswith((".", "~")):
            if not os.path.isabs(ref):
                raise RpcError(
                    ErrorCode.FORBIDDEN,
                    f"refused: project_dir {ref!r} is a relative path; name a configured project",
                    {"rule": "path_escape", "projects": self.names},
                )
            real = Path(os.path.realpath(ref))
            for project in self._projects.values():
                if project.path == real:
                    return project
            raise RpcError(
                ErrorCode.FORBIDDEN,
                f"refused: {ref} is not a project this bridge serves",
                {"rule": "project_not_served", "projects": self.names},
            )
        raise RpcError(
            ErrorCode.NOT_FOUND,
            f"unknown project {ref!r}; this bridge serves: {', '.join(self.names) or 'none'}",
            {"projects": self.names},
        )
