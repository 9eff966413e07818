"""``import protocol`` works where the I/O libraries cannot be imported (docs/design.md §2)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = {"websockets", "fastapi", "uvicorn", "starlette", "adbutils"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Block())
    try:
        import websockets  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the blocker does not work")

    import protocol
    import protocol.closecodes, protocol.codec, protocol.envelope, protocol.errors
    import protocol.methods, protocol.session, protocol.settings

    for name in protocol.__all__:
        getattr(protocol, name)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("ok", leaked)
    """
)


def test_protocol_imports_without_io_libraries() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok []"


def test_public_names_are_exported() -> None:
    import protocol

    assert len(protocol.__all__) == len(set(protocol.__all__))
    for name in protocol.__all__:
        assert hasattr(protocol, name), name


FORBIDDEN_IMPORTS = {"asyncio", "socket", "time", "threading", "websockets", "fastapi", "adbutils"}


def test_protocol_sources_do_no_io_and_read_no_clock() -> None:
    """Sans-I/O by construction: no module of protocol/ imports I/O or clock modules."""
    for path in sorted((ROOT / "protocol").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"
