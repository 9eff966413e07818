"""The tenancy suite runs on the real adb server and simulated devices (tests/adb_support)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.adb

# The in-process app with SQLite, for the REST-only scenarios.
from tests.controller.conftest import api, sqlite_url  # noqa: E402, F401
