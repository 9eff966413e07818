"""SourceCodeIndex on the small Kotlin/Java project in ``tests/fixer/sample_project``."""

from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import pytest

import fixer.source_index as source_index_module
from fixer.source_index import SourceCodeIndex, parse_source

SAMPLE = Path(__file__).parent / "sample_project"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    generated = root / "app" / "build" / "generated"
    generated.mkdir(parents=True)
    (generated / "Generated.kt").write_text(
        "package gen\n\nclass Generated {\n    fun loadConfig() {}\n}\n"
    )
    return root


def test_files_packages_and_imports(project: Path) -> None:
    index = SourceCodeIndex(project)
    files = {f.path: f for f in index.files}
    assert set(files) == {
        "app/src/main/java/com/example/demo/NetworkClient.java",
        "app/src/main/kotlin/com/example/demo/Broken.kt",
        "app/src/main/kotlin/com/example/demo/MainActivity.kt",
        "app/src/main/kotlin/com/example/demo/util/ConfigStore.kt",
    }, "build/ must be skipped"
    main = files["app/src/main/kotlin/com/example/demo/MainActivity.kt"]
    assert main.package == "com.example.demo" and main.language == "kotlin"
    assert main.imports == ["android.app.Activity", "android.os.Bundle", "com.example.demo.util.*"]
    store = files["app/src/main/kotlin/com/example/demo/util/ConfigStore.kt"]
    assert store.imports == ["android.content.Context", "java.io.File"]  # alias dropped
    java = files["app/src/main/java/com/example/demo/NetworkClient.java"]
    assert java.package == "com.example.demo" and java.language == "java"
    assert java.imports == [
        "java.io.IOException",
        "java.net.URL",
        "java.util.Objects.requireNonNull",
    ]
    assert index.packages == ["com.example.demo", "com.example.demo.util"]


def test_classes(project: Path) -> None:
    index = SourceCodeIndex(project)
    kinds = {c.qualified_name: c.kind for c in index.classes}
    assert kinds == {
        "com.example.demo.NetworkClient": "class",
        "com.example.demo.NetworkClient.Listener": "interface",
        "com.example.demo.Broken": "class",
        "com.example.demo.MainActivity": "class",
        "com.example.demo.MainActivity.Companion": "companion",
        "com.example.demo.MainActivity.Helper": "class",
        "com.example.demo.util.ConfigStore": "object",
        "com.example.demo.util.Mode": "enum",
    }
    (store,) = index.find_class("ConfigStore")
    assert (store.start_line, store.end_line) == (6, 15)
    assert [c.qualified_name for c in index.find_class("com.example.demo.MainActivity")] == [
        "com.example.demo.MainActivity"
    ]


def test_kotlin_method_records(project: Path) -> None:
    index = SourceCodeIndex(project)
    (load,) = index.lookup("loadConfig")
    assert (load.owner, load.package, load.language, load.kind) == (
        "MainActivity",
        "com.example.demo",
        "kotlin",
        "method",
    )
    assert load.file == "app/src/main/kotlin/com/example/demo/MainActivity.kt"
    assert (load.start_line, load.end_line) == (13, 16)
    assert load.signature == "fun loadConfig(): String"
    assert load.body.startswith("fun loadConfig(): String {")
    assert "ConfigStore.read(this)" in load.body and load.body.rstrip().endswith("}")
    assert load.static is False and load.import_path is None

    (remember,) = index.lookup("remember")
    assert remember.signature == "private suspend fun <T> remember(value: T): T"

    (companion_fn,) = index.lookup("newIntentName")
    assert companion_fn.owner == "MainActivity" and companion_fn.static
    assert companion_fn.import_path == "com.example.demo.MainActivity.Companion.newIntentName"

    (obj_fn,) = index.lookup("write")
    assert obj_fn.owner == "ConfigStore" and obj_fn.static
    assert obj_fn.import_path == "com.example.demo.util.ConfigStore.write"
    assert obj_fn.signature == "@JvmStatic fun write(context: Context, text: String)"

    (top,) = index.lookup("topLevelHelper")
    assert (top.owner, top.kind, top.import_path) == (
        None,
        "function",
        "com.example.demo.topLevelHelper",
    )

    (inner,) = index.lookup("help")
    assert inner.owner == "MainActivity.Helper"
    (label,) = index.lookup("label")
    assert label.owner == "Mode"


