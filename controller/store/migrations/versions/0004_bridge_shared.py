"""Bridges an admin marks shared: they may build for every user's runs (docs/security.md,
"Threat model"); every other build bridge builds only for its owner's runs and devices.

Revision ID: 0004_bridge_shared
Revises: 0003_web_sessions
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_bridge_shared"
down_revision = "0003_web_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("bridges") as batch:
        batch.add_column(
            sa.Column("shared", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("bridges") as batch:
        batch.drop_column("shared")
