"""Device management (apps, files, audit, health, accounts): the controller's fixtures, and
the management world (:mod:`tests.manage.support`)."""

from tests.controller.conftest import api, db_url, live_controller, pg_url, sqlite_url
from tests.manage.support import sim, world

__all__ = ["api", "db_url", "live_controller", "pg_url", "sim", "sqlite_url", "world"]
