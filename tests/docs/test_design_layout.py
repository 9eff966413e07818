"""``docs/design.md`` §2 shows the layout, and it matches the tree.

Every module of the project's packages is named in §2 (the simulated device's modules in
``device_bridge/sim/__init__.py``'s table instead, which §2 points to; Alembic's migrations
aside), and every file §2 names exists: a module added without a word in the design,
or one renamed or removed while the design still names it, fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controller", "device_bridge", "protocol", "fixer", "droidwire")
SIM = ROOT / "device_bridge" / "sim"


def layout_section(text: str) -> str:
    """§2 of the design: from its heading to the next one of its level."""
    match = re.search(r"^## 2\. .*?(?=^## 3\. )", text, re.M | re.S)
    assert match is not None, "docs/design.md has no §2"
    return match.group(0)


def modules(root: Path) -> list[Path]:
    """The modules §2 must name: every .py file of the packages, but package markers, the
    simulated device's (named in its own table) and Alembic's migrations folder (§2 names it)."""
    out: list[Path] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if (path.name in ("__init__.py", "__main__.py") or "migrations" in path.parts
                    or root / "device_bridge" / "sim" in path.parents):
                continue
            out.append(path)
    return out


def unnamed(section: str, root: Path) -> list[str]:
    """Modules (as paths under ``root``) whose file name §2 does not mention."""
    named = {m.group(1) for m in re.finditer(r"`(?:[\w/]*/)?(\w+\.py)`", section)}
    return [p.relative_to(root).as_posix() for p in modules(root) if p.name not in named]


def dangling(section: str, root: Path) -> list[str]:
    """Files §2 names that neither a package nor the tests hold (by file name)."""
    present = {p.name for package in PACKAGES for p in (root / package).rglob("*.py")}
    present |= {p.name for p in (root / "tests").rglob("*.py")} if (root / "tests").is_dir() else set()
    named = {m.group(1) for m in re.finditer(r"`(?:[\w/]*/)?(\w+\.py)`", section)}
    return sorted(name for name in named if name not in present)


def test_every_module_is_named_in_the_design() -> None:
    section = layout_section((ROOT / "docs" / "design.md").read_text())
    assert unnamed(section, ROOT) == []


def test_every_file_the_design_names_exists() -> None:
    section = layout_section((ROOT / "docs" / "design.md").read_text())
    assert dangling(section, ROOT) == []


def test_every_simulated_device_module_is_in_its_table() -> None:
    doc = ast.get_docstring(ast.parse((SIM / "__init__.py").read_text())) or ""
    named = set(re.findall(r"``(\w+)``", doc))
    missing = [p.stem for p in sorted(SIM.glob("*.py"))
               if p.name != "__init__.py" and p.stem not in named]
    assert missing == []


def test_the_checks_see_a_stray_and_a_stale_module(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "protocol" / "codec.py").write_text("")
    (tmp_path / "protocol" / "stray.py").write_text("")
    section = "## 2. Layout\n`protocol/codec.py` and `gone.py`\n"
    assert unnamed(section, tmp_path) == ["protocol/stray.py"]
    assert dangling(section, tmp_path) == ["gone.py"]
