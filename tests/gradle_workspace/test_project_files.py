"""The demo Gradle project cannot be built in CI (no SDK): check what can be checked."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import tree_sitter as ts
import tree_sitter_kotlin

from device_bridge.workspace_template import template_dir

ROOT = template_dir()
KOTLIN_FILES = sorted(p for p in ROOT.rglob("*") if p.suffix in {".kt", ".kts"})
PARSER = ts.Parser(ts.Language(tree_sitter_kotlin.language()))


def _bad_nodes(node: ts.Node) -> list[tuple[str, tuple[int, int]]]:
    found = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.is_error or n.is_missing:
            found.append((n.type, n.start_point))
        stack.extend(n.children)
    return found


def test_template_is_the_repository_copy() -> None:
    assert (ROOT / "settings.gradle.kts").is_file()
    assert (ROOT / "gradle" / "wrapper" / "gradle-wrapper.properties").is_file()


def test_expected_kotlin_sources_exist() -> None:
    names = {p.name for p in KOTLIN_FILES}
    assert {
        "settings.gradle.kts",
        "build.gradle.kts",
        "MainActivity.kt",
        "StrictModeRule.kt",
        "DroidUnblocker.kt",
        "MainActivityExamplesTest.kt",
    } <= names


@pytest.mark.parametrize("path", KOTLIN_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_kotlin_file_parses_without_errors(path: Path) -> None:
    tree = PARSER.parse(path.read_bytes())
    assert _bad_nodes(tree.root_node) == []


def test_parser_does_flag_broken_kotlin() -> None:
    # guards the test above against a parser that accepts anything
    tree = PARSER.parse(b"class A { fun f( { }")
    assert _bad_nodes(tree.root_node)


def test_app_module_declares_namespace_and_runner() -> None:
    text = (ROOT / "app" / "build.gradle.kts").read_text()
    assert re.search(r'namespace\s*=\s*"com\.droidwire\.demo"', text)
    assert 'testInstrumentationRunner = "androidx.test.runner.AndroidJUnitRunner"' in text
    assert "androidx.test:runner" in text


def test_manifest_is_well_formed_and_launches_main_activity() -> None:
    manifest = ROOT / "app" / "src" / "main" / "AndroidManifest.xml"
    tree = ET.parse(manifest)
    ns = "{http://schemas.android.com/apk/res/android}"
    activities = [a.get(f"{ns}name") for a in tree.iter("activity")]
    assert activities == [".MainActivity"]


def test_every_demo_method_has_an_example_test() -> None:
    main = (ROOT / "app/src/main/java/com/droidwire/demo/MainActivity.kt").read_text()
    examples = next(p for p in KOTLIN_FILES if p.name == "MainActivityExamplesTest.kt").read_text()
    methods = re.findall(r"^    fun (\w+)\(", main, flags=re.M)
    assert len(methods) == 7
    for method in methods:
        assert f"activity.{method}(" in examples, method


def test_readme_says_it_is_verified_only_with_an_sdk() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "Verified only by users with an Android SDK" in readme
    assert "wrapper JAR" in readme


def test_template_dir_prefers_the_wheel_copy_and_fails_typed(tmp_path, monkeypatch):
    from device_bridge import workspace_template

    fake_module = tmp_path / "site" / "device_bridge" / "workspace_template.py"
    fake_module.parent.mkdir(parents=True)
    monkeypatch.setattr(workspace_template, "__file__", str(fake_module))
    with pytest.raises(workspace_template.TemplateNotFound):
        workspace_template.template_dir()
    packaged = fake_module.parent / "_gradle_workspace"
    (packaged / "app").mkdir(parents=True)
    (packaged / "app" / "build.gradle.kts").write_text("plugins { }\n")
    assert workspace_template.template_dir() == packaged
