"""An index of a project's Kotlin and Java sources: packages, imports, classes, methods.

Standalone on purpose: this module imports nothing else from ``fixer`` (docs/design.md §2), so the
bridge can use it for ``source.lookup`` — method bodies are looked up where the project lives
and only the bodies asked for travel — and the simulated toolchain uses it to read the demo
app's symbols.

Parsing is tree-sitter (``tree_sitter_kotlin`` and ``tree_sitter_java`` grammars), never
regexes. tree-sitter always returns a tree: code that does not parse yields ``ERROR`` nodes,
and the walker still records the declarations it finds inside them, so a half-written file
contributes what it can. Unreadable files are skipped, never raised.

Refresh is incremental: ``refresh()`` stats every source file and re-parses only those whose
``(mtime_ns, size)`` changed, dropping deleted ones. Queries do not touch the disk unless the
index was built with ``auto_refresh=True``. All methods are thread-safe.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import tree_sitter_java
import tree_sitter_kotlin
from tree_sitter import Language, Node, Parser

__all__ = [
    "ClassRecord",
    "FileRecord",
    "MethodRecord",
    "RefreshStats",
    "SourceCodeIndex",
    "parse_source",
]

log = logging.getLogger("droidwire.fixer.source_index")

Lang = Literal["kotlin", "java"]

_EXTENSIONS: dict[str, Lang] = {".kt": "kotlin", ".kts": "kotlin", ".java": "java"}
# Directories that never hold the project's own sources.
DEFAULT_EXCLUDED_DIRS = frozenset(
    {"build", ".gradle", ".git", ".idea", "node_modules", ".venv", "__pycache__", ".cxx"}
)
DEFAULT_MAX_FILE_BYTES = 2 * 1024 * 1024

_LANGUAGES: dict[Lang, Language] = {
    "kotlin": Language(tree_sitter_kotlin.language()),
    "java": Language(tree_sitter_java.language()),
}
_parsers = threading.local()  # a tree-sitter Parser is not shared between threads


def _parser(lang: Lang) -> Parser:
    cache: dict[str, Parser] | None = getattr(_parsers, "cache", None)
    if cache is None:
        cache = {}
        _parsers.cache = cache
    parser = cache.get(lang)
    if parser is None:
        parser = cache[lang] = Parser(_LANGUAGES[lang])
    return parser


@dataclass(frozen=True, slots=True)
class MethodRecord:
    """A function or method. Lines are 1-based and inclusive.

    ``owner`` is the enclosing class as written in source (``Outer.Inner``; a companion
    object's members belong to the outer class), ``None`` for a top-level function.
    ``static`` is true when it is callable on the class itself (Java ``static``, Kotlin
    ``object`` and ``companion object`` members, top-level functions), so it can be imported.
    ``body`` is the whole declaration's text, annotations and signature included.
    """

    name: str
    owner: str | None
    package: str | None
    file: str
    start_line: int
    end_line: int
    signature: str
    body: str
    language: Lang
    kind: Literal["function", "method", "constructor"] = "method"
    static: bool = False
    import_path: str | None = None  # what ``import`` makes it callable by bare name, if any

    @property
    def qualified_owner(self) -> str | None:
        if self.owner is None:
            return None
        return f"{self.package}.{self.owner}" if self.package else self.owner

    @property
    def qualified_name(self) -> str:
        base = self.qualified_owner or self.package
        return f"{base}.{self.name}" if base else self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ClassRecord:
    """A class, interface, enum, record, ``object`` or companion object."""

    name: str  # as written in source, nested with dots: ``Outer.Inner``
    package: str | None
    file: str
    start_line: int
    end_line: int
    kind: str  # class | interface | enum | record | object | companion | annotation
    language: Lang

    @property
    def simple_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def qualified_name(self) -> str:
        return f"{self.package}.{self.name}" if self.package else self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class FileRecord:
    """What one source file declares."""

    path: str  # relative to the index root, POSIX separators
    language: Lang
    package: str | None = None
    imports: list[str] = field(default_factory=list)
    classes: list[ClassRecord] = field(default_factory=list)
    methods: list[MethodRecord] = field(default_factory=list)
    has_errors: bool = False
    mtime_ns: int = 0
    size: int = 0


@dataclass(frozen=True, slots=True)
class RefreshStats:
    added: int = 0
    changed: int = 0
    removed: int = 0

    @property
    def total(self) -> int:
        return self.added + self.changed + self.removed


# --------------------------------------------------------------------------------------
# Extraction


def _text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", errors="replace")


def _squash(text: str) -> str:
    return " ".join(text.split())


def _signature(node: Node, body: Node | None, source: bytes) -> str:
    end = body.start_byte if body is not None else node.end_byte
    return _squash(source[node.start_byte : end].decode("utf-8", errors="replace")).rstrip(" =")


# One frame per enclosing declaration: (name in source, members callable statically,
# segment in an import path). A companion object is ("", True, "Companion"): its members are
# called as ``Outer.member`` but imported as ``pkg.Outer.Companion.member``.
_Owners = tuple[tuple[str, bool, str], ...]


class _Walker:
    """Collects declarations from one parse tree, tolerating ``ERROR`` nodes."""

    def __init__(self, record: FileRecord, source: bytes):
        self.record = record
        self.source = source

    def walk(self, node: Node, owners: _Owners) -> None:
        handler = getattr(self, f"_on_{node.type}", None)
        if handler is not None:
            handler(node, owners)
            return
        if node.type == "ERROR":
            self._on_error(node, owners)
            return
        for child in node.children:
            self.walk(child, owners)

    def _owner_name(self, owners: _Owners) -> str | None:
        return ".".join(name for name, _, _ in owners if name) or None

    def _add_class(self, node: Node, name: str, kind: str, owners: _Owners) -> str:
        full = ".".join([*(n for n, _, _ in owners if n), name])
        self.record.classes.append(
            ClassRecord(
                name=full,
                package=self.record.package,
                file=self.record.path,
                start_line=node.start_point[0] + 1,
                end_line=node.end_point[0] + 1,
                kind=kind,
                language=self.record.language,
            )
        )
        return full

    def _add_method(
        self,
        node: Node,
        name: str,
        body: Node | None,
        owners: _Owners,
        *,
        static: bool,
        kind: Literal["function", "method", "constructor"],
    ) -> None:
        owner = self._owner_name(owners)
        package = self.record.package
        import_path: str | None = None
        if static and kind != "constructor":
            # Kotlin imports top-level functions, object members and (through ``Companion``)
            # companion members by name; Java static members by ``import static``.
            parts = [p for p in (package, *(seg for _, _, seg in owners)) if p]
            import_path = ".".join([*parts, name])
        self.record.methods.append(
            MethodRecord(
                name=name,
                owner=owner,
                package=package,
                file=self.record.path,
                start_line=node.start_point[0] + 1,
                end_line=node.end_point[0] + 1,
                signature=_signature(node, body, self.source),
                body=_text(node),
                language=self.record.language,
                kind=kind,
                static=static,
                import_path=import_path,
            )
        )

    # --- recovery inside ERROR nodes: ``class X {`` seen as loose tokens
    def _on_error(self, node: Node, owners: _Owners) -> None:
        current = owners
        children = node.children
        for i, child in enumerate(children):
            if child.type in ("class", "interface", "object") and i + 1 < len(children):
                nxt = children[i + 1]
                if nxt.type in ("identifier", "type_identifier", "simple_identifier"):
                    kind = "object" if child.type == "object" else child.type
                    name = self._add_class(node, _text(nxt), kind, owners)
                    simple = name.rsplit(".", 1)[-1]
                    current = (*owners, (simple, kind == "object", simple))
                    continue
            self.walk(child, current)


class _KotlinWalker(_Walker):
    def _on_package_header(self, node: Node, owners: _Owners) -> None:
        for child in node.children:
            if child.type in ("qualified_identifier", "identifier"):
                self.record.package = _text(child)

    def _on_import(self, node: Node, owners: _Owners) -> None:
        parts: list[str] = []
        for child in node.children:
            if child.type in ("qualified_identifier", "identifier") and not parts:
                parts.append(_text(child))
            elif child.type == "*":
                parts.append(".*")
            elif child.type == "as":
                break
        if parts:
            self.record.imports.append("".join(parts))

    _on_import_header = _on_import

    def _on_class_declaration(self, node: Node, owners: _Owners) -> None:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return
        kind = "class"
        for child in node.children:
            if child.type == "interface":
                kind = "interface"
            elif child.type == "modifiers" and "enum" in _text(child).split():
                kind = "enum"
            elif child.type == "modifiers" and "annotation" in _text(child).split():
                kind = "annotation"
        full = self._add_class(node, _text(name_node), kind, owners)
        simple = full.rsplit(".", 1)[-1]
        inner = (*owners, (simple, False, simple))
        for child in node.children:
            if child.type in ("class_body", "enum_class_body"):
                self.walk(child, inner)

    def _on_object_declaration(self, node: Node, owners: _Owners) -> None:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return
        full = self._add_class(node, _text(name_node), "object", owners)
        simple = full.rsplit(".", 1)[-1]
        inner = (*owners, (simple, True, simple))
        for child in node.children:
            if child.type == "class_body":
                self.walk(child, inner)

    def _on_companion_object(self, node: Node, owners: _Owners) -> None:
        name_node = node.child_by_field_name("name")
        name = _text(name_node) if name_node is not None else "Companion"
        self._add_class(node, name, "companion", owners)
        inner = (*owners, ("", True, name))
        for child in node.children:
            if child.type == "class_body":
                self.walk(child, inner)

    def _on_function_declaration(self, node: Node, owners: _Owners) -> None:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            name_node = next(
                (c for c in node.children if c.type in ("identifier", "simple_identifier")), None
            )
        if name_node is None:
            return
        body = next((c for c in node.children if c.type == "function_body"), None)
        static = not owners or owners[-1][1]
        kind: Literal["function", "method"] = "method" if owners else "function"
        self._add_method(node, _text(name_node), body, owners, static=static, kind=kind)
        # Local classes and functions inside bodies are not part of the API: stop here.


class _JavaWalker(_Walker):
    _CLASS_KINDS: ClassVar[dict[str, str]] = {
        "class_declaration": "class",
        "interface_declaration": "interface",
        "enum_declaration": "enum",
        "record_declaration": "record",
        "annotation_type_declaration": "annotation",
    }

    def walk(self, node: Node, owners: _Owners) -> None:
        kind = self._CLASS_KINDS.get(node.type)
        if kind is not None:
            name_node = node.child_by_field_name("name")
            if name_node is None:
                return
            full = self._add_class(node, _text(name_node), kind, owners)
            body = node.child_by_field_name("body")
            if body is not None:
                simple = full.rsplit(".", 1)[-1]
                self.walk(body, (*owners, (simple, False, simple)))
            return
        super().walk(node, owners)

    def _on_package_declaration(self, node: Node, owners: _Owners) -> None:
        for child in node.children:
            if child.type in ("scoped_identifier", "identifier"):
                self.record.package = _text(child)

    def _on_import_declaration(self, node: Node, owners: _Owners) -> None:
        parts: list[str] = []
        for child in node.children:
            if child.type in ("scoped_identifier", "identifier"):
                parts.append(_text(child))
            elif child.type == "asterisk":
                parts.append(".*")
        if parts:
            self.record.imports.append("".join(parts))

    def _method(self, node: Node, owners: _Owners, kind: Literal["method", "constructor"]) -> None:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return
        modifiers = next((c for c in node.children if c.type == "modifiers"), None)
        static = modifiers is not None and "static" in _text(modifiers).split()
        self._add_method(
            node,
            _text(name_node),
            node.child_by_field_name("body"),
            owners,
            static=static,
            kind=kind,
        )

    def _on_method_declaration(self, node: Node, owners: _Owners) -> None:
        self._method(node, owners, "method")

    def _on_constructor_declaration(self, node: Node, owners: _Owners) -> None:
        self._method(node, owners, "constructor")


def parse_source(text: str | bytes, language: Lang, path: str = "<memory>") -> FileRecord:
    """Parse one file's text into a :class:`FileRecord` (never raises on bad code)."""
    source = text.encode("utf-8", errors="replace") if isinstance(text, str) else text
    record = FileRecord(path=path, language=language)
    tree = _parser(language).parse(source)
    record.has_errors = tree.root_node.has_error
    walker: _Walker = (
        _KotlinWalker(record, source) if language == "kotlin" else _JavaWalker(record, source)
    )
    # The package header comes first in valid code, but walk it before anything else anyway
    # so records made inside ERROR nodes still carry it.
    for child in tree.root_node.children:
        if child.type in ("package_header", "package_declaration"):
            walker.walk(child, ())
    walker.walk(tree.root_node, ())
    return record


def language_of(path: str | os.PathLike[str]) -> Lang | None:
    return _EXTENSIONS.get(os.path.splitext(str(path))[1].lower())


# --------------------------------------------------------------------------------------
# The index


class SourceCodeIndex:
    """Kotlin and Java declarations under ``root``, refreshed incrementally.

    >>> index = SourceCodeIndex("gradle-workspace/app/src/main")   # doctest: +SKIP
    >>> [m.signature for m in index.lookup("loadConfig")]          # doctest: +SKIP
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        # Scope
        excluded_dirs: Iterable[str] = DEFAULT_EXCLUDED_DIRS,
        # Limits
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_files: int = 20_000,
        # Freshness
        auto_refresh: bool = False,
    ):
        self.root = Path(root)
        if not self.root.is_dir():
            raise NotADirectoryError(f"not a directory: {self.root}")
        self.excluded_dirs = frozenset(excluded_dirs)
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self.auto_refresh = auto_refresh
        self._files: dict[str, FileRecord] = {}
        self._by_method: dict[str, list[MethodRecord]] = {}
        self._by_class: dict[str, list[ClassRecord]] = {}
        self._lock = threading.RLock()
        self.refresh()

    # --- freshness
    def _scan(self) -> Iterator[tuple[str, os.stat_result]]:
        count = 0
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in self.excluded_dirs)
            for filename in sorted(filenames):
                if language_of(filename) is None:
                    continue
                full = os.path.join(dirpath, filename)
                try:
                    st = os.stat(full, follow_symlinks=False)
                except OSError:
                    continue
                if not os.path.isfile(full) or os.path.islink(full):
                    continue
                count += 1
                if count > self.max_files:
                    log.warning(
                        "source index %s: more than %d files, rest ignored",
                        self.root,
                        self.max_files,
                    )
                    return
                yield Path(os.path.relpath(full, self.root)).as_posix(), st

    def refresh(self) -> RefreshStats:
        """Re-parse files whose mtime or size changed, drop deleted ones."""
        with self._lock:
            added = changed = 0
            seen: set[str] = set()
            for rel, st in self._scan():
                seen.add(rel)
                old = self._files.get(rel)
                if old is not None and old.mtime_ns == st.st_mtime_ns and old.size == st.st_size:
                    continue
                record = self._load(rel, st)
                if record is None:
                    self._files.pop(rel, None)
                    continue
                self._files[rel] = record
                if old is None:
                    added += 1
                else:
                    changed += 1
            removed = [rel for rel in self._files if rel not in seen]
            for rel in removed:
                del self._files[rel]
            stats = RefreshStats(added=added, changed=changed, removed=len(removed))
            if stats.total:
                self._rebuild()
            return stats

    def _load(self, rel: str, st: os.stat_result) -> FileRecord | None:
        language = language_of(rel)
        if language is None or st.st_size > self.max_file_bytes:
            return None
        try:
            data = (self.root / rel).read_bytes()
        except OSError as exc:
            log.debug("source index: cannot read %s: %s", rel, exc)
            return None
        record = parse_source(data, language, rel)
        record.mtime_ns = st.st_mtime_ns
        record.size = st.st_size
        return record

    def _rebuild(self) -> None:
        by_method: dict[str, list[MethodRecord]] = {}
        by_class: dict[str, list[ClassRecord]] = {}
        for rel in sorted(self._files):
            record = self._files[rel]
            for m in record.methods:
                by_method.setdefault(m.name, []).append(m)
            for c in record.classes:
                by_class.setdefault(c.simple_name, []).append(c)
        self._by_method = by_method
        self._by_class = by_class

    def _maybe_refresh(self) -> None:
        if self.auto_refresh:
            self.refresh()

    # --- queries
    def lookup(self, name: str) -> list[MethodRecord]:
        """Methods named ``name``; ``Owner.name`` or ``pkg.Owner.name`` narrow by owner."""
        self._maybe_refresh()
        name = name.strip().rstrip("()")
        qualifier, _, simple = name.rpartition(".")
        with self._lock:
            found = list(self._by_method.get(simple, ()))
        if qualifier:
            found = [
                m
                for m in found
                if (m.qualified_owner or m.package or "") == qualifier
                or m.owner == qualifier
                or (m.qualified_owner or "").endswith("." + qualifier)
                or (m.owner is None and m.package == qualifier)
            ]
        return found

    def find_class(self, name: str) -> list[ClassRecord]:
        """Classes whose simple or qualified name is ``name``."""
        self._maybe_refresh()
        simple = name.rsplit(".", 1)[-1]
        with self._lock:
            found = list(self._by_class.get(simple, ()))
        if "." in name:
            found = [
                c
                for c in found
                if c.qualified_name == name
                or c.name == name
                or c.qualified_name.endswith("." + name)
            ]
        return found

    def methods_of(self, class_name: str) -> list[MethodRecord]:
        """Every method declared directly in a class (simple or qualified name)."""
        self._maybe_refresh()
        with self._lock:
            every = [m for ms in self._by_method.values() for m in ms]
        return [
            m
            for m in every
            if m.owner is not None
            and (
                m.owner == class_name
                or m.qualified_owner == class_name
                or m.owner.endswith("." + class_name)
            )
        ]

    @property
    def files(self) -> list[FileRecord]:
        self._maybe_refresh()
        with self._lock:
            return [self._files[k] for k in sorted(self._files)]

    @property
    def classes(self) -> list[ClassRecord]:
        return [c for f in self.files for c in f.classes]

    @property
    def methods(self) -> list[MethodRecord]:
        return [m for f in self.files for m in f.methods]

    @property
    def packages(self) -> list[str]:
        return sorted({f.package for f in self.files if f.package})

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)

    def __repr__(self) -> str:
        return f"SourceCodeIndex({str(self.root)!r}, files={len(self)})"
