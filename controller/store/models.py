"""The controller's tables (SQLAlchemy 2 declarative, typed).

Every id is a random UUID4 hex string, so rows written by several controller replicas never
collide (docs/design.md §7), except the audit log's, which only ever grows and is ordered by it.
Every timestamp is timezone-aware UTC (:class:`UTCDateTime`), on SQLite as on PostgreSQL.

The schema itself is owned by the Alembic migrations in ``migrations/versions``; these
classes must match them (``tests/controller/store`` checks that they do).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

__all__ = [
    "AuditEntry",
    "Base",
    "Bridge",
    "Device",
    "Frame",
    "Grant",
    "Run",
    "RunStatus",
    "RunStep",
    "TestResult",
    "Token",
    "TokenKind",
    "UTCDateTime",
    "User",
    "WebSession",
    "new_id",
    "utcnow",
]


def new_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A datetime stored in UTC and always read back timezone-aware.

    SQLite keeps no zone, so a naive value read back is UTC by construction; a naive value
    handed in is refused rather than guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: pass a timezone-aware value")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class TokenKind(StrEnum):
    BRIDGE = "bridge"
    USER = "user"
    ADMIN = "admin"


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
    }


class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Set by an admin (``/v1/users/{name}/disable``): every token of the user is refused.
    disabled_at: Mapped[datetime | None] = mapped_column(default=None)
    # Quotas an admin sets (PUT /v1/users/{user}/limits); None: no limit.
    max_running: Mapped[int | None] = mapped_column(Integer, default=None)  # runs started at once
    max_queued: Mapped[int | None] = mapped_column(Integer, default=None)  # runs not started yet


class Bridge(Base):
    """A device host. Its identity is its tokens'; it belongs to the user who created them."""

    __tablename__ = "bridges"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime | None] = mapped_column(default=None)
    # Marked by an admin: it may build for every user's runs (else only its owner's, and
    # for its owner's devices).
    shared: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Token(Base):
    """An API or bridge token. Only the SHA-256 of the secret is ever stored."""

    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The user the token acts for (user and admin tokens) or whose bridge it is.
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    bridge_id: Mapped[str | None] = mapped_column(ForeignKey("bridges.id"), default=None)
    scopes: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Device(Base):
    """A device a bridge has reported at least once, with what it last said about it."""

    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("bridge_id", "serial"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    bridge_id: Mapped[str] = mapped_column(ForeignKey("bridges.id"))
    serial: Mapped[str] = mapped_column(String(255), index=True)
    last_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Set by an admin (PUT /v1/devices/{device}/labels): added to the labels, and put over
    # the pool, that the bridge's owner configured (controller.executor.placement).
    labels: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    pool: Mapped[str | None] = mapped_column(String(64), default=None)


class Grant(Base):
    """A device lent by its owner to a user, until a time (or until revoked)."""

    __tablename__ = "grants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id"), index=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    until: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"), default=None)
    device_id: Mapped[str | None] = mapped_column(ForeignKey("devices.id"), default=None)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.QUEUED.value, index=True)
    verdict: Mapped[str | None] = mapped_column(String(16), default=None)
    request: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class RunStep(Base):
    """One step of a run: an RPC sent (or refused), a compile round, a state change."""

    __tablename__ = "run_steps"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class Frame(Base):
    """An evidence frame (PNG) of an agent trace, a run with ``request.kind == "agent"``.

    Immutable once written. Kept for the newest traces only: ``controller.agent.traces``
    deletes the oldest traces' frames beyond its bounds. ``user_id`` is the trace's owner,
    copied so that serving a frame is one lookup. ``png`` is the last column so that the
    retention query, which reads ``size`` only, never touches the bytes.
    """

    __tablename__ = "frames"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"), default=None)
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    png: Mapped[bytes] = mapped_column(LargeBinary)


class TestResult(Base):
    """One instrumented test's outcome within a run."""

    __tablename__ = "test_results"
    __test__ = False  # not a pytest class, whatever its name says

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    class_name: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(32))
    stack: Mapped[str | None] = mapped_column(Text, default=None)


class WebSession(Base):
    """A dashboard sign-in (``controller.web.sessions``), shared by every replica.

    Keyed by the SHA-256 of the cookie's random id, never the id itself: like a token's, a
    stolen table yields no usable cookie. It acts for ``token_id``, whose row is re-read at
    every request (revocation ends it). ``expires_at`` is the sooner of the absolute and the
    idle end; expired rows are deleted at sign-in (its index).
    """

    __tablename__ = "web_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[str] = mapped_column(
        ForeignKey("tokens.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)


class AuditEntry(Base):
    """Who did what to which device, when, and how it ended. Append-only."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_device_at", "device", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    actor_token_id: Mapped[str | None] = mapped_column(String(32), default=None)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    device: Mapped[str | None] = mapped_column(String(255), default=None)
    outcome: Mapped[str] = mapped_column(String(32))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class LoanItem(Base):
    """Something a borrower left on a lent device: an app they installed (``kind`` "app",
    ``name`` its package, as the device reported it) or their loan's working folder (``kind``
    "folder"). Removed from the device — and the row deleted — once the borrower no longer
    holds a live grant of it (``controller.loans``)."""

    __tablename__ = "loan_items"
    __table_args__ = (
        UniqueConstraint("user_id", "bridge_id", "serial", "kind", "name", name="uq_loan_items"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    bridge_id: Mapped[str] = mapped_column(ForeignKey("bridges.id"), index=True)
    serial: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(1024))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class DeviceThresholds(Base):
    """The owner's health limits for one device (``controller.health``): above
    ``max_temperature_c`` or below ``min_battery`` percent, the controller stops serving it."""

    __tablename__ = "device_thresholds"

    bridge_id: Mapped[str] = mapped_column(ForeignKey("bridges.id"), primary_key=True)
    serial: Mapped[str] = mapped_column(String(255), primary_key=True)
    max_temperature_c: Mapped[float | None] = mapped_column(Float, default=None)
    min_battery: Mapped[int | None] = mapped_column(Integer, default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Reservation(Base):
    """A loan booked in advance (``controller.api.reservations``): ``user_id`` may use the
    device from ``starts_at`` until ``ends_at``. When it starts, a grant until ``ends_at`` is
    made (``grant_id``); reservations of one device never overlap."""

    __tablename__ = "reservations"
    __table_args__ = (Index("ix_reservations_device", "device_id", "starts_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id"))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"))  # the device's owner then
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_by: Mapped[str] = mapped_column(String(64))
    starts_at: Mapped[datetime] = mapped_column(index=True)
    ends_at: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    cancelled_at: Mapped[datetime | None] = mapped_column(default=None)
    grant_id: Mapped[str | None] = mapped_column(ForeignKey("grants.id"), default=None)
