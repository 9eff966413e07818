"""Every sample of the project's own corpus yields the facts its index entry states."""

from __future__ import annotations

import re

import pytest

from tests.corpus.facts import REQUIRED, SAMPLES, SOURCE_KEYS, check, entries

ENTRIES = entries()


def test_index_lists_exactly_the_samples_with_provenance() -> None:
    files = [e["file"] for e in ENTRIES]
    assert len(files) == len(set(files))
    assert sorted(files) == sorted(p.name for p in SAMPLES.iterdir() if p.is_file())
    for e in ENTRIES:
        assert all(k in e for k in REQUIRED), e["file"]
        assert all(e["source"].get(k) for k in SOURCE_KEYS), e["file"]
        assert re.match(r"https://", e["source"]["url"]), e["file"]
        assert e["facts"], e["file"]
        if "also_with_package" in e["facts"]:
            assert e.get("package"), e["file"]


@pytest.mark.parametrize("entry", [pytest.param(e, id=e["file"]) for e in ENTRIES])
def test_sample_yields_its_facts(entry) -> None:
    wrong = [(f.name, f.expected, f.got) for f in check(entry) if not f.ok]
    assert wrong == []


def test_report_table_counts_every_fact(capsys) -> None:
    import datetime as dt

    from tests.corpus.report import main, render

    text, wrong = render(dt.date(2026, 1, 2))
    total = sum(len(check(e)) for e in ENTRIES)
    assert wrong == 0
    assert text.startswith(f"Run on 2026-01-02: {len(ENTRIES)} samples, {total}/{total} facts right.")
    assert "| category | samples | facts right | facts | % |" in text
    assert "| source kind | samples |" in text
    assert main([]) == 0 and "| parser |" in capsys.readouterr().out


def test_the_corpus_holds_at_least_sixty_real_samples_across_the_categories() -> None:
    assert len(ENTRIES) >= 60
    categories = {e["category"] for e in ENTRIES}
    for needed in ("kotlin_k2", "kapt", "javac", "gradle_config", "strictmode_android12",
                   "anr_android14", "anr_events", "native_crash", "studio_logcat",
                   "vendor_huawei", "vendor_xiaomi", "vendor_samsung", "vendor_oppo"):
        assert needed in categories, needed
