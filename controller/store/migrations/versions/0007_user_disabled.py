"""Accounts: an admin disables and re-enables a user; while disabled, every token
of the user is refused as a revoked one is.

Revision ID: 0007_user_disabled
Revises: 0006_device_thresholds
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_user_disabled"
down_revision = "0006_device_thresholds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("disabled_at")
