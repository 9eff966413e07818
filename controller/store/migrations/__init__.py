"""Alembic migrations of the controller store, run programmatically by ``Store.migrate()``."""
