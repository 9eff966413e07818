"""Device labels and pool set by an admin (placement selectors ``label=`` and ``pool=``);
added to those the bridge's owner configures, which travel in the bridge's inventory.

Revision ID: 0009_device_labels
Revises: 0008_reservations
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_device_labels"
down_revision = "0008_reservations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("pool", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("pool")
        batch.drop_column("labels")
