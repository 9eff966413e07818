"""Alembic environment: always driven by ``controller.store.Store.migrate``.

There is no ``alembic.ini``: the store hands Alembic an open connection (already holding the
migration lock) through ``config.attributes["connection"]``, so migrations run inside the
store's own transaction.
"""

from __future__ import annotations

from alembic import context

from controller.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - a misuse, not a runtime path
    raise RuntimeError("run migrations through controller.store.Store.migrate()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place; batch mode copies the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
