"""tree-sitter Kotlin plumbing for the simulated compiler.

The tree-sitter Kotlin grammar is good but not kotlinc: some valid code (an explicit type
argument on a call, a one-line ``companion object { … }`` followed by an annotated member)
comes back with ``ERROR`` nodes, and one such node can swallow a whole class. So:

* real syntax errors are decided by our own small lexer (:func:`syntax_problems`): unbalanced
  brackets and unterminated strings or comments — what kotlinc reports as ``Syntax error``;
* when the whole file does not parse cleanly, :func:`parse_file` also parses each class member
  on its own, in a copy of the source where everything else is blanked out (newlines kept),
  so positions stay exact and one odd member cannot hide the others.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import tree_sitter_kotlin
from tree_sitter import Language, Node, Parser, Tree

__all__ = [
    "KotlinFile",
    "Problem",
    "after_eq",
    "col_of",
    "line_of",
    "parse_file",
    "syntax_problems",
    "text",
    "walk",
]

_LANGUAGE = Language(tree_sitter_kotlin.language())
_local = threading.local()


def _parser() -> Parser:
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = Parser(_LANGUAGE)
    return parser


def text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", errors="replace")


def walk(node: Node) -> Iterator[Node]:
    """Pre-order, in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def after_eq(node: Node) -> Node | None:
    """The first named child after ``=`` (a property's initializer, an assignment's value)."""
    seen = False
    for c in node.children:
        if seen and c.is_named:
            return c
        if c.type == "=":
            seen = True
    return None


def line_of(node: Node) -> int:
    return node.start_point[0] + 1


@dataclass(frozen=True)
class Problem:
    line: int
    column: int
    message: str


@dataclass
class KotlinFile:
    """One test source: its text, the full tree, and (when that has errors) per-member trees."""

    source: str
    data: bytes
    tree: Tree
    trees: list[Tree]  # the trees to analyse: [tree] when it parsed cleanly

    @property
    def lines(self) -> list[bytes]:
        return self.data.split(b"\n")


def col_of(file: KotlinFile, node: Node) -> int:
    """1-based column in characters (kotlinc counts characters, tree-sitter bytes)."""
    row, col = node.start_point
    line = file.lines[row] if row < len(file.lines) else b""
    return len(line[:col].decode("utf-8", errors="replace")) + 1


def parse_file(source: str) -> KotlinFile:
    data = source.encode("utf-8")
    tree = _parser().parse(data)
    trees = [tree]
    if tree.root_node.has_error:
        trees = [tree, *(_parser().parse(masked) for masked in _member_masks(source))]
    return KotlinFile(source=source, data=data, tree=tree, trees=trees)


# --------------------------------------------------------------------------------------
# A small lexer: strings, templates, comments and brackets, nothing else.

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _scan(source: str) -> Iterator[tuple[str, int]]:
    """Yield ``(kind, offset)`` for brackets in code ("(", "}", …), plus "EOF-string" and
    "EOF-comment" when the text ends inside one. Template expressions (``${…}``) are code;
    their opening ``${`` is reported as "${" and their closing brace as "}".
    """
    i = 0
    n = len(source)
    # frames: ["code", brace depth] | ['"'] | ['"""']; a code frame above a string frame is
    # a template expression, closed by the `}` that brings its depth below zero.
    frames: list[list[Any]] = [["code", 0]]
    while i < n:
        frame = frames[-1]
        ch = source[i]
        if frame[0] == "code":
            if source.startswith("//", i):
                j = source.find("\n", i)
                i = n if j < 0 else j
                continue
            if source.startswith("/*", i):
                j = source.find("*/", i + 2)
                if j < 0:
                    yield "EOF-comment", i
                    return
                i = j + 2
                continue
            if source.startswith('"""', i):
                frames.append(['"""'])
                i += 3
                continue
            if ch == '"':
                frames.append(['"'])
                i += 1
                continue
            if ch == "'":
                m = re.match(r"'(\\u[0-9a-fA-F]{4}|\\.|[^'\\\n])'", source[i:])
                i += len(m.group(0)) if m else 1
                continue
            if ch in _OPEN or ch in _CLOSE:
                yield ch, i
                if ch == "{":
                    frame[1] += 1
                elif ch == "}":
                    frame[1] -= 1
                    if frame[1] < 0 and len(frames) > 1:
                        frames.pop()  # end of a ${…} template
            i += 1
            continue
        # inside a string
        if frame[0] == '"' and ch == "\\":
            i += 2
            continue
        if frame[0] == '"' and ch == "\n":
            yield "EOF-string", i
            frames.pop()
            i += 1
            continue
        if source.startswith("${", i):
            frames.append(["code", 0])
            yield "${", i + 1
            i += 2
            continue
        if frame[0] == '"""' and source.startswith('"""', i):
            while source.startswith('"', i + 3):  # a raw string ends at its last quote
                i += 1
            frames.pop()
            i += 3
            continue
        if frame[0] == '"' and ch == '"':
            frames.pop()
            i += 1
            continue
        i += 1
    if frames[-1][0] in ('"', '"""'):
        yield "EOF-string", n


