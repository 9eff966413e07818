"""Booking: loans reserved in advance, from–until, never overlapping on a device.

Revision ID: 0008_reservations
Revises: 0007_user_disabled
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_reservations"
down_revision = "0007_user_disabled"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("device_id", sa.String(32), sa.ForeignKey("devices.id"), nullable=False),
        sa.Column("owner_id", sa.String(32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("grant_id", sa.String(32), sa.ForeignKey("grants.id"), nullable=True),
    )
    op.create_index("ix_reservations_device", "reservations", ["device_id", "starts_at"])
    op.create_index("ix_reservations_user_id", "reservations", ["user_id"])
    op.create_index("ix_reservations_starts_at", "reservations", ["starts_at"])


def downgrade() -> None:
    op.drop_index("ix_reservations_starts_at", table_name="reservations")
    op.drop_index("ix_reservations_user_id", table_name="reservations")
    op.drop_index("ix_reservations_device", table_name="reservations")
    op.drop_table("reservations")
