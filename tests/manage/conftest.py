"""Device management (apps, files, audit, health, accounts): the controller's fixtures."""

from tests.controller.conftest import api, db_url, live_controller, pg_url, sqlite_url

__all__ = ["api", "db_url", "live_controller", "pg_url", "sqlite_url"]