def _position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    start = source.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def syntax_problems(source: str) -> list[Problem]:
    """What kotlinc would reject as a syntax error, in the subset we can tell for sure."""
    problems: list[Problem] = []
    stack: list[tuple[str, int]] = []
    for kind, offset in _scan(source):
        if kind == "EOF-comment":
            problems.append(Problem(*_position(source, offset), "Syntax error: Unclosed comment."))
            return problems
        if kind == "EOF-string":
            problems.append(Problem(*_position(source, offset), "Syntax error: Expecting '\"'."))
            return problems
        if kind == "${":
            stack.append(("{", offset))
        elif kind in _OPEN:
            stack.append((kind, offset))
        elif not stack:
            problems.append(
                Problem(*_position(source, offset), "Syntax error: Expecting a top level declaration.")
            )
            return problems
        else:
            opener, _ = stack.pop()
            if _OPEN[opener] != kind:
                problems.append(
                    Problem(*_position(source, offset), f"Syntax error: Expecting '{_OPEN[opener]}'.")
                )
                return problems
    if stack:
        opener, _ = stack[-1]
        end = len(source.rstrip())
        problems.append(Problem(*_position(source, end), f"Syntax error: Expecting '{_OPEN[opener]}'."))
    return problems


def _depths(source: str) -> list[int]:
    """Bracket depth at the start of every character offset's line... per offset of brackets."""
    depth_at = [0] * (len(source) + 1)
    depth = 0
    last = 0
    for kind, offset in _scan(source):
        if kind.startswith("EOF"):
            break
        for k in range(last, offset + 1):
            depth_at[k] = depth
        last = offset + 1
        if kind in _OPEN or kind == "${":
            depth += 1
        else:
            depth = max(0, depth - 1)
    for k in range(last, len(source) + 1):
        depth_at[k] = depth
    return depth_at


_MEMBER_START = re.compile(
    r"\s*(@|fun\b|val\b|var\b|class\b|object\b|companion\b|init\b|private\b|public\b|"
    r"internal\b|protected\b|override\b|open\b|abstract\b|lateinit\b|const\b|inline\b|"
    r"suspend\b|data\b|enum\b|interface\b|constructor\b|//|/\*|\})"
)


def _member_masks(source: str) -> list[bytes]:
    """For each member of each top-level class: the source with all other members blanked."""
    depth_at = _depths(source)
    # line starts (offsets) and the depth at each line's start
    starts = [0] + [m.end() for m in re.finditer("\n", source)]
    spans: list[tuple[int, int]] = []  # member spans (offsets) at depth 1
    current: int | None = None
    for idx, start in enumerate(starts):
        end = starts[idx + 1] if idx + 1 < len(starts) else len(source)
        line = source[start:end]
        if depth_at[start] != 1 or not line.strip():
            continue
        if _MEMBER_START.match(line) and not line.strip().startswith("}"):
            prev_is_annotation = (
                current is not None
                and source[current:start].strip().startswith("@")
                and all(
                    ln.strip().startswith("@") or not ln.strip()
                    for ln in source[current:start].splitlines()
                )
            )
            if current is not None and not prev_is_annotation:
                spans.append((current, start))
                current = start
            elif current is None:
                current = start
        elif line.strip().startswith("}") and current is not None:
            spans.append((current, start))
            current = None
    if current is not None:
        spans.append((current, len(source)))
    if len(spans) < 2:
        return []
    member_offsets: set[int] = set()
    for a, b in spans:
        member_offsets.update(range(a, b))
    masks = []
    for a, b in spans:
        chars = [
            c if (c == "\n" or a <= i < b or i not in member_offsets) else " "
            for i, c in enumerate(source)
        ]
        masks.append("".join(chars).encode("utf-8"))
    return masks
