"""The repository stands on its own: code and docs cite ``docs/`` pages, never documents a
reader of this repository does not have (a style guide, a design draft, the project it grew
from, files outside the repository). Say what a rule is, or link the docs page that says it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Written in pieces so this file does not match itself.
_FORBIDDEN = re.compile(
    "|".join(
        [
            r"\bSTYLE" + r"\.md\b",
            r"\bDESIGN" + r"\.md\b",
            r"\b(?:DESIGN|STYLE)" + r" §",
            r"(?i:\bthe " + r"seed(?:'s)?\b)",
            r"(?i:\bseed" + r"'s\b)",
            r"^\s*(?:#\s*)?Seed" + r":",
            r"/work/" + r"shared\b",
            r"\bADB_SIM" + r"_SPEC\b",
        ]
    ),
    re.MULTILINE,
)
_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini", ".sh", ".service",
             ".env", ".example", ".kt", ".kts", ".json", ".html", ".j2", ".conf"}
_NAMES = {"Makefile", "Dockerfile", ".dockerignore", ".gitignore"}


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    out = []
    for name in listed:
        path = ROOT / name
        if not name or not path.is_file():
            continue
        if path.suffix in _SUFFIXES or path.name in _NAMES or path.name.startswith("Dockerfile"):
            out.append(path)
    return out


def test_the_pattern_catches_each_form() -> None:
    for text in ("see STYLE" ".md §5", "(DESIGN" ".md §9)", "scripts (DESIGN" " §9)",
                 "the " "se" "ed's fields", "The " "se" "ed passed", "Se" "ed" ": ``a``",
                 "/work/" "shared/x.md", "ADB_SIM" "_SPEC.md"):
        assert _FORBIDDEN.search(text), text
    for text in ("docs/design.md §5", "random.seed(7)", "a seeded generator",
                 "kwargs.setdefault('seed', 7)", "the same seed gives"):
        assert not _FORBIDDEN.search(text), text


def test_no_file_cites_documents_outside_the_repository() -> None:
    files = _tracked_text_files()
    assert len(files) > 100  # the listing works
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _FORBIDDEN.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert not found, "cite docs/ pages or state the rule instead:\n" + "\n".join(found)
