"""Find the demo Gradle project template (``gradle-workspace/``).

From a source checkout (editable install) it is the repository's ``gradle-workspace/``; from a
wheel it is the package data ``device_bridge/_gradle_workspace`` (pyproject force-includes it).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["TemplateNotFound", "template_dir"]

_MARKER = Path("app") / "build.gradle.kts"


class TemplateNotFound(FileNotFoundError):
    """Neither the packaged nor the checkout copy of the demo project exists."""


def template_dir() -> Path:
    """The directory holding the demo project; raises :class:`TemplateNotFound` if absent."""
    here = Path(__file__).resolve().parent
    candidates = (here / "_gradle_workspace", here.parent / "gradle-workspace")
    for candidate in candidates:
        if (candidate / _MARKER).is_file():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise TemplateNotFound(f"demo Gradle project not found (tried {tried})")
