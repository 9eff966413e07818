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
