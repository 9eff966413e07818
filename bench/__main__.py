"""Run the benchmarks: ``python -m bench [--quick] [NAME…]``."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import traceback
from pathlib import Path

from bench.common import judged


def _modules(selected: list[str]) -> list[str]:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    if selected:
        names = [n for n in names if n.removeprefix("bench_") in selected or n in selected]
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (under a minute)")
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    args = parser.parse_args(argv)
    figures: list[dict[str, object]] = []
    failed = 0
    for name in _modules(args.names):
        module = importlib.import_module(f"bench.{name}")
        try:
            for fig in module.run(quick=args.quick):
                fig = judged(fig)
                print(json.dumps(fig), flush=True)
                figures.append(fig)
        except Exception:  # a broken benchmark is reported, the others still run
            failed += 1
            traceback.print_exc()
    if figures:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="droidwire benchmarks (ratio = value / baseline, same run)")
        columns = ("name", "n", "value", "unit", "baseline", "ratio", "target")
        for col in (*columns, "met"):
            table.add_column(col)
        for f in figures:
            met = f.get("met")
            verdict = "" if met is None else "met" if met else "missed"
            table.add_row(*(_fmt(f.get(c)) for c in columns), verdict)
        Console(file=sys.stderr).print(table)
    return 1 if failed else 0


def _fmt(v: object) -> str:
    if v is None:
        return ""
    return f"{v:.3f}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    sys.exit(main())
