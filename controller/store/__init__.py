"""Controller state: SQLAlchemy 2 (async) over SQLite or PostgreSQL, migrated by Alembic.

Exception tree::

    UnsupportedDatabase (ValueError)   a database URL we cannot map to an async driver
    MigrationLockTimeout (TimeoutError) the schema lock was held too long by another replica
"""

from __future__ import annotations

from controller.store.models import (
    AuditEntry,
    Base,
    Bridge,
    Device,
    DeviceThresholds,
    Frame,
    Grant,
    LoanItem,
    Reservation,
    Run,
    RunStatus,
    RunStep,
    TestResult,
    Token,
    TokenKind,
    User,
    WebSession,
    new_id,
    utcnow,
)
from controller.store.retry import is_busy, retrying
from controller.store.seen import SeenRecorder, bridge_seen, devices_seen, known_devices
from controller.store.store import MigrationLockTimeout, Store, head_revision
from controller.store.url import UnsupportedDatabase, to_async_url

__all__ = [
    "AuditEntry",
    "Base",
    "Bridge",
    "Device",
    "DeviceThresholds",
    "Frame",
    "Grant",
    "LoanItem",
    "MigrationLockTimeout",
    "Reservation",
    "Run",
    "RunStatus",
    "RunStep",
    "SeenRecorder",
    "Store",
    "TestResult",
    "Token",
    "TokenKind",
    "UnsupportedDatabase",
    "User",
    "WebSession",
    "bridge_seen",
    "devices_seen",
    "head_revision",
    "is_busy",
    "known_devices",
    "new_id",
    "retrying",
    "to_async_url",
    "utcnow",
]
