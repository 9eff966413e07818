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

The parsers against the project's own corpus of real output, `tests/corpus/`. Each sample in
`samples/` is a verbatim excerpt of output a real person posted in public (GitHub issues and pull
requests, logs and notes committed to repositories, the AOSP documentation's bug-report examples);
`index.json` gives for each: the source URL, the author, the date, what was trimmed from the post
(samples end where their excerpt ended — a line cut in the middle stays cut, TABs and trailing
spaces stay), notes on what makes it hard, and the facts a correct parser reads off it, written by
hand from the sample. Nothing in a sample is invented or cleaned up.

Every key written in a sample's `facts` is one fact, and so is the length of every list (the
keys are described in `tests/corpus/facts.py`). `tests/corpus/test_corpus.py`, part of `make
test`, fails on any wrong fact and on an index entry without provenance. `make corpus` prints the
tables below and rewrites this page with the date, so that a regression shows in its diff.

Adding a sample: save the excerpt byte for byte under `samples/` (name it
`<category>_<NN>_<source>_<what it shows>.txt`), add its entry to `index.json`, run `make corpus`.
When a sample shows a parser miss, fix the parser at the cause and keep the sample as its test.

Categories: `kotlin_k1`, `kotlin_k2` (K1/K2 `e:` diagnostics), `kapt`, `ksp`, `javac`,
`gradle_config` (failures that are not compile errors), `strictmode_android12`,
`strictmode_forwarded` (tags re-emitted as `[Tag]` by .NET MAUI), `anr`, `anr_android14`
(`ErrorId`/`Frozen`/PSI), `anr_events` (`am_anr` only), `native_crash`, `crash`,
`crash_subprocess`, `studio_logcat` (Android Studio's Logcat window columns), `instrumentation`,
and `vendor_*` (Huawei, Xiaomi, Samsung, OPPO, Qualcomm noise). Source kinds: `github-issue`
(issue and pull-request threads) and `repo-file` (files committed to a repository).
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
