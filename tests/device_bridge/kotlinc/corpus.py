"""The corpus of generated tests the real compiler rejects, with kotlinc's diagnostics.

Each ``corpus/<Name>.kt`` is a test as an LLM drafts them for the demo app; ``corpus/<Name>.
expected`` holds what kotlinc 2.0.21 said about it, one diagnostic per block (``L:C message``
plus the candidate lines of a multi-line one), recorded from the real compiler::

    .venv/bin/python -m tests.device_bridge.kotlinc.corpus --record     # after `make setup`

``QualifiedNameTest`` compiles (an empty ``.expected``): it holds the simulated toolchain to
fully qualified names.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CORPUS = Path(__file__).with_name("corpus")
_LOC = re.compile(r"^[ew]: file://\S+?\.kt:(?P<loc>\d+:\d+) (?P<msg>.*)$")


def cases() -> list[Path]:
    return sorted(CORPUS.glob("*.kt"))


def diagnostics(output: str) -> list[str]:
    """The ``e:`` diagnostics of a check's output as ``L:C message`` blocks (path dropped)."""
    out: list[str] = []
    inside = False
    for line in output.splitlines():
        m = _LOC.match(line)
        if m and line.startswith("e:"):
            out.append(f"{m['loc']} {m['msg']}")
            inside = True
        elif m or line.startswith((">", "Compilation failed", "w:")):
            inside = False
        elif inside and line.strip():
            out[-1] += "\n" + line
    return out


def expected(case: Path) -> list[str]:
    text = case.with_suffix(".expected").read_text(encoding="utf-8")
    return [block for block in text.split("\n\n") if block.strip()]


def place(case: Path, root: Path) -> Path:
    """Write the case where the sandbox would: the demo's androidTest sources."""
    target = root / "app/src/androidTest/java/com/droidwire/demo/test" / case.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(case.read_text(encoding="utf-8"), encoding="utf-8")
    return target


def _record() -> int:
    import tempfile

    from device_bridge.kotlinc import KotlincChecker, ensure_layout
    from device_bridge.workspace_template import template_dir

    checker = KotlincChecker(ensure_layout())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for case in cases():
                result = checker.check(Path(template_dir()), place(case, Path(tmp)))
                blocks = diagnostics(result.output)
                case.with_suffix(".expected").write_text(
                    "".join(b + "\n\n" for b in blocks), encoding="utf-8"
                )
                print(f"{case.stem}: {len(blocks)} error(s)")
    finally:
        checker.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        raise SystemExit("usage: python -m tests.device_bridge.kotlinc.corpus --record")
    raise SystemExit(_record())