def test_java_method_records(project: Path) -> None:
    index = SourceCodeIndex(project)
    (fetch,) = index.lookup("fetchBlocking")
    assert (fetch.owner, fetch.language, fetch.static) == ("NetworkClient", "java", True)
    assert fetch.signature == "public static String fetchBlocking(String path) throws IOException"
    assert fetch.import_path == "com.example.demo.NetworkClient.fetchBlocking"
    assert (fetch.start_line, fetch.end_line) == (14, 17)
    (port,) = index.lookup("port")
    assert port.static is False
    (ctor,) = [m for m in index.lookup("NetworkClient") if m.kind == "constructor"]
    assert ctor.signature == "public NetworkClient(String host)"
    (listener,) = index.lookup("onDone")
    assert listener.owner == "NetworkClient.Listener"


def test_lookup_narrows_by_owner(project: Path) -> None:
    index = SourceCodeIndex(project)
    assert [m.name for m in index.lookup("MainActivity.loadConfig")] == ["loadConfig"]
    assert [m.name for m in index.lookup("com.example.demo.MainActivity.loadConfig()")] == [
        "loadConfig"
    ]
    assert index.lookup("NetworkClient.loadConfig") == []
    assert index.lookup("Activity.loadConfig") == [], "owner names match whole segments"
    assert [m.owner for m in index.lookup("Helper.help")] == ["MainActivity.Helper"]
    assert index.lookup("doesNotExist") == []
    assert {m.name for m in index.methods_of("ConfigStore")} == {"read", "write"}


def test_parse_errors_are_tolerated(project: Path) -> None:
    index = SourceCodeIndex(project)
    broken = next(f for f in index.files if f.path.endswith("Broken.kt"))
    assert broken.has_errors
    (still,) = index.lookup("stillIndexed")
    assert still.owner == "Broken"


def test_garbage_and_unreadable_files(project: Path) -> None:
    (project / "junk.kt").write_bytes(b"\xff\xfe\x00 class {{{ fun ( \n" * 20)
    (project / "Empty.java").write_text("")
    index = SourceCodeIndex(project)
    assert any(f.path == "junk.kt" for f in index.files)
    if os.name == "posix" and os.geteuid() != 0:
        locked = project / "Locked.kt"
        locked.write_text("class Locked { fun x() {} }\n")
        locked.chmod(0)
        index.refresh()
        assert index.lookup("x") == []


def test_incremental_refresh(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = SourceCodeIndex(project)
    calls: list[str] = []
    real_parse = source_index_module.parse_source

    def counting_parse(text: bytes | str, language: str, path: str = "<memory>") -> object:
        calls.append(path)
        return real_parse(text, language, path)  # type: ignore[arg-type]

    monkeypatch.setattr(source_index_module, "parse_source", counting_parse)
    assert index.refresh().total == 0
    assert calls == [], "nothing changed: nothing re-parsed"

    store = project / "app/src/main/kotlin/com/example/demo/util/ConfigStore.kt"
    store.write_text(store.read_text().replace("fun read(", "fun readAll("))
    st = store.stat()
    os.utime(store, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    new = project / "app/src/main/kotlin/com/example/demo/Extra.kt"
    new.write_text("package com.example.demo\n\nfun extra(): Int = 7\n")
    (project / "app/src/main/kotlin/com/example/demo/Broken.kt").unlink()

    stats = index.refresh()
    assert (stats.added, stats.changed, stats.removed) == (1, 1, 1)
    assert sorted(calls) == [
        "app/src/main/kotlin/com/example/demo/Extra.kt",
        "app/src/main/kotlin/com/example/demo/util/ConfigStore.kt",
    ]
    assert index.lookup("read") == []
    assert [m.owner for m in index.lookup("readAll")] == ["ConfigStore"]
    assert [m.name for m in index.lookup("extra")] == ["extra"]
    assert index.lookup("stillIndexed") == []


def test_auto_refresh(project: Path) -> None:
    index = SourceCodeIndex(project, auto_refresh=True)
    (project / "Late.kt").write_text("object Late {\n    fun arrive() = 1\n}\n")
    assert [m.owner for m in index.lookup("arrive")] == ["Late"]


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        SourceCodeIndex(tmp_path / "missing")


def test_parse_source_in_memory() -> None:
    record = parse_source(
        "package p.q\n\nimport a.B\n\nclass T {\n    @Test\n    fun t() {}\n}\n", "kotlin"
    )
    assert (record.package, record.imports, [c.name for c in record.classes]) == (
        "p.q",
        ["a.B"],
        ["T"],
    )
    assert record.methods[0].signature == "@Test fun t()"


def test_module_depends_on_nothing_else_in_fixer() -> None:
    tree = ast.parse(Path(source_index_module.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not any(name == "fixer" or name.startswith("fixer.") for name in imported)
