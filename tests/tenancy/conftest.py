"""The tenancy suite runs on the real adb server and simulated devices (tests/adb_support)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.adb
