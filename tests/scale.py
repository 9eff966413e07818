"""The suite's one time knob: ``TIME_SCALE`` (env ``DROIDWIRE_TEST_TIME_SCALE``, default 1.0).

Every test-scaled timing multiplies by it, so a slow machine stretches waits instead of failing.
``tests/conftest.py`` and ``tests/adb_support.py`` re-export it; it lives here so that neither
has to import the other.
"""

from __future__ import annotations

import os

TIME_SCALE = float(os.environ.get("DROIDWIRE_TEST_TIME_SCALE", "1.0"))
