from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.settings import DEFAULTS, MIB, ReconnectBudget, Settings, backoff


def test_defaults_match_the_design() -> None:
    s = DEFAULTS
    assert (s.ping_interval_s, s.ping_timeout_s, s.close_timeout_s) == (10.0, 10.0, 2.0)
    assert s.reconnect_budget_s == 30 * 60
    assert s.backoff_first_max_s < 1
    assert s.grace_period_s == 30.0
    assert s.logcat_batch_lines == 100
    assert s.logcat_flush_s == 0.025
    assert s.max_frame_bytes == 16 * MIB


def test_scaled_scales_every_timing_and_no_limit() -> None:
    fast = DEFAULTS.scaled(0.01)
    for f in dataclasses.fields(Settings):
        before, after = getattr(DEFAULTS, f.name), getattr(fast, f.name)
        if f.name.endswith("_s"):
            assert after == pytest.approx(before * 0.01), f.name
        else:
            assert after == before, f.name
    assert set(DEFAULTS.timings()) == {
        f.name for f in dataclasses.fields(Settings) if f.name.endswith("_s")
    }


def test_scaled_keeps_off_as_off() -> None:
    off = dataclasses.replace(DEFAULTS, ping_interval_s=None).scaled(0.5)
    assert off.ping_interval_s is None
    assert off.ping_timeout_s == 5.0


@pytest.mark.parametrize(
    "change",
    [
        {"rpc_timeout_s": 0},
        {"finished_max": -1},
        {"backoff_factor": 0.5},
        {"max_frame_bytes": "big"},
        {"handler_concurrency": True},
        {"close_timeout_s": None},
    ],
)
def test_invalid_settings_are_refused(change: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        Settings(**change)  # type: ignore[arg-type]


def test_scale_factor_must_be_positive() -> None:
    with pytest.raises(ValueError):
        DEFAULTS.scaled(0)


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULTS.rpc_timeout_s = 1  # type: ignore[misc]


@given(st.integers(0, 2**32), st.booleans())
def test_backoff_bounds(seed: int, quick_first: bool) -> None:
    s = DEFAULTS
    gen = backoff(s, random.Random(seed).random, quick_first=quick_first)
    delays = [next(gen) for _ in range(40)]
    assert all(d >= 0 for d in delays)
    assert all(d <= s.backoff_cap_s for d in delays)
    if quick_first:
        assert delays[0] < s.backoff_first_max_s
        rest = delays[1:]
    else:
        rest = delays
    for n, d in enumerate(rest):
        assert d <= min(s.backoff_cap_s, s.backoff_base_s * s.backoff_factor**n)


def test_backoff_ceiling_grows_then_caps() -> None:
    s = DEFAULTS
    gen = backoff(s, lambda: 0.999999, quick_first=True)
    delays = [next(gen) for _ in range(12)]
    assert delays[0] == pytest.approx(s.backoff_first_max_s, rel=1e-4)
    assert delays[1] == pytest.approx(s.backoff_base_s, rel=1e-4)
    assert delays[2] == pytest.approx(s.backoff_base_s * s.backoff_factor, rel=1e-4)
    assert delays[-1] == pytest.approx(s.backoff_cap_s, rel=1e-4)
    assert delays == sorted(delays)


def test_backoff_is_jittered() -> None:
    gen = backoff(DEFAULTS, random.Random(1).random, quick_first=False)
    delays = [next(gen) for _ in range(30)]
    assert len(set(delays)) == len(delays)


def test_reconnect_budget_counts_from_first_failure_and_resets_on_welcome() -> None:
    budget = ReconnectBudget.from_settings(DEFAULTS.scaled(1 / 60))  # 30 s
    assert budget.budget_s == pytest.approx(30.0)
    assert not budget.exhausted(1000.0)
    assert budget.remaining(1000.0) == pytest.approx(30.0)
    budget.failed(100.0)
    budget.failed(120.0)  # later failures do not move the start
    assert budget.elapsed(125.0) == 25.0
    assert budget.remaining(125.0) == pytest.approx(5.0)
    assert not budget.exhausted(129.9)
    assert budget.exhausted(130.0)
    assert budget.remaining(500.0) == 0.0
    budget.reset()
    assert not budget.exhausted(500.0)
    budget.failed(500.0)
    assert budget.elapsed(499.0) == 0.0
