"""docs/protocol.md and the code state the same defaults and close codes (each default is defined once, and the docs read it)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from protocol.closecodes import CloseCode, is_terminal
from protocol.settings import DEFAULTS, Settings

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()


def test_settings_table_matches_defaults() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|$", DOC, flags=re.MULTILINE))
    names = {f.name for f in dataclasses.fields(Settings)}
    assert set(rows) == names
    for name, text in rows.items():
        assert float(text) == getattr(DEFAULTS, name), name


def test_close_code_table_matches_classifier() -> None:
    rows = re.findall(r"^\| (\d{4}) \| [^|]+ \| ([^|]+) \|$", DOC, flags=re.MULTILINE)
    assert {int(code) for code, _ in rows} >= {1001, 1006, 1011, 1012, 1013, 4400, 4401, 4403, 4409}
    for code, action in rows:
        assert is_terminal(int(code)) == ("stop" in action), code
        assert int(code) in set(CloseCode)
