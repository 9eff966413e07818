"""The executor's fixtures (real adb server, simulated device, in-process gateway), shared
with the CLI tests."""

from tests.executor.conftest import adb, gateway, sim, state_dir, store  # noqa: F401
