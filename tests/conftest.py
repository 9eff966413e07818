"""Suite-wide configuration.

Services: tests that need PostgreSQL or Redis read ``DATABASE_URL`` / ``REDIS_URL``. Outside CI
they skip with a reason when unset; under ``CI=true`` they fail instead (``require_service``).
Time: every test-scaled timing comes from ``protocol.settings`` via ``TIME_SCALE`` (env
``DROIDWIRE_TEST_TIME_SCALE``, default 1.0): a slow machine stretches it.
"""

from __future__ import annotations

import os

import pytest

from tests.scale import TIME_SCALE as TIME_SCALE  # re-exported: tests import it from here

pytest_plugins = ["tests.adb_support"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_service(env_var: str) -> str:
    """Return the URL in ``env_var``; skip (outside CI) or fail (in CI) when it is unset."""
    url = os.environ.get(env_var)
    if url:
        return url
    if IN_CI:
        pytest.fail(f"{env_var} is not set, and CI must not skip service tests")
    pytest.skip(f"{env_var} not set: this test needs a real service")


def require_or_skip(condition: bool, reason: str) -> None:
    """Skip when ``condition`` is false — except in CI, where a missing prerequisite fails."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kotlinc_checker():  # type: ignore[no-untyped-def]
    """One warm compiler for the whole session (a cold JVM costs seconds; see tests/device_bridge/kotlinc).
    Needs ``make setup`` (the pinned compiler) and a JDK: skipped without them, failing in CI."""
    from device_bridge.kotlinc import KotlincChecker, SetupError, ensure_layout

    try:
        layout = ensure_layout(fetch=False)
    except SetupError as exc:
        require_or_skip(False, f"kotlinc is not set up: {exc}")
        raise  # unreachable: require_or_skip skipped or failed
    checker = KotlincChecker(layout)
    try:
        yield checker
    finally:
        checker.close()
