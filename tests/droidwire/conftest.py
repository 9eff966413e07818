"""Fixtures for the tests of the ``droidwire`` command line (the composition root): the
executor's (real adb server, simulated device, in-process gateway), the controller's (databases,
a live controller on real uvicorn) and the simulated device's host keys, shared from the folders
that define them."""

from tests.controller.conftest import db_url, live_controller, pg_url, sqlite_url  # noqa: F401
from tests.controller.executor.conftest import adb, gateway, sim, state_dir, store  # noqa: F401
from tests.device_bridge.sim.conformance.conftest import host_key, other_host_key  # noqa: F401
