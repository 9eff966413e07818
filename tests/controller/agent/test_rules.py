"""The rule templates: what each phrasing becomes, and what is refused (never guessed)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.agent import Refused, RulePlanner

STATE = {"package": "com.droidwire.demo", "activity_short": "MainActivity"}


async def plan(text: str, state: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    out = await RulePlanner().plan(text, state if state is not None else STATE, [])
    assert out.source == "rules"
    return [(s.action, s.target, s.state, s.activity) for s in out.steps]


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("open Settings and turn on dark mode",
         [("tap", "Settings", None, None), ("tap", "dark mode", "on", None)]),
        ("Open the demo app, then tap Save.",
         [("start", "com.droidwire.demo", None, None), ("tap", "Save", None, None)]),
        ("launch com.example.shop", [("start", "com.example.shop", None, None)]),
        ("open SettingsActivity",
         [("start", "com.droidwire.demo", None, ".SettingsActivity")]),
        ("go back", [("key", "BACK", None, None)]),
        ("press the back button then go home",
         [("key", "BACK", None, None), ("key", "HOME", None, None)]),
        ("please type \"hello, world\" into the search field",
         [("tap", "search", None, None), ("type", "hello, world", None, None)]),
        ("enter 42", [("type", "42", None, None)]),
        ("switch dark mode off", [("tap", "dark mode", "off", None)]),
        ("disable Wi-Fi", [("tap", "Wi-Fi", "off", None)]),
        ("click on the Load button", [("tap", "Load", None, None)]),
        ("save", [("tap", "save", None, None)]),
    ],
)
async def test_phrasings(text: str, steps: list[tuple[Any, ...]]) -> None:
    assert await plan(text) == steps


@pytest.mark.parametrize(
    "text",
    ["order a pizza", "delete all photos", "open the banking app", "", "x" * 1001,
     "tap Settings and then reboot the phone"],
)
async def test_uncovered_instructions_are_refused(text: str) -> None:
    with pytest.raises(Refused) as info:
        await plan(text)
    assert info.value.reason == "refused" and info.value.message


async def test_a_screen_by_class_needs_an_app_in_front() -> None:
    # With no app in front, "open XActivity" is just a name on the screen to tap.
    assert await plan("open SettingsActivity", {}) == [("tap", "SettingsActivity", None, None)]
