"""``make corpus``: how many of the corpus' facts the parsers get right, per category and source.

Prints a Markdown table (facts right / facts, per category, per source kind, per source site)
and the facts that are wrong; ``--write PATH`` also keeps it, dated, in a docs page so that a
regression shows in its diff. Exit status 1 when any fact is wrong.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tests.corpus.facts import Fact, check, entries, source_kind

_PAGE_HEAD = """# Corpus report

The parsers against the project's own corpus of real output (`tests/corpus/`: each sample a
verbatim excerpt of output a real person posted in public, with its source, author, date, what was
trimmed, and the facts a correct parser reads off it). Every key written in a sample's `facts` is
one fact, and so is the length of every list. `make corpus` prints these tables and rewrites this
page; `tests/corpus/test_corpus.py` (part of `make test`) fails on any wrong fact.
"""


def _site(entry: dict[str, Any]) -> str:
    url = urlparse(entry["source"]["url"])
    parts = [p for p in url.path.split("/") if p]
    if url.netloc == "github.com" and len(parts) >= 2:
        return f"{parts[0]}/{parts[1]}"
    return url.netloc


def _table(title: str, rows: Iterable[tuple[str, int, int, int]]) -> list[str]:
    out = [f"| {title} | samples | facts right | facts | % |", "|---|---:|---:|---:|---:|"]
    for name, samples, right, total in rows:
        pct = f"{100.0 * right / total:.1f}" if total else "-"
        out.append(f"| {name} | {samples} | {right} | {total} | {pct} |")
    return out


def _group(results: list[tuple[dict[str, Any], list[Fact]]],
           key: Callable[[dict[str, Any]], str]) -> list[tuple[str, int, int, int]]:
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for entry, facts in results:
        a = acc[key(entry)]
        a[0] += 1
        a[1] += sum(f.ok for f in facts)
        a[2] += len(facts)
    return [(k, *v) for k, v in sorted(acc.items())]  # type: ignore[misc]


def render(today: dt.date | None = None) -> tuple[str, int]:
    results = [(e, check(e)) for e in entries()]
    right = sum(f.ok for _, fs in results for f in fs)
    total = sum(len(fs) for _, fs in results)
    lines: list[str] = []
    day = (today or dt.datetime.now(dt.UTC).date()).isoformat()
    lines.append(f"Run on {day}: {len(results)} samples, {right}/{total} facts right.")
    lines.append("")
    lines += _table("category", _group(results, lambda e: str(e["category"])))
    lines.append("")
    lines += _table("source kind", _group(results, source_kind))
    lines.append("")
    lines += _table("parser", _group(results, lambda e: str(e["parser"])))
    lines.append("")
    lines += _table("source", _group(results, _site))
    wrong = [f for _, fs in results for f in fs if not f.ok]
    lines.append("")
    if wrong:
        lines.append("Wrong facts:")
        lines.append("")
        for f in wrong:
            lines.append(f"- `{f.sample}` {f.name}: expected `{f.expected!r}`, got `{f.got!r}`")
    else:
        lines.append("No wrong facts.")
    return "\n".join(lines) + "\n", len(wrong)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="also write the report to this docs page")
    args = parser.parse_args(argv)
    text, wrong = render()
    sys.stdout.write(text)
    if args.write is not None:
        args.write.write_text(_PAGE_HEAD + "\n" + text, encoding="utf-8")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
