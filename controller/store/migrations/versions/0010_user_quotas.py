"""Per-user quotas an admin sets: runs started at once (``max_running``) and runs waiting to
start (``max_queued``); NULL is no limit.

Revision ID: 0010_user_quotas
Revises: 0009_device_labels
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_user_quotas"
down_revision = "0009_device_labels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("max_running", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_queued", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("max_queued")
        batch.drop_column("max_running")
