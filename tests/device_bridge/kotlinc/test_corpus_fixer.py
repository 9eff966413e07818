"""The fixer on the real compiler's words: kotlinc 2.0.21's recorded diagnostics of the corpus
(no JVM needed), and the rules' repair checked again by the real compiler."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_bridge.kotlinc import KotlincChecker
from device_bridge.workspace_template import template_dir
from fixer import fix_detailed
from fixer.errors import parse_errors
from tests.device_bridge.kotlinc.corpus import cases, expected, place

TEMPLATE = Path(template_dir())
KINDS = {
    "TypeMismatchTest": ["type_mismatch"] * 4,
    "OverloadTest": ["wrong_arguments"],
    "NullabilityTest": ["type_mismatch", "nullability"],
    "MissingImportTest": ["unresolved_reference"] * 3,
    "CoroutineMisuseTest": ["other", "other"],
    "MissingAppMethodTest": ["unresolved_reference", "wrong_arguments", "unresolved_reference"],
    "QualifiedNameTest": [],
}


def recorded_output(case: Path) -> str:
    """kotlinc's output for ``case`` as the build bridge returns it (path where it was written)."""
    uri = f"file:///srv/ws/app/src/androidTest/java/com/droidwire/demo/test/{case.name}"
    return "".join(f"e: {uri}:{block}\n" for block in expected(case))


@pytest.mark.parametrize("case", cases(), ids=lambda p: p.stem)
def test_every_real_diagnostic_is_read_with_its_kind_and_place(case: Path) -> None:
    errors = parse_errors(recorded_output(case)).compile_errors
    assert [e.kind for e in errors] == KINDS[case.stem]
    assert all(e.line and e.column and e.file and e.file.endswith(case.name) for e in errors)
    # whole messages (a candidate list keeps its lines; other wrapped text is joined)
    assert [" ".join(e.message.split()) for e in errors] == [
        " ".join(b.split(" ", 1)[1].split()) for b in expected(case)
    ]


def test_the_rules_fix_kotlincs_missing_imports_and_kotlinc_agrees(
    kotlinc_checker: KotlincChecker, tmp_path: Path
) -> None:
    case = next(c for c in cases() if c.stem == "MissingImportTest")
    fixed = fix_detailed(case.read_text(), recorded_output(case), TEMPLATE / "app/src/main")
    assert fixed.fixer == "rules"
    assert "+import android.os.StrictMode" in fixed.diff
    assert "+import org.junit.Assert.assertTrue" in fixed.diff
    repaired = tmp_path / case.name
    repaired.write_text(fixed.code)
    project = tmp_path / "p"
    result = kotlinc_checker.check(project, place(repaired, project), app_dir=TEMPLATE)
    assert result.ok, result.output
