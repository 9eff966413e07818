"""The fixer's source index, read from the build bridge through ``source.lookup``.

The project's sources live where it is built, not on the controller. Before each fix round
the executor asks the build bridge for the declarations the failing test names
(:func:`names_to_look_up`) and hands the fixer a :class:`RemoteSourceIndex` holding the
answers: the same three queries as :class:`fixer.SourceCodeIndex` (``lookup``, ``find_class``,
``methods_of``), answered from memory, so the fixer (which runs in a worker thread) never
waits on the network. Classes are inferred from the owners of the methods found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fixer.errors import parse_errors
from fixer.source_index import ClassRecord, MethodRecord

__all__ = ["MAX_NAMES", "RemoteSourceIndex", "names_to_look_up"]

MAX_NAMES = 200  # protocol.methods.SourceLookupParams.names
_IDENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*(?:\(|\{|::)")
_TYPE = re.compile(r"\b([A-Z][A-Za-z0-9_]*)\b")
_KEYWORDS = frozenset(
    "if when for while try catch return fun val var class object package import super this "
    "throw listOf mapOf setOf arrayOf println repeat run let apply also use with".split()
)


def names_to_look_up(test_code: str, error_output: str) -> list[str]:
    """Unresolved symbols first, then what the test calls and the types it names."""
    names: list[str] = []

    def add(name: str | None) -> None:
        if name and name not in names and name not in _KEYWORDS and len(name) <= 256:
            names.append(name)

    for error in parse_errors(error_output or "").compile_errors:
        add(error.symbol)
    body = "\n".join(
        line for line in test_code.splitlines() if not line.lstrip().startswith(("import ", "package "))
    )
    for match in _IDENT.finditer(body):
        add(match.group(1))
    for match in _TYPE.finditer(body):
        add(match.group(1))
    return names[:MAX_NAMES]


def _split_owner(owner: str | None) -> tuple[str | None, str | None]:
    """(package, class as written) of an owner that may be qualified."""
    if not owner:
        return None, None
    parts = owner.split(".")
    for i, part in enumerate(parts):
        if part[:1].isupper():
            return (".".join(parts[:i]) or None), ".".join(parts[i:])
    return None, owner


class RemoteSourceIndex:
    """What ``source.lookup`` answered, shaped like :class:`fixer.SourceCodeIndex`."""

    def __init__(self, records: Iterable[dict[str, Any]] = (), *, package: str | None = None):
        self.default_package = package
        self._methods: list[MethodRecord] = []
        self._seen: set[tuple[str, str | None, str | None, int | None]] = set()
        self.add(records)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for raw in records:
            name = raw.get("name")
            if not isinstance(name, str) or not name:
                continue
            key = (name, raw.get("owner"), raw.get("file"), raw.get("line"))
            if key in self._seen:
                continue
            self._seen.add(key)
            package, owner = _split_owner(raw.get("owner"))
            text = raw.get("text") or ""
            line = raw.get("line")
            start = line if isinstance(line, int) else 0
            file = str(raw.get("file") or "")
            self._methods.append(
                MethodRecord(
                    name=name,
                    owner=owner,
                    package=package or self.default_package,
                    file=file,
                    start_line=start,
                    end_line=start + max(text.count("\n"), 0),
                    signature=str(raw.get("signature") or name),
                    body=text,
                    language="java" if file.endswith(".java") else "kotlin",
                )
            )

    def __len__(self) -> int:
        return len(self._methods)

    def lookup(self, name: str) -> list[MethodRecord]:
        simple = name.rsplit(".", 1)[-1]
        return [m for m in self._methods if m.name == simple]

    def find_class(self, name: str) -> list[ClassRecord]:
        out: dict[str, ClassRecord] = {}
        for m in self._methods:
            if m.owner is None:
                continue
            if m.owner == name or m.owner.rsplit(".", 1)[-1] == name:
                record = ClassRecord(
                    name=m.owner,
                    package=m.package,
                    file=m.file,
                    start_line=0,
                    end_line=0,
                    kind="class",
                    language=m.language,
                )
                out.setdefault(record.qualified_name, record)
        return list(out.values())

    def methods_of(self, class_name: str) -> list[MethodRecord]:
        return [
            m for m in self._methods if class_name in (m.qualified_owner, m.owner)
        ]
