"""The layering rules of ``docs/design.md`` §2, held on every import in the tree.

Each package's source is parsed (no import is executed) and every ``import``/``from … import``
— at module level, inside functions and under ``TYPE_CHECKING`` alike — is checked against what
that package must not import. A new exception has to be written here and in the design page.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> (top-level modules it must not import, allowed exceptions as (file prefix, module))
IO_LIBRARIES = {"websockets", "fastapi", "starlette", "uvicorn", "adbutils", "httpx", "socket"}
RULES: dict[str, tuple[set[str], set[tuple[str, str]]]] = {
    "protocol": (IO_LIBRARIES | {"controller", "device_bridge", "fixer", "droidwire"}, set()),
    # The bridge-only install has none of the controller's libraries (docs/cli.md, "Installing").
    "device_bridge": (
        {"controller", "droidwire", "fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic",
         "asyncpg", "redis", "mcp", "openai"},
        set(),
    ),
    # The two sides never import each other: only the composition root (``droidwire/``, the
    # CLI) starts bridge-side pieces next to controller-side ones.
    "controller": ({"device_bridge", "droidwire"}, set()),
    "fixer": ({"controller", "device_bridge", "droidwire", "adbutils", "websockets", "socket"}, set()),
}
# The composition root (the CLI): it may import every package, and no package imports it.
COMPOSITION_ROOT = "droidwire"
# device_bridge may use exactly one part of fixer: the source index (pure parsing).
FIXER_ALLOWED_IN_BRIDGE = {"fixer.source_index"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
            found.append((node.lineno, node.module))
    return found


def _violations(package: str) -> list[str]:
    banned, exceptions = RULES[package]
    out: list[str] = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, module in _imports(path):
            top = module.split(".")[0]
            if package == "device_bridge" and top == "fixer":
                if not any(module == m or module.startswith(m + ".") for m in FIXER_ALLOWED_IN_BRIDGE):
                    out.append(f"{rel}:{line} imports {module}")
                continue
            if top in banned and (rel, top) not in exceptions:
                out.append(f"{rel}:{line} imports {module}")
    return sorted(set(out))


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_keeps_its_layer(package: str) -> None:
    assert _violations(package) == []


def test_every_shipped_package_has_its_rule() -> None:
    """A package added to the wheel gets its line in the table (and in the design page)."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = set(pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
    assert shipped == set(RULES) | {COMPOSITION_ROOT}
    assert all(COMPOSITION_ROOT in banned for banned, _ in RULES.values())


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The scan itself works: imports in functions and under TYPE_CHECKING are found."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import controller.app\n"
        "def f():\n    from device_bridge.sim import device\n",
        encoding="utf-8",
    )
    modules = {m for _, m in _imports(source)}
    assert {"controller.app", "device_bridge.sim", "device_bridge.sim.device"} <= modules


# --- inside the controller: MCP and REST share the services, not each other's handlers ------

# subpackage -> (modules it must not import, the exceptions among them). A module counts with
# everything under it; ``from a import b`` imports ``a.b``.
INNER_RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # An MCP tool calls controller.services (what a REST route calls too), never a route
    # handler; it may only share REST's error body.
    "controller/mcp": (("controller.api",), ("controller.api.errors",)),
}


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _qualified_imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """Every module or name ``path`` imports, fully qualified (relative imports resolved), at
    module level, in functions and under ``TYPE_CHECKING`` alike."""
    parts = path.relative_to(root).with_suffix("").parts
    package = ".".join(parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package.split(".")
                up = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def _inner_violations(folder: str, root: Path = ROOT) -> list[str]:
    banned, allowed = INNER_RULES[folder]
    out = []
    for path in sorted((root / folder).rglob("*.py")):
        for line, module in _qualified_imports(path, root):
            if _under(module, banned) and not _under(module, allowed):
                out.append(f"{path.relative_to(root).as_posix()}:{line} imports {module}")
    return out


@pytest.mark.parametrize("folder", sorted(INNER_RULES))
def test_subpackage_keeps_its_layer(folder: str) -> None:
    assert _inner_violations(folder) == []


def test_the_inner_checker_sees_a_route_import(tmp_path: Path) -> None:
    """Each way of reaching a REST handler from an MCP module is seen; the error body is not."""
    source = tmp_path / "controller" / "mcp" / "probe.py"
    source.parent.mkdir(parents=True)
    imports = {
        "from controller.api import manage": True,
        "from controller.api.sandbox import get_run": True,
        "import controller.api.manage": True,
        "from controller import api": True,
        "from ..api import sandbox": True,
        "from controller.api.errors import error_body": False,
        "from controller.api import errors": False,
        "from controller.services import manage": False,
    }
    for statement, banned in imports.items():
        source.write_text(f"def f():\n    {statement}\n", encoding="utf-8")
        assert bool(_inner_violations("controller/mcp", tmp_path)) is banned, statement


# --- import cycles --------------------------------------------------------------------------

PACKAGES = (*sorted(RULES), COMPOSITION_ROOT)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return skipped


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere but under ``TYPE_CHECKING``)."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        resolved = set()
        for target in targets:
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name:
                resolved.add(target)
        graph[name] = resolved
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


# -- the tests' own layout (docs/design.md §2, CONTRIBUTING.md) ------------------------------

# Suites that cross packages; everything else under tests/ mirrors a source package.
AREA_SUITES = {"bench", "corpus", "deploy", "docs", "e2e", "faults", "manage", "security",
               "streams", "tenancy", "tools", "tunnel"}
SOURCE_PACKAGES = {"controller", "device_bridge", "droidwire", "fixer", "protocol",
                   "gradle_workspace"}


def _stray_test_folders(tests: Path) -> list[str]:
    """Top-level test folders that are neither a source package's mirror nor an area suite."""
    out: list[str] = []
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if folder.name in AREA_SUITES:
            continue
        if folder.name not in SOURCE_PACKAGES:
            out.append(folder.name)
    return out


def test_tests_mirror_the_packages() -> None:
    assert _stray_test_folders(ROOT / "tests") == []
    for package in SOURCE_PACKAGES - {"gradle_workspace"}:
        assert (ROOT / package).is_dir(), package


def test_the_layout_check_sees_a_stray_folder(tmp_path: Path) -> None:
    for name in ("controller", "docs", "agent"):
        (tmp_path / name).mkdir()
    assert _stray_test_folders(tmp_path) == ["agent"]
