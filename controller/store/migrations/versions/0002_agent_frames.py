"""Agent evidence frames: PNGs of agent traces, kept in the store (no longer in memory).

Revision ID: 0002_agent_frames
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_agent_frames"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "frames",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id"), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        # Last, so that reading the other columns (retention sums sizes) skips the bytes.
        sa.Column("png", sa.LargeBinary(), nullable=False),
        sa.UniqueConstraint("run_id", "name"),
    )
    op.create_index("ix_frames_created_at", "frames", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_frames_created_at", table_name="frames")
    op.drop_table("frames")
