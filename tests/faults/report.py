"""``make faults``: run the fault suite, print its figures as a table, fail on a non-zero
"must be 0".

Usage: ``python -m tests.faults.report [--profile full|ci] [PYTEST_ARGS…]``. The profile
defaults to ``$FAULTS_PROFILE`` or ``full``. The suite runs in a pytest subprocess that appends
one JSON line per figure to a temporary file (see :mod:`tests.faults.figures`); the exit code
is non-zero when pytest failed or any figure marked "must be 0" is not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.faults.figures import FIGURES_ENV

__all__ = ["main", "read_figures", "render", "verdict"]

ROOT = Path(__file__).resolve().parents[2]


def read_figures(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render(figures: list[dict[str, Any]]) -> str:
    """A plain-text table, grouped by area in the order the figures arrived."""
    areas: dict[str, list[dict[str, Any]]] = {}
    for fig in figures:
        areas.setdefault(fig["area"], []).append(fig)
    width = max([len(f["name"]) for f in figures] + [20])
    lines: list[str] = []
    for area, figs in areas.items():
        lines.append(f"\n{area}")
        lines.append("-" * (width + 30))
        for fig in figs:
            value = _fmt(fig["value"]) + (f" {fig['unit']}" if fig["unit"] else "")
            check = ""
            if fig["must_be_zero"]:
                check = "must be 0: ok" if fig["value"] == 0 else "must be 0: FAIL"
            lines.append(f"{fig['name']:<{width}}  {value:>14}  {check}")
    return "\n".join(lines)


def verdict(figures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The "must be 0" figures that are not 0."""
    return [f for f in figures if f["must_be_zero"] and f["value"] != 0]


#: What the suite deliberately does not do, printed under the table.
NOTES = [
    "link-level faults run between two network namespaces of the test's own (veth cut, "
    "blackhole route; tests/faults/test_netns.py); tc netem delay runs only where the kernel "
    "has sch_netem; the other network faults come from the loopback proxy (tests/faults/netem.py)",
    "timings are figures, never assertions; they come from the test-scaled settings "
    "(tests/faults/timing.py) and include process start-up where a process is restarted",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.report")
    parser.add_argument("--profile", default=os.environ.get("FAULTS_PROFILE") or "full",
                        choices=["full", "ci"])
    args, pytest_args = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory(prefix="droidwire-faults-") as tmp:
        figures_path = Path(tmp) / "figures.jsonl"
        env = {**os.environ, "FAULTS_PROFILE": args.profile, FIGURES_ENV: str(figures_path)}
        cmd = [sys.executable, "-m", "pytest", "tests/faults", "tests/security", "-q", "-p",
               "no:cacheprovider",
               *pytest_args]
        print(f"droidwire faults, profile {args.profile}: {' '.join(cmd[2:])}", flush=True)
        rc = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
        figures = read_figures(figures_path)
    print(render(figures) if figures else "\n(no figures were recorded)")
    bad = verdict(figures)
    print()
    for note in NOTES:
        print(f"note: {note}")
    if bad:
        print(f"FAIL: {len(bad)} figure(s) that must be 0 are not: "
              + ", ".join(f"{f['area']} / {f['name'].strip()} = {f['value']}" for f in bad))
    if rc != 0:
        print(f"FAIL: the fault suite's tests failed (pytest exit code {rc})")
    if not figures:
        return rc or 1
    if not bad and rc == 0:
        print(f"ok: {len(figures)} figures, every must-be-0 is 0")
    return 1 if bad else rc


if __name__ == "__main__":
    sys.exit(main())
