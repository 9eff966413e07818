"""The fault suite's test-scaled settings (one object for controller and bridge, like
production) and its one bounded wait."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conftest import TIME_SCALE
from tests.controller.test_hub_support import fast_settings

__all__ = ["PING_S", "SETTINGS", "WAIT_S", "wait_until"]

WAIT_S = 30.0 * TIME_SCALE
PING_S = 0.3 * TIME_SCALE
SETTINGS = fast_settings(
    ping_interval_s=PING_S,
    ping_timeout_s=PING_S,
    close_timeout_s=0.2 * TIME_SCALE,
    handshake_timeout_s=3.0 * TIME_SCALE,
    grace_period_s=20.0 * TIME_SCALE,
    liveness_interval_s=0.3 * TIME_SCALE,
    rpc_timeout_s=30.0 * TIME_SCALE,
    backoff_first_max_s=0.02 * TIME_SCALE,
    backoff_base_s=0.02 * TIME_SCALE,
    backoff_cap_s=0.2 * TIME_SCALE,
    logcat_flush_s=0.02,
)


async def wait_until(predicate: Any, what: str, limit_s: float = WAIT_S) -> None:
    """Bounded wait on state that has no event of its own (the hub's registry, a log)."""
    try:
        async with asyncio.timeout(limit_s):
            while not predicate():  # noqa: ASYNC110 - polling state owned by other components
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"{what}: not reached in {limit_s:g} s") from None
