"""Device health: the owner's thresholds per device — above a temperature or below
a battery level the controller stops serving it.

Revision ID: 0006_device_thresholds
Revises: 0005_loan_items
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_device_thresholds"
down_revision = "0005_loan_items"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "device_thresholds",
        sa.Column("bridge_id", sa.String(32), sa.ForeignKey("bridges.id"), primary_key=True),
        sa.Column("serial", sa.String(255), primary_key=True),
        sa.Column("max_temperature_c", sa.Float(), nullable=True),
        sa.Column("min_battery", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("device_thresholds")
