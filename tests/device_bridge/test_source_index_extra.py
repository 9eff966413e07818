"""A bridge installed without the ``sources`` extra (no tree-sitter) answers ``source.lookup``
with a typed error that says what to install, never an ImportError (docs/deploy.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from device_bridge.source_lookup import open_index
from protocol.errors import ErrorCode, RpcError


def test_without_tree_sitter_the_index_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("tree_sitter", "tree_sitter_kotlin", "tree_sitter_java", "fixer.source_index"):
        monkeypatch.setitem(sys.modules, name, None)  # "not installed"
    with pytest.raises(RpcError) as caught:
        open_index(tmp_path)
    assert caught.value.code == ErrorCode.UNAVAILABLE
    assert "pip install 'droidwire[sources]'" in str(caught.value)
    assert caught.value.data == {"reason": "no_source_index"}


def test_with_tree_sitter_the_index_opens(tmp_path: Path) -> None:
    (tmp_path / "A.kt").write_text("class A { fun f() = 1 }\n", encoding="utf-8")
    index = open_index(tmp_path)
    assert index.lookup("f")
